"""A streamed transfer (langswap.checkpoint) writes the model a loaded one writes, reading only the token matrices."""

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from conftest import TOKENIZER_BUILDERS, cipher_line, english_lines, tiny_model

FAMILIES = [("gpt2", "byte_level"), ("llama", "sentencepiece"), ("bert", "wordpiece"), ("roberta", "roberta")]


def stored_tensors(folder) -> dict[str, torch.Tensor]:
    found = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            found.update({name: handle.get_tensor(name) for name in handle.keys()})
    return found


def loaded_tensors(folder, kind) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    from langswap.models import lm_load_arguments

    loader = AutoModelForMaskedLM if kind in ("bert", "roberta") else AutoModelForCausalLM
    model = loader.from_pretrained(folder, **lm_load_arguments("auto"))
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


def config_json(folder) -> dict:
    config = json.loads((folder / "config.json").read_text())
    config.pop("transformers_version", None)
    return config


def source_pair(tmp_path, kind, family, dtype=torch.float32, shard_size=None):
    tokenizer = TOKENIZER_BUILDERS[family](english_lines(300), vocab_size=300)
    target_tokenizer = TOKENIZER_BUILDERS[family]([cipher_line(line) for line in english_lines(300)], vocab_size=280)
    model = tiny_model(kind, len(tokenizer)).to(dtype)
    source = tmp_path / "source"
    model.save_pretrained(source, **({"max_shard_size": shard_size} if shard_size else {}))
    tokenizer.save_pretrained(source)
    target = tmp_path / "target-tokenizer"
    target_tokenizer.save_pretrained(target)
    return source, target


def transfer_both(tmp_path, source, target, **extra):
    from langswap.transfer import transfer, transfer_config

    reports = {}
    for stream in ("on", "off"):
        config = transfer_config({"source_model": str(source), "target_tokenizer": str(target),
                                  "output": str(tmp_path / stream), "method": {"name": "overlap"}, "stream": stream,
                                  **extra})
        reports[stream] = transfer(config)
    return reports


@pytest.mark.parametrize("kind,family", FAMILIES)
def test_a_streamed_transfer_writes_the_model_a_loaded_one_writes(kind, family, tmp_path):
    source, target = source_pair(tmp_path, kind, family)
    transfer_both(tmp_path, source, target)
    streamed, loaded = loaded_tensors(tmp_path / "on", kind), loaded_tensors(tmp_path / "off", kind)
    assert streamed.keys() == loaded.keys()
    for name in loaded:
        assert torch.equal(streamed[name], loaded[name]), name
    assert config_json(tmp_path / "on") == config_json(tmp_path / "off")
    record = json.loads((tmp_path / "on" / "langswap.json").read_text())
    assert record["streamed"]["files"] == 1 and record["streamed"]["bytes_copied"] > 0
    assert json.loads((tmp_path / "off" / "langswap.json").read_text())["streamed"] is None


@pytest.mark.parametrize("kind,family", [("gpt2", "byte_level"), ("llama", "sentencepiece")])
def test_a_sharded_bfloat16_checkpoint_streams_shard_by_shard_with_its_body_bitwise(kind, family, tmp_path):
    source, target = source_pair(tmp_path, kind, family, dtype=torch.bfloat16, shard_size="20KB")
    shards = sorted(path.name for path in source.glob("*.safetensors"))
    assert len(shards) > 2
    transfer_both(tmp_path, source, target)
    out = tmp_path / "on"
    assert sorted(path.name for path in out.glob("*.safetensors")) == shards
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    before, after = stored_tensors(source), stored_tensors(out)
    assert before.keys() == after.keys()
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in after.values())
    changed = {name for name in before if before[name].shape != after[name].shape
               or not torch.equal(before[name], after[name])}
    token_matrices = {"transformer.wte.weight"} if kind == "gpt2" else {"model.embed_tokens.weight", "lm_head.weight"}
    assert changed == token_matrices
    from transformers import AutoTokenizer

    rows = len(AutoTokenizer.from_pretrained(target))
    for name in token_matrices:
        assert after[name].dtype == torch.bfloat16 and after[name].shape == (rows, before[name].shape[1])
    streamed, loaded = loaded_tensors(out, kind), loaded_tensors(tmp_path / "off", kind)
    for name in loaded:
        assert torch.equal(streamed[name], loaded[name]), name


