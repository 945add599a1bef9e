"""Chunk alignment (langswap.chunks): byte ends of tokens of every family, and the boundaries both tokenizers share.

Known answers come from tiny tokenizers built by hand (a given vocabulary and merges), so the tokens of each text can
be written out; a randomized test then checks the invariants on tokenizers trained on English-like text, with
non-ASCII characters, byte fallback, lower-casing, NFKC and unknown characters.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
from conftest import (WORDS, byte_level_tokenizer, english_lines, roberta_tokenizer, sentencepiece_tokenizer,
                      wordpiece_tokenizer)

from langswap.chunks import AlignedText, ChunkAligner, adjacent_matches, align, align_batch
from langswap.errors import VocabularyError
from langswap.tokens import bytes_to_unicode, unicode_to_bytes

# -- tokenizers built by hand ---------------------------------------------------------------------------------------


def _prefix_merges(forms: list[str], vocab: dict[str, int]) -> list[tuple[str, str]]:
    """Merges that build each form left to right, one character at a time, each new prefix added to `vocab`."""
    merges = []
    for form in forms:
        for cut in range(2, len(form) + 1):
            if form[:cut] not in vocab:
                vocab[form[:cut]] = len(vocab)
                merges.append((form[:cut - 1], form[cut - 1]))
    return merges


def byte_bpe(*tokens: str | bytes, bos: str | None = None, trim_offsets: bool = False):
    """GPT-2 style byte-level BPE whose vocabulary is the 256 bytes and `tokens` (text, or bytes for partial
    characters), built left to right."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    table = bytes_to_unicode()
    vocab = {table[byte]: byte for byte in range(256)}
    forms = ["".join(table[b] for b in (t.encode("utf-8") if isinstance(t, str) else t)) for t in tokens]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=_prefix_merges(forms, vocab)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    steps = [processors.ByteLevel(trim_offsets=True)] if trim_offsets else []
    if bos:
        tokenizer.add_special_tokens([bos])
        steps.append(processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, len(vocab))]))
    if steps:
        tokenizer.post_processor = processors.Sequence(steps)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=bos)


def sentencepiece_bpe(*pieces: str, byte_fallback: bool = True, unknown: bool = True, bos: bool = False,
                      nfkc: bool = False):
    """Llama-2 style BPE: Metaspace ("▁" for spaces, one prepended), `<0xNN>` byte fallback, the vocabulary the
    characters of `pieces` and `pieces` themselves, built left to right; with `nfkc`, T5's normalization."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = (["<unk>"] if unknown else []) + ["<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)] if byte_fallback else []
    vocab = {token: index for index, token in enumerate(specials + byte_tokens)}
    for char in dict.fromkeys("".join(pieces)):
        vocab.setdefault(char, len(vocab))
    merges = _prefix_merges(list(pieces), vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>" if unknown else None,
                                     byte_fallback=byte_fallback))
    tokenizer.add_special_tokens(specials)
    if nfkc:
        tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    if bos:
        tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A",
                                                                 special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>" if unknown else None)


def wordpiece(*words: str):
    """BERT style WordPiece with lower-casing and accent stripping, [CLS] text [SEP]."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {token: index for index, token in enumerate(specials + list(words))}
    tokenizer = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tokenizer.add_special_tokens(specials)
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="[PAD]", unk_token="[UNK]",
                                   cls_token="[CLS]", sep_token="[SEP]")


def names(tokenizer, ids) -> list[str]:
    return tokenizer.convert_ids_to_tokens([int(i) for i in ids])


def byte_form(text: str | bytes) -> str:
    table = bytes_to_unicode()
    return "".join(table[b] for b in (text.encode("utf-8") if isinstance(text, str) else text))


# -- known answers ---------------------------------------------------------------------------------------------------

