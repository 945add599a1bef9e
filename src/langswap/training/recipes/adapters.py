"""Embeddings plus low-rank adapters (`adapters`): the recipe for models too large to train whole.

A 7-8B model trained whole needs its weights, gradients and two AdamW moments in float32 (16 bytes a parameter, 128
GB for 8B) before activations. Here the body stays frozen (in the model's own precision under bf16/fp16, with no
gradients or optimizer state), and what trains is the token embeddings (input, output, output bias, in float32) and
LoRA adapters (Hu et al., 2021; through peft, `training/adapters.py`) on the body's linear layers: rank 16 on every
linear layer of Llama-3-8B is 42M parameters, 0.6% of the body. The first `embedding_fraction` of the steps train
the embeddings alone, as TransInner does, so that the adapters do not start by bending the body towards embeddings
that are still being placed; then embeddings and adapters train together, each phase with its own warm-up. Every
model folder written (`final/`, snapshots, `model/`) holds the adapters merged into the body's weights, so the
result is an ordinary model folder; a checkpoint keeps them apart for resuming.

Defaults: rank 16, alpha 32 (scale 2, as peft's examples and the LoRA-for-continued-pretraining reports use), no
dropout (the text is seen once), `all-linear` (every linear layer of the body, never the output layer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from langswap.errors import ConfigError
from langswap.training.adapters import adapter_parameters, inject, merge_state_dict, require_peft
from langswap.training.phases import Phase, embedding_parameters
from langswap.training.recipes.base import Recipe, RecipeOptions, register_recipe
from langswap.training.recipes.transinner import check_fraction, embedding_steps


@dataclass(frozen=True, kw_only=True)
class AdapterOptions(RecipeOptions):
    rank: int = field(default=16, metadata={"help": "LoRA rank of every adapted layer."})
    alpha: float = field(default=32.0, metadata={"help": "LoRA alpha: the update is scaled by alpha / rank."})
    dropout: float = field(default=0.0, metadata={"help": "Dropout on the adapters' input."})
    adapter_modules: str = field(default="all-linear", metadata={
        "help": "Layers that get adapters: all-linear (every linear layer of the body), or comma-separated "
                "suffixes of module names, e.g. q_proj,v_proj."})
    rslora: bool = field(default=False, metadata={"help": "Scale by alpha / sqrt(rank) (rank-stabilised LoRA)."})
    embedding_fraction: float = field(default=0.1, metadata={"help": "Share of the steps that train the "
                                                                     "embeddings alone first (0: none)."})


@register_recipe("adapters", options=AdapterOptions)
class Adapters(Recipe):
    """Embeddings alone, then embeddings plus LoRA adapters on the frozen body, merged into the saved weights."""

    def __init__(self, config):
        super().__init__(config)
        self.merges: dict = {}

    def validate(self) -> None:
        options = self.options
        check_fraction(options, "embedding_fraction")
        if options.rank < 1:
            raise ConfigError(f"recipe.rank is {options.rank}; give 1 or more (8 to 64 are usual).")
        if not options.alpha > 0:
            raise ConfigError(f"recipe.alpha is {options.alpha}; give a positive number (usually twice the rank).")
        if not 0 <= options.dropout < 1:
            raise ConfigError(f"recipe.dropout is {options.dropout}; give a probability in [0, 1).")
        if not self.targets():
            raise ConfigError("recipe.adapter_modules is empty; give all-linear or module-name suffixes.")
        require_peft()

    def targets(self) -> str | list[str]:
        value = self.options.adapter_modules.strip()
        return value if value == "all-linear" else [part.strip() for part in value.split(",") if part.strip()]

    def phases(self, objective: str, done: list[int] = ()) -> list[Phase]:
        peak, steps = self.peak(objective), self.config.steps
        if self.options.embedding_fraction == 0:
            return [Phase("1-adapters", "adapters", steps, peak, self.warmup(steps))]
        first = embedding_steps(self, self.options.embedding_fraction)
        rest = steps - first
        return [Phase("1-embeddings", "embeddings", first, peak, self.warmup(first)),
                Phase("2-adapters", "adapters", rest, peak, self.warmup(rest))]

    def freezes_body(self, phase: Phase) -> bool:
        return True

    def prepare_model(self, phase: Phase, model, start) -> None:
        if phase.trainable == "adapters":
            options = self.options
            self.merges = inject(model, options.rank, options.alpha, options.dropout, self.targets(), options.rslora,
                                 seed=self.config.seed)

    def trainable_parameters(self, phase: Phase, model) -> list:
        if phase.trainable == "adapters":
            return embedding_parameters(model) + adapter_parameters(model)
        return super().trainable_parameters(phase, model)

    def saved_state(self, phase: Phase, state_dict: dict) -> dict:
        return merge_state_dict(state_dict, self.merges) if phase.trainable == "adapters" else state_dict
