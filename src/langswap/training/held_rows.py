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


def unshown_text_tokens(tokenizer, token_arrays) -> tuple[np.ndarray, list[np.ndarray], int]:
    """(ids of the tokenizer's text tokens that none of `token_arrays` holds, each array's own such ids, how many text
    tokens there are): text tokens as `langswap.resources.tokenizer.text_tokens` defines them (added tokens, partial
    UTF-8 and whitespace left out)."""
    from langswap.resources.tokenizer import text_tokens

    size = len(tokenizer)
    texts = np.array([bool(text) for text in text_tokens(tokenizer)])
    shown = np.zeros(size, dtype=bool)
    each = []
    for tokens in token_arrays:
        seen = id_counts(tokens, size) > 0
        each.append(np.flatnonzero(texts & ~seen))
        shown |= seen
    return np.flatnonzero(texts & ~shown), each, int(texts.sum())


class HeldRows(TrainerCallback):
    """Holds rows `ids` of a model's token matrices (input embeddings, a separate output head, its bias) where they
    are: `attach` registers the gradient hooks and keeps a copy of the rows; the callback puts the rows back after
    every optimizer step. With `mean=True` (`unshown_rows: hold-mean`) the output rows train, and after every step
    only their move along the mean head input is taken back: each row's logit at the head input's mean over the
    first update's batches stays where the transfer put it, while training may still lower it in the contexts where
    it is too probable and raise it in the others (docs/design.md, "Tokens the training text never shows")."""

    def __init__(self, parameters: list[torch.nn.Parameter], ids: torch.Tensor, output=None):
        self.parameters = parameters
        self.ids = ids
        # a matrix may have fewer rows than the tokenizer has tokens (a bias, a head cut to size): its own rows only
        self.rows = [ids[ids < parameter.shape[0]].to(parameter.device) for parameter in parameters]
        self.kept = [parameter.detach()[rows].clone() for parameter, rows in zip(parameters, self.rows)]
        self.output = output  # hold-mean: the output rows' matrix (among `parameters`), its rows keep only the mean
        self.direction: torch.Tensor | None = None  # hold-mean: the unit mean head input, once the first step read it
        self._sum: torch.Tensor | None = None
        self._hook = None

    @classmethod
    def attach(cls, model, ids: np.ndarray, mean: bool = False) -> "HeldRows | None":
        """Hold rows `ids` of every trainable token matrix of `model` (None where none trains or `ids` is empty);
        with `mean`, the output rows train and keep only their logit at the mean head input."""
        if len(ids) == 0:
            return None
        parameters = [parameter for parameter in embedding_parameters(model) if parameter.requires_grad]
        if not parameters:
            return None
        index = torch.as_tensor(ids, dtype=torch.long)
        head = model.get_output_embeddings()
        output = head.weight if mean and head is not None and any(head.weight is p for p in parameters) else None
        held = cls(parameters, index, output)
        for parameter, rows in zip(parameters, held.rows):
            if parameter is output:
                continue  # its gradient flows; the step's move along the mean is taken back after it
            mask = torch.zeros(parameter.shape[0], dtype=torch.bool, device=parameter.device)
            mask[rows] = True
            mask = mask.view(-1, *([1] * (parameter.dim() - 1)))
            parameter.register_hook(lambda grad, mask=mask: grad.masked_fill(mask, 0))
        if output is not None:
            held._hook = head.register_forward_pre_hook(held._read_head_input)
        return held

    def _read_head_input(self, module, inputs) -> None:
        """Sum the head's inputs (every position) until the first optimizer step."""
        if not module.training:
            return
        hidden = inputs[0].detach().float().reshape(-1, inputs[0].shape[-1])
        total = hidden.sum(dim=0)
        self._sum = total if self._sum is None else self._sum + total

    @torch.no_grad()
    def restore(self) -> None:
        """Put the held rows back as they were when attached (with `mean`, the output rows' move along the mean head
        input alone)."""
        if self.output is not None and self.direction is None and self._sum is not None:
            self.direction = self._sum / self._sum.norm().clamp_min(1e-12)
            self._hook.remove()
        for parameter, rows, kept in zip(self.parameters, self.rows, self.kept):
            if parameter is self.output:
                if self.direction is None:  # no forward pass read the head yet: hold the rows whole
                    parameter.index_copy_(0, rows, kept.to(parameter.dtype))
                    continue
                direction = self.direction.to(parameter.device)
                moved = parameter[rows].float() - kept.float()
                moved -= (moved @ direction)[:, None] * direction[None, :]
                parameter.index_copy_(0, rows, (kept.float() + moved).to(parameter.dtype))
            else:
                parameter.index_copy_(0, rows, kept.to(parameter.dtype))

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.restore()
