"""Tik-to-Tok (Remy et al., 2023): the embeddings and LM head at the peak rate (after a warm-up, then constant)
until the training loss settles, at most `embedding_fraction` (half) of the steps; then the whole model for the
remaining steps at `full_lr_scale` (0.2) times the rate with a `full_warmup_fraction` (25%) warm-up.

"Until the loss settles" is made exact: the embeddings phase ends when the mean training loss of the last
`settle_window` (50) updates improves on the window before by less than `settle_tolerance` (1%). The rule reads
only logged training losses, at steps where one was logged, so a resumed run stops where the uninterrupted one did
and how often a run evaluates does not move the stop; `logging_steps` may not exceed `settle_window` (a window
without a logged loss could never settle).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from langswap.errors import ConfigError
from langswap.training.phases import Phase
from langswap.training.recipes.base import Recipe, RecipeOptions, register_recipe
from langswap.training.recipes.transinner import check_fraction, embedding_steps


@dataclass(frozen=True, kw_only=True)
class TikToTokOptions(RecipeOptions):
    embedding_fraction: float = field(default=0.5, metadata={"help": "The most of the steps the embeddings phase "
                                                                     "may take."})
    settle_window: int = field(default=50, metadata={"help": "Steps per window when judging whether the loss has "
                                                             "settled (at least logging_steps)."})
    settle_tolerance: float = field(default=0.01, metadata={"help": "The loss has settled when a window improves on "
                                                                    "the one before by less than this share."})
    full_lr_scale: float = field(default=0.2, metadata={"help": "Full-model rate as a share of the peak."})
    full_warmup_fraction: float = field(default=0.25, metadata={"help": "Warm-up share of the full phase."})


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


@register_recipe("tiktotok", options=TikToTokOptions)
class TikToTok(Recipe):
    """Tik-to-Tok: embeddings and head until the loss settles, then the whole model at a lower rate."""

    def validate(self) -> None:
        options = self.options
        if options.settle_window < 1:
            raise ConfigError(f"recipe.settle_window is {options.settle_window}; it must be at least 1.")
        for name in ("embedding_fraction", "full_warmup_fraction"):
            check_fraction(options, name)
        if self.config.logging_steps > options.settle_window:
            raise ConfigError(f"logging_steps is {self.config.logging_steps} but settle_window is "
                              f"{options.settle_window}: the tiktotok recipe judges the logged training loss per "
                              "window, so a window needs at least one logged loss. Set logging_steps to at most "
                              "settle_window (or raise recipe.settle_window).")

    def phases(self, objective: str, done: list[int] = ()) -> list[Phase]:
        peak, first = self.peak(objective), embedding_steps(self, self.options.embedding_fraction)
        # the full phase gets what the embeddings phase left: its planned share, or more when the loss settled
        rest = self.config.steps - (done[0] if done else first)
        return [Phase("1-embeddings", "embeddings", first, peak, self.warmup(first), schedule="constant",
                      stops_early=True),
                Phase("2-full", "full", rest, peak * self.options.full_lr_scale,
                      self.warmup(rest, self.options.full_warmup_fraction))]

    def stop_reason(self, phase: Phase, log_history: list[dict], step: int) -> str | None:
        means = settled(log_history, step, self.options.settle_window, self.options.settle_tolerance)
        return None if means is None else "the training loss settled ({:.4f} -> {:.4f})".format(*means)
