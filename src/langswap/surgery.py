"""New embeddings into a model: input and output matrices, tied or untied heads, output bias, config, saving.

`read_source_matrices` takes what methods need from a model: the input embeddings cut to the tokenizer's size
(matrices padded beyond the tokenizer, e.g. to a multiple of 64, keep only the rows tokens use), and for an untied
head its output matrix, and an output bias where the head has one (BERT/RoBERTa MLM heads). `install_embeddings`
resizes the model to the target vocabulary and writes the new rows; a tied head stays tied (it shares the input
matrix), an untied one gets its own mixed matrix. Config and generation config get the target's special token ids.

Not handled: models whose embeddings are not reachable through `get_input_embeddings()` /
`get_output_embeddings()`, and encoder-decoder models with separate decoder embeddings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch

from langswap.errors import VocabularyError
from langswap.models import is_tied, position_padding_idx
from langswap.tokens import names_a_token, special_token_roles

logger = logging.getLogger(__name__)


@dataclass
class SourceMatrices:
    embeddings: torch.Tensor  # (V_s, d) float32, or the model's dtype (`source_matrices`, stored_dtype)
    output_embeddings: torch.Tensor | None  # (V_s, d) for an untied head, in the same dtype
    output_bias: torch.Tensor | None  # (V_s,) float32
    tied: bool
    padded_rows: int  # rows of the model matrix beyond the tokenizer
    beyond: dict = field(default_factory=dict)  # those rows, by matrix name as `as_dict` (copies; empty where none)

    def as_dict(self) -> dict[str, torch.Tensor | None]:
        return {"output_embeddings": self.output_embeddings, "output_bias": self.output_bias}


def output_bias(model) -> torch.nn.Parameter | None:
    output = model.get_output_embeddings()
    bias = getattr(output, "bias", None) if output is not None else None
    return bias if isinstance(bias, torch.Tensor) else None


def read_source_matrices(model, vocabulary_size: int, stored_dtype: bool = False) -> SourceMatrices:
    """Take the first `vocabulary_size` rows of the model's embedding matrices, as float32 copies (copies in the
    model's dtype with `stored_dtype`; see `source_matrices`)."""
    tied = is_tied(model)
    output = model.get_output_embeddings()
    bias = output_bias(model)
    return source_matrices(model.get_input_embeddings().weight.detach(),
                           output.weight.detach() if output is not None and not tied else None,
                           bias.detach() if bias is not None else None, tied, vocabulary_size, stored_dtype)


def source_matrices(embeddings: torch.Tensor, output_embeddings: torch.Tensor | None, bias: torch.Tensor | None,
                    tied: bool, vocabulary_size: int, stored_dtype: bool = False, copy: bool = True) -> SourceMatrices:
    """`SourceMatrices` from a model's input matrix, untied output matrix and output bias (as stored, possibly with rows
    beyond the tokenizer): their first `vocabulary_size` rows as float32 copies. With `stored_dtype` the two matrices
    keep their own dtype (the bias is float32): a transfer mixes rows in float32 block by block (`build_matrix`) and its
    methods convert the rows they compute with, so a bfloat16 model needs half the memory of float32 copies and gets the
    same mixed rows bit for bit (mean and random rows take their column statistics summed in float64). With `copy=False`
    (tensors the caller owns) a tensor already in its dtype is kept, not copied."""
    rows = embeddings.shape[0]
    if rows < vocabulary_size:
        raise VocabularyError(
            f"the source model's embedding matrix has {rows:,} rows but its tokenizer has {vocabulary_size:,} tokens, "
            "so some tokens have no embedding: the tokenizer does not belong to this model. Give the tokenizer saved "
            "with the model (source_tokenizer: null uses the model folder's own), or resize the model first.")
    if rows > vocabulary_size:
        logger.info("source embedding matrix has %d rows beyond its %d tokens (padding); they are not used",
                    rows - vocabulary_size, vocabulary_size)
    if output_embeddings is not None and output_embeddings.shape[0] < vocabulary_size:
        raise VocabularyError(f"the source model's output matrix has {output_embeddings.shape[0]:,} rows for "
                              f"{vocabulary_size:,} tokens; the tokenizer does not belong to this model.")

    def first_rows(matrix, dtype=torch.float32):
        return None if matrix is None else matrix[:vocabulary_size].to(dtype or matrix.dtype, copy=copy)

    def last_rows(matrix, dtype=torch.float32):
        return None if matrix is None else matrix[vocabulary_size:].to(dtype or matrix.dtype, copy=True)

    matrix_dtype = None if stored_dtype else torch.float32
    beyond = {} if rows == vocabulary_size else {
        "embeddings": last_rows(embeddings, matrix_dtype), "output_embeddings": last_rows(output_embeddings,
                                                                                          matrix_dtype),
        "output_bias": last_rows(bias)}
    return SourceMatrices(first_rows(embeddings, matrix_dtype), first_rows(output_embeddings, matrix_dtype),
                          first_rows(bias), tied, rows - vocabulary_size, beyond)


