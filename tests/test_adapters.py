"""The `adapters` recipe: embeddings plus LoRA adapters on a frozen body, merged into an ordinary model folder; and
phases that freeze the body keep it in the model's own precision under bf16."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import byte_level_tokenizer, english_lines, save_model, tiny_model
from langswap.errors import ConfigError
from langswap.training.run import train
import test_training
from test_training import _config, _state

pytest.importorskip("peft")

models, texts = test_training.models, test_training.texts


def _adapted(kind: str, rank: int = 4):
    """A tiny model with adapters injected and their B matrices random (peft starts them at zero)."""
    from langswap.training.adapters import inject

    lines = english_lines(100, seed=1)
    model = tiny_model(kind, len(byte_level_tokenizer(lines)))
    model.eval()
    merges = inject(model, rank, 8.0, 0.0, "all-linear")
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".lora_B." in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return model, merges


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_merged_weights_give_the_adapted_models_outputs(kind):
    """Known answer: the plain model with `merge_state_dict`'s weights computes what the adapted model computes
    (GPT-2's Conv1D weights are stored input-major, Llama's and BERT's linear layers output-major)."""
    from langswap.training.adapters import merge_state_dict

    adapted, merges = _adapted(kind)
    assert merges and all(merge.scale == 2.0 for merge in merges.values())
    assert all(merge.transposed == (kind == "gpt2") for merge in merges.values())
    plain = tiny_model(kind, adapted.config.vocab_size, seed=9)
    merged = merge_state_dict(adapted.state_dict(), merges)
    assert not [key for key in merged if "lora_" in key or "base_layer" in key]
    assert set(merged) == set(plain.state_dict())
    plain.load_state_dict(merged)
    plain.eval()
    ids = torch.randint(4, adapted.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = adapted(input_ids=ids).logits, plain(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    # and the adapters did change the outputs, so the test sees the delta
    unadapted = tiny_model(kind, adapted.config.vocab_size)
    unadapted.eval()
    with torch.no_grad():
        assert not torch.allclose(unadapted(input_ids=ids).logits, expected, atol=1e-3)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_adapters_train_embeddings_and_a_low_rank_change_of_each_linear_layer(kind, models, texts, tmp_path):
    """The saved model/ is an ordinary folder (the source's tensor names, no adapter weights, loads with
    from_pretrained); the embeddings moved; each adapted weight moved by a matrix of rank at most `rank`; norms,
    biases and position embeddings are bitwise the source's."""
    from langswap.models import load_model

    rank = 2
    report = train(_config(models[kind], texts, tmp_path / "run", preset="adapters", steps=6, eval_text=None,
                           recipe={"rank": rank, "embedding_fraction": 0.5}, learning_rate=1e-2))
    assert [(p.name, p.trainable) for p in report.phases] == [("1-embeddings", "embeddings"),
                                                                   ("2-adapters", "adapters")]
    before, after = _state(models[kind]), _state(report.model)
    assert before.keys() == after.keys()
    embedding = "transformer.wte.weight" if kind == "gpt2" else "model.embed_tokens.weight"
    assert not torch.equal(before[embedding], after[embedding])
    changed_low_rank = 0
    for name, tensor in before.items():
        if name == embedding or name == "lm_head.weight":
            continue
        delta = (after[name].double() - tensor.double())
        if tensor.dim() == 2:
            assert torch.linalg.matrix_rank(delta, atol=1e-6).item() <= rank, name
            changed_low_rank += bool(delta.abs().max() > 0)
        else:
            assert torch.equal(after[name], tensor), f"{name} is not a linear weight but changed"
    assert changed_low_rank >= 4
    load_model(report.model, report.objective)  # loads as the plain class


def test_an_adapters_run_resumes_to_the_same_merged_weights(models, texts, tmp_path):
    """Killed inside the adapters phase, after its checkpoint: the checkpoint holds the adapters apart, the resumed
    run injects them again and ends bitwise where an uninterrupted run ends."""
    from test_recipes import _resumes_bitwise

    _resumes_bitwise(models["llama"], texts, tmp_path, (5,), preset="adapters", steps=8, save_steps=2,
                     logging_steps=2, eval_text=None, recipe={"rank": 2, "embedding_fraction": 0.25})
    checkpoint = next((tmp_path / "interrupted" / "phase-2-adapters").glob("checkpoint-*"), None)
    assert checkpoint is None  # removed once the phase is done: final/ replaces it


def _bf16_model(root: Path, kind: str) -> Path:
    lines = english_lines(300, seed=5)
    tokenizer = byte_level_tokenizer(lines)
    return save_model(tiny_model(kind, len(tokenizer)).to(torch.bfloat16), tokenizer, root / f"{kind}-bf16")


def test_a_frozen_body_stays_in_bf16_under_bf16_and_the_saved_folder_is_bf16(texts, tmp_path):
    """Embeddings-only under precision bf16 (CPU autocast): the body's matrices stay in bf16 with no float32 copy
    (the embeddings and the body's small vectors are float32 while training); the saved model is bf16 throughout,
    with the body bitwise the source's."""
    from transformers import TrainerCallback

    model = _bf16_model(tmp_path, "llama")
    seen = {}

    class Dtypes(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            seen.update({name: parameter.dtype for name, parameter in model.named_parameters()})

    report = train(_config(model, texts, tmp_path / "run", preset="embeddings", precision="bf16", eval_text=None),
                   callbacks=[Dtypes()])
    assert seen["model.embed_tokens.weight"] == torch.float32 and seen["lm_head.weight"] == torch.float32
    assert seen["model.layers.0.self_attn.q_proj.weight"] == torch.bfloat16
    assert seen["model.norm.weight"] == torch.float32  # a vector: float32, as the norm's input
    before, after = _state(model), _state(report.model)
    assert all(tensor.dtype == torch.bfloat16 for tensor in after.values())
    assert not torch.equal(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])
    assert all(torch.equal(before[name], after[name]) for name in before
               if name not in ("model.embed_tokens.weight", "lm_head.weight"))


def test_under_bf16_the_adapters_phase_keeps_the_body_in_bf16_and_the_folders_say_bf16(texts, tmp_path):
    """Both phases (embeddings, then adapters) train with the body's matrices in bf16; phase one's final/ and the
    model/ folder are bf16 and their config.json says so, so from_pretrained (dtype auto) loads them in bf16."""
    from transformers import TrainerCallback

    from langswap.models import load_model

    model = _bf16_model(tmp_path, "llama")
    seen: list[tuple] = []

    class Dtypes(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            named = dict(model.named_parameters())
            body = next(p for n, p in named.items() if n.startswith("model.layers.0.self_attn.q_proj.")
                        and "lora_" not in n)
            adapters = {p.dtype for n, p in named.items() if "lora_" in n}
            seen.append((body.dtype, adapters))

    report = train(_config(model, texts, tmp_path / "run", preset="adapters", precision="bf16", eval_text=None,
                           steps=4, recipe={"embedding_fraction": 0.5, "rank": 2}, keep_phase_models=True),
                   callbacks=[Dtypes()])
    assert seen == [(torch.bfloat16, set())] * 2 + [(torch.bfloat16, {torch.float32})] * 2
    for folder in (tmp_path / "run" / "phase-1-embeddings" / "final", report.model):
        config = json.loads((folder / "config.json").read_text())
        assert config.get("dtype", config.get("torch_dtype")) == "bfloat16"
        assert all(tensor.dtype == torch.bfloat16 for tensor in _state(folder).values())
        assert load_model(folder, "causal").model.layers[0].self_attn.q_proj.weight.dtype == torch.bfloat16


def test_a_tied_bf16_model_keeps_one_matrix_and_a_full_phase_still_trains_in_float32(texts, tmp_path):
    """GPT-2 ties its output to its input matrix: cast to bf16 on save, both names still hold one matrix. A phase
    that trains the body (transinner's second) has float32 master weights as before."""
    from transformers import TrainerCallback

    from langswap.models import load_model

    model = _bf16_model(tmp_path, "gpt2")
    seen: list[set] = []  # the parameter dtypes at each update, both phases in order

    class Dtypes(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            seen.append({p.dtype for p in model.parameters()})

    report = train(_config(model, texts, tmp_path / "run", preset="transinner", precision="bf16", eval_text=None,
                           recipe={"embedding_fraction": 0.5}, keep_phase_models=True), callbacks=[Dtypes()])
    assert seen == [{torch.float32, torch.bfloat16}] * 3 + [{torch.float32}] * 3
    phase_one = _state(tmp_path / "run" / "phase-1-embeddings" / "final")
    assert all(tensor.dtype == torch.bfloat16 for tensor in phase_one.values())
    loaded = load_model(tmp_path / "run" / "phase-1-embeddings" / "final", "causal")
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
    assert json.loads((report.model / "config.json").read_text()).get("tie_word_embeddings", True)


@pytest.mark.parametrize("recipe, message", [
    ({"rank": 0}, "recipe.rank is 0"),
    ({"alpha": 0}, "recipe.alpha is 0"),
    ({"dropout": 1.0}, "recipe.dropout is 1.0"),
    ({"adapter_modules": " , "}, "adapter_modules is empty"),
    ({"embedding_fraction": 1.0}, "leaves no steps"),
])
def test_bad_adapter_options_are_refused_before_anything_is_read(recipe, message, models, texts, tmp_path):
    config = _config(models["llama"], texts, tmp_path / "run", preset="adapters", recipe=recipe)
    with pytest.raises(ConfigError, match=message):
        config.validate()
        train(config)
    assert not (tmp_path / "run").exists()


def test_adapter_modules_that_match_nothing_the_output_layer_or_an_embedding_are_refused(models, texts, tmp_path):
    for modules, message in (("no_such_layer", "matches no module"), ("lm_head", "adapts the output layer"),
                             ("embed_tokens,q_proj", "adapts model.embed_tokens, a Embedding")):
        config = _config(models["llama"], texts, tmp_path / modules, preset="adapters", eval_text=None,
                         recipe={"adapter_modules": modules, "embedding_fraction": 0})
        with pytest.raises(ConfigError, match=message):
            train(config)


def test_without_peft_the_recipe_names_the_install(models, texts, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install 'peft"):
        _config(models["llama"], texts, tmp_path / "run", preset="adapters").validate()


def test_the_adapters_start_from_the_seed_not_from_what_the_process_drew_before():
    from langswap.training.adapters import inject

    starts = []
    for draws in (0, 5):
        torch.manual_seed(draws)
        model = tiny_model("llama", 50)
        state = torch.get_rng_state()
        inject(model, 2, 4.0, 0.0, "all-linear", seed=7)
        assert torch.equal(torch.get_rng_state(), state)  # the global generator is left where it was
        starts.append({name: p.detach().clone() for name, p in model.named_parameters() if ".lora_A." in name})
    assert starts[0].keys() == starts[1].keys() and all(torch.equal(starts[0][k], starts[1][k]) for k in starts[0])


EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "accelerate"


@pytest.mark.parametrize("name, engine", [("fsdp.yaml", "FSDP"), ("fsdp2.yaml", "FSDP"),
                                          ("deepspeed-zero3.yaml", "DEEPSPEED")])
def test_the_example_accelerate_configs_are_what_accelerate_launch_reads(name, engine):
    """The configs load with the loader `accelerate launch --config_file` uses (unknown keys are refused there), and
    set what langswap's model folders need: FSDP's full state dict, ZeRO-3's gathered 16-bit weights. (Neither
    engine runs on a CPU through accelerate: its FSDP refuses a machine without GPUs.)"""
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(EXAMPLES / name))
    assert str(config.distributed_type).endswith(engine) and config.mixed_precision == "bf16"
    if engine == "FSDP":
        assert config.fsdp_config["fsdp_state_dict_type"] == "FULL_STATE_DICT"
        if config.fsdp_config.get("fsdp_version") == 2:  # per-parameter sharding: frozen and trained may share a unit
            assert "fsdp_use_orig_params" not in config.fsdp_config
        else:
            assert config.fsdp_config["fsdp_use_orig_params"] is True
    else:
        assert config.deepspeed_config["zero_stage"] == 3 and config.deepspeed_config["zero3_save_16bit_model"]


def test_under_a_sharding_engine_a_frozen_body_is_left_to_the_engine(monkeypatch):
    from langswap.training.phases import sharding_engine

    assert sharding_engine() is None
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert sharding_engine() == "fsdp"
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert sharding_engine() == "deepspeed"
