"""Training phases (which parameters train, for how long, at what rate) and the papers' presets.

A phase is one run of the Trainer with its own optimizer and schedule; a preset is a list of phases:

- `wechsel` / `fullrand` (Minixhofer et al., 2022): the whole model, linear warm-up over the first 10% of the steps,
  then linear decay to zero. FullRand is the same recipe started from random embeddings (`langswap transfer
  --method random`); the name is kept so configs read like the paper's tables.
- `transinner`: embeddings only for the first 10% of the steps, with their own warm-up and decay, then the whole
  model with a second warm-up (each phase warms up over 10% of its own steps).
- `tiktotok` (Remy et al., 2023): embeddings and LM head at the peak rate (after a warm-up, then constant) until the
  training loss settles (relative improvement between two windows of `settle_window` steps below
  `settle_tolerance`), at most `embedding_fraction` (default half) of the steps; then the whole model for the remaining steps at
  `full_lr_scale` times the rate with a longer warm-up (`full_warmup_fraction`).
- `embeddings`: one embeddings-only phase (the short probe `langswap bench` runs); `full`: one whole-model phase.

Peak rate: 5e-4 for causal LMs, 1e-4 for masked LMs (the papers' values), unless `learning_rate` is set. AdamW with
betas (0.9, 0.98), eps 1e-6, weight decay 0.01 (not on biases and norms, the Trainer's rule).

Learning rate of update s (0-based) in a phase of T updates with W warm-up updates: peak * (s+1)/W while s < W,
then peak * (T-s)/(T-W) ("linear" decay; every update has a non-zero rate, the last one peak/(T-W)), or the peak
("constant").

"Embeddings" means the input token embeddings, the output embeddings (the same matrix when tied) and an output
bias; position embeddings, norms and the transformer body stay frozen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from langswap.errors import ConfigError

PRESETS = ("wechsel", "fullrand", "transinner", "tiktotok", "embeddings", "full")
PEAK_LEARNING_RATE = {"causal": 5e-4, "masked": 1e-4}
DEFAULT_EMBEDDING_FRACTION = {"transinner": 0.1, "tiktotok": 0.5}


@dataclass(frozen=True)
class Phase:
    name: str  # folder name, e.g. "1-embeddings"
    trainable: str  # "embeddings" or "full"
    steps: int  # most updates in this phase
    learning_rate: float  # peak
    warmup_steps: int
    decay: str = "linear"  # or "constant"
    until_settled: bool = False  # stop early when the training loss settles

    def lr_factor(self, step: int) -> float:
        """Multiplier of the peak rate for update `step` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.decay == "constant":
            return 1.0
        return max(0.0, (self.steps - step) / max(1, self.steps - self.warmup_steps))

    def learning_rate_at(self, step: int) -> float:
        return self.learning_rate * self.lr_factor(step)


def _warmup(steps: int, fraction: float) -> int:
    return max(1, math.ceil(steps * fraction)) if fraction > 0 else 0


def plan_phases(config, objective: str) -> list[Phase]:
    """The phases of `config.preset` for `config.steps` updates in all. The length of a phase that follows an
    until-settled phase is fixed when that phase ends (see `remaining_phases`)."""
    peak = config.learning_rate or PEAK_LEARNING_RATE[objective]
    steps, warmup = config.steps, config.warmup_fraction
    preset = config.preset
    if preset not in PRESETS:
        raise ConfigError(f"preset is '{preset}'; choose one of: {', '.join(PRESETS)}.")
    if preset in ("wechsel", "fullrand", "full"):
        return [Phase("1-full", "full", steps, peak, _warmup(steps, warmup))]
    if preset == "embeddings":
        return [Phase("1-embeddings", "embeddings", steps, peak, _warmup(steps, warmup))]
    fraction = config.embedding_fraction if config.embedding_fraction is not None else DEFAULT_EMBEDDING_FRACTION[preset]
    first = max(1, round(steps * fraction))
    if first >= steps:
        raise ConfigError(f"embedding_fraction {fraction} leaves no steps for the full phase of "
                          f"preset '{preset}' with steps={steps}; lower it or raise steps.")
    if preset == "transinner":
        rest = steps - first
        return [Phase("1-embeddings", "embeddings", first, peak, _warmup(first, warmup)),
                Phase("2-full", "full", rest, peak, _warmup(rest, warmup))]
    # tiktotok: the second phase's length depends on where the first one settled
    return [Phase("1-embeddings", "embeddings", first, peak, _warmup(first, warmup), decay="constant",
                  until_settled=True),
            Phase("2-full", "full", steps - first, peak * config.full_lr_scale,
                  _warmup(steps - first, config.full_warmup_fraction))]


def remaining_phases(planned: list[Phase], done_steps: list[int], config) -> list[Phase]:
    """Re-plan the phases after the first `len(done_steps)` finished, given how many updates each took: a phase
    after an until-settled one gets the steps that one left over."""
    out = list(planned)
    for index, used in enumerate(done_steps):
        if out[index].until_settled and index + 1 < len(out) and used < out[index].steps:
            following = out[index + 1]
            rest = config.steps - sum(done_steps[:index + 1])
            out[index + 1] = Phase(following.name, following.trainable, rest, following.learning_rate,
                                   _warmup(rest, config.full_warmup_fraction), following.decay)
    return out


def embedding_parameters(model) -> list[torch.nn.Parameter]:
    """Input and output token embeddings (one tensor when tied) and the output bias, without duplicates."""
    found: list[torch.nn.Parameter] = []
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


def set_trainable(model, trainable: str) -> dict:
    """Freeze all but the embeddings (`embeddings`) or nothing (`full`); returns parameter counts."""
    if trainable not in ("embeddings", "full"):
        raise ConfigError(f"a phase trains 'embeddings' or 'full', not '{trainable}'.")
    keep = embedding_parameters(model)
    for parameter in model.parameters():
        parameter.requires_grad_(trainable == "full" or any(parameter is k for k in keep))
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable_parameters": trained, "total_parameters": total}
