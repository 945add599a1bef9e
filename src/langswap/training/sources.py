"""Where training text comes from: a source is what `train_text`, `eval_text` or a recipe's text names, expanded
into parts (files, or one dataset) that are read one after another as one sequence of documents:

    de.txt, de.txt.gz        a document per non-empty line (every file that is not .jsonl or .parquet reads so)
    de.jsonl, de.jsonl.gz    the string under `text_field` of each line's JSON object
    de.parquet               the string column `text_field`, a document per row (null and blank rows skipped)
    corpus/                  every .txt, .txt.gz, .jsonl, .jsonl.gz and .parquet file under the folder, at any depth,
                             in sorted order of their paths; hidden files and folders (a name starting with '.') and
                             files of other kinds (a README.md) are not read
    'corpus/*.parquet'       a glob (`*`, `?`, `[...]`, and `**` for any depth): every file it matches, sorted
    hf:NAME_OR_PATH?config=C&split=S&revision=R
                             a Hugging Face `datasets` dataset, `datasets.load_dataset(NAME_OR_PATH, C, split=S,
                             revision=R)` (split train unless given; config and revision optional), or a folder
                             `save_to_disk` wrote (`datasets.load_from_disk`; split picks one of a DatasetDict, a
                             single Dataset has none): its column `text_field`, a document per row

Each document keeps where it came from: its part and a range in it, the byte range of its line for line files (in the
decompressed bytes of a .gz; the whole JSON object of a .jsonl line) and the row, as (row, row + 1), for parquet
files and datasets (`Part.unit`), so `read_document` finds its text again without reading the rest.

A part's identity (`identity`), which a token store records and checks at every start: a file's path, size and
modification time; a dataset's name or folder, config, split and revision, and for a local folder its files' sizes
and modification times. A hub dataset is not checked against the hub at a start (that needs the network and the
dataset's files): a store of a dataset named without a revision holds the dataset as it was when the store was built.

pyarrow (parquet) and datasets are optional (`pip install 'langswap[data]'`) and imported where they are needed.

Not handled: streaming datasets (a dataset is loaded, which for a hub dataset downloads it and converts it to Arrow
files in the datasets cache once); remote files (s3://, https://) other than through a `hf:` dataset; parquet text
in a nested column.
"""

from __future__ import annotations

import functools
import glob
import gzip
import importlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from langswap.errors import ConfigError, LangswapError, MissingResourceError, ResourceFormatError
from langswap.training.data import Document, Stream, batch_counts, iter_documents

logger = logging.getLogger(__name__)

DATASET_PREFIX = "hf:"
DATASET_OPTIONS = ("config", "split", "revision")
FOLDER_SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz", ".parquet")  # the files of a folder that are read
ROW_KINDS = ("parquet", "dataset")
PARQUET_BATCH_ROWS = 1024
DATA_EXTRA = "`pip install 'langswap[data]'`"


@dataclass(frozen=True)
class Part:
    """One file of a source, or its dataset."""

    kind: str  # "lines" (.txt/.gz), "jsonl", "parquet" or "dataset"
    path: str  # a file's absolute path; a dataset's hub name or absolute folder
    config: str | None = None  # dataset only
    split: str | None = None
    revision: str | None = None

    @property
    def unit(self) -> str:
        """What a document's (start, end) counts in this part: "byte" or "row"."""
        return "row" if self.kind in ROW_KINDS else "byte"

    @property
    def local(self) -> bool:
        return self.kind != "dataset" or Path(self.path).is_absolute()

    def __str__(self) -> str:
        return dataset_spec(self) if self.kind == "dataset" else self.path


def file_kind(path: str | Path) -> str:
    name = Path(path).name
    if name.endswith((".jsonl", ".jsonl.gz")):
        return "jsonl"
    return "parquet" if name.endswith(".parquet") else "lines"


def is_dataset(spec: str | Path) -> bool:
    return str(spec).startswith(DATASET_PREFIX)


def is_glob(spec: str | Path) -> bool:
    return any(character in str(spec) for character in "*?[") and not Path(spec).exists()


