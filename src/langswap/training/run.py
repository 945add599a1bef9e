"""`train(config)`: continued pretraining of a model folder, in phases, on the Hugging Face Trainer.

The Trainer is the engine, so `accelerate launch` and `torchrun` spread a run over many GPUs (or CPU processes) with
no distribution code here; bf16/fp16, gradient accumulation and seeding are the Trainer's. The recipe that `preset`
names (`recipes/`) says what to train: its phases, what each trains, each phase's optimizer and schedule, its data
and its hooks. What this loop adds, the same for every recipe:

- phases as separate Trainer runs: each phase has its own optimizer and starts from the previous phase's final
  weights, reading the next slice of the run's one shuffled order of the text;
- checkpoints that are never half-written (written under `.staging/` and renamed into `checkpoint-N`), and resume:
  running the same command again continues from the last checkpoint of the unfinished phase and ends with the same
  weights as an uninterrupted run (the Trainer restores optimizer, schedule, data order and RNG states; a phase a
  recipe ended early at its last checkpoint is not trained on). A different config for an existing output folder is
  an error that lists the differences;
- an evaluation curve on held-out text (`curve.py`), model-only snapshots at chosen steps (`snapshot_steps`, used by
  `langswap bench`), a stop on non-finite numbers with a failure record (`trainer.py`).

Output folder:
    langswap-train.json      resolved config, version, phases, status
    phase-1-embeddings/      Trainer checkpoints of the phase; final/ when the phase is done
    snapshots/step-N/        (optional) model + tokenizer at global step N
    curve.json, curve.png
    model/                   the trained model + tokenizer; from_pretrained(output/model) loads it

Training text is read from token stores (`store.py`): tokenised once, memory-mapped, shared by reruns, resumes and
every process; `prepare` builds them ahead of a run.

Not handled: FSDP/DeepSpeed-specific checkpoint formats (the Trainer's own handling applies).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list, gather_object
from transformers import TrainerState, TrainingArguments
from transformers.trainer_callback import PrinterCallback
from transformers.trainer_utils import get_last_checkpoint

from langswap import __version__
from langswap.calibration_move import MOVE_FILE, CalibrationMove, take_off
from langswap.config import to_dict
from langswap.errors import ConfigError, LangswapError, OutputExistsError, OutputLockedError, TrainingDivergedError
from langswap.files import atomic_directory, atomic_write_text
from langswap.locking import OutputLock
from langswap.modelcard import write_model_card
from langswap.models import (load_config, load_model, load_tokenizer, objective_of, portable_tokenizer_config,
                             position_limit, quiet_transformers)
from langswap.numerics import prepare_embeddings_for_training, refuse_non_finite
from langswap.records import (ModelRecord, TrainingSection, TrainRecord, has_model_record, has_train_record,
                              read_model_record, read_train_record, write_model_record, write_train_record)
from langswap.reports import PhaseReport
from langswap.start_rows import START_FILE, StartRows, put_in_place
from langswap.training.curve import CurveWriter
from langswap.training.data import BlockDataset, LMCollator, batch_counts, masked_eval_set, pack, phase_dataset
from langswap.training.held_rows import HeldRows, text_token_counts, unshown_text_tokens
from langswap.training.options import RESUMABLE_CHANGES, TrainConfig
from langswap.training.phases import Phase, embedding_parameters, parameter_counts, set_trainable, sharding_engine
from langswap.training.recalibrated_rows import Recalibration, prepare_recalibration, rarely_shown_text_tokens
from langswap.training.recipes.base import Recipe, make_recipe
from langswap.training.sources import source_texts
from langswap.training.store import StoreBlocks, token_store
from langswap.training.teacher import TeacherBlocks, TeacherCollator, load_teacher, teacher_check
from langswap.training.trainer import Curve, PhaseTrainer, RecipeHooks, Snapshots, save_model_atomically

__all__ = ["TrainConfig", "TrainReport", "comparable_config", "prepare", "train"]

logger = logging.getLogger(__name__)

STEP0_EVALUATION = "eval-step0.json"  # the first phase's evaluation before any update, kept for a resumed run



@dataclass
class TrainReport:
    output: Path
    model: Path  # the trained model folder
    objective: str
    phases: list[PhaseReport]
    curve: dict
    resumed: bool
    seconds: float

    def summary(self) -> str:
        """What `langswap train` prints: each phase, the held-out curve's ends, the model written."""
        lines = []
        for phase in self.phases:
            speed = f", {phase.tokens_per_second:,.0f} tokens/s" if phase.tokens_per_second else ""
            if speed and phase.data_wait is not None:
                speed += f" ({100 * phase.data_wait:.1f}% of it waiting for data)"
            lines.append(f"phase {phase.name}: {phase.steps} updates, {phase.trainable_parameters:,} trainable "
                         f"parameters, final training loss {phase.train_loss:.4f}{speed}")
        evaluations = self.curve.get("eval") or []
        if evaluations:
            first, last = evaluations[0], evaluations[-1]
            key = "bits_per_byte" if "bits_per_byte" in last else "loss"
            lines.append(f"held-out {key.replace('_', ' ')}: {first[key]:.4f} at step {first['step']} -> "
                         f"{last[key]:.4f} at step {last['step']}")
        lines.append(f"wrote {self.model} (curve: {self.output / 'curve.png'})")
        return "\n".join(lines)


# -- output folder and resume -------------------------------------------------------------------------------------------

def comparable_config(config: TrainConfig) -> dict:
    """The options that make two runs the same run: everything but those a resumed run may change."""
    return {key: value for key, value in to_dict(config).items() if key not in RESUMABLE_CHANGES}


