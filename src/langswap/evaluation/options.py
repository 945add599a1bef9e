"""The options of `langswap evaluate` (`--set key=value`); the files it reads are command-line arguments."""

from __future__ import annotations

from dataclasses import dataclass, field

from langswap.evaluation.probes import ProbeConfig
from langswap.evaluation.token_classification import FinetuneConfig


@dataclass(kw_only=True)
class EvaluateConfig:
    """How `langswap evaluate` scores a model folder."""

    metric: str | None = field(default=None, metadata={
        "help": "perplexity (causal), pseudo-perplexity or masked-lm-loss (masked); default by the model's kind."})
    stride: int | None = field(default=None, metadata={
        "help": "Perplexity and pseudo-perplexity: tokens between the starts of windows over lines longer than "
                "the context (default half the context)."})
    max_length: int | None = field(default=None, metadata={"help": "Window length; default the model's context, "
                                                                   "at most 1024."})
    mlm_probability: float | None = field(default=None, metadata={
        "help": "masked-lm-loss: share of the tokens masked (default 0.15, as in training)."})
    seed: int | None = field(default=None, metadata={"help": "masked-lm-loss: seed of the masks (default 0)."})
    device: str | None = field(default=None, metadata={
        "help": "Where --text and --probe-pos run the model: cpu, cuda, cuda:1, ...; default cuda when there is "
                "one. The model runs in the dtype it was saved in."})
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
