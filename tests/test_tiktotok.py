"""`tiktotok`: the symmetrised dictionary corpus, the weighting rule, and known answers on ciphered languages."""

from __future__ import annotations

import dataclasses
import json
import random

import numpy as np
import pytest
import torch

from conftest import CIPHER, WORDS, byte_level_tokenizer, cipher_line, cipher_word, english_lines, unwrapped
from langswap.errors import ConfigError, MissingResourceError, VocabularyError
from langswap.methods import Kind, TransferInputs, make_config, run_method
from langswap.methods.tiktotok import candidate_weights
from langswap.resources.dictionary_fasttext import (BILINGUAL_FASTTEXT, SOURCE_TAGS, TARGET_TAGS,
                                                    train_bilingual_fasttext, write_dictionary_corpus)
from langswap.resources.dictionary import Dictionary
from langswap.resources.kinds.bilingual_vectors import BilingualVectors
from langswap.resources.vectors import WordVectors
from langswap.tokens import Vocabulary

DECIPHER = {cipher: plain for plain, cipher in CIPHER.items()}
SMALL = dataclasses.replace(BILINGUAL_FASTTEXT, bucket=50_000, epoch=20, thread=1)  # a test-sized model


def decipher(text: str) -> str:
    return "".join(DECIPHER.get(c.lower(), c).upper() if c.isupper() else DECIPHER.get(c, c) for c in text)


def twin_of(source: Vocabulary, token) -> int | None:
    """The source token that the target token is the cipher of (same text deciphered, same word start)."""
    return source.index().get((decipher(token.text).encode(), token.word_start))


# -- the corpus and the weights ------------------------------------------------------------------------------------

def test_the_dictionary_corpus_pairs_each_word_as_often_with_itself_as_with_its_translations(tmp_path):
    dictionary = Dictionary([("gift", "Gift"), ("house", "Haus"), ("home", "Haus"), ("gift", "Gift")])
    path = tmp_path / "corpus.txt"
    assert write_dictionary_corpus(dictionary, path) == 12  # a repeated pair is written once
    s, t = SOURCE_TAGS, TARGET_TAGS
    gift, Gift, Haus = s.word("gift"), t.word("Gift"), t.word("Haus")
    assert gift == "\u2e02gift\u2e03" and Haus == "\u2e04Haus\u2e05"
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:4] == [f"{gift} {Gift}", f"{Gift} {gift}", f"{gift} {gift}", f"{Gift} {Gift}"]
    words = [word for line in lines for word in line.split()]
    # "Haus" has two translations: it is paired twice with them and twice with itself, in both orders
    assert sum(line.split().count(Haus) for line in lines if s.word("house") in line or s.word("home") in line) == 4
    assert sum(line == f"{Haus} {Haus}" for line in lines) == 2
    assert words.count(gift) == words.count(Gift) == 4

    # a compounding target language: the word also stands as the end and the start of a compound
    assert write_dictionary_corpus(Dictionary([("gift", "Gift")]), path, target_compounds=True) == 12
    lines = path.read_text(encoding="utf-8").splitlines()
    expected = []
    for part in (Gift, "Gift\u2e05", "\u2e04Gift"):
        expected += [f"{gift} {part}", f"{part} {gift}", f"{gift} {gift}", f"{part} {part}"]
    assert lines == expected


@pytest.mark.parametrize("count, weights", [
    (1, [1.0]), (2, [0.6, 0.4]), (3, [0.5, 0.3, 0.2]), (5, [0.42, 0.22, 0.12, 0.12, 0.12])])
def test_thirty_ten_and_sixty_spread_over_all(count, weights):
    assert candidate_weights(count) == pytest.approx(weights)
    assert candidate_weights(count).sum() == pytest.approx(1.0)
    assert candidate_weights(3, 0.4, 0.2) == pytest.approx([0.4 + 0.4 / 3, 0.2 + 0.4 / 3, 0.4 / 3])


def test_bad_options_name_the_fix():
    with pytest.raises(ConfigError, match="'method.variant' is 'everything'; choose one of: shared, dictionary, full"):
        make_config("tiktotok", variant="everything")
    with pytest.raises(ConfigError, match="sum to at most 1"):
        make_config("tiktotok", best_weight=0.8, second_weight=0.3)


