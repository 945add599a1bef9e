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