def test_two_readings_of_the_house_share_the_word_ends():
    source = byte_bpe("the", " house")
    target = byte_bpe("th", " ho", "use")
    aligned = align("the house", source, target)
    assert names(source, aligned.source.ids) == ["the", "Ġhouse"]
    assert names(target, aligned.target.ids) == ["th", "e", "Ġho", "use"]
    assert aligned.source.ends.tolist() == [3, 9]
    assert aligned.target.starts.tolist() == [0, 2, 3, 6]
    assert aligned.target.ends.tolist() == [2, 3, 6, 9]
    assert aligned.boundaries.tolist() == [3, 9]
    assert aligned.source_at.tolist() == [0, 1]
    assert aligned.target_at.tolist() == [1, 3]
    assert aligned.chunk(0) == (slice(0, 1), slice(0, 2))
    assert aligned.chunk(1) == (slice(1, 2), slice(2, 4))
    assert aligned.unencodable.tolist() == [False, False]
    assert aligned.source.unencodable_bytes == aligned.target.unencodable_bytes == 0
    with pytest.raises(IndexError):
        aligned.chunk(2)


@pytest.mark.parametrize("family", ["byte_level", "sentencepiece", "wordpiece"])
def test_a_space_between_words_does_not_hide_the_word_end(family):
    """"Ġhouse", "▁house" and WordPiece's "house" (whose offsets skip the space) all end where "house" ends."""
    target = {"byte_level": lambda: byte_bpe("the", " house"),
              "sentencepiece": lambda: sentencepiece_bpe("▁the", "▁house"),
              "wordpiece": lambda: wordpiece("the", "house")}[family]()
    aligned = align("the house", byte_bpe("th", " ho", "use"), target)
    assert names(target, aligned.target.ids) == {"byte_level": ["the", "Ġhouse"],
                                                 "sentencepiece": ["▁the", "▁house"],
                                                 "wordpiece": ["the", "house"]}[family]
    assert aligned.target.ends.tolist() == [3, 9]
    assert aligned.boundaries.tolist() == [3, 9]
    assert aligned.target_at.tolist() == [0, 1]


def test_a_lone_space_whose_offsets_were_trimmed_still_covers_its_byte():
    """RoBERTa-style offset trimming gives a lone "Ġ" an empty span; it still holds the space, so it ends after it,
    and a text ending in a space ends with a boundary."""
    trimmed = byte_bpe("the", " house", trim_offsets=True)
    text = "the  house "
    encoded = trimmed(text, return_offsets_mapping=True)
    assert names(trimmed, encoded["input_ids"]) == ["the", "Ġ", "Ġhouse", "Ġ"]
    assert encoded["offset_mapping"][1][0] == encoded["offset_mapping"][1][1]  # the empty span this test is about
    aligned = align(text, trimmed, sentencepiece_bpe("▁the", "▁house"))
    assert aligned.source.ends.tolist() == [3, 4, 10, 11]
    assert aligned.target.ends.tolist() == [3, 4, 10, 11]  # "▁the", "▁", "▁house", "▁"
    assert aligned.boundaries.tolist() == [3, 4, 10, 11]


def test_a_character_whole_in_one_reading_and_in_bytes_in_the_other():
    source = byte_bpe("€", "ü", "😀")
    target = byte_bpe()  # bytes only
    text = "a€ü😀b"
    aligned = align(text, source, target)
    assert names(source, aligned.source.ids) == ["a", byte_form("€"), byte_form("ü"), byte_form("😀"), "b"]
    assert aligned.source.ends.tolist() == [1, 4, 6, 10, 11]
    assert aligned.target.ends.tolist() == list(range(1, 12))  # one token a byte, ending inside the characters
    assert aligned.boundaries.tolist() == [1, 4, 6, 10, 11]
    assert aligned.target_at.tolist() == [0, 3, 5, 9, 10]
    assert aligned.chunk(1) == (slice(1, 2), slice(1, 4))


def test_a_boundary_inside_a_character_where_both_split_it_alike():
    """Byte-level "€" as <E2> + <82 AC>, SentencePiece as three byte-fallback tokens: both end a token after the first
    byte of the character, and both have read the same bytes there, so it is a boundary."""
    source = byte_bpe(b"\x82\xac")
    target = sentencepiece_bpe("▁a")
    aligned = align("€", source, target)
    assert names(source, aligned.source.ids) == ["â", "Ĥ¬"]
    assert names(target, aligned.target.ids) == ["▁", "<0xE2>", "<0x82>", "<0xAC>"]
    assert aligned.source.ends.tolist() == [1, 3]
    # the prepended "▁" covers no byte of the text: it is read at byte 0
    assert aligned.target.starts.tolist() == [0, 0, 1, 2]
    assert aligned.target.ends.tolist() == [0, 1, 2, 3]
    assert aligned.boundaries.tolist() == [1, 3]
    assert aligned.source_at.tolist() == [0, 1]
    assert aligned.target_at.tolist() == [1, 3]
    assert aligned.chunk(0) == (slice(0, 1), slice(0, 2))  # the "▁" belongs to the first chunk