def _check_output(config: TrainConfig, processes: int = 1) -> str:
    """'fresh', 'resume' or 'complete'; a folder of another run or config is an error. With overwrite the folder
    counts as fresh; it is deleted only once the new run's inputs have been read without error."""
    output = Path(config.output)
    if not output.exists() or config.overwrite:
        return "fresh"
    if not has_train_record(output):
        if output.is_dir() and not any(output.iterdir()):
            return "fresh"
        raise OutputExistsError(f"output folder '{output}' exists and is not a langswap training run; choose another "
                                "--output or pass --overwrite to replace it.")
    record = read_train_record(output)
    # an option the recorded run's version did not have is read as its default, a recipe's options too
    before = {**comparable_config(TrainConfig()), **(record.comparable_config or {})}
    now = comparable_config(config)
    if before.get("preset") == now.get("preset") and isinstance(before.get("recipe"), dict):
        before["recipe"] = {**to_dict(type(config.recipe)()), **before["recipe"]}
    changed = [f"{key}: was {before.get(key)!r}, now {now.get(key)!r}" for key in sorted(set(before) | set(now))
               if before.get(key) != now.get(key)]
    complete = record.status == "complete" and (output / "model").is_dir()
    recorded = processes if record.processes is None else record.processes
    if not complete and recorded != processes:  # an update's batch: batch_size x processes
        changed.append(f"processes: was {recorded}, now {processes}")
    if changed:
        raise ConfigError(f"output folder '{output}' holds a run with a different config, so it cannot be resumed ("
                          + "; ".join(changed) + "). Use the same values to resume, another --output, or "
                          "--overwrite to start again.")
    return "complete" if complete else "resume"


def _resolve_objective(config: TrainConfig, model_config) -> str:
    architecture = ", ".join(getattr(model_config, "architectures", None) or ["unknown architecture"])
    actual = objective_of(model_config)
    if config.objective != "auto" and config.objective != actual:
        kind = "a masked LM" if actual == "masked" else "a causal LM"
        raise ConfigError(f"objective is '{config.objective}' but '{config.model}' is {kind} ({architecture}); "
                          f"{config.objective}-LM training needs a "
                          + ("*ForMaskedLM model (BERT, RoBERTa)" if config.objective == "masked"
                             else "*ForCausalLM model (GPT-2, Llama)")
                          + f". Set objective: {actual} (or auto).")
    return actual


def _precision_flags(precision: str) -> dict:
    if precision == "auto":
        if torch.cuda.is_available():
            return {"bf16": True} if torch.cuda.is_bf16_supported() else {"fp16": True}
        return {}
    return {"bf16": True} if precision == "bf16" else {"fp16": True} if precision == "fp16" else {}


def _optimizer_name(fused: str, use_cpu: bool) -> str:
    """The Trainer's AdamW: one fused kernel where `fused` is on, or auto on CUDA; else the foreach one."""
    return "adamw_torch_fused" if fused == "on" or (fused == "auto" and not use_cpu) else "adamw_torch"


def _autocast_dtype(flags: dict):
    """The dtype the Trainer autocasts to under `flags` (None in fp32)."""
    return torch.bfloat16 if flags.get("bf16") else torch.float16 if flags.get("fp16") else None


def _precision_name(flags: dict) -> str:
    return "bf16" if flags.get("bf16") else "fp16" if flags.get("fp16") else "fp32"




def _stopped_checkpoint(checkpoint: str | None, recipe: Recipe, phase: Phase) -> int | None:
    """The step of `checkpoint` when the recipe ended `phase` there: its stop rule held at a log of that step, so
    the uninterrupted run ended the phase at it (a resumed Trainer would clear the stop and train on)."""
    if not phase.stops_early or checkpoint is None or not (Path(checkpoint) / "trainer_state.json").is_file():
        return None
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    step, history = state.get("global_step", 0), state.get("log_history", [])
    return step if recipe.stop_reason(phase, history, step) else None


# -- the run ------------------------------------------------------------------------------------------------------------


def _checkpointing_arguments() -> dict:
    """TrainingArguments that turn on non-reentrant activation checkpointing, under the names of the installed
    transformers (`activation_checkpointing` from 5.x, `gradient_checkpointing` before)."""
    names = {field.name for field in dataclasses.fields(TrainingArguments)}
    name = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    return {name: True, f"{name}_kwargs": {"use_reentrant": False}}


def _load_for_training(folder: str | Path, objective: str, seed: int, tokenizer=None, attention: str = "auto",
                       autocast_dtype=None):
    """The model with float32 master weights (bf16/fp16 are autocast by the Trainer), refused when a weight is NaN
    or infinite, with every input embedding row trainable and non-zero (`numerics.prepare_embeddings_for_training`);
    `attention`: the attention implementation (`TrainConfig.attention`). With `autocast_dtype` (a phase that freezes
    the body, run under bf16 or fp16) the matrices of a body stored in that dtype stay in it, and only the token
    embeddings and the body's vectors (norms, biases: a layer norm on the CPU takes no weight of another dtype than
    its input) become float32. Returns (model, whether the body kept its dtype)."""
    model = load_model(folder, objective, attention=None if attention == "auto" else attention)
    embeddings = embedding_parameters(model)
    body = [parameter for parameter in model.parameters() if not any(parameter is e for e in embeddings)]
    keep = autocast_dtype is not None and bool(body) and all(parameter.dtype == autocast_dtype for parameter in body)
    if keep:
        for parameter in embeddings + [parameter for parameter in body if parameter.dim() < 2]:
            parameter.data = parameter.data.to(torch.float32)
    else:
        model.to(torch.float32)
    refuse_non_finite(model, f"model '{folder}'", "Training cannot start from it: give the checkpoint it was made "
                      "from, or transfer the embeddings again (`langswap transfer`).")
    prepare_embeddings_for_training(model, seed, tokenizer, f"model '{folder}'")
    return model, keep


def _saved_state(recipe: Recipe, phase: Phase, stored_dtype):
    """What the phase's model folders hold: the recipe's `saved_state`, then, for a body kept in its own dtype,
    every floating tensor in that dtype (tensors that share storage, as tied embeddings do, stay shared)."""

    def saved(state_dict: dict) -> dict:
        state_dict = recipe.saved_state(phase, state_dict)
        if stored_dtype is None:
            return state_dict
        cast: dict = {}
        out = {}
        for key, tensor in state_dict.items():
            if tensor.is_floating_point() and tensor.dtype != stored_dtype:
                where = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
                if where not in cast:
                    cast[where] = tensor.to(stored_dtype)
                tensor = cast[where]
            out[key] = tensor
        return out

    return saved


