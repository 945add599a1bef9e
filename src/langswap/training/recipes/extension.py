"""`extension`: training a model whose vocabulary was extended (`langswap tokenizer --extend`, then `langswap
transfer`), new rows first unless source-language text is mixed in.

Phase 1 (`new_rows_fraction` of the steps: by default half, none where phase 2 trains the embeddings and either
`source_text` is given or the model is a self-extension, its transfer given no source-language text) trains only the
rows of the new tokens, in the input matrix, an untied head and its bias: a gradient hook zeroes every other row's
gradient, and the phase's AdamW applies the run's decoupled weight decay to the new rows alone (`NewRowsAdamW`;
decay on the whole matrix would shrink the source rows), so with zero gradients from the first update Adam's moments
stay zero and the source rows, and the padding rows after the new ones, stay bit for bit as the transfer left them.
The body is frozen. Phase 2 trains `then`: `embeddings` (every row), `full` (the whole model) or `none` (no phase
2). Phase 1 keeps the source language's rows from drifting while only target text is read; with `source_text` in
every batch, that text holds them, and every row trained from the first update reads both languages better after 200
updates (docs/design.md, "Extending a vocabulary"). A self-extension (a transfer without `calibration.source_text`,
which the record shows by its lack of a `separation`) reads its source language in every batch, so there too every
row trains from the first update. Before a whole model trains (`then: full`) the new rows come first either way: a
body trained from the first update would learn from rows nothing has placed yet.

The rows come from the model folder's record (`langswap.json`, `vocabulary`); a folder whose vocabulary was not
extended is refused.

`source_text` (source-language text) mixes that text into every micro-batch at `source_share`, read by the extended
tokenizer as the model reads it. Target text alone teaches the new rows only where they belong, and every update
raises them; the source-language sequences are where they must stay unlikely, so their probability mass on the
source language is trained down in phase 1 and the source rows are held to the source language in phase 2.

Resume, accelerate and torchrun work as for every recipe: the hook is registered on the model each process loads,
and under DDP the zeroed gradients are what is averaged. Sharding engines that flatten the parameters (FSDP,
DeepSpeed ZeRO-3) would hand the hook a shard, so phase 1 refuses to run under them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from langswap.errors import ConfigError
from langswap.records import has_model_record, read_model_record
from langswap.training.phases import Phase, embedding_parameters, sharding_engine
from langswap.training.recipes.base import (Recipe, SourceMixOptions, check_source_stream, register_recipe,
                                            source_streams)
from langswap.training.recipes.transinner import check_fraction

NEW_ROWS = "new-rows"
# The peak rate where train.learning_rate is unset: a causal LM's extension starts from new rows the transfer fitted
# to what the body computes, which the papers' 5e-4 moves off faster than 200 updates recover (docs/design.md,
# "Extending a vocabulary"); a masked LM's is the papers' own, not measured on an extension.
PEAK = {"causal": 1e-4, "masked": 1e-4}


@dataclass(frozen=True, kw_only=True)
class ExtensionOptions(SourceMixOptions):
    new_rows_fraction: float | None = field(default=None, metadata={
        "help": "Share of the steps that train only the new tokens' rows (all of them with then: none; 0: none, "
                "every step trains `then`). Unset: 0 where then is embeddings and source_text is given (the "
                "source-language text in every batch holds the source rows to that language) or the model is a "
                "self-extension (its transfer had no calibration.source_text: the training text is the source "
                "language), otherwise 0.5."})
    then: str = field(default="embeddings", metadata={
        "help": "What the rest of the steps train: embeddings (every row), full (the whole model) or none.",
        "choices": ("embeddings", "full", "none")})

    def calibration_start(self) -> str:
        """keep where source_text is given: the rows calibration counted rarely on the target text are mostly the
        source language's, which every batch then shows, so the premise of spare-rare (training on text that lacks
        a token lowers its row by itself) does not hold, and the expected-count fit's levels of the source rows stay
        as the transfer chose them; spare-rare otherwise."""
        return "keep" if self.source_text else "spare-rare"


class NewRowsAdamW(torch.optim.AdamW):
    """AdamW whose decoupled weight decay reaches only rows [first, stop) of each parameter: a group's
    `row_weight_decay` multiplies those rows by (1 - lr * row_weight_decay) before the Adam update, as AdamW's own
    decay does (whose `weight_decay` stays 0), and every other row is left to the Adam update alone."""

    def __init__(self, params, rows: tuple[int, int], **options):
        super().__init__(params, **options)
        self.rows = rows

    @torch.no_grad()
    def step(self, closure=None):
        first, stop = self.rows
        for group in self.param_groups:
            decay = group.get("row_weight_decay", 0.0)
            if decay:
                for parameter in group["params"]:
                    if parameter.grad is not None:
                        parameter[first:stop].mul_(1 - group["lr"] * decay)
        return super().step(closure)


def extended_rows(folder: str, record) -> tuple[int, int]:
    """(first new id, id after the last new token) of an extended model folder, from its record (None where it has
    none); a ConfigError naming what to do for any other folder."""
    vocabulary = getattr(record, "vocabulary", None)
    if vocabulary is None or not vocabulary.extended:
        raise ConfigError(f"preset extension trains the new rows of an extended vocabulary, and '{folder}' has none "
                          "(its langswap.json records no extended vocabulary). Transfer into a tokenizer made with "
                          "`langswap tokenizer --extend N` first, or choose another preset (embeddings, transinner).")
    first, last = vocabulary.new
    return first, last + 1


@register_recipe("extension", options=ExtensionOptions)
class Extension(Recipe):
    """An extended vocabulary: the new tokens' rows alone first (source rows bitwise unchanged), then `then`."""

    @functools.cached_property
    def record(self):
        """The model folder's record (langswap.json), read once; None where it has none."""
        folder = self.config.model
        return read_model_record(folder) if has_model_record(folder) else None

    @functools.cached_property
    def new_rows(self) -> tuple[int, int]:
        """(first new id, id after the last new token), from the model folder's record."""
        return extended_rows(self.config.model, self.record)

    @property
    def self_extension(self) -> bool:
        """Whether the model's transfer was given no source-language text (`calibration.source_text`, recorded as
        the record's `separation`), as the transfer itself reads a self-extension; False for a folder without a
        record of an extended vocabulary (refused in `validate`)."""
        vocabulary = getattr(self.record, "vocabulary", None)
        return bool(vocabulary is not None and vocabulary.extended and getattr(self.record, "separation", None) is None)

    @property
    def new_rows_fraction(self) -> float:
        """`new_rows_fraction` as set, or where unset 0 with then: embeddings and either source_text or a
        self-extension, 0.5 otherwise."""
        fraction = self.options.new_rows_fraction
        if fraction is not None:
            return fraction
        source_language = bool(self.options.source_text) or self.self_extension
        return 0.0 if source_language and self.options.then == "embeddings" else 0.5

    def peak(self, objective: str) -> float:
        """`learning_rate` where set, otherwise the extension's own peak (`PEAK`)."""
        return self.config.learning_rate or PEAK[objective]

    def validate(self) -> None:
        if self.options.new_rows_fraction is not None:
            check_fraction(self.options, "new_rows_fraction")
        if self.options.then not in ("embeddings", "full", "none"):
            raise ConfigError(f"recipe.then is {self.options.then!r}; choose embeddings, full or none.")
        if self.options.source_text:
            check_source_stream(self.options)
        self.new_rows  # noqa: B018 (an unextended folder is refused here, before anything is read)

    def streams(self) -> list:
        return source_streams(self.config, self.options)

    def phases(self, objective: str, done: list[int] = ()) -> list[Phase]:
        peak, steps = self.peak(objective), self.config.steps
        if self.options.then == "none":
            return [Phase(f"1-{NEW_ROWS}", NEW_ROWS, steps, peak, self.warmup(steps))]
        if self.new_rows_fraction == 0:
            return [Phase(f"1-{self.options.then}", self.options.then, steps, peak, self.warmup(steps))]
        first = max(1, round(steps * self.new_rows_fraction))
        if first >= steps:
            raise ConfigError(f"recipe.new_rows_fraction {self.new_rows_fraction} leaves no steps for phase 2 "
                              f"with steps={steps}; lower it, raise steps, or set recipe.then: none.")
        rest = steps - first
        return [Phase(f"1-{NEW_ROWS}", NEW_ROWS, first, peak, self.warmup(first)),
                Phase(f"2-{self.options.then}", self.options.then, rest, peak, self.warmup(rest))]

    def trainable_parameters(self, phase: Phase, model) -> list:
        if phase.trainable == NEW_ROWS:
            return embedding_parameters(model)
        return super().trainable_parameters(phase, model)

    def freezes_body(self, phase: Phase) -> bool:
        return phase.trainable in (NEW_ROWS, "embeddings")

    def recalibrated_rows(self) -> tuple[int, int]:
        """Only the new rows (the source rows are the source language's, kept for it), and none with `source_text`:
        its sequences train the new rows down where the source language is read, which a move along the target
        text's mean head input would undo."""
        first, stop = self.new_rows
        return (first, first) if self.options.source_text else (first, stop)

    def optimizer(self, phase: Phase, parameter_groups: list[dict]):
        if phase.trainable != NEW_ROWS:
            return None
        config = self.config
        return NewRowsAdamW([{**group, "weight_decay": 0.0, "row_weight_decay": group["weight_decay"],
                              "lr": phase.learning_rate} for group in parameter_groups if group["params"]],
                            self.new_rows, lr=phase.learning_rate,
                            betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon, weight_decay=0.0)

    def on_phase_start(self, phase: Phase, model) -> None:
        if phase.trainable != NEW_ROWS:
            return
        if sharding_engine():
            raise ConfigError("preset extension's first phase masks the gradients of the source rows, which a "
                              "sharding engine (FSDP, DeepSpeed ZeRO-3) splits across processes; run it with plain "
                              "DDP (torchrun or accelerate without FSDP/DeepSpeed), or set recipe.then and use "
                              "another preset.")
        first, stop = self.new_rows
        for parameter in embedding_parameters(model):
            keep = torch.ones(parameter.shape[0], dtype=torch.bool, device=parameter.device)
            keep[first:stop] = False
            shape = (-1,) + (1,) * (parameter.dim() - 1)
            parameter.register_hook(lambda grad, keep=keep.view(shape): grad.masked_fill(keep, 0))
