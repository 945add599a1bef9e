"""Token stores: the same blocks as `pack`, the width from the vocabulary, every document's byte range, stale and
damaged stores, killed builds, `langswap prepare`, and a training run that reads its store without building it."""

from __future__ import annotations

import gzip
import json
import logging
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import byte_level_tokenizer, english_lines, sentencepiece_tokenizer, unwrapped, wordpiece_tokenizer
from langswap.errors import ResourceFormatError
from langswap.training.data import StreamSlice, pack, read_documents
from langswap.training.store import StoreBlocks, TokenStore, list_stores, remove_stores, token_store

TOKENIZERS = {"byte_level": byte_level_tokenizer, "sentencepiece": sentencepiece_tokenizer,
              "wordpiece": wordpiece_tokenizer}


@pytest.fixture(scope="module")
def tokenizers() -> dict:
    lines = english_lines(300, seed=5)
    return {name: build(lines) for name, build in TOKENIZERS.items()}


def _write_texts(folder: Path, documents: list[str]) -> dict[str, Path]:
    """The documents as .txt with what read_documents skips or strips (a byte-order mark, CRLF, empty lines, a
    last line without newline), as .txt.gz and as .jsonl with a field beside the text."""
    lines = []
    for index, document in enumerate(documents):
        lines.append(document)
        if index % 7 == 0:
            lines.append("   ")
    raw = ("\ufeff" + "\r\n".join(lines)).encode("utf-8")
    paths = {"txt": folder / "text.txt", "gz": folder / "text.txt.gz", "jsonl": folder / "text.jsonl"}
    paths["txt"].write_bytes(raw)
    paths["gz"].write_bytes(gzip.compress(raw))
    paths["jsonl"].write_text("".join(json.dumps({"id": i, "body": d}, ensure_ascii=False) + "\n"
                                      for i, d in enumerate(documents)), encoding="utf-8")
    return paths


def _blocks(dataset) -> torch.Tensor:
    return torch.stack([dataset[index]["input_ids"] for index in range(len(dataset))])


@pytest.mark.parametrize("name, objective", [("byte_level", "causal"), ("sentencepiece", "causal"),
                                             ("wordpiece", "masked")])
def test_blocks_read_from_a_store_are_the_blocks_pack_cuts(name, objective, tokenizers, tmp_path):
    """Known answer: `pack` on the documents in memory. byte_level has bos = eos (documents end with it),
    sentencepiece a bos of its own, wordpiece frames masked-LM blocks with [cls] .. [sep]. One store serves every
    sequence length, and .txt, .txt.gz and .jsonl of the same documents hold the same stream."""
    tokenizer = tokenizers[name]
    documents = english_lines(120, seed=9) + ["Ünïcödé wörds — and ✓ marks."]
    paths = _write_texts(tmp_path, documents)
    assert read_documents(paths["txt"]) == documents
    store = token_store([paths["txt"]], tokenizer, objective, data_dir=tmp_path / "stores")
    for length in (16, 29):
        packed = pack(tokenizer, documents, length, objective)
        blocks = StoreBlocks(store, tokenizer, length, objective)
        assert torch.equal(_blocks(blocks), packed.blocks) and blocks[0]["input_ids"].dtype == torch.long
        assert (store.num_tokens, store.bytes) == (packed.tokens, packed.bytes)
    assert len(list((tmp_path / "stores").iterdir())) == 1
    for kind, options in (("gz", {}), ("jsonl", {"text_field": "body"})):
        other = token_store([paths[kind]], tokenizer, objective, data_dir=tmp_path / "stores", **options)
        assert other.folder != store.folder and np.array_equal(other.tokens, store.tokens)
        assert [other.document_text(i) for i in range(other.num_documents)] == documents
    # each document's byte range in its file, and its tokens in the stream
    assert store.num_documents == len(documents)
    assert [store.document_text(i) for i in range(store.num_documents)] == documents
    last = tokenizer(documents[-1], add_special_tokens=False)["input_ids"]
    assert store.document_tokens(len(documents) - 1).tolist()[-len(last) - 1:-1] == last