def train(config: TrainConfig, progress: bool = False, callbacks: list | None = None) -> TrainReport:
    """Train `config.model` as `config.preset` says; resumes an interrupted run in `config.output`. One process (or
    one multi-process run) at a time writes an output folder: another gets `OutputLockedError`."""
    clock = time.perf_counter()
    config.validate()
    quiet_transformers(progress)
    output = Path(config.output)

    # The Trainer's arguments set up the process group (torchrun / accelerate launch); a PartialState made before
    # them would pin a single-process state. Without use_cpu on a machine with no GPU, transformers 5 writes no
    # weights when saving under CPU DDP.
    use_cpu = not torch.cuda.is_available()
    TrainingArguments(output_dir=str(output), use_cpu=use_cpu, report_to="none")
    state = PartialState()
    with _run_lock(output, state):
        try:
            return _train(config, progress, callbacks, state, use_cpu, clock)
        except TrainingDivergedError as error:
            _record_failure(output, error, state)
            raise


@contextlib.contextmanager
def _run_lock(output: Path, state):
    """The output folder's lock (`langswap.locking`), taken by the main process for all ranks before anything is
    read or written; a refusal reaches every rank, so none touches the folder."""
    lock, refusal = None, None
    if state.is_main_process:
        try:
            lock = OutputLock(output, "training output folder").acquire()
        except OutputLockedError as error:
            refusal = str(error)
    if state.num_processes > 1:
        refusal = broadcast_object_list([refusal])[0]
    if refusal:
        raise OutputLockedError(refusal)
    try:
        yield lock
    finally:
        if lock is not None:
            lock.release()


def _train(config: TrainConfig, progress: bool, callbacks: list | None, state, use_cpu: bool,
           clock: float) -> TrainReport:
    output = Path(config.output)
    recipe = make_recipe(config)
    status = _check_output(config, state.num_processes)
    if status == "complete":
        return _complete_report(output)

    tokenizer = load_tokenizer(config.model, f"tokenizer of model folder '{config.model}' (a model folder must hold "
                               "its tokenizer files)")
    model_config = load_config(config.model)
    objective = _resolve_objective(config, model_config)
    context = getattr(model_config, "max_position_embeddings", None) or config.sequence_length
    sequence_length = min(config.sequence_length, context)
    if sequence_length < config.sequence_length:
        logger.warning("sequence_length %d is longer than the model's context; using %d", config.sequence_length,
                       sequence_length)
    streams = recipe.streams()
    _check_document_mask(config, objective, tokenizer, streams, recipe.name)
    train_sets, stream_tokens, stream_tokenizers, stores, data, unshown = _training_sets(
        config, state, streams, tokenizer, objective, sequence_length, progress)
    recalibration = None
    if config.unshown_rows == "recalibrate" and unshown is not None:
        span = recipe.recalibrated_rows()
        if span is not None:
            unshown = unshown[(unshown >= span[0]) & (unshown < span[1])]
            if span[0] >= span[1]:
                logger.info("unshown_rows: recalibrate moves no row: recipe '%s' lets none move with these options",
                            recipe.name)
        documents = source_texts(config.train_text, "training text", config.text_field)
        try:
            recalibration = prepare_recalibration(tokenizer, unshown, documents, objective == "causal",
                                                  config.recalibrate_below)
        finally:
            documents.close()
    held = unshown if config.unshown_rows == "hold" else None
    start = _frequent_start_rows(config, streams, train_sets, stream_tokenizers, tokenizer, data)
    collator = LMCollator(tokenizer, objective, config.mlm_probability, stream_tokenizers, config.document_mask)
    precision_flags = _precision_flags(config.precision)
    teacher, dropped = None, None  # the teacher, or the check that dropped it
    if config.teacher.enabled:
        teacher, collator, dropped = _with_teacher(config, state, objective, model_config, tokenizer, train_sets,
                                                   collator, _autocast_dtype(precision_flags), progress)
    eval_set, bytes_per_token = _eval_set(config, tokenizer, collator, objective, sequence_length)

    planned = recipe.phases(objective, [])
    record = TrainRecord(langswap_version=__version__, config=to_dict(config),
                         comparable_config=comparable_config(config), objective=objective,
                         sequence_length=sequence_length,
                         training_sequences=sum(len(dataset) for dataset in train_sets.values()),
                         training_tokens=sum(stream_tokens.values()), token_stores=stores, training_data=data,
                         processes=state.num_processes, status="running",
                         phases=[PhaseReport.from_dict(dataclasses.asdict(phase)) for phase in planned])
    _start_output(config, state, output, record)

    curve = CurveWriter(output, objective, bytes_per_token)
    step0_path = output / STEP0_EVALUATION
    if step0_path.exists():
        curve.step0 = json.loads(step0_path.read_text())
    done_steps: list[int] = []
    summaries: list[PhaseReport] = []
    start_model: str | Path = config.model
    resumed = status == "resume"
    offset = 0
    run = _Run(config, state, recipe, tokenizer, objective, collator, train_sets, streams, eval_set, teacher, dropped,
               curve, list(callbacks or []), precision_flags, progress, use_cpu, held, recalibration, start)
    for index in range(len(planned)):
        # a phase after one that ended early may be re-planned with the steps it left
        replanned = recipe.phases(objective, list(done_steps))
        if len(replanned) != len(planned):
            raise RuntimeError(f"recipe '{recipe.name}' planned {len(planned)} phases, then {len(replanned)} once "
                               f"{len(done_steps)} had finished; its phases() must give a fixed number of phases.")
        phase = replanned[index]
        phase_dir = output / f"phase-{phase.name}"
        final = phase_dir / "final"
        if (final / "phase.json").is_file():
            written = json.loads((final / "phase.json").read_text())
            curve.done.append((phase, offset, written.pop("log_history")))
            summary = PhaseReport.from_dict(written, str(final / "phase.json"))
            summaries.append(summary)
            done_steps.append(summary.steps)
            offset += summary.steps
            start_model = final
            continue
        summary, resumed_here = _train_phase(run, index, phase, start_model, offset, index == len(planned) - 1)
        resumed |= resumed_here
        summaries.append(summary)
        done_steps.append(summary.steps)
        offset += summary.steps
        if state.is_main_process and not config.keep_phase_models:
            _drop_phase_weights(output, keep=final)  # the phase before is done with: a model's copy less on disk
        start_model = final

    final_curve = _finish_output(state, output, recipe, start_model, record, summaries, curve, offset,
                                 config.keep_phase_models)
    return TrainReport(output, output / "model", objective, summaries, final_curve, resumed,
                       time.perf_counter() - clock)


