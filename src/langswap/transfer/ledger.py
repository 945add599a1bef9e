"""What each new token of an extended vocabulary saves and costs on a text: the ledger a pruning step reads.

An extended model reads a line with the extended tokenizer. The same model with the new tokens' columns left out of
its softmax reads it with the source tokenizer: for a transfer's output that is the source model exactly (an
extension keeps the source rows bit for bit), after training it is the trained model without its new tokens. Chunk
by chunk (`langswap.chunks`: the same bytes on both sides), the difference between the two readings' summed losses
is what the new tokens changed there:

- a chunk the extended tokenizer reads with new tokens: the whole difference goes to them, in equal shares
  (`saved`: positive where the new reading is cheaper);
- a chunk it reads with source tokens only: the difference (the probability the new columns took from the chunk's
  tokens, and what earlier new tokens did to the context) goes to every new token in proportion to the probability
  the model gave it at the positions predicting the chunk (`leaked`: negative where the chunk got dearer).

The shares add up to the whole difference on the text (`total`), so a token's `net` (saved + leaked, in nats) is, to
first order, what the text would lose without it; where the model gives the new tokens no probability at all on a
chunk read without them, that chunk's difference is counted in `unattributed` instead. Chunks that either side cannot
spell are left out, as are chunks beyond `max_length` tokens of a line on either side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from langswap.chunks import ChunkAligner
from langswap.errors import ConfigError
from langswap.progress import bar as progress_bar
from langswap.transfer.distill import frame_id


@dataclass
class Ledger:
    """Per new token (ids `first_new` .. `first_new + len(saved) - 1`): chunks it is read in, nats saved there, nats
    leaked elsewhere; and over the text: matched bytes, the total difference and the part no token took."""

    first_new: int
    occurrences: np.ndarray
    saved: np.ndarray
    leaked: np.ndarray
    bytes: int
    total: float
    unattributed: float

    @property
    def net(self) -> np.ndarray:
        """Nats each new token saves on the text, net of what it takes elsewhere (negative: it costs)."""
        return self.saved + self.leaked

    def losers(self) -> np.ndarray:
        """Ids of the new tokens whose net is below zero, the dearest first."""
        order = np.argsort(self.net, kind="stable")
        order = order[self.net[order] < 0]
        return order + self.first_new

    def bits_per_byte_change(self) -> float:
        """What the new tokens changed on the matched bytes, in bits per byte (negative: they saved)."""
        return -self.total / (math.log(2) * self.bytes) if self.bytes else 0.0


def _token_losses(model, ids: list[int], columns: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(each token's loss after the first, its softmax over the first `columns` columns, both float32 on the CPU)."""
    with torch.no_grad():
        inputs = torch.tensor([ids], device=model.device)
        logits = model(input_ids=inputs).logits[0, :-1, :columns].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        losses = -log_probs.gather(-1, inputs[0, 1:, None])[:, 0]
    return losses.cpu(), log_probs.cpu()


def new_token_ledger(model, source_tokenizer, target_tokenizer, lines: list[str], first_new: int,
                     max_length: int = 512, progress: bool = False) -> Ledger:
    """The ledger (module docstring) of the new tokens (ids from `first_new` to the extended tokenizer's last) of
    `model`, which reads `target_tokenizer`'s ids, on `lines`; `source_tokenizer` is the extension's source (every
    id below `first_new` the same token). Each line is read on its own after the tokenizers' frame token (bos, or eos
    where there is none)."""
    columns = len(target_tokenizer)
    source_columns = len(source_tokenizer)
    if not 0 < first_new < columns or source_columns > first_new:
        raise ConfigError(f"the new tokens start at id {first_new}, and the source tokenizer has {source_columns:,} "
                          f"tokens, the extended one {columns:,}: give the id after the source's last, below the "
                          "extended tokenizer's size.")
    if model.get_output_embeddings() is None or model.get_output_embeddings().weight.shape[0] < columns:
        raise ConfigError(f"the model has no output rows for all {columns:,} tokens of the extended tokenizer; "
                          "give the model the extension was transferred into.")
    count = columns - first_new
    ledger = Ledger(first_new, np.zeros(count, dtype=np.int64), np.zeros(count), np.zeros(count), 0, 0.0, 0.0)
    aligner = ChunkAligner(source_tokenizer, target_tokenizer)
    frames = frame_id(source_tokenizer), frame_id(target_tokenizer)
    bar = progress_bar(progress, len(lines), "ledger", "line")
    was_training = model.training
    model.eval()
    try:
        for text in aligner.align_batch([line for line in lines if line.strip()]):
            _read_line(model, text, frames, (source_columns, columns), max_length, ledger)
            if bar is not None:
                bar.update(1)
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()
    return ledger


def _read_line(model, text, frames: tuple, columns: tuple[int, int], max_length: int, ledger: Ledger) -> None:
    """Adds one aligned line's chunks to `ledger`."""
    source_frame, target_frame = frames
    source_ids = ([source_frame] if source_frame is not None else []) + text.source.ids.tolist()
    target_ids = ([target_frame] if target_frame is not None else []) + text.target.ids.tolist()
    shift = (int(source_frame is not None), int(target_frame is not None))
    source_ids, target_ids = source_ids[:max_length], target_ids[:max_length]
    if len(source_ids) < 2 or len(target_ids) < 2:
        return
    source_losses, _ = _token_losses(model, source_ids, columns[0])
    target_losses, target_log_probs = _token_losses(model, target_ids, columns[1])
    new_probs = target_log_probs[:, ledger.first_new:].exp()  # (positions, new tokens)
    starts = np.concatenate([[0], text.boundaries[:-1]])
    for k in range(len(text)):
        source_slice, target_slice = text.chunk(k)
        first = (source_slice.start + shift[0], target_slice.start + shift[1])
        last = (source_slice.stop + shift[0], target_slice.stop + shift[1])
        if text.unencodable[k] or first[0] < 1 or first[1] < 1 or last[0] > len(source_ids) \
                or last[1] > len(target_ids):
            continue
        # token i's loss is losses[i - 1] (it is predicted from position i - 1)
        source_cost = float(source_losses[first[0] - 1:last[0] - 1].sum())
        target_cost = float(target_losses[first[1] - 1:last[1] - 1].sum())
        difference = source_cost - target_cost
        ledger.total += difference
        ledger.bytes += int(text.boundaries[k] - starts[k])
        new = [token - ledger.first_new for token in target_ids[first[1]:last[1]] if token >= ledger.first_new]
        if new:
            for index in new:
                ledger.saved[index] += difference / len(new)
                ledger.occurrences[index] += 1
            continue
        weights = new_probs[first[1] - 1:last[1] - 1].sum(dim=0).double().numpy()
        mass = weights.sum()
        if mass > 0:
            ledger.leaked += difference * weights / mass
        else:
            ledger.unattributed += difference
