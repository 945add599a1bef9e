"""Splitting text into words, for languages written with spaces and without.

Word vectors, dictionary lookups and code-switching all need a text's words. For languages written with spaces a
word is a run of letters and digits (with inner hyphens and apostrophes) and every other non-space character is a
word of its own (`WORDS`). In Chinese, Japanese and Thai such a run is a whole clause, so a dictionary word is
never a word of the text; those languages get a kept segmenter instead (`LANGUAGE_SEGMENTERS`), chosen by the
language's ISO 639 code, or by name:

- `words`: the regular expression above (the default for every other language);
- `jieba`: Chinese (the jieba package's accurate mode);
- `fugashi`: Japanese (MeCab through fugashi, with the unidic-lite dictionary);
- `pythainlp`: Thai (PyThaiNLP's default word tokenizer).

A segmenter's pieces are split again by `WORDS`, so punctuation is a word of its own whichever segmenter ran and
whitespace never is one. The packages are imported when a segmenter is first used; a missing one is an error that
names the `pip install` that fixes it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Callable

from langswap.errors import ConfigError

WORDS = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]", re.UNICODE)

# language code -> the segmenter its text gets by default (every other language: `words`)
LANGUAGE_SEGMENTERS = {"zh": "jieba", "ja": "fugashi", "th": "pythainlp"}
PACKAGES = {"jieba": "jieba", "fugashi": "fugashi unidic-lite", "pythainlp": "pythainlp"}
SEGMENTER_NAMES = ("auto", "words", *PACKAGES)


def _jieba() -> Callable[[str], list[str]]:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    return lambda line: jieba.lcut(line, HMM=True)


def _fugashi() -> Callable[[str], list[str]]:
    import fugashi

    tagger = fugashi.Tagger()
    return lambda line: [word.surface for word in tagger(line)]


def _pythainlp() -> Callable[[str], list[str]]:
    from pythainlp.tokenize import word_tokenize

    return lambda line: word_tokenize(line, keep_whitespace=False)


_FACTORIES = {"jieba": _jieba, "fugashi": _fugashi, "pythainlp": _pythainlp}


@dataclass(frozen=True)
class Segmenter:
    """Splits one line into words; `name` says which segmenter (`words` or a package's)."""

    name: str
    _split: Callable[[str], list[str]] | None = None

    def __call__(self, line: str) -> list[str]:
        if self._split is None:
            return WORDS.findall(line)
        return [word for piece in self._split(line) for word in WORDS.findall(piece)]


def segmenter_name(name: str = "auto", language: str | None = None) -> str:
    """The segmenter `name` stands for: itself, or for `auto` the language's (`words` without a language)."""
    if name not in SEGMENTER_NAMES:
        raise ConfigError(f"unknown word segmenter {name!r}; choose one of: {', '.join(SEGMENTER_NAMES)}.")
    if name != "auto":
        return name
    code = (language or "").split("-")[0].split("_")[0].lower()
    return LANGUAGE_SEGMENTERS.get(code, "words")


def segmenter(name: str = "auto", language: str | None = None) -> Segmenter:
    """A `Segmenter` by name, or for `auto` the one of `language` (see the module docstring)."""
    resolved = segmenter_name(name, language)
    if resolved == "words":
        return Segmenter("words")
    try:
        split = _FACTORIES[resolved]()
    except ImportError as error:
        raise ConfigError(f"the {resolved} word segmenter{f' (for {language!r})' if language else ''} needs a "
                          f"package that is not installed ({error}): pip install {PACKAGES[resolved]}, or choose "
                          "the segmenter `words`.") from error
    return Segmenter(resolved, split)