@dataclass
class _Run:
    """What every phase of one run reads."""

    config: TrainConfig
    state: object
    recipe: object
    tokenizer: object
    objective: str
    collator: object
    train_sets: dict
    streams: list
    eval_set: object
    teacher: object
    dropped: object
    curve: object
    callbacks: list
    precision_flags: dict
    progress: bool
    use_cpu: bool
    unshown: np.ndarray | None  # ids of the text tokens no stream shows, where unshown_rows: hold holds them
    recalibration: Recalibration | None  # where unshown_rows: recalibrate moves those rows as the model is written
    start: tuple | None = None  # (the model folder's StartRows, the ids start_rows: frequent puts in place)

    @property
    def output(self) -> Path:
        return Path(self.config.output)


def _train_phase(run: _Run, index: int, phase, start_model, offset: int, last: bool) -> tuple[dict, bool]:
    """Train one phase from `start_model` (or resume it from its last checkpoint) and save its final model (the
    run's `last` phase: with `unshown_rows: recalibrate`'s move made); returns its summary and whether it resumed."""
    config, state, recipe, output = run.config, run.state, run.recipe, run.output
    phase_dir = output / f"phase-{phase.name}"
    checkpoint = get_last_checkpoint(str(phase_dir)) if phase_dir.is_dir() else None
    # A phase the recipe ended at its last checkpoint is not resumed (a resumed Trainer clears the stop and
    # trains on): that checkpoint is its result.
    stopped_at = _stopped_checkpoint(checkpoint, recipe, phase)
    loaded_from = checkpoint if stopped_at else start_model
    model, kept_dtype, counts, undone, placed = _phase_model(config, recipe, phase, loaded_from, run.objective,
                                                             run.tokenizer, run.precision_flags, run.unshown,
                                                             run.start)
    held = _held_rows(run, phase, model)
    trainer = _phase_trainer(run, index, phase, offset, phase_dir, model, kept_dtype)
    if held is not None:
        trainer.add_callback(held)
    if state.is_main_process and (phase_dir / ".staging").exists():
        shutil.rmtree(phase_dir / ".staging")  # a checkpoint an interrupted run did not finish
    if checkpoint:
        logger.info("resuming phase %s from %s", phase.name, checkpoint)
    if index == 0 and checkpoint is None and run.eval_set is not None and run.curve.step0 is None:
        run.curve.step0 = trainer.evaluate()
        if state.is_main_process:
            atomic_write_text(output / STEP0_EVALUATION, json.dumps(run.curve.step0))
    if index == 0 and 0 in config.snapshot_steps and checkpoint is None:
        save_model_atomically(trainer, output / "snapshots" / "step-0", card=(output, 0))
    if stopped_at:
        logger.info("phase %s ended at its checkpoint of step %d (recipe %s); it is not trained on", phase.name,
                    stopped_at, recipe.name)
        trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
        metrics = {}
    else:
        metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
    steps = trainer.state.global_step
    if run.eval_set is not None and not any(e.get("step") == steps and "eval_loss" in e
                                            for e in trainer.state.log_history):
        trainer.evaluate()
    summary = _phase_summary(phase, trainer, metrics, counts, run.teacher, run.dropped)
    summary.calibration_taken_off = undone
    summary.start_rows = placed
    summary.rows_held = None if held is None else len(held.ids)
    if last and run.recalibration is not None:
        summary.unshown_recalibrated = _recalibrate(run, trainer, steps)
    save_model_atomically(trainer, phase_dir / "final", {"phase.json": {
        **summary.as_dict(), "log_history": trainer.state.log_history}})
    run.curve.done.append((phase, offset, list(trainer.state.log_history)))
    if state.is_main_process:
        for checkpoint_dir in phase_dir.glob("checkpoint-*"):
            shutil.rmtree(checkpoint_dir, ignore_errors=True)  # the phase is done; final/ replaces them
    state.wait_for_everyone()
    return summary, bool(checkpoint)


def _recalibrate(run: _Run, trainer, steps: int):
    """`unshown_rows: recalibrate`'s move made on the last phase's model before it is written; its report, with the
    evaluation text's loss before and after where the run has one."""
    before = None
    if run.eval_set is not None:
        before = next((entry["eval_loss"] for entry in reversed(trainer.state.log_history)
                       if entry.get("step") == steps and "eval_loss" in entry), None)
    report, _ = run.recalibration.move(trainer.model)
    if run.eval_set is not None:
        report.eval_loss_before = None if before is None else round(before, 5)
        report.eval_loss_after = round(trainer.evaluate(metric_key_prefix="recalibrated")["recalibrated_loss"], 5)
    logger.info("unshown_rows: recalibrate moved the rows of %s tokens the run shows fewer than %g times by %.3g "
                "logits on average%s", f"{report.rows:,}", report.shown_below, report.mean_move,
                f"; evaluation loss {report.eval_loss_before} -> {report.eval_loss_after}"
                if report.eval_loss_after is not None else "")
    return report


def _held_rows(run: _Run, phase, model) -> HeldRows | None:
    """`unshown_rows: hold` for one phase: the rows of the text tokens no stream shows held where `model` has them
    (None: nothing to hold, or no token matrix trains)."""
    if run.unshown is None or len(run.unshown) == 0:
        return None
    held = HeldRows.attach(model, run.unshown)
    if held is not None:
        logger.info("phase %s: the rows of %s tokens the training text never shows are held as they are",
                    phase.name, f"{len(held.ids):,}")
    return held


def _phase_trainer(run: _Run, index: int, phase, offset: int, phase_dir: Path, model, kept_dtype):
    """The phase's Trainer: its arguments, callbacks (curve, recipe hooks, snapshots) and its slice of the run's
    shuffled streams, which goes on where the phase before stopped."""
    config, recipe = run.config, run.recipe
    args = _training_arguments(config, phase, phase_dir, run.eval_set is not None, run.precision_flags, run.progress,
                               run.use_cpu)
    snapshots = Snapshots(run.output, config.snapshot_steps, offset, run.recalibration) \
        if config.snapshot_steps else None
    phase_callbacks = [Curve(run.curve, phase, offset), RecipeHooks(recipe, phase)] + ([snapshots] if snapshots
                                                                                        else [])
    per_update = config.batch_size * config.gradient_accumulation * run.state.num_processes
    phase_set = phase_dataset(run.train_sets, run.streams, config.seed, offset * per_update,
                              phase.steps * per_update, config.batch_size)
    trainer = PhaseTrainer(model=model, args=args, train_dataset=phase_set, eval_dataset=run.eval_set,
                           data_collator=run.collator, processing_class=run.tokenizer, phase=phase, recipe=recipe,
                           phase_index=index, offset=offset, precision=_precision_name(run.precision_flags),
                           saved_state=_saved_state(recipe, phase, kept_dtype), saved_dtype=kept_dtype,
                           teacher=run.teacher, callbacks=phase_callbacks + run.callbacks)
    if not run.progress:
        trainer.remove_callback(PrinterCallback)  # it prints every log line when there is no progress bar
    if snapshots:
        snapshots.trainer = trainer
    return trainer


