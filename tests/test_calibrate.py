"""Frequency calibration: mean logits land on the frequency line, tied heads converge, bad settings refused."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from langswap.transfer.calibrate import CalibrationConfig, calibrate, log_frequencies, mean_head_input, token_counts
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
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, lower_min_count=0, smoothing=0.5),
                       moved)
    offsets = _mean_logits(model, tokenizer, lines)[moved] - logf[moved]
    # slope 1: every moved token on one line (to float32 rounding of logits near 8)
    assert spread_before > 1.0 and np.abs(offsets - offsets.mean()).max() < 0.03
    assert torch.equal(model.get_input_embeddings().weight, before_input)  # untied: the inputs stay
    assert torch.equal(model.get_output_embeddings().weight[0], row0)
    assert report.rows == len(tokenizer) - 1 and report.through.startswith("head rows")


def test_half_strength_moves_half_way(text):
    lines, tokenizer = text
    model = tiny_model("llama", len(tokenizer))
    moved = np.ones(len(tokenizer), dtype=bool)
    logf = log_frequencies(tokenizer, lines, len(tokenizer))
    start = _mean_logits(model, tokenizer, lines)
    calibrate(model, tokenizer, lines, CalibrationConfig(strength=0.5, lower_min_count=0, smoothing=0.5), moved)
    after = _mean_logits(model, tokenizer, lines)
    target = logf + np.mean(start - logf)
    assert np.allclose(after - start, 0.5 * (target - start), atol=0.03)


def test_progress_shows_a_bar_on_each_pass_over_the_text_and_changes_nothing(text, capsys):
    lines, tokenizer = text
    config = CalibrationConfig(strength=1.0, lower_min_count=0, smoothing=0.5, check_lines=20)
    moved = np.ones(len(tokenizer), dtype=bool)
    quiet, shown = tiny_model("llama", len(tokenizer)), tiny_model("llama", len(tokenizer))
    report = calibrate(quiet, tokenizer, lines, config, moved)
    capsys.readouterr()
    assert calibrate(shown, tokenizer, lines, config, moved, progress=True) == report
    bars = capsys.readouterr().err
    # the check before, the pass that reads the hidden states, the check after; each with its rate and time left
    assert bars.count("held-out check") >= 2 and "calibration" in bars and "line/s" in bars and "<" in bars
    assert torch.equal(quiet.get_output_embeddings().weight, shown.get_output_embeddings().weight)


def test_a_tied_head_settles_over_rounds(text):
    lines, tokenizer = text
    model = tiny_model("gpt2", len(tokenizer))
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, rounds=3),
                       np.ones(len(tokenizer), dtype=bool))
    distances = [entry["mean_abs_distance"] for entry in report.rounds]
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
    assert calibrated.metrics.bits_per_byte != plain.metrics.bits_per_byte
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
    assert record["input_rows"] == {"moved": 0} and record["frequencies"]["estimate"] in ("held-out", "add-k")
    plain, checked = load_file(tmp_path / "plain" / "model.safetensors"), load_file(tmp_path / "checked" /
                                                                                      "model.safetensors")
    assert all(torch.equal(plain[name], checked[name]) for name in plain)


def test_a_tied_head_untied_for_calibration_keeps_every_input_row(text):
    """tied_head: untie gives the head its own matrix first: the input rows stay bit for bit, the mean logits land
    on the line in one round, and the record says no input row moved."""
    lines, tokenizer = text
    model = tiny_model("gpt2", len(tokenizer))
    before_input = model.get_input_embeddings().weight.detach().clone()
    moved = np.ones(len(tokenizer), dtype=bool)
    logf = log_frequencies(tokenizer, lines, len(tokenizer))
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, tied_head="untie", lower_min_count=0,
                                                                  smoothing=0.5), moved)
    assert torch.equal(model.get_input_embeddings().weight, before_input)
    assert not model.config.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    offsets = _mean_logits(model, tokenizer, lines) - logf
    assert np.abs(offsets - offsets.mean()).max() < 0.03
    assert report.input_rows.as_dict() == {"moved": 0}


def test_a_tied_head_moved_records_how_far_its_input_rows_went(text):
    lines, tokenizer = text
    model = tiny_model("gpt2", len(tokenizer))
    before_input = model.get_input_embeddings().weight.detach().clone()
    moved = np.ones(len(tokenizer), dtype=bool)
    moved[:3] = False
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, tied_head="move"), moved)
    after = model.get_input_embeddings().weight.detach()
    relative = ((after - before_input).norm(dim=1) / before_input.norm(dim=1))[3:]
    assert torch.equal(after[:3], before_input[:3])
    assert report.input_rows.moved == int((relative > 0).sum()) > 0
    relative = relative[relative > 0]  # rows of unseen tokens below the line stay
    assert report.input_rows.relative_shift.max == pytest.approx(float(relative.max()), rel=1e-4)
    assert report.input_rows.relative_shift.median == pytest.approx(float(np.median(relative.numpy())),
                                                                             rel=1e-3)


def test_a_tied_head_skipped_is_left_alone(text):
    lines, tokenizer = text
    model = tiny_model("gpt2", len(tokenizer))
    before = model.get_input_embeddings().weight.detach().clone()
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, tied_head="skip"),
                       np.ones(len(tokenizer), dtype=bool))
    assert torch.equal(model.get_input_embeddings().weight, before) and report.rows == 0
    assert "tied" in report.skipped
    with pytest.raises(ConfigError, match="calibration.tied_head"):
        CalibrationConfig(tied_head="keep")
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="calibration.smoothing"):
            CalibrationConfig(smoothing=bad)
    with pytest.raises(ConfigError, match="calibration.lower_min_count"):
        CalibrationConfig(lower_min_count=-1)


def test_a_tokenizer_that_fails_when_retrained_falls_back_to_add_half(text, monkeypatch):
    """The Rust tokenizers raise bare Exceptions (a Unigram tokenizer without an unk id, retrained on text that lacks
    a character of the check lines, cannot read them): the choice falls back and says why instead of failing."""
    import langswap.frequency_line as tokenizers
    from langswap.frequency_line import choose_smoothing

    lines, tokenizer = text

    class Unreadable:
        def __len__(self):
            return len(tokenizer)

        def __call__(self, *args, **kwargs):
            raise Exception("Encountered an unknown token but unk_id is missing")

    monkeypatch.setattr(tokenizers, "train_tokenizer_on_lines",
                        lambda *args, **kwargs: type("Trained", (), {"tokenizer": Unreadable()})())
    report = choose_smoothing(tokenizer, lines[:100], lines[100:])
    assert report["smoothing"] == 0.5 and "unk_id is missing" in report["fallback"]


def test_a_tied_model_untied_by_calibration_is_saved_untied_with_its_inputs_as_the_method_made_them(
        gpt2_folder, corpus_dir, target_tokenizer_folder, tmp_path):
    """combined (mode auto) calibrates each candidate: the first candidate's calibration unties the head, the next
    candidate is installed tied again, and the kept one is restored as it was finished: untied and calibrated. The
    saved model loads untied, its input rows are the uncalibrated transfer's bit for bit, and the record says it is
    untied."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from langswap.models import is_tied
    from langswap.transfer import transfer, transfer_config

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
            "resources": {"dictionary": str(corpus_dir / "en-xx.tsv")}}
    text = str(corpus_dir / "xx.txt")
    untied = transfer(transfer_config({**base, "output": str(tmp_path / "untied"), "method": "combined",
                                       "calibration": {"text": text, "tied_head": "untie", "check_lines": 0}}))
    assert set(untied.choice.losses) == {"mix", "choose", "spelling only"}
    # the kept candidate, made alone and uncalibrated (without the dictionary where it was left out)
    kept = untied.choice.chosen
    plain = {**base, "resources": {}} if kept == "spelling only" else base
    transfer(transfer_config({**plain, "output": str(tmp_path / "plain"), "calibration": {"strength": 0},
                              "method": {"name": "combined", "mode": "mix" if kept == "spelling only" else kept}}))
    record = json.loads((tmp_path / "untied" / "langswap.json").read_text(encoding="utf-8"))
    assert record["tied_embeddings"] is False and record["calibration"]["input_rows"] == {"moved": 0}
    assert record["calibration"]["rows"] > 0
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "untied")
    reference = AutoModelForCausalLM.from_pretrained(tmp_path / "plain")
    assert not is_tied(model) and is_tied(reference)
    assert torch.equal(model.get_input_embeddings().weight, reference.get_input_embeddings().weight)
    assert not torch.equal(model.get_output_embeddings().weight, model.get_input_embeddings().weight)
    assert "lm_head.weight" in load_file(tmp_path / "untied" / "model.safetensors")


