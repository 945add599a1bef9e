"""A teacher-aligned view of text: one text read by the source (teacher) and the target (student) tokenizer, each
token placed on the text's UTF-8 bytes, and the chunk boundaries, the byte positions where both readings end a token.

The boundaries serve two uses: the student's hidden state after target token `target_at[k]` and the teacher's after
source token `source_at[k]` have read exactly the same bytes, so they can be matched; and the tokens between two
consecutive boundaries spell the same bytes on both sides, so their likelihoods can be compared chunk by chunk
(approximate likelihood matching, as in tokenkit's ALM).

Rules:

- Byte spans come from the fast tokenizer's character offsets, which refer to the original text whatever the
  normalizer did (lower-casing, accent stripping, NFKC, a prepended "▁"). A token ends at the byte where its last
  character ends, unless it shares that character with the next token (byte-level BPE splits a character over
  several tokens, SentencePiece spells it as `<0xNN>` byte-fallback tokens): then the token's own bytes
  (`langswap.tokens`) place its end inside the character, provided they spell the text's bytes there. Where they do
  not (a normalizer changed the character), every token of the shared character ends at its end, and only the last
  of them can stand at a boundary.
- Whitespace goes with whatever token holds it: "Ġword" and "▁word" end where "word" ends, and WordPiece, which
  drops whitespace, ends "word" there too; a space between words never hides the boundary at the word's end.
  Whitespace that no token holds (WordPiece) belongs to no token, so a text that ends in whitespace ends with a
  boundary only where both tokenizers cover that whitespace.
- A boundary is a byte position after the first byte (0 is no boundary). It may lie inside a multi-byte character
  when both tokenizers split the character at the same byte: both have then read the same bytes.
- Special tokens are added only with `add_special_tokens=True`; they cover no bytes (start == end, at the position
  where they are read) and never stand at a boundary. A boundary's token is the last text token ending there, so an
  EOS/SEP belongs to no chunk, and the leading BOS/CLS is the token before the first chunk
  (`Tokenization.prefix - 1`). A special token's string written in the text is read as that token and covers its
  bytes like any other token.
- Unknown tokens ([UNK], <unk> where the text's bytes are not the token's own) and non-whitespace characters that no
  token covers and that the tokenizer's normalizer does not delete on its own (a BPE model without byte fallback or
  unknown token drops them) are counted in `Tokenization.unencodable_bytes`; `AlignedText.unencodable` marks each
  chunk that holds such bytes on either side, so a loss can skip it.
- The end of the text is the last boundary whenever both tokenizations cover it.

Not handled: slow (Python) tokenizers; truncation (the whole text is read, however long: split long documents
first); offsets out of order (no fast tokenizer gives them, but should one, no boundary is put where a later token
ends earlier). A normalizer that merges characters (NFC composing "e" + U+0301) leaves the merged-away character
uncovered, which counts as unencodable. A BPE model with neither an unknown token nor byte fallback drops characters
it cannot spell and shifts the offsets of every later token; from the first dropped character to the end of the text
all bytes count as unencodable on that side, so every later chunk is marked, but the boundaries there may be wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from langswap.errors import VocabularyError
from langswap.tokens import BYTE_LEVEL, WORDPIECE, canonical_token, detect_family


@dataclass(frozen=True)
class Tokenization:
    """One tokenizer's reading of one text: N tokens, each placed on the text's UTF-8 bytes.

    ids: (N,) int64 token ids, special tokens included where they were asked for.
    starts, ends: (N,) int64 byte span [start, end) of each token in `text.encode("utf-8")`; `ends` never decreases
        (the offsets of Hugging Face fast tokenizers run in order).
        A token that covers no byte (a special token, SentencePiece's inserted leading "▁") has start == end at the
        byte position where it is read.
    special: (N,) bool, tokens the tokenizer added around the text (BOS, EOS, CLS, SEP).
    unknown: (N,) bool, unknown tokens standing for bytes the tokenizer could not spell.
    prefix: the number of special tokens before the text (1 for a BOS or CLS); token `prefix - 1` is the one read
        before the first chunk (-1: none).
    unencodable: (B,) bool over the text's B bytes: those under unknown tokens, and those of non-whitespace
        characters that no token covers (for a BPE model that drops characters, everything from the first one).
    """

    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    special: np.ndarray
    unknown: np.ndarray
    prefix: int
    unencodable: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def unencodable_bytes(self) -> int:
        return int(self.unencodable.sum())


@dataclass(frozen=True)
class AlignedText:
    """A text read by both tokenizers, and its C chunk boundaries.

    boundaries: (C,) int64 byte offsets, strictly increasing, where both readings end a token; chunk k is the bytes
        [boundaries[k-1], boundaries[k]) (boundaries[-1] taken as 0).
    source_at, target_at: (C,) int64 index of the last source / target text token ending at each boundary
        (strictly increasing). Chunk k holds tokens source_at[k-1]+1 .. source_at[k], with source_at[-1] taken as
        `source.prefix - 1` (likewise for the target); `chunk(k)` gives both as slices.
    unencodable: (C,) bool, chunks with bytes that the source or the target could not spell (unknown tokens,
        dropped characters).
    """

    text: str
    source: Tokenization
    target: Tokenization
    boundaries: np.ndarray
    source_at: np.ndarray
    target_at: np.ndarray
    unencodable: np.ndarray

    def __len__(self) -> int:
        return len(self.boundaries)

    def chunk(self, k: int) -> tuple[slice, slice]:
        """(source, target) token slices of chunk k, for indexing `source.ids` and `target.ids`."""
        if not 0 <= k < len(self.boundaries):
            raise IndexError(f"chunk {k} of a text with {len(self.boundaries)} chunks")
        source_from = self.source_at[k - 1] + 1 if k else self.source.prefix
        target_from = self.target_at[k - 1] + 1 if k else self.target.prefix
        return slice(int(source_from), int(self.source_at[k]) + 1), slice(int(target_from), int(self.target_at[k]) + 1)


def align(text: str, source_tokenizer, target_tokenizer, *, add_special_tokens: bool = False) -> AlignedText:
    """`text` read by both tokenizers, with its chunk boundaries. For many texts use `align_batch` or a
    `ChunkAligner`, which call each tokenizer once per batch and keep the tokens' byte forms between calls."""
    return ChunkAligner(source_tokenizer, target_tokenizer, add_special_tokens=add_special_tokens).align(text)


def align_batch(texts: Sequence[str], source_tokenizer, target_tokenizer, *,
                add_special_tokens: bool = False) -> list[AlignedText]:
    """`align` of each text, each tokenizer called once on the whole batch."""
    return ChunkAligner(source_tokenizer, target_tokenizer, add_special_tokens=add_special_tokens).align_batch(texts)


class ChunkAligner:
    """Aligns texts for one pair of tokenizers; keeps each token's byte form once it has been looked up, so that
    aligning batch after batch (a training run) does not redo it."""

    def __init__(self, source_tokenizer, target_tokenizer, *, add_special_tokens: bool = False):
        self.source = _Reader(source_tokenizer, "source", add_special_tokens)
        self.target = _Reader(target_tokenizer, "target", add_special_tokens)

    def align(self, text: str) -> AlignedText:
        return self.align_batch([text])[0]

    def align_batch(self, texts: Sequence[str]) -> list[AlignedText]:
        if isinstance(texts, str):
            raise TypeError("align_batch takes a list of texts and was given one string; use align(text) for one")
        texts = list(texts)
        not_text = [type(text).__name__ for text in texts if not isinstance(text, str)]
        if not_text:
            raise TypeError(f"align_batch takes strings; {len(not_text)} of {len(texts)} texts are not "
                            f"(e.g. {not_text[0]})")
        return [pair(text, source, target)
                for text, source, target in zip(texts, self.source.read(texts), self.target.read(texts))]

    def read_source(self, texts: Sequence[str]) -> list[Tokenization]:
        """Each text read by the source tokenizer alone."""
        return self.source.read(list(texts))

    def read_target(self, texts: Sequence[str]) -> list[Tokenization]:
        """Each text read by the target tokenizer alone."""
        return self.target.read(list(texts))


def pair(text: str, source: Tokenization, target: Tokenization) -> AlignedText:
    """The chunk boundaries of two readings of `text` (each as `ChunkAligner.read_source` / `read_target` give
    them, or cut from a longer text's reading with `cut`)."""
    source_ends, source_last = _boundary_tokens(source)
    target_ends, target_last = _boundary_tokens(target)
    boundaries, source_pick, target_pick = np.intersect1d(source_ends, target_ends, assume_unique=True,
                                                          return_indices=True)
    flagged = source.unencodable | target.unencodable
    counts = np.concatenate([[0], np.cumsum(flagged)])
    previous = np.concatenate([[0], boundaries[:-1]])
    return AlignedText(text=text, source=source, target=target, boundaries=boundaries.astype(np.int64),
                       source_at=source_last[source_pick], target_at=target_last[target_pick],
                       unencodable=counts[boundaries] > counts[previous])


def adjacent_matches(unencodable: np.ndarray) -> np.ndarray:
    """For the matched chunk boundaries of a text (those of the chunks not `unencodable`), in order: whether the
    previous matched boundary ends the chunk just before (no unmatched chunk between), so that the text between the
    two is one chunk both sides spelled. The first is False: nothing before it is matched."""
    index = np.flatnonzero(~np.asarray(unencodable, dtype=bool))
    return np.concatenate([[False], np.diff(index) == 1]) if len(index) else np.zeros(0, dtype=bool)


def cut(reading: Tokenization, first: int, last: int, start: int, end: int) -> Tokenization:
    """Tokens first .. last - 1 of `reading` as a reading of its text's bytes [start, end): spans shifted by
    -start and kept within the cut, no prefix, the unencodable bytes of the cut."""
    starts = np.clip(reading.starts[first:last] - start, 0, end - start)
    ends = np.clip(reading.ends[first:last] - start, 0, end - start)
    return Tokenization(ids=reading.ids[first:last], starts=starts, ends=ends, special=reading.special[first:last],
                        unknown=reading.unknown[first:last], prefix=0, unencodable=reading.unencodable[start:end])


def _boundary_tokens(reading: Tokenization) -> tuple[np.ndarray, np.ndarray]:
    """(ends, token indices): each byte position > 0 where a token of `reading` ends, and the last token ending
    there. Only tokens that cover bytes count, and only where no later token ends earlier (a reading whose offsets
    go backwards has not read everything before such a position)."""
    ends = reading.ends
    covers = ends > reading.starts
    later_min = np.minimum.accumulate(np.concatenate([ends[1:], [np.iinfo(np.int64).max]])[::-1])[::-1]
    index = np.nonzero(covers & (ends <= later_min))[0]
    positions = ends[index]
    last = np.concatenate([positions[1:] != positions[:-1], [True]]) & (positions > 0)
    return positions[last], index[last]


def _char_to_byte(text: str) -> np.ndarray:
    """(len(text) + 1,) int64: the byte offset in text.encode("utf-8") where each character starts, and the size."""
    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    widths = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
    return np.concatenate([[0], np.cumsum(widths, dtype=np.int64)])


class _Reader:
    """One tokenizer's readings of texts, with the byte form of each token id it has met."""

    def __init__(self, tokenizer, side: str, add_special_tokens: bool):
        if not getattr(tokenizer, "is_fast", False):
            raise VocabularyError(
                f"the {side} tokenizer ({type(tokenizer).__name__}) is a slow (Python) tokenizer; chunk alignment "
                "needs a fast one for character offsets. Load it with AutoTokenizer.from_pretrained(..., "
                "use_fast=True), or save it once as a fast tokenizer (tokenizer.json).")
        self.tokenizer = tokenizer
        self.add_special_tokens = add_special_tokens
        self.family, self.details = detect_family(tokenizer)
        decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
        self.added = {entry.content for entry in decoder.values()}
        self.special_ids = {i for i, entry in decoder.items() if entry.special}
        self.special_ids |= set(getattr(tokenizer, "all_special_ids", []) or [])
        self.unknown_id = getattr(tokenizer, "unk_token_id", None)
        self.normalizer = tokenizer.backend_tokenizer.normalizer
        model = tokenizer.backend_tokenizer.model
        # A BPE model with neither an unknown token nor byte fallback drops the characters it cannot spell, and the
        # offsets of the tokens after such a character come out shifted (tokenizers counts the dropped characters
        # nowhere): nothing it reads after a dropped character can be placed with confidence.
        self.drops_characters = (type(model).__name__ == "BPE" and getattr(model, "unk_token", None) is None
                                 and not getattr(model, "byte_fallback", False) and self.family != BYTE_LEVEL)
        self.surfaces: dict[int, bytes] = {}
        self.deleted_by_normalizer: dict[str, bool] = {}

    def _learn(self, ids: set[int]) -> None:
        """Put the byte form of each new id into `surfaces`: the bytes the token spells, its word-start space
        included (byte-level BPE, SentencePiece); WordPiece tokens without "##", as the space is not theirs."""
        new = sorted(ids - self.surfaces.keys())
        if not new:
            return
        for token_id, name in zip(new, self.tokenizer.convert_ids_to_tokens(new)):
            token = canonical_token(token_id, name or "", self.family, self.details, self.added)
            space = token.word_start and self.family != WORDPIECE
            self.surfaces[token_id] = (b" " if space else b"") + token.raw

    def read(self, texts: list[str]) -> list[Tokenization]:
        if not texts:
            return []
        encoded = self.tokenizer(texts, add_special_tokens=self.add_special_tokens, return_offsets_mapping=True,
                                 return_special_tokens_mask=True, return_attention_mask=False,
                                 return_token_type_ids=False)
        self._learn({token_id for ids in encoded["input_ids"] for token_id in ids})
        return [self._read_one(text, ids, offsets, special_mask) for text, ids, offsets, special_mask
                in zip(texts, encoded["input_ids"], encoded["offset_mapping"], encoded["special_tokens_mask"])]

    def _read_one(self, text: str, ids: list[int], offsets: list[tuple[int, int]],
                  special_mask: list[int]) -> Tokenization:
        data = text.encode("utf-8")
        char_byte = _char_to_byte(text)
        count = len(ids)
        surfaces = [self.surfaces[token_id] for token_id in ids]
        starts = np.zeros(count, dtype=np.int64)
        ends = np.zeros(count, dtype=np.int64)
        special = np.zeros(count, dtype=bool)
        cursor = 0  # the byte where the previous token ended
        index = 0
        while index < count:
            first, last = offsets[index]
            if first >= last:
                # No characters: a special token the tokenizer added, or whitespace whose offsets were trimmed away
                # (RoBERTa gives a lone "Ġ" the empty span after its space); the latter covers its bytes if they
                # come next in the text.
                special[index] = bool(special_mask[index]) or ids[index] in self.special_ids
                starts[index] = ends[index] = cursor
                if not special[index] and surfaces[index] and data.startswith(surfaces[index], cursor):
                    ends[index] = cursor = cursor + len(surfaces[index])
                index += 1
                continue
            # A group: tokens that share a character with the next one, and the token that completes it.
            stop = index
            while (stop + 1 < count and offsets[stop + 1][0] < offsets[stop + 1][1]
                   and offsets[stop + 1][0] < offsets[stop][1]):
                stop += 1
            group_end = int(char_byte[offsets[stop][1]])
            if stop == index:
                starts[index], ends[index] = char_byte[first], group_end
            else:
                self._place_group(data, char_byte, offsets, surfaces, index, stop, group_end, cursor, starts, ends)
            cursor = group_end
            index = stop + 1
        unknown = np.zeros(count, dtype=bool)
        unencodable = np.zeros(len(data), dtype=bool)
        if self.unknown_id is not None:
            for position in np.nonzero(np.asarray(ids, dtype=np.int64) == self.unknown_id)[0]:
                start, end = starts[position], ends[position]
                # an unknown token's own string written in the text is no unknown
                unknown[position] = end > start and data[start:end] != surfaces[position]
                unencodable[start:end] |= unknown[position]
        dropped = self._dropped(text, offsets, char_byte, starts, ends)
        for start, end in dropped:
            unencodable[start:end] = True
        if dropped and self.drops_characters:
            unencodable[dropped[0][0]:] = True
        prefix = 0
        while prefix < count and special[prefix]:
            prefix += 1
        return Tokenization(ids=np.asarray(ids, dtype=np.int64).reshape(count), starts=starts, ends=ends,
                            special=special, unknown=unknown, prefix=prefix, unencodable=unencodable)

    @staticmethod
    def _place_group(data: bytes, char_byte: np.ndarray, offsets, surfaces: list[bytes], first: int, last: int,
                     group_end: int, cursor: int, starts: np.ndarray, ends: np.ndarray) -> None:
        """Place tokens first..last, each but the last sharing its last character with the next one.

        Backwards from the group's end, each token after the first starts where its own bytes, laid back from its
        end, put it, and the token before it ends there; this holds where those bytes are the text's. The first
        token's own bytes are not compared: the character it shares is spelled by the next token's bytes, and
        before that it may hold what the text does not show (an inserted "▁", characters a normalizer changed).
        Where a later token's bytes are not the text's (a normalizer changed the shared character), all the
        group's tokens end where the group ends, and only the last of them can stand at a boundary."""
        first_start = int(char_byte[offsets[first][0]])
        placed = [group_end]  # the ends of tokens last, last - 1, ..., first
        for position in range(last, first, -1):
            start = placed[-1] - len(surfaces[position])
            if start < max(cursor, first_start) or data[start:placed[-1]] != surfaces[position]:
                starts[first:last + 1] = [char_byte[offsets[p][0]] for p in range(first, last + 1)]
                ends[first:last + 1] = group_end
                return
            placed.append(start)
        placed.reverse()
        ends[first:last + 1] = placed
        starts[first] = first_start
        starts[first + 1:last + 1] = placed[:-1]

    def _dropped(self, text: str, offsets, char_byte: np.ndarray, starts: np.ndarray,
                 ends: np.ndarray) -> list[tuple[int, int]]:
        """Byte spans of the non-whitespace characters that no token covers and that the normalizer does not
        delete when it meets them alone (BERT's drops control characters and, stripping accents, combining marks).
        A token covers the characters of its offsets, or, where the tokenizer gave it none but its bytes were found
        next in the text (`starts`, `ends`: tokenizers 0.20 gives `ignore_merges` models such as Llama-3's empty
        offsets), those bytes."""
        covered = np.zeros(len(text) + 1, dtype=np.int64)
        for first, last in offsets:
            if first < last:
                covered[first] += 1
                covered[last] -= 1
        placed = np.zeros(int(char_byte[-1]) + 1, dtype=bool)
        for (first, last), start, end in zip(offsets, starts, ends):
            if first >= last and end > start:
                placed[start:end] = True
        spans = []
        for char_index in np.nonzero(np.cumsum(covered[:-1]) == 0)[0]:
            if placed[char_byte[char_index]]:
                continue
            char = text[char_index]
            if char.isspace() or self._deleted(char):
                continue
            spans.append((int(char_byte[char_index]), int(char_byte[char_index + 1])))
        return spans

    def _deleted(self, char: str) -> bool:
        if self.normalizer is None:
            return False
        if char not in self.deleted_by_normalizer:
            self.deleted_by_normalizer[char] = self.normalizer.normalize_str(char) == ""
        return self.deleted_by_normalizer[char]
