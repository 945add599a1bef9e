"""Canonical token forms across tokenizer families.

Every token of a Hugging Face *fast* tokenizer maps to its surface bytes and a word-start flag:

- byte-level BPE (GPT-2, RoBERTa, Llama-3, SmolLM): characters go back through GPT-2's byte-to-unicode table;
  a leading space (`Ġ`) marks a word start. Tokens that are partial UTF-8 keep their bytes and have no text.
- SentencePiece (Llama-2, T5, XLM-R; BPE or Unigram): `▁` marks a word start; `<0xNN>` byte-fallback tokens are
  the single byte NN.
- WordPiece (BERT): `##` marks a continuation; every other token starts a word.

Special tokens are recognised by role (bos, eos, unk, pad, mask, cls, sep), from the tokenizer's own attributes,
never by their strings, so `<|endoftext|>` and `</s>` both count as `eos` where the tokenizer says so. Added tokens
that are not special keep their literal text.

Exact-match overlap (`Vocabulary.key`) and the text that gets a word vector (`Vocabulary.word_text`) both come from
here. Not handled: slow (Python) tokenizers, which must be converted first, and normalisers that change text in
ways a surface form cannot show (lower-casing is fine; accent stripping means `é` and `e` never match).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

from langswap.errors import VocabularyError

SPECIAL_ROLES = ("bos", "eos", "unk", "pad", "mask", "cls", "sep")
ROLE_PREFERENCE = ("eos", "sep", "bos", "cls", "mask", "pad", "unk")  # which role a multi-role special token copies

BYTE_LEVEL = "byte_level"
SENTENCEPIECE = "sentencepiece"
WORDPIECE = "wordpiece"
PLAIN = "plain"

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    codes = printable[:]
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, codes)))


@lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    return {char: byte for byte, char in bytes_to_unicode().items()}


@dataclass(frozen=True)
class CanonicalToken:
    """One vocabulary entry. `raw` is the surface text as UTF-8 bytes without the word-start marker."""

    id: int
    token: str
    raw: bytes
    word_start: bool
    special: bool = False
    roles: tuple[str, ...] = ()

    @property
    def text(self) -> str | None:
        """Surface text, or None for a token that is a partial UTF-8 sequence."""
        try:
            return self.raw.decode("utf-8")
        except UnicodeDecodeError:
            return None

    @property
    def key(self) -> tuple[bytes, bool] | None:
        """What must be equal for two tokens of different tokenizers to be the same token (None for specials)."""
        if self.special:
            return None
        return (self.raw, self.word_start)


def _component_types(node: dict | None) -> list[dict]:
    """Flatten a tokenizers pre_tokenizer/decoder/normalizer node, including Sequence members."""
    if not node:
        return []
    inner = node.get("pretokenizers") or node.get("decoders") or node.get("normalizers")
    if node.get("type") == "Sequence" and inner:
        return [part for child in inner for part in _component_types(child)]
    return [node]


def detect_family(tokenizer) -> tuple[str, dict]:
    """Return (family, details) from the fast tokenizer's own JSON description."""
    spec = json.loads(tokenizer.backend_tokenizer.to_str())
    model = spec.get("model") or {}
    parts = (_component_types(spec.get("pre_tokenizer")) + _component_types(spec.get("decoder"))
             + _component_types(spec.get("normalizer")))
    types = {part.get("type") for part in parts}
    if model.get("type") == "WordPiece":
        return WORDPIECE, {"prefix": model.get("continuing_subword_prefix") or "##"}
    if "ByteLevel" in types:
        return BYTE_LEVEL, {}
    metaspace = [p for p in parts if p.get("type") == "Metaspace"]
    replaces_space = any(p.get("type") == "Replace" and (p.get("pattern") or {}).get("String") == " "
                         and p.get("content") == "\u2581" for p in parts)
    if metaspace or replaces_space or model.get("type") == "Unigram":
        marker = metaspace[0].get("replacement", "\u2581") if metaspace else "\u2581"
        return SENTENCEPIECE, {"marker": marker, "byte_fallback": bool(model.get("byte_fallback"))}
    return PLAIN, {}


_ROLE_PREFIXES = tuple(f"{role}_" for role in SPECIAL_ROLES) + ("decoder_start_",)


def names_a_token(key: str) -> bool:
    """Whether a model config's `key` holds the id (or ids) of a token beside the roles: Gemma-3's
    `image_token_index`, `boi_token_index`; `image_token_id`, `video_token_id` (not `bos_token_id` and the other
    roles, which follow the tokenizer's own)."""
    return key.endswith(("_token_index", "_token_id", "_token_ids")) and not key.startswith(_ROLE_PREFIXES)


def special_token_roles(tokenizer) -> dict[str, int]:
    """Role -> token id, for each role the tokenizer defines."""
    roles = {}
    for role in SPECIAL_ROLES:
        token_id = getattr(tokenizer, f"{role}_token_id", None)
        if token_id is not None and getattr(tokenizer, f"{role}_token", None) is not None:
            roles[role] = int(token_id)
    return roles