def _made_up_words(count: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    return ["".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(count)]


def _lines_of(words: list[str], count: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    return [" ".join(rng.choices(words, weights=weights, k=rng.randint(6, 14))) for _ in range(count)]


def test_smoothing_is_chosen_on_check_lines_read_by_a_tokenizer_that_never_saw_them(text):
    """choose_smoothing trains a tokenizer like the target's on the counted lines alone and picks the pseudo-count
    under which their counts best predict the check lines. Check lines that repeat the counted text need the least
    smoothing of the grid; check lines of words the counted text never had split into pieces it rarely showed, and
    need more. The report lists every pseudo-count tried."""
    from langswap.frequency_line import SMOOTHING_GRID, choose_smoothing, smoothed_log_frequencies
    from langswap.resources.tokenizer import token_counts

    counted = _lines_of(_made_up_words(800, seed=0), 400, seed=1)
    new_words = _lines_of(_made_up_words(800, seed=2), 100, seed=3)
    tokenizer = byte_level_tokenizer(counted + new_words, vocab_size=1500)
    repeated = choose_smoothing(tokenizer, counted, counted[:100])
    new = choose_smoothing(tokenizer, counted, new_words)
    assert repeated["smoothing"] == SMOOTHING_GRID[0] and repeated["at_edge"]
    assert new["smoothing"] >= 1.0
    assert set(new["cross_entropy"]) == {f"{k:g}" for k in SMOOTHING_GRID}
    assert min(new["cross_entropy"].values()) == new["cross_entropy"][f"{new['smoothing']:g}"]
    counts = token_counts(tokenizer, counted, len(tokenizer))
    assert np.isclose(np.exp(smoothed_log_frequencies(counts, 0.5)).sum(), 1.0)
    # a tokenizer that cannot be retrained (a slow one) falls back to add-half and says why
    _, english = text
    fallback = choose_smoothing(_Slow(english), counted, new_words)
    assert fallback["smoothing"] == 0.5 and "no tokenizer" in fallback["fallback"]


def test_held_out_frequencies_give_each_rare_count_its_share_of_new_text():
    """Held-out estimation by hand: tokens counted r < 3 times get the mean share of the check lines' tokens that the
    proxy's tokens counted r times have (half an occurrence where the check lines show none, or the class is empty);
    more frequent tokens their relative frequency, scaled by the share of the check lines such tokens have."""
    from langswap.frequency_line import held_out_log_frequencies

    proxy_counted = np.array([0, 0, 1, 1, 5, 10], dtype=float)
    proxy_held = np.array([3, 1, 0, 0, 2, 4], dtype=float)  # 10 check tokens, 4 of them on the unseen class
    counts = np.array([0, 1, 2, 6, 12], dtype=float)
    logf, report = held_out_log_frequencies(counts, (proxy_counted, proxy_held))
    scale = (6 / 10) / (15 / 17)
    expected = np.array([4 / (2 * 10), 0.5 / (2 * 10), 0.5 / 10, 6 / 21 * scale, 12 / 21 * scale])
    assert np.allclose(np.exp(logf), expected / expected.sum())
    assert report["per_count"]["0"] == {"tokens": 1, "frequency": 0.2}
    assert report["above"] == {"from_count": 3, "scale": round(scale, 4)} and report["check_tokens"] == 10


def test_held_out_frequencies_rank_tokens_new_text_splits_into_above_those_seen_once():
    """A tokenizer trained on a text has a token for most of its words, and words it never saw split into pieces
    that text rarely shows whole: in new text those pieces are more frequent than add-k smoothing makes them, and
    held-out estimation measures how much on check lines read by a tokenizer trained without them. It is the
    option (`frequencies: held-out`); add-k, the default, smooths the counts."""
    from langswap.transfer.calibrate import CalibrationConfig, frequency_line, smoothed_log_frequencies, token_counts

    counted = _lines_of(_made_up_words(800, seed=0), 400, seed=1)
    new_words = _lines_of(_made_up_words(800, seed=2), 100, seed=3)
    tokenizer = byte_level_tokenizer(counted + new_words, vocab_size=1500)
    logf, how, counts = frequency_line(tokenizer, counted + new_words, len(tokenizer),
                                       CalibrationConfig(frequencies="held-out"))
    assert how["estimate"] == "held-out" and how["check_tokens"] > 0
    assert np.array_equal(counts, token_counts(tokenizer, counted, len(tokenizer)))
    new_counts = token_counts(tokenizer, new_words, len(tokenizer))
    add_half = smoothed_log_frequencies(counts, 0.5)
    assert -(new_counts * logf).sum() < -(new_counts * add_half).sum()  # predicts the new text better
    _, how, _ = frequency_line(tokenizer, counted + new_words, len(tokenizer), CalibrationConfig(smoothing=2.0))
    assert how == {"estimate": "add-k", "smoothing": 2.0, "set": "calibration.smoothing"}
    _, how, _ = frequency_line(tokenizer, counted + new_words, len(tokenizer), CalibrationConfig())
    assert how["estimate"] == "add-k" and how["smoothing"] >= 1.0 and "cross_entropy" in how
    with pytest.raises(ConfigError, match="frequencies: held-out leave it unset"):
        CalibrationConfig(frequencies="held-out", smoothing=2.0)


class _Slow:
    """A tokenizer without a Rust trainer."""

    is_fast = False

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __len__(self):
        return len(self.tokenizer)


def test_rows_of_tokens_the_text_never_shows_are_not_lowered(text):
    """Training on text that lacks a token lowers its row by itself, and a lowering by calibration would stay after
    it: with `lower_min_count: 1` such rows only move up, while every token the counted lines show lands on the
    line (3, what training's `calibration: spare-rare` gives, also keeps tokens shown once or twice from moving down:
    the test below)."""
    lines, tokenizer = text
    model = tiny_model("llama", len(tokenizer))
    moved = np.ones(len(tokenizer), dtype=bool)
    counts = token_counts(tokenizer, lines, len(tokenizer))
    unseen = counts == 0
    start = _mean_logits(model, tokenizer, lines)
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, smoothing=0.5, lower_min_count=1),
                       moved)
    after = _mean_logits(model, tokenizer, lines)
    logf = log_frequencies(tokenizer, lines, len(tokenizer), 0.5)
    assert unseen.sum() > 10 and (~unseen).sum() > 10
    assert np.all(after[unseen] >= start[unseen] - 1e-3)  # the line is below most of them: they stay
    assert np.sum(after[unseen] > start[unseen] + 1e-3) < unseen.sum()
    offsets = after[~unseen] - logf[~unseen]
    assert np.abs(offsets - offsets.mean()).max() < 0.03
    raised = after > start + 1e-3
    line = logf + offsets.mean()
    assert np.all(np.abs(after[unseen & raised] - line[unseen & raised]) < 0.03)  # raised ones land on the line
    assert np.all(line[unseen & ~raised] <= start[unseen & ~raised] + 0.03)  # the others were above it
    assert report.up_only_rows.as_dict() == {"rows": int(unseen.sum()), "below_count": 1}


