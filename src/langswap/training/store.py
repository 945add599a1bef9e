"""Token stores: training text tokenised once into flat, memory-mapped token files that training reads a block at a
time, so memory does not grow with the corpus and reruns, resumes and every process of a run reuse one store.

A store is a folder `<data_dir>/<first source's stem>-<16 hex digits>/` (default `data_dir`:
`cache_dir()/token-stores`) made from one or more sources (`sources.py`: files, folders and globs of files, a
Hugging Face dataset), each expanded into parts (its files, or its dataset) read one after another:

    tokens.bin     the token stream that `data.pack` builds, as one flat array: every document framed as the objective
                   frames it ([bos] ids [eos] for a causal LM, ids [sep] for a masked LM), documents one after
                   another; uint16 where every id of the vocabulary fits (up to 65,536 ids), else uint32
    documents.bin  int64 rows (token_start, source, start, end), one per document: where its tokens start in
                   tokens.bin, which of the store's parts it is from (an index into store.json's "sources"), and where
                   in that part: for a line file the byte range of its line (in the decompressed bytes of a .gz; the
                   whole JSON object of a .jsonl line), for a parquet file or a dataset its row as (row, row + 1), so
                   the same text can be read again (`TokenStore.document_text`) without reading the corpus
    store.json     what it was made from (every part's identity) and its counts: written last
    texts.bin, texts-index.bin
                   only where a teacher reads the store (`TokenStore.prepare_texts`) and a part is a .gz or a parquet
                   file: the text of those parts' documents, one after another in UTF-8, and int64 (documents + 1)
                   offsets of each document's text in it (documents of other parts take no bytes), written into
                   the finished store under its lock, the index last

Blocks are fixed slices of the stream (block i is tokens i*L .. (i+1)*L - 1, framed by [cls] .. [sep] for a masked
LM), the blocks `pack` cuts from the same text; `StoreBlocks` reads them from the memory map, so the only memory a
training run spends on its data is the epoch's shuffled order (8 bytes a block).

What a store is keyed by: its folder name is a digest of the sources as written (absolute paths, glob patterns, a
dataset's name, config, split and revision), the tokenizer (a digest of its full description, `tokenizer_digest`, and
the ids that frame documents) and the options that change the stream (objective, max_lines, and text_field where a
source is not a plain line file); the sequence length is not part of it, so one store serves every sequence length.
What the sources name now is checked against store.json at every start: the list of files a folder or glob expands
to, and each file's (size, modification time in ns), not a hash of its contents: hashing reads the whole corpus,
which at gigabytes takes as long as a slow start, and an edit that keeps both the size and the nanosecond
modification time is not a case worth that cost. A store whose sources changed (a file edited, added to the folder or
gone) is stale and is built again in the same folder, with a warning that says what changed; a folder that grows
therefore replaces its store rather than leaving the old one beside a new one.

A store is written into a temporary folder beside its final place and renamed there once complete
(`files.atomic_directory`), under the store's lock (`locking.OutputLock`), so a killed preparation never leaves a
store that a later run reads; its leftover temporary folder is removed by the next build of the same store and is
shown by `langswap prepare --list`. A store whose files do not match its record (cut, or a file missing) is refused
with the command that builds it again. Not checked: bit flips inside the token file (a checksum would read the whole
store at every start).

Tokenising: documents go to the tokenizer in batches (`BatchEncoder`: a fast tokenizer's own batch encoder, which
spreads each batch over the machine's cores and gives the ids of `tokenizer(batch)`, the call `pack` makes, without
the attention masks that call also builds, a quarter of its time; other tokenizers through that call). One process
feeds it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from itertools import chain
from pathlib import Path

import numpy as np
import torch

from langswap import __version__
from langswap.errors import (MissingResourceError, OutputLockedError, OutputSpaceError, ResourceFormatError,
                             VocabularyError)
from langswap.files import atomic_directory, cache_dir
from langswap.locking import OutputLock, lock_path
from langswap.progress import bar
from langswap.resources.token_vectors import tokenizer_digest
from langswap.training import sources as sources_module
from langswap.training.data import stream_frame, too_short

logger = logging.getLogger(__name__)

FORMAT = 2  # of the files in a store folder; part of its name, so another format is another store
STORES = "token-stores"  # folder under the langswap cache
RECORD = "store.json"
TOKENS = "tokens.bin"
DOCUMENTS = "documents.bin"
DOCUMENT_COLUMNS = ("token_start", "source", "start", "end")
TEXTS = "texts.bin"  # the text copy (`TokenStore.prepare_texts`): documents of parts read back slowly, as UTF-8
TEXT_INDEX = "texts-index.bin"  # int64 (documents + 1,): where each document's text starts in TEXTS
BATCH_DOCUMENTS = 4096  # documents per tokenizer call, at most
BATCH_BYTES = 1 << 22  # text per tokenizer call, at most: enough for every core, little memory


def store_root(data_dir: str | Path | None = None) -> Path:
    """The folder that holds token stores: `data_dir`, else `cache_dir()/token-stores`."""
    return Path(data_dir).expanduser() if data_dir else cache_dir() / STORES


def token_dtype(vocabulary: int) -> np.dtype:
    """The narrowest unsigned integer that holds every id below `vocabulary`."""
    if vocabulary <= 1 << 16:
        return np.dtype(np.uint16)
    if vocabulary <= 1 << 32:
        return np.dtype(np.uint32)
    raise VocabularyError(f"the tokenizer has {vocabulary:,} ids; a token store holds ids below 2**32.")


def vocabulary_size(tokenizer) -> int:
    """Ids the tokenizer can produce: its vocabulary and added tokens (`len`), or its largest special id + 1."""
    special = [i for i in (getattr(tokenizer, "all_special_ids", None) or []) if i is not None]
    return max([len(tokenizer)] + [i + 1 for i in special])


def describe(sources: list[str | Path], tokenizer, objective: str, text_field: str = "text",
             max_lines: int | None = None) -> dict:
    """What a store's stream depends on, apart from the contents of its sources: its folder name is a digest of
    this. `sources`: as `sources.expand` reads them (files, folders, globs, hf:DATASET)."""
    specs = [sources_module.canonical(source) for source in sources]
    before, after, _frame, _body = stream_frame(tokenizer, objective, 4)
    return {"format": FORMAT, "sources": specs,
            "tokenizer": {"digest": tokenizer_digest(tokenizer), "vocabulary": vocabulary_size(tokenizer),
                          "name": str(getattr(tokenizer, "name_or_path", "") or "")},
            "options": {"objective": objective, "before": before, "after": after, "max_lines": max_lines,
                        "text_field": None if all(_plain_lines(spec) for spec in specs) else text_field}}


def _plain_lines(spec: str) -> bool:
    """Whether a source is one line file, whose stream text_field does not change."""
    return Path(spec).is_file() and sources_module.file_kind(spec) == "lines"


def id_counts(tokens: np.ndarray, size: int, chunk: int = 1 << 24) -> np.ndarray:
    """(size,) how often each id below `size` occurs in `tokens` (a memory-mapped stream is read `chunk` tokens at a
    time, so memory does not grow with it; ids from `size` on are not counted)."""
    counts = np.zeros(size, dtype=np.int64)
    for start in range(0, len(tokens), chunk):
        counts += np.bincount(np.asarray(tokens[start:start + chunk]), minlength=size)[:size]
    return counts


def store_name(description: dict) -> str:
    """`<first source's stem>-<16 hex digits>`: readable in a listing, unique per description."""
    keyed = {**description, "tokenizer": {k: v for k, v in description["tokenizer"].items() if k != "name"}}
    digest = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    return f"{_stem(description['sources'][0])}-{digest}"


def _stem(spec: str) -> str:
    """A readable name of a source: a file's name before its first dot, a folder's name, the folder of a glob, a
    dataset's last name part and its config."""
    if sources_module.is_dataset(spec):
        part = sources_module.parse_dataset(spec)
        stem = Path(part.path).name + (f"-{part.config}" if part.config else "")
    else:
        path = Path(spec)
        while sources_module.is_glob(path.name) and path.parent != path:
            path = path.parent
        stem = path.name.split(".")[0]
    return re.sub(r"[^A-Za-z0-9_-]+", "_", stem).strip("_") or "text"


