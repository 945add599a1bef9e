"""Training phases: which parameters train, for how long, at what rate. A recipe (`recipes/`) lists a run's phases.

A phase is one run of the Trainer with its own optimizer and schedule, started from the previous phase's weights.

Schedules are registered by name (`register_schedule`), so a phase names its schedule and stays a plain record that
resumes and serialises; a recipe that needs another shape registers it in its own file. The built-in ones, for update
s (0-based) of a phase of T updates with W warm-up updates:

- `linear`: peak * (s+1)/W while s < W, then peak * (T-s)/(T-W) (every update has a non-zero rate, the last one
  peak/(T-W); the Trainer's built-in schedule spends the first update at zero);
- `constant`: the same warm-up, then the peak.

"Embeddings" means the input token embeddings, the output embeddings (the same matrix when tied) and an output
bias; position embeddings, norms and the transformer body stay frozen. "Full" is every parameter.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Iterable

from accelerate.utils import str_to_bool

from langswap.errors import ConfigError

# The papers' peak rates (WECHSEL), unless `learning_rate` is set.
PEAK_LEARNING_RATE = {"causal": 5e-4, "masked": 1e-4}

# name -> factor(phase, step): the multiplier of the phase's peak rate at update `step` (0-based)
SCHEDULES: dict[str, Callable[["Phase", int], float]] = {}


def register_schedule(name: str):
    """Decorator: register `factor(phase, step) -> float` as the schedule `name`. The factor must be a pure function
    of the phase and the update number, so a resumed phase continues on the same rates."""

    def decorator(function):
        if name in SCHEDULES:
            raise ValueError(f"schedule {name!r} registered twice")
        SCHEDULES[name] = function
        return function

    return decorator


@dataclass(frozen=True)
class Phase:
    name: str  # folder name, e.g. "1-embeddings"
    trainable: str  # "embeddings", "full", or a set the recipe's `trainable_parameters` names
    steps: int  # most updates in this phase
    learning_rate: float  # peak
    warmup_steps: int
    schedule: str = "linear"  # a registered schedule
    stops_early: bool = False  # the recipe's `stop_reason` may end the phase before `steps` updates

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"phase {self.name} has schedule '{self.schedule}'; registered schedules: "
                              f"{', '.join(sorted(SCHEDULES))}.")

    def lr_factor(self, step: int) -> float:
        """Multiplier of the peak rate for update `step` (0-based)."""
        return SCHEDULES[self.schedule](self, step)

    def learning_rate_at(self, step: int) -> float:
        return self.learning_rate * self.lr_factor(step)


@register_schedule("linear")
def linear(phase: Phase, step: int) -> float:
    if step < phase.warmup_steps:
        return (step + 1) / phase.warmup_steps
    return max(0.0, (phase.steps - step) / max(1, phase.steps - phase.warmup_steps))


@register_schedule("constant")
def constant(phase: Phase, step: int) -> float:
    if step < phase.warmup_steps:
        return (step + 1) / phase.warmup_steps
    return 1.0


def warmup_for(steps: int, fraction: float) -> int:
    """Warm-up updates for `fraction` of a phase of `steps` updates: at least one unless the fraction is 0."""
    return max(1, math.ceil(steps * fraction)) if fraction > 0 else 0


def embedding_parameters(model) -> list:
    """Input and output token embeddings (one tensor when tied) and the output bias, without duplicates."""
    found: list = []
    candidates = [model.get_input_embeddings().weight]
    output = model.get_output_embeddings()
    if output is not None:
        candidates.append(output.weight)
        if getattr(output, "bias", None) is not None:
            candidates.append(output.bias)
    for parameter in candidates:
        if not any(parameter is seen for seen in found):
            found.append(parameter)
    return found


def set_trainable(model, parameters: Iterable) -> None:
    """Train exactly `parameters` (tensors of `model`); freeze every other parameter."""
    keep = {id(parameter) for parameter in parameters}
    for parameter in model.parameters():
        parameter.requires_grad_(id(parameter) in keep)


def parameter_counts(model) -> dict:
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable_parameters": trained, "total_parameters": total}


def sharding_engine() -> str | None:
    """"fsdp" or "deepspeed" when `accelerate launch` runs the model under one (they hold parameters in flat shards
    and handle precision themselves, so a frozen body is not kept in its own dtype there), else None."""
    for name in ("fsdp", "deepspeed"):
        if str_to_bool(os.environ.get(f"ACCELERATE_USE_{name.upper()}", "false")):
            return name
    return None
