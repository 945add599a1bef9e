"""`train(config)`: continued pretraining of a model folder, in phases, on the Hugging Face Trainer.

The Trainer is the engine, so `accelerate launch` and `torchrun` spread a run over many GPUs (or CPU processes) with
no distribution code here; bf16/fp16, gradient accumulation and seeding are the Trainer's. What langswap adds:

- phases and the papers' schedules (`phases.py`): each phase is one Trainer run with its own optimizer; a phase
  starts from the previous phase's final weights;
- checkpoints that are never half-written (written under `.staging/` and renamed into `checkpoint-N`), and resume:
  running the same command again continues from the last checkpoint of the unfinished phase and ends with the same
  weights as an uninterrupted run (the Trainer restores optimizer, schedule, data order and RNG states). A different
  config for an existing output folder is an error that lists the differences;
- an evaluation curve on held-out text (at step 0, every `eval_steps`, and at the end of each phase), written as
  `curve.json` and `curve.png`; for causal LMs the loss is also shown as bits per byte, estimated with the held-out
  text's bytes per token;
- model-only snapshots at chosen steps (`snapshot_steps`, used by `langswap bench`).

Output folder:
    langswap-train.json      resolved config, version, phases, status
    phase-1-embeddings/      Trainer checkpoints of the phase; final/ when the phase is done
    snapshots/step-N/        (optional) model + tokenizer at global step N
    curve.json, curve.png
    model/                   the trained model + tokenizer; from_pretrained(output/model) loads it

Not handled: streaming datasets, FSDP/DeepSpeed-specific checkpoint formats (the Trainer's own handling applies).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from langswap import __version__
from langswap.config import to_dict
from langswap.errors import ConfigError, MissingResourceError, OutputExistsError, TrainingDivergedError
from langswap.files import atomic_write_text, replace_directory
from langswap.training.phases import PRESETS, Phase, plan_phases, remaining_phases, set_trainable

logger = logging.getLogger(__name__)

RECORD = "langswap-train.json"
# Under fp16 an update whose gradients overflow is skipped by the loss scaler, which halves its scale; this many
# skipped in a row (a scale 2^-30 of where it started) means the gradients overflow at every scale.
FP16_SKIPPED_UPDATES_LIMIT = 30
# Fields that may change when a run is resumed: they do not change the weights a run ends with.
RESUMABLE_CHANGES = {"overwrite", "save_steps", "save_total_limit", "snapshot_steps", "eval_steps", "num_workers"}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Continued pretraining of a model folder on target-language text."""

    model: str = field(default="", metadata={"help": "Model folder with its tokenizer, e.g. a `langswap transfer` "
                                                     "output (required)."})
    train_text: str = field(default="", metadata={"help": "Training text: .txt/.gz (a document per line) or .jsonl "
                                                          "(required)."})
    eval_text: str | None = field(default=None, metadata={"help": "Held-out text for the evaluation curve."})
    output: str = field(default="", metadata={"help": "Output folder (required); rerun to resume."})
    overwrite: bool = field(default=False, metadata={"help": "Delete an existing output folder and start again."})
    objective: str = field(default="auto", metadata={"help": "causal, masked, or auto (from the model's "
                                                             "architecture).", "choices": ("auto", "causal", "masked")})
    preset: str = field(default="wechsel", metadata={"help": "Phases and schedule: wechsel/fullrand (full model), "
                                                             "transinner, tiktotok, embeddings (embeddings only), "
                                                             "full.", "choices": PRESETS})
    steps: int = field(default=1000, metadata={"help": "Optimizer updates over all phases."})
    learning_rate: float | None = field(default=None, metadata={"help": "Peak rate; default 5e-4 (causal) or 1e-4 "
                                                                        "(masked), as in WECHSEL."})
    warmup_fraction: float = field(default=0.1, metadata={"help": "Share of a phase's updates spent warming up."})
    embedding_fraction: float | None = field(default=None, metadata={"help": "transinner: share of the steps that "
                                                                            "train only embeddings (default 0.1); "
                                                                            "tiktotok: the most they may take "
                                                                            "(default 0.5)."})
    settle_window: int = field(default=50, metadata={"help": "tiktotok: steps per window when judging whether the "
                                                             "loss has settled."})
    settle_tolerance: float = field(default=0.01, metadata={"help": "tiktotok: the loss has settled when a window "
                                                                    "improves on the one before by less than this "
                                                                    "share."})
    full_lr_scale: float = field(default=0.2, metadata={"help": "tiktotok: full-model rate as a share of the peak."})
    full_warmup_fraction: float = field(default=0.25, metadata={"help": "tiktotok: warm-up share of the full "
                                                                        "phase."})
    batch_size: int = field(default=8, metadata={"help": "Sequences per device per forward pass."})
    gradient_accumulation: int = field(default=1, metadata={"help": "Forward passes per update."})
    sequence_length: int = field(default=512, metadata={"help": "Tokens per packed sequence (capped at the "
                                                                "model's context)."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (not on biases and norms)."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW beta2."})
    adam_epsilon: float = field(default=1e-6, metadata={"help": "AdamW epsilon."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0: no clipping)."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Masked LM: share of tokens predicted."})
    precision: str = field(default="auto", metadata={"help": "auto (bf16 on GPUs that have it, else fp16 on GPUs, "
                                                             "fp32 on CPU), fp32, bf16 or fp16.",
                                                     "choices": ("auto", "fp32", "bf16", "fp16")})
    seed: int = field(default=0, metadata={"help": "Seed of data order, masking and dropout."})
    save_steps: int = field(default=100, metadata={"help": "Checkpoint every N updates (for resuming)."})
    save_total_limit: int = field(default=2, metadata={"help": "Checkpoints kept per phase."})
    eval_steps: int = field(default=100, metadata={"help": "Evaluate on eval_text every N updates."})
    eval_sequences: int = field(default=64, metadata={"help": "Packed sequences of eval_text evaluated."})
    logging_steps: int = field(default=10, metadata={"help": "Log the training loss every N updates (tiktotok: at "
                                                             "most settle_window)."})
    snapshot_steps: list[int] = field(default_factory=list, metadata={"help": "Also save the model at these "
                                                                              "global steps (snapshots/step-N)."})
    text_field: str = field(default="text", metadata={"help": "Key of the text in .jsonl files."})
    max_lines: int | None = field(default=None, metadata={"help": "Read at most this many training documents."})
    num_workers: int = field(default=0, metadata={"help": "Data-loader worker processes."})

    def validate(self) -> None:
        for name in ("model", "train_text", "output"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is not set (--{name.replace('_', '-')} or `{name}:` in the config).")
        if not Path(self.model).is_dir():
            raise MissingResourceError(f"model folder '{self.model}' does not exist; give a folder written by "
                                       "`langswap transfer` or save_pretrained.")
        for name in ("train_text", "eval_text"):
            value = getattr(self, name)
            if value and not Path(value).is_file():
                raise MissingResourceError(f"{name} '{value}' does not exist.")
        positive = ("steps", "batch_size", "gradient_accumulation", "save_steps", "eval_steps", "eval_sequences",
                    "logging_steps", "save_total_limit", "settle_window")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; it must be at least 1.")
        for name in ("warmup_fraction", "embedding_fraction", "full_warmup_fraction", "mlm_probability"):
            if getattr(self, name) is not None and not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; it must be between 0 and 1.")
        if not self.max_grad_norm >= 0:
            raise ConfigError(f"max_grad_norm is {self.max_grad_norm}; give a positive norm, or 0 for no clipping.")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate is {self.learning_rate}; give a positive rate or leave it unset.")
        if self.preset == "tiktotok" and self.logging_steps > self.settle_window:
            raise ConfigError(f"logging_steps is {self.logging_steps} but settle_window is {self.settle_window}: the "
                              "tiktotok preset judges the logged training loss per window, so a window needs at "
                              "least one logged loss. Set logging_steps to at most settle_window.")
        bad = [step for step in self.snapshot_steps if not 0 <= step <= self.steps]
        if bad:
            raise ConfigError(f"snapshot_steps {bad} are outside 0..steps ({self.steps}).")


@dataclass
class TrainReport:
    output: Path
    model: Path  # the trained model folder
    objective: str
    phases: list[dict]
    curve: dict
    resumed: bool
    seconds: float


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
    record_path = output / RECORD
    if not record_path.is_file():
        if output.is_dir() and not any(output.iterdir()):
            return "fresh"
        raise OutputExistsError(f"output folder '{output}' exists and is not a langswap training run; choose another "
                                "--output or pass --overwrite to replace it.")
    record = json.loads(record_path.read_text(encoding="utf-8"))
    before, now = record.get("comparable_config", {}), comparable_config(config)
    changed = [f"{key}: was {before.get(key)!r}, now {now.get(key)!r}" for key in sorted(set(before) | set(now))
               if before.get(key) != now.get(key)]
    complete = record.get("status") == "complete" and (output / "model").is_dir()
    if not complete and record.get("processes", processes) != processes:  # an update's batch: batch_size x processes
        changed.append(f"processes: was {record['processes']}, now {processes}")
    if changed:
        raise ConfigError(f"output folder '{output}' holds a run with a different config, so it cannot be resumed ("
                          + "; ".join(changed) + "). Use the same values to resume, another --output, or "
                          "--overwrite to start again.")
    return "complete" if complete else "resume"


def _write_record(output: Path, record: dict) -> None:
    atomic_write_text(output / RECORD, json.dumps(record, indent=2, ensure_ascii=False))


def _resolve_objective(config: TrainConfig, model_config) -> str:
    from langswap.models import objective_of

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
    import torch

    if precision == "auto":
        if torch.cuda.is_available():
            return {"bf16": True} if torch.cuda.is_bf16_supported() else {"fp16": True}
        return {}
    return {"bf16": True} if precision == "bf16" else {"fp16": True} if precision == "fp16" else {}


def _precision_name(flags: dict) -> str:
    return "bf16" if flags.get("bf16") else "fp16" if flags.get("fp16") else "fp32"


# -- the Trainer and its callbacks --------------------------------------------------------------------------------------

def _trainer_class():
    import torch
    from transformers import Trainer

    class PhaseTrainer(Trainer):
        """The Trainer with a phase's schedule and checkpoints written under a temporary name."""

        def __init__(self, *args, phase: Phase, phase_index: int = 0, offset: int = 0, precision: str = "fp32",
                     **kwargs):
            self.phase, self.phase_index, self.offset, self.precision = phase, phase_index, offset, precision
            self._staging: str | None = None
            self._losses_finite: torch.Tensor | None = None  # all micro-batch losses of this update finite
            self._skipped_in_a_row = 0
            super().__init__(*args, **kwargs)

        def training_step(self, model, inputs, *args, **kwargs):
            loss = super().training_step(model, inputs, *args, **kwargs)
            finite = torch.isfinite(loss.detach()).all()  # stays on the device: read once per update
            self._losses_finite = finite if self._losses_finite is None else self._losses_finite & finite
            return loss

        def _maybe_log_save_evaluate(self, tr_loss, grad_norm, *args, **kwargs):
            # called once per update, after the optimizer step and before logging, evaluation and checkpointing, so a
            # diverged update is never saved
            self._check_update(grad_norm)
            return super()._maybe_log_save_evaluate(tr_loss, grad_norm, *args, **kwargs)

        def _check_update(self, grad_norm) -> None:
            """Stop on a non-finite training loss or gradient norm. Under fp16 the loss scaler skips an update whose
            gradients overflow and lowers its scale, which is routine; only a long run of skipped updates stops."""
            if self._losses_finite is None:  # the epoch-end call repeats the last update's
                return
            losses_finite, self._losses_finite = bool(self._losses_finite), None
            norm = None if grad_norm is None else float(grad_norm)
            if self.args.fp16 and self.accelerator.optimizer_step_was_skipped:
                self._skipped_in_a_row += 1
                if self._skipped_in_a_row < FP16_SKIPPED_UPDATES_LIMIT:
                    return
                reason = (f"the fp16 loss scaler skipped {self._skipped_in_a_row} updates in a row (their gradients "
                          "overflow at every scale)")
            else:
                self._skipped_in_a_row = 0
                if losses_finite and (norm is None or math.isfinite(norm)):
                    return
                reason = ("the training loss is " + ("finite" if losses_finite else "NaN or infinite")
                          + f" and the gradient norm is {norm}")
            self._diverged(reason)

        def _diverged(self, reason: str) -> None:
            step = self.state.global_step
            rate = self.phase.learning_rate_at(max(step - 1, 0))
            where = (f"update {self.offset + step} (update {step} of phase {self.phase.name}" if step
                     else f"step {self.offset} (before the first update of phase {self.phase.name}")
            raise TrainingDivergedError(
                f"training stopped at {where}, learning rate {rate:.3g}, precision {self.precision}): {reason}.",
                phase=self.phase.name,
                step=self.offset + step, learning_rate=rate, precision=self.precision, reason=reason)

        def get_batch_samples(self, epoch_iterator, num_batches, *args, **kwargs):
            """The batches of one update; a masked-LM batch (no labels yet) is masked as it is drawn, from a
            generator seeded by (seed, phase, process, update), so a resumed run draws the masks the uninterrupted
            one drew whatever the data loader collated ahead, and the Trainer counts the masked tokens of all
            accumulated micro-batches for the loss. (The Trainer's signature differs across versions: `device` from
            transformers 4.48 on.)"""
            if getattr(self.data_collator, "objective", None) != "masked":
                return super().get_batch_samples(epoch_iterator, num_batches, *args, **kwargs)
            generator = torch.Generator().manual_seed(
                hash((self.args.seed, self.phase_index, self.args.process_index, self.state.global_step))
                & 0x7FFF_FFFF_FFFF_FFFF)

            def masked():
                for batch in epoch_iterator:
                    if "labels" not in batch:
                        batch["input_ids"], batch["labels"] = self.data_collator.mask(batch["input_ids"], generator)
                    yield batch

            return super().get_batch_samples(masked(), num_batches, *args, **kwargs)

        def _get_train_sampler(self, train_dataset=None):
            # The phase's dataset is its slice of the run's stream, already shuffled (`data.StreamSlice`).
            return torch.utils.data.SequentialSampler(train_dataset if train_dataset is not None
                                                      else self.train_dataset)

        def evaluate(self, *args, **kwargs):
            """Evaluation leaves the random state as it found it: building its data loader draws from the global
            generator, which would move every later dropout mask, so a run resumed without the step-0 evaluation,
            or evaluated at other steps, would end with other weights."""
            saved = _random_state()
            try:
                metrics = super().evaluate(*args, **kwargs)
            finally:
                _set_random_state(saved)
            loss = metrics.get("eval_loss")
            if loss is not None and not math.isfinite(loss):
                self._diverged(f"the held-out loss is {loss}")
            return metrics

        def create_scheduler(self, num_training_steps: int, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer,
                                                                      self.phase.lr_factor)
            return self.lr_scheduler

        def _get_output_dir(self, trial):
            return self._staging or super()._get_output_dir(trial)

        def _save_checkpoint(self, model, trial, *args, **kwargs):  # 4.x also passes `metrics`
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            run_dir = self.args.output_dir
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            self._staging = os.path.join(run_dir, ".staging")
            try:
                super()._save_checkpoint(model, trial, *args, **kwargs)
            finally:
                self._staging = None
            self.accelerator.wait_for_everyone()  # every rank has written its RNG state
            if self.args.should_save:
                replace_directory(Path(run_dir, ".staging", name), Path(run_dir, name))
                shutil.rmtree(os.path.join(run_dir, ".staging"), ignore_errors=True)
                try:  # a function from transformers 5 on, a Trainer method before
                    from transformers.trainer_utils import rotate_checkpoints
                except ImportError:
                    self._rotate_checkpoints(use_mtime=False, output_dir=run_dir)
                else:
                    rotate_checkpoints(output_dir=run_dir, save_total_limit=self.args.save_total_limit,
                                       use_mtime=False)
            self.accelerator.wait_for_everyone()

    return PhaseTrainer


def settled(log_history: list[dict], step: int, window: int, tolerance: float) -> tuple[float, float] | None:
    """(mean loss of the window before, of the last window) when the training loss logged up to `step` has settled:
    the last `window` updates improve on the `window` before them by less than `tolerance` (a share); else None.

    Judged only at a step whose training loss was logged: an evaluation logged at another step sees other windows,
    so how often a run evaluates would move the stop."""
    if step < 2 * window:
        return None
    losses = [(entry["step"], entry["loss"]) for entry in log_history if "loss" in entry]
    if not any(logged == step for logged, _ in losses):
        return None
    last = [loss for s, loss in losses if step - window < s <= step]
    previous = [loss for s, loss in losses if step - 2 * window < s <= step - window]
    if last and previous:
        before, now = sum(previous) / len(previous), sum(last) / len(last)
        if before > 0 and (before - now) / before < tolerance:
            return before, now
    return None


def _settled_checkpoint(checkpoint: str | None, config: TrainConfig) -> int | None:
    """The step of `checkpoint` when an until-settled phase stopped there: the rule held at a log of that step, so
    the uninterrupted run ended the phase at it (a resumed Trainer would clear the stop and train on)."""
    if checkpoint is None or not (Path(checkpoint) / "trainer_state.json").is_file():
        return None
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text(encoding="utf-8"))
    step, history = state.get("global_step", 0), state.get("log_history", [])
    return step if settled(history, step, config.settle_window, config.settle_tolerance) else None