# -- known answers on the ciphered language --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cipher_world(tmp_path_factory):
    """English and ciphered tokenizers, and a one-to-one dictionary with three extra translations of `and`'s
    cipher: `building` twice, `castle` once (so its translations are building, and, castle)."""
    folder = tmp_path_factory.mktemp("tiktotok")
    source = Vocabulary(byte_level_tokenizer(english_lines(), vocab_size=400))
    target = Vocabulary(byte_level_tokenizer([cipher_line(line) for line in english_lines(seed=1)], vocab_size=380))
    word = cipher_word("and")
    pairs = [(plain, cipher_word(plain)) for plain in WORDS]
    pairs += [("building", word), ("castle", word), ("building", word)]
    path = folder / "en-xx.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    model = train_bilingual_fasttext(path, folder / "en-xx.bin", options=SMALL)
    resource = BilingualVectors(Dictionary.load(path), WordVectors.load(model))
    embeddings = torch.randn(len(source), 12, generator=torch.Generator().manual_seed(0))
    return TransferInputs(source, target, embeddings, resources={"bilingual_vectors": resource})


def test_dictionary_words_take_their_cipher_twin_and_symbols_their_copy(cipher_world):
    inputs = cipher_world
    mapping = run_method(make_config("tiktotok", fallback="mean"), inputs).mapping
    words = {cipher_word(word) for word in WORDS}
    several = inputs.target.index().get((cipher_word("and").encode(), True))
    checked = 0
    for token in inputs.target.tokens:
        if token.special or token.text is None:
            continue
        sources, weights = mapping.row(token.id)
        if token.id == several:
            building, own, castle = (inputs.source.encode_surface(word, True)[0] for word in ("building", "and",
                                                                                           "castle"))
            assert mapping.kinds[token.id] == Kind.TRANSLATED
            assert sources.tolist() == [building, own, castle]  # most frequent first, ties in dictionary order
            assert weights.tolist() == pytest.approx([0.5, 0.3, 0.2])
        elif token.word_start and token.text.strip() in words and twin_of(inputs.source, token) is not None:
            assert mapping.kinds[token.id] == Kind.TRANSLATED, token
            assert sources.tolist() == [twin_of(inputs.source, token)] and weights.tolist() == [1.0]
            checked += 1
        elif not any(c.isalpha() for c in token.text) and inputs.source.index().get(token.key) is not None:
            assert mapping.kinds[token.id] == Kind.COPIED
            assert sources.tolist() == [inputs.source.index()[token.key]]
    assert several is not None and checked > 20


def test_every_mixed_row_applies_the_weighting_rule_exactly(cipher_world):
    mapping = run_method(make_config("tiktotok", best_weight=0.4, second_weight=0.2), cipher_world).mapping
    mixed = mapping.rows_of(Kind.MIXED)
    assert len(mixed) > 50
    for row in mixed:
        sources, weights = mapping.row(int(row))
        assert len(sources) == 3 and len(set(sources.tolist())) == 3
        assert weights.tolist() == pytest.approx(candidate_weights(3, 0.4, 0.2).tolist(), abs=1e-7)
        assert all(any(c.isalpha() for c in cipher_world.source.word_text(int(s))) for s in sources)


def test_variants_are_the_papers_ablation(cipher_world):
    kinds = {variant: run_method(make_config("tiktotok", variant=variant), cipher_world).mapping.counts()
             for variant in ("shared", "dictionary", "full")}
    assert "translated" not in kinds["shared"] and "mixed" not in kinds["shared"]
    assert kinds["dictionary"]["translated"] == kinds["full"]["translated"] > 0 and "mixed" not in kinds["dictionary"]
    assert kinds["full"]["mixed"] > 0
    # the shared variant is what `overlap` does
    overlap = run_method(make_config("overlap"), cipher_world).mapping
    shared = run_method(make_config("tiktotok", variant="shared"), cipher_world).mapping
    assert np.array_equal(overlap.kinds, shared.kinds) and np.array_equal(overlap.indices, shared.indices)


def syllable_world(words: int = 3000, seed: int = 0):
    """Words made of 60 syllables, and their ciphers: every piece of a target word has a twin among the source's."""
    rng = random.Random(seed)
    syllables = list(dict.fromkeys(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") + rng.choice(["", "n", "r", "s"])
                                   for _ in range(200)))[:60]
    vocabulary = list(dict.fromkeys("".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(words)))
    frequencies = [1 / (rank + 1) ** 0.7 for rank in range(len(vocabulary))]
    lines = [" ".join(rng.choices(vocabulary, frequencies, k=10)) for _ in range(3000)]
    return vocabulary, lines