def test_no_boundary_inside_a_character_a_normalizer_changed():
    """NFKC reads the ligature "ﬁ" (3 bytes) as "fi", and "▁f" and "in" share it: where "▁f" ends within those 3
    bytes is unknowable, so both end after the ligature, and only "in" can stand at a boundary there."""
    source = byte_bpe()  # one token a byte: a token ends at every byte
    target = sentencepiece_bpe("▁f", "in", "e", nfkc=True)
    aligned = align("ﬁne €", source, target)
    assert names(target, aligned.target.ids) == ["▁f", "in", "e", "▁", "<0xE2>", "<0x82>", "<0xAC>"]
    assert aligned.target.ends.tolist() == [4, 4, 5, 6, 7, 8, 9]
    assert aligned.boundaries.tolist() == [4, 5, 6, 7, 8, 9]  # none at bytes 1-3, inside "ﬁ" and "n"
    assert aligned.target_at.tolist() == [1, 2, 3, 4, 5, 6]
    assert aligned.target.unencodable_bytes == 0


@pytest.mark.parametrize(("text", "source_tokens", "target_tokens", "target_ends", "boundaries", "target_at"), [
    ("the €", ["the", " €"], ["▁the", "▁", "<0xE2>", "<0x82>", "<0xAC>"], [3, 4, 5, 6, 7], [3, 7], [0, 4]),
    ("€ the", ["€", " the"], ["▁", "<0xE2>", "<0x82>", "<0xAC>", "▁the"], [0, 1, 2, 3, 7], [3, 7], [3, 4]),
])
def test_byte_fallback_against_a_whole_character(text, source_tokens, target_tokens, target_ends, boundaries,
                                                 target_at):
    source = byte_bpe(" the", "the", " €", "€")
    target = sentencepiece_bpe("▁the")
    aligned = align(text, source, target)
    assert names(source, aligned.source.ids) == [byte_form(token) for token in source_tokens]
    assert names(target, aligned.target.ids) == target_tokens
    assert aligned.target.ends.tolist() == target_ends
    assert aligned.boundaries.tolist() == boundaries
    assert aligned.source_at.tolist() == [0, 1]
    assert aligned.target_at.tolist() == target_at
    assert aligned.target.unencodable_bytes == 0  # byte fallback spells everything


def test_wordpiece_lowercasing_and_accents_keep_the_original_bytes():
    source = byte_bpe("The", " Café", " HOUSE", " NAÏVE")
    target = wordpiece("the", "cafe", "house", "##s", "naive")
    text = "The Café HOUSES NAÏVE"
    aligned = align(text, source, target)
    assert names(target, aligned.target.ids) == ["the", "cafe", "house", "##s", "naive"]
    # "Café" is 5 bytes and "NAÏVE" 6 in the text, though "cafe" and "naive" are 4 and 5
    assert aligned.target.starts.tolist() == [0, 4, 10, 15, 17]
    assert aligned.target.ends.tolist() == [3, 9, 15, 16, 23]
    assert names(source, aligned.source.ids) == ["The", byte_form(" Café"), byte_form(" HOUSE"), "S",
                                                 byte_form(" NAÏVE")]
    assert aligned.boundaries.tolist() == [3, 9, 15, 16, 23]
    assert aligned.target.unencodable_bytes == 0


