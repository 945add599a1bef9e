"""RAMEN's bilingual training: one body read by two languages, two model folders, Lookahead."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from conftest import byte_level_tokenizer, cipher_line, english_lines, save_model, tiny_model
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
    assert [phase["name"] for phase in report.phases] == ["1-bilingual"]


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
    with pytest.raises(ConfigError, match="causal"):
        Ramen(config).phases("masked")


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
    from langswap.training.bilingual import check_source_language

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