@pytest.mark.parametrize("name", sorted(TOKENIZERS))
def test_the_batch_encoder_gives_the_ids_of_the_tokenizer_s_call(name, tokenizers):
    """The store's encoder (a fast tokenizer's backend, checked against the call on its first batch) against the
    call `pack` makes, on text with a special token's text, characters outside the training lines and empty text.
    A backend set to truncate goes through the call, which ignores that setting, so nothing is cut; a tokenizer
    whose call gives other ids than its backend (as one that prepares text in Python would) is read through the
    call."""
    import copy

    from langswap.training.store import BatchEncoder

    tokenizer = tokenizers[name]
    special = next(iter(tokenizer.all_special_tokens))
    texts = english_lines(40, seed=3) + [f"a {special} b", "Ünïcödé wörds — and ✓ marks.", "", "  spaced  out  "]
    expected = tokenizer(texts, add_special_tokens=False)["input_ids"]
    encoder = BatchEncoder(tokenizer)
    assert encoder(texts[:20]) == expected[:20] and encoder(texts[20:]) == expected[20:]
    assert encoder.backend is not None and encoder.checked  # the backend path, not the call
    truncating = copy.deepcopy(tokenizer)
    truncating.backend_tokenizer.enable_truncation(max_length=2)
    assert BatchEncoder(truncating).backend is None and BatchEncoder(truncating)(texts) == expected
    other = BatchEncoder(tokenizer)
    other.call = lambda batch: [[0] * len(text) for text in batch]  # a call that prepares text otherwise
    assert other(texts[:3]) == [[0] * len(text) for text in texts[:3]] and other.backend is None