def _complete_report(output: Path) -> TrainReport:
    """The report of a run whose output is complete already: nothing is trained."""
    record = read_train_record(output)
    logger.info("%s is already complete; nothing to do", output)
    curve_path = output / "curve.json"
    return TrainReport(output, output / "model", record.objective, record.phases,
                       json.loads(curve_path.read_text()) if curve_path.exists() else {}, True, 0.0)


def _start_output(config: TrainConfig, state, output: Path, record: TrainRecord) -> None:
    """The output folder with the run's record (status running), made by the main process, the others waiting."""
    if state.is_main_process:
        if config.overwrite and output.exists():
            shutil.rmtree(output)
        output.mkdir(parents=True, exist_ok=True)
        write_train_record(output, record)
    state.wait_for_everyone()


def _finish_output(state, output: Path, recipe, start_model, record: TrainRecord, summaries: list[PhaseReport], curve,
                   steps: int, keep_phase_models: bool) -> dict:
    """The last phase's model written as the run's model, the recipe's outputs, the record complete, the phases'
    weights dropped unless kept; returns the curve (empty on processes other than the main one)."""
    final_curve = curve() if state.is_main_process else {}
    if state.is_main_process:
        _write_model(start_model, output / "model", record, summaries, final_curve)
        recipe.finish_outputs(output)
        write_train_record(output, dataclasses.replace(record, status="complete", phases=summaries, steps=steps))
        if not keep_phase_models:
            _drop_phase_weights(output)
    state.wait_for_everyone()
    return final_curve


def _weight_file(item: Path) -> bool:
    """A model folder's weights (shards and their index), not its config, tokenizer or phase record."""
    return item.is_file() and item.name != "training_args.bin" and (
        item.suffix in (".safetensors", ".bin") or item.name.endswith(".index.json"))


def _drop_phase_weights(output: Path, keep: Path | None = None) -> None:
    """Delete the weights of every phase's final model in `output` but `keep`'s: a phase's final model is the next
    phase's start and the run's model until those are written, and nothing after. The phase records stay, so a
    rerun still skips the phases done."""
    for final in sorted(output.glob("phase-*/final")):
        if keep is not None and final.resolve() == Path(keep).resolve():
            continue
        for item in final.iterdir():
            if _weight_file(item):
                item.unlink()


def _check_document_mask(config: TrainConfig, objective: str, tokenizer, streams, recipe: str) -> None:
    """Refuse `document_mask` where documents cannot be found: a masked LM, no end-of-text token, a stream packed
    with another tokenizer."""
    if config.document_mask and objective != "causal":
        raise ConfigError("document_mask is for causal LMs: a masked LM's block reads every document in it both "
                          "ways by design ([sep] between them); leave document_mask off.")
    if config.document_mask and (tokenizer.eos_token_id is None or any(stream.tokenizer for stream in streams)):
        raise ConfigError("document_mask finds documents by the end-of-text token of the model's tokenizer, "
                          + ("which this tokenizer lacks" if tokenizer.eos_token_id is None
                             else f"and recipe '{recipe}' packs a stream with another tokenizer")
                          + "; leave document_mask off.")


def _phase_model(config: TrainConfig, recipe, phase, loaded_from, objective: str, tokenizer, precision_flags: dict,
                 held=None, start=None):
    """(the phase's model, prepared by the recipe with its trainable parameters set; the dtype its folders are
    written in (None: its own); its parameter counts; the rows whose calibration was taken off; the rows started
    from the transfer's start rows). `held`: the ids `unshown_rows: hold` holds, which keep their calibration;
    `start`: `_frequent_start_rows`' answer."""
    autocast_dtype = (_autocast_dtype(precision_flags) if recipe.freezes_body(phase) and not sharding_engine()
                      else None)
    model, kept = _load_for_training(loaded_from, objective, config.seed, tokenizer, config.attention,
                                     autocast_dtype)
    undone = _calibration_start(config, model, loaded_from, held)
    placed = _start_rows_in_place(config, model, loaded_from, start)
    kept_dtype = autocast_dtype if kept else None  # the dtype the phase's model folders are written in
    recipe.prepare_model(phase, model, loaded_from)
    set_trainable(model, recipe.trainable_parameters(phase, model))
    if kept:  # what the recipe added (adapters) trains in float32 too
        for parameter in model.parameters():
            if parameter.requires_grad and parameter.dtype != torch.float32:
                parameter.data = parameter.data.to(torch.float32)
    recipe.on_phase_start(phase, model)
    counts = parameter_counts(model)
    logger.info("phase %s: %s updates, %s of %s parameters trainable, peak rate %g", phase.name, phase.steps,
                f"{counts['trainable_parameters']:,}", f"{counts['total_parameters']:,}", phase.learning_rate)
    return model, kept_dtype, counts, undone, placed


def _calibration_start(config: TrainConfig, model, folder, held=None) -> int | None:
    """`config.calibration` applied to a model loaded from a calibrated transfer's folder (one holding its
    calibration move): the rows whose move was taken off (None: the folder has no move, or `keep`). The rows `held`
    (`unshown_rows: hold`) keep theirs: training never moves them, so they stay the transfer's rows as written, the
    best rows it had to read with."""
    path = Path(folder) / MOVE_FILE
    if config.calibration == "keep" or Path(folder).resolve() != Path(config.model).resolve():
        return None  # a later phase starts from the one before, a stopped phase from its checkpoint
    if not path.is_file():
        calibration = getattr(read_model_record(folder), "calibration", None) if has_model_record(folder) else None
        spared = calibration is not None and calibration.up_only_rows is not None \
            and (calibration.up_only_rows.below_count or 0) >= config.calibration_min_count
        if calibration is not None and calibration.rows and not (config.calibration == "spare-rare" and spared):
            raise ConfigError(f"calibration is {config.calibration}, but '{folder}' has no {MOVE_FILE}: a transfer "
                              "calibrated by an older langswap; transfer again, or set calibration: keep.")
        return None  # uncalibrated, or calibrated with those rows spared already: nothing to take off
    below = config.calibration_min_count if config.calibration == "spare-rare" else None
    rows = take_off(model, CalibrationMove.load(path), below, held)
    logger.info("calibration %s: the move of %s output rows taken off before training", config.calibration,
                f"{rows:,}")
    return rows


