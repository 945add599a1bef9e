"""`fvt`: Fast Vocabulary Transfer (Gee, Zugarini, Rigutini and Torroni, EMNLP 2022 industry track).

A target token whose canonical form the source vocabulary has takes that row; every other token is split by the
source tokenizer (its surface text, as a word start or a continuation, as `Vocabulary.encode_surface` spells it) and
takes the mean of the pieces' rows. `weighting: length` weights each piece by its length in bytes instead, so a
piece that spells most of the token counts most.

Read from the paper: the copy of shared tokens and the mean of the source tokenisation's rows. Decided here: shared
tokens are matched by canonical form (so `ĠHaus`, `▁Haus` and `Haus` are one token across families), the split keeps
the word-start role of the token, special pieces are dropped, the length variant weights by UTF-8 bytes (a piece that
is only a word-start marker counts 1), and a token the source tokenizer cannot spell (partial UTF-8) is left to the
shared fallback. With `weighting: mean` the method is `overlap` with the `subword` fallback, under the paper's name.

Memory: beside the source and new matrices, each token's source pieces, as Python lists while the source tokenizer
splits them and then as mapping entries of 12 bytes (an int64 id and a float32 weight): O(V_t x pieces), tens of MiB
at V_t = 128,256. No similarity is computed; the shared finishing step mixes the pieces' rows in row blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method, subword_sources
from langswap.methods.overlap import copy_exact_matches

WEIGHTINGS = ("mean", "length")


@dataclass(frozen=True, kw_only=True)
class FvtConfig(MethodConfig):
    """Fast Vocabulary Transfer (Gee et al., 2022)."""

    weighting: Literal["mean", "length"] = field(
        default="mean", metadata={"help": "mean: every source piece alike (the paper); length: by the piece's "
                                          "length in bytes.", "choices": WEIGHTINGS})


def piece_weights(inputs: TransferInputs, pieces: list[list[int]], weighting: str) -> np.ndarray:
    """The weights of every row's pieces, flattened row after row: 1/n each, or each piece's share of the bytes."""
    if weighting == "mean":
        return np.concatenate([np.full(len(ids), 1.0 / len(ids)) for ids in pieces])
    out = []
    for ids in pieces:
        lengths = np.array([max(len(inputs.source[i].raw), 1) for i in ids], dtype=np.float64)
        out.append(lengths / lengths.sum())
    return np.concatenate(out)


@register_method("fvt", FvtConfig)
def fvt(inputs: TransferInputs, config: FvtConfig, progress: bool = False) -> TokenMapping:
    """Copy shared tokens; every other token is the mean of its pieces in the source tokenizer (FVT)."""
    mapping = TokenMapping.empty(len(inputs.target))
    copy_exact_matches(mapping, inputs)
    rows = mapping.rows_of(Kind.UNPLACED)
    placed, pieces = subword_sources(inputs, rows)
    if placed:
        lengths = np.array([len(ids) for ids in pieces], dtype=np.int64)
        sources = np.fromiter((i for ids in pieces for i in ids), dtype=np.int64, count=int(lengths.sum()))
        mapping.set_ragged_rows(np.asarray(placed), Kind.SUBWORD, lengths, sources,
                                piece_weights(inputs, pieces, config.weighting))
    return mapping