def test_special_tokens_are_added_only_when_asked_and_stand_at_no_boundary():
    source = byte_bpe("the", " house", bos="<|bos|>")
    target = wordpiece("the", "house")
    plain = align("the house", source, target)
    assert names(source, plain.source.ids) == ["the", "Ġhouse"]
    assert names(target, plain.target.ids) == ["the", "house"]
    assert plain.source.prefix == plain.target.prefix == 0
    assert not plain.source.special.any() and not plain.target.special.any()

    special = align("the house", source, target, add_special_tokens=True)
    assert names(source, special.source.ids) == ["<|bos|>", "the", "Ġhouse"]
    assert names(target, special.target.ids) == ["[CLS]", "the", "house", "[SEP]"]
    assert special.source.special.tolist() == [True, False, False]
    assert special.target.special.tolist() == [True, False, False, True]
    assert special.source.prefix == special.target.prefix == 1
    # zero-width: BOS/CLS read at byte 0, SEP after the last byte
    assert special.source.starts[0] == special.source.ends[0] == 0
    assert special.target.starts[-1] == special.target.ends[-1] == 9
    assert special.boundaries.tolist() == plain.boundaries.tolist() == [3, 9]
    assert special.source_at.tolist() == [1, 2]
    assert special.target_at.tolist() == [1, 2]  # the last text token, not [SEP]
    assert special.chunk(0) == (slice(1, 2), slice(1, 2))  # the chunk starts after BOS / CLS


def test_a_special_tokens_string_in_the_text_covers_its_bytes():
    target = wordpiece("the", "house")
    aligned = align("the [UNK] house", byte_bpe("the", " house"), target)
    assert names(target, aligned.target.ids) == ["the", "[UNK]", "house"]
    assert aligned.target.unknown.tolist() == [False, False, False]  # it is the text, not an unknown character
    assert aligned.target.ends.tolist() == [3, 9, 15]
    assert aligned.target.unencodable_bytes == 0


@pytest.mark.parametrize(("target", "unknown_name"), [
    (lambda: wordpiece("the", "house"), "[UNK]"),
    (lambda: sentencepiece_bpe("▁the", "▁house", byte_fallback=False), "<unk>"),
], ids=["wordpiece", "sentencepiece-without-byte-fallback"])
def test_unknown_characters_are_counted_and_their_chunk_marked(target, unknown_name):
    target = target()
    aligned = align("the € house", byte_bpe("the", " €", " house"), target)
    tokens = names(target, aligned.target.ids)
    assert unknown_name in tokens
    assert aligned.target.unknown.tolist() == [token == unknown_name for token in tokens]
    assert aligned.target.unencodable_bytes == 3  # "€"
    assert aligned.target.unencodable.nonzero()[0].tolist() == [4, 5, 6]
    assert aligned.source.unencodable_bytes == 0
    assert aligned.boundaries.tolist() == [3, 7, 13]
    assert aligned.unencodable.tolist() == [False, True, False]
    # the two matched boundaries hold the unknown chunk between them: the span is not one chunk both sides spelled
    assert adjacent_matches(aligned.unencodable).tolist() == [False, False]


def test_adjacent_matches_say_which_matched_boundary_follows_the_previous_chunk():
    unencodable = np.array([False, True, False, False, True, False, False])
    assert adjacent_matches(unencodable).tolist() == [False, False, True, False, True]
    assert adjacent_matches(np.zeros(3, dtype=bool)).tolist() == [False, True, True]
    assert adjacent_matches(np.ones(2, dtype=bool)).tolist() == []


def test_characters_a_tokenizer_drops_are_counted():
    """A BPE with neither an unknown token nor byte fallback drops "€" silently (and shifts later offsets): the
    character and everything after it count as unencodable, so no chunk from there on is trusted."""
    target = sentencepiece_bpe("▁the", "▁house", byte_fallback=False, unknown=False)
    aligned = align("the € house", byte_bpe("the", " €", " house"), target)
    assert names(target, aligned.target.ids) == ["▁the", "▁", "▁house"]  # no token for "€"
    assert aligned.target.unencodable.nonzero()[0].tolist() == list(range(4, 13))
    assert aligned.boundaries[0] == 3
    assert not aligned.unencodable[0] and aligned.unencodable[1:].all()


def test_an_empty_text_has_no_chunks():
    aligned = align("", byte_bpe("the"), wordpiece("the"), add_special_tokens=True)
    assert aligned.boundaries.shape == aligned.source_at.shape == aligned.unencodable.shape == (0,)
    assert aligned.boundaries.dtype == np.int64
    assert aligned.target.special.tolist() == [True, True]


