"""Shared math for the methods: blocked cosine top-k, softmax weights, blocked mixing of rows.

Nothing here builds a dense (V_tgt, V_src) matrix: queries are processed in row blocks sized so that one block of
similarities stays under `block_bytes`, and only the top-k of each row is kept. Everything computes in float32.
"""

from __future__ import annotations

import numpy as np
import torch

DEFAULT_BLOCK_BYTES = 256 * 2**20


def _as_tensor(matrix, dtype: torch.dtype | None = torch.float32) -> torch.Tensor:
    """A torch view of `matrix` (no copy where possible) in `dtype`, or in its own dtype for None."""
    tensor = matrix.detach() if isinstance(matrix, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(matrix))
    return tensor if dtype is None else tensor.to(dtype)


def unit_rows(matrix: torch.Tensor) -> torch.Tensor:
    """Rows scaled to unit length; zero rows stay zero."""
    return matrix / matrix.norm(dim=1, keepdim=True).clamp_min(1e-12)


def block_rows_for(columns: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> int:
    return max(1, block_bytes // (4 * max(columns, 1)))


CHUNK = 128  # columns per chunk in the two-stage top-k
RESCORE = 8  # extra float32 candidates re-scored in float64 at a near-tie
TIE_GAP = 1e-5  # float32 cosines closer than this may be in the wrong order


def topk_cosine(queries, keys, k: int, *, block_bytes: int = DEFAULT_BLOCK_BYTES, progress=None,
                exclude_self: bool = False, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine top-k of each query row among the key rows.

    queries: (N, D), keys: (M, D), numpy or torch. Returns (similarities (N, k) float32, indices (N, k) int64),
    best first (exact ties in any order, as torch.topk). Zero rows have similarity 0 to everything. `exclude_self`
    drops the diagonal (queries is keys). `progress` is an optional callable taking the number of rows finished in
    each block.

    Each block of similarities is written into one reused buffer, and its top-k is found in two stages: the maximum
    of every chunk of CHUNK columns, the k chunks with the largest maxima (they hold every one of the row's k largest
    values: a chunk holding one of them has at most k - 1 chunks with a larger maximum), then the top-k among those
    k * CHUNK columns. Same values as a top-k over the whole row, at a fraction of its cost for large M. That search
    keeps k + RESCORE candidates in float32; where the k-th and the (k+1)-th are within TIE_GAP, their cosines are
    recomputed in float64, which picks the final k, so near-ties fall as in a float64 computation (the `wechsel`
    package's). Elsewhere the values are float32 cosines.

    `device` (a torch device, default the CPU): where the keys and each block of similarities live and the search
    runs; the results are returned on the CPU, and the float64 near-tie re-scoring runs there.
    """
    original_queries, original_keys = _as_tensor(queries, None), _as_tensor(keys, None)
    queries, keys = unit_rows(original_queries.to(torch.float32)), unit_rows(original_keys.to(torch.float32))
    n_queries, dim = queries.shape
    n_keys, key_dim = keys.shape
    assert dim == key_dim, f"query dim {dim} != key dim {key_dim}"
    final_k = max(0, min(k, n_keys - (1 if exclude_self else 0)))
    # float32 finds k + RESCORE candidates; where the k-th and the next are closer than float32 can tell apart,
    # float64 picks the best k among them, so near-ties are decided as a float64 computation decides them
    k = max(0, min(final_k + RESCORE, n_keys - (1 if exclude_self else 0)))
    values = torch.empty((n_queries, final_k), dtype=torch.float32)
    indices = torch.empty((n_queries, final_k), dtype=torch.int64)
    if n_queries == 0 or final_k == 0:
        return values, indices
    chunks = -(-n_keys // CHUNK)
    two_stage = chunks >= 4 * k
    width = chunks * CHUNK if two_stage else n_keys
    device = torch.device("cpu") if device is None else torch.device(device)
    keys_t = torch.zeros((dim, width), dtype=torch.float32, device=device)  # padded to whole chunks with zeros
    keys_t[:, :n_keys] = keys.T.to(device)
    step = min(block_rows_for(width, block_bytes), n_queries)
    buffer = torch.empty((step, width), dtype=torch.float32, device=device)
    row_ids = torch.arange(step, device=device)[:, None]
    for start in range(0, n_queries, step):
        stop = min(start + step, n_queries)
        block = buffer[:stop - start]
        torch.mm(queries[start:stop].to(device), keys_t, out=block)
        if exclude_self:
            rows = torch.arange(start, stop, device=device)
            block[rows - start, rows] = -float("inf")
        if two_stage:
            block[:, n_keys:] = -float("inf")
            chunked = block.view(stop - start, chunks, CHUNK)
            best_chunks = torch.topk(chunked.amax(dim=2), k, dim=1, sorted=False).indices  # (b, k)
            candidates = chunked[row_ids[:stop - start], best_chunks].view(stop - start, k * CHUNK)
            top = torch.topk(candidates, k, dim=1, largest=True, sorted=True)
            chunk_of = torch.gather(best_chunks, 1, top.indices // CHUNK)
            wide, wide_values = chunk_of * CHUNK + top.indices % CHUNK, top.values
        else:
            top = torch.topk(block, k, dim=1, largest=True, sorted=True)
            wide, wide_values = top.indices, top.values
        wide, wide_values = wide.cpu(), wide_values.cpu()
        values[start:stop] = wide_values[:, :final_k]
        indices[start:stop] = wide[:, :final_k]
        if k > final_k:
            near_ties = torch.nonzero(wide_values[:, final_k - 1] - wide_values[:, final_k] <= TIE_GAP).flatten()
            # in chunks whose gathered float64 keys (rows x k x dim) stay under block_bytes: with nearly parallel
            # vectors every row is a near-tie, and one gather of all of them took gigabytes
            chunk = max(1, block_bytes // (8 * k * dim))
            for first in range(0, len(near_ties), chunk):
                near_tie = near_ties[first:first + chunk]
                exact = torch.einsum("bd,bwd->bw", unit_rows(original_queries[start + near_tie].double()),
                                     unit_rows(original_keys[wide[near_tie]].double().flatten(0, 1))
                                     .view(len(near_tie), k, dim))
                best = torch.topk(exact, final_k, dim=1, largest=True, sorted=True)
                values[start + near_tie] = best.values.to(torch.float32)
                indices[start + near_tie] = torch.gather(wide[near_tie], 1, best.indices)
        if progress is not None:
            progress(stop - start)
    return values, indices


def softmax_weights(similarities: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(similarity / temperature) along each row."""
    return torch.softmax(similarities / temperature, dim=1)


def mix_rows(matrix: torch.Tensor, sources: torch.Tensor, weights: torch.Tensor,
             block_bytes: int = DEFAULT_BLOCK_BYTES) -> torch.Tensor:
    """out[i] = sum_j weights[i, j] * matrix[sources[i, j]], skipping sources < 0.

    matrix: (V_s, d) or (V_s,) for a bias; sources: (N, w) int64; weights: (N, w). Returns float32 (N, d) or (N,).
    The padded-table form of `mix_csr_rows`: the padding is dropped and the rows are mixed as compressed rows.
    """
    sources = torch.as_tensor(sources, dtype=torch.int64)
    weights = torch.as_tensor(weights, dtype=torch.float32)
    valid = sources >= 0
    indptr = torch.zeros(sources.shape[0] + 1, dtype=torch.int64)
    torch.cumsum(valid.sum(dim=1), dim=0, out=indptr[1:])
    return mix_csr_rows(matrix, indptr, sources[valid], weights[valid], block_bytes)


def mix_csr_rows(matrix: torch.Tensor, indptr, indices, weights, block_bytes: int = DEFAULT_BLOCK_BYTES,
                 dtype: torch.dtype = torch.float32, rows: int | None = None) -> torch.Tensor:
    """out[i] = sum over j in indptr[i]:indptr[i + 1] of weights[j] * matrix[indices[j]]: rows compressed by row.

    matrix: (V_s, d) or (V_s,) for a bias; indptr: (N + 1,) int64 from 0; indices: (nnz,) int64 rows of `matrix`;
    weights: (nnz,). Numpy or torch. Returns (N, d) or (N,) in `dtype`, or `rows` (at least N) rows of which the
    last rows - N are zero for the caller to fill; a row without entries is zero. Each block of
    rows is one weighted-sum `embedding_bag` over at most block_bytes / (4 d) entries (more only where one row holds
    more), so no (N, longest row) table and no (entries, d) gather is built: one row of 500 sources costs 500
    entries. A row's terms are added in their order, as a padded table's row without its padding. Sums are float32
    whatever the dtype of `matrix`: a table in another dtype (bfloat16) is not converted whole; each block gathers
    its rows in float32 (at most block_bytes), which gives the sums of the converted table bit for bit.
    """
    vector = matrix.dim() == 1
    table = _as_tensor(matrix if not vector else matrix[:, None], None)
    if not table.is_floating_point() or table.dtype == torch.float64:
        table = table.to(torch.float32)
    indptr = _as_tensor(indptr, torch.int64)
    indices = _as_tensor(indices, torch.int64)
    weights = _as_tensor(weights, torch.float32)
    n_rows = len(indptr) - 1
    total = n_rows if rows is None else rows
    assert total >= n_rows, (total, n_rows)
    assert indptr[0] == 0 and len(indices) == len(weights) == indptr[-1], "indptr, indices and weights disagree"
    # a block's entries, and its (rows, d) float32 result, stay under block_bytes
    per_block = max(1, block_bytes // (4 * max(table.shape[1], 1)))
    out = None
    start = 0
    while start < n_rows:
        # the block ends at the last row whose entries still fit, or after one row that alone holds more
        stop = int(torch.searchsorted(indptr, indptr[start] + per_block, right=True)) - 1
        stop = min(max(stop, start + 1), n_rows, start + per_block)
        first, last = int(indptr[start]), int(indptr[stop])
        if last > first:
            if table.dtype == torch.float32:
                bag_indices, bag_table = indices[first:last], table
            else:  # this block's rows in float32
                bag_indices = torch.arange(last - first)
                bag_table = table.index_select(0, indices[first:last]).to(torch.float32)
            mixed = torch.nn.functional.embedding_bag(
                bag_indices, bag_table, indptr[start:stop] - first, per_sample_weights=weights[first:last],
                mode="sum")
            if start == 0 and stop == n_rows == total and dtype == torch.float32:
                out = mixed  # one block: its result is the output, not a copy of it
            else:
                if out is None:
                    out = torch.zeros((total, table.shape[1]), dtype=dtype)
                out[start:stop] = mixed
        start = stop
    if out is None:
        out = torch.zeros((total, table.shape[1]), dtype=dtype)
    return out[:, 0] if vector else out


def hidden_state_distance(student, teacher, student_at: torch.Tensor, teacher_at: torch.Tensor,
                          layers: tuple[int, ...], distance: str) -> torch.Tensor:
    """The distance between the student's and the teacher's hidden states (tuples of (B, T, d) and (B, S, d), as
    `output_hidden_states` gives them) at the matched flat positions `student_at` (into B*T) and `teacher_at` (into
    B*S), a float32 scalar averaged over the positions and the `layers` (indices into the tuples); 0 where nothing
    is matched. "mse": squared error divided channel by channel by the teacher's mean square over the matched
    positions; "cosine": 1 - cosine similarity."""
    total = student[-1].new_zeros((), dtype=torch.float32)
    if not len(student_at):
        return total
    for layer in layers:
        width = student[layer].shape[-1]
        wanted = teacher[layer].reshape(-1, width)[teacher_at].to(torch.float32)
        got = student[layer].reshape(-1, width)[student_at].to(torch.float32)
        if distance == "mse":
            scale = wanted.pow(2).mean(0)
            scale = scale + 1e-6 * scale.mean() + 1e-12  # a silent channel must not divide by zero
            total = total + ((got - wanted).pow(2) / scale).mean()
        else:
            total = total + (1 - torch.nn.functional.cosine_similarity(got, wanted, dim=-1, eps=1e-8)).mean()
    return total / len(layers)
