"""Canonical token forms across byte-level BPE, SentencePiece and WordPiece."""

from __future__ import annotations

import pytest

from langswap.tokens import (BYTE_LEVEL, SENTENCEPIECE, WORDPIECE, Vocabulary, bytes_to_unicode,
                             match_special_tokens)

from conftest import TOKENIZER_BUILDERS, english_lines


@pytest.fixture(scope="module")
def vocabularies():
    lines = english_lines(400) + ["Grüße aus München, schöne Größe: 東京"]
    return {family: Vocabulary(build(lines, vocab_size=700)) for family, build in TOKENIZER_BUILDERS.items()}


def test_families_are_detected(vocabularies):
    assert vocabularies["byte_level"].family == BYTE_LEVEL
    assert vocabularies["roberta"].family == BYTE_LEVEL
    assert vocabularies["sentencepiece"].family == SENTENCEPIECE
    assert vocabularies["wordpiece"].family == WORDPIECE


def test_byte_table_is_a_bijection():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("A")] == "A"


def _find(vocabulary: Vocabulary, raw: bytes, word_start: bool):
    token_id = vocabulary.index().get((raw, word_start))
    return None if token_id is None else vocabulary[token_id]


def test_the_same_word_has_the_same_key_in_every_family(vocabularies):
    for family, vocabulary in vocabularies.items():
        token = _find(vocabulary, b"garden", True)
        assert token is not None, family
        expected = {"byte_level": "Ġgarden", "roberta": "Ġgarden", "sentencepiece": "▁garden",
                    "wordpiece": "garden"}[family]
        assert token.token == expected
        assert vocabulary.word_text(token.id) == "garden"


def test_continuations_are_not_word_starts(vocabularies):
    wordpiece = vocabularies["wordpiece"]
    continuation = next(t for t in wordpiece.tokens if t.token.startswith("##"))
    assert not continuation.word_start and continuation.raw == continuation.token[2:].encode()
    byte_level = vocabularies["byte_level"]
    plain = next(t for t in byte_level.tokens if t.token.isascii() and t.token.isalpha() and len(t.token) > 2)
    assert not plain.word_start


def test_partial_utf8_and_byte_fallback(vocabularies):
    byte_level = vocabularies["byte_level"]
    partial = [t for t in byte_level.tokens if t.text is None]
    assert partial and all(byte_level.word_text(t.id) is None for t in partial)
    assert any(t.raw == b"\xc3" for t in partial)  # the first byte of ü, ö, ß
    sentencepiece = vocabularies["sentencepiece"]
    byte_token = sentencepiece[sentencepiece.tokenizer.convert_tokens_to_ids("<0xC3>")]
    assert byte_token.raw == b"\xc3" and not byte_token.special and byte_token.text is None
    # <0x61> ("a") yields to the plain "a" token when matching by canonical form
    plain_a = sentencepiece.index()[(b"a", False)]
    assert sentencepiece[plain_a].token == "a"


def test_special_tokens_are_matched_by_role_not_string(vocabularies):
    gpt2, llama, roberta = vocabularies["byte_level"], vocabularies["sentencepiece"], vocabularies["roberta"]
    assert gpt2.roles == {"bos": 0, "eos": 0, "unk": 0}
    matched, unmatched = match_special_tokens(gpt2, llama)  # <|endoftext|> stands for <s>, </s> and <unk>
    assert not unmatched
    assert matched == {llama.roles["bos"]: 0, llama.roles["eos"]: 0, llama.roles["unk"]: 0}
    matched, unmatched = match_special_tokens(gpt2, roberta)
    assert set(unmatched) == {roberta.roles["pad"], roberta.roles["mask"]}
    assert matched[roberta.roles["cls"]] == 0  # <s> is bos and cls; the source's bos is <|endoftext|>


def test_surface_encoding_uses_the_word_start_flag(vocabularies):
    vocabulary = vocabularies["byte_level"]
    assert vocabulary.tokenizer.convert_ids_to_tokens(vocabulary.encode_surface("garden", True))[0].startswith("Ġ")
    assert not vocabulary.tokenizer.convert_ids_to_tokens(vocabulary.encode_surface("garden", False))[0] \
        .startswith("Ġ")