def test_no_boundary_where_a_later_token_ends_earlier():
    """Should a tokenizer ever give offsets out of order, a position is a boundary only once every token before it
    has been read: here token 1 ends at 4 but token 2 then ends at 3, so 4 is no boundary and 3 belongs to token 2."""
    from langswap.chunks import Tokenization, _boundary_tokens

    reading = Tokenization(ids=np.arange(4), starts=np.array([0, 3, 1, 4]), ends=np.array([1, 4, 3, 6]),
                           special=np.zeros(4, dtype=bool), unknown=np.zeros(4, dtype=bool), prefix=0,
                           unencodable=np.zeros(6, dtype=bool))
    positions, tokens = _boundary_tokens(reading)
    assert positions.tolist() == [1, 3, 6]
    assert tokens.tolist() == [0, 2, 3]


def test_bad_arguments_say_what_to_do():
    class SlowTokenizer:
        is_fast = False

    with pytest.raises(VocabularyError, match="slow .*use_fast=True"):
        align("the", SlowTokenizer(), byte_bpe())
    aligner = ChunkAligner(byte_bpe(), byte_bpe())
    with pytest.raises(TypeError, match="use align"):
        aligner.align_batch("the house")
    with pytest.raises(TypeError, match="strings"):
        aligner.align_batch(["the", 3])


# -- randomized: invariants on trained tokenizers ------------------------------------------------------------------

ODD = ["über", "Café", "NAÏVE", "€5", "😀", "ﬁne", "½", "中文", "e\u0301", "İstanbul", "straße", "Ωmega", "\t",
       "  ", "\u200b", "ñ", "日本", "—", "🇩🇪", "x\u0000y"]


def odd_lines(count: int, seed: int) -> list[str]:
    """English-like words mixed with characters that split into bytes, fall back to bytes, change under
    normalization, or are unknown; every line ends in "." so that both tokenizers cover its last byte."""
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        words = [rng.choice(ODD) if rng.random() < 0.3 else rng.choice(WORDS) for _ in range(rng.randint(3, 12))]
        joiner = rng.choice([" ", " ", ""])
        lines.append(joiner.join(words).strip() + ".")
    return lines


