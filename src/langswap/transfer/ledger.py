"""What each new token of an extended vocabulary saves and costs on a text: the ledger a pruning step reads.

An extended model reads a line with the extended tokenizer. The same model with the new tokens' columns left out of
its softmax reads it with the source tokenizer: the model with the source rows as they are, which for a transfer's
output is the source model exactly unless the expected-count fit moved source rows too
(`calibration.count_fit_source_rows`), and after training is the trained model without its new tokens. Either way it
is what the model would read with a token taken out, source rows kept (as `langswap prune` keeps them), so a token's
share is its worth to this model, not to the source model; `bits_per_byte_change` is against that reading. Chunk
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
spell are left out, as are chunks beyond `max_length` tokens of a line on either side, and a line's first chunk
where a tokenizer has neither bos nor eos to read the line after (its first token is then predicted from nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from langswap.batching import right_pad
from langswap.chunks import ChunkAligner
from langswap.errors import ConfigError
from langswap.progress import bar as progress_bar
from langswap.transfer.distill import frame_id


@dataclass
class Ledger:
    """Per new token (ids `first_new` .. `first_new + len(saved) - 1`): how often it is read, nats saved where it is
    read, nats leaked elsewhere; and over the text: lines read, matched bytes, the total difference and the part no
    token took."""

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

    def __add__(self, other: "Ledger") -> "Ledger":
        """The ledger of both texts read (each line is read on its own, so the two add up)."""
        if other.first_new != self.first_new or len(other.saved) != len(self.saved):
            raise ValueError("ledgers of different new tokens do not add up")
        return Ledger(self.first_new, self.occurrences + other.occurrences, self.saved + other.saved,
                      self.leaked + other.leaked, self.bytes + other.bytes, self.total + other.total,
                      self.unattributed + other.unattributed)

    def bits_per_byte_change(self) -> float:
        """What the new tokens changed on the matched bytes, in bits per byte (negative: they saved)."""
        return -self.total / (math.log(2) * self.bytes) if self.bytes else 0.0


def _token_losses(model, rows: list[list[int]], columns: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """For each id list of `rows` (read together, right-padded: a causal model's real positions never attend to the
    padding after them), (each token's loss after the first, the softmax over the first `columns` columns at each
    position before the last), float32 on the CPU."""
    ids, _ = right_pad(rows, 0)
    with torch.no_grad():
        logits = model(input_ids=ids.to(model.device)).logits[:, :-1, :columns].float().cpu()
    found = []
    for row, length in zip(range(len(rows)), map(len, rows)):
        log_probs = torch.log_softmax(logits[row, :length - 1], dim=-1)
        found.append((-log_probs.gather(-1, ids[row, 1:length, None])[:, 0], log_probs))
    return found


def _batches(texts: list, frames: tuple, max_length: int, batch_tokens: int):
    """The aligned lines with their framed, cut id lists, in batches of at most `batch_tokens` padded positions (a
    single longer line makes a batch of its own)."""
    batch, longest = [], 0
    for text in texts:
        source = ([frames[0]] if frames[0] is not None else []) + text.source.ids.tolist()
        target = ([frames[1]] if frames[1] is not None else []) + text.target.ids.tolist()
        source, target = source[:max_length], target[:max_length]
        if len(source) < 2 or len(target) < 2:
            continue
        width = max(longest, len(source), len(target))
        if batch and (len(batch) + 1) * width > batch_tokens:  # the padded batch, both readings
            yield batch
            batch, width = [], max(len(source), len(target))
        batch.append((text, source, target))
        longest = width
    if batch:
        yield batch


def new_token_ledger(model, source_tokenizer, target_tokenizer, lines: list[str], first_new: int,
                     max_length: int = 512, progress: bool = False, batch_tokens: int = 1024) -> Ledger:
    """The ledger (module docstring) of the new tokens (ids from `first_new` to the extended tokenizer's last) of
    `model`, which reads `target_tokenizer`'s ids, on `lines`; `source_tokenizer` is the extension's source (every
    id below `first_new` the same token). Each line is read on its own after the tokenizers' frame token (bos, or eos
    where there is none), in batches of about `batch_tokens` tokens."""
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
        texts = aligner.align_batch([line for line in lines if line.strip()])
        for batch in _batches(texts, frames, max_length, batch_tokens):
            sources = _token_losses(model, [source for _, source, _ in batch], source_columns)
            targets = _token_losses(model, [target for _, _, target in batch], columns)
            for (text, source, target), read, extended in zip(batch, sources, targets):
                _read_line(_Line(text, len(source), target, frames, read[0], *extended), ledger)
            if bar is not None:
                bar.update(len(batch))
    finally:
        model.train(was_training)
        if bar is not None:
            bar.close()
    return ledger


@dataclass
class _Line:
    """One aligned line read both ways: the source reading's id count, the target reading's ids (each after its
    frame token, where `frames` has one), the source reading's token losses and the target reading's, with its
    log-softmax at each position."""

    text: object  # chunks.AlignedText
    source_length: int
    target_ids: list[int]
    frames: tuple
    source_losses: torch.Tensor
    target_losses: torch.Tensor
    target_log_probs: torch.Tensor


def _read_line(line: _Line, ledger: Ledger) -> None:
    """Adds one aligned line's chunks to `ledger`."""
    text, source_length, target_ids = line.text, line.source_length, line.target_ids
    source_losses, target_losses = line.source_losses, line.target_losses
    shift = tuple(int(frame is not None) for frame in line.frames)
    new_probs = line.target_log_probs[:, ledger.first_new:].exp()  # (positions, new tokens)
    starts = np.concatenate([[0], text.boundaries[:-1]])
    for k in range(len(text)):
        source_slice, target_slice = text.chunk(k)
        first = (source_slice.start + shift[0], target_slice.start + shift[1])
        last = (source_slice.stop + shift[0], target_slice.stop + shift[1])
        if text.unencodable[k] or first[0] < 1 or first[1] < 1 or last[0] > source_length \
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