def canonical_token(token_id: int, token: str, family: str, details: dict, added: set[str]) -> CanonicalToken:
    """The canonical form of one token: `token` its vocabulary string, `family` and `details` as `detect_family`
    gives them for its tokenizer, `added` the contents of the tokenizer's added tokens (stored literally)."""
    if token in added:  # added tokens are stored literally, whatever the family
        return CanonicalToken(token_id, token, token.encode("utf-8"), word_start=False)
    if family == BYTE_LEVEL:
        table = unicode_to_bytes()
        if all(char in table for char in token):
            raw = bytes(table[char] for char in token)
        else:
            raw = token.encode("utf-8")
        return _split_space(token_id, token, raw)
    if family == SENTENCEPIECE:
        match = _BYTE_FALLBACK.match(token)
        if match and details.get("byte_fallback"):
            return CanonicalToken(token_id, token, bytes([int(match.group(1), 16)]), word_start=False)
        return _split_space(token_id, token, token.replace(details["marker"], " ").encode("utf-8"))
    if family == WORDPIECE:
        prefix = details["prefix"]
        if token.startswith(prefix) and len(token) > len(prefix):
            return CanonicalToken(token_id, token, token[len(prefix):].encode("utf-8"), word_start=False)
        return CanonicalToken(token_id, token, token.encode("utf-8"), word_start=True)
    return CanonicalToken(token_id, token, token.encode("utf-8"), word_start=False)


def _split_space(token_id: int, token: str, raw: bytes) -> CanonicalToken:
    if raw.startswith(b" "):
        return CanonicalToken(token_id, token, raw[1:], word_start=True)
    return CanonicalToken(token_id, token, raw, word_start=False)


def canonical_tokens(tokenizer, token_ids) -> dict[int, CanonicalToken]:
    """The canonical forms of some token ids (special tokens not marked), without building a whole Vocabulary."""
    family, details = detect_family(tokenizer)
    added = {entry.content for entry in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values()}
    ids = sorted(set(token_ids))
    names = tokenizer.convert_ids_to_tokens(ids)
    return {token_id: canonical_token(token_id, name or "", family, details, added) for token_id, name in zip(ids, names)}


