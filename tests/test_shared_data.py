"""Integration on real data from ../shared/data (skipped when it is absent): German/English vectors + MUSE."""

from __future__ import annotations

import pytest

from conftest import SHARED_DATA

pytestmark = [pytest.mark.shared_data,
              pytest.mark.skipif(not (SHARED_DATA / "splits").is_dir(), reason="../shared/data is absent")]


@pytest.fixture(scope="module")
def small_vectors(tmp_path_factory):
    """fastText on the first 20,000 lines of each training split (small, so the test stays quick)."""
    from langswap.resources.fasttext_train import FastTextConfig, train_fasttext

    folder = tmp_path_factory.mktemp("real-vectors")
    paths = {}
    for language in ("en", "de"):
        lines = (SHARED_DATA / "splits" / f"{language}.train.txt").read_text(encoding="utf-8").splitlines()[:20000]
        text = folder / f"{language}.txt"
        text.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths[language] = train_fasttext(text, folder / f"{language}.bin",
                                         FastTextConfig(dim=50, epoch=3, minCount=3, bucket=200_000, seed=0))
    return paths


def test_muse_dictionary_aligns_real_vectors(small_vectors):
    """Procrustes on MUSE pairs retrieves held-out translations far more often than a rotation fitted on the same
    pairs with their targets shuffled (a broken alignment). Vectors from 20,000 lines of mismatched domains (manual
    pages and the Bible in English, manual pages and jokes in German) are weak, and fastText on several threads is
    not deterministic: precision@1 is a handful of hits and moves by a factor of three between runs, so the
    comparison is made on precision@10 over about 1,800 queries (0.03 measured against at most 0.005 for the
    broken rotation, chance being 0.0009)."""
    import random

    from langswap.resources.alignment import AlignConfig, align
    from langswap.resources.dictionary import Dictionary, require_coverage
    from langswap.resources.retrieval import dictionary_precision
    from langswap.resources.vectors import WordVectors

    dictionary = Dictionary.load(SHARED_DATA / "dicts" / "muse-en-de.tsv")
    assert len(dictionary) > 100_000
    english, german = WordVectors.load(small_vectors["en"]), WordVectors.load(small_vectors["de"])
    report = align(english, german, dictionary, AlignConfig(heldout_words=500)).report
    assert report.word_pairs > 2_000
    assert report.queries > 500 and 0 <= report.precision_at_1 <= 1

    pairs = require_coverage(dictionary, english, german).pairs
    words = sorted({source.casefold() for source, _ in pairs})
    held = set(random.Random(0).sample(words, 1500))
    heldout = sorted({source for source, _ in pairs if source.casefold() in held})
    train = [(source, target) for source, target in pairs if source.casefold() not in held]
    targets = [target for _, target in train]
    random.Random(1).shuffle(targets)
    shuffled = [(source, target) for (source, _), target in zip(train, targets)]

    def precision_at_10(fitted_on):
        rotated = align(english, german, Dictionary(fitted_on)).source
        return dictionary_precision(rotated, german, pairs, heldout, ks=(10,))

    aligned, broken = precision_at_10(train), precision_at_10(shuffled)
    assert aligned["queries"] > 1_000
    chance = 10 / aligned["retrieval_candidates"]
    for measure in ("precision_at_10", "precision_at_10_csls"):
        assert aligned[measure] > 10 * chance, (measure, aligned, chance)
        assert aligned[measure] > 3 * broken[measure], (measure, aligned, broken)


def test_freedict_swahili_coverage_is_reported():
    from langswap.resources.dictionary import Dictionary

    dictionary = Dictionary.load(SHARED_DATA / "dicts" / "freedict-en-sw.tsv")
    assert len(dictionary) > 1_000
    assert all("\t" not in source and "\t" not in target for source, target in dictionary.pairs)
