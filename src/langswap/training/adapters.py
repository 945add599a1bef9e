"""Low-rank adapters (LoRA, Hu et al., 2021) on a frozen body, through `peft`, merged into ordinary weights on save.

`inject` puts peft's LoRA layers into the model in place (`peft.inject_adapter_in_model`): the model stays the
transformers class it was, so the Trainer, its checkpoints and its resume treat it as any other model; a checkpoint
holds the base weights and the adapters under peft's names (`q_proj.base_layer.weight`, `q_proj.lora_A.default
.weight`, ...), and a resumed phase injects the same adapters before the checkpoint is read. A model folder written
for users (a phase's `final/`, a snapshot, `model/`) holds merged weights under the model's own names
(`merge_state_dict`): W + scale * B @ A (transposed for GPT-2's Conv1D, whose weight is stored input-major), so
`from_pretrained` loads it with no peft installed. The merge works on the state dict the Trainer saves, which is the
gathered full state under FSDP and DeepSpeed ZeRO-3 as well as on one process.

The output layer is never adapted (peft's `all-linear` leaves it out): it is the output embedding matrix, which the
adapter recipes train whole. peft is imported only when a recipe injects adapters; a missing peft is refused with
the pip command.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.pytorch_utils import Conv1D

from langswap.errors import ConfigError

ADAPTER = "default"  # peft's adapter name


@dataclass(frozen=True)
class Merge:
    """How one adapted module's delta is added to its base weight."""

    scale: float  # alpha / rank (alpha / sqrt(rank) with rank-stabilised scaling)
    transposed: bool  # the base weight is stored (in, out): GPT-2's Conv1D


def require_peft() -> None:
    from langswap.training.options import _require_module  # here: options imports this module (via the recipes)

    _require_module("peft", "this recipe trains low-rank adapters, which needs the peft package: `pip install "
                    "'peft>=0.13'` (or `pip install -e '.[adapters]'`), or choose a recipe without adapters.")


def inject(model, rank: int, alpha: float, dropout: float, targets: str | list[str], rslora: bool = False,
           seed: int = 0) -> dict[str, Merge]:
    """Put LoRA layers of `rank` into `model` (in place) on the modules `targets` names (peft's `target_modules`:
    "all-linear", or a list of module-name suffixes); returns {module name: Merge} of every adapted module. The
    adapters' initial values are drawn from a generator seeded by `seed`, so a phase started again (a resumed run)
    starts from the same adapters whatever the process drew before; the global random state is left as it was."""
    require_peft()
    from peft import LoraConfig, inject_adapter_in_model
    from peft.tuners.lora import LoraLayer

    output, linear = model.get_output_embeddings(), _linear_classes()
    if targets == "all-linear":
        targets = linear_layers(model)
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, use_rslora=rslora,
                        bias="none")
    try:
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    except ValueError as error:  # no module matched the targets, or peft cannot adapt one
        raise ConfigError(f"recipe.adapter_modules {targets!r} matches no module of the model that peft can adapt "
                          f"({error}); give all-linear or suffixes of its linear layers' names, e.g. "
                          "q_proj,v_proj.") from None
    merges = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            base = module.get_base_layer()
            if output is not None and base is output:
                raise ConfigError(f"recipe.adapter_modules {targets!r} adapts the output layer ({name}), which the "
                                  "recipe trains whole; name the body's linear layers only.")
            if not isinstance(base, linear):
                raise ConfigError(f"recipe.adapter_modules {targets!r} adapts {name}, a {type(base).__name__}; "
                                  "adapters go on the body's linear layers only (the token embeddings train "
                                  "whole): name those, e.g. q_proj,v_proj, or all-linear.")
            merges[name] = Merge(float(module.scaling[ADAPTER]), bool(getattr(module, "fan_in_fan_out", False)))
    return merges


def _linear_classes() -> tuple:
    return (torch.nn.Linear, Conv1D)


def linear_layers(model) -> list[str]:
    """The names of every linear layer of `model` (torch's Linear, GPT-2's Conv1D) but its output layer: what
    `all-linear` adapts (resolved here, as peft before 0.14 adapts BERT's output layer under that name)."""
    output, linear = model.get_output_embeddings(), _linear_classes()
    return [name for name, module in model.named_modules() if isinstance(module, linear) and module is not output]


def adapter_parameters(model) -> list:
    """The LoRA matrices peft put into `model`."""
    return [parameter for name, parameter in model.named_parameters() if ".lora_" in name]


def merge_state_dict(state_dict: dict, merges: dict[str, Merge]) -> dict:
    """`state_dict` of an adapted model as the plain model's: each adapted module's `base_layer.weight` plus its
    delta under the module's own name (`.weight`, `.bias`), the adapters dropped. A merged weight is summed in
    float32 and kept in its base weight's dtype. Keys may carry a prefix the module names lack (a wrapper's)."""
    lora_a = f".lora_A.{ADAPTER}.weight"
    out: dict = {}
    found: set[str] = set()
    by_key = {}
    for key in state_dict:
        if key.endswith(lora_a):
            prefix = key[: -len(lora_a)]
            module = next((name for name in merges if prefix == name or prefix.endswith("." + name)), None)
            if module is None:
                raise RuntimeError(f"state dict key {key} is an adapter no injected module matches")
            by_key[prefix] = merges[module]
            found.add(module)
    missing = set(merges) - found
    if missing:
        raise RuntimeError(f"the state dict lacks the adapters of {sorted(missing)[:3]}")
    for key, tensor in state_dict.items():
        if ".lora_" in key:
            continue
        prefix, wrapped, leaf = key.rpartition(".base_layer.")
        if wrapped and prefix not in by_key:
            raise RuntimeError(f"state dict key {key} is a wrapped layer without adapters to merge")
        if wrapped:
            key = f"{prefix}.{leaf}"
            if leaf == "weight":
                merge = by_key[prefix]
                a = state_dict[f"{prefix}.lora_A.{ADAPTER}.weight"].to(torch.float32)
                b = state_dict[f"{prefix}.lora_B.{ADAPTER}.weight"].to(torch.float32)
                delta = (b.to(tensor.device) @ a.to(tensor.device)).mul_(merge.scale)
                tensor = (tensor.to(torch.float32) + (delta.T if merge.transposed else delta)).to(tensor.dtype)
        out[key] = tensor
    return out
