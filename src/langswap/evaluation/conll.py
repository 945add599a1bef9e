"""Readers for labelled sentences: Universal Dependencies .conllu (FORM and UPOS) and CoNLL-2003-style columns (NER).

Both read UTF-8, plain or gzip (a path ending in .gz), and stop at the first malformed line with an error that
names the file, the line number, what is wrong and what a line should look like.

Not handled: CoNLL-U multiword tokens and empty nodes are skipped, not expanded (the syntactic words of a range such
as `3-4 zum` are kept, the surface token is not); XPOS, lemmas, features and heads are not read; the CoNLL-2003
reader takes each line's columns as split on whitespace, so a token cannot contain a space.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langswap.errors import MissingResourceError, ResourceFormatError
from langswap.resources.text import read_lines

CONLLU_EXAMPLE = "1<TAB>Hunde<TAB>Hund<TAB>NOUN<TAB>NN<TAB>_<TAB>2<TAB>nsubj<TAB>_<TAB>_"
COLUMNS_EXAMPLE = "EU NNP B-NP B-ORG"


@dataclass
class Sentence:
    """One sentence: its words and one tag per word."""

    words: list[str]
    tags: list[str]

    def __post_init__(self):
        if len(self.words) != len(self.tags):
            raise ValueError(f"a Sentence needs one tag per word: {len(self.words)} words but {len(self.tags)} tags")

    def __len__(self) -> int:
        return len(self.words)


def _check_file(path: Path, what: str) -> None:
    if not path.is_file():
        raise MissingResourceError(f"{what} '{path}' does not exist.")


def _read_sentences(path: Path, what: str, parse, no_sentences_hint: str) -> list[Sentence]:
    """Sentences of a one-word-a-line file, a blank line between sentences. `parse(number, line)` gives a word line's
    (word, tag), or None for a line to skip, and raises on a bad line."""
    _check_file(path, what)
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    for number, line in enumerate(read_lines(path, what), start=1):
        if not line.strip():
            if words:
                sentences.append(Sentence(words, tags))
                words, tags = [], []
            continue
        parsed = parse(number, line)
        if parsed is not None:
            words.append(parsed[0])
            tags.append(parsed[1])
    if words:
        sentences.append(Sentence(words, tags))
    if not sentences:
        raise ResourceFormatError(f"{what} '{path}' has no sentences (no word lines). {no_sentences_hint}")
    return sentences


def read_conllu(path: str | Path, what: str = "CoNLL-U file") -> list[Sentence]:
    """Sentences of a Universal Dependencies .conllu file: FORM (column 2) and UPOS (column 4) of each word.

    Comment lines (`#`), multiword token ranges (ID `3-4`) and empty nodes (ID `5.1`) are skipped; a blank line ends
    a sentence."""
    path = Path(path)

    def bad(number: int, problem: str) -> ResourceFormatError:
        return ResourceFormatError(
            f"{what} '{path}' line {number}: {problem}. A word line has 10 tab-separated columns, ID FORM LEMMA "
            f"UPOS XPOS FEATS HEAD DEPREL DEPS MISC, e.g. '{CONLLU_EXAMPLE}'; comments start with '#' and a blank "
            "line ends a sentence. Is this a Universal Dependencies .conllu file?")

    def parse(number: int, line: str) -> tuple[str, str] | None:
        if line.startswith("#"):
            return None
        columns = line.split("\t")
        if len(columns) != 10:
            raise bad(number, f"{len(columns)} tab-separated column{'s' if len(columns) != 1 else ''} instead of 10")
        identifier = columns[0]
        if "-" in identifier or "." in identifier:  # multiword token range or empty node
            low, _, high = identifier.replace(".", "-").partition("-")
            if not (low.isdigit() and high.isdigit()):
                raise bad(number, f"ID '{identifier}' is neither a word number, a range like '3-4' nor an empty "
                                  "node like '5.1'")
            return None
        if not identifier.isdigit():
            raise bad(number, f"ID '{identifier}' is not a word number")
        form, upos = columns[1], columns[3]
        if not form:
            raise bad(number, "FORM (column 2) is empty")
        if not upos or upos == "_":
            raise bad(number, "UPOS (column 4) is empty" if not upos else "UPOS (column 4) is '_' (not annotated)")
        return form, upos

    return _read_sentences(path, what, parse, "Give a Universal Dependencies .conllu file, with word lines like "
                                              f"'{CONLLU_EXAMPLE}'.")


def read_conll_columns(path: str | Path, token_column: int = 0, tag_column: int = -1,
                       what: str = "CoNLL column file") -> list[Sentence]:
    """Sentences of a CoNLL-2003-style file: whitespace-separated columns, one word a line, a blank line between
    sentences; `-DOCSTART-` lines are skipped. The word is `token_column`, the tag `tag_column` (negative counts
    from the end), both 0-based."""
    path = Path(path)
    width = None  # the number of columns of the first word line; every word line must have as many
    needed = max(token_column if token_column >= 0 else -token_column - 1,
                 tag_column if tag_column >= 0 else -tag_column - 1) + 1

    def parse(number: int, line: str) -> tuple[str, str] | None:
        nonlocal width
        columns = line.split()
        if columns[0] == "-DOCSTART-":
            return None
        if len(columns) < max(needed, 2):
            raise ResourceFormatError(
                f"{what} '{path}' line {number}: {len(columns)} column{'s' if len(columns) != 1 else ''} but the "
                f"word is column {token_column} and the tag column {tag_column} (0-based, negative from the end) "
                f"and a line needs a word and a tag. A line looks like '{COLUMNS_EXAMPLE}' (word first, tag last), "
                "with a blank line between sentences.")
        if width is None:
            width = len(columns)
        elif len(columns) != width:
            raise ResourceFormatError(
                f"{what} '{path}' line {number}: {len(columns)} columns where the first word line had {width}. "
                f"Every word line needs the same columns, e.g. '{COLUMNS_EXAMPLE}'; a token containing a space "
                "cannot be read.")
        return columns[token_column], columns[tag_column]

    return _read_sentences(path, what, parse, "Give a CoNLL-2003-style file with lines like "
                                              f"'{COLUMNS_EXAMPLE}' and a blank line between sentences.")
