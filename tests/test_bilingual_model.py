"""RAMEN's bilingual training: one body read by two languages, two model folders, Lookahead."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import (TOKENIZER_BUILDERS, byte_level_tokenizer, cipher_line, english_lines, save_model,
                      tiny_model, uniform_lm)
from langswap.errors import ConfigError
from langswap.training.lookahead import Lookahead
from langswap.training.run import TrainConfig, train


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> dict[str, Path]:
    """An English Llama-shaped model (untied head), a ciphered-English model of the same body (the transfer's
    output), and a text in each language."""
    root = tmp_path_factory.mktemp("bilingual")
    english = english_lines(300, seed=5)
    ciphered = [cipher_line(line) for line in english_lines(300, seed=6)]
    source = save_model(tiny_model("llama", 300), byte_level_tokenizer(english, 300), root / "source")
    target_tokenizer = byte_level_tokenizer(ciphered, 280)
    target = tiny_model("llama", 300)  # the same seed: the source's body, as a transfer keeps it
    target.resize_token_embeddings(len(target_tokenizer))
    save_model(target, target_tokenizer, root / "target")
    (root / "en.txt").write_text("\n".join(english) + "\n", encoding="utf-8")
    (root / "xx.txt").write_text("\n".join(ciphered) + "\n", encoding="utf-8")
    return {"source": source, "target": root / "target", "en": root / "en.txt", "xx": root / "xx.txt",
            "root": root}


def _config(pair, output: Path, **recipe) -> TrainConfig:
    return TrainConfig(model=str(pair["target"]), train_text=str(pair["xx"]), output=str(output), preset="ramen",
                       steps=6, batch_size=4, sequence_length=32, save_steps=3, logging_steps=1,
                       recipe={"source_model": str(pair["source"]), "source_text": str(pair["en"]),
                               "warmup_updates": 2, **recipe})


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_a_bilingual_run_writes_two_models_that_share_the_trained_body(pair, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = train(_config(pair, tmp_path / "run"))
    target_folder, source_folder = tmp_path / "run" / "model", tmp_path / "run" / "source-model"
    target, source = _weights(target_folder), _weights(source_folder)
    assert not any(key.startswith("langswap_source") for key in target)
    tables = {"model.embed_tokens.weight", "lm_head.weight"}
    body = sorted(set(target) - tables)
    assert body == sorted(set(source) - tables) and len(body) > 10
    assert all(torch.equal(target[name], source[name]) for name in body)
    # the body trained, and so did each language's own tables
    before_target, before_source = _weights(pair["target"]), _weights(pair["source"])
    assert not torch.equal(target["model.layers.0.mlp.up_proj.weight"],
                           before_target["model.layers.0.mlp.up_proj.weight"])
    for name in tables:
        assert target[name].shape[0] == 280 and source[name].shape[0] == 300
        assert not torch.equal(source[name], before_source[name]) and not torch.equal(target[name],
                                                                                      before_target[name])
    # both are ordinary folders, each with its own tokenizer
    for folder, size in ((target_folder, 280), (source_folder, 300)):
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert model.get_input_embeddings().weight.shape[0] == size == len(AutoTokenizer.from_pretrained(folder))
    assert [phase.name for phase in report.phases] == ["1-bilingual"]


def test_the_paper_schedule_warms_up_from_its_start_rate_then_decays_as_an_inverse_square_root():
    from langswap.training.recipes.ramen import Ramen

    config = TrainConfig(model="m", train_text="t", output="o", preset="ramen", steps=20000,
                         recipe={"source_model": "s", "source_text": "x"})
    phase = Ramen(config).phases("causal")[0]
    assert (phase.learning_rate, phase.warmup_steps, phase.trainable) == (1e-4, 4000, "full")
    assert phase.learning_rate_at(0) == pytest.approx(1e-7 + (1e-4 - 1e-7) / 4000)
    assert phase.learning_rate_at(3999) == pytest.approx(1e-4)
    assert phase.learning_rate_at(15999) == pytest.approx(1e-4 * 0.5)  # sqrt(4000 / 16000)
    short = Ramen(TrainConfig(model="m", train_text="t", output="o", preset="ramen", steps=1000,
                              recipe={"source_model": "s", "source_text": "x"})).phases("causal")[0]
    assert short.warmup_steps < 1000  # a short run still reaches its peak
    assert Ramen(config).phases("masked") == Ramen(config).phases("causal")  # one recipe for both objectives


def test_lookahead_moves_the_slow_weights_halfway_every_k_updates_and_resumes_from_its_state():
    weight = torch.nn.Parameter(torch.tensor([1.0]))
    inner = torch.optim.SGD([weight], lr=0.1)
    optimizer = Lookahead(inner, k=2, alpha=0.5)
    for _ in range(2):  # gradient 1 each: fast 1 -> 0.9 -> 0.8, then slow 1 + 0.5 (0.8 - 1) = 0.9 and fast = slow
        optimizer.zero_grad()
        weight.sum().backward()
        optimizer.step()
    assert weight.item() == pytest.approx(0.9) and optimizer.slow[0][0].item() == pytest.approx(0.9)
    optimizer.zero_grad()
    weight.sum().backward()
    optimizer.step()  # 0.8, no sync
    state = optimizer.state_dict()
    other_weight = torch.nn.Parameter(weight.detach().clone())
    other = Lookahead(torch.optim.SGD([other_weight], lr=0.1), k=2, alpha=0.5)
    other.load_state_dict(state)
    for parameter, opt in ((weight, optimizer), (other_weight, other)):
        opt.zero_grad()
        parameter.sum().backward()
        opt.step()  # fast 0.7, slow 0.9 + 0.5 (0.7 - 0.9) = 0.8
    assert weight.item() == pytest.approx(0.8) and other_weight.item() == weight.item()


def test_missing_source_options_are_named(pair, tmp_path):
    with pytest.raises(ConfigError, match="recipe.source_model"):
        train(TrainConfig(model=str(pair["target"]), train_text=str(pair["xx"]), output=str(tmp_path / "x"),
                          preset="ramen", steps=2, recipe={"source_text": str(pair["en"])}))


def test_source_text_the_source_model_reads_no_better_than_the_target_text_is_warned_about(pair, caplog):
    from langswap.training.bilingual_model import check_source_language

    # a random tiny model reads both alike: the check cannot tell the source language, and says so
    losses = check_source_language(str(pair["source"]), str(pair["xx"]), str(pair["en"]))
    assert "no better than the target text" in caplog.text and set(losses) == {"source text", "target text"}
    caplog.clear()
    # a model that knows its language: the English text is far more predictable to it than the ciphered one
    trained = train(TrainConfig(model=str(pair["source"]), train_text=str(pair["en"]), output=str(pair["root"] / "en"),
                                preset="full", steps=30, batch_size=8, sequence_length=32, learning_rate=3e-3,
                                logging_steps=10))
    losses = check_source_language(str(trained.model), str(pair["en"]), str(pair["xx"]))
    assert losses["source text"] < losses["target text"] - 0.35 and "no better" not in caplog.text


MASKED = {"bert": "wordpiece", "roberta": "roberta"}


@pytest.mark.parametrize("kind", sorted(MASKED))
def test_a_masked_lm_trains_bilingually_with_its_head_transform_shared(kind, tmp_path):
    """BERT and RoBERTa: the prediction head's transform belongs to the shared body, the output layer's bias to each
    language; the source half is masked with the source tokenizer; both folders load as masked LMs."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    english = english_lines(300, seed=5)
    ciphered = [cipher_line(line) for line in english_lines(300, seed=6)]
    build = TOKENIZER_BUILDERS[MASKED[kind]]
    source_tokenizer, target_tokenizer = build(english, 300), build(ciphered, 260)
    source_size, target_size = len(source_tokenizer), len(target_tokenizer)
    source = save_model(tiny_model(kind, source_size), source_tokenizer, tmp_path / "source")
    target = tiny_model(kind, source_size)
    target.resize_token_embeddings(target_size)
    save_model(target, target_tokenizer, tmp_path / "target")
    (tmp_path / "en.txt").write_text("\n".join(english) + "\n", encoding="utf-8")
    (tmp_path / "xx.txt").write_text("\n".join(ciphered) + "\n", encoding="utf-8")
    pair = {"target": tmp_path / "target", "source": source, "en": tmp_path / "en.txt", "xx": tmp_path / "xx.txt"}
    report = train(_config(pair, tmp_path / "run"))
    assert report.objective == "masked"
    target_folder, source_folder = tmp_path / "run" / "model", tmp_path / "run" / "source-model"
    trained_target, trained_source = _weights(target_folder), _weights(source_folder)
    before_target, before_source = _weights(pair["target"]), _weights(source)
    sizes = {name: tensor.shape[0] for name, tensor in trained_source.items() if tensor.dim() and
             tensor.shape[0] == source_size}
    tables = set(sizes)  # the source's token tables: its input embeddings and the output bias (tied decoder)
    assert any("bias" in name for name in tables) and any("word_embeddings" in name for name in tables)
    body = sorted(set(trained_target) - tables)
    assert body == sorted(set(trained_source) - tables)
    assert all(torch.equal(trained_target[name], trained_source[name]) for name in body)
    transform = [name for name in body if ("transform" in name or "lm_head.dense" in name) and "weight" in name]
    assert transform and not torch.equal(trained_target[transform[0]], before_target[transform[0]])
    for name in tables:
        assert trained_target[name].shape[0] == target_size
        assert not torch.equal(trained_source[name], before_source[name])
    for folder, size in ((target_folder, target_size), (source_folder, source_size)):
        model = AutoModelForMaskedLM.from_pretrained(folder)
        assert model.get_input_embeddings().weight.shape[0] == size == len(AutoTokenizer.from_pretrained(folder))


