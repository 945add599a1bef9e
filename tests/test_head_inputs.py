"""Lines read once while only the output head moves (`langswap.head_inputs`): the same losses and expected counts as
a reading of the whole model, from one pass of the body."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import byte_level_tokenizer, english_lines, save_model, tiny_model


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    lines = english_lines(300)
    tokenizer = byte_level_tokenizer(lines)
    folder = save_model(tiny_model("gpt2", len(tokenizer)), tokenizer, tmp_path_factory.mktemp("head-inputs") / "m")
    return folder, lines


def _untied(folder):
    from langswap.models import load_model, load_tokenizer
    from langswap.transfer.calibrate import untie_head

    model = load_model(folder)
    untie_head(model)
    return model, load_tokenizer(folder)


def _body_passes(model) -> list:
    """A list that grows by one at each pass of the model's first block."""
    passes = []
    model.transformer.h[0].register_forward_hook(lambda *args: passes.append(1))
    return passes


def _move_head(model, seed: int) -> None:
    weight = model.get_output_embeddings().weight
    with torch.no_grad():
        weight += 0.5 * torch.randn(weight.shape, generator=torch.Generator().manual_seed(seed))


def test_check_lines_read_the_body_once_and_give_the_loss_of_the_model_as_its_head_moves(source):
    from langswap.head_inputs import CheckLines, head_alone_moves, mean_token_loss

    folder, lines = source
    model, tokenizer = _untied(folder)
    check = CheckLines(model, tokenizer, lines[:40], 24)  # lines longer than 24 tokens are read in windows
    assert head_alone_moves(model)
    passes = _body_passes(model)
    losses = []
    for seed in range(3):
        losses.append(check.loss())
        _move_head(model, seed)
    read_once = len(passes)
    assert read_once > 0
    losses.append(check.loss())
    assert len(passes) == read_once  # the later readings ran no block
    model2, _ = _untied(folder)
    for seed, loss in enumerate(losses):
        assert loss == pytest.approx(mean_token_loss(model2, tokenizer, lines[:40], 24), rel=1e-5)
        _move_head(model2, seed)
    assert len(set(round(loss, 4) for loss in losses)) == 4  # the head's moves changed the loss


