"""Frequency calibration: mean logits land on the frequency line, tied heads converge, bad settings refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from langswap.calibrate import CalibrationConfig, calibrate, log_frequencies, mean_head_input
from langswap.errors import ConfigError

from conftest import byte_level_tokenizer, english_lines, tiny_model


def _mean_logits(model, tokenizer, lines):
    hidden = mean_head_input(model, tokenizer, lines, 128)
    head = model.get_output_embeddings()
    logits = head.weight.detach().float() @ hidden
    bias = getattr(head, "bias", None)
    return (logits + bias.detach().float() if bias is not None else logits).numpy()


@pytest.fixture(scope="module")
def text():
    lines = english_lines(120)
    return lines, byte_level_tokenizer(english_lines(400), vocab_size=300)


def test_an_untied_head_lands_on_the_line_in_one_round(text):
    lines, tokenizer = text
    model = tiny_model("llama", len(tokenizer))
    moved = np.ones(len(tokenizer), dtype=bool)
    moved[0] = False  # a special token stays
    before_input = model.get_input_embeddings().weight.detach().clone()
    row0 = model.get_output_embeddings().weight[0].detach().clone()
    logf = log_frequencies(tokenizer, lines, len(tokenizer))
    spread_before = np.std(_mean_logits(model, tokenizer, lines)[moved] - logf[moved])
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0), moved)
    offsets = _mean_logits(model, tokenizer, lines)[moved] - logf[moved]
    # slope 1: every moved token on one line (to float32 rounding of logits near 8)
    assert spread_before > 1.0 and np.abs(offsets - offsets.mean()).max() < 0.03
    assert torch.equal(model.get_input_embeddings().weight, before_input)  # untied: the inputs stay
    assert torch.equal(model.get_output_embeddings().weight[0], row0)
    assert report["rows"] == len(tokenizer) - 1 and report["through"].startswith("head rows")


def test_half_strength_moves_half_way(text):
    lines, tokenizer = text
    model = tiny_model("llama", len(tokenizer))
    moved = np.ones(len(tokenizer), dtype=bool)
    logf = log_frequencies(tokenizer, lines, len(tokenizer))
    start = _mean_logits(model, tokenizer, lines)
    calibrate(model, tokenizer, lines, CalibrationConfig(strength=0.5), moved)
    after = _mean_logits(model, tokenizer, lines)
    target = logf + np.mean(start - logf)
    assert np.allclose(after - start, 0.5 * (target - start), atol=0.03)


def test_a_tied_head_settles_over_rounds(text):
    lines, tokenizer = text
    model = tiny_model("gpt2", len(tokenizer))
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, rounds=3),
                       np.ones(len(tokenizer), dtype=bool))
    distances = [entry["mean_abs_distance"] for entry in report["rounds"]]
    # moving tied rows moves the inputs, hence the mean hidden state: a round can overshoot, later ones settle
    assert distances[-1] < 0.1 * distances[0]


def test_settings_and_models_it_cannot_calibrate_are_refused(text):
    lines, tokenizer = text
    with pytest.raises(ConfigError, match="calibration.strength"):
        CalibrationConfig(strength=1.5)
    with pytest.raises(ConfigError, match="calibration.rows"):
        CalibrationConfig(rows="some")
    with pytest.raises(ConfigError, match="causal LMs"):
        calibrate(tiny_model("bert", len(tokenizer)), tokenizer, lines, CalibrationConfig(strength=1.0),
                  np.ones(len(tokenizer), dtype=bool))


def test_transfer_calibrates_and_records_it(gpt2_folder, corpus_dir, target_tokenizer_folder, tmp_path):
    from langswap.transfer import transfer, transfer_config

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
            "method": "overlap", "eval_text": str(corpus_dir / "xx.test.txt")}
    plain = transfer(transfer_config({**base, "output": str(tmp_path / "plain")}))
    calibrated = transfer(transfer_config({**base, "output": str(tmp_path / "calibrated"),
                                           "calibration": {"strength": 1.0, "text": str(corpus_dir / "xx.txt"),
                                                           "rows": "new", "check_lines": 0}}))
    record = json.loads((tmp_path / "calibrated" / "langswap.json").read_text(encoding="utf-8"))
    assert record["calibration"]["rows"] == plain.counts.get("subword", 0) + plain.counts.get("mean", 0) \
        + plain.counts.get("random", 0)
    assert record["config"]["calibration"]["strength"] == 1.0
    assert calibrated.metrics["bits_per_byte"] != plain.metrics["bits_per_byte"]
    with pytest.raises(ConfigError, match="calibration needs target-language text"):
        transfer(transfer_config({**base, "output": str(tmp_path / "none"), "calibration": {"strength": 0.5}}))


def test_calibration_is_on_by_default_where_it_applies(gpt2_folder, corpus_dir, target_tokenizer_folder, tmp_path):
    """Unset strength: 1 for a causal LM with target text at hand; without text, or for a masked LM, none, and the
    record says why; strength 0 turns it off."""
    from langswap.transfer import transfer, transfer_config

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder), "method": "overlap"}
    text = str(corpus_dir / "xx.txt")

    def record(name, **extra):
        transfer(transfer_config({**base, "output": str(tmp_path / name), **extra}))
        return json.loads((tmp_path / name / "langswap.json").read_text(encoding="utf-8"))["calibration"]

    on = record("default", calibration={"text": text, "check_lines": 0})
    assert on["strength"] == 1.0 and on["rows"] > 0 and on["text"] == text
    assert record("no-text")["skipped"].startswith("no target-language text")
    assert record("off", calibration={"text": text, "strength": 0})["skipped"] == "calibration.strength is 0"
    assert CalibrationConfig().plan(has_text=True, causal=False)[1].startswith("not a causal LM")


def test_a_calibration_that_predicts_worse_on_held_out_lines_is_put_back(gpt2_folder, corpus_dir,
                                                                         target_tokenizer_folder, tmp_path):
    """A random tiny model's logits do not track frequencies, and calibrating it raises its loss: the check on lines
    kept out of the counts puts every row back, bit for bit, and the record says why."""
    from safetensors.torch import load_file

    from langswap.transfer import transfer, transfer_config

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder), "method": "overlap"}
    transfer(transfer_config({**base, "output": str(tmp_path / "plain"), "calibration": {"strength": 0}}))
    transfer(transfer_config({**base, "output": str(tmp_path / "checked"),
                              "calibration": {"text": str(corpus_dir / "xx.txt")}}))
    record = json.loads((tmp_path / "checked" / "langswap.json").read_text(encoding="utf-8"))["calibration"]
    assert record["rows"] == 0 and record["skipped"].startswith("put back")
    assert record["check"]["loss_after"] > record["check"]["loss_before"]
    plain, checked = load_file(tmp_path / "plain" / "model.safetensors"), load_file(tmp_path / "checked" /
                                                                                      "model.safetensors")
    assert all(torch.equal(plain[name], checked[name]) for name in plain)
