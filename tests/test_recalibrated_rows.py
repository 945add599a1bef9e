"""`unshown_rows: recalibrate`: the rows of the tokens the training text never shows, moved onto the frequency line
when the model is written (langswap.training.recalibrated_rows)."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest
import torch

from conftest import english_lines, tiny_model


def _recalibration(tokenizer, lines, ids, counts, log_frequencies):
    from langswap.training.recalibrated_rows import Recalibration

    return Recalibration(np.asarray(ids), tokenizer, lines, np.asarray(log_frequencies, dtype=np.float64),
                         np.asarray(counts), 1e-5)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bias"])
def test_the_moved_rows_land_on_the_line_the_shown_rows_lie_on(gpt2_folder, kind):
    """Each moved row's mean logit at the mean head input is its log-frequency plus the mean offset of the rows
    counted at least three times; no other row moves; the move puts back exactly (tied, untied, with a bias)."""
    from langswap.models import load_tokenizer
    from langswap.reports import UnshownRecalibration
    from langswap.frequency_line import mean_head_input

    tokenizer = load_tokenizer(gpt2_folder)
    size = len(tokenizer)
    model = tiny_model("llama" if kind != "gpt2" else "gpt2", size)
    if kind == "bias":
        model.lm_head.bias = torch.nn.Parameter(torch.randn(size) * 0.1)
    lines = english_lines(40, seed=3)
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 50, size)
    ids = np.flatnonzero(counts == 0)[:20]
    counts[ids] = 0
    log_frequencies = np.log((counts + 1.0) / (counts + 1.0).sum())
    recalibration = _recalibration(tokenizer, lines, ids, counts, log_frequencies)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    head = model.get_output_embeddings()
    hidden = mean_head_input(model, tokenizer, lines, 128)

    def mean_logits():
        logits = head.weight.detach() @ hidden
        return (logits + head.bias.detach() if head.bias is not None else logits).numpy().astype(np.float64)

    current = mean_logits()
    report, saved = recalibration.move(model)
    reference = counts >= 3
    offset = np.mean(current[reference] - log_frequencies[reference])
    np.testing.assert_allclose(mean_logits()[ids], log_frequencies[ids] + offset, atol=1e-4)
    others = np.setdiff1d(np.arange(size), ids)
    np.testing.assert_allclose(mean_logits()[others], current[others], atol=1e-5)
    assert isinstance(report, UnshownRecalibration) and report.rows == len(ids) > 0
    assert report.mean_move == pytest.approx(float(np.mean(log_frequencies[ids] + offset - current[ids])), abs=1e-3)
    moved = [name for name, parameter in model.named_parameters() if not torch.equal(parameter, before[name])]
    assert moved == {"gpt2": ["transformer.wte.weight"], "llama": ["lm_head.weight"], "bias": ["lm_head.bias"]}[kind]
    recalibration.restore(saved)
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]), name
    with recalibration.moved(model):
        assert not np.allclose(mean_logits()[ids], current[ids])
    assert np.array_equal(mean_logits(), current)


def test_a_run_writes_its_model_and_snapshots_recalibrated_and_trains_on_the_rows_as_trained(gpt2_folder, tmp_path):
    """The same run with `recalibrate` (only the tokens the text never shows: `recalibrate_below` below any count
    times the epochs read) and `train`:
    every row the text shows ends identical (the snapshot's move is
    put back before the next update), the rows it never shows differ by moves along one direction (the mean head
    input), in the run's model and the snapshot; the phase reports the rows and the evaluation loss before and
    after."""
    from langswap.models import load_model, load_tokenizer
    from langswap.resources.tokenizer import text_tokens
    from langswap.training.held_rows import text_token_counts, unshown_text_tokens
    from langswap.training.run import TrainConfig, train

    text = tmp_path / "train.txt"
    text.write_text("\n".join(english_lines(300, seed=9)) + "\n", encoding="utf-8")
    evaluation = tmp_path / "eval.txt"
    evaluation.write_text("\n".join(english_lines(20, seed=4)) + "\n", encoding="utf-8")
    ends, snapshots, records = {}, {}, {}
    for name, rows, below in (("recalibrate", "recalibrate", 1e-6), ("train", "train", 1), ("default", None, None)):
        options = {"unshown_rows": rows, "recalibrate_below": below} if rows else {}
        report = train(TrainConfig(model=str(gpt2_folder), train_text=str(text), eval_text=str(evaluation),
                                   output=str(tmp_path / name), data_dir=str(tmp_path / "stores"),
                                   preset="embeddings", steps=4, batch_size=4, sequence_length=16, save_steps=4,
                                   logging_steps=2, eval_steps=4, snapshot_steps=[2], **options))
        ends[name] = load_model(report.model).get_input_embeddings().weight.detach()
        snapshots[name] = load_model(report.output / "snapshots" / "step-2").get_input_embeddings().weight.detach()
        records[name] = json.loads((report.output / "langswap-train.json").read_text())
    tokenizer = load_tokenizer(gpt2_folder)
    shown = sorted({token for line in english_lines(300, seed=9) for token in tokenizer(line)["input_ids"]})
    never = len(unshown_text_tokens(text_token_counts(tokenizer, [np.array(shown)]))[0])
    # by default, the rows of the tokens the run shows fewer than 20 times (count times the epochs it reads)
    counts = collections.Counter(token for line in english_lines(300, seed=9) for token in tokenizer(line)["input_ids"])
    epochs = records["default"]["training_data"]["train"]["epochs"]
    texts = [index for index, piece in enumerate(text_tokens(tokenizer)) if piece]
    rare = sum(1 for index in texts if counts[index] * epochs < 20)
    default = records["default"]["phases"][0]["unshown_recalibrated"]
    assert default["rows"] == rare > never and default["shown_below"] == 20
    recalibrated = records["recalibrate"]["phases"][0]["unshown_recalibrated"]
    assert recalibrated["rows"] == never > 0 and records["train"]["phases"][0].get("unshown_recalibrated") is None
    assert recalibrated["eval_loss_before"] > 0 and recalibrated["eval_loss_after"] > 0
    assert recalibrated["eval_loss_before"] != recalibrated["eval_loss_after"]
    for weights in (ends, snapshots):
        changed = ~(weights["recalibrate"] == weights["train"]).all(dim=1)
        assert int(changed.sum()) == never
        moves = (weights["recalibrate"] - weights["train"])[changed]
        directions = moves / moves.norm(dim=1, keepdim=True)
        # every move is along the same direction, up or down
        assert torch.allclose(directions.abs() @ directions[0].abs(), torch.ones(len(moves)), atol=1e-3)


def test_unshown_rows_is_checked(tmp_path):
    from langswap.errors import ConfigError
    from langswap.training.run import TrainConfig

    text = tmp_path / "train.txt"
    text.write_text("a line\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="choose recalibrate, train or hold"):
        TrainConfig(model=str(tmp_path), train_text=str(text), output=str(tmp_path / "out"),
                    unshown_rows="level").validate()
    with pytest.raises(ConfigError, match="recalibrate_below is 0; give a number of showings above 0"):
        TrainConfig(model=str(tmp_path), train_text=str(text), output=str(tmp_path / "out"),
                    recalibrate_below=0).validate()