def test_counted_lines_read_the_body_once_and_give_the_expected_counts_of_the_model_as_its_head_moves(source):
    from langswap.head_inputs import CountedLines, expected_counts

    folder, lines = source
    model, tokenizer = _untied(folder)
    counted = CountedLines(model, tokenizer, lines[:50], 32)
    first = counted.expected()
    passes = _body_passes(model)
    _move_head(model, 0)
    expected, counts, mean, positions = counted.expected()
    assert not passes
    want = expected_counts(model, tokenizer, lines[:50], 32)
    np.testing.assert_allclose(expected, want[0], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(counts, want[1])
    torch.testing.assert_close(mean, want[2])
    assert positions == want[3] == first[3]
    assert np.abs(expected - first[0]).max() > 1e-3


def test_a_tied_head_or_logits_changed_after_the_head_read_the_whole_model_each_time(source):
    from langswap.head_inputs import CheckLines, CountedLines, head_alone_moves, mean_token_loss
    from langswap.models import load_model, load_tokenizer

    folder, lines = source
    tied, tokenizer = load_model(folder), load_tokenizer(folder)
    assert not head_alone_moves(tied)
    check, counted = CheckLines(tied, tokenizer, lines[:20], 32), CountedLines(tied, tokenizer, lines[:20], 32)
    check.loss(), counted.expected()
    passes = _body_passes(tied)
    _move_head(tied, 1)  # moves the input rows too, and with them the hidden states
    loss = check.loss()
    counted.expected()
    assert len(passes) >= 2 and check.states is None and counted.states is None
    assert loss == pytest.approx(mean_token_loss(tied, tokenizer, lines[:20], 32), rel=1e-6)

    capped, _ = _untied(folder)
    capped.config.final_logit_softcapping = 30.0
    assert not head_alone_moves(capped)


def test_states_over_the_budget_are_not_kept_and_every_reading_runs_the_model(source, monkeypatch):
    import langswap.head_inputs as head_inputs

    folder, lines = source
    model, tokenizer = _untied(folder)
    monkeypatch.setattr(head_inputs, "BUDGET", 64)
    check = head_inputs.CheckLines(model, tokenizer, lines[:20], 32)
    counted = head_inputs.CountedLines(model, tokenizer, lines[:20], 32)
    loss, expected = check.loss(), counted.expected()[0]
    assert check.states is None and counted.states is None and not check.reuse and not counted.reuse
    assert loss == pytest.approx(head_inputs.mean_token_loss(model, tokenizer, lines[:20], 32))
    np.testing.assert_allclose(expected, head_inputs.expected_counts(model, tokenizer, lines[:20], 32)[0])


def test_the_expected_count_fit_and_the_separation_choose_and_move_as_they_do_reading_the_whole_model(source,
                                                                                                    monkeypatch):
    """The fit (both pseudo-counts, two rounds each) and the separation (every amount) read with the kept head inputs
    report the same check losses and leave the same rows as with the model read each time."""
    import langswap.head_inputs as head_inputs
    from langswap.transfer.calibrate import CalibrationConfig, count_fit, separate

    folder, lines = source
    target = [line.upper() for line in english_lines(260, seed=7)]
    config = CalibrationConfig(strength=1.0, check_lines=30, count_fit_lines=120, hidden_lines=60)

    def run():
        model, tokenizer = _untied(folder)
        moved = np.zeros(model.get_output_embeddings().weight.shape[0], dtype=bool)
        moved[::3] = True
        separation = separate(model, tokenizer, target, lines[:200], config, moved)
        fit = count_fit(model, tokenizer, target, lines[:200], config, moved)
        return separation, fit, model.get_output_embeddings().weight.detach().clone()

    kept = run()
    monkeypatch.setattr(head_inputs, "head_alone_moves", lambda model: False)
    each_time = run()
    assert kept[0].amount == each_time[0].amount and kept[1].smoothing == each_time[1].smoothing
    for amount, losses in kept[0].losses.items():
        assert losses.target == pytest.approx(each_time[0].losses[amount].target, abs=2e-4)
        assert losses.source == pytest.approx(each_time[0].losses[amount].source, abs=2e-4)
    for k, losses in kept[1].smoothings.items():
        assert losses.target == pytest.approx(each_time[1].smoothings[k].target, abs=2e-4)
    assert kept[1].kept == each_time[1].kept
    torch.testing.assert_close(kept[2], each_time[2], atol=1e-4, rtol=1e-4)


def test_the_loss_without_rows_is_the_source_models_own_and_leaves_out_what_they_would_predict(source):
    """An extension's new rows taken out of the softmax give back the source model's loss on lines that read none of
    them; a row the lines do predict is left out where it is the next token."""
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.head_inputs import mean_token_loss
    from langswap.models import load_model, load_tokenizer

    folder, lines = source
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    rows = model.get_output_embeddings().weight.shape[0]
    expected = mean_token_loss(model, tokenizer, lines[:20], 32)
    model.resize_token_embeddings(rows + 7)
    with torch.no_grad():
        model.get_input_embeddings().weight[rows:] = 3 * torch.randn(7, model.config.n_embd,
                                                                    generator=torch.Generator().manual_seed(0))
    new = torch.zeros(rows + 7, dtype=torch.bool)
    new[rows:] = True
    assert mean_token_loss(model, tokenizer, lines[:20], 32) > expected + 1e-3  # the new rows take probability
    assert mean_token_loss(model, tokenizer, lines[:20], 32, without_rows=new) == pytest.approx(expected, rel=1e-5)
    every = causal_lm_score(model, tokenizer, lines[:20], 32).tokens
    assert causal_lm_score(model, tokenizer, lines[:20], 32, without_rows=new).tokens == every
    new[tokenizer.convert_tokens_to_ids("Ġ")] = True
    assert causal_lm_score(model, tokenizer, lines[:20], 32, without_rows=new).tokens < every


@pytest.mark.parametrize("rows, bound_met", [("every third", False), ("the target's own", True)])
def test_the_separation_keeps_the_source_language_within_its_bound_of_the_source_model(source, rows, bound_met):
    """The amount chosen leaves the source-language check loss within `SOURCE_BOUND` of the source model's where any
    amount tried does (and is the best of those by the summed relative losses), otherwise the lowest there. Moving
    every third row moves rows the source-language lines need (no amount is within the bound); moving the tokens only
    the target text reads leaves amounts within it."""
    from langswap.transfer.calibrate import SOURCE_BOUND, CalibrationConfig, separate

    folder, lines = source
    target = [line.upper() for line in english_lines(260, seed=7)]
    model, tokenizer = _untied(folder)
    moved = np.zeros(model.get_output_embeddings().weight.shape[0], dtype=bool)
    if rows == "every third":
        moved[::3] = True
    else:
        read = {name: {i for line in text for i in tokenizer(line)["input_ids"]}
                for name, text in (("target", target), ("source", lines[:200]))}
        moved[sorted(read["target"] - read["source"])] = True
    report = separate(model, tokenizer, target, lines[:200], CalibrationConfig(strength=1.0, check_lines=30,
                                                                              hidden_lines=60), moved)
    assert report.source_model_loss is not None and report.source_bound == SOURCE_BOUND
    source = {float(amount): losses.source for amount, losses in report.losses.items()}
    within = [amount for amount, loss in source.items() if loss <= report.source_model_loss * (1 + SOURCE_BOUND)]
    assert bool(within) == bound_met
    if within:
        base = report.losses["0"]
        ranked = {amount: losses.target / base.target + losses.source / base.source
                  for amount, losses in ((float(a), v) for a, v in report.losses.items())}
        assert report.amount == min(within, key=ranked.get)
    else:
        assert report.amount == min(source, key=source.get)
    assert "against the source model's" in report.summary()
