"""Token-level fastText vectors: target text split by the target tokenizer, one fastText word per token (FOCUS).

FOCUS (Dobler and de Melo, 2023) places the target tokens in a space of their own: a fastText model trained on
target-language text in which every word is a token of the target tokenizer, so tokens that occur in the same
contexts get close vectors. This module builds that model:

1. **The corpus** (`write_token_corpus`): each line of the text tokenised by the target tokenizer (no special
   tokens) and written as the tokens' own spellings (`Ġhaus`, `▁Haus`, `##haus`), separated by spaces. fastText
   splits words at ASCII whitespace only, so the few tokens that hold one (`\\n`, a space in a SentencePiece
   user token) write it as its Unicode control picture (`␊`, `␠`): `token_word` is the one spelling corpus and
   lookups share.
2. **Enough text** (`check_coverage`): fastText gives a vector of its own only to words seen `minCount` times. When
   fewer than `MIN_COVERAGE` of the vocabulary's tokens reach it, the text is too small for token-level vectors, and
   the error says how many tokens of text would be needed at this text's rate.
3. **The model** (`train_token_fasttext`): FOCUS's settings (`FOCUS_FASTTEXT`: CBOW, dim 100, 3 epochs, minCount 10,
   10 negatives, the deepfocus package's defaults), trained by the package's fastText runner; beside it
   `<model>.tokens.json` records the digest of the tokenizer it was trained with, which `load_token_vectors`
   checks, so vectors of another tokenizer are refused instead of silently mislabelling every token.
4. **The cache** (`token_fasttext`): kept under a digest of the text's bytes, the tokenizer and the options, in
   `cache_dir()/token-fasttext/`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import tempfile
from pathlib import Path

import numpy as np

from langswap.errors import MissingResourceError, ResourceFormatError
from langswap.files import atomic_write_text, cache_dir, hash_file, refuse_existing
from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
from langswap.resources.text import read_lines
from langswap.resources.vectors import WordVectors

logger = logging.getLogger(__name__)

FOCUS_FASTTEXT = FastTextConfig(model="cbow", dim=100, epoch=3, minCount=10, neg=10)
MIN_COVERAGE = 0.1  # share of the vocabulary's tokens that must reach minCount in the text
CORPUS_FORMAT = 1  # part of the cache digest: changes when the corpus written for the same inputs changes
SIDECAR = ".tokens.json"
BATCH_LINES = 1000
_FASTTEXT_SPACE = {" ", "\n", "\r", "\t", "\v", "\f", "\0"}


def token_word(token: str) -> str:
    """A token's spelling as a fastText word: ASCII whitespace becomes its control picture (U+2400 + code)."""
    if not _FASTTEXT_SPACE.intersection(token):
        return token
    return "".join(chr(0x2400 + ord(c)) if c in _FASTTEXT_SPACE else c for c in token)


def token_words(tokenizer) -> list[str]:
    """The fastText word of every id of `tokenizer` (len(tokenizer) of them)."""
    return [token_word(token or "") for token in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))]


def tokenizer_digest(tokenizer) -> str:
    """A digest of what the tokenizer does: its fast backend's full description (vocabulary, merges, normalizer,
    pre-tokenizer), or its vocabulary where it has no fast backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def write_token_corpus(text_path: str | Path, tokenizer, out_path: str | Path) -> np.ndarray:
    """Write the tokenised text to `out_path`, a line per non-empty line; returns the count of every token id."""
    words = token_words(tokenizer)
    counts = np.zeros(len(words), dtype=np.int64)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])

    def flush(out, batch):
        seen = []
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            ids = [i for i in ids if i not in special]
            if ids:
                seen.extend(ids)
                out.write(" ".join(words[i] for i in ids) + "\n")
        if seen:
            counts[:] += np.bincount(np.asarray(seen, dtype=np.int64), minlength=len(words))[:len(words)]

    with open(out_path, "w", encoding="utf-8") as out:
        batch = []
        for line in read_lines(text_path, what="target text"):
            if line.strip():
                batch.append(line)
            if len(batch) == BATCH_LINES:
                flush(out, batch)
                batch = []
        if batch:
            flush(out, batch)
    return counts


def check_coverage(counts: np.ndarray, tokenizer, min_count: int, text_path) -> int:
    """Refuse text in which fewer than MIN_COVERAGE of the tokenizer's (non-special) tokens occur `min_count` times;
    returns how many do."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    ordinary = np.array([i for i in range(len(counts)) if i not in special], dtype=np.int64)
    covered = int((counts[ordinary] >= min_count).sum())
    needed = int(np.ceil(MIN_COVERAGE * len(ordinary)))
    if covered < needed:
        total = int(counts.sum())
        # the text length at which `needed` tokens would reach min_count, if coverage grew in proportion to length
        estimate = int(total * needed / max(covered, 1))
        raise MissingResourceError(
            f"'{text_path}' is too small for token-level vectors: it holds {total:,} tokens of the target tokenizer, "
            f"and only {covered:,} of its {len(ordinary):,} tokens occur at least {min_count} times (minCount), "
            f"where at least {needed:,} ({MIN_COVERAGE:.0%}) must. Give more target-language text (about "
            f"{estimate:,} tokens at this text's rate, {estimate / max(total, 1):.0f}x this text), or lower "
            "resources.token_min_count.")
    return covered


