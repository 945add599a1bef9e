"""Bilingual dictionaries: `source<TAB>target` files (MUSE, FreeDict), case variants and coverage.

A line may also be `source target` separated by a single space (MUSE's own files). Lines starting with `#` and blank
lines are skipped; any other line that is not two non-empty fields is an error naming it (a dictionary that is half
something else is more likely the wrong file than a dictionary with typos). Not handled: multi-word entries are kept
as given, so they only match vectors and vocabularies that have them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from langswap.errors import MissingResourceError, ResourceFormatError, VocabularyError
from langswap.resources.text import read_lines


@dataclass
class Dictionary:
    pairs: list[tuple[str, str]]
    name: str = "dictionary"
    _by_target: dict[str, list[str]] | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def load(cls, path: str | Path) -> "Dictionary":
        path = Path(path)
        if not path.is_file():
            raise MissingResourceError(f"dictionary '{path}' does not exist; give a file of source<TAB>target lines.")
        pairs, bad = [], []
        for number, line in enumerate(read_lines(path, what="dictionary"), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t") if "\t" in line else line.split(" ")
            if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
                bad.append((number, line))
                continue
            pairs.append((parts[0].strip(), parts[1].strip()))
        if not pairs:
            raise ResourceFormatError(f"dictionary '{path}' has no source<TAB>target lines ({len(bad)} lines of "
                                      "another shape). Write one pair per line, the two words separated by a tab.")
        if bad:
            shown = "; ".join(f"line {number}: {line[:60]!r}" for number, line in bad[:3])
            raise ResourceFormatError(
                f"dictionary '{path}' has {len(bad)} line(s) that are not two non-empty fields ({shown}). Write one "
                "pair per line, source<TAB>target (a multi-word entry needs the tab), or delete those lines.")
        return cls(pairs, path.name)

    def __len__(self) -> int:
        return len(self.pairs)

    def translations(self) -> dict[str, list[str]]:
        """Target word -> its source translations, most frequent first (lines giving the pair; ties in dictionary
        order). Computed once per dictionary."""
        if self._by_target is None:
            counts: dict[str, Counter] = {}
            for source, target in self.pairs:
                counts.setdefault(target, Counter())[source] += 1
            self._by_target = {target: [source for source, _ in counter.most_common()]
                               for target, counter in counts.items()}
        return self._by_target

    def translations_of(self, word: str) -> list[str]:
        """The source translations of target `word` as written, then of its lower- and title-cased variants
        (`case_variants`), without repeats; empty when it is no dictionary word."""
        by_target = self.translations()
        found: list[str] = []
        for variant in case_variants(word):
            found += [source for source in by_target.get(variant, ()) if source not in found]
        return found


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


def check_direction(dictionary: Dictionary, source_words, target_words, source_what: str = "the source vocabulary",
                    target_what: str = "the target vocabulary") -> dict:
    """How many of the dictionary's source-side and target-side words (case variants tried) are in `source_words`
    and in `target_words` (sets of words, e.g. a vocabulary's whole-word tokens). A VocabularyError when none of its
    words is in either, or when its source side is found more on the target side and its target side more on the
    source side: a dictionary given the wrong way round. Returns the counts, for the record."""
    def found(words, known) -> int:
        return sum(any(variant in known for variant in case_variants(word)) for word in words)

    sources = {source for source, _ in dictionary.pairs}
    targets = {target for _, target in dictionary.pairs}
    counts = {"source_words": len(sources), "target_words": len(targets),
              "source_side_in_source": found(sources, source_words),
              "target_side_in_target": found(targets, target_words),
              "source_side_in_target": found(sources, target_words),
              "target_side_in_source": found(targets, source_words)}
    straight = counts["source_side_in_source"] + counts["target_side_in_target"]
    crossed = counts["source_side_in_target"] + counts["target_side_in_source"]
    if straight + crossed == 0:
        raise VocabularyError(
            f"none of the {len(dictionary):,} pairs of dictionary '{dictionary.name}' has a word in {source_what} or "
            f"in {target_what}. Check that the dictionary is for these two languages.")
    if (counts["source_side_in_target"] > counts["source_side_in_source"]
            and counts["target_side_in_source"] > counts["target_side_in_target"] and crossed > 1.5 * straight):
        raise VocabularyError(
            f"dictionary '{dictionary.name}' looks reversed: {counts['source_side_in_target']:,} of its "
            f"{len(sources):,} source-side words are in {target_what} (only {counts['source_side_in_source']:,} in "
            f"{source_what}), and {counts['target_side_in_source']:,} of its {len(targets):,} target-side words are "
            f"in {source_what} (only {counts['target_side_in_target']:,} in {target_what}). Give it as "
            "source<TAB>target, the source model's language first (swap the columns).")
    return counts
