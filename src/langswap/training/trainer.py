"""The Trainer of one phase, and the callbacks the loop gives it."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import shutil
import time
from pathlib import Path

import numpy
import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from langswap.errors import TrainingDivergedError
from langswap.files import replace_directory
from langswap.modelcard import write_model_card
from langswap.training.phases import Phase
from langswap.training.teacher import COUNTS, KEYS

logger = logging.getLogger(__name__)

# Under fp16 an update whose gradients overflow is skipped by the loss scaler, which halves its scale; this many
# skipped in a row (a scale 2^-30 of where it started) means the gradients overflow at every scale.
FP16_SKIPPED_UPDATES_LIMIT = 30


class PhaseTrainer(Trainer):
    """The Trainer with a phase's optimizer (the recipe's, or AdamW) and schedule, a stop on non-finite numbers,
    masks drawn per update, and checkpoints written under a temporary name."""

    def __init__(self, *args, phase: Phase, recipe, phase_index: int = 0, offset: int = 0, precision: str = "fp32",
                 saved_state=None, saved_dtype=None, teacher=None, **kwargs):
        self.phase, self.recipe, self.phase_index, self.offset = phase, recipe, phase_index, offset
        self.teacher = teacher  # training.teacher.Teacher, whose distance joins the loss, or None
        self.precision = precision
        self.saved_state = saved_state  # state dict -> what a model folder holds (`run._saved_state`)
        self.saved_dtype = saved_dtype  # the dtype `saved_state` casts to, which the folder's config.json names
        self._model_folder = False  # save_model writes a model folder, not a checkpoint
        self._staging: str | None = None
        self._losses_finite: torch.Tensor | None = None  # all micro-batch losses of this update finite
        self._skipped_in_a_row = 0
        self.clock = LoopClock()
        super().__init__(*args, **kwargs)

    def create_optimizer(self, *args, **kwargs):
        """The recipe's optimizer for the phase; the Trainer builds its AdamW when the recipe gives none."""
        if self.optimizer is None:
            self.optimizer = self.recipe.optimizer(self.phase, self.parameter_groups())
        return super().create_optimizer(*args, **kwargs)

    def parameter_groups(self) -> list[dict]:
        """The trainable parameters as the Trainer groups them for AdamW: with weight decay, then without (biases
        and norms)."""
        decay = set(self.get_decay_parameter_names(self.model))
        named = [(name, parameter) for name, parameter in self.model.named_parameters() if parameter.requires_grad]
        return [{"params": [p for n, p in named if n in decay], "weight_decay": self.args.weight_decay},
                {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]

    def training_step(self, model, inputs, *args, **kwargs):
        if "stream_ids" in inputs and not self.recipe.model_reads_stream_ids:
            inputs = {key: value for key, value in inputs.items() if key != "stream_ids"}
        loss = super().training_step(model, inputs, *args, **kwargs)
        finite = torch.isfinite(loss.detach()).all()  # stays on the device: read once per update
        self._losses_finite = finite if self._losses_finite is None else self._losses_finite & finite
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """The Trainer's loss, plus the teacher's hidden-state distance where the batch carries the teacher's reading
        (training batches of a run with a teacher; evaluation batches do not, so evaluation measures the
        language-model loss alone). The distance, a mean over the micro-batch, is scaled as the Trainer scales the
        language-model loss: divided by the accumulation steps where that loss is normalised over the whole
        accumulated batch (the Trainer then does not divide it)."""
        if self.teacher is None or "teacher_ids" not in inputs:
            inputs = {key: value for key, value in inputs.items() if key not in KEYS + COUNTS}
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        view = {key: inputs[key] for key in KEYS + COUNTS if key in inputs}
        inputs = {key: value for key, value in inputs.items() if key not in KEYS + COUNTS}
        loss, outputs = super().compute_loss(model, {**inputs, "output_hidden_states": True}, return_outputs=True,
                                             num_items_in_batch=num_items_in_batch)
        term = self.teacher.loss(outputs, {**view, "input_ids": inputs["input_ids"]})
        scaled = self.model_accepts_loss_kwargs and num_items_in_batch is not None
        steps = getattr(self, "current_gradient_accumulation_steps", None) or self.args.gradient_accumulation_steps
        loss = loss + (term / steps if scaled else term)
        return (loss, outputs) if return_outputs else loss

    def _maybe_log_save_evaluate(self, tr_loss, grad_norm, *args, **kwargs):
        # called once per update, after the optimizer step and before logging, evaluation and checkpointing, so a
        # diverged update is never saved
        self._check_update(grad_norm)  # reads the loss, so the update's work on the device is done
        self.clock.end_update()
        return super()._maybe_log_save_evaluate(tr_loss, grad_norm, *args, **kwargs)

    def log(self, logs: dict, *args, **kwargs) -> None:
        if "loss" in logs:  # a training log: the loop's speed since the last one, the teacher's distance
            logs.update(self.clock.interval())
            if self.teacher is not None:
                logs.update(self.teacher.interval())
        return super().log(logs, *args, **kwargs)

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
            phase=self.phase.name, step=self.offset + step, learning_rate=rate, precision=self.precision,
            reason=reason)

    def get_batch_samples(self, epoch_iterator, num_batches, *args, **kwargs):
        """The batches of one update; a masked-LM batch (no labels yet) is masked as it is drawn, from a generator
        seeded by (seed, phase, process, update), so a resumed run draws the masks the uninterrupted one drew
        whatever the data loader collated ahead, and the Trainer counts the masked tokens of all accumulated
        micro-batches for the loss. (The Trainer's signature differs across versions: `device` from transformers
        4.48 on.) The update's clock starts here, and the wait for each batch is timed (`LoopClock`)."""
        self.clock.start_update()
        epoch_iterator = self.clock.timed(epoch_iterator, self.args.world_size)
        if getattr(self.data_collator, "objective", None) != "masked":
            return super().get_batch_samples(epoch_iterator, num_batches, *args, **kwargs)
        generator = torch.Generator().manual_seed(
            hash((self.args.seed, self.phase_index, self.args.process_index, self.state.global_step))
            & 0x7FFF_FFFF_FFFF_FFFF)

        def masked():
            for batch in epoch_iterator:
                if "labels" not in batch:
                    batch["input_ids"], batch["labels"] = self.data_collator.mask(batch["input_ids"], generator,
                                                                                  batch.get("stream_ids"))
                yield batch

        return super().get_batch_samples(masked(), num_batches, *args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        # The phase's dataset is its slice of the run's stream, already shuffled (`data.phase_dataset`).
        return torch.utils.data.SequentialSampler(train_dataset if train_dataset is not None
                                                  else self.train_dataset)

    def evaluate(self, *args, **kwargs):
        """Evaluation leaves the random state as it found it: building its data loader draws from the global
        generator, which would move every later dropout mask, so a run resumed without the step-0 evaluation,
        or evaluated at other steps, would end with other weights."""
        saved = random_state()
        try:
            metrics = super().evaluate(*args, **kwargs)
        finally:
            set_random_state(saved)
        loss = metrics.get("eval_loss")
        if loss is not None and not math.isfinite(loss):
            self._diverged(f"the held-out loss is {loss}")
        return metrics

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            # a bound method: LambdaLR saves no state of it in the checkpoint, the phase gives it again on resume
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, self.phase.lr_factor)
        return self.lr_scheduler

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """A model folder (`_internal_call` false: a phase's final/, a snapshot) holds `saved_state` of the model's
        state; a checkpoint holds the model's own, for resuming."""
        self._model_folder = not _internal_call
        try:
            super().save_model(output_dir, _internal_call)
        finally:
            self._model_folder = False

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        # DeepSpeed without gathered weights saves an empty state dict and then its own shards: left as it is
        rewrite = self._model_folder and self.saved_state is not None and self.args.should_save \
            and (state_dict is None or len(state_dict) > 0)
        if rewrite:
            state_dict = self.saved_state(self.model.state_dict() if state_dict is None else state_dict)
        super()._save(output_dir, state_dict)
        if rewrite and self.saved_dtype is not None:
            name_dtype(Path(output_dir or self.args.output_dir) / "config.json", self.saved_dtype)

    def _get_output_dir(self, trial):
        return self._staging or super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial, *args, **kwargs):  # 4.x also passes `metrics`
        if self.state.max_steps and self.state.global_step >= self.state.max_steps:
            # the phase's planned end: its final folder, written next, replaces every checkpoint, so this one would
            # cost a second copy of the model and its optimizer state on disk (24 GB at 8B) for nothing; a run
            # killed before the final folder is whole resumes from the checkpoint before and ends the same
            return
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