def test_a_tied_checkpoint_that_also_stores_its_head_gets_both_names_rewritten(tmp_path):
    from safetensors.torch import load_file, save_file

    source, target = source_pair(tmp_path, "gpt2", "byte_level")
    tensors = load_file(str(source / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["transformer.wte.weight"].clone()
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})
    transfer_both(tmp_path, source, target)
    after = stored_tensors(tmp_path / "on")
    assert torch.equal(after["lm_head.weight"], after["transformer.wte.weight"])
    assert after["lm_head.weight"].shape[0] < tensors["lm_head.weight"].shape[0]
    streamed, loaded = loaded_tensors(tmp_path / "on", "gpt2"), loaded_tensors(tmp_path / "off", "gpt2")
    for name in loaded:
        assert torch.equal(streamed[name], loaded[name]), name


def test_auto_loads_the_model_when_the_transfer_runs_it_and_on_says_what_runs_it(tmp_path):
    from langswap.errors import ConfigError
    from langswap.transfer import transfer, transfer_config

    source, target = source_pair(tmp_path, "gpt2", "byte_level")
    text = tmp_path / "xx.txt"
    text.write_text("\n".join(cipher_line(line) for line in english_lines(300, seed=3)) + "\n")
    settings = {"source_model": str(source), "target_tokenizer": str(target), "method": {"name": "overlap"},
                "calibration": {"text": str(text)}}
    transfer(transfer_config({**settings, "output": str(tmp_path / "auto")}))
    assert json.loads((tmp_path / "auto" / "langswap.json").read_text())["streamed"] is None
    with pytest.raises(ConfigError, match=r"frequency calibration \(calibration.strength=0"):
        transfer(transfer_config({**settings, "output": str(tmp_path / "on"), "stream": "on"}))
    transfer(transfer_config({**settings, "output": str(tmp_path / "on"), "stream": "on",
                              "calibration": {"text": str(text), "strength": 0}}))
    assert json.loads((tmp_path / "on" / "langswap.json").read_text())["streamed"]["files"] == 1


def test_a_pickle_checkpoint_is_never_unpickled_to_be_streamed(tmp_path):
    from langswap.errors import ConfigError
    from langswap.transfer import transfer, transfer_config

    tokenizer = TOKENIZER_BUILDERS["byte_level"](english_lines(300), vocab_size=300)
    model = tiny_model("gpt2", len(tokenizer))
    source = tmp_path / "source"
    source.mkdir()
    model.config.save_pretrained(source)
    torch.save(model.state_dict(), source / "pytorch_model.bin")
    tokenizer.save_pretrained(source)
    assert (source / "pytorch_model.bin").is_file()
    with pytest.raises(ConfigError, match=r"pickle format \(pytorch_model.bin\).*M.from_pretrained\("):
        transfer(transfer_config({"source_model": str(source), "target_tokenizer": str(source),
                                  "output": str(tmp_path / "out"), "method": {"name": "overlap"}, "stream": "on"}))
    assert not (tmp_path / "out").exists()


