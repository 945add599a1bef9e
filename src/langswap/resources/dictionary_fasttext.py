"""Bilingual fastText vectors from a dictionary alone (Tik-to-Tok): the symmetrised dictionary corpus and its model.

Tik-to-Tok (Remy et al., 2023) maps the tokens of two vocabularies through one fastText model trained on nothing but
a bilingual dictionary, so a language with a dictionary and almost no text still gets subword vectors in the same
space as the source language. This module builds that model:

1. **The corpus** (`write_dictionary_corpus`). Every word carries its language's tags, one rarely used character at
   its start and one at its end (`LanguageTags`), so `⸂gift⸃` (English) and `⸄Gift⸅` (German) are different words
   whose n-grams still share the middle. Each dictionary pair (s, t) gives four two-word lines, `S T`, `T S`, `S S`
   and `T T`: a word is paired as often with itself as with its translation(s), in both orders, so a word and its
   translation get the same context words and hence close vectors. For a compounding language (German, Dutch by
   default: `COMPOUNDING_LANGUAGES`) every word of that side is also written with its start tag left out (`Gift⸅`,
   how the word looks at the end of a compound) and with its end tag left out (`⸄Gift`, its start), paired with the
   translation as the whole word is.
2. **The model** (`train_bilingual_fasttext`): skip-gram, 64 dimensions, character n-grams of 4 to 7, 5 epochs,
   otherwise fastText's defaults, trained by the package's fastText runner (`fasttext_train`), with one exception:
   `minCount` 1, since at fastText's default of 5 a word with one translation (4 occurrences) would get no vector.
3. **The cache** (`bilingual_fasttext`): the model is kept under a digest of everything it depends on (the
   dictionary's bytes, the tags, which sides compound, the fastText options, the corpus format), in
   `cache_dir()/bilingual-fasttext/`, and reused.

Taken from the method's description (the paper's text could not be read): the symmetrised two-word corpus, a word
paired as often with itself as with its translations, language tags at word start and end, copies without a start or
end tag for compounding languages, and the fastText settings. Decided here: the tag characters (the substitution brackets
U+2E02..U+2E05, which no tokenizer of ordinary text is likely to hold), the four lines per pair, `minCount` 1, and
that a compounding side's partial copies are paired with the other side's whole word.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from langswap.files import cache_dir, hash_file
from langswap.resources.dictionary import Dictionary
from langswap.resources.fasttext_train import FastTextConfig, train_fasttext

logger = logging.getLogger(__name__)

COMPOUNDING_LANGUAGES = frozenset({"de", "nl"})  # languages whose words are glued into compounds by default
CORPUS_FORMAT = 1  # part of the cache digest: changes when the corpus written for the same inputs changes


@dataclass(frozen=True)
class LanguageTags:
    """The characters that open and close every word of one language in the bilingual corpus."""

    start: str
    end: str

    def word(self, text: str) -> str:
        return f"{self.start}{text}{self.end}"

    def token(self, text: str, word_start: bool) -> str:
        """A token's text as the corpus spells a piece of a word: a word-start token opens a word (start tag); a
        continuation does not (end tag: in a compounding language it is how a word looks at a compound's end)."""
        return f"{self.start}{text}" if word_start else f"{text}{self.end}"


SOURCE_TAGS = LanguageTags("\u2e02", "\u2e03")  # ⸂ ⸃
TARGET_TAGS = LanguageTags("\u2e04", "\u2e05")  # ⸄ ⸅

# fastText's defaults except what Tik-to-Tok sets (model, dim, minn, maxn, epoch) and minCount (see the module doc)
BILINGUAL_FASTTEXT = FastTextConfig(model="skipgram", dim=64, minn=4, maxn=7, epoch=5, minCount=1, bucket=2_000_000,
                                    lr=0.05)


def compounds(language: str | None, option: bool | None) -> bool:
    """Whether a side adds partial-word copies: `option` when given, else whether `language` compounds."""
    if option is not None:
        return option
    return (language or "").split("-")[0].split("_")[0].lower() in COMPOUNDING_LANGUAGES


def _forms(word: str, tags: LanguageTags, compounding: bool) -> list[str]:
    whole = tags.word(word)
    return [whole, f"{word}{tags.end}", f"{tags.start}{word}"] if compounding else [whole]


def write_dictionary_corpus(dictionary: Dictionary, path: str | Path, source_compounds: bool = False,
                            target_compounds: bool = False, source_tags: LanguageTags = SOURCE_TAGS,
                            target_tags: LanguageTags = TARGET_TAGS) -> int:
    """Write the symmetrised corpus of `dictionary` to `path`; returns the number of lines.

    Words are written as given (multi-word entries keep their spaces inside the tags, so fastText reads their parts
    as words of the line). Pairs repeated in the dictionary are written once."""
    lines = 0
    seen: set[tuple[str, str]] = set()
    with open(path, "w", encoding="utf-8") as out:
        for source, target in dictionary.pairs:
            if (source, target) in seen:
                continue
            seen.add((source, target))
            source_forms = _forms(source, source_tags, source_compounds)
            target_forms = _forms(target, target_tags, target_compounds)
            whole_source, whole_target = source_forms[0], target_forms[0]
            pairs = [(whole_source, whole_target)] + [(form, whole_target) for form in source_forms[1:]] + [
                (whole_source, form) for form in target_forms[1:]]
            for s, t in pairs:
                out.write(f"{s} {t}\n{t} {s}\n{s} {s}\n{t} {t}\n")
                lines += 4
    return lines


def corpus_digest(dictionary_path: str | Path, source_compounds: bool, target_compounds: bool,
                  options: FastTextConfig) -> str:
    """What a bilingual model depends on, hashed: the dictionary's bytes and every option of corpus and training."""
    digest = hash_file(hashlib.sha256(), dictionary_path)
    digest.update(json.dumps({"format": CORPUS_FORMAT, "tags": [dataclasses.astuple(SOURCE_TAGS),
                                                                dataclasses.astuple(TARGET_TAGS)],
                              "source_compounds": source_compounds, "target_compounds": target_compounds,
                              "fasttext": dataclasses.asdict(options)}, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def train_bilingual_fasttext(dictionary_path: str | Path, output: str | Path, source_compounds: bool = False,
                             target_compounds: bool = False, options: FastTextConfig = BILINGUAL_FASTTEXT,
                             progress: bool = False, overwrite: bool = True) -> Path:
    """Write the symmetrised corpus of the dictionary at `dictionary_path` and train the bilingual fastText model on
    it into `output` (.bin); returns the path. A bad dictionary line is an error before any training."""
    dictionary = Dictionary.load(dictionary_path)
    with tempfile.TemporaryDirectory(prefix="langswap-dictionary-corpus-") as workdir:
        corpus = Path(workdir) / "corpus.txt"
        lines = write_dictionary_corpus(dictionary, corpus, source_compounds, target_compounds)
        logger.info("bilingual fastText: %s lines of dictionary corpus from %s pairs of %s (compounds: source %s, "
                    "target %s)", f"{lines:,}", f"{len(dictionary):,}", dictionary.name, source_compounds,
                    target_compounds)
        return train_fasttext(corpus, output, options, progress=progress, overwrite=overwrite, split_words=False)


def bilingual_fasttext(dictionary_path: str | Path, source_compounds: bool = False, target_compounds: bool = False,
                       options: FastTextConfig = BILINGUAL_FASTTEXT, cache: str | Path | None = None,
                       progress: bool = False) -> Path:
    """The bilingual model of the dictionary at `dictionary_path`, from the cache (`cache_dir()/bilingual-fasttext`,
    or `cache`) when it was built before with the same inputs, else trained and kept there."""
    folder = Path(cache) if cache is not None else cache_dir() / "bilingual-fasttext"
    path = folder / f"{corpus_digest(dictionary_path, source_compounds, target_compounds, options)}.bin"
    if path.is_file():
        logger.info("bilingual fastText of %s from the cache: %s", dictionary_path, path)
        return path
    folder.mkdir(parents=True, exist_ok=True)
    # a second process building the same file meanwhile is refused by the file's lock, naming the first
    return train_bilingual_fasttext(dictionary_path, path, source_compounds, target_compounds, options,
                                    progress=progress)
