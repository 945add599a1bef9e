"""Start rows: what a transfer writes for training's start, and `langswap train`'s `start_rows`."""

from __future__ import annotations

import shutil
from collections import Counter

import numpy as np
import pytest
import torch

from langswap.errors import ConfigError
from langswap.start_rows import START_FILE, StartRows, put_in_place


def test_start_rows_round_trip_and_follow_a_pruned_vocabulary(tmp_path):
    start = StartRows("choose", np.array([2, 5, 7]), np.arange(12, dtype=np.float32).reshape(3, 4),
                      bias=np.array([0.5, 1.5, 2.5], dtype=np.float32))
    start.save(tmp_path / START_FILE)
    again = StartRows.load(tmp_path / START_FILE)
    assert again.candidate == "choose" and again.ids.tolist() == [2, 5, 7] and again.output is None
    assert np.array_equal(again.input, start.input) and np.array_equal(again.bias, start.bias)
    # rows taken as [0, 1, 7, 3, 2]: token 5 was dropped, 7 and 2 renumbered
    kept = again.rows([0, 1, 7, 3, 2])
    assert kept.ids.tolist() == [4, 2] and np.array_equal(kept.input, start.input[[0, 2]])
    assert kept.bias.tolist() == [0.5, 2.5] and kept.own is None
    start.own = np.array([True, False, True])
    start.save(tmp_path / START_FILE)
    again = StartRows.load(tmp_path / START_FILE)
    assert again.own.dtype == bool and again.own.tolist() == [True, False, True]
    assert again.rows([0, 1, 7, 3, 2]).own.tolist() == [True, True]


def test_own_source_rows_are_the_rows_that_hold_the_source_row_of_the_same_string():
    from conftest import byte_level_tokenizer, english_lines

    from langswap.methods.mapping import Kind, TokenMapping
    from langswap.start_rows import own_source_rows
    from langswap.tokens import Vocabulary

    lines = english_lines(200)
    source = Vocabulary(byte_level_tokenizer(lines))
    target = Vocabulary(byte_level_tokenizer(lines[:100] + ["zebra quokka " * 3] * 20))
    shared = [i for i in range(len(target)) if source.lookup(target[i], target.family) is not None][-2:]
    alone = next(i for i in range(len(target)) if source.lookup(target[i], target.family) is None)
    mapping = TokenMapping.empty(len(target))
    same = source.lookup(target[shared[0]], target.family)
    mapping.set_ragged_rows(np.array([shared[0], shared[1], alone]), Kind.TRANSLATED, np.array([2, 1, 1]),
                            np.array([same, 0, 0, 0]), np.array([0.5, 0.5, 1.0, 1.0], dtype=np.float32))
    assert 0 not in (same, source.lookup(target[shared[1]], target.family))  # the second is made of another row
    assert own_source_rows(mapping, source, target, [shared[0], shared[1], alone]).tolist() == [True, False, False]


def test_put_in_place_writes_only_the_rows_asked_for_and_refuses_another_models_rows():
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(vocab_size=20, n_embd=8, n_layer=1, n_head=2, n_positions=16))
    before = model.get_input_embeddings().weight.detach().clone()
    start = StartRows("choose", np.array([3, 4, 9]), np.full((3, 8), 7.0, dtype=np.float32))
    assert put_in_place(model, start, [4, 9, 11]) == 2  # 11 has no start row
    after = model.get_input_embeddings().weight.detach()
    assert torch.all(after[[4, 9]] == 7.0) and torch.equal(after[3], before[3])
    assert torch.equal(model.get_output_embeddings().weight.detach(), after)  # tied: the head follows
    assert put_in_place(model, start, []) == 0
    with pytest.raises(ConfigError, match="another model"):
        put_in_place(model, StartRows("choose", np.array([1]), np.zeros((1, 4), dtype=np.float32)), [1])


def test_langswap_train_starts_the_rows_of_frequent_tokens_from_the_start_rows(tmp_path, gpt2_folder, corpus_dir):
    """`start_rows: frequent` puts the start rows of the tokens the run shows at least `start_rows_shows` times in
    place before the first update (the step-0 snapshot has them), and says how many; `transfer` and a high count
    leave the rows as written."""
    from transformers import AutoModelForCausalLM

    from langswap.models import load_tokenizer
    from langswap.records import read_train_record
    from langswap.training.run import TrainConfig, train

    folder = tmp_path / "transfer"
    shutil.copytree(gpt2_folder, folder)
    text = corpus_dir / "en.txt"
    tokenizer = load_tokenizer(folder)
    counts = Counter(token for line in text.read_text(encoding="utf-8").splitlines()
                     for token in tokenizer(line, add_special_tokens=False)["input_ids"])
    ranked = [token for token, _ in counts.most_common()]
    frequent, rare = ranked[:3], ranked[-3:]
    assert counts[rare[0]] * 4 < counts[frequent[-1]]
    ids = np.array(frequent + rare)
    width = AutoModelForCausalLM.from_pretrained(folder).config.n_embd
    StartRows("choose", ids, np.full((len(ids), width), 0.25, dtype=np.float32)).save(folder / START_FILE)
    written = AutoModelForCausalLM.from_pretrained(folder).get_input_embeddings().weight.detach()
    # one update of 2 x 16 tokens reads a small part of the text: a token's shows are its count times that part
    shows = (counts[rare[0]] * counts[frequent[-1]]) ** 0.5 * 2 * 16 / sum(counts.values())

    def start_of(name, **options):
        config = TrainConfig(model=str(folder), train_text=str(text), output=str(tmp_path / name), steps=1,
                             batch_size=2, sequence_length=16, save_steps=1, logging_steps=1, preset="embeddings",
                             snapshot_steps=[0], start_rows_shows=shows, **options)
        train(config)
        record = read_train_record(tmp_path / name)
        snapshot = AutoModelForCausalLM.from_pretrained(tmp_path / name / "snapshots" / "step-0")
        return record, snapshot.get_input_embeddings().weight.detach()

    record, rows = start_of("frequent")
    epochs = next(iter(record.training_data.values()))["epochs"]
    placed = [token for token in ids.tolist() if counts[token] * epochs >= shows]
    assert placed == frequent  # the estimate of the epochs above put the threshold between the two
    assert record.phases[0].start_rows == len(placed)
    assert torch.all(rows[placed] == 0.25)
    torch.testing.assert_close(rows[rare], written[rare])
    StartRows("choose", ids, np.full((len(ids), width), 0.25, dtype=np.float32),
              own=np.array([token == frequent[0] for token in ids.tolist()])).save(folder / START_FILE)
    record, rows = start_of("own-skipped", start_rows_own="skip")  # a row holding its source row starts as written
    assert record.phases[0].start_rows == len(placed) - 1
    torch.testing.assert_close(rows[frequent[0]], written[frequent[0]])
    assert torch.all(rows[frequent[1:]] == 0.25)
    record, rows = start_of("own-taken")
    assert record.phases[0].start_rows == len(placed)
    record, rows = start_of("as-written", start_rows="transfer")
    assert record.phases[0].start_rows is None
    torch.testing.assert_close(rows, written)
    with pytest.raises(ConfigError, match="start_rows"):
        TrainConfig(model=str(folder), train_text=str(text), output=str(tmp_path / "bad"),
                    start_rows="choose").validate()