def nfkc_sentencepiece(lines: list[str]):
    """SentencePiece with an NFKC normalizer (T5, XLM-R style): "ﬁ" reads as "fi", "½" as "1⁄2"."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tokenizer.decoder = decoders.Metaspace(prepend_scheme="first")
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300 + 256, show_progress=False,
                                                             special_tokens=["<unk>", "<s>"] + byte_tokens))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>")


def unigram(lines: list[str]):
    """XLM-R style: Unigram with NFKC, Metaspace and an unknown token instead of byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(lines, trainers.UnigramTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>", show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


LOSSLESS = {"byte_level", "roberta", "sentencepiece"}  # their tokens spell the text's bytes exactly


@pytest.fixture(scope="module")
def trained() -> dict:
    lines = english_lines(600) + odd_lines(100, seed=1)  # some non-ASCII characters get tokens of their own
    return {"byte_level": byte_level_tokenizer(lines, 350), "roberta": roberta_tokenizer(lines, 300),
            "sentencepiece": sentencepiece_tokenizer(lines, 300), "wordpiece": wordpiece_tokenizer(lines, 300),
            "nfkc_sentencepiece": nfkc_sentencepiece(lines), "unigram": unigram(lines)}


def spelled(tokenizer, family: str, ids) -> list[bytes]:
    """Each token's bytes, read from its string without langswap.chunks (the SentencePiece fixture's prepended "▁"
    is left in: it is the first byte of the concatenation, not of the text)."""
    spelled_bytes = []
    for name in names(tokenizer, ids):
        if family in ("byte_level", "roberta"):
            spelled_bytes.append(bytes(unicode_to_bytes()[char] for char in name))
        elif re.fullmatch(r"<0x[0-9A-F]{2}>", name):
            spelled_bytes.append(bytes([int(name[3:5], 16)]))
        else:
            spelled_bytes.append(name.replace("▁", " ").encode("utf-8"))
    return spelled_bytes


def true_ends(tokenizer, family: str, ids, data: bytes) -> list[int]:
    """Where each token of a lossless tokenizer ends, by adding up the tokens' bytes."""
    pieces = spelled(tokenizer, family, ids)
    joined = b"".join(pieces)
    lead = len(joined) - len(data)  # the prepended "▁"
    assert joined[lead:] == data and lead in (0, 1)
    return (np.cumsum([len(piece) for piece in pieces]) - lead).tolist()


def check(aligned: AlignedText, tokenizers: tuple, families: tuple[str, str]) -> None:
    text, data = aligned.text, aligned.text.encode("utf-8")
    boundaries = aligned.boundaries
    assert boundaries.dtype == np.int64 and (np.diff(boundaries) > 0).all() and (boundaries > 0).all()
    assert boundaries[-1] == len(data), "the end of the text is the last boundary"
    char_byte = np.concatenate([[0], np.cumsum([len(char.encode("utf-8")) for char in text])])
    shared = None
    for side, (reading, at) in enumerate([(aligned.source, aligned.source_at), (aligned.target, aligned.target_at)]):
        tokenizer, family = tokenizers[side], families[side]
        assert (np.diff(reading.ends) >= 0).all() and (reading.starts <= reading.ends).all()
        assert (reading.ends[at] == boundaries).all() and (np.diff(at) > 0).all()
        assert not reading.special[at].any() and (reading.ends[at] > reading.starts[at]).all()
        offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        for boundary, token in zip(boundaries, at):
            assert (reading.ends[token + 1:] >= boundary).all(), "a later token ends before the boundary"
            # the boundary lies in the last character the token's own offsets name (at its end, or inside it)
            last = offsets[token][1]
            assert char_byte[last - 1] < boundary <= char_byte[last]
        if family in LOSSLESS:
            ends = true_ends(tokenizer, family, reading.ids, data)
            assert reading.ends.tolist() == ends
            pieces = spelled(tokenizer, family, reading.ids)
            for boundary, token in zip(boundaries, at):
                assert b"".join(pieces[:token + 1]).endswith(data[:boundary])
            shared = set(ends) if shared is None else shared & set(ends)
        for k in range(len(boundaries)):  # a chunk holding an unknown token is marked
            assert aligned.unencodable[k] or not reading.unknown[aligned.chunk(k)[side]].any()
    if families[0] in LOSSLESS and families[1] in LOSSLESS:  # every shared end is found
        assert boundaries.tolist() == sorted(shared - {0})


def test_invariants_on_trained_tokenizers_of_every_family(trained):
    texts = english_lines(30, seed=7) + odd_lines(60, seed=3)
    unknowns = 0
    for source_family in trained:
        for target_family in trained:
            tokenizers = (trained[source_family], trained[target_family])
            aligner = ChunkAligner(*tokenizers)
            batch = aligner.align_batch(texts)
            for aligned in batch:
                check(aligned, tokenizers, (source_family, target_family))
                unknowns += aligned.unencodable.sum()
            if source_family == target_family:  # a reading against itself: every token end is a boundary
                for aligned in batch:
                    ends = aligned.source.ends[aligned.source.ends > aligned.source.starts]
                    assert aligned.boundaries.tolist() == sorted(set(ends.tolist()) - {0})
                    assert aligned.source_at.tolist() == aligned.target_at.tolist()
    assert unknowns > 0  # the odd lines do meet unknown characters (WordPiece)


def test_one_text_and_a_batch_agree(trained):
    texts = odd_lines(5, seed=11)
    for flags in (False, True):
        batch = align_batch(texts, trained["roberta"], trained["wordpiece"], add_special_tokens=flags)
        for text, aligned in zip(texts, batch):
            alone = align(text, trained["roberta"], trained["wordpiece"], add_special_tokens=flags)
            for name in ("boundaries", "source_at", "target_at", "unencodable"):
                assert getattr(alone, name).tolist() == getattr(aligned, name).tolist()
            assert alone.target.ids.tolist() == aligned.target.ids.tolist()