class TokenStore:
    """A finished store, opened read-only: `tokens` (the stream) and `documents` (its index) are memory maps."""

    def __init__(self, folder: Path, record: dict):
        self.folder, self.record = Path(folder), record
        self._tokens = self._documents = self._texts = None

    @classmethod
    def open(cls, folder: str | Path) -> "TokenStore":
        """The store in `folder`, checked against its record; a store that does not match it is refused."""
        folder = Path(folder)
        record = read_record(folder)
        if record is None:
            raise _damaged(folder, f"it has no readable {RECORD}")
        dtype = np.dtype(record["dtype"])
        for name, expected in ((TOKENS, record["tokens"] * dtype.itemsize),
                               (DOCUMENTS, record["documents"] * len(DOCUMENT_COLUMNS) * 8)):
            path = folder / name
            size = path.stat().st_size if path.is_file() else None
            if size != expected:
                found = "is missing" if size is None else f"holds {size:,} bytes"
                raise _damaged(folder, f"{name} {found} where {RECORD} says {expected:,}")
        store = cls(folder, record)
        if store.documents.shape[0] and (store.documents[0, 0] != 0 or store.documents[-1, 0] > store.num_tokens):
            raise _damaged(folder, f"{DOCUMENTS} does not index {TOKENS}")
        return store

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def num_tokens(self) -> int:
        return int(self.record["tokens"])

    @property
    def num_documents(self) -> int:
        return int(self.record["documents"])

    @property
    def bytes(self) -> int:
        """UTF-8 bytes of the documents' text."""
        return int(self.record["bytes"])

    @property
    def tokens(self) -> np.ndarray:
        """(num_tokens,) the token stream, memory-mapped."""
        if self._tokens is None:
            dtype = np.dtype(self.record["dtype"])
            self._tokens = (np.memmap(self.folder / TOKENS, dtype=dtype, mode="r") if self.num_tokens
                            else np.empty(0, dtype))
        return self._tokens

    @property
    def documents(self) -> np.ndarray:
        """(num_documents, 4) int64 rows of DOCUMENT_COLUMNS, memory-mapped."""
        if self._documents is None:
            self._documents = np.memmap(self.folder / DOCUMENTS, dtype=np.int64, mode="r",
                                        shape=(self.num_documents, len(DOCUMENT_COLUMNS)))
        return self._documents

    def document_tokens(self, index: int) -> np.ndarray:
        """The tokens of document `index` in the stream, with those that frame it."""
        start = int(self.documents[index, 0])
        end = int(self.documents[index + 1, 0]) if index + 1 < self.num_documents else self.num_tokens
        return self.tokens[start:end]

    def source(self, index: int) -> tuple[dict, int, int]:
        """(part, start, end) of document `index`: the identity of the part it is from (store.json's "sources" row:
        kind, path, and "unit", byte or row), and its byte range or its row as (row, row + 1) there."""
        _start, source, start, end = (int(value) for value in self.documents[index])
        return self.record["sources"][source], start, end

    def document_text(self, index: int) -> str:
        """The text of document `index`: read back from its part by its range (a line of a plain file, a row of a
        dataset), or, for a .gz or a parquet part, from the store's text copy (made on the first call where
        `prepare_texts` has not made it: reading such a part back takes a decompression up to the document or a
        whole row group each time)."""
        part, start, end = self.source(index)
        if _copied(part):
            texts, index_ = self._text_copy()
            return bytes(texts[int(index_[index]):int(index_[index + 1])]).decode("utf-8")
        return sources_module.read_document(part, start, end, self.record.get("text_field") or "text")

    @property
    def copies_text(self) -> bool:
        """Whether a part is one `document_text` reads from a text copy (a .gz or a parquet file)."""
        return any(_copied(part) for part in self.record["sources"])

    def prepare_texts(self, progress: bool = False) -> None:
        """Make the text copy where the store has a .gz or parquet part and no complete copy yet, so that
        `document_text` reads any document in time proportional to its length: a pass over those parts, written
        into the store folder under its lock (temporary files renamed, the index last). Refused before any
        writing where the disk lacks room for the text."""
        if self.copies_text:
            self._text_copy(progress)

    def _text_copy(self, progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        if self._texts is None:
            self._texts = _open_texts(self) or _write_texts(self, progress)
        return self._texts

    def disk_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.folder.iterdir() if path.is_file())

    def summary(self) -> str:
        return (f"{self.num_documents:,} documents, {self.num_tokens:,} tokens "
                f"({np.dtype(self.record['dtype']).name}), {format_size(self.disk_bytes())}")

    def __getstate__(self):  # a data-loader worker maps the files again rather than receive a copy of them
        return {**self.__dict__, "_tokens": None, "_documents": None, "_texts": None}


