"""`clp`: CLP-Transfer (Ostendorff and Rehm, 2023).

Target tokens that the source vocabulary also has (the overlap) keep their source rows. Every other target token is
a combination of the overlapping tokens' source rows, each weighted by its cosine similarity to the token in the
embedding space of a helper model that already uses the target tokenizer (`helper_model`, e.g. a small model
trained on target text), the weights divided by their sum.

Read from the paper and its code (malteos/clp-transfer, `clp.py`): the overlap copied; cosine similarity of the
helper's input embeddings between each missing token and every overlapping token; weights = similarity / sum of the
similarities, over every overlapping token (`neighbors: 0`); the helper's tokenizer is the target tokenizer.
Decided here: the overlap is matched by canonical form (`langswap.tokens`; the code compares raw vocabulary strings,
which differ across tokenizer families); `neighbors` > 0 keeps only each token's most similar overlapping tokens
(the paper's weights over all of them take V_new x V_overlap entries, which a mapping of a 50k vocabulary cannot
hold; a transfer that would need more than `MAX_ENTRIES` is refused with that advice); a row whose similarities
sum to no more than `MIN_TOTAL`, or whose weights have a Euclidean norm above `MAX_WEIGHT_NORM` (1, that of
copying one row: the similarities nearly cancel and the weights blow up), is left to the fallback, where the code
divides anyway;
a row whose weights are all non-negative is a `mixed` row, one with a negative weight a `combined` one; the
similarities the weights are made of are float64 (a sum near zero amplifies float32 rounding); special tokens are
copied by role and are no overlapping tokens, where the code (and langsfer) count the shared `<|endoftext|>` as one.

Memory: beside the source and new matrices, the helper rows of the N new and M overlapping tokens in float32 and in
float64 ((N + M) x D_h x 12 bytes, N + M <= V_t: 2.9 GiB at 128k with a helper of hidden size D_h = 2,048, as
Llama-3.2-1B). With `neighbors: 0`, the dense N x M similarities, weights and source ids (8 bytes each), held about
seven times over while the mapping's rows are made; a transfer needing more than `MAX_ENTRIES` of them (2^27: 1 GiB
per copy, about 7 GiB at peak) is refused, as one at 128k is unless the overlap is tiny (M <= 1,000 at N = 127,000).
With `neighbors` k > 0: the similarity step's copies and one block (about 2 GiB at 128k, D_h = 2,048), and the
float64 helper rows of the new tokens' k neighbours, gathered in row blocks of `GATHER_BYTES` (256 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from langswap.errors import ConfigError
from langswap.kernels import topk_cosine, unit_rows
from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method
from langswap.methods.overlap import copied_sources, copy_exact_matches
from langswap.progress import bar as progress_bar

MAX_ENTRIES = 2 ** 27  # mapping entries (12 bytes each: 1.5 GiB) a transfer may need
GATHER_BYTES = 256 * 2**20  # float64 neighbour rows gathered at a time for the weights
MIN_TOTAL = 1e-3  # a row's similarities must sum to more than this
MAX_WEIGHT_NORM = 1.0  # and its weights' Euclidean norm must be at most that of copying one row


@dataclass(frozen=True, kw_only=True)
class ClpConfig(MethodConfig):
    """CLP-Transfer (Ostendorff and Rehm, 2023)."""

    neighbors: int = field(default=0, metadata={
        "help": "Most similar overlapping tokens combined into each new token; 0: every overlapping token (the "
                "paper), possible only for small vocabularies."})

    def __post_init__(self):
        if self.neighbors < 0:
            raise ConfigError(f"method.neighbors is {self.neighbors}; give 0 (every overlapping token) or more.")


def similarity_weights(similarities: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """CLP's weights of each row of similarities (N, k): similarity / row sum, and which rows may use them: a sum
    above MIN_TOTAL, and weights of Euclidean norm at most MAX_WEIGHT_NORM. Where the similarities nearly cancel,
    dividing by their sum amplifies the sources: mixed from source rows of equal length in unrelated directions, a
    row is longer than any of them by about the weights' norm. On a weakly trained Swahili helper (top 100), 44 of
    15,387 rows had a norm above 1, some rows came out 150 times as long as a typical row, and bits per byte rose
    to 145."""
    totals = similarities.sum(dim=1)
    positive = totals > MIN_TOTAL
    weights = similarities / torch.where(positive, totals, torch.ones_like(totals))[:, None]
    usable = positive & (torch.linalg.vector_norm(weights, dim=1) <= MAX_WEIGHT_NORM)
    return weights, usable


@register_method("clp", ClpConfig, requires=("helper_model",))
def clp(inputs: TransferInputs, config: ClpConfig, progress: bool = False) -> TokenMapping:
    """Copy overlapping tokens; combine the rest from them by cosine similarity in a helper model's space (CLP)."""
    mapping = TokenMapping.empty(len(inputs.target))
    copy_exact_matches(mapping, inputs)
    helper = inputs.resource("helper_model").embeddings
    overlap = mapping.rows_of(Kind.COPIED)
    new = np.array([row for row in np.flatnonzero(mapping.kinds == Kind.UNPLACED)
                    if not inputs.target[int(row)].special], dtype=np.int64)
    if len(overlap) == 0 or len(new) == 0:
        return mapping
    width = len(overlap) if config.neighbors == 0 else min(config.neighbors, len(overlap))
    if len(new) * width > MAX_ENTRIES:
        raise ConfigError(
            f"clp over every overlapping token needs {len(new):,} x {width:,} = {len(new) * width:,} weights, more "
            f"than a mapping holds ({MAX_ENTRIES:,}); set method.neighbors (e.g. 100) to keep each new token's most "
            "similar overlapping tokens.")
    overlap_sources = copied_sources(mapping, overlap)
    queries, keys = helper[torch.from_numpy(new)], helper[torch.from_numpy(overlap)]
    bar = progress_bar(progress, len(new), "clp", "token")
    # the weights divide by the similarities' sum, which may be small: they are computed in float64 (in float32 a
    # row summing to 0.003 over 500 anchors was off by 0.2)
    unit_queries, unit_keys = unit_rows(queries.to(torch.float64)), unit_rows(keys.to(torch.float64))
    if config.neighbors == 0:
        similarities = unit_queries @ unit_keys.T  # (new, overlap): bounded by MAX_ENTRIES above
        indices = torch.arange(len(overlap)).expand(len(new), -1)
    else:
        _, indices = topk_cosine(queries, keys, width, progress=bar.update if bar is not None else None,
                                 device=inputs.device)
        similarities = torch.empty(indices.shape, dtype=torch.float64)
        step = max(1, GATHER_BYTES // (8 * width * unit_keys.shape[1]))  # the gathered neighbours stay under it
        for start in range(0, len(new), step):
            similarities[start:start + step] = torch.einsum(
                "nd,nkd->nk", unit_queries[start:start + step], unit_keys[indices[start:start + step]])
    if bar is not None:
        bar.close()
    weights, usable = similarity_weights(similarities)
    sources = overlap_sources[indices.numpy()]
    convex = (weights >= 0).all(dim=1)
    for kind, rows in ((Kind.MIXED, usable & convex), (Kind.COMBINED, usable & ~convex)):
        chosen = rows.numpy()
        if chosen.any():
            mapping.set_rows(new[chosen], kind, sources[chosen], weights[chosen].numpy())
    return mapping