def test_a_masked_batch_masks_each_stream_with_its_own_tokenizer():
    """Source rows get the source tokenizer's mask token, random tokens from its vocabulary, and keep its special
    tokens; target rows the target's."""
    from langswap.training.data import LMCollator

    class Vocabulary:
        def __init__(self, size: int, mask: int, special: int):
            self.size, self.mask_token_id, self.all_special_ids = size, mask, [special, mask]

        def __len__(self) -> int:
            return self.size

    source, target = Vocabulary(50, mask=7, special=0), Vocabulary(100, mask=90, special=1)
    collator = LMCollator(target, "masked", 0.5, [source, None])
    rows = torch.cat([torch.randint(10, 50, (2, 60)), torch.randint(10, 90, (2, 60))])
    rows[:2, 0], rows[2:, 0] = 0, 1
    masked, labels = collator.mask(rows, torch.Generator().manual_seed(0), torch.tensor([0, 0, 1, 1]))
    assert (masked[:2] == 7).any() and (masked[:2] < 50).all()
    assert (masked[2:] == 90).any()
    assert (labels[:, 0] == -100).all()  # each row's first token, special to its own tokenizer, is never selected
    assert ((labels[:2] == -100) | (labels[:2] == rows[:2])).all() and (labels != -100).sum() > 30