def test_a_non_finite_body_weight_is_found_while_copying_and_nothing_is_written(tmp_path):
    from safetensors.torch import load_file, save_file

    from langswap.errors import NumericalError
    from langswap.transfer import transfer, transfer_config

    source, target = source_pair(tmp_path, "llama", "sentencepiece")
    tensors = load_file(str(source / "model.safetensors"))
    tensors["model.layers.1.mlp.up_proj.weight"][3, :2] = float("nan")
    save_file(tensors, str(source / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(NumericalError, match=r"model.layers.1.mlp.up_proj.weight \(2 values\)"):
        transfer(transfer_config({"source_model": str(source), "target_tokenizer": str(target),
                                  "output": str(tmp_path / "out"), "method": {"name": "overlap"}, "stream": "on"}))
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.partial-*"))


def test_on_and_off_read_as_yaml_booleans_still_choose_on_and_off():
    """`--set stream=on` and a YAML `fused_optimizer: off` arrive as true and false."""
    from langswap.config import apply_overrides, from_dict
    from langswap.training.options import TrainConfig
    from langswap.transfer import TransferConfig

    data = apply_overrides({"source_model": "m", "target_tokenizer": "t", "output": "o"}, ["stream=on"])
    assert data["stream"] is True
    assert from_dict(TransferConfig, data).stream == "on"
    assert from_dict(TransferConfig, {**data, "stream": False}).stream == "off"
    train = from_dict(TrainConfig, apply_overrides({"model": "m", "train_text": "t", "output": "o"},
                                                   ["fused_optimizer=off"]))
    assert train.fused_optimizer == "off"


def test_a_bare_body_is_refused_when_streaming_as_when_loading(english, tmp_path):
    import transformers

    from conftest import wordpiece_tokenizer
    from langswap.errors import ResourceFormatError
    from langswap.transfer import transfer, transfer_config

    tokenizer = wordpiece_tokenizer(english)
    transformers.BertModel(tiny_model("bert", len(tokenizer)).config).save_pretrained(tmp_path / "bare")
    tokenizer.save_pretrained(tmp_path / "bare")
    for stream in ("on", "auto"):
        with pytest.raises(ResourceFormatError, match=r"\(BertModel\) has no weights for cls.predictions.*would be "
                                                      r"random.*language-model head"):
            bare = str(tmp_path / "bare")
            transfer(transfer_config({"source_model": bare, "target_tokenizer": bare, "output": str(tmp_path / "out"),
                                      "method": "overlap", "stream": stream}))
    assert not (tmp_path / "out").exists()


def test_a_bfloat16_table_mixes_to_the_sums_of_its_float32_copy_bit_for_bit():
    from langswap.kernels import mix_csr_rows

    generator = torch.Generator().manual_seed(0)
    table = torch.randn(300, 24, generator=generator).to(torch.bfloat16)
    lengths = torch.randint(0, 9, (200,), generator=generator)
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    indices = torch.randint(0, 300, (int(indptr[-1]),), generator=generator)
    weights = torch.rand(int(indptr[-1]), generator=generator)
    expected = mix_csr_rows(table.to(torch.float32), indptr, indices, weights, block_bytes=24 * 4 * 50)
    assert torch.equal(mix_csr_rows(table, indptr, indices, weights, block_bytes=24 * 4 * 50), expected)
    assert torch.equal(mix_csr_rows(table, indptr, indices, weights, dtype=torch.bfloat16),
                       expected.to(torch.bfloat16))


def test_random_rows_asked_for_alone_are_the_rows_drawn_for_all_and_stats_need_no_float32_copy():
    from langswap.methods.mapping import column_stats, random_rows

    table = torch.randn(5000, 6, generator=torch.Generator().manual_seed(1)) * 3 + 1
    every = random_rows(table, 40000, seed=4, stream=1)
    some = np.array([0, 17, 16383, 16384, 39999])
    assert torch.equal(random_rows(table, 40000, seed=4, stream=1, rows=some), every[torch.from_numpy(some)])
    mean, std = column_stats(table.to(torch.float64))
    assert torch.allclose(mean, table.mean(dim=0), atol=1e-5) and torch.allclose(std, table.std(dim=0), atol=1e-5)
    bf16 = table.to(torch.bfloat16)
    mean, std = column_stats(bf16)
    assert torch.allclose(mean, bf16.float().mean(dim=0), atol=1e-5)
    assert torch.allclose(std, bf16.float().std(dim=0), atol=1e-4)


def test_matrices_kept_in_bfloat16_mix_to_the_rows_of_their_float32_copies():
    from langswap.methods.base import TransferInputs, make_config, run_method
    from langswap.methods.mapping import Kind
    from langswap.surgery import read_source_matrices
    from langswap.tokens import Vocabulary

    tokenizer = TOKENIZER_BUILDERS["sentencepiece"](english_lines(300), vocab_size=300)
    target_tokenizer = TOKENIZER_BUILDERS["sentencepiece"]([cipher_line(line) for line in english_lines(300)],
                                                           vocab_size=280)
    model = tiny_model("llama", len(tokenizer)).to(torch.bfloat16)
    source, target = Vocabulary(tokenizer), Vocabulary(target_tokenizer)
    results = {}
    for stored in (False, True):
        matrices = read_source_matrices(model, len(source), stored_dtype=stored)
        assert matrices.embeddings.dtype == (torch.bfloat16 if stored else torch.float32)
        results[stored] = run_method(make_config("overlap"), TransferInputs(source, target, matrices.embeddings),
                                     matrices.as_dict(), dtype=torch.bfloat16)
    mixed = torch.from_numpy(np.flatnonzero(results[True].mapping.kinds != Kind.MEAN))
    assert len(mixed) > 200
    for which in ("embeddings", "output_embeddings"):
        kept, converted = getattr(results[True], which), getattr(results[False], which)
        assert kept.dtype == converted.dtype == torch.bfloat16
        assert torch.equal(kept[mixed], converted[mixed])
        assert torch.allclose(kept.float(), converted.float(), atol=1e-2)
