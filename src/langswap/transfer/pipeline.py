"""`transfer(config)`: the transfer's steps (`steps.py`) in order, each called directly and timed by a context
manager, the folder written last."""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from langswap.evaluation.correspondence import format_correspondence
from langswap.files import refuse_existing
from langswap.locking import OutputLock
from langswap.models import transformers_bars
from langswap.records import TransferRecord
from langswap.reports import AlignmentReport, CalibrationReport, EvaluationMetrics, MatchingReport, MethodChoice
from langswap.transfer.config import TransferConfig
from langswap.transfer.steps import (Inputs, Made, Source, Target, check_matching, load_inputs, load_source,
                                     load_target, make_embeddings, plan_text, score, write_output)

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TransferReport:
    output: Path
    counts: dict
    alignment: AlignmentReport | None
    metrics: EvaluationMetrics | None
    correspondence: list[dict]
    seconds: dict
    calibration: CalibrationReport | None = None  # what calibration did, or why it did not run
    choice: MethodChoice | None = None  # where the method offered candidates: which was kept, and why
    matching: MatchingReport | None = None  # the copies against an independent count (`steps.check_matching`)
    method: str = ""

    def summary(self) -> str:
        """What `langswap transfer` prints: the folder and its rows, the copies, the alignment, the candidate kept,
        the calibration, the held-out figures and the correspondence sample."""
        counts = " | ".join(f"{key} {value:,}" for key, value in self.counts.items())
        lines = [f"wrote {self.output}: {counts}"]
        matching = self.matching
        if matching is not None and matching.copied is not None:  # its warnings are logged, and show with -q too
            lines.append(f"copied {matching.copied:,} of {matching.target_tokens:,} target tokens "
                         f"({matching.share_copied:.1%}): {matching.copied_whole:,} with a whole surface, of which an "
                         f"independent count finds {matching.independent:,} ({matching.agree:,} agree), and "
                         f"{matching.copied_partial:,} byte or partial-character tokens")
        alignment = self.alignment.line() if self.alignment is not None else None
        if alignment:
            lines.append(alignment)
        if self.choice:
            lines.append(f"method {self.method}: {self.choice.summary()}")
        if self.calibration is not None and self.calibration.rows:
            lines.append(f"calibrated {self.calibration.rows:,} output rows to the token frequencies of "
                         f"{self.calibration.text} (strength {self.calibration.strength:g})")
        elif self.calibration is not None and self.calibration.skipped:
            lines.append(f"no frequency calibration: {self.calibration.skipped}")
        if self.metrics is not None:
            lines.append(f"{self.metrics.kind} {self.metrics.perplexity:.2f}, bits per byte "
                         f"{self.metrics.bits_per_byte:.4f} on {self.metrics.lines} lines")
        if self.correspondence:
            lines.append(format_correspondence(self.correspondence))
        return "\n".join(lines)


class _Clock:
    """Seconds of each named step: `with clock("load"): ...` adds the block's time to the name's."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start


def transfer(config: TransferConfig, progress: bool = False) -> TransferReport:
    """Run one transfer as `config` says and write the output folder; returns what happened. One process at a time
    writes an output folder: another gets `OutputLockedError` (`langswap.locking`)."""
    config.validate()
    with OutputLock(config.output, "transfer output folder"), transformers_bars(progress):
        return _transfer(config, progress)


@dataclass
class Loaded:
    """A source and a target loaded once for several transfers between them (`run_steps`; the demo's methods)."""

    source: Source
    target: Target


@dataclass
class Transferred:
    """What `run_steps` made: the finished model and method result, the inputs, the held-out figures and the
    correspondence sample, the record where a folder was written, and each step's seconds."""

    made: Made
    inputs: Inputs
    metrics: dict | None
    correspondence: list[dict]
    record: TransferRecord | None
    seconds: dict
    matching: dict | None = None


def load(config: TransferConfig, progress: bool = False) -> Loaded:
    """The source and target of `config`, to run several transfers on (`run_steps(loaded=...)`)."""
    text = plan_text(config)
    source = load_source(config, text)
    return Loaded(source, load_target(config, source, text, progress))


def run_steps(config: TransferConfig, progress: bool = False, loaded: Loaded | None = None, write: bool = True,
              demo: list | None = None) -> Transferred:
    """The transfer's steps in order. With `loaded` (of the same source and target), those are not loaded again and
    the method works on a copy of the source model; without `write`, no folder is written (the model is in
    `made.model`). `demo`: the demo's table, kept in the record."""
    clock = _Clock()
    with clock("load"):
        text = plan_text(config)
        source = loaded.source if loaded else load_source(config, text)
        target = loaded.target if loaded else load_target(config, source, text, progress)
    with clock("resources"):
        inputs = load_inputs(config, source, target)
    with clock("method"):
        made = make_embeddings(config, source, target, text, inputs, progress, copy=loaded is not None)
    clock.seconds.update({f"method: {name}": value for name, value in made.seconds.items()})
    with clock("match"):
        matching = check_matching(source, target, made)
    with clock("evaluate"):
        metrics, rows = score(config, made, source, target, progress)
    record = None
    if write:
        with clock("write"):
            record = write_output(config, source, target, inputs, made, metrics, rows, clock.seconds, progress, demo,
                                  matching=matching)
    return Transferred(made, inputs, metrics, rows, record, clock.seconds, matching)


def _transfer(config: TransferConfig, progress: bool) -> TransferReport:
    refuse_existing(config.output, config.overwrite)  # again, now that the folder's lock is held
    done = run_steps(config, progress)
    return TransferReport(output=Path(config.output), counts=done.record.counts, alignment=done.inputs.alignment,
                          metrics=done.metrics, correspondence=done.correspondence, seconds=done.seconds,
                          calibration=done.record.calibration, choice=done.made.result.choice,
                          matching=done.matching, method=config.method.method_name)