def test_rows_of_rare_tokens_move_up_only_below_the_count(text):
    """`lower_min_count: N`: no row of a token the counted lines show fewer than N times moves down, while rows of
    tokens shown N times or more land on the line."""
    lines, tokenizer = text
    counts = token_counts(tokenizer, lines, len(tokenizer))
    moved = np.ones(len(tokenizer), dtype=bool)
    results = {}
    assert CalibrationConfig().lower_min_count == 0  # the transfer lowers every row; training spares the rare ones
    rare_seen = (counts >= 1) & (counts < 10)
    for below in (1, 10):
        model = tiny_model("llama", len(tokenizer))  # untied: the mean hidden state does not move with the head
        hidden = mean_head_input(model, tokenizer, lines, 128)
        with torch.no_grad():  # put the rare tokens' mean logits far above any frequency line
            model.get_output_embeddings().weight[torch.from_numpy(rare_seen)] += 20 * hidden / hidden.dot(hidden)
        start = _mean_logits(model, tokenizer, lines)
        report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, smoothing=0.5, check_lines=0,
                                                                    lower_min_count=below), moved)
        after = _mean_logits(model, tokenizer, lines)
        rare = counts < below
        assert report.up_only_rows.as_dict() == {"rows": int(rare.sum()), "below_count": below}
        assert np.all(after[rare] >= start[rare] - 1e-3)
        results[below] = after - start
        final = after
    assert rare_seen.sum() > 5
    assert np.sum(results[1][rare_seen] < -1e-2) > 0  # with the unseen rule alone, some of them were lowered
    assert np.all(results[10][rare_seen] >= -1e-3)
    frequent = counts >= 10
    offsets = final[frequent] - log_frequencies(tokenizer, lines, len(tokenizer), 0.5)[frequent]
    assert frequent.sum() > 5 and np.ptp(offsets) < 0.05  # the others land on the line as before


