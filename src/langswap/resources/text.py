"""Reading user text files: plain or gzip, UTF-8 only, with errors that say which line is broken."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Iterator

from langswap.errors import MissingResourceError, ResourceFormatError


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_lines(path: str | Path, what: str = "text file") -> Iterator[str]:
    """Lines of a UTF-8 (optionally .gz) file without their newline and without a leading byte-order mark (Windows
    editors write one); a non-UTF-8 line is an error naming it."""
    for _start, _end, line in read_line_spans(path, what):
        yield line


def read_line_spans(path: str | Path, what: str = "text file") -> Iterator[tuple[int, int, str]]:
    """(start, end, line) for every line of `read_lines`: `start` .. `end` are the byte offsets of the line's text in
    the file (in the decompressed bytes of a .gz), without its newline and the byte-order mark, so
    `data[start:end].decode()` is the line."""
    path = Path(path)
    if not path.is_file():
        raise MissingResourceError(f"{what} '{path}' does not exist.")
    position = 0
    with _open_bytes(path) as handle:
        for number, raw in enumerate(handle, start=1):
            start, end = position, position + len(raw.rstrip(b"\r\n"))
            position += len(raw)
            body = raw[:end - start]
            try:
                line = body.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ResourceFormatError(
                    f"{what} '{path}' is not UTF-8: line {number} has byte 0x{raw[error.start]:02x} at position "
                    f"{error.start}. Convert it, e.g. `iconv -f latin1 -t utf-8 {path.name} > fixed.txt`.") from error
            if number == 1 and line.startswith("\ufeff"):
                line, start = line[1:], start + 3  # the mark is 3 bytes in UTF-8
            yield start, end, line


def read_text_lines(path: str | Path, what: str = "text file", max_lines: int | None = None) -> list[str]:
    """Non-empty lines of a corpus; an empty corpus is an error."""
    lines = []
    for line in read_lines(path, what):
        if line.strip():
            lines.append(line)
            if max_lines is not None and len(lines) >= max_lines:
                break
    if not lines:
        raise ResourceFormatError(f"{what} '{path}' has no text (no non-empty line). Give a UTF-8 file with one "
                                  "document or paragraph per line.")
    return lines