def name_dtype(config_file: Path, dtype) -> None:
    """Write `dtype` as the dtype of the weights into a saved config.json: save_pretrained names that of the model's
    first parameter, which is a float32 embedding matrix while the body is kept in bf16, and `from_pretrained`
    (dtype auto) would load the whole folder in float32."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    key = "dtype" if "dtype" in config or "torch_dtype" not in config else "torch_dtype"
    config[key] = str(dtype).removeprefix("torch.")
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def random_state() -> dict:
    return {"python": random.getstate(), "numpy": numpy.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_random_state(saved: dict) -> None:
    random.setstate(saved["python"])
    numpy.random.set_state(saved["numpy"])
    torch.set_rng_state(saved["torch"])
    if saved["cuda"] is not None:
        torch.cuda.set_rng_state_all(saved["cuda"])


class LoopClock:
    """Where a phase's training loop spends its time: the seconds of its updates, each from fetching its first batch
    to the end of its optimizer step (evaluation and checkpoints between updates are not counted), the part of them
    spent waiting for the data loader, and the tokens the updates read on all processes. Tokens per second of the
    loop, beside the share spent waiting for data, say whether the data or the model sets the pace."""

    def __init__(self):
        self.updates, self.seconds, self.data_seconds, self.tokens = 0, 0.0, 0.0, 0
        self._started: float | None = None
        self._last = (0, 0.0, 0.0)  # (tokens, seconds, data_seconds) at the last `interval`

    def start_update(self) -> None:
        self._started = time.perf_counter()

    def end_update(self) -> None:
        if self._started is not None:  # the Trainer's end-of-epoch call repeats the last update's
            self.seconds += time.perf_counter() - self._started
            self.updates += 1
            self._started = None

    def timed(self, batches, processes: int = 1):
        """`batches`, one at a time, with the wait for each and its tokens (input ids x processes) counted."""
        while True:
            clock = time.perf_counter()
            try:
                batch = next(batches)
            except StopIteration:
                return
            finally:
                self.data_seconds += time.perf_counter() - clock
            if isinstance(batch, dict) and "input_ids" in batch:
                self.tokens += batch["input_ids"].numel() * processes
            yield batch

    @staticmethod
    def _rates(tokens: int, seconds: float, data_seconds: float) -> dict:
        return {"tokens_per_second": round(tokens / seconds, 1) if seconds > 0 else None,
                "data_wait": round(data_seconds / seconds, 4) if seconds > 0 else None}

    def interval(self) -> dict:
        """Tokens per second and the share of the time spent waiting for data since the last call."""
        tokens, seconds, data_seconds = self._last
        self._last = (self.tokens, self.seconds, self.data_seconds)
        return self._rates(self.tokens - tokens, self.seconds - seconds, self.data_seconds - data_seconds)

    def summary(self) -> dict:
        """The whole phase (this process's run of it): updates, loop seconds, tokens, tokens per second, data
        wait."""
        return {"loop_updates": self.updates, "loop_seconds": round(self.seconds, 3), "loop_tokens": self.tokens,
                **self._rates(self.tokens, self.seconds, self.data_seconds)}


# -- callbacks ----------------------------------------------------------------------------------------------------------

class RecipeHooks(TrainerCallback):
    """The recipe's hooks at every log and update of a phase, and its stop rule for a `stops_early` phase."""

    def __init__(self, recipe, phase: Phase):
        self.recipe, self.phase = recipe, phase

    def on_log(self, args, state, control, **kwargs):
        self.recipe.on_log(self.phase, state, control)
        if self.phase.stops_early:
            reason = self.recipe.stop_reason(self.phase, state.log_history, state.global_step)
            if reason:
                logger.info("phase %s ends at step %d: %s", self.phase.name, state.global_step, reason)
                control.should_training_stop = True

    def on_step_end(self, args, state, control, **kwargs):
        self.recipe.on_step_end(self.phase, state, control)


class Snapshots(TrainerCallback):
    """The model at chosen global steps, as snapshots/step-N; `recalibration` (`unshown_rows: recalibrate`): its
    move made on the snapshot written, the rows put back as trained for the updates after it."""

    def __init__(self, output: Path, steps: list[int], offset: int, recalibration=None):
        self.output, self.steps, self.offset = output, steps, offset
        self.recalibration = recalibration
        self.trainer = None

    def on_step_end(self, args, state, control, **kwargs):
        step = self.offset + state.global_step
        if step in self.steps:
            moved = (self.recalibration.moved(self.trainer.model) if self.recalibration is not None
                     else contextlib.nullcontext())
            with moved:
                save_model_atomically(self.trainer, self.output / "snapshots" / f"step-{step}",
                                      card=(self.output, step))


class Curve(TrainerCallback):
    """curve.json at every log, curve.png at every evaluation, from the main process."""

    def __init__(self, writer, phase: Phase, offset: int):
        self.writer, self.phase, self.offset = writer, phase, offset

    def on_log(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.writer(self.phase, self.offset, state.log_history, plot="eval_loss" in state.log_history[-1])


def save_model_atomically(trainer, folder: Path, extra: dict | None = None, card: tuple | None = None) -> None:
    """trainer.save_model into a temporary folder, renamed to `folder` by the main process when all ranks are done.
    `card`: (training output folder, global step) of a snapshot, whose model card is written before the rename."""
    temporary = folder.with_name(f".{folder.name}.partial")
    if trainer.args.should_save and temporary.exists():
        shutil.rmtree(temporary)  # left by an interrupted run
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(temporary))
    trainer.accelerator.wait_for_everyone()
    if trainer.args.should_save:
        for name, content in (extra or {}).items():
            (temporary / name).write_text(json.dumps(content, indent=2, ensure_ascii=False), encoding="utf-8")
        if card is not None:
            write_model_card(temporary, training=card[0], step=card[1])
        replace_directory(temporary, folder)
    trainer.accelerator.wait_for_everyone()