def _frequent_start_rows(config: TrainConfig, streams, train_sets, stream_tokenizers, tokenizer, data: dict):
    """(the model folder's start rows, the ids of those the run shows at least `start_rows_shows` times), where the
    folder has start rows (`langswap.start_rows`) and `start_rows: frequent` puts them in place; None otherwise (or
    where a stream is read by a tokenizer of its own, or `calibration: undo` wants the rows uncalibrated)."""
    path = Path(config.model) / START_FILE
    if config.start_rows != "frequent" or not path.is_file():
        return None
    if any(stream_tokenizers) or (config.calibration == "undo" and (Path(config.model) / MOVE_FILE).is_file()):
        logger.info("start_rows: frequent puts no row in place here: %s", "a stream is read by a tokenizer of its own"
                    if any(stream_tokenizers) else "calibration: undo starts from the uncalibrated rows")
        return None
    start = StartRows.load(path)
    texts, counts = text_token_counts(tokenizer, [train_sets[stream.name].store.tokens for stream in streams])
    shows = np.zeros(len(texts))
    for count, stream in zip(counts, streams):
        shows += count * data[stream.name]["epochs"]
    within = start.ids < len(shows)
    if config.start_rows_own == "skip" and start.own is not None:
        within &= ~start.own  # those rows start as written
    inside = start.ids[within]
    ids = inside[shows[inside] >= config.start_rows_shows]
    logger.info("start_rows: frequent: %s of the %s rows the %s candidate makes otherwise belong to tokens the run "
                "shows at least %g times; they start from that candidate's rows", f"{len(ids):,}",
                f"{len(start.ids):,}", start.candidate, config.start_rows_shows)
    return start, ids


def _start_rows_in_place(config: TrainConfig, model, folder, start) -> int | None:
    """`start` (`_frequent_start_rows`) put in place in a model loaded from the run's model folder: the rows
    placed (None: no start rows, or a later phase, which starts from the one before)."""
    if start is None or Path(folder).resolve() != Path(config.model).resolve():
        return None
    return put_in_place(model, *start)


def _training_sets(config: TrainConfig, state, streams, tokenizer, objective: str, sequence_length: int,
                   progress: bool):
    """Each stream's blocks from its token store (built once, by one process of a multi-process run), with what the
    record says of them: (blocks by stream, tokens by stream, the streams' own tokenizers (None: the model's),
    store folders, the training data's facts)."""
    train_sets, stream_tokens, stream_tokenizers, stores, data = {}, {}, [], {}, {}
    # sequences of each stream a micro-batch reads, and micro-batches of the run on all processes
    micro_batch = dict(zip((stream.name for stream in streams), batch_counts(streams, config.batch_size)))
    micro_batches = config.steps * config.gradient_accumulation * state.num_processes
    for stream in streams:
        stream_tokenizer = _stream_tokenizer(stream, tokenizer)
        stream_tokenizers.append(stream_tokenizer if stream.tokenizer else None)
        store = _built_once(state, lambda: _stream_store(config, stream, stream_tokenizer, objective, progress))
        train_sets[stream.name] = StoreBlocks(store, stream_tokenizer, sequence_length, objective,
                                              f"training text '{stream.path}'")
        stream_tokens[stream.name], stores[stream.name] = store.num_tokens, str(store.folder)
        sequences = len(train_sets[stream.name])
        data[stream.name] = {"source": stream.path, "store": str(store.folder), "documents": store.num_documents,
                             "tokens": store.num_tokens, "sequences": sequences,
                             "epochs": round(micro_batches * micro_batch[stream.name] / sequences, 4)}
        logger.info("%s: %s documents, %s tokens in its store, %s sequences of %d; the run's %s updates read %s "
                    "epochs of it", "training text" if len(streams) == 1 else f"stream {stream.name}",
                    f"{store.num_documents:,}", f"{store.num_tokens:,}", f"{sequences:,}", sequence_length,
                    f"{config.steps:,}", f"{data[stream.name]['epochs']:.3g}")
    unshown = _never_shown(config, streams, train_sets, stream_tokenizers, tokenizer, data)
    return train_sets, stream_tokens, stream_tokenizers, stores, data, unshown


def _never_shown(config: TrainConfig, streams, train_sets, stream_tokenizers, tokenizer, data: dict):
    """The ids of the model's text tokens (`text_tokens`: added tokens, partial UTF-8 and whitespace left out) that
    no stream's store ever shows, where `unshown_rows: hold` needs them, or that the run shows fewer than
    `recalibrate_below` times, where `unshown_rows: recalibrate` needs them (None otherwise, where a stream is read
    by a tokenizer of its own, or under a sharding engine, whose flat shards no hook can hold rows of nor a move reach
    whole). Where the run reads every stream whole at least once, their number goes in `data`
    (each stream's own, `tokens_never_shown`) and is said as a warning where they are more than a tenth of the text
    tokens. Training never has such a token as a target, so every update lowers it: a tokenizer trained on the text
    itself holds many words whole and never shows the letters and syllables that new text needs for words the text
    lacks (docs/design.md, "Tokens the training text never shows")."""
    read_whole = bool(streams) and all(data[stream.name]["epochs"] >= 1 for stream in streams)
    engine = sharding_engine()
    mode = config.unshown_rows
    moves = mode in ("hold", "recalibrate") and not any(stream_tokenizers) and not engine
    if mode != "train" and engine:
        logger.warning("unshown_rows: %s moves no row under %s (its parameters are flat shards); every row trains "
                       "as the others", mode, engine)
    elif mode != "train" and not moves:
        logger.info("unshown_rows: %s moves no row here: a stream is read by a tokenizer of its own", mode)
    if not (read_whole or moves):
        return None
    counted = text_token_counts(tokenizer, [train_sets[stream.name].store.tokens for stream in streams])
    never, each, total = unshown_text_tokens(counted)
    if read_whole:
        for stream, ids in zip(streams, each):
            data[stream.name]["tokens_never_shown"] = len(ids)
        say = logger.warning if len(never) > total / 10 and not moves else logger.info
        say("%s of the model's %s text tokens never occur in the training text as its tokenizer reads it: training "
            "only lowers them, so text that needs them (words the training text lacks) reads worse the longer the "
            "run%s.", f"{len(never):,}", f"{total:,}",
            f"; unshown_rows: {mode} " + ("keeps their rows as they are" if mode == "hold" else
                                           "puts their rows back at new text's frequency when the model is written")
            if moves else ". unshown_rows: recalibrate puts their rows back at new text's frequency when the model is "
                         "written; more text, a smaller vocabulary or fewer updates avoid it")
    if moves and mode == "recalibrate":
        return rarely_shown_text_tokens(counted, [data[stream.name]["epochs"] for stream in streams],
                                        config.recalibrate_below)
    return never if moves else None