def test_the_integer_width_follows_the_vocabulary(tmp_path):
    """uint16 while every id fits in 16 bits, uint32 above: a word-level vocabulary of 70,000 words stores the ids of
    its last words (above 65,535) exactly."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    def word_level(size: int):
        vocabulary = {"<eos>": 0, "<unk>": 1, **{f"w{i}": i + 2 for i in range(size - 2)}}
        backend = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Whitespace()
        return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>")

    text = tmp_path / "words.txt"
    text.write_text("w0 w65533 w65534\nw69997 w5\n", encoding="utf-8")
    for size, dtype, expected in ((65_536, np.uint16, [2, 65535, 1, 0, 1, 7, 0]),
                                  (70_000, np.uint32, [2, 65535, 65536, 0, 69999, 7, 0])):
        store = token_store([text], word_level(size), "causal", data_dir=tmp_path / "stores")
        assert store.tokens.dtype == dtype and store.tokens.tolist() == expected


def test_a_store_of_changed_text_is_built_again_and_the_log_says_so(tokenizers, tmp_path, caplog):
    tokenizer = tokenizers["byte_level"]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(english_lines(40, seed=1)) + "\n", encoding="utf-8")
    first = token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores")
    built = (first.folder / "tokens.bin").stat().st_mtime_ns
    again = token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores")
    assert (again.folder / "tokens.bin").stat().st_mtime_ns == built  # reused, not rebuilt
    with text.open("a", encoding="utf-8") as handle:
        handle.write("One more line at the end.\n")
    with caplog.at_level(logging.WARNING, logger="langswap.training.store"):
        rebuilt = token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores")
    assert "is stale" in caplog.text and "text.txt' changed" in caplog.text
    assert rebuilt.folder == first.folder and rebuilt.num_documents == 41
    assert rebuilt.num_tokens == pack(tokenizer, read_documents(text), 16, "causal").tokens


@pytest.mark.parametrize("damage", ["cut", "record"])
def test_a_damaged_store_is_refused_with_the_command_that_rebuilds_it(damage, tokenizers, tmp_path):
    tokenizer = tokenizers["byte_level"]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(english_lines(40, seed=1)) + "\n", encoding="utf-8")
    store = token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores")
    if damage == "cut":
        with open(store.folder / "tokens.bin", "r+b") as handle:
            handle.truncate(100)
        why = "tokens.bin holds 100 bytes where store.json says"
    else:
        (store.folder / "store.json").write_text("{\"format\": 1, \"tok", encoding="utf-8")
        why = "no readable store.json"
    with pytest.raises(ResourceFormatError, match=why) as error:
        token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores")
    assert f"langswap prepare --remove {store.name} --data-dir {tmp_path / 'stores'}" in str(error.value)
    assert list_stores(tmp_path / "stores")[0]["status"].startswith("damaged")


def test_a_killed_build_leaves_no_store_and_the_next_build_clears_its_leftovers(tokenizers, tmp_path, monkeypatch):
    import langswap.training.store as store_module
    from langswap.locking import OutputLock

    tokenizer = tokenizers["byte_level"]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(english_lines(40, seed=1)) + "\n", encoding="utf-8")
    stores = tmp_path / "stores"
    monkeypatch.setattr(store_module, "BATCH_DOCUMENTS", 8)
    calls, encoder = [], store_module.BatchEncoder

    def interrupted(texts):
        calls.append(len(texts))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return encoder(tokenizer)(texts)

    monkeypatch.setattr(store_module, "BatchEncoder", lambda _tokenizer: interrupted)
    with pytest.raises(KeyboardInterrupt):
        token_store([text], tokenizer, "causal", data_dir=stores)
    monkeypatch.setattr(store_module, "BatchEncoder", encoder)
    assert calls == [8, 8, 8] and not [path for path in stores.iterdir() if not path.name.startswith(".")]
    # a SIGKILL leaves its temporary folder: listed as unfinished, never read, removed by the next build
    name = token_store([text], tokenizer, "causal", data_dir=tmp_path / "elsewhere").name
    leftover = stores / f".{name}.partial-killed"
    leftover.mkdir()
    (leftover / "tokens.bin").write_bytes(b"\0" * 10)
    assert [row["status"].split()[0] for row in list_stores(stores)] == ["unfinished"]
    with OutputLock(stores / name, "token store"):  # as a build in progress holds it
        assert [row["status"] for row in list_stores(stores)] == ["being built now"]
        assert remove_stores(["all"], stores) == [] and leftover.exists()
    store = token_store([text], tokenizer, "causal", data_dir=stores)
    assert store.num_documents == 40 and not leftover.exists()


def test_blocks_pickle_without_their_tokens_and_an_empty_text_is_refused(tokenizers, tmp_path):
    """A data-loader worker gets the store's folder, not a copy of its tokens: the pickle does not grow with the
    text."""
    tokenizer = tokenizers["byte_level"]
    sizes = []
    for lines in (50, 2000):
        text = tmp_path / f"text-{lines}.txt"
        text.write_text("\n".join(english_lines(lines, seed=3)) + "\n", encoding="utf-8")
        blocks = StoreBlocks(token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores"), tokenizer, 16,
                             "causal")
        blocks[0]
        sizes.append(len(pickle.dumps(blocks)))
        assert torch.equal(pickle.loads(pickle.dumps(blocks))[len(blocks) - 1]["input_ids"],
                           blocks[len(blocks) - 1]["input_ids"])
    assert sizes[1] < sizes[0] + 200
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ResourceFormatError, match="has no text"):
        token_store([empty], tokenizer, "causal", data_dir=tmp_path / "stores")
    assert not list((tmp_path / "stores").glob("empty-*"))


def test_prepare_lists_and_removes_stores_and_train_reads_the_prepared_one(gpt2_folder, tmp_path, capsys, caplog):
    from langswap.cli import main
    from langswap.training.run import TrainConfig, train

    text = tmp_path / "train.txt"
    text.write_text("\n".join(english_lines(120, seed=4)) + "\n", encoding="utf-8")
    stores = tmp_path / "stores"
    flags = ["--model", str(gpt2_folder), "--train-text", str(text), "--data-dir", str(stores)]
    assert main(["-q", "prepare", *flags]) == 0
    (folder,) = [path for path in stores.iterdir() if not path.name.startswith(".")]
    assert f"{folder}: 120 documents" in capsys.readouterr().out
    built = (folder / "tokens.bin").stat().st_mtime_ns

    with caplog.at_level(logging.INFO, logger="langswap.training.run"):
        report = train(TrainConfig(model=str(gpt2_folder), train_text=str(text), output=str(tmp_path / "run"),
                                   data_dir=str(stores), steps=2, batch_size=2, sequence_length=16, save_steps=2,
                                   logging_steps=1))
    assert (folder / "tokens.bin").stat().st_mtime_ns == built  # read, not built again
    record = json.loads((report.output / "langswap-train.json").read_text())
    assert record["token_stores"] == {"train": str(folder)}
    store = TokenStore.open(folder)
    assert record["training_tokens"] == store.num_tokens
    # where the time goes: tokens in the store, epochs the run reads, tokens per second of the loop
    sequences = store.num_tokens // 16
    assert record["training_data"]["train"] == {"source": str(text), "store": str(folder), "documents": 120,
                                                "tokens": store.num_tokens, "sequences": sequences,
                                                "epochs": round(2 * 2 / sequences, 4)}
    (phase,) = record["phases"]
    assert (phase["loop_updates"], phase["loop_tokens"]) == (2, 2 * 2 * 16)
    assert phase["tokens_per_second"] > 0 and 0 <= phase["data_wait"] < 1
    assert f"{store.num_tokens:,} tokens in its store" in caplog.text
    assert f"the run's 2 updates read {2 * 2 / sequences:.3g} epochs" in caplog.text
    assert "2 updates read 64 tokens in" in caplog.text and "tokens/s" in caplog.text
    logged = [entry for entry in json.loads(next(report.output.glob("phase-*/final/phase.json")).read_text())[
        "log_history"] if "loss" in entry]
    assert len(logged) == 2 and all(entry["tokens_per_second"] > 0 for entry in logged)

    assert main(["prepare", "--list", "--data-dir", str(stores)]) == 0
    listing = capsys.readouterr().out
    assert f"token stores in {stores}: 1," in listing and f"{folder.name}" in listing and "ready" in listing
    assert main(["prepare", "--remove", "nosuch", "--data-dir", str(stores)]) == 2
    assert "no token store nosuch" in unwrapped(capsys.readouterr().err)
    assert main(["prepare", "--remove", folder.name, "--data-dir", str(stores)]) == 0
    assert not folder.exists() and remove_stores(["all"], stores) == []


def test_the_prepare_flags_are_the_train_configs_fields():
    """One source of truth: each flag of `langswap prepare` is a TrainConfig field with that field's help, and no
    default of its own (an unset flag leaves the config's)."""
    import dataclasses

    from langswap.cli import build_parser
    from langswap.config import field_help, flag_fields
    from langswap.training.run import TrainConfig

    prepare = build_parser()._subparsers._group_actions[0].choices["prepare"]
    actions = {action.dest: action for action in prepare._actions}
    fields = {field.name: field for field in dataclasses.fields(TrainConfig)}
    flags = [field.name for field in flag_fields(TrainConfig, "prepare")]
    assert "data_dir" in flags and "output" not in flags
    for name in flags:
        assert actions[name].help.startswith(field_help(fields[name])) and actions[name].default is None


def test_two_ranks_read_disjoint_blocks_that_together_cover_the_epoch(tokenizers, tmp_path):
    """The data path of each process of a 2-process run, as the Trainer builds it: the phase's slice of the run's
    shuffled order (`phase_dataset`), PhaseTrainer's sequential sampler, and accelerate's `prepare_data_loader`
    with the Trainer's settings for rank 0 and rank 1. Known answer: rank r's k-th micro-batch is micro-batch
    k * 2 + r of the run's order, so the ranks read disjoint blocks, and one epoch of updates reads every block
    once."""
    from accelerate.data_loader import prepare_data_loader

    from langswap.training.data import LMCollator, Stream, phase_dataset, stream_indices
    from langswap.training.trainer import PhaseTrainer

    tokenizer = tokenizers["byte_level"]
    text = tmp_path / "text.txt"
    text.write_text("\n".join(english_lines(200, seed=7)) + "\n", encoding="utf-8")
    store = token_store([text], tokenizer, "causal", data_dir=tmp_path / "stores")
    batch_size, processes, seed = 3, 2, 11
    blocks = next(blocks for length in range(16, 64)
                  if len(blocks := StoreBlocks(store, tokenizer, length, "causal")) % (batch_size * processes) == 0)
    rows = {tuple(blocks[index]["input_ids"].tolist()): index for index in range(len(blocks))}
    assert len(rows) == len(blocks)  # every block is told apart by its tokens
    order = stream_indices(len(blocks), seed, 0, len(blocks))
    phase_set = phase_dataset({"train": blocks}, [Stream("train", str(text))], seed, 0, len(blocks), batch_size)
    read = []
    for rank in range(processes):
        loader = torch.utils.data.DataLoader(phase_set, batch_size=batch_size,
                                             sampler=PhaseTrainer._get_train_sampler(None, phase_set),
                                             collate_fn=LMCollator(tokenizer, "causal"))
        loader = prepare_data_loader(loader, num_processes=processes, process_index=rank, put_on_device=False,
                                     even_batches=True, use_seedable_sampler=True, data_seed=seed)
        batches = [[rows[tuple(row)] for row in batch["input_ids"].tolist()] for batch in loader]
        assert batches == [order[(k * processes + rank) * batch_size:(k * processes + rank + 1) * batch_size]
                           for k in range(len(blocks) // (batch_size * processes))]
        read.append([index for batch in batches for index in batch])
    assert not set(read[0]) & set(read[1])
    assert sorted(read[0] + read[1]) == list(range(len(blocks)))


def test_evaluation_text_is_read_only_as_far_as_its_blocks_need(tokenizers):
    """`pack` of an endless stream of documents stops once it has `max_blocks` blocks: the evaluation text is read a
    document at a time, so its memory does not grow with the file. Known answer: the blocks of the same first
    documents as a list."""
    from itertools import count

    tokenizer = tokenizers["byte_level"]
    lines = english_lines(50, seed=2)
    drawn = []

    def endless():
        for index in count():
            drawn.append(index)
            yield lines[index % len(lines)]

    packed = pack(tokenizer, endless(), 16, "causal", max_blocks=3)
    assert packed.blocks.shape == (3, 16) and len(drawn) <= 1000  # one tokenizer call's documents at most
    expected = pack(tokenizer, [lines[index % len(lines)] for index in drawn], 16, "causal", max_blocks=3)
    assert torch.equal(packed.blocks, expected.blocks) and packed.bytes == expected.bytes


def _traced_peak(function) -> tuple[object, int]:
    """(function(), peak bytes of Python and numpy memory allocated while it ran)."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = function()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_preparing_and_reading_a_store_keep_memory_bounded_whatever_the_text_size(tokenizers, tmp_path,
                                                                                   monkeypatch):
    """Preparation reads and tokenises a batch of documents at a time and training reads a block at a time from the
    memory map: with batches of at most 32 kB of text, building the store of a text four times larger, and reading
    every block of it in a training run's shuffled order (`StreamSlice`), takes no more Python and numpy memory (tracemalloc) than for the smaller
    text, and far less than either text."""
    from langswap.training import store as store_module

    monkeypatch.setattr(store_module, "BATCH_BYTES", 1 << 15)
    tokenizer = tokenizers["byte_level"]
    lines = english_lines(400, seed=3)
    peaks = {}
    for copies in (48, 192):
        path = tmp_path / f"text-{copies}.txt"
        path.write_text("\n".join(lines * copies) + "\n", encoding="utf-8")
        size = path.stat().st_size
        store, peaks[("build", copies)] = _traced_peak(
            lambda: token_store([path], tokenizer, "causal", data_dir=tmp_path / "stores"))
        assert store.bytes >= size - len(lines) * copies - 1 and store.num_documents == len(lines) * copies
        blocks = StoreBlocks(store, tokenizer, 64, "causal")

        def read_all():  # as a training run reads them: the seeded epoch order, one block at a time
            stream = StreamSlice(blocks, seed=0, start=0, count=len(blocks))
            return sum(int(stream[index]["input_ids"][0]) for index in range(len(stream)))

        _, peaks[("read", copies)] = _traced_peak(read_all)
    assert peaks[("build", 192)] < size / 2 and peaks[("read", 192)] < size / 2, (peaks, size)
    # four times the text: the same bounds (an order of 8 bytes a block is all that grows with it)
    assert peaks[("build", 192)] < 1.5 * peaks[("build", 48)] + 100_000, peaks
    assert peaks[("read", 192)] < peaks[("read", 48)] + 8 * len(blocks) + 100_000, peaks


def test_a_run_that_reads_its_text_whole_says_which_tokens_it_never_shows(gpt2_folder, tmp_path, caplog):
    from langswap.models import load_tokenizer
    from langswap.training.run import TrainConfig, train
    from langswap.training.store import id_counts

    text = tmp_path / "train.txt"
    text.write_text("\n".join(english_lines(6, seed=9)) + "\n", encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="langswap.training.run"):
        report = train(TrainConfig(model=str(gpt2_folder), train_text=str(text), output=str(tmp_path / "run"),
                                   data_dir=str(tmp_path / "stores"), steps=4, batch_size=4, sequence_length=16,
                                   save_steps=4, logging_steps=2, unshown_rows="train"))
    record = json.loads((report.output / "langswap-train.json").read_text())
    facts = record["training_data"]["train"]
    assert facts["epochs"] >= 1
    # what the store holds, counted here from the text as the tokenizer reads it
    tokenizer = load_tokenizer(gpt2_folder)
    read = {token for line in english_lines(6, seed=9) for token in tokenizer(line)["input_ids"]}
    text_tokens = {index for index in set(range(len(tokenizer))) - set(tokenizer.added_tokens_decoder)
                   if tokenizer.decode([index]).strip() and "\ufffd" not in tokenizer.decode([index])}
    never = len(text_tokens - read)
    assert 0 < never < len(text_tokens) and facts["tokens_never_shown"] == never
    assert f"{never:,} of the model's {len(text_tokens):,} text tokens never occur in the training text" in caplog.text
    assert any(entry.levelname == "WARNING" for entry in caplog.records if "never occur" in entry.message) \
        == (never > len(text_tokens) / 10)

    # counted a chunk at a time, ids at or beyond the size left out
    stream = np.array([0, 1, 1, 5, 2, 1, 7], dtype=np.uint16)
    assert id_counts(stream, 6, chunk=3).tolist() == [1, 3, 1, 0, 0, 1]


def test_a_run_that_reads_part_of_its_text_does_not_count_what_it_never_shows(gpt2_folder, tmp_path):
    from langswap.training.run import TrainConfig, train

    text = tmp_path / "train.txt"
    text.write_text("\n".join(english_lines(200, seed=3)) + "\n", encoding="utf-8")
    report = train(TrainConfig(model=str(gpt2_folder), train_text=str(text), output=str(tmp_path / "run"),
                               data_dir=str(tmp_path / "stores"), steps=1, batch_size=2, sequence_length=16,
                               save_steps=1, logging_steps=1))
    facts = json.loads((report.output / "langswap-train.json").read_text())["training_data"]["train"]
    assert facts["epochs"] < 1 and "tokens_never_shown" not in facts


def test_unshown_rows_hold_keeps_the_rows_of_tokens_the_text_never_shows(gpt2_folder, tmp_path):
    from langswap.models import load_model, load_tokenizer
    from langswap.training.run import TrainConfig, train

    text = tmp_path / "train.txt"
    text.write_text("\n".join(english_lines(6, seed=9)) + "\n", encoding="utf-8")
    tokenizer = load_tokenizer(gpt2_folder)
    read = sorted({token for line in english_lines(6, seed=9) for token in tokenizer(line)["input_ids"]})
    start = load_model(gpt2_folder).get_input_embeddings().weight.detach().clone()
    ends, held = {}, {}
    for rows in ("hold", "train"):
        report = train(TrainConfig(model=str(gpt2_folder), train_text=str(text), output=str(tmp_path / rows),
                                   data_dir=str(tmp_path / "stores"), preset="embeddings", steps=4, batch_size=4,
                                   sequence_length=16, save_steps=4, logging_steps=2, unshown_rows=rows))
        ends[rows] = load_model(report.model).get_input_embeddings().weight.detach()
        record = json.loads((report.output / "langswap-train.json").read_text())
        held[rows] = record["phases"][0].get("rows_held")
    assert held["hold"] == record["training_data"]["train"]["tokens_never_shown"] and held["train"] is None
    shown = torch.zeros(len(start), dtype=torch.bool)
    shown[read] = True
    # held: every row the text never shows (its text tokens; byte-level leftovers train like shown ones) is as it was
    unchanged = (ends["hold"] == start).all(dim=1)
    assert not unchanged[shown].any() and unchanged.sum() >= held["hold"] > 0
    # trained: weight decay and softmax's push move the same rows
    assert not (ends["train"][~shown] == start[~shown]).all(dim=1).any()


def test_held_rows_hold_an_untied_head_and_its_bias_through_decay():
    from transformers import LlamaConfig, LlamaForCausalLM

    from langswap.training.held_rows import HeldRows

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False))
    model.lm_head.bias = torch.nn.Parameter(torch.randn(40))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    held = HeldRows.attach(model, np.array([3, 7, 39]))
    assert len(held.parameters) == 3  # the input rows, the head's and its bias
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    for _ in range(3):
        ids = torch.tensor([[1, 2, 5, 3, 7, 9]])
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        held.restore()
        optimizer.zero_grad()
    for name, parameter in model.named_parameters():
        if name in ("model.embed_tokens.weight", "lm_head.weight", "lm_head.bias"):
            assert torch.equal(parameter[[3, 7, 39]], before[name][[3, 7, 39]])
            assert not torch.equal(parameter[[1, 2, 5]], before[name][[1, 2, 5]])
