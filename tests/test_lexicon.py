"""Bilingual lexicon induction: known answers (ciphered language, a hand-built hub), blocked = dense, bad input."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from langswap.errors import ConfigError, VocabularyError
from langswap.evaluation.lexicon import LexiconConfig, lexicon_induction
from langswap.resources.retrieval import nearest_translations, retrieval_precision
from langswap.resources.alignment import align
from langswap.resources.dictionary import Dictionary
from langswap.resources.vectors import WordVectors

from conftest import WORDS, cipher_word

CIPHER_DICTIONARY = Dictionary([(word, cipher_word(word)) for word in WORDS], "en-xx")


@pytest.fixture(scope="module")
def cipher(cipher_vectors):
    return (WordVectors.load(cipher_vectors["source"]), WordVectors.load(cipher_vectors["target"]),
            cipher_vectors["rotation"])


# -- known answers -----------------------------------------------------------------------------------------------------

def test_true_rotation_translates_every_word(cipher):
    source, target, rotation = cipher  # target vectors = source vectors @ rotation
    report = lexicon_induction(source.with_transform(rotation), target, CIPHER_DICTIONARY)
    for key in ("precision_at_1", "precision_at_5", "precision_at_1_csls", "precision_at_5_csls"):
        assert report[key] == 1.0, key
    assert report["queries"] == 2 * len(WORDS)  # "the" and "The" (case variants), each with both gold forms
    assert report["word_pairs"] == 4 * len(WORDS)
    assert report["retrieval_candidates"] == len(target)


def test_unaligned_vectors_translate_almost_nothing(cipher):
    source, target, _ = cipher
    report = lexicon_induction(source, target, CIPHER_DICTIONARY)
    assert report["precision_at_1"] < 0.1 and report["precision_at_1_csls"] < 0.1


def test_align_output_is_what_lexicon_induction_evaluates(cipher):
    source, target, _ = cipher
    alignment = align(source, target, CIPHER_DICTIONARY)
    report = lexicon_induction(alignment.source, alignment.target, CIPHER_DICTIONARY, ks=(1,))
    assert report["precision_at_1"] == report["precision_at_1_csls"] == 1.0
    assert "precision_at_5" not in report


# A hub: target word "hub" is the exact image of source word "one", and it is the nearest target word of "two" too
# (cos 0.8), while "two"'s translation "zwei" is further away (cos 100/145). CSLS charges "hub" for being close to
# every source word, and ranks "zwei" first for "two".
HUB_SOURCE = {"one": (1.0, 0.0), "two": (0.8, 0.6)}
HUB_TARGET = {"hub": (1.0, 0.0), "zwei": (17 / 145, 144 / 145)}  # 17^2 + 144^2 = 145^2: a unit vector
HUB_DICTIONARY = Dictionary([("one", "hub"), ("two", "zwei")], "hub")


def hub_vectors():
    return (WordVectors(list(HUB_SOURCE), np.array(list(HUB_SOURCE.values())), name="src"),
            WordVectors(list(HUB_TARGET), np.array(list(HUB_TARGET.values())), name="tgt"))


@pytest.mark.parametrize("neighbors", [1, 2])
def test_hub_fools_nearest_neighbour_but_not_csls(neighbors):
    cos = {(s, t): float(np.dot(HUB_SOURCE[s], HUB_TARGET[t])) for s in HUB_SOURCE for t in HUB_TARGET}  # unit rows
    assert cos["two", "hub"] == pytest.approx(0.8) and cos["two", "zwei"] == pytest.approx(100 / 145)
    # r_S(y): mean cosine of target y to its `neighbors` nearest source words; r_T(x) likewise over target words
    r_source = {t: np.mean(sorted((cos[s, t] for s in HUB_SOURCE), reverse=True)[:neighbors]) for t in HUB_TARGET}
    r_target = {s: np.mean(sorted((cos[s, t] for t in HUB_TARGET), reverse=True)[:neighbors]) for s in HUB_SOURCE}
    csls = {(s, t): 2 * cos[s, t] - r_target[s] - r_source[t] for s, t in cos}
    # neighbors=1: r_S(hub) = 1, r_S(zwei) = 100/145, r_T(two) = 0.8:
    #   CSLS(two, hub) = 1.6 - 0.8 - 1 = -0.2 < CSLS(two, zwei) = 200/145 - 0.8 - 100/145 = -0.110
    assert cos["two", "hub"] > cos["two", "zwei"] and csls["two", "zwei"] > csls["two", "hub"]
    assert cos["one", "hub"] > cos["one", "zwei"] and csls["one", "hub"] > csls["one", "zwei"]

    by_cosine, by_csls = nearest_translations(np.array(list(HUB_SOURCE.values())),
                                              np.array(list(HUB_TARGET.values())),
                                              np.array(list(HUB_SOURCE.values())), k=5, csls_neighbors=neighbors)
    assert by_cosine.tolist() == [[0, 1], [0, 1]]  # both queries: hub first
    assert by_csls.tolist() == [[0, 1], [1, 0]]  # "two": zwei first

    source, target = hub_vectors()
    report = lexicon_induction(source, target, HUB_DICTIONARY, csls_neighbors=neighbors)
    assert report["precision_at_1"] == 0.5  # "two" -> hub is wrong
    assert report["precision_at_1_csls"] == 1.0
    assert report["precision_at_5"] == report["precision_at_5_csls"] == 1.0  # p@5 = 1 although p@1 < 1
    assert report["queries"] == 2 and report["retrieval_candidates"] == 2


def noisy_pair(seed: int = 0, n: int = 400, dim: int = 12, noise: float = 0.6):
    rng = np.random.default_rng(seed)
    source = rng.standard_normal((n, dim))
    target = source + noise * rng.standard_normal((n, dim))
    return source, target


def test_precision_grows_with_k():
    source, target = noisy_pair()
    report = retrieval_precision(source[:150], target, [{i} for i in range(150)], source, ks=(1, 2, 5, 10, 1000))
    for suffix in ("", "_csls"):
        values = [report[f"precision_at_{k}{suffix}"] for k in (1, 2, 5, 10, 1000)]
        assert values == sorted(values), suffix
        assert 0 < values[0] < 1 and values[-1] == 1.0  # k beyond the candidates: every gold is found
    assert report["precision_at_1_csls"] >= report["precision_at_1"] - 0.05


def test_blocked_retrieval_ranks_as_a_dense_computation():
    """Cosine and CSLS rankings from small row blocks agree with the dense float64 formulas."""
    source, target = noisy_pair(seed=1)
    queries, pool, neighbors = source[:90], source, 7
    by_cosine, by_csls = nearest_translations(queries, target, pool, k=5, csls_neighbors=neighbors,
                                              block_bytes=4 * len(target) * 8)  # 8-row blocks
    unit = lambda m: m / np.linalg.norm(m, axis=1, keepdims=True)
    cos = unit(queries) @ unit(target).T  # (90, 400)
    r_source = np.sort(unit(target) @ unit(pool).T, axis=1)[:, ::-1][:, :neighbors].mean(axis=1)  # (400,)
    r_target = np.sort(cos, axis=1)[:, ::-1][:, :neighbors].mean(axis=1)  # (90,)
    csls = 2 * cos - r_target[:, None] - r_source[None, :]
    for scores, ranked in ((cos, by_cosine), (csls, by_csls)):
        expected = np.sort(scores, axis=1)[:, ::-1][:, :5]
        assert np.allclose(np.take_along_axis(scores, ranked.numpy(), axis=1), expected, atol=1e-5)
    assert (by_cosine != by_csls).any()  # the hubness term matters on this data


def test_max_queries_case_variants_and_config_defaults(cipher):
    source, target, rotation = cipher
    aligned = source.with_transform(rotation)
    assert lexicon_induction(aligned, target, CIPHER_DICTIONARY, max_queries=10)["queries"] == 10
    plain = lexicon_induction(aligned, target, CIPHER_DICTIONARY, case_variants=False)
    assert plain["queries"] == plain["word_pairs"] == len(WORDS)
    config = LexiconConfig(ks=(1, 3), max_queries=5)
    report = lexicon_induction(aligned, target, CIPHER_DICTIONARY, **dataclasses.asdict(config))
    assert report["precision_at_3_csls"] == 1.0 and report["queries"] == 5
    assert all(field.metadata.get("help") for field in dataclasses.fields(LexiconConfig))


# -- bad input ---------------------------------------------------------------------------------------------------------

def test_reversed_dictionary_is_a_vocabulary_error(cipher):
    source, target, rotation = cipher
    reversed_dictionary = Dictionary([(t, s) for s, t in CIPHER_DICTIONARY.pairs], "xx-en")
    with pytest.raises(VocabularyError, match="not reversed.*these two languages"):
        lexicon_induction(source.with_transform(rotation), target, reversed_dictionary)


def test_vectors_of_different_dimension_must_be_aligned_first(cipher):
    source, target, _ = cipher
    projection = np.eye(source.dim, 8, dtype=np.float32)
    with pytest.raises(ConfigError, match=r"dimension 8 .* 16.*langswap align"):
        lexicon_induction(source.with_transform(projection), target, CIPHER_DICTIONARY)


@pytest.mark.parametrize("options", [{"ks": ()}, {"ks": (0, 5)}, {"ks": (1.5,)}, {"csls_neighbors": 0},
                                     {"retrieval_words": -1}, {"max_queries": 0}])
def test_bad_options_are_config_errors(cipher, options):
    source, target, rotation = cipher
    with pytest.raises(ConfigError, match=next(iter(options))):
        lexicon_induction(source.with_transform(rotation), target, CIPHER_DICTIONARY, **options)


def test_no_nan_when_every_query_has_one_candidate():
    source, target = hub_vectors()
    report = lexicon_induction(source, target, Dictionary([("one", "hub")]), ks=(1,), retrieval_words=1)
    assert report["retrieval_candidates"] == 1 and report["precision_at_1_csls"] == 1.0
    assert not any(isinstance(value, float) and math.isnan(value) for value in report.values())


def test_lexicon_command_with_and_without_the_alignment(capsys, cipher_vectors, corpus_dir, tmp_path):
    from langswap.cli import main

    args = ["--source-vectors", str(cipher_vectors["source"]), "--target-vectors", str(cipher_vectors["target"]),
            "--dictionary", str(corpus_dir / "en-xx.tsv")]
    assert main(["-q", "align", *args, "--output", str(tmp_path / "aligned")]) == 0
    capsys.readouterr()
    assert main(["-q", "lexicon", *args, "--alignment", str(tmp_path / "aligned" / "alignment.npy"), "--json"]) == 0
    aligned = json.loads(capsys.readouterr().out)
    assert aligned["precision_at_1"] == 1.0 and aligned["precision_at_5_csls"] == 1.0
    assert main(["-q", "lexicon", *args, "--set", "ks=[1]"]) == 0  # the raw spaces are rotated apart
    out = capsys.readouterr().out
    raw = float(out.split("precision@1: nearest neighbour ")[1].split()[0])
    assert raw < 0.2 and "precision@5" not in out


def test_precision_over_words_spelled_otherwise_leaves_out_names_and_loanwords():
    """In one joint space a word and its same-spelled translation are one vector: retrieving `Hotel` for `hotel` says
    nothing about how the space ties `house` to `Haus`, which the `_distinct` measures keep apart."""
    from langswap.resources.retrieval import dictionary_precision

    source = WordVectors(["hotel", "house"], np.array([[1.0, 0.0], [0.6, 0.8]]))
    target = WordVectors(["Hotel", "Haus"], np.array([[1.0, 0.0], [-0.6, 0.8]]))
    report = dictionary_precision(source, target, [("hotel", "Hotel"), ("house", "Haus")], ["hotel", "house"])
    # `house` is nearer `Hotel` (0.6) than `Haus` (0.28): half right in all, wrong on the one word spelled otherwise
    assert report["precision_at_1"] == 0.5 and report["queries"] == 2
    assert report["precision_at_1_distinct"] == 0.0 and report["distinct_queries"] == 1
    turned = WordVectors(["Hotel", "Haus"], np.array([[1.0, 0.0], [0.6, 0.8]]))
    assert dictionary_precision(source, turned, [("hotel", "Hotel"), ("house", "Haus")],
                                ["hotel", "house"])["precision_at_1_distinct"] == 1.0
