"""Calibration's move of the output rows, kept beside a transferred model so that training can take it off.

Frequency calibration (`langswap.transfer.calibrate`) adds to each output row a logit along one direction of the
head's input (or to the output bias), round by round. The move is small to keep (a float per row and round, one
direction per round, the counts the rows were calibrated on), and taking it off is exact up to the model's dtype:
`take_off` with no count gives the uncalibrated transfer's rows; with `below_count` it takes off only the lowering
of rows whose token was counted fewer times, which is the transfer calibrated with `lower_min_count` at that count
(one round). `langswap train`'s `calibration` option applies it before the first update.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from langswap.errors import ConfigError

MOVE_FILE = "calibration-move.safetensors"  # beside a calibrated transfer's model: what calibration added


@dataclass
class CalibrationMove:
    """What calibration added to the output rows, so that `langswap train` can take all of it off or part of it
    (`take_off`): per round, a logit per row (`logits[r]`, zero for a row that did not move) along one direction of
    the head's input (`directions[r]`: h̄ / |h̄|^2), or through the output bias (`directions[r]` None); `counts`: each
    row's token count in the counted lines; `tied`: the input rows moved with the head."""

    logits: list[np.ndarray]
    directions: list[np.ndarray | None]
    counts: np.ndarray
    tied: bool

    def rows(self, index) -> "CalibrationMove":
        """The move of the rows `index` (old row ids, in their new order), for a model whose rows were taken as
        `index`: a row beyond the move's rows (padding) did not move and was counted 0 times."""
        index = np.asarray(index, dtype=np.int64)
        inside = index < len(self.counts)

        def taken(values: np.ndarray) -> np.ndarray:
            return np.where(inside, values[np.minimum(index, len(values) - 1)], 0).astype(values.dtype)

        return CalibrationMove([taken(logits) for logits in self.logits], list(self.directions), taken(self.counts),
                               self.tied)

    def save(self, path) -> None:
        from safetensors.numpy import save_file

        tensors = {"counts": np.ascontiguousarray(self.counts, dtype=np.int64)}
        for index, (logits, direction) in enumerate(zip(self.logits, self.directions)):
            tensors[f"logits.{index}"] = np.ascontiguousarray(logits, dtype=np.float32)
            if direction is not None:
                tensors[f"direction.{index}"] = np.ascontiguousarray(direction, dtype=np.float32)
        save_file(tensors, str(path), metadata={"rounds": str(len(self.logits)), "tied": str(self.tied).lower()})

    @classmethod
    def load(cls, path) -> "CalibrationMove":
        from safetensors import safe_open

        with safe_open(str(path), framework="np") as handle:
            metadata = handle.metadata() or {}
            rounds = int(metadata.get("rounds", "0"))
            keys = set(handle.keys())
            logits = [handle.get_tensor(f"logits.{index}") for index in range(rounds)]
            directions = [handle.get_tensor(f"direction.{index}") if f"direction.{index}" in keys else None
                          for index in range(rounds)]
            return cls(logits, directions, handle.get_tensor("counts"), metadata.get("tied") == "true")


def take_off(model, move: CalibrationMove, below_count: int | None = None, kept_rows=None) -> int:
    """Take calibration's move off `model`'s output rows (a tied head's input rows with them): all of it, or with
    `below_count` only the lowering of rows whose token was counted fewer than that many times (what
    `lower_min_count` would have spared); the rows `kept_rows` (ids) keep theirs. Returns the rows changed. The model
    must be the calibrated transfer, with its vocabulary as it was then."""
    head = model.get_output_embeddings()
    weight, bias = head.weight, getattr(head, "bias", None)
    size = weight.shape[0]
    if len(move.counts) > size:
        raise ConfigError(f"the calibration move is for {len(move.counts):,} rows, the model has {size:,}: it belongs to "
                          "another model; train from the transfer's folder as it was written.")
    changed = np.zeros(size, dtype=bool)
    rare = np.zeros(size, dtype=bool)
    if below_count is not None:
        rare[:len(move.counts)] = move.counts < below_count
    kept = np.zeros(size, dtype=bool)
    if kept_rows is not None and len(kept_rows):
        ids = np.asarray(kept_rows, dtype=np.int64)
        kept[ids[ids < size]] = True  # a head cut below the tokenizer's size has no row for the others
    with torch.no_grad():
        for logits, direction in zip(move.logits, move.directions):
            delta = np.zeros(size, dtype=np.float32)
            delta[:len(logits)] = logits
            if below_count is not None:
                delta = np.where(rare, np.minimum(delta, 0.0), 0.0).astype(np.float32)
            delta[kept] = 0.0
            changed |= delta != 0
            amount = torch.from_numpy(delta).to(weight.device, torch.float32)
            if direction is None:
                if bias is None:
                    raise ConfigError("the calibration move went through an output bias the model does not have.")
                bias -= amount.to(bias.dtype)
            else:
                along = torch.from_numpy(np.asarray(direction, dtype=np.float32)).to(weight.device)
                weight -= (amount[:, None] * along[None, :]).to(weight.dtype)
    return int(changed.sum())
