"""Bilingual dictionaries: `source<TAB>target` files (MUSE, FreeDict), case variants and coverage.

A line may also be `source target` separated by a single space (MUSE's own files). Lines starting with `#` and blank
lines are skipped. Not handled: multi-word entries are kept as given, so they only match vectors that have them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langswap.errors import MissingResourceError, ResourceFormatError, VocabularyError
from langswap.resources.text import read_lines


@dataclass
class Dictionary:
    pairs: list[tuple[str, str]]
    name: str = "dictionary"

    @classmethod
    def load(cls, path: str | Path) -> "Dictionary":
        path = Path(path)
        if not path.is_file():
            raise MissingResourceError(f"dictionary '{path}' does not exist; give a file of source<TAB>target lines.")
        pairs, bad = [], 0
        for line in read_lines(path, what="dictionary"):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t") if "\t" in line else line.split(" ")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                bad += 1
                continue
            pairs.append((parts[0].strip(), parts[1].strip()))
        if not pairs:
            raise ResourceFormatError(f"dictionary '{path}' has no source<TAB>target lines ({bad} lines of another "
                                      "shape). Write one pair per line, the two words separated by a tab.")
        return cls(pairs, path.name)

    def __len__(self) -> int:
        return len(self.pairs)


def case_variants(word: str) -> list[str]:
    """The word as given, lower-cased and title-cased, without repeats (WECHSEL's variants)."""
    out = []
    for variant in (word, word.lower(), word.title()):
        if variant not in out:
            out.append(variant)
    return out


@dataclass
class Coverage:
    entries: int
    entries_covered: int
    pairs: list[tuple[str, str]]  # unique (source word, target word) both in the vectors, case variants included

    def report(self) -> dict:
        return {"dictionary_entries": self.entries, "entries_covered": self.entries_covered,
                "covered_fraction": round(self.entries_covered / max(self.entries, 1), 4),
                "word_pairs": len(self.pairs)}


def coverage(dictionary: Dictionary, source_vectors, target_vectors, variants: bool = True) -> Coverage:
    """Pairs with both words known to the vectors (trying case variants of both sides)."""
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    covered = 0
    for source_word, target_word in dictionary.pairs:
        hit = False
        source_options = case_variants(source_word) if variants else [source_word]
        target_options = case_variants(target_word) if variants else [target_word]
        for source_form in source_options:
            if source_vectors.word_id(source_form) < 0:
                continue
            for target_form in target_options:
                if target_vectors.word_id(target_form) < 0:
                    continue
                hit = True
                if (source_form, target_form) not in seen:
                    seen.add((source_form, target_form))
                    pairs.append((source_form, target_form))
        covered += hit
    return Coverage(len(dictionary), covered, pairs)


def require_coverage(dictionary: Dictionary, source_vectors, target_vectors, variants: bool = True) -> Coverage:
    """`coverage`, or a VocabularyError saying what to check when not one pair has both words in the vectors."""
    covered = coverage(dictionary, source_vectors, target_vectors, variants=variants)
    if not covered.pairs:
        raise VocabularyError(
            f"none of the {len(dictionary):,} pairs of dictionary '{dictionary.name}' has both words in the word "
            f"vectors ({source_vectors.name}, {target_vectors.name}). Check that the dictionary is source<TAB>target "
            "(not reversed) and that the vectors are for these two languages.")
    return covered