class Vocabulary:
    """The canonical forms of all tokens of one tokenizer, indexed by id (0 .. len(tokenizer) - 1)."""

    def __init__(self, tokenizer):
        if not getattr(tokenizer, "is_fast", False):
            raise VocabularyError(
                f"{type(tokenizer).__name__} is a slow (Python) tokenizer; langswap needs a fast one. Load it with "
                "AutoTokenizer.from_pretrained(..., use_fast=True), or save it once as a fast tokenizer.")
        self.tokenizer = tokenizer
        self.family, self.details = detect_family(tokenizer)
        self.roles = special_token_roles(tokenizer)
        size = len(tokenizer)
        beyond = sorted(token_id for token_id in tokenizer.get_vocab().values() if token_id >= size)
        if beyond:
            raise VocabularyError(
                f"the tokenizer has {size:,} tokens but gives ids up to {beyond[-1]:,} ({len(beyond):,} at or beyond "
                f"{size:,}, e.g. {beyond[:5]}): its ids have gaps, so a matrix of one row per token would miss rows "
                "it can emit. Renumber the vocabulary in tokenizer.json to 0 .. N-1.")
        names = tokenizer.convert_ids_to_tokens(list(range(size)))
        added_decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        added = {entry.content for entry in added_decoder.values()}
        special_ids = {i for i, entry in added_decoder.items() if entry.special} | set(self.roles.values())
        special_ids |= set(getattr(tokenizer, "all_special_ids", []) or [])
        roles_of: dict[int, list[str]] = {}
        for role, token_id in self.roles.items():
            roles_of.setdefault(token_id, []).append(role)
        tokens = []
        for token_id, name in enumerate(names):
            if name is None:  # an id the tokenizer never produces
                tokens.append(CanonicalToken(token_id, "", b"", word_start=False, special=True))
                continue
            canonical = canonical_token(token_id, name, self.family, self.details, added)
            if token_id in special_ids:
                canonical = CanonicalToken(token_id, name, name.encode("utf-8"), word_start=False, special=True,
                                           roles=tuple(roles_of.get(token_id, ())))
            tokens.append(canonical)
        self.tokens: list[CanonicalToken] = tokens
        self._index: dict[tuple[bytes, bool], int] | None = None
        self._literals: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, token_id: int) -> CanonicalToken:
        return self.tokens[token_id]

    def is_byte_fallback(self, token_id: int) -> bool:
        token = self.tokens[token_id]
        return self.family == SENTENCEPIECE and bool(_BYTE_FALLBACK.match(token.token)) and len(token.raw) == 1

    def index(self) -> dict[tuple[bytes, bool], int]:
        """Canonical key -> the lowest token id with that key; a SentencePiece `<0x41>` yields to a plain `A`."""
        if self._index is None:
            index: dict[tuple[bytes, bool], int] = {}
            ordered = sorted(self.tokens, key=lambda token: (self.is_byte_fallback(token.id), token.id))
            for token in ordered:
                if token.key is not None and token.key not in index:
                    index[token.key] = token.id
            self._index = index
        return self._index

    def lookup(self, token: CanonicalToken, other_family: str) -> int | None:
        """The id of this vocabulary's token equal to `token` of another vocabulary: the same literal entry when
        both tokenizers are of one family, else the same canonical form."""
        if token.key is None:
            return None
        if other_family == self.family:
            if self._literals is None:
                self._literals = {t.token: t.id for t in self.tokens if not t.special}
            same = self._literals.get(token.token)
            if same is not None:
                return same
        return self.index().get(token.key)

    def word_text(self, token_id: int) -> str | None:
        """The text a word vector is looked up for: the surface text without surrounding whitespace, or None for
        special tokens, partial UTF-8 and whitespace-only tokens."""
        token = self.tokens[token_id]
        if token.special:
            return None
        text = token.text
        if text is None:
            return None
        text = text.strip()
        return text or None

    def encode_surface(self, text: str, word_start: bool) -> list[int]:
        """Token ids of `text` in this tokenizer, as a word (`word_start`) or a word continuation."""
        return self.encode_surfaces([text], [word_start])[0]

    def encode_surfaces(self, texts: list[str], word_starts: list[bool]) -> list[list[int]]:
        """`encode_surface` of each text, the tokenizer called on batches of them (one call per token costs the
        tokenizer's per-call overhead 50,000 times for a vocabulary)."""
        found: list[list[int] | None] = [None] * len(texts)
        batch, where = [], []
        for position, (text, word_start) in enumerate(zip(texts, word_starts)):
            if self.family == WORDPIECE and not word_start:
                found[position] = self._wordpiece_continuation(text)
                continue
            batch.append(" " + text if self.family == BYTE_LEVEL and word_start else text)
            where.append(position)
        for start in range(0, len(batch), 8192):
            encoded = self.tokenizer(batch[start:start + 8192], add_special_tokens=False)["input_ids"]
            for position, ids in zip(where[start:start + 8192], encoded):
                if self.family == SENTENCEPIECE and not word_starts[position] and len(ids) > 1 \
                        and self.tokens[ids[0]].raw == b"":
                    ids = ids[1:]  # drop the lone "▁" SentencePiece puts before a word that is really a continuation
                found[position] = list(ids)
        return found

    def _wordpiece_continuation(self, text: str) -> list[int]:
        """WordPiece's greedy longest match, from "##" pieces only: the tokenizer itself would spell `text` as a
        word start ("ing" -> "in ##g" where "##ing" exists)."""
        normalizer = self.tokenizer.backend_tokenizer.normalizer
        text = normalizer.normalize_str(text) if normalizer is not None else text
        vocabulary, prefix = self.tokenizer.get_vocab(), self.details["prefix"]
        ids, start = [], 0
        while start < len(text):
            end = len(text)
            while end > start and prefix + text[start:end] not in vocabulary:
                end -= 1
            if end == start:  # no "##" piece spells it: the tokenizer's own spelling, as a word
                return self.tokenizer(text, add_special_tokens=False)["input_ids"]
            ids.append(vocabulary[prefix + text[start:end]])
            start = end
        return ids

    def summary(self) -> str:
        specials = sum(token.special for token in self.tokens)
        starts = sum(token.word_start for token in self.tokens)
        partial = sum(token.text is None for token in self.tokens)
        return (f"{self.family} vocabulary of {len(self):,}: {specials:,} special, {starts:,} word-start, "
                f"{partial:,} partial UTF-8")


def match_special_tokens(source: Vocabulary, target: Vocabulary) -> tuple[dict[int, int], dict[int, tuple[str, ...]]]:
    """Map target special tokens onto source special tokens: the same literal where the source has it as a special
    token, else by role. A token with several roles (GPT-2's `<|endoftext|>` is bos, eos and unk) takes the source
    token of its first role in ROLE_PREFERENCE: end of text first, as that is what such a token mostly marks.

    Returns (target id -> source id, target id -> roles that the source lacks) for the special tokens that could
    not be matched."""
    matched: dict[int, int] = {}
    unmatched: dict[int, tuple[str, ...]] = {}
    source_literals = {token.token: token.id for token in source.tokens if token.special and token.token}
    for token in target.tokens:
        if not token.special or not token.token:
            continue
        source_id = source_literals.get(token.token)
        if source_id is None:
            roles = sorted(token.roles, key=ROLE_PREFERENCE.index)
            source_id = next((source.roles[role] for role in roles if role in source.roles), None)
        if source_id is None:
            unmatched[token.id] = token.roles or ("added:" + token.token,)
        else:
            matched[token.id] = source_id
    return matched, unmatched
