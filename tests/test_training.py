"""Continued pretraining: frozen/trainable split per phase, schedules, resume equivalence, curves, bad input."""

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
from conftest import byte_level_tokenizer, english_lines, save_model, tiny_model, unwrapped, wordpiece_tokenizer

from langswap.errors import ConfigError, MissingResourceError, OutputExistsError, ResourceFormatError
from langswap.training.phases import Phase, embedding_parameters
from langswap.training.recipes import plan_phases
from langswap.training.run import TrainConfig, train


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("train-text")
    (folder / "train.txt").write_text("\n".join(english_lines(300, seed=5)) + "\n", encoding="utf-8")
    (folder / "eval.txt").write_text("\n".join(english_lines(40, seed=6)) + "\n", encoding="utf-8")
    (folder / "train.jsonl").write_text("".join(json.dumps({"text": line, "id": i}) + "\n"
                                                for i, line in enumerate(english_lines(300, seed=5))))
    return folder


def _model_folder(root: Path, kind: str) -> Path:
    lines = english_lines(300, seed=5)
    tokenizer = wordpiece_tokenizer(lines) if kind == "bert" else byte_level_tokenizer(lines)
    return save_model(tiny_model(kind, len(tokenizer)), tokenizer, root / kind)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("train-models")
    return {kind: _model_folder(root, kind) for kind in ("gpt2", "llama", "bert")}


def _config(model: Path, texts: Path, output: Path, **options) -> TrainConfig:
    base = dict(model=str(model), train_text=str(texts / "train.txt"), eval_text=str(texts / "eval.txt"),
                output=str(output), steps=6, batch_size=4, sequence_length=32, save_steps=3, eval_steps=3,
                logging_steps=1, eval_sequences=4)
    base.update(options)
    return TrainConfig(**base)


