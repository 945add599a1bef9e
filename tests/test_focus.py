"""FOCUS: exact sparsemax in blocks, token-level vectors, a known answer on a half-ciphered language, bad input."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch

from langswap.errors import MissingResourceError
from langswap.methods import Kind, TransferInputs, make_config, run_method
from langswap.methods.focus import sparse_anchor_weights
from langswap.resources.token_vectors import (FOCUS_FASTTEXT, load_token_vectors, token_fasttext, token_word,
                                              token_words, train_token_fasttext, write_token_corpus)
from langswap.tokens import Vocabulary

from conftest import WORDS, byte_level_tokenizer, cipher_word, english_lines, sentencepiece_tokenizer

SMALL = dataclasses.replace(FOCUS_FASTTEXT, dim=24, epoch=10, minCount=2, bucket=20_000)


def test_blocked_sparsemax_equals_sparsemax_over_every_anchor():
    from entmax import sparsemax

    rng = np.random.default_rng(0)
    queries = rng.standard_normal((40, 8)).astype(np.float32)
    anchors = rng.standard_normal((300, 8)).astype(np.float32)
    # a few queries nearly equidistant from many anchors: their support is wide, so the top-k has to widen
    queries[:3] = anchors[:50].mean(axis=0)
    lengths, indices, weights = sparse_anchor_weights(queries, anchors, first_candidates=2)
    unit = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)  # noqa: E731
    dense = sparsemax(torch.from_numpy(unit(queries) @ unit(anchors).T), dim=1).numpy()
    rebuilt = np.zeros_like(dense)
    np.add.at(rebuilt, (np.repeat(np.arange(len(queries)), lengths), indices), weights)
    assert np.allclose(rebuilt, dense, atol=1e-5)
    assert (dense > 0).sum(axis=1).max() > 2  # some support was wider than the first candidates
    # each row holds its own support: the narrow rows are not padded to the widest
    assert (lengths == (dense > 0).sum(axis=1)).all() and (weights > 0).all()
    assert lengths.min() < lengths.max()


def test_token_words_escape_only_what_fasttext_splits_on():
    assert token_word("Ġhaus") == "Ġhaus"
    assert token_word("a b\n") == "a␠b␊"
    assert token_word("\u3000x") == "\u3000x"  # fastText splits on ASCII whitespace only


@pytest.mark.parametrize("builder", [byte_level_tokenizer, sentencepiece_tokenizer])
def test_token_corpus_spells_each_token_as_its_word_and_counts_it(builder, tmp_path):
    lines = english_lines(200)
    tokenizer = builder(lines, 300)
    (tmp_path / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    counts = write_token_corpus(tmp_path / "text.txt", tokenizer, tmp_path / "corpus.txt")
    words = token_words(tokenizer)
    written = (tmp_path / "corpus.txt").read_text(encoding="utf-8").split()
    expected = [words[i] for line in lines for i in tokenizer(line, add_special_tokens=False)["input_ids"]]
    assert written == expected
    assert counts.sum() == len(expected) and counts[words.index(expected[0])] == expected.count(expected[0])


# words whose cipher is no word of the language (cipher_word("in") is "of"), so each twin pair is distinct
CLEAR_WORDS = [w for w in WORDS if cipher_word(w) != w and cipher_word(w) not in WORDS
               and w not in {cipher_word(x) for x in WORDS}]


def walk_lines(count: int, seed: int, cipher_share: float) -> list[str]:
    """Lines of a random walk over WORDS (each word has three successors, so words differ by their contexts), each
    word ciphered with probability `cipher_share`: a word and its cipher then share their contexts."""
    graph = random.Random(7)
    successors = {word: graph.sample(WORDS, 3) for word in WORDS}
    rng = random.Random(seed)
    lines = []
    for _ in range(count):
        word, words = rng.choice(WORDS), []
        for _ in range(rng.randint(8, 14)):
            words.append(cipher_word(word) if rng.random() < cipher_share else word)
            word = rng.choice(successors[word])
        lines.append(" ".join(words))
    return lines


@pytest.fixture(scope="module")
def half_cipher(tmp_path_factory):
    folder = tmp_path_factory.mktemp("focus")
    lines = walk_lines(10_000, seed=1, cipher_share=0.5)
    (folder / "xx.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    # vocabularies large enough that every word is one token on both sides
    source_tokenizer = byte_level_tokenizer(walk_lines(3000, seed=2, cipher_share=0.0), vocab_size=600)
    target_tokenizer = byte_level_tokenizer(lines, vocab_size=900)
    options = dataclasses.replace(SMALL, model="skipgram", dim=32, epoch=5, ws=2)
    train_token_fasttext(folder / "xx.txt", target_tokenizer, folder / "xx-tokens.bin", options)
    return {"folder": folder, "source": source_tokenizer, "target": target_tokenizer, "path": folder / "xx-tokens.bin"}


def _twins(source_tokenizer, target_tokenizer, mapping):
    """(ciphered words checked, those whose heaviest source is their plain twin); every one checked is MIXED."""
    checked = twins = 0
    for word in CLEAR_WORDS:
        source_ids = source_tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        target_ids = target_tokenizer(" " + cipher_word(word), add_special_tokens=False)["input_ids"]
        if len(source_ids) != 1 or len(target_ids) != 1 or mapping.kinds[target_ids[0]] == Kind.COPIED:
            continue  # a cipher that happens to spell a source token is overlap, copied
        assert mapping.kinds[target_ids[0]] == Kind.MIXED
        sources, weights = mapping.row(target_ids[0])
        assert np.isclose(weights.sum(), 1.0, atol=1e-4) and (weights > 0).all()
        checked += 1
        twins += int(sources[np.argmax(weights)] == source_ids[0])
    return checked, twins


def _inputs(source_tokenizer, target_tokenizer, vectors):
    from langswap.resources.kinds.token_vectors import TokenVectors

    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    embeddings = torch.randn(len(source), 16, generator=torch.Generator().manual_seed(0))
    return TransferInputs(source, target, embeddings,
                          resources={"token_vectors": TokenVectors(vectors, token_words(target_tokenizer))})


def test_focus_mixes_each_cipher_mostly_from_its_twin_given_twin_vectors(half_cipher):
    """Vectors made by hand: a ciphered word's vector is its plain twin's, slightly moved; the mixing must follow."""
    from langswap.resources.vectors import WordVectors

    source_tokenizer, target_tokenizer = half_cipher["source"], half_cipher["target"]
    words = token_words(target_tokenizer)
    rng = np.random.default_rng(0)
    matrix = rng.standard_normal((len(words), 16)).astype(np.float32)
    index = {word: i for i, word in enumerate(words)}
    for word in CLEAR_WORDS:
        plain, ciphered = index.get("Ġ" + word), index.get("Ġ" + cipher_word(word))
        if plain is not None and ciphered is not None:
            matrix[ciphered] = matrix[plain] + 0.05 * rng.standard_normal(16)
    vectors = WordVectors(words, vectors=matrix)
    mapping = run_method(make_config("focus"), _inputs(source_tokenizer, target_tokenizer, vectors)).mapping
    checked, twins = _twins(source_tokenizer, target_tokenizer, mapping)
    assert checked >= 60 and twins == checked


def test_focus_on_trained_token_vectors_finds_most_twins(half_cipher):
    """The same through token-level fastText trained on the half-ciphered text: contexts alone make the twins near
    (fastText training is not bitwise reproducible with several threads, hence a margin)."""
    source_tokenizer, target_tokenizer = half_cipher["source"], half_cipher["target"]
    vectors, _ = load_token_vectors(half_cipher["path"], target_tokenizer)
    mapping = run_method(make_config("focus"), _inputs(source_tokenizer, target_tokenizer, vectors)).mapping
    checked, twins = _twins(source_tokenizer, target_tokenizer, mapping)
    assert checked >= 60
    assert twins >= 0.7 * checked, f"{twins} of {checked} ciphered words lean most on their plain twin"


def test_vectors_of_another_tokenizer_are_refused(half_cipher):
    other = byte_level_tokenizer(english_lines(300), vocab_size=500)
    with pytest.raises(MissingResourceError, match="another tokenizer"):
        load_token_vectors(half_cipher["path"], other)


def test_vectors_without_their_record_are_refused(half_cipher, tmp_path):
    import shutil

    shutil.copy(half_cipher["path"], tmp_path / "copy.bin")
    with pytest.raises(MissingResourceError, match="tokens.json"):
        load_token_vectors(tmp_path / "copy.bin", half_cipher["target"])


def test_text_too_small_is_refused_with_how_much_is_needed(tmp_path):
    lines = english_lines(300)
    tokenizer = byte_level_tokenizer(lines, vocab_size=400)
    (tmp_path / "tiny.txt").write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    with pytest.raises(MissingResourceError, match=r"too small.*about [\d,]+ tokens") as error:
        train_token_fasttext(tmp_path / "tiny.txt", tokenizer, tmp_path / "out.bin", FOCUS_FASTTEXT)
    assert "resources.token_min_count" in str(error.value)
    assert not (tmp_path / "out.bin").exists()


def test_cached_vectors_are_reused(tmp_path, monkeypatch):
    import langswap.resources.token_vectors as module

    lines = english_lines(400)
    tokenizer = byte_level_tokenizer(lines, vocab_size=300)
    (tmp_path / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    first = token_fasttext(tmp_path / "text.txt", tokenizer, SMALL, cache=tmp_path / "cache")
    monkeypatch.setattr(module, "train_token_fasttext", lambda *a, **k: pytest.fail("trained again"))
    assert token_fasttext(tmp_path / "text.txt", tokenizer, SMALL, cache=tmp_path / "cache") == first
    record = json.loads((tmp_path / "cache" / (first.name + ".tokens.json")).read_text(encoding="utf-8"))
    assert record["fasttext"]["model"] == "cbow" and record["tokens"] > 0


def test_transfer_trains_token_vectors_from_target_text(gpt2_folder, corpus_dir, target_tokenizer_folder, tmp_path,
                                                        monkeypatch):
    from langswap.transfer import transfer, transfer_config

    config = transfer_config({"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
                              "target_text": str(corpus_dir / "xx.txt"), "output": str(tmp_path / "out"),
                              "method": {"name": "focus"}, "resources": {"token_min_count": 3}})
    monkeypatch.setenv("LANGSWAP_CACHE", str(tmp_path / "cache"))
    report = transfer(config)
    assert report.counts.get("mixed", 0) > 0
    record = json.loads((tmp_path / "out" / "langswap.json").read_text(encoding="utf-8"))
    assert record["resources"]["token_vectors"]["covered_tokens"] > 0
    assert list((tmp_path / "cache" / "token-fasttext").glob("*.bin"))


def test_a_config_without_text_says_what_to_set(gpt2_folder, target_tokenizer_folder, tmp_path):
    from langswap.transfer import transfer, transfer_config

    config = transfer_config({"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
                              "output": str(tmp_path / "out"), "method": "focus"})
    with pytest.raises(MissingResourceError, match="resources.token_text"):
        transfer(config)


def test_cli_trains_token_vectors_with_their_record(tmp_path, capsys):
    from langswap.cli import main

    lines = english_lines(400)
    tokenizer = byte_level_tokenizer(lines, vocab_size=300)
    tokenizer.save_pretrained(tmp_path / "tok")
    (tmp_path / "text.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code = main(["-q", "fasttext", str(tmp_path / "text.txt"), "--tokenizer", str(tmp_path / "tok"), "--output",
                 str(tmp_path / "tokens.bin"), "--set", "dim=16", "--set", "minCount=2", "--set", "bucket=20000"])
    assert code == 0 and "tokens of text" in capsys.readouterr().out
    vectors, record = load_token_vectors(tmp_path / "tokens.bin", tokenizer)
    assert record["fasttext"]["model"] == "cbow" and record["fasttext"]["dim"] == 16 and vectors.raw_dim == 16
    assert main(["-q", "fasttext", str(tmp_path / "text.txt"), "--tokenizer", str(tmp_path / "tok"), "--output",
                 str(tmp_path / "tokens.bin")]) != 0  # an existing model is kept without --overwrite
