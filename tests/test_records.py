"""Typed records: every record format langswap has written loads (tests/golden/records holds records as the
commands wrote them before records were typed), a rewrite keeps what it does not know, and no module but
`langswap.records` names a record file."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from langswap import records
from langswap.errors import MissingResourceError, ResourceFormatError
from langswap.modelcard import write_model_card
from langswap.records import (RECORD_VERSION, BenchResult, EnrichRecord, ModelRecord, TrainingSection, TrainRecord,
                              TransferRecord, read_bench_results, read_bench_variant, read_model_record,
                              read_train_record, write_model_record)

GOLDEN = Path(__file__).parent / "golden" / "records"
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "langswap"

# langswap.json of `langswap demo`'s model as demo/run.py wrote it: no version, no langswap_version, the table rows
DEMO_RECORD = {"method": "combined", "counts": {"special": 3, "copied": 10, "subword": 40},
               "alignment": {"joint_vectors": "fasttext-joint.bin", "precision_at_1": 0.41},
               "method_choice": {"chosen": "choose", "losses": {"choose": 8.1, "mix": 8.3}},
               "calibration": {"rows": 50, "strength": 1.0}, "metrics": {"kind": "perplexity",
                                                                          "bits_per_byte": 2.6},
               "demo": [{"model": "source", "bits_per_byte": 2.9}],
               "config": {"source_model": "/cache/SmolLM2-135M", "language": "de",
                          "method": {"name": "combined", "seed": 0}, "resources": {}, "eval_text": "de.test.txt",
                          "eval_lines": 300}}


def _folder(tmp_path: Path, name: str, data: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / records.MODEL_RECORD).write_text(json.dumps(data), encoding="utf-8")
    return folder


def test_a_transfer_record_of_the_untyped_format_loads_and_a_rewrite_keeps_it(tmp_path):
    data = json.loads((GOLDEN / "transfer-langswap.json").read_text(encoding="utf-8"))
    folder = _folder(tmp_path, "transfer", data)
    record = read_model_record(folder)
    assert isinstance(record, TransferRecord) and record.kind == "transfer" and record.version == 0
    assert record.method == data["method"] and record.counts == data["counts"] and record.extra == {}
    assert record.config["source_model"] == data["config"]["source_model"] and record.training is None
    assert record.calibration.skipped == data["calibration"]["skipped"] and record.calibration.rows is None
    assert record.calibration.as_dict() == data["calibration"] and record.resource_keys == data["resource_keys"]
    write_model_record(folder, record)
    again = json.loads((folder / records.MODEL_RECORD).read_text(encoding="utf-8"))
    assert again["version"] == RECORD_VERSION and again["kind"] == "transfer"
    assert {key: again[key] for key in data} == data  # every key as it was


def test_a_trained_models_record_loads_with_its_training_section(tmp_path):
    data = json.loads((GOLDEN / "trained-langswap.json").read_text(encoding="utf-8"))
    record = read_model_record(_folder(tmp_path, "model", data))
    assert isinstance(record, TransferRecord) and isinstance(record.training, TrainingSection)
    assert [phase.as_dict() for phase in record.training.phases] == data["training"]["phases"]
    assert record.training.step is None
    assert record.training.objective == "causal" and record.training.version == 0
    # a model langswap only trained: the training section alone
    alone = read_model_record(_folder(tmp_path, "plain", {"training": data["training"]}))
    assert type(alone) is ModelRecord and alone.kind == "trained" and alone.trained


def test_an_enrich_record_of_the_untyped_format_loads(tmp_path):
    data = json.loads((GOLDEN / "enrich-langswap.json").read_text(encoding="utf-8"))
    record = read_model_record(_folder(tmp_path, "enrich", data))
    assert isinstance(record, EnrichRecord) and record.kind == "enrich" and record.version == 0
    assert record.enrich.method == data["enrich"]["method"] and record.change_norm.as_dict() == data["change_norm"]
    assert record.counts["rows_changed"] == data["counts"]["rows_changed"] and record.extra == {}


def test_the_demos_record_without_a_version_loads_as_a_transfer_record_and_gets_a_card(tmp_path):
    folder = _folder(tmp_path, "demo", DEMO_RECORD)
    record = read_model_record(folder)
    assert isinstance(record, TransferRecord) and record.version == 0 and record.langswap_version is None
    assert record.demo == DEMO_RECORD["demo"] and record.method_choice.chosen == "choose"
    card = write_model_card(folder).read_text(encoding="utf-8")
    assert "(combined)" in card and "Candidates: kept choose" in card


def test_a_train_record_of_the_untyped_format_loads(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(GOLDEN / "train-langswap-train.json", folder / records.TRAIN_RECORD)
    data = json.loads((folder / records.TRAIN_RECORD).read_text(encoding="utf-8"))
    record = read_train_record(folder)
    assert isinstance(record, TrainRecord) and record.version == 0 and record.status == "complete"
    assert record.steps == data["steps"] and [phase.as_dict() for phase in record.phases] == data["phases"]
    assert record.phases[0].steps == data["phases"][0]["steps"] and record.phases[0].loop_seconds is None
    assert record.comparable_config == data["comparable_config"] and record.failure is None


def test_bench_variants_and_results_of_the_untyped_format_load(tmp_path):
    shutil.copy(GOLDEN / "bench-variant.json", tmp_path / records.BENCH_VARIANT)
    variant = read_bench_variant(tmp_path)
    data = json.loads((GOLDEN / "bench-variant.json").read_text(encoding="utf-8"))
    assert variant.label == data["label"] and variant.version == 0 and variant.inputs() == data
    assert read_bench_variant(tmp_path / "elsewhere") is None
    shutil.copy(GOLDEN / "bench-results.jsonl", tmp_path / records.BENCH_RESULTS)
    lines = [json.loads(line) for line in (GOLDEN / "bench-results.jsonl").read_text().splitlines()]
    results = read_bench_results(tmp_path)
    assert [result.variant for result in results] == [line["variant"] for line in lines]
    assert results[0].metrics["bits_per_byte"] == lines[0]["bits_per_byte"]
    assert {key: value for key, value in results[1].as_dict().items() if key != "version"} == lines[1]
    records.append_bench_result(tmp_path, BenchResult(variant="x", method="overlap", step=0,
                                                      metrics={"bits_per_byte": 2.0}))
    assert read_bench_results(tmp_path)[-1].version == RECORD_VERSION


def test_keys_of_a_newer_record_survive_a_rewrite_and_damaged_records_are_refused(tmp_path):
    folder = _folder(tmp_path, "newer", {"kind": "transfer", "version": 99, "method": "overlap",
                                          "a_later_field": {"x": 1}})
    record = read_model_record(folder)
    assert record.extra == {"a_later_field": {"x": 1}}
    write_model_record(folder, record)
    rewritten = json.loads((folder / records.MODEL_RECORD).read_text())
    assert rewritten["a_later_field"] == {"x": 1} and rewritten["version"] == 99  # not lowered to this one's
    # a null where a mapping belongs reads as the empty one
    (folder / records.MODEL_RECORD).write_text(json.dumps({"kind": "transfer", "config": None, "counts": None}))
    assert read_model_record(folder).config == {} and read_model_record(folder).counts == {}
    (folder / records.MODEL_RECORD).write_text("{not json", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="not a langswap record"):
        read_model_record(folder)
    (folder / records.MODEL_RECORD).write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="no JSON object"):
        read_model_record(folder)
    with pytest.raises(MissingResourceError):
        read_train_record(tmp_path / "nowhere")


def test_no_module_but_records_names_a_record_file():
    names = {records.MODEL_RECORD, records.TRAIN_RECORD, records.BENCH_VARIANT, records.BENCH_RESULTS,
             records.BENCH_SHARED_INPUTS}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "records.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}")
    assert not found, "record file names written outside langswap.records: " + "; ".join(found)
