"""`focus`: FOCUS (Dobler and de Melo, EMNLP 2023).

Target tokens that the source vocabulary also has (the overlap) keep their source rows. Every other target token is a
sparsemax-weighted mix of the source rows of overlapping tokens, weighted by how similar the two tokens are in an
auxiliary space of the target language: fastText vectors trained on target text split by the target tokenizer, one
fastText word per token (the `token_vectors` resource, `langswap.resources.token_vectors`). Sparsemax gives most
tokens a handful of anchors and no weight to the rest.

Read from the paper and the deepfocus package (1.0.1): the overlap copied; token-level fastText on target text
tokenised by the target tokenizer (CBOW, dim 100, 3 epochs, minCount 10, 10 negatives: the package's defaults);
overlapping tokens without a vector of their own (rarer than minCount) are copied but not used as anchors; a new
token's weights are sparsemax over its cosine similarities to all usable overlapping tokens (no temperature), as
computed by the `entmax` package; tokens without a vector of their own are not mixed.
Decided here: the overlap is matched by canonical form (`langswap.tokens`, so `ĠHaus`, `▁Haus` and `Haus` match,
where deepfocus compares its own canonical strings); tokens without a vector get the shared fallback (`subword` by
default) instead of deepfocus's random rows; the similarities are computed in row blocks with a top-k that widens
until it holds each row's whole sparsemax support, so the weights equal sparsemax over all anchors without a dense
V_t x V_overlap matrix.

Memory: beside the source and new matrices, the fastText vectors of the M anchors and the N new tokens (float32
(M + N) x D: 49 MiB at 128k with D = 100), their working copies in the similarity step (under 150 MiB), one block of
similarities (256 MiB; 768 MiB while near-ties are re-scored in float64), the first top-k lists, N x
`first_candidates` x 12 bytes (94 MiB at 64 and N = 128,256), and each row's support, 12 bytes per entry, held a few
times over while the mapping's rows are made: about 0.6 GiB at 128k. A row whose support fills its top-k is widened
alone (fourfold, until the support fits), so a wide support costs its own entries, never a table as wide for every
row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from langswap.errors import ConfigError
from langswap.kernels import topk_cosine
from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method
from langswap.methods.overlap import copied_sources, copy_exact_matches
from langswap.progress import bar as progress_bar


@dataclass(frozen=True, kw_only=True)
class FocusConfig(MethodConfig):
    """FOCUS (Dobler and de Melo, 2023)."""

    first_candidates: int = field(default=64, metadata={
        "help": "Anchors whose similarities are found first for each token; rows whose sparsemax support fills "
                "them are computed again with four times as many, so the weights do not depend on it (a speed "
                "setting)."})

    def __post_init__(self):
        if self.first_candidates < 2:
            raise ConfigError(f"method.first_candidates is {self.first_candidates}; it must be at least 2.")


def sparsemax_rows(similarities: torch.Tensor) -> torch.Tensor:
    """sparsemax of each row (N, k) of similarities, sorted best first, by the `entmax` package."""
    try:
        from entmax import sparsemax
    except ImportError as error:  # a declared dependency; a broken environment gets the fix
        raise ImportError("FOCUS needs the entmax package: pip install entmax") from error
    return sparsemax(similarities.to(torch.float32), dim=1)


def sparse_anchor_weights(queries: np.ndarray, anchors: np.ndarray, first_candidates: int,
                          progress=None, device=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each query row (N, D), sparsemax over its cosines to all anchor rows (M, D), kept as its support.

    Returns the supports compressed by row: (lengths (N,), anchor indices and weights (sum of lengths,) each), each
    row's entries best first. The top-k starts at `first_candidates` and widens fourfold for the rows whose support
    fills it: a sorted row's sparsemax support is its largest entries up to the last j with
    1 + j z_j > z_1 + ... + z_j, and that condition fails for every j after the first that fails, so a support
    shorter than k is the support over all anchors. A widened row keeps its own width: one wide support costs its
    own entries, not a wider table for every row."""
    n_queries = len(queries)
    k = min(first_candidates, len(anchors))
    similarities, indices = topk_cosine(queries, anchors, k, progress=progress, device=device)
    weights = sparsemax_rows(similarities)
    rows = {}  # query -> (indices, weights) of the rows widened beyond k
    full = (weights[:, -1] > 0).nonzero().flatten() if k < len(anchors) else torch.zeros(0, dtype=torch.int64)
    wide = k
    while len(full):
        wide = min(4 * wide, len(anchors))
        wide_similarities, wide_indices = topk_cosine(queries[full.numpy()], anchors, wide, device=device)
        wide_weights = sparsemax_rows(wide_similarities)
        for position, query in enumerate(full.tolist()):
            rows[query] = (wide_indices[position], wide_weights[position])
        full = full[wide_weights[:, -1] > 0] if wide < len(anchors) else full[:0]
    support = (weights > 0).numpy()
    lengths = support.sum(axis=1)
    flat_indices, flat_weights = indices.numpy()[support], weights.numpy()[support]
    if rows:  # splice the widened rows in, in row order
        parts_indices, parts_weights, starts = [], [], np.concatenate([[0], np.cumsum(lengths)])
        previous = 0
        for query in sorted(rows):
            row_indices, row_weights = rows[query]
            keep = (row_weights > 0).numpy()
            parts_indices += [flat_indices[starts[previous]:starts[query]], row_indices.numpy()[keep]]
            parts_weights += [flat_weights[starts[previous]:starts[query]], row_weights.numpy()[keep]]
            lengths[query] = int(keep.sum())
            previous = query + 1
        parts_indices.append(flat_indices[starts[previous]:])
        parts_weights.append(flat_weights[starts[previous]:])
        flat_indices, flat_weights = np.concatenate(parts_indices), np.concatenate(parts_weights)
    assert len(lengths) == n_queries and lengths.sum() == len(flat_indices) == len(flat_weights)
    return lengths.astype(np.int64), flat_indices.astype(np.int64), flat_weights.astype(np.float32)


@register_method("focus", FocusConfig, requires=("token_vectors",))
def focus(inputs: TransferInputs, config: FocusConfig, progress: bool = False) -> TokenMapping:
    """Copy overlapping tokens; mix the rest from them, sparsemax over similarity in token-level fastText (FOCUS)."""
    mapping = TokenMapping.empty(len(inputs.target))
    copy_exact_matches(mapping, inputs)
    resource = inputs.resource("token_vectors")
    vectors, words = resource.vectors, resource.words
    known = np.array([bool(word) and word in vectors for word in words[:len(inputs.target)]]
                     + [False] * max(0, len(inputs.target) - len(words)))
    copied = mapping.rows_of(Kind.COPIED)
    anchors = copied[known[copied]]
    new = np.flatnonzero((mapping.kinds == Kind.UNPLACED) & known)
    new = np.array([row for row in new if not inputs.target[int(row)].special], dtype=np.int64)
    if len(anchors) == 0 or len(new) == 0:
        return mapping
    anchor_vectors = vectors.vectors([words[row] for row in anchors])
    new_vectors = vectors.vectors([words[row] for row in new])
    anchor_sources = copied_sources(mapping, anchors)
    bar = progress_bar(progress, len(new), "focus anchors", "token")
    lengths, indices, weights = sparse_anchor_weights(new_vectors, anchor_vectors, config.first_candidates,
                                                      progress=bar.update if bar is not None else None,
                                                      device=inputs.device)
    if bar is not None:
        bar.close()
    mapping.set_ragged_rows(new, Kind.MIXED, lengths, anchor_sources[indices], weights)
    return mapping