def test_a_calibrated_transfer_records_its_move_and_training_can_take_it_off(gpt2_folder, corpus_dir,
                                                                            target_tokenizer_folder, tmp_path):
    """The transfer writes calibration's move beside the model; taking all of it off gives the uncalibrated
    transfer's rows, taking off the lowering of rows counted fewer than 3 times gives the transfer calibrated with
    `lower_min_count: 3`, and `langswap train` with `calibration: undo` starts from the uncalibrated rows."""
    from transformers import AutoModelForCausalLM

    from langswap.calibration_move import MOVE_FILE, CalibrationMove, take_off
    from langswap.models import load_tokenizer
    from langswap.records import read_train_record
    from langswap.training.held_rows import text_token_counts, unshown_text_tokens
    from langswap.training.run import TrainConfig, train
    from langswap.transfer import transfer, transfer_config

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder), "method": "overlap"}
    text = str(corpus_dir / "xx.txt")

    def made(name, **calibration):
        report = transfer(transfer_config({**base, "output": str(tmp_path / name),
                                           "calibration": {"text": text, "check_lines": 0, **calibration}}))
        return report, AutoModelForCausalLM.from_pretrained(tmp_path / name)

    report, every = made("every", lower_min_count=0, smoothing=0.5)
    _, spared = made("spared", lower_min_count=3, smoothing=0.5)
    _, plain = made("plain", strength=0)
    assert report.calibration.rows > 0 and report.calibration.move_file == MOVE_FILE
    record = json.loads((tmp_path / "every" / "langswap.json").read_text(encoding="utf-8"))
    assert record["calibration"]["move_file"] == MOVE_FILE and "move" not in record["calibration"]
    assert not (tmp_path / "plain" / MOVE_FILE).exists()
    move = CalibrationMove.load(tmp_path / "every" / MOVE_FILE)
    assert move.tied and len(move.logits) == 1 and move.directions[0].shape == (every.config.hidden_size,)
    rare = move.counts < 3
    assert rare.any() and (move.logits[0][rare] < 0).any()  # rows lowered that lower_min_count 3 would spare

    weights = lambda model: model.get_output_embeddings().weight.detach()  # noqa: E731
    assert not torch.allclose(weights(every), weights(spared), atol=1e-4)
    with torch.no_grad():
        again = AutoModelForCausalLM.from_pretrained(tmp_path / "every")
        assert take_off(again, move, below_count=3) == int((rare & (move.logits[0] < 0)).sum())
        torch.testing.assert_close(weights(again), weights(spared), rtol=0, atol=1e-5)
        assert take_off(every, move) == int((move.logits[0] != 0).sum())
        torch.testing.assert_close(weights(every), weights(plain), rtol=0, atol=1e-5)
        torch.testing.assert_close(every.get_input_embeddings().weight, plain.get_input_embeddings().weight,
                                   rtol=0, atol=1e-5)

    def start_of(name, calibration, **options):
        config = TrainConfig(model=str(tmp_path / "every"), train_text=text, output=str(tmp_path / name), steps=1,
                             batch_size=2, sequence_length=16, save_steps=1, logging_steps=1, preset="embeddings",
                             snapshot_steps=[0], calibration=calibration, **options)
        train(config)
        phase = read_train_record(tmp_path / name).phases[0]
        return phase, AutoModelForCausalLM.from_pretrained(tmp_path / name / "snapshots" / "step-0")

    # rows named to keep their move keep it: those rows as calibrated, the others as the spared transfer's
    written = weights(AutoModelForCausalLM.from_pretrained(tmp_path / "every"))
    lowered = np.flatnonzero(rare & (move.logits[0] < 0))
    kept_rows, others = lowered[::2], np.setdiff1d(np.arange(len(move.counts)), lowered[::2])
    with torch.no_grad():
        again = AutoModelForCausalLM.from_pretrained(tmp_path / "every")
        assert take_off(again, move, below_count=3, kept_rows=kept_rows) == len(lowered) - len(kept_rows)
    assert len(kept_rows) > 0 and torch.equal(weights(again)[kept_rows], written[kept_rows])
    torch.testing.assert_close(weights(again)[others], weights(spared)[others], rtol=0, atol=1e-5)
    # with unshown_rows: hold, the rows of the tokens the text never shows start as the transfer wrote them (they
    # never train, so calibration's lowering is the best they have) and spare-rare spares only the rows it shows
    phase, held = start_of("spare-held", "spare-rare", unshown_rows="hold", calibration_min_count=10)
    target = load_tokenizer(target_tokenizer_folder)
    shown = {token for line in open(text, encoding="utf-8").read().splitlines() for token in target(line)["input_ids"]}
    unshown = unshown_text_tokens(text_token_counts(target, [np.array(sorted(shown))]))[0]  # never shown
    below = set(np.flatnonzero((move.counts < 10) & (move.logits[0] < 0)).tolist())
    spared_shown = sorted(below - set(unshown.tolist()))
    assert phase.rows_held == len(unshown) > 0 and below & set(unshown.tolist()) and spared_shown
    assert phase.calibration_taken_off == len(spared_shown)
    assert torch.equal(weights(held)[unshown], written[unshown])
    with torch.no_grad():
        all_spared = AutoModelForCausalLM.from_pretrained(tmp_path / "every")
        take_off(all_spared, move, below_count=10)
    torch.testing.assert_close(weights(held)[spared_shown], weights(all_spared)[spared_shown], rtol=0, atol=1e-5)
    assert not torch.allclose(weights(held)[unshown], weights(all_spared)[unshown], atol=1e-4)

    phase, undone = start_of("undo", "undo")
    assert phase.calibration_taken_off == int((move.logits[0] != 0).sum())
    torch.testing.assert_close(weights(undone), weights(plain), rtol=0, atol=1e-5)
    phase, kept = start_of("keep", "keep")
    assert phase.calibration_taken_off is None
    torch.testing.assert_close(weights(kept), weights(AutoModelForCausalLM.from_pretrained(tmp_path / "every")),
                               rtol=0, atol=0)
    # a folder calibrated without the move file (an older transfer) cannot be undone, and says so; one whose
    # calibration spared the rare rows already needs nothing taken off for spare-rare
    (tmp_path / "every" / MOVE_FILE).unlink()
    with pytest.raises(ConfigError, match="has no calibration-move.safetensors"):
        start_of("old", "undo")
    with pytest.raises(ConfigError, match="has no calibration-move.safetensors"):
        start_of("old-rare", "spare-rare")  # lower_min_count 0 lowered rare rows
    (tmp_path / "spared" / MOVE_FILE).unlink()
    config = TrainConfig(model=str(tmp_path / "spared"), train_text=text, output=str(tmp_path / "old-spared"),
                         steps=1, batch_size=2, sequence_length=16, save_steps=1, preset="embeddings",
                         calibration="spare-rare")
    train(config)
    assert read_train_record(tmp_path / "old-spared").phases[0].calibration_taken_off is None