@pytest.mark.parametrize("kind", sorted(MASKED))
def test_the_head_inputs_of_a_masked_lm_give_its_logits_through_its_output_layer(kind):
    from langswap.training.bilingual_model import head_inputs

    model = tiny_model(kind, 120)
    ids = torch.randint(5, 120, (2, 9))
    embeds = model.get_input_embeddings()(ids)
    states = head_inputs(model, embeds, torch.ones_like(ids))
    expected = model(inputs_embeds=embeds, attention_mask=torch.ones_like(ids)).logits
    assert torch.allclose(model.get_output_embeddings()(states), expected, atol=1e-5)


def test_a_masked_lm_reads_text_by_its_pseudo_likelihood_per_byte():
    """Every token is masked once: a uniform model over V tokens gives log V per token, over the bytes read."""
    import math

    from langswap.training.bilingual_model import nats_per_byte

    tokenizer = TOKENIZER_BUILDERS["wordpiece"](english_lines(200, seed=1), 150)
    model = uniform_lm(len(tokenizer))
    model.config.architectures = ["UniformForMaskedLM"]
    lines = english_lines(3, seed=9)
    ids = [tokenizer(line, add_special_tokens=False)["input_ids"] for line in lines]
    expected = sum(len(i) for i in ids) * math.log(len(tokenizer)) / sum(
        len(tokenizer.decode(i).encode("utf-8")) for i in ids)
    assert nats_per_byte(model, tokenizer, lines) == pytest.approx(expected, rel=1e-5)
