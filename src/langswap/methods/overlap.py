"""`overlap`: rows of tokens whose canonical forms match are copied (de Vries and Nissim, 2021); the rest fall back.

Canonical forms come from `langswap.tokens`, so `ĠHaus` (byte-level BPE), `▁Haus` (SentencePiece) and `Haus`
(WordPiece, word start) are the same token, while `##haus` and `Ġhaus` are not.

Memory: beside the source and new matrices, the mapping alone: per target token a kind, a row pointer and one copied
entry (21 bytes: 2.6 MiB at V_t = 128,256), and 12 bytes per source piece of each token the `subword` fallback places.
No similarity is computed, so nothing is V_t x V_s or V_t x d.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method


@dataclass(frozen=True, kw_only=True)
class OverlapConfig(MethodConfig):
    """Copy the rows of exactly matching tokens; the fallback places the rest."""


def copied_sources(mapping: TokenMapping, rows) -> np.ndarray:
    """The source id each of the copied target `rows` was copied from."""
    return np.array([mapping.row(int(row))[0][0] for row in rows], dtype=np.int64)


def copy_exact_matches(mapping: TokenMapping, inputs: TransferInputs, only=None) -> int:
    """Copy the source row of every target token with an identical canonical form (of those `only(token)` keeps,
    when given); returns how many."""
    rows, sources = [], []
    for token in inputs.target.tokens:
        if only is not None and not only(token):
            continue
        source_id = inputs.source.lookup(token, inputs.target.family)
        if source_id is not None:
            rows.append(token.id)
            sources.append(source_id)
    if rows:
        mapping.copy_rows(np.asarray(rows), np.asarray(sources), Kind.COPIED)
    return len(rows)


@register_method("overlap", OverlapConfig)
def overlap(inputs: TransferInputs, config: OverlapConfig, progress: bool = False) -> TokenMapping:
    """Copy rows of tokens shared by both vocabularies (exact canonical match); fall back elsewhere."""
    mapping = TokenMapping.empty(len(inputs.target))
    copy_exact_matches(mapping, inputs)
    return mapping