def test_pieces_of_words_find_their_cipher_twin_through_bilingual_fasttext(tmp_path):
    """Tokens that are not whole words go through the bilingual fastText model; on a language made of shared
    syllables their twins are the best candidate for most, and among the three for more (chance: 1 in ~300)."""
    vocabulary, lines = syllable_world()
    source = Vocabulary(byte_level_tokenizer(lines, 600))
    target = Vocabulary(byte_level_tokenizer([cipher_word(line) for line in lines], 600))
    path = tmp_path / "dictionary.tsv"
    path.write_text("".join(f"{word}\t{cipher_word(word)}\n" for word in vocabulary), encoding="utf-8")
    model = train_bilingual_fasttext(path, tmp_path / "model.bin", options=SMALL)
    inputs = TransferInputs(source, target, torch.zeros(len(source), 4), resources={
        "bilingual_vectors": BilingualVectors(Dictionary.load(path), WordVectors.load(model))})
    mapping = run_method(make_config("tiktotok"), inputs).mapping
    best = among = total = 0
    for row in mapping.rows_of(Kind.MIXED):
        twin = twin_of(source, target[int(row)])
        if twin is None:
            continue
        sources, weights = mapping.row(int(row))
        total += 1
        best += int(sources[np.argmax(weights)] == twin)
        among += int(twin in sources)
    assert total > 200
    assert best / total > 0.6 and among / total > 0.7, (best, among, total)


# -- through transfer and the CLI -------------------------------------------------------------------------------------

def test_transfer_builds_and_caches_the_bilingual_model_and_records_it(tmp_path, gpt2_folder, target_tokenizer_folder,
                                                                       corpus_dir, monkeypatch):
    from langswap.cli import main

    monkeypatch.setenv("LANGSWAP_CACHE", str(tmp_path / "cache"))
    # the bilingual model is built from the dictionary the first time and read from the cache after
    args = ["-q", "transfer", "--source-model", str(gpt2_folder), "--target-tokenizer", str(target_tokenizer_folder),
            "--method", "tiktotok", "--set", f"resources.dictionary={corpus_dir / 'en-xx.tsv'}",
            "--set", "resources.bilingual_epochs=2"]
    assert main(args + ["--output", str(tmp_path / "a")]) == 0
    cached = list((tmp_path / "cache" / "bilingual-fasttext").glob("*.bin"))
    assert len(cached) == 1
    modified = cached[0].stat().st_mtime_ns
    assert main(args + ["--output", str(tmp_path / "b")]) == 0
    assert cached[0].stat().st_mtime_ns == modified
    record = json.loads((tmp_path / "b" / "langswap.json").read_text())
    report = record["resources"]["bilingual_vectors"]
    assert report["bilingual_vectors"] == str(cached[0]) and report["dictionary_pairs"] == len(WORDS)
    provenance = (tmp_path / "b" / "provenance.tsv").read_text(encoding="utf-8")
    assert "\ttranslated\t" in provenance and "\tmixed\t" in provenance

    # a model built on its own, given by path; a .vec (no n-grams) is refused naming the fix
    model = tmp_path / "en-xx.bin"
    assert main(["-q", "fasttext", "--dictionary", str(corpus_dir / "en-xx.tsv"), "--output", str(model),
                 "--set", "bucket=20000", "--set", "epoch=2"]) == 0
    assert main(args + ["--output", str(tmp_path / "c"), "--set", f"resources.bilingual_vectors={model}"]) == 0


def test_a_missing_or_reversed_dictionary_is_named_before_anything_is_written(tmp_path, gpt2_folder,
                                                                             target_tokenizer_folder, corpus_dir,
                                                                             capsys):
    from langswap.cli import main

    base = ["transfer", "--source-model", str(gpt2_folder), "--target-tokenizer", str(target_tokenizer_folder),
            "--method", "tiktotok", "--output", str(tmp_path / "out")]
    assert main(base) == 2
    assert "needs resource 'bilingual_vectors'" in unwrapped(capsys.readouterr().err)
    reversed_ = tmp_path / "xx-en.tsv"
    reversed_.write_text("".join(f"{cipher_word(w)}\t{w}\n" for w in WORDS), encoding="utf-8")
    model = train_bilingual_fasttext(reversed_, tmp_path / "xx-en.bin", options=dataclasses.replace(SMALL, epoch=1))
    assert main(base + ["--set", f"resources.dictionary={reversed_}",
                        "--set", f"resources.bilingual_vectors={model}"]) == 2
    assert "looks reversed" in unwrapped(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
    with pytest.raises(VocabularyError, match="none of the 1 pairs"):
        from langswap.resources.dictionary import check_direction

        check_direction(Dictionary([("chien", "perro")]), set(), set())
    with pytest.raises(MissingResourceError, match="not a Python file|does not exist"):
        from langswap.resources.kinds import get_resource
        from langswap.transfer import TransferConfig
        from langswap.config import from_dict

        get_resource("bilingual_vectors").check(from_dict(TransferConfig, {"resources": {
            "dictionary": str(tmp_path / "missing.tsv")}}))
