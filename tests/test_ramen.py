"""`ramen`: rows from translation probabilities, out of aligned parallel text or of aligned word vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import byte_level_tokenizer, cipher_line, english_lines
from langswap.errors import ConfigError, MissingResourceError
from langswap.methods import Kind, TransferInputs, get_method, make_config, run_method
from langswap.tokens import Vocabulary
from test_tiktotok import twin_of

pytest.importorskip("eflomal")


@pytest.fixture(scope="module")
def parallel_world():
    english = english_lines(1200, seed=3)
    ciphered = [cipher_line(line) for line in english]
    source_tokenizer = byte_level_tokenizer(english, 380)  # trained on the same text: twin vocabularies
    target_tokenizer = byte_level_tokenizer(ciphered, 380)
    embeddings = torch.randn(len(source_tokenizer), 16, generator=torch.Generator().manual_seed(0))
    return english, ciphered, source_tokenizer, target_tokenizer, embeddings


def test_rows_from_parallel_text_are_their_cipher_twins_rows(parallel_world):
    from langswap.resources.parallel import translation_table

    english, ciphered, source_tokenizer, target_tokenizer, embeddings = parallel_world
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    table = translation_table(english, ciphered, source_tokenizer, target_tokenizer)
    result = run_method(make_config("ramen"), TransferInputs(source, target, embeddings,
                                                             resources={"translations": table}))
    translated = np.flatnonzero(result.mapping.kinds == Kind.TRANSLATED)
    assert len(translated) == len([row for row in table.covered() if not target[int(row)].special]) > 100
    close = []
    for row in translated:
        twin = twin_of(source, target[int(row)])
        if twin is None:
            continue
        cosine = torch.nn.functional.cosine_similarity(result.embeddings[row], embeddings[twin], dim=0)
        close.append(float(cosine))
    assert len(close) > 0.95 * len(translated) and np.mean(np.array(close) > 0.99) > 0.95, np.mean(close)
    # rows without probabilities get the fallback; the special token its role's row
    assert set(np.unique(result.mapping.kinds)) <= {Kind.TRANSLATED, Kind.SUBWORD, Kind.MEAN, Kind.SPECIAL}


def test_rows_from_aligned_vectors_are_a_sparsemax_of_cosines_led_by_the_twin(cipher_vectors):
    from test_known_answers import whole_word_cipher_world

    inputs, twins = whole_word_cipher_world(cipher_vectors)
    result = run_method(make_config("ramen", probabilities="vectors"), inputs)
    for _, source_id, row in twins:
        sources, weights = result.mapping.row(row)
        assert result.mapping.kinds[row] == Kind.TRANSLATED
        twin = weights[sources == source_id]
        assert len(twin) == 1 and twin[0] == weights.max()  # (a token of the same words, e.g. without the space, ties)
        assert weights.sum() == pytest.approx(1, abs=1e-5) and (weights > 0).all()


def test_sparsemax_weights_match_a_hand_computation():
    from langswap.methods.focus import sparse_anchor_weights

    anchors = np.eye(3, dtype=np.float32)
    query = np.array([[0.6, 0.8, 0.0]], dtype=np.float32)  # cosines 0.6, 0.8, 0 to the three anchors
    # sorted 0.8, 0.6, 0: 1 + 2 * 0.6 > 0.8 + 0.6 keeps two, 1 + 3 * 0 < 1.4 stops; tau = (1.4 - 1) / 2 = 0.2
    lengths, indices, weights = sparse_anchor_weights(query, anchors, first_candidates=2)
    assert lengths.tolist() == [2]
    got = dict(zip(indices.tolist(), weights.tolist()))
    assert got[1] == pytest.approx(0.6, abs=1e-6) and got[0] == pytest.approx(0.4, abs=1e-6)
    assert sum(got.values()) == pytest.approx(1.0, abs=1e-6) and got.get(2, 0.0) == 0.0


def test_the_options_say_which_resource_is_needed(tmp_path):
    from langswap.config import from_dict
    from langswap.methods.base import check_resources
    from langswap.transfer import TransferConfig

    spec = get_method("ramen")
    parallel = from_dict(TransferConfig, {"method": "ramen"})
    assert spec.kinds(parallel) == ("translations",)
    with pytest.raises(MissingResourceError, match="resources.parallel_text.*align-parallel"):
        check_resources(spec, parallel)
    vectors = from_dict(TransferConfig, {"method": {"name": "ramen", "probabilities": "vectors"},
                                         "resources": {"parallel_text": str(tmp_path / "x.tsv")}})
    assert spec.kinds(vectors) == ("vectors",)  # the parallel text is not read
    with pytest.raises(MissingResourceError, match="resources.source_vectors"):
        check_resources(spec, vectors)
    with pytest.raises(ConfigError, match="probabilities.*parallel, vectors"):
        make_config("ramen", probabilities="nowhere")
    (tmp_path / "x.tsv").write_text("a\tb\n", encoding="utf-8")
    both = from_dict(TransferConfig, {"method": "ramen", "resources": {"parallel_text": str(tmp_path / "x.tsv"),
                                                                       "translation_table": str(tmp_path)}})
    with pytest.raises(ConfigError, match="remove"):
        check_resources(spec, both)


def test_a_transfer_from_parallel_text_records_the_coverage_and_a_saved_table_of_other_tokenizers_is_refused(
        tmp_path, gpt2_folder, target_tokenizer_folder, corpus_dir):
    from langswap.cli import main
    from langswap.models import load_tokenizer
    from langswap.resources.parallel import cached_translation_table

    english = english_lines(600, seed=1)
    pairs = tmp_path / "en-xx.tsv"
    pairs.write_text("".join(f"{line}\t{cipher_line(line)}\n" for line in english), encoding="utf-8")
    common = ["-q", "transfer", "--source-model", str(gpt2_folder), "--target-tokenizer",
              str(target_tokenizer_folder), "--method", "ramen", "--set", "calibration.strength=0"]
    assert main([*common, "--output", str(tmp_path / "out"), "--set", f"resources.parallel_text={pairs}"]) == 0
    record = json.loads((tmp_path / "out" / "langswap.json").read_text())
    report = record["resources"]["translations"]
    assert report["pairs_used"] == 600 and report["covered_tokens"] >= record["counts"]["translated"] > 100
    # a table built with other tokenizers: refused, naming the side and the fix
    other = tmp_path / "other-table"
    cached_translation_table(pairs, None, load_tokenizer(str(target_tokenizer_folder)),
                             load_tokenizer(str(target_tokenizer_folder)), cache=tmp_path / "cache").save(other)
    assert main([*common, "--output", str(tmp_path / "out2"), "--set", f"resources.translation_table={other}"]) != 0
    assert not (tmp_path / "out2").exists()


def test_a_table_that_covers_little_warns_and_the_rest_falls_back(parallel_world, caplog):
    from langswap.resources.parallel import ParallelConfig, translation_table

    english, ciphered, source_tokenizer, target_tokenizer, embeddings = parallel_world
    table = translation_table(english[:20], ciphered[:20], source_tokenizer, target_tokenizer,
                              ParallelConfig(min_count=8))
    assert table.report.covered_occurrences < 0.5
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    result = run_method(make_config("ramen", fallback="mean"), TransferInputs(source, target, embeddings,
                                                                              resources={"translations": table}))
    assert "translation probabilities" in caplog.text and "fallback (mean)" in caplog.text
    counts = result.mapping.counts()
    assert counts["mean"] > counts.get("translated", 0) and torch.isfinite(result.embeddings).all()