def dataset_spec(part: Part) -> str:
    """`hf:NAME?config=..&split=..&revision=..` with the options that are set, in that order."""
    options = "&".join(f"{key}={getattr(part, key)}" for key in DATASET_OPTIONS if getattr(part, key) is not None)
    return f"{DATASET_PREFIX}{part.path}" + (f"?{options}" if options else "")


def parse_dataset(spec: str, what: str = "training text") -> Part:
    """The dataset part of a `hf:NAME_OR_PATH?config=C&split=S&revision=R` source (split train unless given); an
    existing folder is made absolute, anything else is a hub name."""
    body = str(spec)[len(DATASET_PREFIX):]
    name, _, query = body.partition("?")
    if not name:
        raise ConfigError(f"{what} '{spec}' names no dataset; write hf:NAME (a hub name such as uonlp/CulturaX, or "
                          "a local folder), optionally with ?config=...&split=...&revision=...")
    options = {"split": "train"}
    for item in filter(None, query.split("&")):
        key, equals, value = item.partition("=")
        if key not in DATASET_OPTIONS or not equals or not value:
            raise ConfigError(f"{what} '{spec}': '{item}' is not an option of a dataset source; give "
                              + ", ".join(f"{option}=VALUE" for option in DATASET_OPTIONS) + ", joined by '&'.")
        options[key] = value
    folder = Path(name).expanduser()
    if folder.exists():
        name = str(folder.resolve())
    return Part("dataset", name, options.get("config"), options["split"], options.get("revision"))


def canonical(spec: str | Path) -> str:
    """The source as a store's key names it: paths and patterns made absolute, a dataset's options in one order."""
    if is_dataset(spec):
        return dataset_spec(parse_dataset(str(spec)))
    path = Path(spec).expanduser()
    return str(path.resolve()) if not is_glob(spec) else str(path if path.is_absolute() else Path.cwd() / path)


def expand(spec: str | Path, what: str = "training text") -> list[Part]:
    """The parts of a source, in the order they are read; a source that names nothing readable is an error that
    says what to fix."""
    if is_dataset(spec):
        return [parse_dataset(str(spec), what)]
    path = Path(spec).expanduser()
    if path.is_file():
        return [Part(file_kind(path), str(path.resolve()))]
    if path.is_dir():
        root = path.resolve()
        files = sorted((file for file in root.rglob("*") if file.name.endswith(FOLDER_SUFFIXES)
                        and not any(name.startswith(".") for name in file.relative_to(root).parts)
                        and file.is_file()), key=str)
        if not files:
            held = sorted({file.name for file in root.iterdir()})
            raise ResourceFormatError(
                f"{what} folder '{spec}' holds no " + ", ".join(FOLDER_SUFFIXES) + " file at any depth (it holds: "
                + (", ".join(held[:8]) + (", ..." if len(held) > 8 else "") if held else "nothing")
                + "); give a folder of such files, or a glob such as 'folder/*.md', whose every match is read.")
        return [Part(file_kind(file), str(file)) for file in files]
    if is_glob(spec):
        files = sorted({Path(match).resolve() for match in glob.glob(str(path), recursive=True)
                        if Path(match).is_file()}, key=str)
        if not files:
            raise MissingResourceError(f"{what} '{spec}' matches no file. Check the pattern (`**` matches folders "
                                       "at any depth; quote the pattern so the shell does not expand it).")
        return [Part(file_kind(file), str(file)) for file in files]
    raise MissingResourceError(f"{what} '{spec}' does not exist; give a file, a folder, a glob of files or "
                               "hf:DATASET.")


def check_source(spec: str | Path, what: str = "training text") -> list[Part]:
    """`expand`, and the packages its parts are read with: what can be checked before any text is read."""
    parts = expand(spec, what)
    if any(part.kind == "parquet" for part in parts):
        _require("pyarrow.parquet", "pyarrow>=15", f"{what} '{spec}' holds parquet files")
    if any(part.kind == "dataset" for part in parts):
        _require("datasets", "datasets>=2.19", f"{what} '{spec}' is a Hugging Face dataset")
    return parts