def test_rows_auto_keeps_whichever_rows_predict_the_check_lines_better(text):
    """`rows: auto` calibrates every row and only the rows the method did not copy, each from the same start, and
    keeps the one with the lower check-line loss, its model exactly the one that calibration alone leaves; without
    check lines it is `all`."""
    from types import SimpleNamespace

    from langswap.methods.mapping import Kind
    from langswap.transfer.steps import calibrate_rows

    lines, tokenizer = text
    size = len(tokenizer)
    kinds = np.where(np.arange(size) % 2 == 0, Kind.COPIED, Kind.MIXED)
    kinds[0] = Kind.SPECIAL
    mapping = SimpleNamespace(kinds=kinds)
    new = kinds == Kind.MIXED

    def start():
        model = tiny_model("llama", size)
        hidden = mean_head_input(model, tokenizer, lines, 128)
        with torch.no_grad():  # the new rows' mean logits far off the line: moving them pays
            model.get_output_embeddings().weight[torch.from_numpy(new)] += 20 * hidden / hidden.dot(hidden)
        return model

    config = CalibrationConfig(smoothing=0.5, check_lines=20)
    alone = {}
    for rows in ("all", "new"):
        model = start()
        report = calibrate_rows(model, tokenizer, mapping, dataclasses.replace(config, rows=rows), 1.0, lines)
        alone[rows] = (report, model.get_output_embeddings().weight.detach().clone())
        assert report.row_choice is None
    model = start()
    report = calibrate_rows(model, tokenizer, mapping, dataclasses.replace(config, rows="auto"), 1.0, lines)
    losses = {rows: round(alone[rows][0].held_out_loss, 4) for rows in alone}
    assert report.row_choice.losses == losses and losses["all"] != losses["new"]
    kept = min(losses, key=losses.get)
    assert report.row_choice.kept == kept and report.rows == alone[kept][0].rows
    assert torch.equal(model.get_output_embeddings().weight, alone[kept][1])
    assert f"chosen on the check lines (all {losses['all']}, new {losses['new']})" in report.summary()
    unchecked = start()
    report = calibrate_rows(unchecked, tokenizer, mapping, dataclasses.replace(config, rows="auto", check_lines=0),
                            1.0, lines)
    assert report.row_choice is None and report.rows == int((kinds != Kind.SPECIAL).sum())