def _copied(part: dict) -> bool:
    """Whether `document_text` reads a store part's documents from the text copy: .gz and parquet files, which
    cannot be read back one document at a time in time proportional to it."""
    return part.get("kind") == "parquet" or (part.get("kind") != "dataset" and str(part["path"]).endswith(".gz"))


def _open_texts(store: TokenStore) -> tuple[np.ndarray, np.ndarray] | None:
    """(texts, index) memory maps of a complete text copy of `store`; None where it is missing or incomplete."""
    texts, index = store.folder / TEXTS, store.folder / TEXT_INDEX
    if not index.is_file() or index.stat().st_size != (store.num_documents + 1) * 8 or not texts.is_file():
        return None
    offsets = np.memmap(index, dtype=np.int64, mode="r")
    if int(offsets[-1]) != texts.stat().st_size:
        return None
    return (np.memmap(texts, dtype=np.uint8, mode="r") if int(offsets[-1]) else np.zeros(0, np.uint8)), offsets


def _write_texts(store: TokenStore, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Write the text copy of `store` (`TokenStore.prepare_texts`) and open it."""
    with _StoreLock(store.folder):
        opened = _open_texts(store)  # made by the process waited for
        if opened is not None:
            return opened
        sources, documents = store.record["sources"], store.documents
        copied = [number for number, part in enumerate(sources) if _copied(part)]
        counts = np.bincount(np.asarray(documents[:, 1]), minlength=len(sources))
        # each part's documents are one run of rows, in part order (`build_store` appends part after part)
        firsts = np.concatenate([[0], np.cumsum(counts)])
        free = shutil.disk_usage(store.folder).free
        if free < store.bytes:
            raise OutputSpaceError(f"the teacher reads the text of token store '{store.folder}' back, and its .gz and "
                                   f"parquet parts need a plain copy of up to {format_size(store.bytes)} there, with "
                                   f"{format_size(free)} free on that disk; free space there, move the store "
                                   "(`data_dir`), or give the training text as uncompressed line files.")
        clock = time.perf_counter()
        logger.info("token store %s: copying the text of its .gz and parquet parts (%s of %s parts), which the "
                    "teacher reads back", store.folder, f"{len(copied):,}", f"{len(sources):,}")
        offsets = np.zeros(store.num_documents + 1, dtype=np.int64)
        temporary = [store.folder / f".{name}.partial" for name in (TEXTS, TEXT_INDEX)]
        meter = bar(progress, int(sum(counts[number] for number in copied)), "copying text", unit="doc")
        try:
            written = 0
            with open(temporary[0], "wb") as out:
                for number, part in enumerate(sources):
                    first, stop = int(firsts[number]), int(firsts[number + 1])
                    offsets[first + 1:stop + 1] = written
                    if not _copied(part) or first == stop:
                        continue
                    row = first
                    source = sources_module.Part(part["kind"], part["path"])
                    for document in sources_module.documents(source, "training text",
                                                             store.record.get("text_field") or "text", stop - first,
                                                             empty_ok=True):
                        if (document.start, document.end) != (int(documents[row, 2]), int(documents[row, 3])):
                            raise _damaged(store.folder, f"document {row:,} of '{part['path']}' is not where it "
                                                         "was when the store was built")
                        data = document.text.encode("utf-8")
                        out.write(data)
                        written += len(data)
                        row += 1
                        offsets[row] = written
                        if meter is not None:
                            meter.update(1)
                    if row != stop:
                        raise _damaged(store.folder, f"'{part['path']}' holds {row - first:,} of the "
                                                     f"{stop - first:,} documents the store has of it")
            offsets.tofile(temporary[1])
            temporary[0].replace(store.folder / TEXTS)
            temporary[1].replace(store.folder / TEXT_INDEX)  # last: a complete index marks a complete copy
        finally:
            if meter is not None:
                meter.close()
            for path in temporary:
                path.unlink(missing_ok=True)
        logger.info("token store %s: text copy of %s in %.1f s", store.folder, format_size(written),
                    time.perf_counter() - clock)
        return _open_texts(store)


class _StoreLock:
    """The store folder's lock (`locking.OutputLock`), waited for where another process holds it."""

    def __init__(self, folder: Path):
        self.lock, self.folder, self.waited = OutputLock(folder, "token store"), folder, False

    def __enter__(self):
        while True:
            try:
                self.lock.acquire()
                return self
            except OutputLockedError:
                if not self.waited:
                    logger.info("token store %s is being written by another process; waiting for it", self.folder)
                    self.waited = True
                time.sleep(1)

    def __exit__(self, *exc):
        self.lock.release()


def read_record(folder: Path) -> dict | None:
    """store.json of `folder`, or None where it is missing or unreadable."""
    try:
        record = json.loads((Path(folder) / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    keys = {"format", "dtype", "tokens", "documents", "bytes", "sources", "description"}
    return record if isinstance(record, dict) and keys <= set(record) else None


def _damaged(folder: Path, why: str) -> ResourceFormatError:
    where = "" if folder.parent == store_root() else f" --data-dir {folder.parent}"
    error = ResourceFormatError(
        f"token store '{folder}' is damaged ({why}): it was cut or changed after it was written. Remove it with "
        f"`langswap prepare --remove {folder.name}{where}` and run this command again, which builds it anew.")
    error.why = why
    return error


def format_size(count: float) -> str:
    """Bytes as people read them: 950 B, 15.1 kB, 2.3 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if count < 1000 or unit == "GB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1000
    return ""


def stale_reason(record: dict) -> str | None:
    """Why the store that `record` describes no longer holds the text of its sources (a file changed or is gone, a
    folder or glob names other files now), or None where it does. (The format, tokenizer and options are in the
    store's name: another of them is another store.)"""
    description = record["description"]
    return sources_module.stale_reason(description.get("sources") or description.get("files", []),
                                       record["sources"])


class BatchEncoder:
    """texts -> [ids of each, no special tokens added], as `tokenizer(texts, add_special_tokens=False)["input_ids"]`
    gives them. A fast tokenizer's backend encodes the batches itself (on every core, building no attention
    masks); the first batch is also read through the call, and a tokenizer whose call gives other ids (a class that
    prepares text in Python first) goes through the call from then on, with a warning. A slow tokenizer, or a
    backend set to truncate or pad, or one whose special-token splitting differs from the tokenizer's (transformers'
    call resets these), goes through the call."""

    def __init__(self, tokenizer):
        self.tokenizer, self.checked = tokenizer, False
        backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
        if backend is not None and (backend.truncation is not None or backend.padding is not None
                                    or bool(getattr(backend, "encode_special_tokens", False))
                                    != bool(getattr(tokenizer, "split_special_tokens", False))):
            backend = None
        self.backend = backend

    def call(self, texts: list[str]) -> list[list[int]]:
        return self.tokenizer(texts, add_special_tokens=False)["input_ids"]

    def __call__(self, texts: list[str]) -> list[list[int]]:
        if self.backend is None:
            return self.call(texts)
        ids = [encoding.ids for encoding in self.backend.encode_batch(texts, add_special_tokens=False)]
        if not self.checked:
            self.checked = True
            called = self.call(texts)
            if ids != called:
                logger.warning("%s's call gives other ids than its backend tokenizer on the first batch; tokenising "
                               "through the call (slower)", type(self.tokenizer).__name__)
                self.backend = None
                return called
        return ids


def token_store(sources: list[str | Path], tokenizer, objective: str, text_field: str = "text",
                max_lines: int | None = None, data_dir: str | Path | None = None, progress: bool = False,
                what: str = "training text") -> TokenStore:
    """The store of `sources` (files, folders, globs, hf:DATASET; `sources.py`) under `tokenizer` and these options:
    opened where it was built before from the same sources, else built (stale ones again, with a warning).
    Concurrent callers wait for the one that builds it."""
    description = describe(sources, tokenizer, objective, text_field, max_lines)
    folder = store_root(data_dir) / store_name(description)
    store = _fresh(folder)
    if store is not None:
        logger.info("token store %s (built %s): %s", folder, store.record.get("built"), store.summary())
        return store
    with _StoreLock(folder) as lock:
        store = _fresh(folder) if lock.waited else None  # built by the process waited for
        if store is None:
            for leftover in folder.parent.glob(f".{folder.name}.partial-*"):  # of a killed build: the lock is ours
                shutil.rmtree(leftover, ignore_errors=True)
            store = build_store(folder, description, tokenizer, progress, what)
    return store


def _fresh(folder: Path) -> TokenStore | None:
    """The store in `folder` where it is there and up to date; None where it is missing or stale (said so)."""
    if not folder.exists():
        return None
    record = read_record(folder)
    if record is not None:
        reason = stale_reason(record)
        if reason:
            logger.warning("token store %s is stale: %s; building it again", folder, reason)
            return None
    return TokenStore.open(folder)


def build_store(folder: Path, description: dict, tokenizer, progress: bool = False,
                what: str = "training text") -> TokenStore:
    """Tokenise the described sources into the store `folder` (replacing a stale one once the new one is
    complete)."""
    clock = time.perf_counter()
    options = description["options"]
    before, after = options["before"], options["after"]
    vocabulary = description["tokenizer"]["vocabulary"]
    dtype = token_dtype(vocabulary)
    specs = description["sources"]
    expanded = [sources_module.check_source(spec, what) for spec in specs]
    parts = [part for spec_parts in expanded for part in spec_parts]
    # identities before reading: a file changed while it is read is stale at the next start
    sources = [sources_module.identity(part) for part in parts]
    for part, source in zip(parts, sources):
        if part.kind == "dataset":
            source.update(sources_module.dataset_facts(part, what))
    # the bar ends where every part's size is known in one unit (bytes of uncompressed line files, rows of parquet
    # files and datasets); else it counts bytes of text read
    extents = [sources_module.extent(part) for part in parts]
    units = {extent[0] if extent else None for extent in extents}
    plain = len(units) == 1 and None not in units
    in_rows = plain and units == {"row"}
    names = Path(str(parts[0])).name + (f" and {len(parts) - 1:,} more" if len(parts) > 1 else "")
    meter = bar(progress, sum(extent[1] for extent in extents) if plain else None, f"tokenising {names}",
                unit="rows" if in_rows else "B", scale=True)
    counts = {"tokens": 0, "documents": 0, "bytes": 0}
    max_lines = options["max_lines"]
    encode = BatchEncoder(tokenizer)
    with atomic_directory(folder, overwrite=True) as temporary:
        with open(temporary / TOKENS, "wb") as tokens_out, open(temporary / DOCUMENTS, "wb") as documents_out:

            def flush(batch: list, source: int, batch_bytes: int) -> None:
                encoded = encode([document.text for document in batch])
                lengths = np.fromiter((len(before) + len(ids) + len(after) for ids in encoded), np.int64,
                                      len(encoded))
                total = int(lengths.sum())
                stream = np.fromiter(chain.from_iterable(chain(before, ids, after) for ids in encoded), np.int64,
                                     total)
                if total and (stream.max() >= vocabulary or stream.min() < 0):
                    bad = int(stream.max() if stream.max() >= vocabulary else stream.min())
                    raise VocabularyError(f"the tokenizer gave id {bad} for {what}, outside its vocabulary of "
                                          f"{vocabulary:,} ids; a tokenizer whose ids exceed len(tokenizer) "
                                          "cannot be stored. Check its added tokens.")
                stream.astype(dtype).tofile(tokens_out)
                starts = counts["tokens"] + np.concatenate([[0], np.cumsum(lengths)[:-1]])
                rows = np.stack([starts, np.full(len(batch), source),
                                 np.fromiter((document.start for document in batch), np.int64, len(batch)),
                                 np.fromiter((document.end for document in batch), np.int64, len(batch))], axis=1)
                rows.astype(np.int64).tofile(documents_out)
                counts["tokens"] += total
                counts["documents"] += len(batch)
                if meter is not None:
                    meter.update(offset + batch[-1].end - meter.n if plain else batch_bytes)
                    meter.set_postfix_str(f"{counts['tokens']:,} tokens", refresh=False)

            offset = 0  # bytes or rows of the parts before this one, for the bar
            source = 0  # the part's index in `sources`
            for spec, spec_parts in zip(specs, expanded):
                found, cut = counts["documents"], False
                for part in spec_parts:
                    left = None if max_lines is None else max_lines - counts["documents"]
                    if left == 0:
                        cut = True
                        break
                    batch, batch_bytes = [], 0
                    for document in sources_module.documents(part, what, options["text_field"] or "text", left,
                                                             empty_ok=len(spec_parts) > 1):
                        size = len(document.text.encode("utf-8"))
                        counts["bytes"] += size
                        batch.append(document)
                        batch_bytes += size
                        if len(batch) >= BATCH_DOCUMENTS or batch_bytes >= BATCH_BYTES:
                            flush(batch, source, batch_bytes)
                            batch, batch_bytes = [], 0
                    if batch:
                        flush(batch, source, batch_bytes)
                    if plain:
                        offset += extents[source][1]
                        if meter is not None:
                            meter.update(offset - meter.n)  # the empty lines or rows after the last document
                    source += 1
                if counts["documents"] == found and not cut:  # every part was empty (one alone says so itself)
                    raise ResourceFormatError(
                        f"{what} '{spec}' has no text in any of its {len(spec_parts):,} files (no non-empty line, "
                        f"and no non-empty '{options['text_field'] or 'text'}' of a JSON line or a row).")
        record = {"format": FORMAT, "dtype": dtype.name, **counts, "sources": sources,
                  "text_field": options["text_field"], "description": description,
                  "document_columns": list(DOCUMENT_COLUMNS), "built": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                  "build_seconds": round(time.perf_counter() - clock, 2), "langswap_version": _version()}
        (temporary / RECORD).write_text(json.dumps(record, indent=2, ensure_ascii=False), encoding="utf-8")
    if meter is not None:
        meter.close()
    store = TokenStore.open(folder)
    seconds = time.perf_counter() - clock
    logger.info("built token store %s: %s in %.1f s (%s tokens/s)", folder, store.summary(), seconds,
                f"{store.num_tokens / max(seconds, 1e-9):,.0f}")
    return store


def _version() -> str:
    return __version__


class StoreBlocks(torch.utils.data.Dataset):
    """The blocks `pack` cuts from a store's stream, as `{"input_ids": (sequence_length,) int64}` items read from
    the memory map: block i is stream tokens i*body .. (i+1)*body - 1, framed by [cls] .. [sep] for a masked LM."""

    def __init__(self, store: TokenStore, tokenizer, sequence_length: int, objective: str,
                 what: str = "training text"):
        _before, _after, self.frame, self.body = stream_frame(tokenizer, objective, sequence_length)
        if store.record["description"]["options"]["objective"] != objective:
            raise ValueError(f"store {store.folder} is of the {store.record['description']['options']['objective']} "
                             f"objective, not {objective}")
        self.store, self.count = store, store.num_tokens // self.body
        if self.count == 0:
            raise too_short(what, store.num_tokens, sequence_length)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict:
        if not 0 <= index < self.count:
            raise IndexError(index)
        start = index * self.body
        ids = torch.from_numpy(self.store.tokens[start:start + self.body].astype(np.int64))
        if self.frame is not None:
            ids = torch.cat([torch.tensor([self.frame[0]]), ids, torch.tensor([self.frame[1]])])
        return {"input_ids": ids}


# -- listing and removing -------------------------------------------------------------------------------------------


def list_stores(data_dir: str | Path | None = None) -> list[dict]:
    """Every store under the data folder, and every folder a killed build left: name, folder, bytes on disk, status
    (ready, stale with why, damaged with why, or unfinished) and, where readable, its counts and files."""
    root = store_root(data_dir)
    rows = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if not folder.is_dir():
            continue
        size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        if folder.name.startswith("."):
            if ".partial-" in folder.name:
                building = _being_built(root / folder.name[1:].split(".partial-")[0])
                rows.append({"name": folder.name, "folder": folder, "bytes": size, "building": building,
                             "status": "being built now" if building else
                             "unfinished (a build that was killed; remove it)"})
            continue
        row = {"name": folder.name, "folder": folder, "bytes": size}
        record = read_record(folder)
        try:
            store = TokenStore.open(folder)
            reason = stale_reason(store.record)
            row.update(status=f"stale: {reason}" if reason else "ready", tokens=store.num_tokens,
                       documents=store.num_documents, files=_source_names(store.record),
                       tokenizer=store.record["description"]["tokenizer"].get("name") or
                       store.record["description"]["tokenizer"]["digest"],
                       objective=store.record["description"]["options"]["objective"])
        except ResourceFormatError as error:
            row["status"] = f"damaged: {getattr(error, 'why', error)}"
            if record:
                row["files"] = _source_names(record)
        rows.append(row)
    return rows


def _source_names(record: dict) -> list[str]:
    """The sources a store was made from as its key names them (a folder, not its thousand files)."""
    description = record.get("description") or {}
    return description.get("sources") or description.get("files") or [s["path"] for s in record.get("sources", [])]


def _being_built(folder: Path) -> bool:
    """Whether a process holds the lock of the store `folder` now (is building it); the lock is only probed."""
    try:
        import fcntl

        descriptor = os.open(lock_path(folder), os.O_RDONLY)
    except (ImportError, FileNotFoundError):
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(descriptor)  # which releases a lock taken here
    return False


def remove_stores(names: list[str], data_dir: str | Path | None = None) -> list[Path]:
    """Remove the named stores (folder names as `list_stores` gives them; `all`: every store and unfinished build)
    under the data folder; returns the folders removed. A name that is no store there is an error naming them."""
    root = store_root(data_dir)
    present = {row["name"]: row["folder"] for row in list_stores(data_dir)}
    if "all" in names:
        chosen = [row["folder"] for row in list_stores(data_dir) if not row.get("building")]
    else:
        unknown = [name for name in names if name not in present]
        if unknown:
            listed = ", ".join(sorted(present)) or "none"
            raise MissingResourceError(f"no token store {', '.join(unknown)} in {root} (there: {listed}); "
                                       "`langswap prepare --list` shows them.")
        chosen = [present[name] for name in names]
    for folder in chosen:
        shutil.rmtree(folder)
    return chosen

