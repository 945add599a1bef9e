"""One writer per output folder: a second process is refused, a dead holder's lock is taken over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import byte_level_tokenizer, english_lines, save_model, tiny_model, unwrapped
from langswap.errors import OutputLockedError
from langswap.locking import OutputLock, lock_path

HOLD = """
import sys, time
from langswap.locking import OutputLock
lock = OutputLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def _hold_in_child(output: Path) -> subprocess.Popen:
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(output)], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_second_holder_is_refused_with_the_holder_named(tmp_path):
    output = tmp_path / "run"
    with OutputLock(output, "training output folder"):
        assert lock_path(output).is_file() and not output.exists()  # beside the folder, before it exists
        with pytest.raises(OutputLockedError) as caught:
            OutputLock(output).acquire()
    message = str(caught.value)
    for expected in ("'" + str(output) + "'", f"pid {os.getpid()}", "on host", "started", "running `", "Wait for"):
        assert expected in message, expected
    assert not lock_path(output).exists()  # a clean release leaves nothing beside the output
    with OutputLock(output) as lock:
        assert lock.took_over is None  # a clean release is no dead holder


def test_a_killed_holders_lock_is_taken_over_and_said(tmp_path, caplog):
    output = tmp_path / "run"
    child = _hold_in_child(output)
    with pytest.raises(OutputLockedError, match=f"pid {child.pid}"):
        OutputLock(output).acquire()
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert lock_path(output).exists()  # SIGKILL left the file, but the kernel released the lock
    with OutputLock(output) as lock:
        assert lock.took_over["pid"] == child.pid
    assert "took over the lock" in caplog.text and f"pid {child.pid}" in caplog.text


# -- every command that writes a folder -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lock-inputs")
    lines = english_lines(300, seed=5)
    (root / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "eval.txt").write_text("\n".join(english_lines(20, seed=6)) + "\n", encoding="utf-8")
    tokenizer = byte_level_tokenizer(lines)
    model = save_model(tiny_model("gpt2", len(tokenizer)), tokenizer, root / "gpt2")
    return {"root": root, "model": model, "train": root / "train.txt", "eval": root / "eval.txt"}


def _train_command(small: dict, output: Path, steps: int) -> list[str]:
    return [sys.executable, "-m", "langswap", "-q", "train", "--model", str(small["model"]), "--train-text",
            str(small["train"]), "--output", str(output), "--preset", "full", "--steps", str(steps), "--set",
            "batch_size=4", "--set", "sequence_length=32", "--set", "save_steps=5", "--set", "logging_steps=5"]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def test_two_train_processes_on_one_folder_the_second_is_refused_the_first_finishes_unchanged(small, tmp_path):
    """The first writer is a `langswap train` process; the second is this test's process, which tries the same
    folder while the first runs."""
    from langswap.training.run import TrainConfig, train

    output = tmp_path / "same"
    first = subprocess.Popen(_train_command(small, output, 20), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.time() + 120
    while not (output / "langswap-train.json").exists() and time.time() < deadline and first.poll() is None:
        time.sleep(0.02)
    options = dict(model=str(small["model"]), train_text=str(small["train"]), preset="full", steps=20, batch_size=4,
                   sequence_length=32, save_steps=5, logging_steps=5)
    with pytest.raises(OutputLockedError) as caught:
        train(TrainConfig(output=str(output), **options))
    assert first.poll() is None, "the first run must still be running when the second is refused"
    assert f"training output folder '{output}' is being written by another langswap process: pid {first.pid}" in \
        str(caught.value)
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    assert out.count("wrote ") == 1
    reference = train(TrainConfig(output=str(tmp_path / "alone"), **options))
    ran, alone = _weights(output / "model"), _weights(reference.model)
    assert ran.keys() == alone.keys() and all(torch.equal(ran[name], alone[name]) for name in alone)
    record = json.loads((output / "langswap-train.json").read_text())
    assert record["status"] == "complete" and record["steps"] == 20
    assert not lock_path(output).exists()


def test_transfer_is_refused_while_another_process_writes_its_output(small, tmp_path):
    output = tmp_path / "transferred"
    child = _hold_in_child(output)
    try:
        done = subprocess.run([sys.executable, "-m", "langswap", "-q", "transfer", "--source-model",
                               str(small["model"]), "--target-tokenizer", str(small["model"]), "--method", "overlap",
                               "--output", str(output)], capture_output=True, text=True, timeout=300)
    finally:
        child.kill()
        child.wait()
    assert done.returncode == 2
    error = unwrapped(done.stderr)
    assert "transfer output folder" in error and f"pid {child.pid}" in error
    assert not output.exists() and not list(tmp_path.glob(".transferred*partial*"))


def test_bench_is_refused_while_another_process_writes_its_folder(small, tmp_path):
    from langswap.bench import BenchConfig, run_bench
    from langswap.config import from_dict

    output = tmp_path / "bench"
    config = from_dict(BenchConfig, {"source_model": str(small["model"]), "target_tokenizer": str(small["model"]),
                                     "train_text": str(small["train"]), "eval_text": str(small["eval"]),
                                     "output": str(output), "steps": [0], "methods": ["overlap"]})
    with OutputLock(output, "bench output folder"):
        with pytest.raises(OutputLockedError, match="bench output folder"):
            run_bench(config)
    assert not output.exists()


@pytest.mark.parametrize("command", ["fasttext", "align", "tokenizer"])
def test_resource_builders_are_refused_while_another_process_writes_their_output(command, small, cipher_vectors,
                                                                                corpus_dir, tmp_path, capsys):
    from langswap.cli import main

    output = tmp_path / ("vectors.bin" if command == "fasttext" else "out")
    arguments = {
        "fasttext": ["fasttext", str(small["train"]), "--output", str(output)],
        "align": ["align", "--source-vectors", str(cipher_vectors["source"]), "--target-vectors",
                  str(cipher_vectors["target"]), "--dictionary", str(corpus_dir / "en-xx.tsv"), "--output",
                  str(output)],
        "tokenizer": ["tokenizer", "--source", str(small["model"]), "--text", str(small["train"]), "--output",
                      str(output)],
    }[command]
    with OutputLock(output, "output"):
        assert main(["-q"] + arguments) == 2
    assert "is being written by another langswap process" in unwrapped(capsys.readouterr().err)
    assert not output.exists()


def test_prune_is_refused_while_another_process_writes_its_output(small, tmp_path):
    """Refused before it reads the model: a folder that is not even an extension gets the lock's error, not the
    model's."""
    from langswap.transfer.prune import PruneJob, prune

    output = tmp_path / "pruned"
    with OutputLock(output, "pruned model folder"):
        with pytest.raises(OutputLockedError, match="pruned model folder"):
            prune(PruneJob(model=str(small["model"]), text=str(small["eval"]), output=str(output)))
    assert not output.exists()
