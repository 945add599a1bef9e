"""Resource kind `helper_model`: a model that already uses the target tokenizer (CLP's helper, tokensurgeon's donor).

Key: `resources.helper_model` (a model folder or hub name; `benchmarks/train_helper.py` trains a small one on target
text). Its tokenizer must be the target tokenizer: the same tokens at the same ids, since a method reads the helper's
row of each target token. Its hidden size may differ from the source model's: methods only compare its rows with
one another. Methods read `inputs.resource("helper_model")`, a `HelperModel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from langswap.errors import MissingResourceError, VocabularyError
from langswap.models import load_model, load_tokenizer
from langswap.resources.kinds import ResourceKind, register_resource


@dataclass(kw_only=True)
class HelperFiles:
    helper_model: str | None = field(default=None, metadata={
        "help": "A model that uses the target tokenizer (folder or hub name), e.g. a small one trained on target "
                "text; clp and omp read its embeddings."})


@dataclass
class HelperModel:
    """The helper's input embeddings (V_t, d_h) float32, its untied output head (V_t, d_h) or None, and its name."""

    embeddings: torch.Tensor
    output_embeddings: torch.Tensor | None
    name: str


def check(config) -> None:
    if not config.resources.helper_model:
        raise MissingResourceError("this method needs a helper model that already uses the target tokenizer: set "
                                   "resources.helper_model (a model folder or hub name; benchmarks/train_helper.py "
                                   "trains a small one on target text).")


def same_vocabulary(helper_tokenizer, target_tokenizer) -> str | None:
    """None when both tokenizers have the same tokens at the same ids, else what differs (for the error)."""
    helper, target = helper_tokenizer.get_vocab(), target_tokenizer.get_vocab()
    if helper == target:
        return None
    only_target = [token for token in target if token not in helper]
    moved = [token for token, index in target.items() if token in helper and helper[token] != index]
    return (f"{len(helper):,} tokens against the target's {len(target):,}; {len(only_target):,} target tokens "
            f"missing (e.g. {only_target[:3]}), {len(moved):,} at other ids (e.g. {moved[:3]})")


def load_helper(name: str, target_tokenizer) -> HelperModel:
    difference = same_vocabulary(load_tokenizer(name, "helper model's tokenizer"), target_tokenizer)
    if difference is not None:
        raise VocabularyError(
            f"the helper model '{name}' does not use the target tokenizer ({difference}). A helper's row i must be "
            "the target token i: give a model trained with the target tokenizer (benchmarks/train_helper.py trains "
            "one).")
    model = load_model(name)
    embeddings = model.get_input_embeddings().weight.detach().to(torch.float32)
    head = model.get_output_embeddings()
    untied = head is not None and head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    output = head.weight.detach().to(torch.float32) if untied else None
    rows = len(target_tokenizer)
    if embeddings.shape[0] < rows:
        raise VocabularyError(f"the helper model '{name}' has {embeddings.shape[0]:,} embedding rows for a target "
                              f"tokenizer of {rows:,} tokens.")
    return HelperModel(embeddings[:rows].clone(), None if output is None else output[:rows].clone(), name)


def load(config, target_tokenizer) -> tuple[HelperModel, dict]:
    helper = load_helper(config.resources.helper_model, target_tokenizer)
    report = {"helper_model": helper.name, "hidden_size": int(helper.embeddings.shape[1]),
              "untied_head": helper.output_embeddings is not None}
    return helper, report


register_resource(ResourceKind("helper_model", HelperFiles, check, load,
                               "a model that already uses the target tokenizer", uses_target_tokenizer=True))
