"""One-phase recipes: the whole model (`wechsel`, `fullrand`, `full`) or the embeddings alone (`embeddings`).

WECHSEL (Minixhofer et al., 2022) trains the whole model with a linear warm-up over the first `warmup_fraction`
(10%) of the steps, then a linear decay to zero, with AdamW (betas 0.9/0.98, eps 1e-6, weight decay 0.01: the
config's `adam_*` and `weight_decay` options). FullRand is the same recipe started from random embeddings
(`langswap transfer --method random`); the name is kept so configs read like the paper's tables. `embeddings` and
`full` are the short probes `langswap bench` runs: one phase of either kind, on the same schedule. `embeddings` may
mix source-language text into every micro-batch (`recipe.source_text`, `recipe.source_share`), which holds the rows
to the source language while they learn the target: the control for an extension trained with that mix, and a way
to adapt a model's rows without losing the language it read.
"""

from __future__ import annotations

from langswap.training.phases import Phase
from langswap.training.recipes.base import (Recipe, SourceMixOptions, check_source_stream, register_recipe,
                                            source_streams)


class OnePhase(Recipe):
    """One phase of `steps` updates training `trains`, linear warm-up and decay."""

    trains = "full"

    def phases(self, objective: str, done: list[int] = ()) -> list[Phase]:
        steps = self.config.steps
        return [Phase(f"1-{self.trains}", self.trains, steps, self.peak(objective), self.warmup(steps))]


@register_recipe("wechsel")
class Wechsel(OnePhase):
    """WECHSEL: the whole model, linear warm-up over warmup_fraction of the steps, then linear decay to zero."""


@register_recipe("fullrand")
class FullRand(OnePhase):
    """FullRand: the WECHSEL recipe, for a model whose embeddings were made with `--method random`."""


@register_recipe("full")
class Full(OnePhase):
    """One whole-model phase (linear warm-up and decay)."""


@register_recipe("embeddings", options=SourceMixOptions)
class Embeddings(OnePhase):
    """One embeddings-only phase (linear warm-up and decay); the default of `langswap bench`."""

    trains = "embeddings"

    def validate(self) -> None:
        if self.options.source_text:
            check_source_stream(self.options)

    def streams(self) -> list:
        return source_streams(self.config, self.options)

    def recalibrated_rows(self) -> tuple[int, int] | None:
        """Every row, and none with `source_text`: its sequences hold the rows the target text does not show to the
        source language, which a move onto the target text's frequency line would undo."""
        return (0, 0) if self.options.source_text else None