def _eval_set(config: TrainConfig, tokenizer, collator, objective: str, sequence_length: int):
    """(the evaluation blocks, their bytes per token), or (None, None) without an evaluation text. A masked LM's
    blocks are masked once, so every evaluation reads the same masks."""
    if not config.eval_text:
        return None, None
    # read a document at a time until eval_sequences blocks are full: memory does not grow with the file
    eval_documents = source_texts(config.eval_text, "evaluation text", config.text_field)
    try:
        eval_packed = pack(tokenizer, eval_documents, sequence_length, objective,
                           f"evaluation text '{config.eval_text}'", max_blocks=config.eval_sequences)
    finally:
        eval_documents.close()
    eval_set = (masked_eval_set(collator, eval_packed.blocks, config.seed) if objective == "masked"
                else BlockDataset(eval_packed.blocks))
    return eval_set, eval_packed.bytes_per_token


def _training_arguments(config: TrainConfig, phase, phase_dir: Path, evaluates: bool, precision_flags: dict,
                        progress: bool, use_cpu: bool):
    """The Trainer's arguments for one phase."""
    return TrainingArguments(
        output_dir=str(phase_dir), max_steps=phase.steps, per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size, gradient_accumulation_steps=config.gradient_accumulation,
        learning_rate=phase.learning_rate, weight_decay=config.weight_decay, adam_beta1=config.adam_beta1,
        adam_beta2=config.adam_beta2, adam_epsilon=config.adam_epsilon,
        # no clipping is an infinite norm, so the Trainer still measures the norm that `_check_update` reads
        max_grad_norm=config.max_grad_norm or math.inf,
        # a NaN loss is logged as NaN (the run stops on it); under fp16 a skipped update's loss is left out
        logging_nan_inf_filter=bool(precision_flags.get("fp16")),
        optim=_optimizer_name(config.fused_optimizer, use_cpu), torch_compile=config.compile,
        **({"use_liger_kernel": True} if config.liger_kernel else {}),
        **(_checkpointing_arguments() if config.gradient_checkpointing else {}),
        logging_steps=config.logging_steps, save_strategy="steps",
        save_steps=config.save_steps, save_total_limit=config.save_total_limit,
        eval_strategy="steps" if evaluates else "no", eval_steps=config.eval_steps, seed=config.seed,
        report_to="none", disable_tqdm=not progress, dataloader_num_workers=config.num_workers,
        remove_unused_columns=False, dataloader_pin_memory=not use_cpu, use_cpu=use_cpu,
        **precision_flags)


def _phase_summary(phase, trainer, metrics: dict, counts: dict, teacher, dropped) -> PhaseReport:
    """What the record keeps of a finished phase (logged, with the loop's speed)."""
    # the mean of the phase's logged losses: the Trainer's train_loss covers only what this process trained
    logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    teacher_report = ({"teacher": {"used": True, **teacher.phase_summary()}} if teacher is not None
                      else {"teacher": {"used": False, "check": dropped}} if dropped is not None else {})
    summary = PhaseReport.from_dict({
        "name": phase.name, "trainable": phase.trainable, "steps": trainer.state.global_step,
        "planned_steps": phase.steps, "learning_rate": phase.learning_rate, "warmup_steps": phase.warmup_steps,
        "schedule": phase.schedule, **counts,
        "train_loss": (round(sum(logged) / len(logged), 5) if logged
                       else metrics.get("train_loss")),  # a phase shorter than logging_steps
        # the loop's own speed: the updates' time, without evaluations and checkpoints
        **trainer.clock.summary(), "train_seconds": metrics.get("train_runtime"), **teacher_report})
    if trainer.clock.updates:
        logger.info("phase %s: %s updates read %s tokens in %s s of loop: %s tokens/s, %.1f%% of it waiting "
                    "for data", phase.name, f"{trainer.clock.updates:,}", f"{trainer.clock.tokens:,}",
                    f"{trainer.clock.seconds:,.1f}", f"{summary.tokens_per_second:,.0f}", 100 * summary.data_wait)
    return summary


def prepare(config: TrainConfig, progress: bool = False) -> list:
    """The token stores `train` reads for `config`, one per stream of its recipe (`TokenStore`s, in the streams'
    order): found where built before from the same files, tokenizer and options, else built (`training.store`)."""
    config.validate(training=False)
    tokenizer = load_tokenizer(config.model, f"tokenizer of model folder '{config.model}' (a model folder must hold "
                               "its tokenizer files)")
    objective = _resolve_objective(config, load_config(config.model))
    return [_stream_store(config, stream, _stream_tokenizer(stream, tokenizer), objective, progress)
            for stream in make_recipe(config).streams()]