def _random_state() -> dict:
    import random

    import numpy
    import torch

    return {"python": random.getstate(), "numpy": numpy.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_random_state(saved: dict) -> None:
    import random

    import numpy
    import torch

    random.setstate(saved["python"])
    numpy.random.set_state(saved["numpy"])
    torch.set_rng_state(saved["torch"])
    if saved["cuda"] is not None:
        torch.cuda.set_rng_state_all(saved["cuda"])


def _callbacks(config: TrainConfig, phase: Phase, offset: int, curve_writer):
    from transformers import TrainerCallback

    class Settle(TrainerCallback):
        """Stop an until-settled phase once the mean training loss of the last window improves on the window
        before it by less than settle_tolerance (a pure function of the logged losses, so a resumed run stops
        where the uninterrupted one did)."""

        def on_log(self, args, state, control, **kwargs):
            means = settled(state.log_history, state.global_step, config.settle_window, config.settle_tolerance)
            if means:
                logger.info("loss settled at step %d (%.4f -> %.4f); ending the embeddings phase",
                            state.global_step, *means)
                control.should_training_stop = True

    class Snapshots(TrainerCallback):
        trainer = None

        def on_step_end(self, args, state, control, **kwargs):
            step = offset + state.global_step
            if step in config.snapshot_steps:
                save_model_atomically(self.trainer, Path(config.output) / "snapshots" / f"step-{step}")

    class Curve(TrainerCallback):
        def on_log(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                curve_writer(phase, offset, state.log_history, plot="eval_loss" in state.log_history[-1])

    callbacks = [Curve()]
    if phase.until_settled:
        callbacks.append(Settle())
    snapshots = Snapshots() if config.snapshot_steps else None
    if snapshots:
        callbacks.append(snapshots)
    return callbacks, snapshots


def save_model_atomically(trainer, folder: Path, extra: dict | None = None) -> None:
    """trainer.save_model into a temporary folder, renamed to `folder` by the main process when all ranks are done."""
    temporary = folder.with_name(f".{folder.name}.partial")
    if trainer.args.should_save and temporary.exists():
        shutil.rmtree(temporary)  # left by an interrupted run
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(temporary))
    trainer.accelerator.wait_for_everyone()
    if trainer.args.should_save:
        for name, content in (extra or {}).items():
            (temporary / name).write_text(json.dumps(content, indent=2, ensure_ascii=False), encoding="utf-8")
        replace_directory(temporary, folder)
    trainer.accelerator.wait_for_everyone()


# -- the curve ----------------------------------------------------------------------------------------------------------

class CurveWriter:
    """Builds curve.json / curve.png from the finished phases' histories and the running phase's log."""

    def __init__(self, output: Path, objective: str, bytes_per_token: float | None):
        self.output, self.objective, self.bytes_per_token = output, objective, bytes_per_token
        self.done: list[tuple[Phase, int, list[dict]]] = []
        self.step0: dict | None = None

    def entries(self, phase: Phase | None = None, offset: int = 0, history: list[dict] = ()) -> dict:
        train, evaluation, boundaries = [], [], []
        if self.step0 is not None:
            evaluation.append(self._eval_entry(0, "start", self.step0))
        parts = self.done + ([(phase, offset, list(history))] if phase is not None else [])
        for part, start, log in parts:
            boundaries.append({"step": start, "phase": part.name})
            for entry in log:
                step = start + int(entry.get("step", 0))
                if "loss" in entry:
                    train.append({"step": step, "phase": part.name, "loss": round(entry["loss"], 5),
                                  "learning_rate": entry.get("learning_rate")})
                if "eval_loss" in entry:
                    evaluation.append(self._eval_entry(step, part.name, entry))
        return {"objective": self.objective, "bytes_per_token": self.bytes_per_token, "phases": boundaries,
                "train": train, "eval": evaluation}

    def _eval_entry(self, step: int, phase: str, metrics: dict) -> dict:
        loss = metrics["eval_loss"]
        entry = {"step": step, "phase": phase, "loss": round(loss, 5)}
        if self.objective == "causal" and self.bytes_per_token:
            entry["bits_per_byte"] = round(loss / math.log(2) / self.bytes_per_token, 5)
        return entry

    def __call__(self, phase: Phase | None = None, offset: int = 0, history: list[dict] = (), plot: bool = True):
        curve = self.entries(phase, offset, history)
        atomic_write_text(self.output / "curve.json", json.dumps(curve, indent=2))
        if plot:
            self.plot(curve)
        return curve

    def plot(self, curve: dict) -> None:
        from langswap.plots import line_panels

        losses = {}
        if curve["train"]:
            losses["training"] = ([e["step"] for e in curve["train"]], [e["loss"] for e in curve["train"]])
        if curve["eval"]:
            losses["held-out"] = ([e["step"] for e in curve["eval"]], [e["loss"] for e in curve["eval"]])
        if not losses:
            return
        unit = "masked-LM loss (nats/token)" if self.objective == "masked" else "loss (nats/token)"
        panels = [(unit, losses)]
        if curve["eval"] and "bits_per_byte" in curve["eval"][0]:
            panels.append(("held-out bits per byte (estimated)", {
                "held-out": ([e["step"] for e in curve["eval"]], [e["bits_per_byte"] for e in curve["eval"]])}))
        vlines = [(p["step"], p["phase"]) for p in curve["phases"]]
        line_panels(self.output / "curve.png", panels, "update", title=f"training curve: {self.output.name}",
                    vlines=vlines)


# -- the run ------------------------------------------------------------------------------------------------------------

def _load_for_training(folder: str | Path, objective: str, seed: int, tokenizer=None):
    """The model in fp32 (master weights; bf16/fp16 are autocast by the Trainer), refused when a weight is NaN or
    infinite, with every input embedding row trainable and non-zero (`numerics.prepare_embeddings_for_training`)."""
    import torch

    from langswap.models import load_model
    from langswap.numerics import prepare_embeddings_for_training, refuse_non_finite

    model = load_model(folder, objective).to(torch.float32)
    refuse_non_finite(model, f"model '{folder}'", "Training cannot start from it: give the checkpoint it was made "
                      "from, or transfer the embeddings again (`langswap transfer`).")
    prepare_embeddings_for_training(model, seed, tokenizer, f"model '{folder}'")
    return model


def train(config: TrainConfig, progress: bool = False, callbacks: list | None = None) -> TrainReport:
    """Train `config.model` as `config.preset` says; resumes an interrupted run in `config.output`. One process (or
    one multi-process run) at a time writes an output folder: another gets `OutputLockedError`."""
    import torch
    from transformers import TrainingArguments

    from langswap.models import quiet_transformers

    clock = time.perf_counter()
    config.validate()
    quiet_transformers(progress)
    output = Path(config.output)
    from accelerate import PartialState

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
    from langswap.errors import OutputLockedError
    from langswap.locking import OutputLock

    lock, refusal = None, None
    if state.is_main_process:
        try:
            lock = OutputLock(output, "training output folder").acquire()
        except OutputLockedError as error:
            refusal = str(error)
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

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
    from transformers import TrainingArguments
    from transformers.trainer_utils import get_last_checkpoint

    from langswap.models import load_config, load_tokenizer
    from langswap.training.data import (BlockDataset, LMCollator, StreamSlice, masked_eval_set, pack,
                                        read_documents)

    output = Path(config.output)
    status = _check_output(config, state.num_processes)
    if status == "complete":
        record = json.loads((output / RECORD).read_text(encoding="utf-8"))
        logger.info("%s is already complete; nothing to do", output)
        return TrainReport(output, output / "model", record["objective"], record["phases"],
                           json.loads((output / "curve.json").read_text()) if (output / "curve.json").exists()
                           else {}, True, 0.0)

    tokenizer = load_tokenizer(config.model, f"tokenizer of model folder '{config.model}' (a model folder must hold "
                               "its tokenizer files)")
    model_config = load_config(config.model)
    objective = _resolve_objective(config, model_config)
    context = getattr(model_config, "max_position_embeddings", None) or config.sequence_length
    sequence_length = min(config.sequence_length, context)
    if sequence_length < config.sequence_length:
        logger.warning("sequence_length %d is longer than the model's context; using %d", config.sequence_length,
                       sequence_length)
    documents = read_documents(config.train_text, "training text", config.text_field, config.max_lines)
    packed = pack(tokenizer, documents, sequence_length, objective, f"training text '{config.train_text}'")
    collator = LMCollator(tokenizer, objective, config.mlm_probability)
    train_set = BlockDataset(packed.blocks)
    eval_set, bytes_per_token = None, None
    if config.eval_text:
        eval_documents = read_documents(config.eval_text, "evaluation text", config.text_field)
        eval_packed = pack(tokenizer, eval_documents, sequence_length, objective,
                           f"evaluation text '{config.eval_text}'", max_blocks=config.eval_sequences)
        bytes_per_token = eval_packed.bytes_per_token
        eval_set = (masked_eval_set(collator, eval_packed.blocks, config.seed) if objective == "masked"
                    else BlockDataset(eval_packed.blocks))
    logger.info("training text: %s documents, %s tokens, %s sequences of %d", f"{len(documents):,}",
                f"{packed.tokens:,}", f"{len(train_set):,}", sequence_length)

    precision_flags = _precision_flags(config.precision)
    planned = plan_phases(config, objective)
    record = {"langswap_version": __version__, "config": to_dict(config),
              "comparable_config": comparable_config(config),
              "objective": objective, "sequence_length": sequence_length, "training_sequences": len(train_set),
              "training_tokens": packed.tokens, "processes": state.num_processes, "status": "running",
              "phases": [phase.__dict__ for phase in planned]}
    if state.is_main_process:
        if config.overwrite and output.exists():
            shutil.rmtree(output)
        output.mkdir(parents=True, exist_ok=True)
        _write_record(output, record)
    state.wait_for_everyone()

    curve = CurveWriter(output, objective, bytes_per_token)
    step0_path = output / "eval-step0.json"
    if step0_path.exists():
        curve.step0 = json.loads(step0_path.read_text())
    PhaseTrainer = _trainer_class()
    done_steps: list[int] = []
    summaries: list[dict] = []
    start_model: str | Path = config.model
    resumed = status == "resume"
    offset = 0
    for index in range(len(planned)):
        phase = remaining_phases(planned, done_steps, config)[index]
        phase_dir = output / f"phase-{phase.name}"
        final = phase_dir / "final"
        if (final / "phase.json").is_file():
            summary = json.loads((final / "phase.json").read_text())
            curve.done.append((phase, offset, summary.pop("log_history")))
            summaries.append(summary)
            done_steps.append(summary["steps"])
            offset += summary["steps"]
            start_model = final
            continue
        checkpoint = get_last_checkpoint(str(phase_dir)) if phase_dir.is_dir() else None
        # An until-settled phase whose loss settled at its last checkpoint ended there: it is not resumed (a resumed
        # Trainer clears the stop and trains on), its checkpoint is its result.
        stopped_at = _settled_checkpoint(checkpoint, config) if phase.until_settled else None
        model = _load_for_training(checkpoint if stopped_at else start_model, objective, config.seed, tokenizer)
        counts = set_trainable(model, phase.trainable)
        logger.info("phase %s: %s updates, %s of %s parameters trainable, peak rate %g", phase.name, phase.steps,
                    f"{counts['trainable_parameters']:,}", f"{counts['total_parameters']:,}", phase.learning_rate)
        args = TrainingArguments(
            output_dir=str(phase_dir), max_steps=phase.steps, per_device_train_batch_size=config.batch_size,
            per_device_eval_batch_size=config.batch_size, gradient_accumulation_steps=config.gradient_accumulation,
            learning_rate=phase.learning_rate, weight_decay=config.weight_decay, adam_beta1=config.adam_beta1,
            adam_beta2=config.adam_beta2, adam_epsilon=config.adam_epsilon,
            # no clipping is an infinite norm, so the Trainer still measures the norm that `_check_update` reads
            max_grad_norm=config.max_grad_norm or math.inf,
            # a NaN loss is logged as NaN (the run stops on it); under fp16 a skipped update's loss is left out
            logging_nan_inf_filter=bool(precision_flags.get("fp16")),
            optim="adamw_torch", logging_steps=config.logging_steps, save_strategy="steps",
            save_steps=config.save_steps, save_total_limit=config.save_total_limit,
            eval_strategy="steps" if eval_set is not None else "no", eval_steps=config.eval_steps, seed=config.seed,
            report_to="none", disable_tqdm=not progress, dataloader_num_workers=config.num_workers,
            remove_unused_columns=False, dataloader_pin_memory=not use_cpu, use_cpu=use_cpu,
            **precision_flags)
        phase_callbacks, snapshots = _callbacks(config, phase, offset, curve)
        # this phase's slice of the run's one shuffled stream: it goes on where the phase before stopped
        per_update = config.batch_size * config.gradient_accumulation * state.num_processes
        phase_set = StreamSlice(train_set, config.seed, offset * per_update, phase.steps * per_update)
        trainer = PhaseTrainer(model=model, args=args, train_dataset=phase_set, eval_dataset=eval_set,
                               data_collator=collator, processing_class=tokenizer, phase=phase, phase_index=index,
                               offset=offset, precision=_precision_name(precision_flags),
                               callbacks=phase_callbacks + list(callbacks or []))
        if not progress:
            from transformers.trainer_callback import PrinterCallback

            trainer.remove_callback(PrinterCallback)  # it prints every log line when there is no progress bar
        if snapshots:
            snapshots.trainer = trainer
        if state.is_main_process and (phase_dir / ".staging").exists():
            shutil.rmtree(phase_dir / ".staging")  # a checkpoint an interrupted run did not finish
        if checkpoint:
            resumed = True
            logger.info("resuming phase %s from %s", phase.name, checkpoint)
        if index == 0 and checkpoint is None and eval_set is not None and curve.step0 is None:
            curve.step0 = trainer.evaluate()
            if state.is_main_process:
                atomic_write_text(step0_path, json.dumps(curve.step0))
        if index == 0 and 0 in config.snapshot_steps and checkpoint is None:
            save_model_atomically(trainer, output / "snapshots" / "step-0")
        if stopped_at:
            from transformers import TrainerState

            logger.info("phase %s: the loss settled at its checkpoint of step %d; the phase ends there", phase.name,
                        stopped_at)
            trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / "trainer_state.json"))
            metrics = {}
        else:
            metrics = trainer.train(resume_from_checkpoint=checkpoint).metrics
        steps = trainer.state.global_step
        if eval_set is not None and not any(e.get("step") == steps and "eval_loss" in e
                                            for e in trainer.state.log_history):
            trainer.evaluate()
        seconds = metrics.get("train_runtime")
        # the mean of the phase's logged losses: the Trainer's train_loss covers only what this process trained
        logged = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        summary = {"name": phase.name, "trainable": phase.trainable, "steps": steps, "planned_steps": phase.steps,
                   "learning_rate": phase.learning_rate, "warmup_steps": phase.warmup_steps, "decay": phase.decay,
                   **counts, "train_loss": (round(sum(logged) / len(logged), 5) if logged
                                            else metrics.get("train_loss")),  # a phase shorter than logging_steps
                   "tokens_per_second": (round(metrics["train_samples_per_second"] * sequence_length, 1)
                                         if metrics.get("train_samples_per_second") else None),
                   "train_seconds": seconds}
        save_model_atomically(trainer, final, {"phase.json": {**summary,
                                                              "log_history": trainer.state.log_history}})
        curve.done.append((phase, offset, list(trainer.state.log_history)))
        summaries.append(summary)
        done_steps.append(steps)
        offset += steps
        start_model = final
        if state.is_main_process:
            for checkpoint_dir in phase_dir.glob("checkpoint-*"):
                shutil.rmtree(checkpoint_dir, ignore_errors=True)  # the phase is done; final/ replaces them
        state.wait_for_everyone()

    final_curve = curve() if state.is_main_process else {}
    if state.is_main_process:
        _write_model(start_model, output / "model", record, summaries, final_curve)
        record.update({"status": "complete", "phases": summaries, "steps": offset})
        _write_record(output, record)
    state.wait_for_everyone()
    return TrainReport(output, output / "model", objective, summaries, final_curve, resumed,
                       time.perf_counter() - clock)


