"""Typed reports (`langswap.reports`): each reads the JSON the records hold, older shapes included, and writes it
back as it was; a value carried between steps is never written; the summaries read attributes."""

from __future__ import annotations

import json

import pytest

from langswap.errors import ResourceFormatError
from langswap.records import TransferRecord
from langswap.reports import (CalibrationReport, DistillationReport, EvaluationMetrics, InputRows, MatchingReport,
                              MethodChoice, PhaseReport, SeparationReport, Spread, TextPair, VocabularyReport)

CALIBRATION = {"rows": 9983, "strength": 1.0, "slope": 1.0, "through": "head rows along the mean hidden state",
               "rounds": [{"mean_abs_distance": 1.2}],
               "frequencies": {"estimate": "held-out", "per_count": {"0": {"tokens": 3, "frequency": 1e-5}}},
               "up_only_rows": {"rows": 412, "below_count": 2},
               "input_rows": {"moved": 9983, "relative_shift": {"median": 0.08, "p90": 0.2, "max": 0.9}},
               "check": {"lines": 32, "loss_before": 5.1, "loss_after": 4.9}, "text": "de.train.txt"}


def test_a_report_reads_its_json_into_nested_types_and_writes_it_back_as_it_was():
    report = CalibrationReport.from_dict(CALIBRATION)
    assert isinstance(report.input_rows, InputRows) and isinstance(report.input_rows.relative_shift, Spread)
    assert report.input_rows.relative_shift.p90 == 0.2 and report.check.loss_after == 4.9
    assert report.frequencies.estimate == "held-out" and report.frequencies.extra == {"per_count": {
        "0": {"tokens": 3, "frequency": 1e-5}}}  # a key no reader needs rides along
    assert report.as_dict() == CALIBRATION
    assert json.loads(json.dumps(report.as_dict())) == CALIBRATION


def test_a_key_this_langswap_does_not_know_survives_and_a_missing_one_is_none():
    data = {"rows": 3, "from_a_newer_langswap": {"x": 1}}
    report = CalibrationReport.from_dict(data)
    assert report.rows == 3 and report.strength is None and report.extra == {"from_a_newer_langswap": {"x": 1}}
    assert report.as_dict() == data


def test_an_older_calibration_record_names_its_estimate_smoothing():
    older = CalibrationReport.from_dict({"rows": 5, "strength": 1.0, "smoothing": {"smoothing": 0.5}})
    assert older.estimate.smoothing == 0.5 and "counts smoothed by 0.5" in older.summary()
    assert older.as_dict() == {"rows": 5, "strength": 1.0, "smoothing": {"smoothing": 0.5}}


def test_the_loss_a_step_leaves_for_the_candidate_choice_is_never_written():
    report = CalibrationReport(rows=4, strength=1.0, held_out_loss=3.25)
    assert "held_out_loss" not in report.as_dict()
    assert CalibrationReport.from_dict({"rows": 4, "held_out_loss": 3.25}).held_out_loss is None  # not read either


def test_fields_whose_none_says_something_are_written():
    separation = SeparationReport(rows=0, amount=0.0, direction_accuracy_held_out=None)
    assert separation.as_dict() == {"rows": 0, "amount": 0.0, "direction_accuracy_held_out": None}
    assert EvaluationMetrics(kind="masked-lm-loss", lines=3).as_dict()["bits_per_byte"] is None


def test_a_mapping_of_reports_reads_each_value():
    data = {"rows": 40, "amount": 1.0, "losses": {"0": {"target": 4.1, "source": 3.0},
                                                   "1": {"target": 4.0, "source": 3.05}},
            "direction_accuracy_held_out": 0.93, "check_lines": {"target": 30, "source": 30}}
    report = SeparationReport.from_dict(data)
    assert report.losses["1"] == TextPair(target=4.0, source=3.05) and report.check_lines.source == 30
    assert report.as_dict() == data
    assert "check losses target / source: 0: 4.1 / 3.0, 1: 4.0 / 3.05" in report.summary()


def test_a_record_holds_typed_reports_and_reads_each_shape():
    record = TransferRecord.from_dict({"method": "combined", "calibration": CALIBRATION,
                                       "method_choice": {"chosen": "mix", "by": "held-out loss",
                                                         "losses": {"mix": 4.2, "choose": None}},
                                       "vocabulary": {"mode": "extended", "kept": 10, "new": [10, 19],
                                                      "padding": None, "rows": 20, "source_rows": 10},
                                       "matching": {"skipped": "an extended vocabulary keeps every source token"},
                                       "distillation": {"skipped": "distill.tokens is 0", "tokens": 0,
                                                        "updates": 0}})
    assert isinstance(record.calibration, CalibrationReport) and record.calibration.rows == 9983
    assert isinstance(record.method_choice, MethodChoice) and record.method_choice.summary().startswith("kept mix")
    assert isinstance(record.vocabulary, VocabularyReport) and record.vocabulary.extended
    assert "10 new tokens at ids 10-19" in record.vocabulary.summary()
    assert isinstance(record.matching, MatchingReport) and record.matching.summary() is None
    assert isinstance(record.distillation, DistillationReport) and record.distillation.summary() == (
        "none (distill.tokens is 0)")
    assert record.as_dict()["calibration"] == CALIBRATION


def test_a_phase_reads_its_summary_and_its_teacher():
    phase = PhaseReport.from_dict({"name": "1-embeddings", "trainable": "embeddings", "steps": 200,
                                   "learning_rate": 5e-4, "train_loss": 6.40502, "trainable_parameters": 5048064,
                                   "teacher": {"used": False, "check": {"teacher_worse": True}}})
    assert phase.teacher.used is False and phase.teacher.check == {"teacher_worse": True}
    assert phase.summary() == ("Phase `1-embeddings`: embeddings trained, 200 updates, peak rate 0.0005, mean "
                               "training loss 6.4050")


def test_a_report_that_is_not_an_object_is_a_clear_error():
    with pytest.raises(ResourceFormatError, match="calibration is not a langswap report"):
        CalibrationReport.from_dict([1, 2], "calibration")
