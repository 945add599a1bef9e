"""RAMEN's bilingual training: one transformer body, the source and the target language's token tables, half of
every micro-batch in each language.

The run's model is the target model (a transfer's output); `source_model` is the model it was transferred from,
whose input embeddings and output layer read and predict `source_text`. One phase trains everything: the body, both
languages' embeddings and output layers (`langswap.training.bilingual_model`). The paper's optimizer and schedule:
Lookahead (k = 5, alpha = 0.5) around Adam, the rate warmed up linearly from 1e-7 to the peak (1e-4 unless
`learning_rate` is set) over 4,000 updates, then decaying as the inverse square root of the update. A run shorter
than twice the warm-up warms up over the config's `warmup_fraction` of its updates instead, so it reaches its peak.

The run writes `model/` (the target model, an ordinary folder) and `source-model/` (the source model with the
trained source tables), whose body weights are identical. Causal and masked LMs alike: a masked LM's source half is
masked with the source tokenizer, and its prediction head's transform is shared by both languages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from langswap.errors import ConfigError
from langswap.models import load_model
from langswap.training.bilingual_model import attach_source, check_source_language, write_two_models
from langswap.training.data import Stream
from langswap.training.lookahead import Lookahead
from langswap.training.phases import SCHEDULES, Phase, register_schedule
from langswap.training.recipes.base import Recipe, RecipeOptions, check_source_stream, register_recipe

RAMEN_PEAK = 1e-4
SOURCE_FOLDER = "source-model"


@dataclass(frozen=True, kw_only=True)
class RamenOptions(RecipeOptions):
    source_model: str | None = field(default=None, metadata={
        "help": "The model the target model was transferred from; its token tables read and predict source_text."})
    source_text: str | None = field(default=None, metadata={
        "help": "Source-language training text (any source train_text takes: a file, a folder or glob of files, "
                "hf:DATASET)."})
    source_share: float = field(default=0.5, metadata={"help": "Share of every micro-batch that is source text."})
    warmup_updates: int = field(default=4000, metadata={
        "help": "Updates the rate warms up over from start_rate (RAMEN: 4,000); a run shorter than twice this "
                "warms up over warmup_fraction of its updates."})
    start_rate: float = field(default=1e-7, metadata={"help": "The rate of the first update (RAMEN: 1e-7)."})
    lookahead_k: int = field(default=5, metadata={"help": "Lookahead's synchronisation period (RAMEN: 5)."})
    lookahead_alpha: float = field(default=0.5, metadata={"help": "Lookahead's step towards the fast weights "
                                                                  "(RAMEN: 0.5)."})


def inverse_sqrt_schedule(start: float) -> str:
    """The name of the schedule that warms up linearly from `start` x peak to the peak, then decays as
    sqrt(warm-up / update); registered on first use, so a phase record names its start."""
    name = f"warmup-from-{start:g}-inverse-sqrt"
    if name not in SCHEDULES:
        def factor(phase: Phase, step: int) -> float:
            if step < phase.warmup_steps:
                return start + (1 - start) * (step + 1) / phase.warmup_steps
            return math.sqrt(max(phase.warmup_steps, 1) / (step + 1))

        register_schedule(name)(factor)
    return name


@register_recipe("ramen", options=RamenOptions)
class Ramen(Recipe):
    """RAMEN: one body, source and target token tables, half of every batch in each language (Lookahead, Adam)."""

    model_reads_stream_ids = True

    def validate(self) -> None:
        options = self.options
        for name in ("source_model", "source_text"):
            if not getattr(options, name):
                raise ConfigError(f"recipe.{name} is not set: the bilingual recipe trains on source-language text "
                                  "with the source model's token tables (--set recipe.source_model=MODEL --set "
                                  "recipe.source_text=en.txt).")
        check_source_stream(options)
        if options.warmup_updates < 0 or not 0 < options.start_rate:
            raise ConfigError("recipe.warmup_updates must be 0 or more and recipe.start_rate positive.")
        if options.lookahead_k < 1 or not 0 < options.lookahead_alpha <= 1:
            raise ConfigError("recipe.lookahead_k must be at least 1 and recipe.lookahead_alpha in (0, 1].")

    def streams(self) -> list[Stream]:
        # stream 0 is the source language (`bilingual.SOURCE_STREAM`), packed by the source model's tokenizer
        return [Stream("source", self.options.source_text, self.options.source_share, self.options.source_model),
                Stream("target", self.config.train_text, 1 - self.options.source_share)]

    def phases(self, objective: str, done: list[int] = ()) -> list[Phase]:
        steps = self.config.steps
        peak = self.config.learning_rate or RAMEN_PEAK
        warmup = self.options.warmup_updates if steps >= 2 * self.options.warmup_updates else self.warmup(steps)
        schedule = inverse_sqrt_schedule(min(1.0, self.options.start_rate / peak))
        return [Phase("1-bilingual", "full", steps, peak, warmup, schedule=schedule)]

    def optimizer(self, phase: Phase, parameter_groups: list[dict]):
        config = self.config
        inner = torch.optim.Adam([{**group, "lr": phase.learning_rate} for group in parameter_groups],
                                 lr=phase.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                                 eps=config.adam_epsilon)
        return Lookahead(inner, self.options.lookahead_k, self.options.lookahead_alpha)

    def prepare_model(self, phase: Phase, model, start) -> None:
        source = None
        if str(start) == str(self.config.model):  # the run's first start: is the source text the source language?
            source = load_model(self.options.source_model)  # read once, for the check and the source tables
            check_source_language(self.options.source_model, self.options.source_text, self.config.train_text,
                                  loaded=source, text_field=self.config.text_field)
        attach_source(model, start, self.options.source_model, loaded=source)

    def finish_outputs(self, output) -> None:
        write_two_models(Path(output) / "model", Path(output) / SOURCE_FOLDER, self.options.source_model)