def check_streams(streams: list[Stream], recipe: str, batch_size: int) -> None:
    """Streams the training loop can read: at least one, distinct names, shares summing to 1 that give every stream
    a sequence of every micro-batch, and every source there (`check_source`)."""
    if not streams:
        raise ConfigError(f"recipe '{recipe}' names no training text.")
    names = [stream.name for stream in streams]
    if len(set(names)) != len(names):
        raise ConfigError(f"recipe '{recipe}' names a stream twice ({', '.join(names)}); give each its own name.")
    shares = ", ".join(f"{stream.name} {stream.share:g}" for stream in streams)
    if any(not stream.share > 0 for stream in streams) or abs(sum(s.share for s in streams) - 1) > 1e-6:
        raise ConfigError(f"the stream shares of recipe '{recipe}' ({shares}) must be positive and sum to 1.")
    counts = batch_counts(streams, batch_size)
    if min(counts) < 1:
        enough = next(size for size in range(batch_size + 1, batch_size + 1 + math.ceil(2 / min(s.share for s in
                                                                                             streams)))
                      if min(batch_counts(streams, size)) >= 1)
        raise ConfigError(f"batch_size {batch_size} gives stream '{streams[counts.index(0)].name}' of recipe "
                          f"'{recipe}' no sequence of a batch (shares {shares}); raise batch_size to at least "
                          f"{enough}.")
    for stream in streams:
        check_source(stream.path, f"training text of stream {stream.name} (recipe '{recipe}')")
        if stream.tokenizer is not None and not Path(stream.tokenizer).is_dir():
            raise MissingResourceError(f"tokenizer folder '{stream.tokenizer}' (stream {stream.name} of recipe "
                                       f"'{recipe}') does not exist.")


def _require(module: str, package: str, why: str):
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingResourceError(f"{why}, which needs the {package.split('>')[0]} package: `pip install "
                                   f"'{package}'` (or {DATA_EXTRA} for both pyarrow and datasets).") from error


# -- identity -----------------------------------------------------------------------------------------------------------


def file_identity(path: str | Path) -> dict:
    stat = Path(path).stat()
    return {"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def identity(part: Part) -> dict:
    """What a store records of a part, to find its documents again and to tell whether it changed."""
    if part.kind != "dataset":
        return {"kind": part.kind, "unit": part.unit, **file_identity(part.path)}
    record = {"kind": "dataset", "unit": "row", "path": part.path, "config": part.config, "split": part.split,
              "revision": part.revision}
    if part.local:
        record["files"] = [file_identity(file) for file in _folder_files(Path(part.path))]
    return record


def _folder_files(folder: Path) -> list[Path]:
    if folder.is_file():
        return [folder]
    return sorted((file for file in folder.rglob("*") if file.is_file()
                   and not any(name.startswith(".") for name in file.relative_to(folder).parts)), key=str)


def stale_reason(specs: list[str], recorded: list[dict]) -> str | None:
    """Why parts recorded as `recorded` (`identity` rows) no longer hold the text of the sources `specs`: a file
    changed, is gone, or a folder or glob now names other files; None where they still do."""
    try:
        parts = [part for spec in specs for part in expand(spec)]
    except LangswapError as error:
        return str(error)
    now = [str(part) for part in parts]
    before = [dataset_spec(Part("dataset", row["path"], row.get("config"), row.get("split"), row.get("revision")))
              if row.get("kind") == "dataset" else row["path"] for row in recorded]
    if now != before:
        added, gone = sorted(set(now) - set(before)), sorted(set(before) - set(now))
        listed = "; ".join(text for text in (f"new: {_few(added)}" if added else "",
                                             f"gone: {_few(gone)}" if gone else "") if text) or "in another order"
        return f"{', '.join(specs)} now names {len(now):,} parts where the store was built from {len(before):,} " \
               f"({listed})"
    for row in recorded:
        changed = _file_changed(row) if row.get("kind") != "dataset" else None
        if row.get("kind") == "dataset" and "files" in row:
            files = _folder_files(Path(row["path"]))
            if [str(file) for file in files] != [item["path"] for item in row["files"]]:
                return f"dataset folder '{row['path']}' holds other files than when the store was built"
            changed = next(filter(None, (_file_changed(item) for item in row["files"])), None)
        if changed:
            return changed
    return None


def _few(paths: list[str]) -> str:
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3:,} more" if len(paths) > 3 else "")