def install_embeddings(model, embeddings: torch.Tensor, output_embeddings: torch.Tensor | None = None,
                       bias: torch.Tensor | None = None) -> None:
    """Resize `model` to len(embeddings) tokens and write the new rows in place (in the model's dtype)."""
    new_rows, dim = embeddings.shape
    tied = is_tied(model)
    if not tied and model.get_output_embeddings() is not None and output_embeddings is None:
        raise ValueError("the model's head is untied: pass output_embeddings")
    model.resize_token_embeddings(new_rows, mean_resizing=False)
    with torch.no_grad():
        weight = model.get_input_embeddings().weight
        assert weight.shape == (new_rows, dim), f"resized input matrix {tuple(weight.shape)} != {(new_rows, dim)}"
        weight.copy_(embeddings.to(weight.dtype))
        output = model.get_output_embeddings()
        if output is not None and not tied:
            output.weight.copy_(output_embeddings.to(output.weight.dtype))
        new_bias = output_bias(model)
        if new_bias is not None and bias is not None:
            new_bias.copy_(bias.to(new_bias.dtype))
    if tied:
        model.tie_weights()
        assert is_tied(model), "a tied head must stay tied"
    set_vocab_size(model.config, new_rows)


def set_vocab_size(config, rows: int) -> None:
    """A model config's vocab_size, and its text config's where it has its own (multimodal configs)."""
    set_config_value(config, "vocab_size", rows)


def set_config_value(config, name: str, value) -> None:
    """Set `name` on a model config, and on its text config where it has its own (multimodal configs)."""
    setattr(config, name, value)
    text_config = getattr(config, "get_text_config", lambda: None)()
    if text_config is not None and text_config is not config:
        setattr(text_config, name, value)


def check_position_offset(model, target_roles: dict[str, int]) -> None:
    """RoBERTa-style models (RoBERTa, XLM-R, CamemBERT) number positions from their pad token's id + 1, taken from
    config.pad_token_id; a target tokenizer whose pad token has another id would shift every position (and overrun
    the position table near the context length). Refused, naming the id the pad token needs."""
    padding_idx = position_padding_idx(model)
    if padding_idx is None:
        return
    pad = target_roles.get("pad")
    if pad != padding_idx:
        found = "has no pad token" if pad is None else f"has its pad token at id {pad}"
        raise VocabularyError(
            f"the source model numbers positions from its pad token's id ({padding_idx}), as RoBERTa-style models "
            f"do, but the target tokenizer {found}: every position would shift. Give the target tokenizer a pad "
            f"token at id {padding_idx} (train it with the source's special tokens first, in the source's order; "
            "`langswap tokenizer` does this).")


def update_special_token_ids(model, tokenizer) -> None:
    """Point config and generation config at the new tokenizer's special tokens (None where it has none)."""
    roles = special_token_roles(tokenizer)
    configs = [model.config]
    text_config = getattr(model.config, "get_text_config", lambda: None)()
    if text_config is not None and text_config is not model.config:  # e.g. Gemma-3: the text model reads its own
        configs.append(text_config)
    if getattr(model, "generation_config", None) is not None:
        configs.append(model.generation_config)
    for config in configs:
        for role in ("bos", "eos", "pad"):
            name = f"{role}_token_id"
            if hasattr(config, name) or role in roles:
                setattr(config, name, roles.get(role))
        if hasattr(config, "sep_token_id") and "sep" in roles:
            config.sep_token_id = roles["sep"]


def remap_named_token_ids(config: dict, source_tokenizer, target_tokenizer) -> list[str]:
    """Move the token ids a model's config.json names beside the roles (Gemma-3's `image_token_index`,
    `boi_token_index`; `image_token_id`, `video_token_id`), in place, from the source tokenizer's ids to the target's
    ids of the same tokens (`tokens.names_a_token`). Returns a warning for each such id whose token the target lacks
    (left as it was)."""
    source_size = len(source_tokenizer)
    target_vocab = target_tokenizer.get_vocab()
    warnings = []

    def walk(node: dict, path: str) -> None:
        for key, value in list(node.items()):
            if isinstance(value, dict):
                walk(value, f"{path}{key}.")
            elif names_a_token(key) and isinstance(value, int) and not isinstance(value, bool):
                token = source_tokenizer.convert_ids_to_tokens(value) if 0 <= value < source_size else None
                if token is not None and token in target_vocab:
                    node[key] = target_vocab[token]
                else:
                    warnings.append(f"config.json's {path}{key} names token id {value} "
                                    f"({token or 'no token of the source'}), which the target tokenizer lacks; it is "
                                    "left as it was, and what reads it (image or tool inputs) will not work")

    walk(config, "")
    return warnings
