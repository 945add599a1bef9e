"""Training a target tokenizer of the source model's family (`langswap tokenizer`).

`train_new_from_iterator` keeps the source tokenizer's normaliser, pre-tokeniser, decoder, post-processor and special
tokens, so the new tokenizer is of the same family (byte-level BPE stays byte-level BPE, SentencePiece stays
SentencePiece, WordPiece stays WordPiece) and its special tokens keep their roles. The vocabulary size defaults to
the source's. Not handled: slow tokenizers (no Rust trainer).
"""

from __future__ import annotations

import logging
from pathlib import Path

from langswap.resources.text import read_text_lines

logger = logging.getLogger(__name__)


def train_tokenizer(source_tokenizer, text_path: str | Path, vocab_size: int | None = None,
                    max_lines: int | None = None, progress: bool = False):
    """A tokenizer like `source_tokenizer`, trained on the lines of `text_path` (UTF-8, optionally .gz)."""
    from langswap.errors import VocabularyError

    if not getattr(source_tokenizer, "is_fast", False):
        raise VocabularyError("training a tokenizer needs a fast source tokenizer (tokenizer.json).")
    lines = read_text_lines(text_path, what="tokenizer training text", max_lines=max_lines)
    vocab_size = vocab_size or len(source_tokenizer)

    def batches(size: int = 1000):
        for start in range(0, len(lines), size):
            yield lines[start:start + size]

    tokenizer = source_tokenizer.train_new_from_iterator(batches(), vocab_size=vocab_size,
                                                         length=len(lines), show_progress=progress)
    logger.info("trained a %d-token tokenizer on %d lines of %s", len(tokenizer), len(lines), text_path)
    return tokenizer