def test_a_retrained_byte_fallback_tokenizer_keeps_its_byte_tokens(tmp_path):
    """Llama-2-style: the trainer keeps byte_fallback but drops the <0xNN> entries, so unseen characters became
    <unk>. They are put back after the trained ids and the total size is the one asked for."""
    from conftest import english_lines, sentencepiece_tokenizer
    from langswap.resources.tokenizer import train_tokenizer

    source = sentencepiece_tokenizer(english_lines(300))
    text = tmp_path / "text.txt"
    text.write_text("\n".join(english_lines(500, seed=1)) + "\n", encoding="utf-8")
    trained = train_tokenizer(source, text, vocab_size=500)
    assert len(trained) == 500
    vocabulary = trained.get_vocab()
    byte_ids = sorted(vocabulary[f"<0x{byte:02X}>"] for byte in range(256))
    assert byte_ids == list(range(500 - 256, 500))  # appended: no trained id moved
    line = "Köln 😀 naïve"
    ids = trained(line, add_special_tokens=False)["input_ids"]
    assert trained.unk_token_id not in ids
    assert "<0xC3>" in trained.convert_ids_to_tokens(ids)
    assert trained.decode(ids) == line
    assert Vocabulary(trained).is_byte_fallback(vocabulary["<0xC3>"])


def test_a_wordpiece_continuation_is_spelled_with_continuation_pieces():
    """The subword fallback spells a target token's text as the source would inside a word: "##ing", not "in ##g"."""
    from conftest import wordpiece_tokenizer

    tokenizer = wordpiece_tokenizer(english_lines(400), vocab_size=700)
    vocabulary = Vocabulary(tokenizer)
    assert "##ing" in tokenizer.get_vocab()
    assert tokenizer.convert_ids_to_tokens(vocabulary.encode_surface("ing", False)) == ["##ing"]
    assert tokenizer.convert_ids_to_tokens(vocabulary.encode_surface("ing", True)) == tokenizer.tokenize("ing")
    assert tokenizer.convert_ids_to_tokens(vocabulary.encode_surface("ING", False)) == ["##ing"]  # normalised


def test_a_special_token_with_several_roles_copies_the_end_of_text_token():
    """GPT-2's <|endoftext|> is bos, eos and unk at once; onto a Llama-style source (<s>, </s>, <unk>) it mostly
    marks the end of a text, so it takes </s>. A literal the source also has wins over any role."""
    from conftest import byte_level_tokenizer, sentencepiece_tokenizer

    lines = english_lines(300)
    llama, gpt2 = Vocabulary(sentencepiece_tokenizer(lines)), Vocabulary(byte_level_tokenizer(lines))
    endoftext = gpt2.roles["eos"]
    assert gpt2.roles["bos"] == endoftext and set(gpt2[endoftext].roles) >= {"bos", "eos"}
    matched, unmatched = match_special_tokens(llama, gpt2)
    assert matched[endoftext] == llama.roles["eos"] and not unmatched
    matched, _ = match_special_tokens(gpt2, gpt2)
    assert matched == {endoftext: endoftext}


@pytest.mark.parametrize("family", sorted(TOKENIZER_BUILDERS))
def test_saved_tokenizer_folders_name_the_generic_class_and_tokenize_alike(family, tmp_path):
    """transformers 5 writes `tokenizer_class: TokenizersBackend`, which 4.x cannot load; langswap's folders name
    the generic fast class, which every version reads from tokenizer.json alone."""
    import json

    from transformers import AutoTokenizer

    from langswap.models import save_tokenizer

    tokenizer = TOKENIZER_BUILDERS[family](english_lines(200), vocab_size=300)
    save_tokenizer(tokenizer, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    text = english_lines(3, seed=9)
    assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert reloaded.all_special_tokens == tokenizer.all_special_tokens
