"""TransInner: the embeddings alone for the first `embedding_fraction` (10%) of the steps, with their own warm-up
and decay, then the whole model with a second warm-up (each phase warms up over `warmup_fraction` of its own steps).
The full phase reads on where the embeddings phase stopped in the run's one shuffled order of the text."""

from __future__ import annotations

from dataclasses import dataclass, field

from langswap.errors import ConfigError
from langswap.training.phases import Phase
from langswap.training.recipes.base import Recipe, RecipeOptions, register_recipe


@dataclass(frozen=True, kw_only=True)
class TransInnerOptions(RecipeOptions):
    embedding_fraction: float = field(default=0.1, metadata={"help": "Share of the steps that train only "
                                                                     "embeddings."})


def check_fraction(options: RecipeOptions, name: str) -> None:
    value = getattr(options, name)
    if not 0 <= value <= 1:
        raise ConfigError(f"recipe.{name} is {value}; it must be between 0 and 1.")


def embedding_steps(recipe: Recipe, fraction: float) -> int:
    """Updates of an embeddings phase that takes `fraction` of the steps, leaving at least one for the next."""
    steps = recipe.config.steps
    first = max(1, round(steps * fraction))
    if first >= steps:
        raise ConfigError(f"recipe.embedding_fraction {fraction} leaves no steps for the full phase of recipe "
                          f"'{recipe.name}' with steps={steps}; lower it or raise steps.")
    return first


@register_recipe("transinner", options=TransInnerOptions)
class TransInner(Recipe):
    """TransInner: embeddings only for embedding_fraction of the steps, then the whole model (each warms up)."""

    def validate(self) -> None:
        check_fraction(self.options, "embedding_fraction")

    def phases(self, objective: str, done: list[int] = ()) -> list[Phase]:
        peak, first = self.peak(objective), embedding_steps(self, self.options.embedding_fraction)
        rest = self.config.steps - first
        return [Phase("1-embeddings", "embeddings", first, peak, self.warmup(first)),
                Phase("2-full", "full", rest, peak, self.warmup(rest))]
