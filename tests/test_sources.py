"""Sources of training text beside .txt/.gz/.jsonl: parquet files, folders and globs of files, Hugging Face datasets.
Each holds the stream of the same documents as a text file, finds every document again by its row, is rebuilt when
its files change, and bad input is refused with what to fix."""

from __future__ import annotations

import gzip
import json
import logging
import sys

import numpy as np
import pytest
import torch

from conftest import byte_level_tokenizer, english_lines
from langswap.errors import ConfigError, MissingResourceError, ResourceFormatError
from langswap.training.data import pack
from langswap.training.sources import check_source, expand
from langswap.training.store import StoreBlocks, list_stores, token_store


@pytest.fixture(scope="module")
def tokenizer():
    return byte_level_tokenizer(english_lines(300, seed=5))


@pytest.fixture()
def hf_cache(tmp_path, monkeypatch):
    """The datasets cache of the test (load_dataset converts a local folder into Arrow files there)."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    return datasets


def _write_parquet(path, texts: list, column: str = "text") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(len(texts))), column: texts}), path, row_group_size=7)


def _documents_and_reference(tokenizer, tmp_path):
    documents = english_lines(60, seed=9) + ["Ünïcödé wörds — and ✓ marks."]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(documents) + "\n", encoding="utf-8")
    return documents, token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores")


def _assert_same_stream(source, documents, reference, tokenizer, tmp_path):
    store = token_store([source], tokenizer, "causal", data_dir=tmp_path / "stores")
    assert store.folder != reference.folder and np.array_equal(store.tokens, reference.tokens), source
    assert [store.document_text(i) for i in range(store.num_documents)] == documents
    for length in (16, 29):
        assert torch.equal(torch.stack([item["input_ids"] for item in StoreBlocks(store, tokenizer, length,
                                                                                 "causal")]),
                           pack(tokenizer, documents, length, "causal").blocks)


def test_parquet_files_a_folder_and_a_glob_hold_the_stream_of_the_text_file(tokenizer, tmp_path):
    """Known answer: the store of the same documents as a .txt file, and `pack`'s blocks. Null and blank rows are
    skipped and keep their row numbers; a folder reads its .parquet files in sorted order and leaves a README; a
    document is found again by its row, across row groups of 7 rows."""
    pytest.importorskip("pyarrow")
    documents, reference = _documents_and_reference(tokenizer, tmp_path)
    corpus = tmp_path / "corpus"
    (corpus / "more").mkdir(parents=True)
    _write_parquet(corpus / "a.parquet", documents[:20] + [None, "   "] + documents[20:30])
    _write_parquet(corpus / "more" / "b.parquet", documents[30:])
    (corpus / "README.md").write_text("# not text to train on\n", encoding="utf-8")
    (corpus / ".cache").mkdir()
    _write_parquet(corpus / ".cache" / "c.parquet", ["hidden"])

    assert [part.path for part in expand(corpus)] == [str(corpus / "a.parquet"), str(corpus / "more" / "b.parquet")]
    for source in (corpus, f"{corpus}/**/*.parquet"):
        _assert_same_stream(source, documents, reference, tokenizer, tmp_path)
    folder_store = token_store([corpus], tokenizer, "causal", data_dir=tmp_path / "stores")
    part, start, end = folder_store.source(20)  # the 21st document: rows 20 and 21 were null and blank
    assert (part["path"], part["unit"], start, end) == (str(corpus / "a.parquet"), "row", 22, 23)
    part, start, end = folder_store.source(30)
    assert (part["path"], start, end) == (str(corpus / "more" / "b.parquet"), 0, 1)
    assert [row["files"] for row in list_stores(tmp_path / "stores") if row["name"] == folder_store.name] == \
        [[str(corpus)]]


def test_gz_and_parquet_parts_are_read_back_from_a_text_copy_made_once(tokenizer, tmp_path, monkeypatch):
    """A store of a .txt, a .txt.gz and a parquet file: `prepare_texts` copies the text of the .gz and parquet
    parts alone (the .txt is read back by seeking), every document reads back as it was, a pickled store (a
    data-loader worker) reads the same copy, the copy is made once, and an incomplete copy is made again. Too
    little disk is refused before anything is written."""
    pytest.importorskip("pyarrow")
    import pickle

    from langswap.errors import OutputSpaceError
    from langswap.training import store as store_module

    documents = english_lines(45, seed=4) + ["Ünïcödé wörds — and ✓ marks."]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(documents[:15]) + "\n", encoding="utf-8")
    (corpus / "b.txt.gz").write_bytes(gzip.compress(("\n".join(documents[15:30]) + "\n").encode("utf-8")))
    _write_parquet(corpus / "c.parquet", documents[30:38] + [None] + documents[38:])
    store = token_store([corpus], tokenizer, "causal", data_dir=tmp_path / "stores")
    texts, index = store.folder / store_module.TEXTS, store.folder / store_module.TEXT_INDEX
    assert store.copies_text and not texts.exists()

    monkeypatch.setattr(store_module.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 10})())
    with pytest.raises(OutputSpaceError, match="free space there"):
        store.prepare_texts()
    assert not texts.exists() and not index.exists() and not list(store.folder.glob(".*partial"))
    monkeypatch.undo()

    store.prepare_texts()
    copied = sum(len(document.encode("utf-8")) for document in documents[15:])
    assert texts.stat().st_size == copied and index.stat().st_size == (len(documents) + 1) * 8
    offsets = np.fromfile(index, dtype=np.int64)
    assert (offsets[:16] == 0).all() and offsets[-1] == copied  # the .txt's documents take no bytes
    assert [store.document_text(i) for i in range(store.num_documents)] == documents
    worker = pickle.loads(pickle.dumps(store))
    assert [worker.document_text(i) for i in range(40, store.num_documents)] == documents[40:]
    made = texts.stat().st_mtime_ns
    token_store([corpus], tokenizer, "causal", data_dir=tmp_path / "stores").prepare_texts()
    assert texts.stat().st_mtime_ns == made

    index.write_bytes(index.read_bytes()[:-8])  # cut: made again at the next first read
    again = token_store([corpus], tokenizer, "causal", data_dir=tmp_path / "stores")
    assert again.document_text(20) == documents[20] and index.stat().st_size == (len(documents) + 1) * 8
    plain = token_store([corpus / "a.txt"], tokenizer, "causal", data_dir=tmp_path / "stores")
    plain.prepare_texts()
    assert not plain.copies_text and not (plain.folder / store_module.TEXTS).exists()


def test_datasets_by_folder_and_saved_to_disk_hold_the_stream_of_the_text_file(tokenizer, tmp_path, hf_cache):
    documents, reference = _documents_and_reference(tokenizer, tmp_path)
    lines = tmp_path / "lines"
    lines.mkdir()
    (lines / "train.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in documents), encoding="utf-8")
    saved = tmp_path / "saved"
    hf_cache.Dataset.from_dict({"text": documents, "n": list(range(len(documents)))}).save_to_disk(str(saved))
    for source in (f"hf:{lines}", f"hf:{saved}?split=train"):
        _assert_same_stream(source, documents, reference, tokenizer, tmp_path)
    dataset_store = token_store([f"hf:{saved}"], tokenizer, "causal", data_dir=tmp_path / "stores")
    part, start, end = dataset_store.source(5)
    assert (part["kind"], part["split"], part["rows"], start, end) == ("dataset", "train", len(documents), 5, 6)


def test_a_folder_that_gains_a_file_is_built_again_in_the_same_store(tokenizer, tmp_path, caplog):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(english_lines(20, seed=1)) + "\n", encoding="utf-8")
    (corpus / "b.txt.gz").write_bytes(gzip.compress(
        ("\n".join(english_lines(10, seed=2)) + "\n").encode("utf-8")))
    for source in (corpus, str(corpus / "*.txt*")):
        first = token_store([source], tokenizer, "causal", data_dir=tmp_path / "stores")
        assert first.num_documents == 30
    (corpus / "c.txt").write_text("One more document.\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="langswap.training.store"):
        again = token_store([corpus], tokenizer, "causal", data_dir=tmp_path / "stores")
    assert "is stale" in caplog.text and "now names 3 parts" in caplog.text and "c.txt" in caplog.text
    assert again.folder == token_store([corpus], tokenizer, "causal", data_dir=tmp_path / "stores").folder
    assert again.num_documents == 31 and again.document_text(30) == "One more document."
    assert [row["files"][0] for row in list_stores(tmp_path / "stores")].count(str(corpus)) == 1


def test_sources_that_cannot_be_read_are_refused_with_what_to_fix(tokenizer, tmp_path, hf_cache, monkeypatch):
    pytest.importorskip("pyarrow")
    stores = tmp_path / "stores"
    with pytest.raises(MissingResourceError, match="matches no file.*quote the pattern"):
        token_store([str(tmp_path / "nowhere" / "*.parquet")], tokenizer, "causal", data_dir=stores)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("x", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match=r"holds no \.txt.*\.parquet file at any depth \(it holds: notes.md"):
        check_source(tmp_path / "docs")
    _write_parquet(tmp_path / "body.parquet", ["A document."], column="body")
    with pytest.raises(ResourceFormatError, match="has no column 'text' \\(it has: id, body\\); set text_field"):
        token_store([tmp_path / "body.parquet"], tokenizer, "causal", data_dir=stores)
    with pytest.raises(ResourceFormatError, match="column 'id' holds int64, not text"):
        token_store([tmp_path / "body.parquet"], tokenizer, "causal", text_field="id", data_dir=stores)
    _write_parquet(tmp_path / "empty.parquet", [None, "  "])
    with pytest.raises(ResourceFormatError, match="has no text in its column 'text'"):
        token_store([tmp_path / "empty.parquet"], tokenizer, "causal", data_dir=stores)
    (tmp_path / "cut.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(ResourceFormatError, match="not a readable parquet file"):
        token_store([tmp_path / "cut.parquet"], tokenizer, "causal", data_dir=stores)
    empty = tmp_path / "empty-dataset"
    hf_cache.Dataset.from_dict({"text": [None, ""]}).save_to_disk(str(empty))
    with pytest.raises(ResourceFormatError, match="has no text"):
        token_store([f"hf:{empty}"], tokenizer, "causal", data_dir=stores)
    lines = tmp_path / "lines"
    lines.mkdir()
    (lines / "train.jsonl").write_text(json.dumps({"text": "A document."}) + "\n", encoding="utf-8")
    with pytest.raises(MissingResourceError, match="Unknown split \"test\".*split="):
        token_store([f"hf:{lines}?split=test"], tokenizer, "causal", data_dir=stores)
    with pytest.raises(ConfigError, match="'splits=train' is not an option.*config=VALUE, split=VALUE"):
        check_source(f"hf:{empty}?splits=train")
    assert not [path for path in stores.iterdir() if not path.name.startswith(".")]
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as where pyarrow is not installed
    with pytest.raises(MissingResourceError, match="pip install 'pyarrow>=15'.*langswap\\[data\\]"):
        check_source(tmp_path / "body.parquet", "train_text")


def test_train_and_prepare_read_a_parquet_folder_and_evaluate_on_a_dataset(gpt2_folder, tmp_path, hf_cache, capsys):
    pytest.importorskip("pyarrow")
    from langswap.cli import main
    from langswap.training.run import TrainConfig, train

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _write_parquet(corpus / "a.parquet", english_lines(60, seed=4))
    _write_parquet(corpus / "b.parquet", english_lines(60, seed=6))
    held_out = tmp_path / "held-out"
    hf_cache.Dataset.from_dict({"text": english_lines(40, seed=8)}).save_to_disk(str(held_out))
    stores = tmp_path / "stores"
    assert main(["-q", "prepare", "--model", str(gpt2_folder), "--train-text", str(corpus), "--data-dir",
                 str(stores)]) == 0
    assert "120 documents" in capsys.readouterr().out
    report = train(TrainConfig(model=str(gpt2_folder), train_text=str(corpus), eval_text=f"hf:{held_out}",
                               output=str(tmp_path / "run"), data_dir=str(stores), steps=2, batch_size=2,
                               sequence_length=16, eval_sequences=4, save_steps=2))
    record = json.loads((report.output / "langswap-train.json").read_text())
    assert record["training_data"]["train"]["documents"] == 120
    assert [entry["step"] for entry in report.curve["eval"]] == [0, 2]  # evaluated on 4 blocks of the dataset