def test_a_move_taken_by_rows_follows_the_rows_it_belongs_to(text):
    """`CalibrationMove.rows(index)`: a model whose rows were taken as `index` (some dropped, the rest reordered,
    one padding row beyond the move) gets its uncalibrated rows back from the move taken the same way."""
    from langswap.calibration_move import take_off

    lines, tokenizer = text
    model = tiny_model("llama", len(tokenizer))
    before = model.get_output_embeddings().weight.detach().clone()
    report = calibrate(model, tokenizer, lines, CalibrationConfig(strength=1.0, smoothing=0.5, check_lines=0),
                       np.ones(len(tokenizer), dtype=bool))
    index = np.concatenate([np.arange(0, len(tokenizer), 2)[::-1], [len(tokenizer) + 5]])
    calibrated = model.get_output_embeddings().weight.detach()
    taken = tiny_model("llama", len(index))
    with torch.no_grad():
        rows = torch.from_numpy(np.minimum(index, len(tokenizer) - 1))
        taken.get_output_embeddings().weight.copy_(calibrated[rows])
        taken.get_output_embeddings().weight[-1] = before[-1]  # the padding row: never calibrated
    move = report.move.rows(index)
    assert len(move.counts) == len(index) and move.counts[-1] == 0 and move.logits[0][-1] == 0
    take_off(taken, move)
    expected = before[rows].clone()
    expected[-1] = before[-1]
    assert torch.allclose(taken.get_output_embeddings().weight, expected, atol=1e-5)


def test_rows_auto_on_a_tied_head_that_is_skipped_leaves_it_alone(text):
    from types import SimpleNamespace

    from langswap.methods.mapping import Kind
    from langswap.transfer.steps import calibrate_rows

    lines, tokenizer = text
    kinds = np.where(np.arange(len(tokenizer)) % 2 == 0, Kind.COPIED, Kind.MIXED)
    model = tiny_model("gpt2", len(tokenizer))
    before = model.get_output_embeddings().weight.detach().clone()
    report = calibrate_rows(model, tokenizer, SimpleNamespace(kinds=kinds),
                            CalibrationConfig(rows="auto", tied_head="skip", check_lines=20), 1.0, lines)
    assert report.skipped and report.row_choice is None
    assert torch.equal(model.get_output_embeddings().weight, before)
