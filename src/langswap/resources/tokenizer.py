"""Training a target tokenizer of the source model's family (`langswap tokenizer`).

`train_new_from_iterator` keeps the source tokenizer's normaliser, pre-tokeniser, decoder, post-processor and special
tokens, so the new tokenizer is of the same family (byte-level BPE stays byte-level BPE, SentencePiece stays
SentencePiece, WordPiece stays WordPiece) and its special tokens keep their roles. The vocabulary size defaults to
the source's.

Byte fallback (Llama-2, Mistral: BPE that spells unknown characters as `<0xNN>` byte tokens) needs the 256 byte tokens
in the model's vocabulary, where the source has them as ordinary entries; the trainer keeps the flag but drops the
entries, so every unseen character would become `<unk>`. They are put back (at the end of the vocabulary, so no
trained id moves) and the trained part is 256 tokens smaller, keeping the requested size.

Not handled: slow tokenizers (no Rust trainer).
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from langswap.resources.text import read_text_lines

logger = logging.getLogger(__name__)


def train_tokenizer(source_tokenizer, text_path: str | Path, vocab_size: int | None = None,
                    max_lines: int | None = None, progress: bool = False):
    """A tokenizer like `source_tokenizer`, trained on the lines of `text_path` (UTF-8, optionally .gz)."""
    from langswap.errors import VocabularyError

    if not getattr(source_tokenizer, "is_fast", False):  # before the text is read
        raise VocabularyError("training a tokenizer needs a fast source tokenizer (tokenizer.json).")
    lines = read_text_lines(text_path, what="tokenizer training text", max_lines=max_lines)
    tokenizer = train_tokenizer_on_lines(source_tokenizer, lines, vocab_size, progress)
    logger.info("trained a %d-token tokenizer on %d lines of %s", len(tokenizer), len(lines), text_path)
    return tokenizer


def train_tokenizer_on_lines(source_tokenizer, lines: list[str], vocab_size: int | None = None,
                             progress: bool = False):
    """`train_tokenizer` on lines in memory."""
    from langswap.errors import VocabularyError

    if not getattr(source_tokenizer, "is_fast", False):
        raise VocabularyError("training a tokenizer needs a fast source tokenizer (tokenizer.json).")
    vocab_size = vocab_size or len(source_tokenizer)

    def batches(size: int = 1000):
        for start in range(0, len(lines), size):
            yield lines[start:start + size]

    byte_tokens = _byte_fallback_tokens(source_tokenizer)
    if byte_tokens and vocab_size <= len(byte_tokens) + 1:
        raise VocabularyError(f"vocab_size {vocab_size} leaves no room beside the {len(byte_tokens)} byte-fallback "
                              "tokens this tokenizer family needs; ask for a larger vocabulary.")
    tokenizer = source_tokenizer.train_new_from_iterator(batches(), vocab_size=vocab_size - len(byte_tokens),
                                                         length=len(lines), show_progress=progress)
    if byte_tokens:
        tokenizer = _add_byte_tokens(tokenizer, byte_tokens)
    return tokenizer


def _byte_fallback_tokens(tokenizer) -> list[str]:
    """The `<0xNN>` tokens of a byte-fallback BPE tokenizer's model vocabulary ([] for any other tokenizer)."""
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        return []
    return [token for token in (f"<0x{byte:02X}>" for byte in range(256)) if token in model["vocab"]]


def _add_byte_tokens(tokenizer, byte_tokens: list[str]):
    """`tokenizer` with the byte tokens it lacks appended to its model vocabulary (reloaded through save_pretrained,
    so the wrapper keeps its special tokens and settings)."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    missing = [token for token in byte_tokens if token not in vocab]
    if not missing:
        return tokenizer
    next_id = 1 + max([*vocab.values(), *(entry["id"] for entry in spec.get("added_tokens", []))])
    vocab.update({token: next_id + offset for offset, token in enumerate(missing)})
    return with_tokenizer_json(tokenizer, spec)


def with_tokenizer_json(tokenizer, spec: dict):
    """`tokenizer` with its tokenizer.json replaced by `spec`, reloaded through save_pretrained, so the wrapper keeps
    its special tokens, settings and chat template."""
    with tempfile.TemporaryDirectory(prefix="langswap-tokenizer-") as folder:
        tokenizer.save_pretrained(folder)
        (Path(folder) / "tokenizer.json").write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
        return type(tokenizer).from_pretrained(folder)
