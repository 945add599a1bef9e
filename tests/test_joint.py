"""Joint vectors from code-switched text: the corpus, the held-out words, the views of one model."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from conftest import WORDS, cipher_word, unwrapped
from langswap.errors import ConfigError, VocabularyError
from langswap.resources.dictionary import Dictionary
from langswap.resources.joint import JointConfig, load_joint_vectors, write_code_switched_corpus


def markov_text(seed: int, lines: int, cipher: bool = False) -> str:
    """Walks of a fixed chain over WORDS (each word has two successors): every word has contexts of its own."""
    rng = random.Random(0)
    successors = {word: rng.sample(WORDS, 2) for word in WORDS}
    walk = random.Random(seed)
    out = []
    for _ in range(lines):
        word = walk.choice(WORDS)
        words = [word]
        for _ in range(11):
            word = walk.choice(successors[word])
            words.append(word)
        out.append(" ".join(cipher_word(w) if cipher else w for w in words))
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("joint")
    (folder / "en.txt").write_text(markov_text(1, 3000), encoding="utf-8")
    (folder / "xx.txt").write_text(markov_text(2, 3000, cipher=True), encoding="utf-8")
    (folder / "en-xx.tsv").write_text("".join(f"{w}\t{cipher_word(w)}\n" for w in WORDS), encoding="utf-8")
    return folder


def test_every_dictionary_word_but_the_held_out_ones_is_switched_at_share_one(texts, tmp_path):
    dictionary = Dictionary.load(texts / "en-xx.tsv")
    made = write_code_switched_corpus(texts / "en.txt", texts / "xx.txt", dictionary, tmp_path / "c.txt",
                                      JointConfig(share=1.0, heldout_words=10))
    held_english = {s for s, _ in made["heldout"]}
    held_cipher = {t for _, t in made["heldout"]}
    assert len(held_english) == 10 == made["heldout_words"] and made["covered_source_words"] == len(set(WORDS))
    lines = (tmp_path / "c.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6000
    # at share 1 every word the dictionary translates is replaced: a held-out word is the only one left as it was
    # in its own text, and it is never written into the other language's lines
    words = set(" ".join(lines).split())
    assert words <= set(WORDS) | {cipher_word(w) for w in WORDS}
    for line in (texts / "en.txt").read_text().splitlines()[:50]:
        switched = [w if w in held_english else cipher_word(w) for w in line.split()]
        assert " ".join(switched) in lines
    # counts are of the texts as written, before switching
    assert sum(made["counts"]["source"].values()) == 3000 * 12 == sum(made["counts"]["target"].values())
    assert made["switched"]["source"] == sum(count for word, count in made["counts"]["source"].items()
                                             if word not in held_english)
    assert made["switched"]["target"] == sum(count for word, count in made["counts"]["target"].items()
                                             if word not in held_cipher)


def test_each_pass_writes_the_texts_again_with_switches_of_its_own(texts, tmp_path):
    dictionary = Dictionary.load(texts / "en-xx.tsv")
    once = write_code_switched_corpus(texts / "en.txt", texts / "xx.txt", dictionary, tmp_path / "1.txt",
                                      JointConfig(heldout_words=10))
    twice = write_code_switched_corpus(texts / "en.txt", texts / "xx.txt", dictionary, tmp_path / "2.txt",
                                       JointConfig(heldout_words=10, passes=2))
    assert twice["lines"] == 2 * once["lines"] == 12000 and twice["heldout"] == once["heldout"]
    assert twice["counts"] == once["counts"]  # the texts as written, once
    first, both = ((tmp_path / name).read_text(encoding="utf-8").splitlines() for name in ("1.txt", "2.txt"))
    # the second pass switches other words: about as many switches again, not the first pass's lines twice over
    assert 1.8 < twice["switched"]["source"] / once["switched"]["source"] < 2.2
    assert len(set(both)) > 1.5 * len(set(first))


def test_a_dictionary_that_ties_nothing_or_a_share_of_zero_is_refused(texts, tmp_path):
    (tmp_path / "d.tsv").write_text("chien\tperro\n", encoding="utf-8")
    with pytest.raises(VocabularyError, match="no pair of dictionary 'd.tsv'.*source<TAB>target"):
        write_code_switched_corpus(texts / "en.txt", texts / "xx.txt", Dictionary.load(tmp_path / "d.tsv"),
                                   tmp_path / "c.txt", JointConfig())
    with pytest.raises(ConfigError, match="share is 0"):
        JointConfig(share=0)


def test_joint_vectors_serve_wechsel_as_one_space(tmp_path, texts, gpt2_folder, target_tokenizer_folder, capsys):
    """`langswap fasttext --joint` writes the model, its word lists and the held-out precision; a transfer reads
    it as resources.joint_vectors with no alignment, each language seeing its own words of the one model."""
    from langswap.cli import main

    model = tmp_path / "joint.bin"
    assert main(["-q", "fasttext", str(texts / "en.txt"), "--joint", str(texts / "xx.txt"), "--dictionary",
                 str(texts / "en-xx.tsv"), "--output", str(model), "--set", "dim=16", "--set", "bucket=20000",
                 "--set", "ws=2"]) == 0
    out = capsys.readouterr().out
    assert "held-out precision@1" in out
    source, target, report = load_joint_vectors(model)
    assert set(source.words) == set(WORDS) and set(target.words) == {cipher_word(w) for w in WORDS}
    assert np.array_equal(source.vectors(["river"]), target.vectors(["river"]))  # one model under both views
    assert report["queries"] == report["heldout_words"] == len(set(WORDS)) // 5
    assert main(["-q", "transfer", "--source-model", str(gpt2_folder), "--target-tokenizer",
                 str(target_tokenizer_folder), "--method", "wechsel", "--output", str(tmp_path / "out"),
                 "--set", f"resources.joint_vectors={model}"]) == 0
    assert "joint vectors joint.bin: held-out precision@1" in capsys.readouterr().out
    record = json.loads((tmp_path / "out" / "langswap.json").read_text())
    assert record["resources"]["vectors"]["precision_at_1"] == report["precision_at_1"]
    assert record["counts"]["mixed"] > 0
    # joint vectors with separate ones is a mistake the check names
    assert main(["transfer", "--source-model", str(gpt2_folder), "--target-tokenizer", str(target_tokenizer_folder),
                 "--method", "wechsel", "--output", str(tmp_path / "out2"), "--set", f"resources.joint_vectors={model}",
                 "--set", f"resources.source_vectors={model}"]) == 2
    assert "remove resources.source_vectors" in unwrapped(capsys.readouterr().err)