def _file_changed(row: dict) -> str | None:
    path = Path(row["path"])
    if not path.is_file():
        return f"'{path}' is gone"
    now = file_identity(path)
    if (now["size"], now["mtime_ns"]) == (row["size"], row["mtime_ns"]):
        return None

    def when(mtime_ns: int) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime_ns / 1e9))

    return (f"'{path}' changed since it was built (size {row['size']:,} -> {now['size']:,} bytes, modified "
            f"{when(row['mtime_ns'])} -> {when(now['mtime_ns'])})")


# -- reading ------------------------------------------------------------------------------------------------------------


def extent(part: Part) -> tuple[str, int] | None:
    """(unit, how many) of a part, for a progress bar that ends: an uncompressed line file's bytes, a parquet
    file's or a dataset's rows; None where it is not known before reading (a .gz)."""
    if part.kind == "dataset":
        return "row", len(load_dataset(part))
    if part.kind == "parquet":
        return "row", _parquet_file(part.path, "training text").metadata.num_rows
    return None if part.path.endswith(".gz") else ("byte", Path(part.path).stat().st_size)


def documents(part: Part, what: str = "training text", text_field: str = "text", max_lines: int | None = None,
              empty_ok: bool = False):
    """The documents of a part (`data.Document`: text, start, end in the part's unit), at most `max_lines`; a part
    with none is an error unless `empty_ok`."""
    if part.kind in ("lines", "jsonl"):
        return iter_documents(part.path, what, text_field, max_lines, empty_ok)
    reader = _parquet_documents if part.kind == "parquet" else _dataset_documents
    return _counted(reader(part, what, text_field), part, what, text_field, max_lines, empty_ok)


def _counted(rows, part: Part, what: str, text_field: str, max_lines: int | None, empty_ok: bool):
    count = 0
    for document in rows:
        yield document
        count += 1
        if max_lines is not None and count >= max_lines:
            return
    if count == 0 and not empty_ok:
        raise ResourceFormatError(f"{what} '{part}' has no text in its column '{text_field}' (every row is empty "
                                  "or null).")


def source_texts(spec: str | Path, what: str = "training text", text_field: str = "text") -> Iterator[str]:
    """The documents' texts of every part of a source, one at a time (nothing of the source is held)."""
    parts = expand(spec, what)
    count = 0
    for part in parts:
        for document in documents(part, what, text_field, empty_ok=len(parts) > 1):
            count += 1
            yield document.text
    if count == 0:
        raise ResourceFormatError(f"{what} '{spec}' has no text in any of its {len(parts):,} files.")


def _text_type(arrow_type) -> bool:
    import pyarrow as pa

    string_view = getattr(pa.types, "is_string_view", lambda _type: False)
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) or string_view(arrow_type)


def _parquet_file(path: str, what: str):
    pq = _require("pyarrow.parquet", "pyarrow>=15", f"{what} '{path}' is a parquet file")
    import pyarrow as pa

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise ResourceFormatError(f"{what} '{path}' is not a readable parquet file ({error}); it may be cut or "
                                  "not parquet at all.") from error


def _parquet_documents(part: Part, what: str, text_field: str):
    file = _parquet_file(part.path, what)
    schema = file.schema_arrow
    if text_field not in schema.names:
        raise ResourceFormatError(f"{what} '{part.path}' has no column '{text_field}' (it has: "
                                  f"{', '.join(schema.names)}); set text_field to the column that holds the text.")
    if not _text_type(schema.field(text_field).type):
        raise ResourceFormatError(f"{what} '{part.path}' column '{text_field}' holds "
                                  f"{schema.field(text_field).type}, not text; set text_field to a string column.")
    row = 0
    for batch in file.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[text_field]):
        for text in batch.column(0).to_pylist():
            if text is not None and text.strip():
                yield Document(text, row, row + 1)
            row += 1


