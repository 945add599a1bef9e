"""`transfer(config)`: the transfer's steps (`steps.py`) in order, each timed, the folder written last."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from langswap.transfer.config import TransferConfig
from langswap.transfer.steps import (load_inputs, load_source, load_target, make_embeddings, plan_text, score,
                                     write_output)

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class TransferReport:
    output: Path
    counts: dict
    alignment: dict | None
    metrics: dict | None
    correspondence: list[dict]
    seconds: dict
    calibration: dict | None = None  # what langswap.calibrate did, or {"skipped": why}
    choice: dict | None = None  # where the method offered candidates: which was kept, and why


class _Clock:
    """Seconds of each named step."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str, step, *args, **kwargs):
        start = time.perf_counter()
        value = step(*args, **kwargs)
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
        return value


def transfer(config: TransferConfig, progress: bool = False) -> TransferReport:
    """Run one transfer as `config` says and write the output folder; returns what happened. One process at a time
    writes an output folder: another gets `OutputLockedError` (`langswap.locking`)."""
    from langswap.locking import OutputLock
    from langswap.models import transformers_bars

    config.validate()
    with OutputLock(config.output, "transfer output folder"), transformers_bars(progress):
        return _transfer(config, progress)


def _transfer(config: TransferConfig, progress: bool) -> TransferReport:
    clock = _Clock()
    text = clock("load", plan_text, config)
    source = clock("load", load_source, config, text)
    target = clock("load", load_target, config, source, text, progress)
    inputs = clock("resources", load_inputs, config, source, target)
    made = clock("method", make_embeddings, config, source, target, text, inputs, progress)
    metrics, rows = clock("evaluate", score, config, made, source, target, progress)
    record = clock("write", write_output, config, source, target, inputs, made, metrics, rows, clock.seconds,
                   progress)
    return TransferReport(output=Path(config.output), counts=record.counts, alignment=inputs.alignment,
                          metrics=metrics, correspondence=rows, seconds=clock.seconds,
                          calibration=record.calibration, choice=made.result.choice)
