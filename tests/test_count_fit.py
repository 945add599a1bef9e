"""Calibration's expected-count fit (`calibration.count_fit`): the moved rows' expected counts meet their counts."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import byte_level_tokenizer, cipher_word, english_lines, save_model, tiny_model

from langswap.errors import ConfigError


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """A tiny gpt2 (tied head) on an English byte-level tokenizer, that tokenizer extended by 40 ciphered-English
    tokens, and the two texts."""
    from langswap.models import save_tokenizer
    from langswap.resources.extension import extend_tokenizer

    source_lines = english_lines(800)
    target_lines = [" ".join(cipher_word(word) for word in line.split()) for line in english_lines(1200, seed=5)]
    folder = tmp_path_factory.mktemp("count-fit")
    tokenizer = byte_level_tokenizer(source_lines)
    source = save_model(tiny_model("gpt2", len(tokenizer)), tokenizer, folder / "source")
    save_tokenizer(extend_tokenizer(tokenizer, target_lines, 40).tokenizer, folder / "extended")
    (folder / "xx.txt").write_text("\n".join(target_lines) + "\n", encoding="utf-8")
    (folder / "en.txt").write_text("\n".join(source_lines) + "\n", encoding="utf-8")
    return {"source": source, "extended": folder / "extended", "kept": len(tokenizer), "text": folder / "xx.txt",
            "source_text": folder / "en.txt", "target_lines": target_lines, "source_lines": source_lines}


def _transfer(pair, output, **calibration):
    from langswap.transfer import transfer, transfer_config

    return transfer(transfer_config({
        "source_model": str(pair["source"]), "target_tokenizer": str(pair["extended"]), "output": str(output),
        "method": "fvt", "target_text": str(pair["text"]), "held_out_lines": 30,
        "calibration": {"strength": 1.0, "hidden_lines": 60, "count_fit_lines": 200, **calibration}}))


def test_expected_counts_are_the_summed_probabilities_and_the_counts_the_tokens_that_follow(pair):
    """Against a line-by-line reading: every position but a line's last adds its softmax to the expected counts and
    the next token to the counts; the mean head input is over the same positions."""
    import torch

    from langswap.models import load_model, load_tokenizer
    from langswap.head_inputs import expected_counts

    model, tokenizer = load_model(pair["source"]), load_tokenizer(pair["source"])
    lines = pair["source_lines"][:12]
    expected, counts, mean, positions = expected_counts(model, tokenizer, lines, 32, chunk=7)
    size = model.get_output_embeddings().weight.shape[0]
    want_expected, want_counts, states = np.zeros(size), np.zeros(size), []
    captured = {}
    handle = model.get_output_embeddings().register_forward_pre_hook(
        lambda module, args: captured.__setitem__("h", args[0].detach()))
    with torch.no_grad():
        for ids in tokenizer(lines, truncation=True, max_length=32)["input_ids"]:
            logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
            want_expected += torch.softmax(logits.double(), -1).sum(0).numpy()
            np.add.at(want_counts, ids[1:], 1)
            states.append(captured["h"][0, :-1])
    handle.remove()
    assert positions == int(want_counts.sum()) == sum(len(s) for s in states)
    np.testing.assert_allclose(expected, want_expected, atol=1e-4)
    np.testing.assert_array_equal(counts, want_counts)
    torch.testing.assert_close(mean, torch.cat(states).mean(0), atol=1e-5, rtol=1e-4)
    assert expected.sum() == pytest.approx(positions, rel=1e-5)


def test_the_counted_lines_are_spread_over_the_text():
    from langswap.transfer.calibrate import spread_lines

    lines = [str(index) for index in range(1000)]
    assert spread_lines(lines, 10) == [str(index) for index in range(0, 1000, 100)]
    assert spread_lines(lines, 2000) == lines and len(spread_lines(lines, 300)) == 300


def test_the_direction_adds_one_at_the_target_mean_and_nothing_at_the_source_mean():
    import torch

    from langswap.transfer.calibrate import count_fit_direction

    generator = torch.Generator().manual_seed(0)
    target, source = torch.randn(16, generator=generator), torch.randn(16, generator=generator)
    both = count_fit_direction(target, source)
    assert float(both @ target) == pytest.approx(1.0, abs=1e-5) and float(both @ source) == pytest.approx(0.0, abs=1e-5)
    alone = count_fit_direction(target)
    assert float(alone @ target) == pytest.approx(1.0, abs=1e-6)
    torch.testing.assert_close(alone, target / target.dot(target))


def test_the_fit_moves_each_row_by_its_log_ratio_and_keeps_the_move_or_puts_it_back(pair):
    """Direct, an untied head (only the output rows move): the added logit at the target's mean head input is
    log((n + k) / (E + k)) on the moved rows and 0 elsewhere, and the kept move is a round of calibration's move file;
    where the check lines read worse than before, the rows are put back."""
    import torch

    from langswap.calibration_move import CalibrationMove
    from langswap.models import load_model, load_tokenizer
    from langswap.head_inputs import expected_counts
    from langswap.transfer.calibrate import CalibrationConfig, count_fit, spread_lines, untie_head

    model = load_model(pair["source"])
    untie_head(model)
    tokenizer = load_tokenizer(pair["source"])
    size = model.get_output_embeddings().weight.shape[0]
    moved = np.ones(size, dtype=bool)
    moved[:3] = False
    target = pair["target_lines"][:260]
    config = CalibrationConfig(strength=1.0, check_lines=30, count_fit_lines=120, hidden_lines=60, count_fit_rounds=1,
                               count_fit_smoothing=0.5)
    counted = spread_lines(target[:-30], 120)
    expected, counts, mean_target, _ = expected_counts(model, tokenizer, counted, config.max_length)
    before = model.get_output_embeddings().weight.detach().clone()
    move = CalibrationMove([], [], np.zeros(size, dtype=np.int64), tied=False)
    report = count_fit(model, tokenizer, target, [], config, moved, move=move)
    after = model.get_output_embeddings().weight.detach().clone()
    assert report.kept, report.losses
    assert report.rows == int(moved.sum()) and report.losses["before"].source is None and report.smoothings is None
    assert report.losses["after"].target < report.losses["before"].target
    assert report.held_out_loss == pytest.approx(report.losses["after"].target, abs=1e-4)
    added = (after - before).double()
    want = np.where(moved, np.log((counts + 0.5) / (expected + 0.5)), 0.0)
    np.testing.assert_allclose((added @ mean_target.double()).numpy(), want, atol=2e-4)
    assert torch.equal(after[:3], before[:3])
    assert len(move.logits) == 1 and np.allclose(move.logits[0], want, atol=1e-5)
    assert report.surplus == pytest.approx(float((expected[moved] - counts[moved]).sum()) / report.positions, abs=1e-4)

    # a check loss before the move that no model reaches: the move reads the check lines worse and is put back
    worse = count_fit(model, tokenizer, target, [], config, moved, target_loss=1e-6, move=move)
    assert not worse.kept and worse.held_out_loss == 1e-6
    assert torch.equal(model.get_output_embeddings().weight, after) and len(move.logits) == 1


def test_each_round_counts_again_and_brings_the_expected_counts_nearer_the_counts(pair):
    import dataclasses

    from langswap.models import load_model, load_tokenizer
    from langswap.head_inputs import expected_counts
    from langswap.transfer.calibrate import CalibrationConfig, count_fit, spread_lines, untie_head

    tokenizer = load_tokenizer(pair["source"])
    target = pair["target_lines"][:260]
    config = CalibrationConfig(strength=1.0, check_lines=30, count_fit_lines=120, hidden_lines=60, count_fit_rounds=1,
                               count_fit_smoothing=0.5)
    gaps = {}
    for rounds in (1, 2):
        model = load_model(pair["source"])
        untie_head(model)
        moved = np.ones(model.get_output_embeddings().weight.shape[0], dtype=bool)
        report = count_fit(model, tokenizer, target, [], dataclasses.replace(config, count_fit_rounds=rounds), moved,
                           target_loss=1e6)  # kept whatever the check lines say
        assert report.kept and len(report.surplus_by_round) == rounds
        expected, counts, _, _ = expected_counts(model, tokenizer, spread_lines(target[:-30], 120), config.max_length)
        gaps[rounds] = float(np.abs(expected - counts).sum())
    assert gaps[2] < gaps[1]


def test_unset_the_pseudo_count_is_chosen_on_the_check_lines_and_fits_as_that_pseudo_count_given(pair):
    """Each candidate is fitted from the same start: the report gives each one's check losses, the chosen one reads
    both texts' check lines best (summed relative to before), and the rows it leaves are the rows that pseudo-count
    given alone leaves."""
    import torch

    from langswap.models import load_model, load_tokenizer
    from langswap.transfer.calibrate import COUNT_FIT_SMOOTHINGS, CalibrationConfig, count_fit, untie_head

    tokenizer = load_tokenizer(pair["source"])
    target = pair["target_lines"][:260]
    config = CalibrationConfig(strength=1.0, check_lines=30, count_fit_lines=120, hidden_lines=60)
    assert config.count_fit_smoothing is None and len(COUNT_FIT_SMOOTHINGS) > 1

    def fitted(target_loss=None, **options):
        model = load_model(pair["source"])
        untie_head(model)
        moved = np.ones(model.get_output_embeddings().weight.shape[0], dtype=bool)
        report = count_fit(model, tokenizer, target, pair["source_lines"][:200],
                           CalibrationConfig(**{**config.__dict__, **options}), moved, target_loss=target_loss)
        return model.get_output_embeddings().weight.detach().clone(), report

    _, chosen = fitted()  # both texts' losses measured before
    assert set(chosen.smoothings) == {f"{k:g}" for k in COUNT_FIT_SMOOTHINGS}
    before = chosen.losses["before"]

    def relative(loss):
        return loss.target / before.target + loss.source / before.source

    best = min(chosen.smoothings, key=lambda k: relative(chosen.smoothings[k]))
    assert chosen.smoothing == float(best) and chosen.losses["after"] == chosen.smoothings[best]
    assert chosen.kept == (relative(chosen.smoothings[best]) < 2)

    rows, forced = fitted(target_loss=1e6)  # kept whatever the check lines say
    assert forced.kept and f"pseudo-count {forced.smoothing:g} (chosen among 0.5, 5" in forced.summary()
    alone_rows, alone = fitted(target_loss=1e6, count_fit_smoothing=forced.smoothing)
    assert alone.smoothings is None and alone.losses["after"] == forced.losses["after"]
    torch.testing.assert_close(rows, alone_rows)
    other = next(k for k in COUNT_FIT_SMOOTHINGS if k != forced.smoothing)
    other_rows, other_report = fitted(target_loss=1e6, count_fit_smoothing=other)
    assert other_report.losses["after"] == forced.smoothings[f"{other:g}"] and not torch.equal(rows, other_rows)


def test_an_extension_is_fitted_by_default_and_records_it_and_a_replacement_only_on_request(pair, tmp_path):
    """auto: a transfer into an extension fits the new rows (never a source row: both matrices keep them bitwise),
    the record and the model card say so, and the written model reads the check lines as the report says; a
    replacement is not fitted unless count_fit is on; off turns it off."""
    import torch

    from langswap.models import load_model, load_tokenizer
    from langswap.records import read_model_record
    from langswap.transfer.calibrate import mean_token_loss

    _transfer(pair, tmp_path / "extended")
    record = read_model_record(tmp_path / "extended")
    fit = record.count_fit
    assert fit is not None and fit.rows == 40 and fit.lines == 200 and fit.smoothing in (0.5, 5.0)
    assert set(fit.smoothings) == {"0.5", "5"}
    model = load_model(tmp_path / "extended")
    source = load_model(pair["source"])
    kept = pair["kept"]
    assert torch.equal(model.get_input_embeddings().weight[:kept], source.get_input_embeddings().weight)
    assert torch.equal(model.get_output_embeddings().weight[:kept], source.get_output_embeddings().weight)
    loss = mean_token_loss(model, load_tokenizer(tmp_path / "extended"), pair["target_lines"][-30:], 128)
    assert loss == pytest.approx((fit.losses["after"] if fit.kept else fit.losses["before"]).target, abs=2e-4)
    assert "Fitted to the counts" in (tmp_path / "extended" / "README.md").read_text(encoding="utf-8")

    _transfer(pair, tmp_path / "off", count_fit="off")
    assert read_model_record(tmp_path / "off").count_fit is None
    from langswap.transfer import transfer, transfer_config
    replaced = {"source_model": str(pair["source"]), "target_text": str(pair["text"]), "vocab_size": 300,
                "method": "fvt", "held_out_lines": 30, "calibration": {"strength": 1.0, "count_fit_lines": 100}}
    transfer(transfer_config({**replaced, "output": str(tmp_path / "replaced")}))
    assert read_model_record(tmp_path / "replaced").count_fit is None
    transfer(transfer_config({**replaced, "output": str(tmp_path / "replaced-on"),
                              "calibration": {**replaced["calibration"], "count_fit": "on"}}))
    fitted = read_model_record(tmp_path / "replaced-on").count_fit
    assert fitted is not None and fitted.rows > 0 and fitted.losses["before"].source is None


def test_bad_count_fit_settings_are_refused_with_what_to_give():
    from langswap.transfer.calibrate import CalibrationConfig

    with pytest.raises(ConfigError, match="choose auto, on or off"):
        CalibrationConfig(count_fit="yes")
    with pytest.raises(ConfigError, match="count_fit_lines and count_fit_rounds must be at least 1"):
        CalibrationConfig(count_fit_lines=0)
    with pytest.raises(ConfigError, match="count_fit_lines and count_fit_rounds must be at least 1"):
        CalibrationConfig(count_fit_rounds=0)
    with pytest.raises(ConfigError, match="pseudo-count above 0"):
        CalibrationConfig(count_fit_smoothing=0.0)


def test_given_the_source_positions_the_direction_varies_least_over_them():
    """`count_fit_direction` with the source-language positions' head inputs: the same two constraints, and over
    those positions it varies less than the least-norm direction does."""
    import torch

    from langswap.transfer.calibrate import count_fit_direction

    generator = torch.Generator().manual_seed(1)
    states = torch.randn(400, 16, generator=generator) * torch.linspace(0.1, 3.0, 16) + 0.5
    target = torch.randn(16, generator=generator)
    source = states.mean(0)
    least = count_fit_direction(target, source, states)
    assert float(least @ target) == pytest.approx(1.0, abs=1e-4) and float(least @ source) == pytest.approx(0.0, abs=1e-4)
    plain = count_fit_direction(target, source)
    assert float((states @ least).std()) < float((states @ plain).std())


def test_an_extension_with_source_text_also_tries_the_fit_over_the_source_rows(pair):
    """`source_rows`: the fit is also made over the new and the source rows together; the report gives each such
    fit's check losses; what is kept is the admissible fit (the source-language check loss risen by at most
    SOURCE_ROWS_RISE) that reads both texts best, and where it is not the one over the source rows, those rows stay
    bitwise as they were."""
    import torch

    from langswap.models import load_model, load_tokenizer
    from langswap.transfer.calibrate import SOURCE_ROWS_RISE, CalibrationConfig, count_fit, untie_head

    tokenizer = load_tokenizer(pair["extended"])
    size = len(tokenizer)
    kept = pair["kept"]
    config = CalibrationConfig(strength=1.0, check_lines=30, count_fit_lines=120, hidden_lines=60)
    model = load_model(pair["source"])
    model.resize_token_embeddings(size)
    untie_head(model)
    start = model.get_output_embeddings().weight.detach().clone()
    new = np.arange(size) >= kept
    report = count_fit(model, tokenizer, pair["target_lines"][:260], pair["source_lines"][:200], config, new,
                       target_loss=1e6, source_rows=~new)
    assert set(report.with_source_rows) == set(report.smoothings) == {"0.5", "5"}
    before = report.losses["before"]
    fits = {("new", k): v for k, v in report.smoothings.items()} | {("all", k): v for k, v in
                                                                    report.with_source_rows.items()}
    admissible = {key: v for key, v in fits.items()
                  if key[0] == "new" or v.source <= before.source * (1 + SOURCE_ROWS_RISE)}
    rows, k = min(admissible, key=lambda key: admissible[key].target / before.target
                  + admissible[key].source / before.source)
    assert report.losses["after"] == fits[rows, k] and f"{report.smoothing:g}" == k
    weight = model.get_output_embeddings().weight.detach()
    if rows == "all":
        assert report.source_rows == kept and report.rows == size and "source model's own" in report.summary()
    else:
        assert report.source_rows == 0 and torch.equal(weight[:kept], start[:kept])
        assert "was not chosen" in report.summary()


def test_with_the_bound_lifted_a_fit_over_the_source_rows_can_be_chosen_and_is_put_back_unless_it_pays(pair,
                                                                                                   monkeypatch):
    """With the bound on the source-language check loss lifted, the fits over the source rows are admissible and
    the one that reads the check lines best is chosen (here the fit over every row), reported with its rows and
    direction; like any fit it stays only where the two texts' check losses summed relative to before went down, and
    put back it leaves every row as it was."""
    import torch

    import langswap.transfer.calibrate as calibrate_module
    from langswap.models import load_model, load_tokenizer
    from langswap.transfer.calibrate import CalibrationConfig, count_fit, untie_head

    monkeypatch.setattr(calibrate_module, "SOURCE_ROWS_RISE", 10.0)
    tokenizer = load_tokenizer(pair["extended"])
    size, kept = len(tokenizer), pair["kept"]
    model = load_model(pair["source"])
    model.resize_token_embeddings(size)
    untie_head(model)
    start = model.get_output_embeddings().weight.detach().clone()
    new = np.arange(size) >= kept
    report = count_fit(model, tokenizer, pair["target_lines"][:260], pair["source_lines"][:200],
                       CalibrationConfig(strength=1.0, check_lines=30, count_fit_lines=120, hidden_lines=60), new,
                       source_rows=~new)
    before = report.losses["before"]

    def relative(loss):
        return loss.target / before.target + loss.source / before.source

    fits = {("new", k): relative(v) for k, v in report.smoothings.items()}
    fits |= {("all", k): relative(v) for k, v in report.with_source_rows.items()}
    rows, k = min(fits, key=fits.get)
    assert rows == "all" and f"{report.smoothing:g}" == k  # this tiny model's best fit moves the source rows
    assert report.source_rows == kept and report.rows == size
    assert "least variance over the source-language positions" in report.direction
    assert report.kept == (fits[rows, k] < 2)
    if not report.kept:
        assert torch.equal(model.get_output_embeddings().weight, start) and "put back" in report.summary()


def test_on_a_self_extension_offers_the_source_rows_without_source_text_and_judges_on_the_target_alone(pair,
                                                                                                        tmp_path):
    """count_fit_source_rows: on, with no source-language text (a self-extension): the fits over every row are
    tried along the target text's mean head input beside those over the new rows, and the one that reads the target
    check lines best is kept (no source-language bound to meet); the record says which, and where it is the fit
    over every row, the source rows moved."""
    import torch

    from langswap.models import load_model
    from langswap.records import read_model_record

    _transfer(pair, tmp_path / "on", count_fit_source_rows="on")
    fit = read_model_record(tmp_path / "on").count_fit
    assert set(fit.with_source_rows) == set(fit.smoothings) == {"0.5", "5"}
    assert fit.losses["before"].source is None and "least variance" not in fit.direction
    tried = {("new", k): v.target for k, v in fit.smoothings.items()}
    tried |= {("all", k): v.target for k, v in fit.with_source_rows.items()}
    rows, k = min(tried, key=tried.get)
    assert f"{fit.smoothing:g}" == k and fit.losses["after"].target == tried[rows, k]
    kept = pair["kept"]
    moved = not torch.equal(load_model(tmp_path / "on").get_output_embeddings().weight[:kept],
                            load_model(pair["source"]).get_output_embeddings().weight)
    assert moved == (fit.kept and rows == "all") and fit.source_rows == (kept if rows == "all" else 0)
