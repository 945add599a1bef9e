"""Training text -> fixed-length token blocks, and the collators that batch them.

Documents are one per line of a plain-text file (.txt, optionally .gz) or one per line of a JSONL file (the string
under `text_field`); `sources.py` adds parquet files, folders and globs of files and Hugging Face datasets. They are
tokenised, joined into one stream and cut into blocks of the sequence length, as the
Hugging Face `run_clm` / `run_mlm` examples do, so no position is padding:

- causal LM: each document is `[bos] tokens [eos]` (bos only where the tokenizer has one distinct from eos; GPT-2's
  `<|endoftext|>` serves as both); blocks are `sequence_length` tokens, labels are the inputs (the model shifts them).
- masked LM: each block is `[cls] sequence_length-2 tokens [sep]`, documents separated by `[sep]`; 15% of the
  non-special positions are selected for prediction, 80/10/10 masked/random/kept (`masking.mask_tokens`).

The tail that does not fill a block is dropped. `pack` holds the whole stream in memory; training reads the same
blocks from a token store instead (`store.py`: the stream tokenised once into a memory-mapped file), and `pack`
serves the evaluation text, of which it reads documents one at a time only until it has `eval_sequences` blocks.

A recipe names the texts it trains on as streams (`Stream`; by default one, `train_text`). Each phase reads the
next slice of the run's one shuffled order of a stream (`StreamSlice`). Several streams are mixed within every
micro-batch (RAMEN: half source-language, half target-language text): each stream gives a fixed number of its
sequences to every micro-batch, its share of the batch size rounded by largest remainder (`batch_counts`), in the
streams' order, each stream read in its own shuffled order (`MixedSlice`). A stream may be packed by a tokenizer of
its own (a bilingual model reads each language through its own vocabulary); every item then carries its stream's
index as `stream_ids`, which the loop hands to the model only when the recipe says its model reads it. A masked-LM
batch masks each stream's rows with the tokenizer that packed them (its mask token, special tokens and vocabulary).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from itertools import islice
from typing import Iterable, Iterator

import torch

from langswap.errors import ConfigError, ResourceFormatError
from langswap.resources.text import read_line_spans

logger = logging.getLogger(__name__)


def read_documents(path: str | Path, what: str = "training text", text_field: str = "text",
                   max_lines: int | None = None) -> list[str]:
    """Documents of a .txt/.gz file (one per non-empty line) or a .jsonl file (`text_field` of each object)."""
    return [document.text for document in iter_documents(path, what, text_field, max_lines)]


@dataclass(frozen=True)
class Document:
    text: str
    start: int  # byte offset of the document's line in its file (in the decompressed bytes of a .gz)
    end: int  # byte offset where the line ends, without its newline; a .jsonl line is the whole JSON object


def is_jsonl(path: str | Path) -> bool:
    return Path(path).name.endswith((".jsonl", ".jsonl.gz"))


def iter_documents(path: str | Path, what: str = "training text", text_field: str = "text",
                   max_lines: int | None = None, empty_ok: bool = False) -> Iterator[Document]:
    """The documents of `read_documents`, one at a time, each with the byte range of its line; an empty corpus is
    an error once the file has been read (unless `empty_ok`: one empty file of a folder's many)."""
    path = Path(path)
    jsonl = is_jsonl(path)
    count = 0
    for number, (start, end, line) in enumerate(read_line_spans(path, what), start=1):
        if not line.strip():
            continue
        if jsonl:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise ResourceFormatError(f"{what} '{path}' line {number} is not JSON ({error.msg}); a .jsonl file "
                                          f"holds one object per line, like {{\"{text_field}\": \"...\"}}.") from error
            if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
                keys = ", ".join(record) if isinstance(record, dict) else type(record).__name__
                raise ResourceFormatError(f"{what} '{path}' line {number} has no string field '{text_field}' (it "
                                          f"has: {keys}); set text_field to the key that holds the text.")
            line = record[text_field]
            if not line.strip():
                continue
        yield Document(line, start, end)
        count += 1
        if max_lines is not None and count >= max_lines:
            return
    if count == 0 and empty_ok:
        return
    if count == 0 and jsonl:
        raise ResourceFormatError(f"{what} '{path}' has no text under '{text_field}'.")
    if count == 0:
        raise ResourceFormatError(f"{what} '{path}' has no text (no non-empty line). Give a UTF-8 file with one "
                                  "document or paragraph per line.")


@dataclass
class PackedText:
    blocks: torch.Tensor  # (n_blocks, sequence_length) token ids
    tokens: int  # tokens in the whole stream, before the tail was dropped
    bytes: int  # UTF-8 bytes of the documents in the stream

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / max(self.tokens, 1)


def pack(tokenizer, documents: Iterable[str], sequence_length: int, objective: str, what: str = "training text",
         max_blocks: int | None = None) -> PackedText:
    """Tokenise `documents` (a list, or an iterator read only as far as `max_blocks` blocks need) and cut the
    stream into blocks; fewer tokens than one block is an error."""
    before, after, frame, body = stream_frame(tokenizer, objective, sequence_length)
    stream: list[int] = []
    n_bytes = 0  # of the documents tokenised: with max_blocks the rest of the text is never read into the stream
    documents = iter(documents)
    while chunk := list(islice(documents, 1000)):
        n_bytes += sum(len(document.encode("utf-8")) for document in chunk)
        encoded = tokenizer(chunk, add_special_tokens=False)["input_ids"]
        for ids in encoded:
            stream.extend(before)
            stream.extend(ids)
            stream.extend(after)
        if max_blocks is not None and len(stream) >= (max_blocks + 1) * body:
            break
    count = len(stream) // body
    if count == 0:
        raise too_short(what, len(stream), sequence_length)
    if max_blocks is not None:
        count = min(count, max_blocks)
    blocks = torch.tensor(stream[:count * body], dtype=torch.long).view(count, body)
    if frame is not None:
        blocks = torch.cat([torch.full((count, 1), frame[0]), blocks, torch.full((count, 1), frame[1])], dim=1)
    return PackedText(blocks, len(stream), n_bytes)


def stream_frame(tokenizer, objective: str, sequence_length: int):
    """How documents are joined into one token stream and the stream cut into blocks, for `tokenizer` and the
    objective: (tokens before each document, tokens after it, the (first, last) token around every block or None,
    stream tokens per block). Causal: [bos] ids [eos], blocks of `sequence_length`; masked: ids [sep], blocks of
    `sequence_length - 2` framed by [cls] .. [sep]."""
    if sequence_length < 4:
        raise ConfigError(f"sequence_length is {sequence_length}; use at least 4 (typically 512 or 1024).")
    if objective == "masked":
        cls_id = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        sep_id = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
        if cls_id is None or sep_id is None or tokenizer.mask_token_id is None:
            raise ConfigError("the masked-LM objective needs a tokenizer with cls (or bos), sep (or eos) and mask "
                              "tokens; this one lacks some. Is the model a causal LM? Use objective: causal.")
        return [], [sep_id], (cls_id, sep_id), sequence_length - 2
    eos_id, bos_id = tokenizer.eos_token_id, tokenizer.bos_token_id
    before = [bos_id] if bos_id is not None and bos_id != eos_id else []
    after = [eos_id] if eos_id is not None else []
    return before, after, None, sequence_length


def too_short(what: str, tokens: int, sequence_length: int) -> ResourceFormatError:
    return ResourceFormatError(f"{what} has {tokens:,} tokens, fewer than one sequence of {sequence_length}; give "
                               "more text or a smaller sequence_length.")


class BlockDataset(torch.utils.data.Dataset):
    """Rows of a block tensor as `{"input_ids": ...}` items (with fixed `labels` where the eval set is pre-masked)."""

    def __init__(self, blocks: torch.Tensor, labels: torch.Tensor | None = None):
        self.blocks, self.labels = blocks, labels

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict:
        item = {"input_ids": self.blocks[index]}
        if self.labels is not None:
            item["labels"] = self.labels[index]
        return item


class LMCollator:
    """Stack blocks; causal: labels = inputs. Masked: the collator leaves the batch unmasked (no labels) and the
    trainer masks it with `mask` at the update that uses it (`PhaseTrainer.get_batch_samples`), from a generator
    seeded by the seed, the phase, the process and the update number. Masking here, with the global random state,
    would not resume: the data loader collates a batch ahead of the step that uses it, so a checkpoint's random state
    is already past the next batch's masks. Items that already carry labels (the pre-masked evaluation set) pass
    through."""

    def __init__(self, tokenizer, objective: str, mlm_probability: float = 0.15,
                 stream_tokenizers: list | None = None, document_mask: bool = False):
        self.tokenizer, self.objective, self.mlm_probability = tokenizer, objective, mlm_probability
        # the tokenizer each stream was packed with (index = stream id), where a stream has its own
        self.stream_tokenizers = stream_tokenizers
        self.document_mask = document_mask

    def __call__(self, items: list[dict]) -> dict:
        input_ids = torch.stack([item["input_ids"] for item in items])
        batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if "stream_ids" in items[0]:
            batch["stream_ids"] = torch.tensor([item["stream_ids"] for item in items], dtype=torch.long)
        if "labels" in items[0]:
            batch["labels"] = torch.stack([item["labels"] for item in items])
        elif self.objective == "causal":
            batch["labels"] = input_ids.clone()
        if self.document_mask:
            batch.update(document_positions(input_ids, self.tokenizer.eos_token_id, batch.get("labels")))
            del batch["attention_mask"]
        return batch

    def mask(self, input_ids: torch.Tensor, generator: torch.Generator | None = None,
             stream_ids: torch.Tensor | None = None):
        """(masked input ids, labels). Where streams have tokenizers of their own (`stream_tokenizers`) and the
        batch says which stream each sequence came from, each stream's rows are masked with its tokenizer's mask
        token, special tokens and vocabulary, stream by stream in index order from the one generator."""
        from langswap.masking import mask_tokens, special_tokens_mask

        def with_tokenizer(tokenizer, ids):
            return mask_tokens(ids, tokenizer.mask_token_id, len(tokenizer), special_tokens_mask(tokenizer, ids),
                               self.mlm_probability, generator=generator)

        if stream_ids is None or not self.stream_tokenizers:
            return with_tokenizer(self.tokenizer, input_ids)
        masked, labels = input_ids.clone(), torch.full_like(input_ids, -100)
        for stream in sorted(set(stream_ids.tolist())):
            rows = stream_ids == stream
            tokenizer = self.stream_tokenizers[stream] or self.tokenizer
            masked[rows], labels[rows] = with_tokenizer(tokenizer, input_ids[rows])
        return masked, labels


def document_positions(input_ids: torch.Tensor, eos_id: int, labels: torch.Tensor | None = None) -> dict:
    """Inputs that keep each packed document to itself: position ids that restart after every `eos_id` (transformers
    then builds a block-diagonal causal mask, or flash attention's variable-length kernel, from them), the cache off
    (with one the positions are not read as packing), and no label on a document's first token, which nothing of
    its own document precedes. input_ids, labels: (B, L)."""
    length = input_ids.shape[1]
    starts = torch.zeros_like(input_ids, dtype=torch.bool)
    starts[:, 0] = True
    starts[:, 1:] = input_ids[:, :-1] == eos_id
    index = torch.arange(length, device=input_ids.device).expand_as(input_ids)
    last_start = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    out = {"position_ids": index - last_start, "use_cache": False}
    if labels is not None:
        labels = labels.clone()
        labels[:, 1:][starts[:, 1:]] = -100
        out["labels"] = labels
    return out


def _epoch_order(size: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(size, generator=torch.Generator().manual_seed(seed + epoch))


def stream_indices(size: int, seed: int, start: int, count: int) -> list[int]:
    """Items start .. start + count - 1 of a run's training stream over a dataset of `size` blocks.

    The stream is epoch after epoch of `torch.randperm(size)` drawn from a generator seeded with seed + epoch, the
    order the Trainer's seeded sampler (accelerate's SeedableRandomSampler) gives one run. Every phase reads its own
    slice of this one stream, in order (`StreamSlice`): a phase continues where the phase before it stopped instead
    of reading the same first batches again, and a block is read a second time only after the whole text has been
    read once."""
    stream = StreamSlice(range(size), seed, start, count)
    return [stream[index] for index in range(count)]


class StreamSlice(torch.utils.data.Dataset):
    """Items `start` .. `start + count - 1` of the training stream over `dataset` (see `stream_indices`), one
    epoch's order in memory at a time, so a long run costs no index list of its length."""

    def __init__(self, dataset, seed: int, start: int, count: int):
        self.dataset, self.seed, self.start, self.count = dataset, seed, start, count
        self._epoch, self._order = -1, None

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        if not 0 <= index < self.count:
            raise IndexError(index)
        epoch, position = divmod(self.start + index, len(self.dataset))
        if epoch != self._epoch:
            self._epoch, self._order = epoch, _epoch_order(len(self.dataset), self.seed, epoch)
        return self.dataset[int(self._order[position])]


@dataclass(frozen=True)
class Stream:
    """A text a recipe trains on and its share of every batch (a single stream is the whole batch)."""

    name: str  # e.g. "train"; what a recipe calls the stream
    path: str  # a source (`sources.py`): a file, a folder or glob of files, or hf:DATASET
    share: float = 1.0  # of the sequences of every micro-batch
    tokenizer: str | None = None  # a folder whose tokenizer packs this stream; None: the model's


def batch_counts(streams: list[Stream], batch_size: int) -> list[int]:
    """Sequences of each stream in every micro-batch of `batch_size`: the shares rounded by largest remainder (ties
    to the earlier stream), so the counts sum to the batch size."""
    exact = [stream.share * batch_size for stream in streams]
    counts = [int(value) for value in exact]
    by_remainder = sorted(range(len(streams)), key=lambda index: (-(exact[index] - counts[index]), index))
    for index in by_remainder[:batch_size - sum(counts)]:
        counts[index] += 1
    return counts


class MixedSlice(torch.utils.data.Dataset):
    """Sequences `start` .. `start + count - 1` of a run that mixes several streams in every micro-batch: micro-batch
    m holds `counts[0]` sequences of the first stream, then `counts[1]` of the second, and so on; stream i's
    sequences come in its own shuffled order (`stream_indices`, seeded with seed + i), where micro-batch m reads
    items m * counts[i] onwards. `start` is a whole number of micro-batches. Items carry `stream_ids` (i)."""

    def __init__(self, datasets: list, counts: list[int], seed: int, start: int, count: int):
        self.batch_size = sum(counts)
        if start % self.batch_size:
            raise ValueError(f"a mixed slice starts at a whole micro-batch ({self.batch_size}), not at {start}")
        self.datasets, self.counts, self.seed, self.start, self.count = datasets, counts, seed, start, count
        self.offsets = [sum(counts[:index]) for index in range(len(counts))]
        self._orders: dict[tuple[int, int], torch.Tensor] = {}

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.count:
            raise IndexError(index)
        batch, position = divmod(self.start + index, self.batch_size)
        stream = max(i for i, offset in enumerate(self.offsets) if offset <= position)
        dataset = self.datasets[stream]
        item = batch * self.counts[stream] + position - self.offsets[stream]
        epoch, place = divmod(item, len(dataset))
        key = (stream, epoch)
        if key not in self._orders:
            self._orders = {k: v for k, v in self._orders.items() if k[0] != stream}  # one epoch per stream kept
            self._orders[key] = _epoch_order(len(dataset), self.seed + stream, epoch)
        return {**dataset[int(self._orders[key][place])], "stream_ids": stream}


def phase_dataset(datasets: dict[str, torch.utils.data.Dataset], streams: list[Stream], seed: int, start: int,
                  count: int, batch_size: int = 1) -> torch.utils.data.Dataset:
    """Sequences `start` .. `start + count - 1` of the run's training order, over the streams' packed datasets
    (by stream name). One stream: its slice of the run's one shuffled stream (`StreamSlice`). Several: every
    micro-batch of `batch_size` composed from their shares (`MixedSlice`)."""
    if len(streams) == 1:
        return StreamSlice(datasets[streams[0].name], seed, start, count)
    return MixedSlice([datasets[stream.name] for stream in streams], batch_counts(streams, batch_size), seed, start,
                      count)


def masked_eval_set(collator: LMCollator, blocks: torch.Tensor, seed: int) -> BlockDataset:
    """The evaluation blocks masked once with a fixed seed, so every point of the curve scores the same positions."""
    generator = torch.Generator().manual_seed(seed)
    masked, labels = collator.mask(blocks, generator=generator)
    return BlockDataset(masked, labels)