def _dataset_documents(part: Part, what: str, text_field: str):
    dataset = load_dataset(part, what)
    _check_dataset_column(dataset, part, what, text_field)
    row = 0
    for batch in dataset.select_columns([text_field]).iter(batch_size=PARQUET_BATCH_ROWS):
        for text in batch[text_field]:
            if text is not None and text.strip():
                yield Document(text, row, row + 1)
            row += 1


def _check_dataset_column(dataset, part: Part, what: str, text_field: str) -> None:
    if text_field not in dataset.column_names:
        raise ResourceFormatError(f"{what} '{part}' has no column '{text_field}' (it has: "
                                  f"{', '.join(dataset.column_names)}); set text_field to the column that holds "
                                  "the text.")
    dtype = getattr(dataset.features[text_field], "dtype", None)
    if dtype not in ("string", "large_string", "string_view"):
        raise ResourceFormatError(f"{what} '{part}' column '{text_field}' holds {dataset.features[text_field]}, "
                                  "not text; set text_field to a string column.")


@functools.lru_cache(maxsize=2)
def _loaded(part: Part):
    datasets = _require("datasets", "datasets>=2.19", f"'{part}' is a Hugging Face dataset")
    folder = Path(part.path)
    if folder.is_dir() and ((folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()):
        loaded = datasets.load_from_disk(str(folder))  # a folder `save_to_disk` wrote
        if isinstance(loaded, datasets.DatasetDict):
            if part.split not in loaded:
                raise ValueError(f'Unknown split "{part.split}". Should be one of {list(loaded)}.')
            loaded = loaded[part.split]
        return loaded
    return datasets.load_dataset(part.path, part.config, split=part.split, revision=part.revision)


def load_dataset(part: Part, what: str = "training text"):
    """The `datasets.Dataset` of a dataset part (kept for the next call: building a store reads it twice)."""
    try:
        dataset = _loaded(part)
    except (OSError, ValueError) as error:  # not found, no network, an unknown config or split
        raise MissingResourceError(f"{what} '{part}' could not be loaded by datasets: {error}. Check the name, "
                                   "config= and split= (and the network or HF_HUB_OFFLINE for a hub dataset).") \
            from error
    if not hasattr(dataset, "column_names") or not hasattr(dataset, "select_columns"):
        raise ConfigError(f"{what} '{part}' did not load as one split of a dataset ({type(dataset).__name__}); "
                          "name the split with ?split=NAME.")
    return dataset


def dataset_facts(part: Part, what: str = "training text") -> dict:
    """Rows and the `datasets` fingerprint of a loaded dataset part, which a store records beside its identity."""
    dataset = load_dataset(part, what)
    return {"rows": len(dataset), "fingerprint": getattr(dataset, "_fingerprint", None)}


def read_document(row: dict, start: int, end: int, text_field: str = "text") -> str:
    """The text of a document found at (start, end) of the part a store recorded as `row` (`identity`)."""
    kind = row.get("kind") or file_kind(row["path"])
    if kind == "dataset":
        part = Part("dataset", row["path"], row.get("config"), row.get("split"), row.get("revision"))
        return load_dataset(part)[start][text_field]
    if kind == "parquet":
        file = _parquet_file(row["path"], "text")
        first = 0
        for group in range(file.metadata.num_row_groups):
            rows = file.metadata.row_group(group).num_rows
            if start < first + rows:
                column = file.read_row_group(group, columns=[text_field]).column(0)
                return column[start - first].as_py()
            first += rows
        raise IndexError(f"row {start} is past the end of '{row['path']}' ({first:,} rows)")
    path = Path(row["path"])
    with (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")) as handle:
        handle.seek(start)
        text = handle.read(end - start).decode("utf-8")
    return json.loads(text)[text_field] if kind == "jsonl" else text