def _state(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


# -- phases: which parameters move ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_embeddings_phase_leaves_every_other_parameter_bitwise_unchanged(kind, models, texts, tmp_path):
    report = train(_config(models[kind], texts, tmp_path / "run", preset="embeddings"))
    before, after = _state(models[kind]), _state(report.model)
    from langswap.models import load_model

    model = load_model(models[kind])
    trainable_names = {name for name, p in model.named_parameters()
                       if any(p is q for q in embedding_parameters(model))}
    changed = {name for name in before if not torch.equal(before[name], after[name])}
    assert changed, "nothing trained"
    assert changed <= trainable_names | {n for n in before if n.endswith("decoder.weight") or n.endswith(
        "lm_head.weight")}, f"frozen parameters moved: {sorted(changed - trainable_names)}"
    input_name = next(n for n, p in model.named_parameters() if p is model.get_input_embeddings().weight)
    assert input_name in changed
    if kind == "llama":  # untied head: both matrices train
        assert "lm_head.weight" in changed
    if kind == "bert":  # the output bias trains, the position embeddings and norms do not
        assert any(name.endswith("predictions.bias") for name in changed)
        assert not any("position_embeddings" in name or "LayerNorm" in name for name in changed)
    assert report.phases[0].trainable_parameters < report.phases[0].total_parameters


def test_a_run_keeps_one_copy_of_the_model_its_phases_trained_unless_told_to_keep_each(models, texts, tmp_path):
    """Each phase's final weights are dropped once the next phase and model/ are written (their records stay, so a
    rerun finds the run complete); model/ holds the last phase's weights hard-linked, not copied."""
    report = train(_config(models["gpt2"], texts, tmp_path / "run", preset="transinner", steps=4, eval_text=None))
    finals = sorted((tmp_path / "run").glob("phase-*/final"))
    assert [final.parent.name for final in finals] == ["phase-1-embeddings", "phase-2-full"]
    for final in finals:
        assert (final / "phase.json").is_file() and not list(final.glob("*.safetensors"))
    weights = report.model / "model.safetensors"
    assert weights.stat().st_nlink == 1  # the phase's link was dropped: model/ holds the only copy
    end = _state(report.model)
    again = train(_config(models["gpt2"], texts, tmp_path / "run", preset="transinner", steps=4, eval_text=None))
    assert again.resumed and all(torch.equal(end[name], tensor) for name, tensor in _state(again.model).items())

    kept = train(_config(models["gpt2"], texts, tmp_path / "kept", preset="transinner", steps=4, eval_text=None,
                         keep_phase_models=True))
    last = tmp_path / "kept" / "phase-2-full" / "final" / "model.safetensors"
    assert (tmp_path / "kept" / "phase-1-embeddings" / "final" / "model.safetensors").is_file()
    assert os.path.samefile(last, kept.model / "model.safetensors")  # one file on disk, two names


def test_transinner_freezes_the_body_in_phase_one_then_trains_everything(models, texts, tmp_path):
    report = train(_config(models["gpt2"], texts, tmp_path / "run", preset="transinner", steps=10,
                           keep_phase_models=True))
    assert [p.name for p in report.phases] == ["1-embeddings", "2-full"]
    assert [p.steps for p in report.phases] == [1, 9]
    start, middle, end = _state(models["gpt2"]), _state(tmp_path / "run" / "phase-1-embeddings" / "final"), \
        _state(report.model)
    body = [name for name in start if "wte" not in name and "lm_head" not in name]
    assert all(torch.equal(start[name], middle[name]) for name in body)
    assert not torch.equal(start["transformer.wte.weight"], middle["transformer.wte.weight"])
    assert sum(not torch.equal(middle[name], end[name]) for name in body) > len(body) // 2


# -- schedules ----------------------------------------------------------------------------------------------------------

def test_linear_warmup_then_linear_decay_at_chosen_steps():
    phase = Phase("1-full", "full", steps=100, learning_rate=5e-4, warmup_steps=10)
    assert phase.learning_rate_at(0) == pytest.approx(5e-5)
    assert phase.learning_rate_at(4) == pytest.approx(2.5e-4)
    assert phase.learning_rate_at(9) == pytest.approx(5e-4)
    assert phase.learning_rate_at(10) == pytest.approx(5e-4)
    assert phase.learning_rate_at(55) == pytest.approx(5e-4 * 45 / 90)
    assert phase.learning_rate_at(99) == pytest.approx(5e-4 / 90)
    constant = Phase("1-embeddings", "embeddings", 100, 1e-3, 10, schedule="constant")
    assert [constant.learning_rate_at(s) for s in (0, 9, 50, 99)] == pytest.approx([1e-4, 1e-3, 1e-3, 1e-3])


def test_presets_follow_the_papers():
    wechsel = plan_phases(TrainConfig(preset="wechsel", steps=1000), "causal")
    assert [(p.trainable, p.steps, p.learning_rate, p.warmup_steps) for p in wechsel] == [("full", 1000, 5e-4, 100)]
    masked = plan_phases(TrainConfig(preset="fullrand", steps=1000), "masked")
    assert masked[0].learning_rate == 1e-4
    inner = plan_phases(TrainConfig(preset="transinner", steps=1000), "causal")
    assert [(p.trainable, p.steps, p.warmup_steps) for p in inner] == [("embeddings", 100, 10), ("full", 900, 90)]
    tik = plan_phases(TrainConfig(preset="tiktotok", steps=1000), "causal")
    assert (tik[0].trainable, tik[0].steps, tik[0].schedule, tik[0].stops_early) == ("embeddings", 500, "constant",
                                                                                     True)
    assert (tik[1].learning_rate, tik[1].warmup_steps) == (pytest.approx(1e-4), 125)
    # the first phase settled after 200 updates: the full phase gets the other 800, warming up over a quarter
    replanned = plan_phases(TrainConfig(preset="tiktotok", steps=1000), "causal", done=[200])
    assert (replanned[1].steps, replanned[1].warmup_steps) == (800, 200)


def test_the_optimizer_uses_the_scheduled_rate_at_every_update(models, texts, tmp_path):
    from transformers import TrainerCallback

    seen: list[tuple[int, float]] = []

    class Record(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
            seen.append((state.global_step, optimizer.param_groups[0]["lr"]))

    config = _config(models["gpt2"], texts, tmp_path / "run", preset="transinner", steps=20, eval_text=None)
    train(config, callbacks=[Record()])
    phases = plan_phases(config, "causal")
    expected = [phases[0].learning_rate_at(s) for s in range(phases[0].steps)] + \
               [phases[1].learning_rate_at(s) for s in range(phases[1].steps)]
    assert [lr for _, lr in seen] == pytest.approx(expected)


def test_the_optimizer_is_adamw_with_the_papers_settings(models, texts, tmp_path):
    """AdamW, betas 0.9/0.98, eps 1e-6, weight decay 0.01 on matrices and none on biases and norms."""
    from transformers import TrainerCallback

    seen = []

    class Record(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, optimizer=None, model=None, **kwargs):
            if not seen:
                names = {id(p): n for n, p in model.named_parameters()}
                seen.append((optimizer, [(group["betas"], group["eps"], group["weight_decay"],
                                          [names[id(p)] for p in group["params"]]) for group in optimizer.param_groups]))

    train(_config(models["gpt2"], texts, tmp_path / "run", preset="wechsel", steps=1, eval_text=None),
          callbacks=[Record()])
    optimizer, groups = seen[0]
    assert isinstance(getattr(optimizer, "optimizer", optimizer), torch.optim.AdamW)
    assert {(betas, eps) for betas, eps, _, _ in groups} == {((0.9, 0.98), 1e-6)}
    decay = {name: wd for _, _, wd, names in groups for name in names}
    assert decay["transformer.h.0.attn.c_attn.weight"] == 0.01 and decay["transformer.wte.weight"] == 0.01
    assert decay["transformer.h.0.attn.c_attn.bias"] == 0.0 and decay["transformer.h.0.ln_1.weight"] == 0.0


def test_gradient_accumulation_trains_as_the_larger_batch(tmp_path, texts):
    """2 forward passes of 2 sequences per update = 1 pass of 4 (no dropout, so only rounding differs)."""
    lines = english_lines(300, seed=5)
    tokenizer = byte_level_tokenizer(lines)
    model = tiny_model("gpt2", len(tokenizer))
    model.config.resid_pdrop = model.config.embd_pdrop = model.config.attn_pdrop = 0.0
    folder = save_model(model, tokenizer, tmp_path / "no-dropout")
    options = dict(preset="wechsel", steps=4, eval_text=None, logging_steps=1)
    whole = train(_config(folder, texts, tmp_path / "whole", batch_size=4, **options))
    accumulated = train(_config(folder, texts, tmp_path / "accumulated", batch_size=2, gradient_accumulation=2,
                                **options))
    one_pass = train(_config(folder, texts, tmp_path / "one-pass", batch_size=2, **options))
    a, b, c, start = _state(whole.model), _state(accumulated.model), _state(one_pass.model), _state(folder)
    assert all(torch.allclose(a[name], b[name], atol=1e-6) for name in a)
    assert not torch.equal(a["transformer.wte.weight"], start["transformer.wte.weight"])
    assert any(not torch.allclose(a[name], c[name], atol=1e-6) for name in a)  # half the batch: another result
    assert [e["loss"] for e in whole.curve["train"]] == pytest.approx([e["loss"] for e in accumulated.curve["train"]],
                                                                      rel=1e-4)


def test_the_seed_decides_the_run(models, texts, tmp_path):
    options = dict(preset="wechsel", steps=3, eval_text=None)
    first = train(_config(models["gpt2"], texts, tmp_path / "a", seed=3, **options))
    again = train(_config(models["gpt2"], texts, tmp_path / "b", seed=3, **options))
    other = train(_config(models["gpt2"], texts, tmp_path / "c", seed=4, **options))
    a, b, c = _state(first.model), _state(again.model), _state(other.model)
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert not torch.equal(a["transformer.wte.weight"], c["transformer.wte.weight"])


def test_tiktotok_ends_the_embedding_phase_when_the_loss_settles(models, texts, tmp_path):
    # a tolerance of 1 means "settled" as soon as two windows exist: after 2 x settle_window updates
    report = train(_config(models["gpt2"], texts, tmp_path / "run", preset="tiktotok", steps=20,
                           recipe={"settle_window": 2, "settle_tolerance": 1.0}, eval_text=None))
    assert [p.steps for p in report.phases] == [4, 16]
    assert report.phases[1].planned_steps == 16


# -- resume -------------------------------------------------------------------------------------------------------------

def _cli_train(config: TrainConfig, path: Path) -> list[str]:
    from langswap.config import dump_yaml, to_dict

    path.write_text(dump_yaml(to_dict(config)), encoding="utf-8")
    return [sys.executable, "-m", "langswap", "-q", "train", str(path)]


@pytest.mark.parametrize("kind, preset, phase_dir, kill_at", [
    # a one-phase causal run: the kill in transinner's second phase covers it, so it runs with the slow tests only
    pytest.param("gpt2", "wechsel", "phase-1-full", 4, marks=[
        pytest.mark.slow,
        pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run")]),
    ("gpt2", "transinner", "phase-2-full", 4),
    # a masked LM (masks drawn afresh at every update) and Tik-to-Tok's until-settled phase: test_recipes resumes
    # the masked bilingual run and every recipe bitwise, test_tiktotok_stopped_... resumes a settled phase; these
    # kills run with the slow tests only
    pytest.param("bert", "wechsel", "phase-1-full", 4, marks=[
        pytest.mark.slow,
        pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run")]),
    pytest.param("gpt2", "tiktotok", "phase-1-embeddings", 2, marks=[
        pytest.mark.slow,
        pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run")])])
def test_a_killed_run_resumes_and_ends_where_an_uninterrupted_one_ends(kind, preset, phase_dir, kill_at, models,
                                                                        texts, tmp_path, caplog):
    """Causal and masked LM (whose masks are drawn afresh at every update, which must resume too); Tik-to-Tok killed
    in its until-settled phase, before the loss has settled, must settle where the uninterrupted run did."""
    steps = 16
    options = dict(preset=preset, steps=steps, save_steps=2, eval_steps=4, logging_steps=2)
    if preset == "tiktotok":  # a tolerance of 1 settles as soon as two windows of 2 updates exist: at step 4
        options.update(recipe={"settle_window": 2, "settle_tolerance": 1.0})
    reference = train(_config(models[kind], texts, tmp_path / "reference", **options))

    config = _config(models[kind], texts, tmp_path / "interrupted", **options)
    process = subprocess.Popen(_cli_train(config, tmp_path / "train.yaml"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        checkpoints = list((tmp_path / "interrupted" / phase_dir).glob("checkpoint-*"))
        if any(int(c.name.split("-")[1]) >= kill_at for c in checkpoints):
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed: " + process.stderr.read().decode()
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "interrupted" / "model").exists()
    # a checkpoint the killed run was writing is never picked up
    (tmp_path / "interrupted" / phase_dir / ".staging" / f"checkpoint-{steps}").mkdir(parents=True, exist_ok=True)

    from langswap.locking import lock_path

    assert lock_path(config.output).exists()  # the killed run's lock file: its holder is gone
    resumed = train(config)
    assert resumed.resumed
    assert f"took over the lock of training output folder '{config.output}' from pid {process.pid}" in caplog.text
    assert not lock_path(config.output).exists()
    assert [p.steps for p in resumed.phases] == [p.steps for p in reference.phases]
    if preset == "tiktotok":
        assert [p.steps for p in reference.phases] == [4, 12]
    final_reference, final_resumed = _state(reference.model), _state(resumed.model)
    assert final_reference.keys() == final_resumed.keys()
    assert all(torch.equal(final_reference[name], final_resumed[name]) for name in final_reference)
    assert [e["loss"] for e in resumed.curve["eval"]] == pytest.approx([e["loss"] for e in reference.curve["eval"]])
    assert not (tmp_path / "interrupted" / phase_dir / ".staging").exists()


class Crash(Exception):
    pass


def _crash_at(step: int, event: str = "on_step_end"):
    """A callback that stops the run like a kill at `step` (after that step's checkpoint for on_save)."""
    from transformers import TrainerCallback

    class CrashCallback(TrainerCallback):
        pass

    def handler(self, args, state, control, **kwargs):
        if state.global_step == step:
            raise Crash(f"crash at step {step}")

    setattr(CrashCallback, event, handler)
    return CrashCallback()


def test_a_run_stopped_before_its_first_checkpoint_resumes_to_the_same_weights(models, texts, tmp_path):
    """The resumed run skips the step-0 evaluation it has on disk; evaluation must not move the random state that
    dropout draws from (it did: building the evaluation loader drew from the global generator)."""
    options = dict(preset="wechsel", steps=6, save_steps=100, eval_steps=2)
    reference = train(_config(models["gpt2"], texts, tmp_path / "reference", **options))
    config = _config(models["gpt2"], texts, tmp_path / "interrupted", **options)
    with pytest.raises(Crash):
        train(config, callbacks=[_crash_at(3)])
    assert (tmp_path / "interrupted" / "eval-step0.json").is_file()
    assert not list((tmp_path / "interrupted" / "phase-1-full").glob("checkpoint-*"))
    resumed = train(config)
    a, b = _state(reference.model), _state(resumed.model)
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_phase_writes_no_checkpoint_at_its_end_and_a_run_stopped_there_resumes_to_the_same_weights(models, texts,
                                                                                                      tmp_path):
    """The phase's final folder replaces its checkpoints, so none is written at its last update (at 8B one would be
    24 GB more on disk); a run stopped after the last update, before the final folder, resumes from the checkpoint
    before and ends with the same weights."""
    options = dict(preset="wechsel", steps=6, save_steps=3, eval_steps=100)
    reference = train(_config(models["gpt2"], texts, tmp_path / "reference", **options))
    config = _config(models["gpt2"], texts, tmp_path / "interrupted", **options)
    with pytest.raises(Crash):
        train(config, callbacks=[_crash_at(6, "on_train_end")])
    phase = tmp_path / "interrupted" / "phase-1-full"
    assert sorted(c.name for c in phase.glob("checkpoint-*")) == ["checkpoint-3"]
    assert not (phase / "final").exists()
    resumed = train(config)
    assert resumed.resumed
    a, b = _state(reference.model), _state(resumed.model)
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_how_often_a_run_evaluates_does_not_change_its_weights(models, texts, tmp_path):
    """eval_steps may change when a run is resumed, so it must not change what the run trains (GPT-2 has dropout)."""
    often = train(_config(models["gpt2"], texts, tmp_path / "often", steps=6, eval_steps=1))
    rarely = train(_config(models["gpt2"], texts, tmp_path / "rarely", steps=6, eval_steps=100))
    a, b = _state(often.model), _state(rarely.model)
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert len(often.curve["eval"]) > len(rarely.curve["eval"])


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run (the "
                    "general case is test_how_often_a_run_evaluates_does_not_change_its_weights)")
def test_tiktotok_settles_at_the_same_step_however_often_it_evaluates(models, texts, tmp_path):
    """The rule is judged at training-loss logs (steps 3, 6, 9) only. Judged at every log, an evaluation at step 8
    saw windows (4, 8] and (0, 4] holding losses 6 and 3 and stopped there, one step before a run that evaluates
    rarely."""
    options = dict(preset="tiktotok", steps=20, logging_steps=3, recipe={"settle_window": 4, "settle_tolerance": 1.0},
                   save_steps=100)
    often = train(_config(models["gpt2"], texts, tmp_path / "often", eval_steps=1, **options))
    rarely = train(_config(models["gpt2"], texts, tmp_path / "rarely", eval_steps=100, **options))
    assert [p.steps for p in often.phases] == [p.steps for p in rarely.phases] == [9, 11]


def test_a_phase_shorter_than_logging_steps_still_reports_its_loss(models, texts, tmp_path):
    report = train(_config(models["gpt2"], texts, tmp_path / "run", preset="transinner", steps=10, logging_steps=10,
                           eval_text=None))
    assert [p.steps for p in report.phases] == [1, 9]
    assert all(p.train_loss is not None and p.train_loss > 0 for p in report.phases)


def test_tiktotok_stopped_at_the_checkpoint_where_the_loss_settled_resumes_to_the_same_phases(models, texts,
                                                                                             tmp_path):
    """The loss settles at step 4, where a checkpoint is written; a run stopped right after it must not train on
    past the settle point (the Trainer clears its stop flag when it resumes)."""
    options = dict(preset="tiktotok", steps=16, save_steps=2, eval_steps=4, logging_steps=2,
                   recipe={"settle_window": 2, "settle_tolerance": 1.0})
    reference = train(_config(models["gpt2"], texts, tmp_path / "reference", **options))
    assert [p.steps for p in reference.phases] == [4, 12]
    config = _config(models["gpt2"], texts, tmp_path / "interrupted", **options)
    with pytest.raises(Crash):
        train(config, callbacks=[_crash_at(4, "on_save")])
    assert (tmp_path / "interrupted" / "phase-1-embeddings" / "checkpoint-4").is_dir()
    resumed = train(config)
    assert [p.steps for p in resumed.phases] == [4, 12]
    a, b = _state(reference.model), _state(resumed.model)
    assert all(torch.equal(a[name], b[name]) for name in a)
    assert [p.train_loss for p in resumed.phases] == [p.train_loss for p in reference.phases]


def test_phases_read_consecutive_slices_of_one_shuffled_stream(models, texts, tmp_path, monkeypatch):
    """TransInner's full phase goes on where the embeddings phase stopped; it used to start the same shuffled order
    again and re-read the first phase's batches."""
    from langswap.models import load_tokenizer
    from langswap.training.data import LMCollator, pack, read_documents, stream_indices

    seen = []
    collate = LMCollator.__call__

    def recording(self, items):
        seen.extend(item["input_ids"] for item in items)
        return collate(self, items)

    monkeypatch.setattr(LMCollator, "__call__", recording)
    report = train(_config(models["gpt2"], texts, tmp_path / "run", preset="transinner", steps=10, eval_text=None,
                           seed=7))
    assert [p.steps for p in report.phases] == [1, 9]
    blocks = pack(load_tokenizer(models["gpt2"]), read_documents(texts / "train.txt"), 32, "causal").blocks
    expected = stream_indices(len(blocks), 7, 0, 10 * 4)
    assert len(set(expected)) == 40 <= len(blocks)  # one epoch: every block at most once
    assert torch.equal(torch.stack(seen), blocks[expected])


def test_stream_indices_are_epochs_of_seeded_permutations():
    from langswap.training.data import BlockDataset, StreamSlice, stream_indices

    stream = stream_indices(5, 3, 0, 12)
    assert sorted(stream[:5]) == sorted(stream[5:10]) == list(range(5)) and stream[:5] != stream[5:10]
    assert stream_indices(5, 3, 7, 5) == stream[7:12]
    assert stream_indices(5, 3, 0, 5) == torch.randperm(5, generator=torch.Generator().manual_seed(3)).tolist()
    blocks = torch.arange(5)[:, None] * 10
    view = StreamSlice(BlockDataset(blocks), 3, 7, 5)  # what a phase reads: the same slice, an epoch at a time
    assert len(view) == 5 and [int(view[i]["input_ids"][0]) // 10 for i in range(5)] == stream[7:12]
    with pytest.raises(IndexError):
        view[5]


def test_resuming_with_another_number_of_processes_is_refused(models, texts, tmp_path):
    from langswap.training.run import _check_output

    config = _config(models["gpt2"], texts, tmp_path / "run", steps=2, eval_text=None)
    train(config)
    record = json.loads((tmp_path / "run" / "langswap-train.json").read_text())
    assert record["processes"] == 1
    assert _check_output(config, processes=1) == "complete"
    assert _check_output(config, processes=2) == "complete"  # a finished run is only read back
    record["status"] = "running"  # as a run that was interrupted
    (tmp_path / "run" / "langswap-train.json").write_text(json.dumps(record))
    assert _check_output(config, processes=1) == "resume"
    with pytest.raises(ConfigError, match="processes: was 1, now 2"):
        _check_output(config, processes=2)


def test_running_a_finished_config_again_does_nothing(models, texts, tmp_path):
    config = _config(models["gpt2"], texts, tmp_path / "run", preset="embeddings", steps=2)
    first = train(config)
    mtime = (first.model / "model.safetensors").stat().st_mtime_ns
    again = train(config)
    assert again.resumed and (again.model / "model.safetensors").stat().st_mtime_ns == mtime


def test_a_run_recorded_before_its_recipe_had_an_option_is_read_with_that_option_s_default(models, texts, tmp_path):
    """A finished `embeddings` run whose record holds `recipe: {}` (made before the recipe took a source-language
    mix) is the same run as the config now, whose recipe resolves to the mix's defaults; a recorded option that
    differs is still refused. The bench's train key leaves the unset mix out, as it always was."""
    from langswap.bench import _train_key
    from langswap.training.run import _check_output, comparable_config

    config = _config(models["gpt2"], texts, tmp_path / "run", preset="embeddings", steps=2, eval_text=None)
    train(config)
    path = tmp_path / "run" / "langswap-train.json"
    record = json.loads(path.read_text())
    assert record["comparable_config"]["recipe"] == {"source_text": None, "source_share": 0.25}
    record["comparable_config"]["recipe"] = {}
    path.write_text(json.dumps(record))
    assert _check_output(config) == "complete"
    record["comparable_config"]["recipe"] = {"source_share": 0.5}
    path.write_text(json.dumps(record))
    with pytest.raises(ConfigError, match="recipe: was"):
        _check_output(config)
    assert _train_key(comparable_config(config))["recipe"] == {}
    assert "start_rows_own" not in _train_key(comparable_config(config))  # take: as runs were before the option
    skipping = _config(models["gpt2"], texts, tmp_path / "skip", preset="embeddings", start_rows_own="skip")
    assert _train_key(comparable_config(skipping))["start_rows_own"] == "skip"
    mixed = _config(models["gpt2"], texts, tmp_path / "mixed", preset="embeddings", steps=2, eval_text=None,
                    recipe={"source_text": str(texts / "train.txt"), "source_share": 0.5})
    assert _train_key(comparable_config(mixed))["recipe"]["source_share"] == 0.5


# -- outputs ------------------------------------------------------------------------------------------------------------

def test_curve_json_and_png_and_a_loadable_model(models, texts, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    report = train(_config(models["gpt2"], texts, tmp_path / "run", preset="wechsel", steps=6,
                           snapshot_steps=[0, 3]))
    curve = json.loads((tmp_path / "run" / "curve.json").read_text())
    assert [e["step"] for e in curve["eval"]] == [0, 3, 6]
    assert all(e["bits_per_byte"] > 0 for e in curve["eval"])
    assert [e["step"] for e in curve["train"]] == [1, 2, 3, 4, 5, 6]
    assert (tmp_path / "run" / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    model = AutoModelForCausalLM.from_pretrained(report.model)
    AutoTokenizer.from_pretrained(report.model)
    assert json.loads((report.model / "langswap.json").read_text())["training"]["phases"][0]["steps"] == 6
    assert torch.equal(_state(tmp_path / "run" / "snapshots" / "step-0")["transformer.wte.weight"],
                       _state(models["gpt2"])["transformer.wte.weight"])
    assert (tmp_path / "run" / "snapshots" / "step-3" / "tokenizer.json").exists()
    assert model.config.vocab_size == AutoModelForCausalLM.from_pretrained(models["gpt2"]).config.vocab_size


def test_masked_lm_training_evaluates_fixed_masks(models, texts, tmp_path):
    report = train(_config(models["bert"], texts, tmp_path / "run", preset="wechsel", steps=4, eval_steps=2))
    assert report.objective == "masked" and report.phases[0].learning_rate == 1e-4
    losses = [e["loss"] for e in report.curve["eval"]]
    assert len(losses) == 3 and all(0 < loss < 20 for loss in losses)
    assert "bits_per_byte" not in report.curve["eval"][0]


def test_jsonl_training_text_equals_the_same_text_as_lines(models, texts, tmp_path):
    plain = train(_config(models["gpt2"], texts, tmp_path / "plain", steps=2, eval_text=None))
    jsonl = train(_config(models["gpt2"], texts, tmp_path / "jsonl", steps=2, eval_text=None,
                          train_text=str(texts / "train.jsonl")))
    a, b = _state(plain.model), _state(jsonl.model)
    assert all(torch.equal(a[name], b[name]) for name in a)


# -- bad input ----------------------------------------------------------------------------------------------------------

def test_packing_concatenates_documents_into_fixed_blocks():
    from langswap.training.data import pack

    lines = english_lines(300, seed=5)
    documents = english_lines(30, seed=1)
    causal_tokenizer = byte_level_tokenizer(lines)  # bos = eos: documents end with eos, no bos before them
    stream = [t for d in documents for t in causal_tokenizer(d, add_special_tokens=False)["input_ids"]
              + [causal_tokenizer.eos_token_id]]
    packed = pack(causal_tokenizer, documents, 16, "causal")
    assert packed.blocks.shape == (len(stream) // 16, 16) and packed.tokens == len(stream)
    assert packed.blocks.flatten().tolist() == stream[:packed.blocks.numel()]
    assert packed.bytes == sum(len(d.encode()) for d in documents)

    masked_tokenizer = wordpiece_tokenizer(lines)  # [CLS] 14 tokens [SEP]; documents separated by [SEP]
    stream = [t for d in documents for t in masked_tokenizer(d, add_special_tokens=False)["input_ids"]
              + [masked_tokenizer.sep_token_id]]
    packed = pack(masked_tokenizer, documents, 16, "masked", max_blocks=3)
    assert packed.blocks.shape == (3, 16)
    assert (packed.blocks[:, 0] == masked_tokenizer.cls_token_id).all()
    assert (packed.blocks[:, -1] == masked_tokenizer.sep_token_id).all()
    assert packed.blocks[:, 1:-1].flatten().tolist() == stream[:3 * 14]


def test_bytes_per_token_counts_only_the_documents_packed():
    """The curve's bits per byte divide by bytes per token; with max_blocks the stream stops early, and counting
    the bytes of the unread documents made the estimate several times too low."""
    from langswap.training.data import pack

    tokenizer = byte_level_tokenizer(english_lines(300, seed=5))
    documents = english_lines(3500, seed=2)
    whole = pack(tokenizer, documents, 16, "causal")
    cut = pack(tokenizer, documents, 16, "causal", max_blocks=4)  # stops after the first chunk of 1,000
    first = documents[:1000]
    assert cut.bytes == sum(len(d.encode()) for d in first)
    assert cut.tokens == sum(len(tokenizer(d, add_special_tokens=False)["input_ids"]) + 1 for d in first)
    assert cut.bytes_per_token == pytest.approx(whole.bytes_per_token, rel=0.05)


def test_text_shorter_than_one_sequence(models, texts, tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("Too short.\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="fewer than one sequence of 32"):
        train(_config(models["gpt2"], texts, tmp_path / "run", train_text=str(short)))
    assert not (tmp_path / "run").exists()


def test_model_folder_without_tokenizer(models, texts, tmp_path):
    from langswap.models import load_model

    folder = tmp_path / "no-tokenizer"
    load_model(models["gpt2"]).save_pretrained(folder)
    with pytest.raises(MissingResourceError, match="tokenizer"):
        train(_config(folder, texts, tmp_path / "run"))


def test_resuming_with_a_different_config_is_refused(models, texts, tmp_path):
    train(_config(models["gpt2"], texts, tmp_path / "run", steps=2, eval_text=None))
    with pytest.raises(ConfigError, match=r"steps: was 2, now 3.*--overwrite"):
        train(_config(models["gpt2"], texts, tmp_path / "run", steps=3, eval_text=None))
    # changing only how often checkpoints are written is fine
    train(_config(models["gpt2"], texts, tmp_path / "run", steps=2, eval_text=None, save_steps=1))
    # and --overwrite starts again
    train(_config(models["gpt2"], texts, tmp_path / "run", steps=3, eval_text=None, overwrite=True))


def test_a_run_recorded_before_an_option_existed_resumes_with_its_default(models, texts, tmp_path):
    import json

    from langswap.records import TRAIN_RECORD as RECORD

    train(_config(models["gpt2"], texts, tmp_path / "run", steps=2, eval_text=None))
    record_path = tmp_path / "run" / RECORD
    record = json.loads(record_path.read_text())
    for name in ("attention", "compile", "fused_optimizer", "document_mask", "liger_kernel"):
        del record["comparable_config"][name]
    record_path.write_text(json.dumps(record))
    assert train(_config(models["gpt2"], texts, tmp_path / "run", steps=2, eval_text=None)).resumed
    with pytest.raises(ConfigError, match="attention: was 'auto', now 'eager'"):
        train(_config(models["gpt2"], texts, tmp_path / "run", steps=2, eval_text=None, attention="eager"))


def test_speed_options_reach_the_model_and_the_trainer(models, texts, tmp_path):
    """attention picks the model's kernels; the eager and SDPA kernels train the same model to float precision;
    fused AdamW is the default on CUDA only; Liger and flash-attn without their packages are named."""
    import importlib.util

    from langswap.training.run import _load_for_training, _optimizer_name

    for kernel in ("eager", "sdpa"):
        model, _ = _load_for_training(models["llama"], "causal", 0, attention=kernel)
        assert model.config._attn_implementation == kernel
    runs = {kernel: _state(train(_config(models["llama"], texts, tmp_path / kernel, steps=3, eval_text=None,
                                         preset="full", attention=kernel)).model) for kernel in ("eager", "sdpa")}
    assert all(torch.allclose(runs["eager"][name], runs["sdpa"][name], atol=1e-5) for name in runs["eager"])
    assert _optimizer_name("auto", use_cpu=True) == "adamw_torch"
    assert _optimizer_name("auto", use_cpu=False) == _optimizer_name("on", use_cpu=True) == "adamw_torch_fused"
    assert _optimizer_name("off", use_cpu=False) == "adamw_torch"
    if importlib.util.find_spec("liger_kernel") is None:
        with pytest.raises(ConfigError, match="pip install liger-kernel"):
            train(_config(models["llama"], texts, tmp_path / "liger", liger_kernel=True))
    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(ConfigError, match="pip install flash-attn"):
            train(_config(models["llama"], texts, tmp_path / "flash", attention="flash_attention_2"))


@pytest.mark.parametrize("preset", ["full", "embeddings"])
def test_gradient_checkpointing_trains_the_same_weights(models, texts, tmp_path, preset):
    """Recomputing each layer in the backward pass changes memory, not the update (float precision), in a full
    phase and in an embeddings-only phase, whose body gets no gradient."""
    from transformers import TrainerCallback

    seen = []

    class Seen(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kwargs):
            name = "is_activation_checkpointing" if hasattr(type(model), "is_activation_checkpointing") \
                else "is_gradient_checkpointing"  # the name before transformers 5
            seen.append(getattr(model, name))

    runs = {checkpointing: _state(train(_config(models["llama"], texts, tmp_path / str(checkpointing), steps=3,
                                                eval_text=None, preset=preset,
                                                gradient_checkpointing=checkpointing), callbacks=[Seen()]).model)
            for checkpointing in (False, True)}
    assert seen == [False, True]
    assert runs[False].keys() == runs[True].keys()
    assert all(torch.allclose(runs[False][name], runs[True][name], atol=1e-6) for name in runs[False])
    before = _state(models["llama"])
    changed = {name for name in before if not torch.equal(before[name], runs[True][name])}
    assert "model.embed_tokens.weight" in changed
    if preset == "embeddings":
        assert changed <= {"model.embed_tokens.weight", "lm_head.weight"}


def _skip_without_packed_documents():
    try:
        from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
    except ImportError:
        pytest.skip("packed documents need transformers 4.54 or later")


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_with_the_document_mask_a_packed_document_reads_as_if_it_were_alone(kind, models):
    """Known answer: the collated batch of two packed documents gives each document's tokens the logits the model
    gives that document on its own, and no label on the second document's first token."""
    from langswap.models import load_model, load_tokenizer
    from langswap.training.data import LMCollator

    _skip_without_packed_documents()
    model, tokenizer = load_model(models[kind]).eval(), load_tokenizer(models[kind])
    eos = tokenizer.eos_token_id
    first, second = torch.randint(5, 200, (6,)), torch.randint(5, 200, (9,))
    block = torch.cat([first, torch.tensor([eos]), second, torch.tensor([eos])])
    batch = LMCollator(tokenizer, "causal", document_mask=True)([{"input_ids": block}])
    assert "attention_mask" not in batch and batch["labels"][0, 7] == -100 and (batch["labels"][0, 8:] >= 0).all()
    assert batch["position_ids"][0].tolist() == list(range(7)) + list(range(10))
    with torch.no_grad():
        packed = model(**{key: value for key, value in batch.items() if key != "labels"}).logits[0]
        alone = [model(input_ids=part[None]).logits[0] for part in (block[:7], block[7:])]
    assert torch.allclose(packed, torch.cat(alone), atol=1e-5)
    # without the mask the second document reads the first
    plain = LMCollator(tokenizer, "causal")([{"input_ids": block}])
    with torch.no_grad():
        leaked = model(**{key: value for key, value in plain.items() if key != "labels"}).logits[0]
    assert not torch.allclose(leaked[7:], alone[1], atol=1e-3)


def test_a_run_with_the_document_mask_trains_and_refuses_what_it_cannot_mask(models, texts, tmp_path):
    _skip_without_packed_documents()
    report = train(_config(models["llama"], texts, tmp_path / "run", steps=2, document_mask=True))
    assert report.phases[0].steps == 2
    with pytest.raises(ConfigError, match="document_mask is for causal LMs"):
        train(_config(models["bert"], texts, tmp_path / "bert", steps=2, document_mask=True))


def test_output_folder_of_something_else_is_kept(models, texts, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError):
        train(_config(models["gpt2"], texts, tmp_path / "run"))
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"


def test_masked_objective_on_a_causal_model_and_the_reverse(models, texts, tmp_path):
    with pytest.raises(ConfigError, match="objective is 'masked' but .* is a causal LM.*objective: causal"):
        train(_config(models["gpt2"], texts, tmp_path / "a", objective="masked"))
    with pytest.raises(ConfigError, match="objective is 'causal' but .* is a masked LM.*objective: masked"):
        train(_config(models["bert"], texts, tmp_path / "b", objective="causal"))


def test_bad_jsonl_and_bad_values(models, texts, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text key"}\n', encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="line 2 has no string field 'text'.*body"):
        train(_config(models["gpt2"], texts, tmp_path / "run", train_text=str(bad)))
    with pytest.raises(ConfigError, match="logging_steps is 5 but settle_window is 2.*at most settle_window"):
        train(_config(models["gpt2"], texts, tmp_path / "run", preset="tiktotok", logging_steps=5,
                      recipe={"settle_window": 2}))
    with pytest.raises(ConfigError, match="snapshot_steps"):
        train(_config(models["gpt2"], texts, tmp_path / "run", snapshot_steps=[99]))
    with pytest.raises(ConfigError, match="choose one of"):
        from langswap.config import from_dict

        from_dict(TrainConfig, {"preset": "wechsl"})


def test_torchrun_with_two_cpu_processes_trains_resumes_and_saves_once(models, texts, tmp_path):
    """Plain DDP through torchrun (gloo on CPU): the Trainer does the distribution, langswap only the phases. The run
    takes one lock, in rank 0: while another process holds it both ranks stop; a run killed after its first
    checkpoint takes the lock over and resumes."""
    from langswap.locking import OutputLock, lock_path

    config = _config(models["gpt2"], texts, tmp_path / "ddp", preset="transinner", steps=4, batch_size=2, save_steps=2)
    command = _cli_train(config, tmp_path / "ddp.yaml")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "langswap.cli", "-q"]
    command = torchrun + command[command.index("train"):]
    with OutputLock(config.output):
        refused = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "is being written by another langswap process" in unwrapped(refused.stderr)
    assert not (tmp_path / "ddp").exists()

    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and process.poll() is None and not (tmp_path / "ddp" / "phase-1-embeddings" /
                                                                      "final").exists():
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be killed"
    import psutil

    ranks = psutil.Process(process.pid).children(recursive=True)  # torchrun starts them in sessions of their own
    for victim in [process] + ranks:
        victim.send_signal(signal.SIGKILL)
    process.wait()
    psutil.wait_procs(ranks, timeout=30)
    assert lock_path(config.output).exists() and not (tmp_path / "ddp" / "model").exists()
    done = subprocess.run([part for part in command if part != "-q"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "took over the lock" in unwrapped(done.stderr)
    assert not lock_path(config.output).exists()
    assert done.stdout.count("wrote ") == 1  # one summary, from rank 0
    state = _state(tmp_path / "ddp" / "model")
    assert not torch.equal(state["transformer.h.0.attn.c_attn.weight"],
                           _state(models["gpt2"])["transformer.h.0.attn.c_attn.weight"])
    record = json.loads((tmp_path / "ddp" / "langswap-train.json").read_text())
    assert record["status"] == "complete" and record["steps"] == 4


def test_overwrite_keeps_the_old_run_when_the_new_input_is_bad(models, texts, tmp_path):
    train(_config(models["gpt2"], texts, tmp_path / "run", steps=2, eval_text=None))
    short = tmp_path / "short.txt"
    short.write_text("Too short.\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="fewer than one sequence"):
        train(_config(models["gpt2"], texts, tmp_path / "run", train_text=str(short), overwrite=True))
    assert (tmp_path / "run" / "model" / "model.safetensors").exists()


@pytest.mark.parametrize("cuda, bf16, precision, flags", [
    (False, False, "auto", {}), (True, True, "auto", {"bf16": True}), (True, False, "auto", {"fp16": True}),
    (True, True, "fp32", {}), (False, False, "bf16", {"bf16": True}), (True, True, "fp16", {"fp16": True})])
def test_precision_auto_picks_bf16_where_the_gpu_has_it(cuda, bf16, precision, flags, monkeypatch):
    from langswap.training.run import _precision_flags

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: bf16)
    assert _precision_flags(precision) == flags
