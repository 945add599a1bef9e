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
    from langswap.resources.alignment import AlignConfig, align
    from langswap.resources.dictionary import Dictionary
    from langswap.resources.vectors import WordVectors

    dictionary = Dictionary.load(SHARED_DATA / "dicts" / "muse-en-de.tsv")
    assert len(dictionary) > 100_000
    alignment = align(WordVectors.load(small_vectors["en"]), WordVectors.load(small_vectors["de"]), dictionary,
                      AlignConfig(heldout_words=500))
    report = alignment.report
    assert report["word_pairs"] > 2_000
    # Chance is 1 / (German words searched), about 9e-5 here. Vectors from 20,000 lines of mismatched domains
    # (manual pages and the Bible in English, manual pages and jokes in German) are weak: 0.004 to 0.01 was measured
    # (40 to 120 times chance); a broken alignment stays at chance.
    chance = 1 / report["retrieval_candidates"]
    assert report["precision_at_1"] > 20 * chance
    assert report["precision_at_1_csls"] > 20 * chance


def test_freedict_swahili_coverage_is_reported():
    from langswap.resources.dictionary import Dictionary

    dictionary = Dictionary.load(SHARED_DATA / "dicts" / "freedict-en-sw.tsv")
    assert len(dictionary) > 1_000
    assert all("\t" not in source and "\t" not in target for source, target in dictionary.pairs)
