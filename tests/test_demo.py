"""`langswap demo` runs each method through the transfer's own steps (here with a tiny model in SmolLM2's place):
the table's rows, and the saved model with its record and card."""

from __future__ import annotations

import pytest

from langswap.demo.run import DemoConfig, run_demo
from langswap.errors import ConfigError
from langswap.records import TransferRecord, read_model_record


def test_the_demo_runs_the_transfers_steps_and_writes_the_default(tmp_path, gpt2_folder, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import langswap.demo.run as demo_run

    monkeypatch.setattr(demo_run, "smollm2_135m", lambda progress=False: gpt2_folder)
    printed = []
    result = run_demo(DemoConfig(vocab_size=400, eval_lines=20, workdir=str(tmp_path)), out=printed.append)
    models = [row["model"] for row in result["rows"]]
    assert models == ["source model, its own tokenizer", "overlap", "combined", "combined, without calibration"]
    rows = {row["model"]: row for row in result["rows"]}
    assert all(row["bits_per_byte"] > 0 and row["tokens"] > 0 for row in rows.values())
    # the tiny random model's calibration is put back by its own check; the row says which
    assert "calibrat" in rows["combined"]["counts"] and "calibrat" in rows["overlap"]["counts"]
    assert "calibrat" not in rows["combined, without calibration"]["counts"]
    output = tmp_path / "smollm2-135m-de-combined"
    model = AutoModelForCausalLM.from_pretrained(output)
    record = read_model_record(output)
    assert isinstance(record, TransferRecord) and record.method == "combined" and record.demo == result["rows"]
    assert record.config["calibration"]["text"].endswith("de.train.txt.gz") and record.calibration.check is not None
    assert record.metrics.bits_per_byte == rows["combined"]["bits_per_byte"]
    # the check a transfer makes: every row it copied is one the independent count finds, and no warning
    assert record.matching.agree == record.matching.copied_whole > 0 and record.matching.warnings == []
    assert model.get_input_embeddings().weight.shape[0] == len(AutoTokenizer.from_pretrained(output))
    text = "\n".join(map(str, printed))
    assert "1/4 source model" in text and "| combined |" in text and f"wrote {output}" in text
    # a rerun reuses every row and the written model: it neither loads the model nor runs a transfer
    def refuse(*args, **kwargs):
        raise AssertionError("a rerun ran a transfer step")

    monkeypatch.setattr(demo_run, "run_steps", refuse)
    monkeypatch.setattr(demo_run, "load", refuse)
    before = len(printed)
    again = run_demo(DemoConfig(vocab_size=400, eval_lines=20, workdir=str(tmp_path)), out=printed.append)
    assert again["rows"] == result["rows"]
    assert sum("reused" in str(line) for line in printed[before:]) == 4  # the tokenizer and three rows
    # another option is another row: overlap alone is reused, its model (now the one saved) made again
    monkeypatch.undo()
    monkeypatch.setattr(demo_run, "smollm2_135m", lambda progress=False: gpt2_folder)
    third = run_demo(DemoConfig(vocab_size=400, eval_lines=20, workdir=str(tmp_path), methods="overlap"),
                     out=printed.append)
    assert third["rows"][1] == result["rows"][1]
    assert read_model_record(tmp_path / "smollm2-135m-de-overlap").method == "overlap"


def test_a_method_that_needs_vectors_asks_for_them(tmp_path):
    with pytest.raises(ConfigError, match="vectors=joint"):
        run_demo(DemoConfig(methods="wechsel", workdir=str(tmp_path)), out=lambda *_: None)
    assert DemoConfig(full=True).resolved().vectors == "joint"
    assert DemoConfig(full=True).resolved().methods == "random,overlap,wechsel,combined"


def test_without_calibration_the_rows_say_so_and_redo_measures_again(tmp_path, gpt2_folder, monkeypatch):
    import langswap.demo.run as demo_run

    monkeypatch.setattr(demo_run, "smollm2_135m", lambda progress=False: gpt2_folder)
    config = DemoConfig(vocab_size=400, eval_lines=10, workdir=str(tmp_path), methods="combined", calibrate=0.0)
    rows = run_demo(config, out=lambda *_: None)["rows"]
    assert [row["model"] for row in rows] == ["source model, its own tokenizer", "combined, without calibration"]
    printed = []
    import dataclasses

    assert run_demo(dataclasses.replace(config, redo=True), out=printed.append)["rows"] == rows
    assert not any("reused" in str(line) for line in printed)  # the tokenizer trained and the rows measured again