def _record_failure(output: Path, error: TrainingDivergedError, state) -> None:
    """A diverged run: `langswap-train.json` (written when the run started) says failed and why, the curve keeps what
    was logged, no model/ is written; the phase's checkpoints (all written before the failed update) are kept."""
    from transformers.trainer_utils import get_last_checkpoint

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
        record = json.loads((output / RECORD).read_text(encoding="utf-8"))
        record.update({"status": "failed", "failure": {**error.details, "last_checkpoint": checkpoint,
                                                       "message": error.args[0]}})
        _write_record(output, record)


def _write_model(last_final: Path, folder: Path, record: dict, phases: list[dict], curve: dict) -> None:
    """Copy the last phase's weights and tokenizer to output/model with a langswap.json that keeps the transfer's
    record (when the model came from `langswap transfer`) and adds the training."""
    from langswap.models import portable_tokenizer_config
    from langswap.files import atomic_directory

    source_record = Path(record["config"]["model"]) / "langswap.json"
    with atomic_directory(folder, overwrite=True) as temporary:
        for item in Path(last_final).iterdir():
            if item.is_file() and item.name != "phase.json" and item.name != "training_args.bin":
                shutil.copy2(item, temporary / item.name)
        portable_tokenizer_config(temporary)
        provenance = Path(record["config"]["model"]) / "provenance.tsv"
        if provenance.is_file():
            shutil.copy2(provenance, temporary / "provenance.tsv")
        info = json.loads(source_record.read_text(encoding="utf-8")) if source_record.is_file() else {}
        info["training"] = {"langswap_version": __version__, "config": record["config"],
                            "objective": record["objective"], "phases": phases,
                            "final_eval": curve.get("eval", [])[-1:] if curve else []}
        (temporary / "langswap.json").write_text(json.dumps(info, indent=2, ensure_ascii=False), encoding="utf-8")