def train_token_fasttext(text_path: str | Path, tokenizer, output: str | Path,
                         options: FastTextConfig = FOCUS_FASTTEXT, progress: bool = False,
                         overwrite: bool = True) -> dict:
    """Tokenise `text_path` with `tokenizer` and train the token-level model into `output` (.bin) and its sidecar;
    returns the sidecar's record. Text too small for `options.minCount` is refused before training."""
    output = Path(output)
    refuse_existing(output, overwrite, "output file")  # before the text is tokenised
    with tempfile.TemporaryDirectory(prefix="langswap-token-corpus-") as workdir:
        corpus = Path(workdir) / "corpus.txt"
        counts = write_token_corpus(text_path, tokenizer, corpus)
        covered = check_coverage(counts, tokenizer, options.minCount, text_path)
        logger.info("token-level fastText: %s tokens of %s; %s of %s tokens seen at least %d times",
                    f"{int(counts.sum()):,}", text_path, f"{covered:,}", f"{len(counts):,}", options.minCount)
        train_fasttext(corpus, output, options, progress=progress, overwrite=overwrite, split_words=False)
    record = {"tokenizer_digest": tokenizer_digest(tokenizer), "text": str(text_path), "tokens": int(counts.sum()),
              "covered_tokens": covered, "vocabulary": len(counts), "fasttext": dataclasses.asdict(options)}
    atomic_write_text(Path(str(output) + SIDECAR), json.dumps(record, indent=2, ensure_ascii=False))
    return record


def text_digest(text_path: str | Path, tokenizer, options: FastTextConfig) -> str:
    """What a token-level model depends on, hashed: the text's bytes, the tokenizer and every training option."""
    digest = hash_file(hashlib.sha256(), text_path)
    digest.update(json.dumps({"format": CORPUS_FORMAT, "tokenizer": tokenizer_digest(tokenizer),
                              "fasttext": dataclasses.asdict(options)}, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def token_fasttext(text_path: str | Path, tokenizer, options: FastTextConfig = FOCUS_FASTTEXT,
                   cache: str | Path | None = None, progress: bool = False) -> Path:
    """The token-level model of `text_path` under `tokenizer`, from the cache (`cache_dir()/token-fasttext`, or
    `cache`) when built before from the same inputs, else trained and kept there."""
    folder = Path(cache) if cache is not None else cache_dir() / "token-fasttext"
    path = folder / f"{text_digest(text_path, tokenizer, options)}.bin"
    if path.is_file() and Path(str(path) + SIDECAR).is_file():
        logger.info("token-level fastText of %s from the cache: %s", text_path, path)
        return path
    folder.mkdir(parents=True, exist_ok=True)
    train_token_fasttext(text_path, tokenizer, path, options, progress=progress)
    return path


def load_token_vectors(path: str | Path, tokenizer):
    """The `WordVectors` of a token-level model, checked to belong to `tokenizer` by its sidecar."""
    path = Path(path)
    sidecar = Path(str(path) + SIDECAR)
    if not sidecar.is_file():
        raise MissingResourceError(
            f"'{path}' has no '{sidecar.name}' beside it, which says which tokenizer its tokens are from. Train "
            "token-level vectors with `langswap fasttext TEXT --tokenizer TARGET_TOKENIZER --output FILE.bin`.")
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
        trained_with = record["tokenizer_digest"]
    except (ValueError, KeyError) as error:
        raise ResourceFormatError(f"'{sidecar}' is not a token-vectors record ({error}); train the vectors "
                                  "again.") from None
    if trained_with != tokenizer_digest(tokenizer):
        raise MissingResourceError(
            f"token-level vectors '{path}' were trained with another tokenizer than the target tokenizer (digest "
            f"{trained_with}, the target's {tokenizer_digest(tokenizer)}): their words are another vocabulary's "
            "tokens. Train them with this tokenizer (`langswap fasttext TEXT --tokenizer TARGET_TOKENIZER`), or "
            "leave resources.token_vectors unset to build them from resources.token_text.")
    vectors = WordVectors.load(path)
    return vectors, record
