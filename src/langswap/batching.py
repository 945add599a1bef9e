"""Batches of sequences of different lengths, right-padded: the one padded-batch builder every evaluation uses."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def right_pad(rows: Sequence[Sequence[int] | torch.Tensor], value: int | bool,
              dtype: torch.dtype = torch.long) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) tensor of `rows`, each left-aligned and filled with `value` up to the longest, L; and its (B, L)
    attention mask, 1 where a row has a value of its own."""
    longest = max((len(row) for row in rows), default=0)
    batch = torch.full((len(rows), longest), value, dtype=dtype)
    attention = torch.zeros((len(rows), longest), dtype=torch.long)
    for index, row in enumerate(rows):
        batch[index, :len(row)] = torch.as_tensor(row, dtype=dtype)
        attention[index, :len(row)] = 1
    return batch, attention


def length_batches(sizes: list[int], budget: int, max_rows: int | None = None) -> list[tuple[int, int]]:
    """(start, stop) spans over rows sorted by ascending size: each span grows while its row count times the size of
    its last (largest) row stays within `budget` (and within `max_rows`); a row alone is always a span."""
    spans, start = [], 0
    while start < len(sizes):
        stop = start + 1
        while (stop < len(sizes) and (max_rows is None or stop - start < max_rows)
               and (stop - start + 1) * sizes[stop] <= budget):
            stop += 1
        spans.append((start, stop))
        start = stop
    return spans