def _with_teacher(config: TrainConfig, state, objective: str, model_config, tokenizer, train_sets: dict, collator,
                  dtype, progress: bool = False):
    """(the teacher, the collator that pads its readings, None), each training set becoming its TeacherBlocks; or
    (None, `collator`, the check) where the check drops the teacher."""
    if objective != "causal":
        raise ConfigError("teacher.weight is for causal LMs, and this model is trained as a masked LM: its hidden "
                          "state at a token reads the whole window, so the two readings of the same bytes need not "
                          "agree at a chunk boundary. Set teacher.weight: 0.")
    engine = sharding_engine()
    if engine:
        raise ConfigError(f"teacher.weight is set under {engine}, which shards the model; the teacher would be a "
                          "whole unsharded copy on every process. Train with a teacher under DDP (`accelerate "
                          "launch` without FSDP or DeepSpeed) or torchrun, or set teacher.weight: 0.")
    teacher, teacher_tokenizer = load_teacher(config.teacher, config.model, model_config, dtype)
    views = {name: TeacherBlocks(blocks, tokenizer, teacher_tokenizer, position_limit(teacher.model.config),
                                 progress and state.is_local_main_process)
             for name, blocks in train_sets.items()}
    teacher.sizes = (len(teacher_tokenizer), len(tokenizer))
    teacher.check = _check_teacher(config, state, teacher, next(iter(views.values())),
                                   (len(teacher_tokenizer), len(tokenizer)))
    if not config.teacher.teaches(teacher.check):
        logger.warning("the teacher is not used: before any update it reads the first training blocks worse than "
                       "the model does (%.2f against %.2f nats a block); teacher.when: always teaches anyway",
                       teacher.check["teacher_nats_per_block"], teacher.check["student_nats_per_block"])
        return None, collator, teacher.check
    train_sets.update(views)
    pad = teacher_tokenizer.pad_token_id if teacher_tokenizer.pad_token_id is not None else 0
    return teacher, TeacherCollator(collator, pad, teacher_tokenizer.eos_token_id), None


def _check_teacher(config: TrainConfig, state, teacher, view, sizes: tuple[int, int]) -> dict:
    """`teacher_check` of the model the run starts from, decided by the main process and given to every other (two
    GPUs need not round a near tie alike); not measured under `teacher.when: always`."""
    if config.teacher.when == "always":
        return {"measured": False, "why": "teacher.when is always"}
    check = None
    if state.is_main_process:
        # both in the teacher's precision, on the run's device
        dtype = next(teacher.model.parameters()).dtype
        teacher.model.to(state.device)
        student = load_model(config.model).to(state.device, dtype).eval()
        check = teacher_check(teacher.model, student, view, sizes)
        del student
        logger.info("teacher check on %s training blocks: teacher %s, model %s nats a block",
                    check.get("blocks"), check.get("teacher_nats_per_block"), check.get("student_nats_per_block"))
    if state.num_processes > 1:
        check = broadcast_object_list([check])[0]
    return check


def _stream_tokenizer(stream, tokenizer):
    """The tokenizer that packs `stream`: its own where the recipe gives it one, else the model's."""
    return load_tokenizer(stream.tokenizer, f"tokenizer of stream {stream.name}") if stream.tokenizer else tokenizer


def _stream_store(config: TrainConfig, stream, tokenizer, objective: str, progress: bool):
    return token_store([stream.path], tokenizer, objective, config.text_field, config.max_lines, config.data_dir,
                       progress, "training text")


def _built_once(state, build):
    """`build()` in the local main process of each machine first, then in the other processes, which find its
    result (a token store) there and open it. An error of the builder reaches every process: they would otherwise
    wait for it at the next collective forever."""
    if state.num_processes == 1:
        return build()

    result, error, original = None, None, None
    if state.is_local_main_process:
        try:
            result = build()
        except LangswapError as raised:
            error = original = raised
        except Exception as raised:  # a bug: the others stop with a pointer to the main process's traceback
            original, error = raised, RuntimeError(f"the local main process failed: {raised!r}")
    errors = [item for item in gather_object([error]) if item is not None]
    if original is not None:
        raise original
    if errors:
        raise errors[0]
    return result if result is not None else build()


def _record_failure(output: Path, error: TrainingDivergedError, state) -> None:
    """A diverged run: `langswap-train.json` (written when the run started) says failed and why, the curve keeps what
    was logged, no model/ is written; the phase's checkpoints (all written before the failed update) are kept."""
    phase_dir = output / f"phase-{error.details['phase']}"
    checkpoint = get_last_checkpoint(str(phase_dir)) if phase_dir.is_dir() else None
    last_good = (f"The last good checkpoint, {checkpoint}, is kept: rerunning this command resumes from it and "
                 "will diverge again")
    if checkpoint is None:
        last_good = "The phase had no checkpoint yet"
    tries = ["a lower learning_rate (--set learning_rate=...)", "a lower max_grad_norm"]
    if error.details.get("precision") == "fp16":
        tries.insert(1, "precision bf16 or fp32 (fp16 overflows where they do not)")
    error.args = (f"{error.args[0]} {last_good}. Try {', '.join(tries[:-1])} or {tries[-1]}, with another --output "
                  "or --overwrite; `langswap evaluate MODEL --text ...` on the starting model shows whether it "
                  "already gives NaN.",)
    if state.is_main_process:
        record = dataclasses.replace(read_train_record(output), status="failed", failure={
            **error.details, "last_checkpoint": checkpoint, "message": error.args[0]})
        write_train_record(output, record)


def _link_or_copy(item: Path, target: Path, link: bool) -> None:
    if link:
        try:
            os.link(item, target)
            return
        except OSError:  # another file system, or one without hard links
            pass
    shutil.copy2(item, target)


def _write_model(last_final: Path, folder: Path, record: TrainRecord, phases: list[PhaseReport], curve: dict) -> None:
    """Copy the last phase's weights and tokenizer to output/model with a langswap.json that keeps the record of the
    folder it was trained from (when langswap wrote that folder) and adds the training. Weights of a phase of this
    run are hard-linked where the file system allows (no second copy on disk; the phase's are dropped after)."""
    start = Path(record.config["model"])
    ours = Path(last_final).resolve().is_relative_to(folder.parent.resolve())
    with atomic_directory(folder, overwrite=True) as temporary:
        for item in Path(last_final).iterdir():
            if item.is_file() and item.name != "phase.json" and item.name != "training_args.bin":
                _link_or_copy(item, temporary / item.name, ours and _weight_file(item))
        portable_tokenizer_config(temporary)
        provenance = start / "provenance.tsv"
        if provenance.is_file():
            shutil.copy2(provenance, temporary / "provenance.tsv")
        info = read_model_record(start) if has_model_record(start) else ModelRecord()
        info.training = TrainingSection(langswap_version=__version__, config=record.config,
                                        objective=record.objective, phases=phases,
                                        final_eval=curve.get("eval", [])[-1:] if curve else [])
        write_model_record(temporary, info)
        write_model_card(temporary)
