"""Rows a transfer writes beside its model for training to start from: the frequent tokens' rows of another candidate.

`combined` offers its evidence mixed (`mix`) or each token's heaviest evidence alone (`choose`), and the transfer keeps
the candidate whose model reads its check lines best: often `mix`, which hedges between a token's translations and
its spelling. Training reads that hedge less well on the tokens it shows most: the rows it moves most end further
from where they should be when they start as a blend than as one piece of evidence (docs/design.md, "The start of
training"). So where the transfer keeps `mix`, it also finishes the `choose` candidate over the same evidence and
writes, for every row the two make differently, the `choose` row as finished (calibrated like the kept one) to
`START_FILE`; `langswap train`'s `start_rows: frequent` puts those rows in place of the written ones for the tokens
the run shows at least `start_rows_shows` times, before the first update. The model as written stays the better
model to use without training.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from langswap.errors import ConfigError

START_FILE = "start-rows.safetensors"  # beside a transfer's model: the other candidate's rows, for training's start


@dataclass
class StartRows:
    """The rows `ids` of candidate `candidate` as the transfer finished it: `input` (n, d), `output` (n, d) where
    the head is untied (None: tied, the input rows are the head's), `bias` (n,) where the head has one; `own` (n,)
    bool, where the transfer knew it: whether the row the model holds is made in part from the source model's own
    row of the same token (a string both vocabularies have)."""

    candidate: str
    ids: np.ndarray
    input: np.ndarray
    output: np.ndarray | None = None
    bias: np.ndarray | None = None
    own: np.ndarray | None = None

    def rows(self, index) -> "StartRows":
        """The same rows for a model whose rows were taken as `index` (old row ids, in their new order): a row
        whose token was dropped is dropped, the others renumbered."""
        new_id = {int(old): new for new, old in enumerate(np.asarray(index, dtype=np.int64))}
        keep = [i for i, row in enumerate(self.ids.tolist()) if row in new_id]
        ids = np.array([new_id[int(self.ids[i])] for i in keep], dtype=np.int64)
        return StartRows(self.candidate, ids, self.input[keep],
                         None if self.output is None else self.output[keep],
                         None if self.bias is None else self.bias[keep],
                         None if self.own is None else self.own[keep])

    def save(self, path) -> None:
        from safetensors.numpy import save_file

        tensors = {"ids": np.ascontiguousarray(self.ids, dtype=np.int64),
                   "input": np.ascontiguousarray(self.input, dtype=np.float32)}
        for key in ("output", "bias"):
            if getattr(self, key) is not None:
                tensors[key] = np.ascontiguousarray(getattr(self, key), dtype=np.float32)
        if self.own is not None:
            tensors["own"] = np.ascontiguousarray(self.own, dtype=np.uint8)
        save_file(tensors, str(path), metadata={"candidate": self.candidate})

    @classmethod
    def load(cls, path) -> "StartRows":
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as handle:
            keys = set(handle.keys())
            return cls((handle.metadata() or {}).get("candidate", ""), handle.get_tensor("ids"),
                       handle.get_tensor("input"), *(handle.get_tensor(key) if key in keys else None
                                                     for key in ("output", "bias")),
                       handle.get_tensor("own").astype(bool) if "own" in keys else None)


def finished_rows(model, candidate: str, ids) -> StartRows:
    """The rows `ids` of `model`'s token matrices (its input rows; the head's and its bias where it has its own)."""
    from langswap.models import is_tied
    from langswap.surgery import output_bias

    index = torch.as_tensor(np.asarray(ids, dtype=np.int64))

    def taken(weight) -> np.ndarray:
        return weight.detach()[index.to(weight.device)].float().cpu().numpy()

    head = model.get_output_embeddings()
    bias = output_bias(model)
    return StartRows(candidate, index.numpy(), taken(model.get_input_embeddings().weight),
                     taken(head.weight) if head is not None and not is_tied(model) else None,
                     taken(bias) if bias is not None else None)


def own_source_rows(mapping, source, target, ids) -> np.ndarray:
    """(len(ids),) bool: whether each target token's row (`mapping`, a `methods.mapping.TokenMapping`) is made in part
    from the row of the source token spelt the same (`source.lookup`; `source`, `target`: `tokens.Vocabulary`)."""
    own = np.zeros(len(ids), dtype=bool)
    for index, token_id in enumerate(np.asarray(ids, dtype=np.int64).tolist()):
        same = source.lookup(target[token_id], target.family)
        own[index] = same is not None and bool(np.isin(same, mapping.row(token_id)[0]))
    return own


def put_in_place(model, start: StartRows, ids) -> int:
    """Write the start rows of the tokens `ids` (a subset of `start.ids`) into `model`; returns how many. A tied
    model's head follows its input rows."""
    from langswap.surgery import output_bias

    weight = model.get_input_embeddings().weight
    chosen = np.isin(start.ids, np.asarray(ids, dtype=np.int64)) & (start.ids < weight.shape[0])
    if not chosen.any():
        return 0
    if start.input.shape[1] != weight.shape[1]:
        raise ConfigError(f"the start rows are {start.input.shape[1]} wide, the model's {weight.shape[1]}: they belong "
                          "to another model; train from the transfer's folder as it was written.")
    rows = torch.as_tensor(start.ids[chosen])
    head, bias = model.get_output_embeddings(), output_bias(model)
    with torch.no_grad():
        weight[rows.to(weight.device)] = torch.as_tensor(start.input[chosen]).to(weight.device, weight.dtype)
        if start.output is not None and head is not None and head.weight is not weight:
            head.weight[rows.to(head.weight.device)] = torch.as_tensor(start.output[chosen]).to(
                head.weight.device, head.weight.dtype)
        if start.bias is not None and bias is not None:
            bias[rows.to(bias.device)] = torch.as_tensor(start.bias[chosen]).to(bias.device, bias.dtype)
    return int(chosen.sum())
