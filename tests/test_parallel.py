"""Translation probabilities from word-aligned parallel text: symmetrisation, the cipher known answer, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import CIPHER, byte_level_tokenizer, cipher_line, english_lines
from langswap.errors import ConfigError, MissingResourceError, ResourceFormatError
from langswap.resources.parallel import (ParallelConfig, TranslationTable, cached_translation_table,
                                         grow_diag_final_and, read_parallel, symmetrize, translation_table)

pytest.importorskip("eflomal")

DECIPHER = {cipher: plain for plain, cipher in CIPHER.items()}


def decipher(text: str) -> str:
    return "".join((DECIPHER[c.lower()].upper() if c.isupper() else DECIPHER[c]) if c.lower() in DECIPHER else c
                   for c in text)


@pytest.fixture(scope="module")
def parallel_world():
    english = english_lines(1200, seed=5)
    ciphered = [cipher_line(line) for line in english]
    return english, ciphered, byte_level_tokenizer(english, 300), byte_level_tokenizer(ciphered, 300)


@pytest.fixture(scope="module")
def cipher_table(parallel_world):
    english, ciphered, source_tokenizer, target_tokenizer = parallel_world
    return translation_table(english, ciphered, source_tokenizer, target_tokenizer)


def test_grow_diag_final_and_grows_to_neighbours_then_adds_unaligned_pairs():
    forward, reverse = {(0, 0), (1, 1), (2, 1), (5, 5)}, {(0, 0), (1, 1), (2, 2), (0, 4)}
    # (2, 1) and (2, 2) neighbour (1, 1) and each aligns a word so far unaligned; (5, 5) joins two unaligned words;
    # (0, 4) neighbours nothing in the alignment and its source word is aligned already
    assert grow_diag_final_and(forward, reverse) == {(0, 0), (1, 1), (2, 1), (2, 2), (5, 5)}
    assert symmetrize(forward, reverse, "intersection") == {(0, 0), (1, 1)}
    assert symmetrize({(0, 1)}, {(0, 0)}, "grow-diag-final-and") == {(0, 1)}  # forward first: source 0 is taken


def test_a_ciphered_corpus_puts_each_tokens_mass_on_its_cipher_twin(parallel_world, cipher_table):
    _, _, source_tokenizer, target_tokenizer = parallel_world
    source_vocab = source_tokenizer.get_vocab()
    target_tokens = target_tokenizer.convert_ids_to_tokens(list(range(len(target_tokenizer))))
    twins, top_is_twin, mass = 0, 0, []
    for target_id in cipher_table.covered():
        twin = source_vocab.get(decipher(target_tokens[target_id]))
        if twin is None:
            continue
        twins += 1
        ids, probs = cipher_table.row(int(target_id))
        top_is_twin += int(ids[np.argmax(probs)] == twin)
        mass.append(float(probs[ids == twin].sum()))
    report = cipher_table.report
    assert twins >= 0.8 * report.covered_tokens and report.coverage == round(twins / 300, 4)
    assert top_is_twin / twins > 0.95 and np.mean(mass) > 0.9, (top_is_twin, twins, np.mean(mass))
    assert report.covered_occurrences > 0.95 and report.mean_entropy < 0.3
    assert report.pairs_used == report.pairs_read == 1200 and report.aligner == "eflomal"


def test_a_saved_table_loads_and_belongs_to_its_tokenizers(tmp_path, parallel_world, cipher_table):
    english, _, source_tokenizer, target_tokenizer = parallel_world
    cipher_table.save(tmp_path / "table")
    loaded = TranslationTable.load(tmp_path / "table")
    for name in ("indptr", "indices", "probs"):
        assert np.array_equal(getattr(loaded, name), getattr(cipher_table, name))
    assert loaded.report.covered_tokens == cipher_table.report.covered_tokens
    loaded.check_tokenizers(source_tokenizer, target_tokenizer)
    with pytest.raises(MissingResourceError, match="another target tokenizer"):
        loaded.check_tokenizers(source_tokenizer, source_tokenizer)
    other = byte_level_tokenizer(english[:300], 200)
    with pytest.raises(MissingResourceError, match="another source tokenizer.*langswap align-parallel"):
        loaded.check_tokenizers(other, target_tokenizer)
    # a table whose rows no longer sum to one, or whose report is gone, is refused with the fix
    with np.load(tmp_path / "table" / "translations.npz") as arrays:
        arrays = dict(arrays)
    arrays["probs"] = arrays["probs"] * 0.5
    np.savez(tmp_path / "table" / "translations.npz", **arrays)
    with pytest.raises(ResourceFormatError, match="sum to 0.5.*langswap align-parallel"):
        TranslationTable.load(tmp_path / "table")
    (tmp_path / "table" / "report.json").unlink()
    with pytest.raises(MissingResourceError, match="no report.json"):
        TranslationTable.load(tmp_path / "table")


def test_parallel_files_of_different_lengths_or_without_a_tab_are_refused(tmp_path):
    (tmp_path / "en.txt").write_text("a house\nthe river\n", encoding="utf-8")
    (tmp_path / "xx.txt").write_text("q iglzt\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="different line counts.*2 lines.*1,?"):
        read_parallel(tmp_path / "en.txt", tmp_path / "xx.txt")
    (tmp_path / "pairs.tsv").write_text("a house\tq iglzt\nthe river without a tab\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="line 2 has 0 TABs"):
        read_parallel(tmp_path / "pairs.tsv")
    with pytest.raises(MissingResourceError, match="does not exist"):
        read_parallel(tmp_path / "missing.tsv")
    (tmp_path / "pairs.tsv").write_text("a house\tq iglzt\n\tthe river\n", encoding="utf-8")
    assert read_parallel(tmp_path / "pairs.tsv") == (["a house", ""], ["q iglzt", "the river"])
    with pytest.raises(ConfigError, match="symmetrize"):
        ParallelConfig(symmetrize="union")


def test_pairs_with_an_empty_side_are_skipped_and_counted(parallel_world, caplog):
    english, ciphered, source_tokenizer, target_tokenizer = parallel_world
    left, right = list(english[:400]), list(ciphered[:400])
    left[3], right[7] = "", "   "
    table = translation_table(left, right, source_tokenizer, target_tokenizer)
    assert table.report.skipped_empty == 2 and table.report.pairs_used == 398
    assert "2 of 400 parallel pairs have an empty side" in caplog.text
    with pytest.raises(ResourceFormatError, match="none of the 2 parallel pairs"):
        translation_table(["", "x"], ["y", ""], source_tokenizer, target_tokenizer)


def test_a_table_built_from_files_is_cached_by_its_inputs(tmp_path, parallel_world, monkeypatch):
    english, ciphered, source_tokenizer, target_tokenizer = parallel_world
    text = tmp_path / "en-xx.tsv"
    text.write_text("".join(f"{a}\t{b}\n" for a, b in zip(english[:300], ciphered[:300])), encoding="utf-8")
    first = cached_translation_table(text, None, source_tokenizer, target_tokenizer, cache=tmp_path / "cache")
    assert first.report.text == [str(text)]
    import langswap.resources.parallel as parallel

    def no_alignment(*args, **kwargs):
        raise AssertionError("aligned again")

    monkeypatch.setattr(parallel, "align_token_ids", no_alignment)
    again = cached_translation_table(text, None, source_tokenizer, target_tokenizer, cache=tmp_path / "cache")
    assert np.array_equal(again.probs, first.probs)
    with pytest.raises(AssertionError, match="aligned again"):  # other options are another table
        cached_translation_table(text, None, source_tokenizer, target_tokenizer, ParallelConfig(min_count=1),
                                 cache=tmp_path / "cache")
    record = json.loads(next((tmp_path / "cache").glob("*/report.json")).read_text())
    assert record["options"]["min_count"] == 2 and record["target_size"] == len(target_tokenizer)


def test_align_parallel_writes_a_table_from_two_files_and_refuses_an_existing_folder(tmp_path, parallel_world,
                                                                                      capsys):
    from langswap.cli import main

    english, ciphered, source_tokenizer, target_tokenizer = parallel_world
    source_tokenizer.save_pretrained(tmp_path / "en-tokenizer")
    target_tokenizer.save_pretrained(tmp_path / "xx-tokenizer")
    (tmp_path / "en.txt").write_text("\n".join(english[:300]) + "\n", encoding="utf-8")
    (tmp_path / "xx.txt").write_text("\n".join(ciphered[:300]) + "\n", encoding="utf-8")
    argv = ["-q", "align-parallel", tmp_path / "en.txt", "--target-text", tmp_path / "xx.txt", "--source-tokenizer",
            tmp_path / "en-tokenizer", "--target-tokenizer", tmp_path / "xx-tokenizer", "--output", tmp_path / "table",
            "--set", "symmetrize=intersection"]
    assert main([str(arg) for arg in argv]) == 0
    assert "target tokens have translation probabilities" in capsys.readouterr().out
    table = TranslationTable.load(tmp_path / "table")
    table.check_tokenizers(source_tokenizer, target_tokenizer)
    assert table.report.options["symmetrize"] == "intersection" and table.report.pairs_used == 300
    assert main([str(arg) for arg in argv]) != 0
    assert "exists" in capsys.readouterr().err
