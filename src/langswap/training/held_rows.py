"""Rows of tokens the training text never shows, held where the model folder has them (`TrainConfig.unshown_rows`).

A token that never occurs in the training text is never a target and never an input: the only gradient its output
row gets is softmax's push away from every context, and weight decay shrinks its rows. A tokenizer trained on a small
text holds that text's words whole and never shows the letters and syllables that other text needs for the words it
lacks, so the longer a run trains, the worse such text reads (docs/design.md, "Tokens the training text never
shows"). `unshown_rows: hold` keeps those rows as the transfer left them: a gradient hook zeroes their gradient (so
gradient clipping's norm leaves them out and Adam's moments stay zero), and after each optimizer step the rows are
put back, which undoes weight decay's shrinking too. The input rows, a separate output head's rows and its bias are
held alike.

Under DDP every process holds the same rows of its own copy. Sharding engines (FSDP, DeepSpeed ZeRO-3) hand a hook
a flat shard, so the rows are not held there, and the run says so.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from transformers import TrainerCallback

from langswap.training.phases import embedding_parameters
from langswap.training.store import id_counts

logger = logging.getLogger(__name__)


def text_token_counts(tokenizer, token_arrays) -> tuple[np.ndarray, list[np.ndarray]]:
    """(a (size,) mask of the tokenizer's text tokens, each array's (size,) count of every id): text tokens as
    `langswap.resources.tokenizer.text_tokens` defines them (added tokens, partial UTF-8 and whitespace left out);
    one pass over each array."""
    from langswap.resources.tokenizer import text_tokens

    size = len(tokenizer)
    texts = np.array([bool(text) for text in text_tokens(tokenizer)])
    return texts, [id_counts(tokens, size) for tokens in token_arrays]


def unshown_text_tokens(counted: tuple[np.ndarray, list[np.ndarray]]) -> tuple[np.ndarray, list[np.ndarray], int]:
    """(ids of the text tokens that none of the token arrays holds, each array's own such ids, how many text tokens
    there are), from `counted`: `text_token_counts` of the arrays."""
    texts, counts = counted
    shown = np.zeros(len(texts), dtype=bool)
    each = []
    for count in counts:
        seen = count > 0
        each.append(np.flatnonzero(texts & ~seen))
        shown |= seen
    return np.flatnonzero(texts & ~shown), each, int(texts.sum())


class HeldRows(TrainerCallback):
    """Holds rows `ids` of a model's token matrices (input embeddings, a separate output head, its bias) where they
    are: `attach` registers the gradient hooks and keeps a copy of the rows; the callback puts the rows back after
    every optimizer step."""

    def __init__(self, parameters: list[torch.nn.Parameter], ids: torch.Tensor):
        self.parameters = parameters
        self.ids = ids
        # a matrix may have fewer rows than the tokenizer has tokens (a bias, a head cut to size): its own rows only
        self.rows = [ids[ids < parameter.shape[0]].to(parameter.device) for parameter in parameters]
        self.kept = [parameter.detach()[rows].clone() for parameter, rows in zip(parameters, self.rows)]

    @classmethod
    def attach(cls, model, ids: np.ndarray) -> "HeldRows | None":
        """Hold rows `ids` of every trainable token matrix of `model` (None where none trains or `ids` is empty)."""
        if len(ids) == 0:
            return None
        parameters = [parameter for parameter in embedding_parameters(model) if parameter.requires_grad]
        if not parameters:
            return None
        index = torch.as_tensor(ids, dtype=torch.long)
        held = cls(parameters, index)
        for parameter, rows in zip(parameters, held.rows):
            mask = torch.zeros(parameter.shape[0], dtype=torch.bool, device=parameter.device)
            mask[rows] = True
            mask = mask.view(-1, *([1] * (parameter.dim() - 1)))
            parameter.register_hook(lambda grad, mask=mask: grad.masked_fill(mask, 0))
        return held

    @torch.no_grad()
    def restore(self) -> None:
        """Put the held rows back as they were when attached."""
        for parameter, rows, kept in zip(self.parameters, self.rows, self.kept):
            parameter.index_copy_(0, rows, kept.to(parameter.dtype))

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.restore()
