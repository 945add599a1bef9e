"""The source model as a teacher during training (langswap.training.teacher): the options and the check it shares
with the transfer's distillation, each block's text read again by the teacher's tokenizer from the same byte, matched
positions that have read the same text, the distance joining the loss, resume, and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import byte_level_tokenizer, english_lines, save_model, sentencepiece_tokenizer, tiny_model

from langswap.errors import ConfigError, MissingResourceError
from langswap.training.run import TrainConfig, train
from langswap.training.store import StoreBlocks, token_store
from langswap.training.teacher import TeacherBlocks, TeacherCollator, TeacherConfig


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("teacher-text")
    lines = english_lines(120, seed=5) + ["Straße café naïve: déjà vu, über Ökonomie", "日本語 の テキスト"]
    (folder / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "eval.txt").write_text("\n".join(english_lines(20, seed=6)) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def tokenizers():
    lines = english_lines(300, seed=5)
    return {"source": byte_level_tokenizer(lines, 400), "byte_level": byte_level_tokenizer(lines, 300),
            "sentencepiece": sentencepiece_tokenizer(lines, 300)}


@pytest.fixture(scope="module")
def models(tmp_path_factory, tokenizers) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("teacher-models")
    source = save_model(tiny_model("llama", len(tokenizers["source"]), seed=1), tokenizers["source"],
                        root / "source")
    student = save_model(tiny_model("llama", len(tokenizers["sentencepiece"]), seed=2), tokenizers["sentencepiece"],
                         root / "student")
    (student / "langswap.json").write_text(json.dumps({"kind": "transfer", "config": {"source_model": str(source)}}))
    gpt2 = save_model(tiny_model("gpt2", len(tokenizers["source"])), tokenizers["source"], root / "gpt2")
    # models that read any text badly: a head 50 times as large makes confident random guesses
    peaky_source = save_model(_peaky(tiny_model("llama", len(tokenizers["source"]), seed=1)), tokenizers["source"],
                              root / "peaky-source")
    peaky_student = save_model(_peaky(tiny_model("llama", len(tokenizers["sentencepiece"]), seed=2)),
                               tokenizers["sentencepiece"], root / "peaky-student")
    (peaky_student / "langswap.json").write_text((student / "langswap.json").read_text())
    return {"source": source, "student": student, "gpt2": gpt2, "peaky_source": peaky_source,
            "peaky_student": peaky_student}


def _peaky(model):
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(50)
    return model


def _blocks(texts: Path, tokenizer, tmp_path: Path, length: int = 32) -> StoreBlocks:
    store = token_store([str(texts / "train.txt")], tokenizer, "causal", data_dir=tmp_path / "stores")
    return StoreBlocks(store, tokenizer, length, "causal")


def _read(tokenizer, ids) -> str:
    """The text of `ids` with special tokens left out and spaces dropped (SentencePiece's decoder strips the
    space a text starts with, so a piece's first word reads without it)."""
    return tokenizer.decode([int(i) for i in ids], skip_special_tokens=True).replace(" ", "")


@pytest.mark.parametrize("target", ["byte_level", "sentencepiece"])
def test_matched_positions_have_read_the_same_text(target, texts, tokenizers, tmp_path):
    """Known answer: at every matched pair, the student's tokens up to its position and the teacher's up to its
    spell the same text (from the block's start, documents' frames aside)."""
    student_tokenizer, source = tokenizers[target], tokenizers["source"]
    blocks = _blocks(texts, student_tokenizer, tmp_path)
    view = TeacherBlocks(blocks, student_tokenizer, source, positions=None)
    matched = checked = 0
    for index in range(len(view)):
        item = view[index]
        assert item["teacher_mismatched"] == 0
        ids, teacher = item["input_ids"].tolist(), item["teacher_ids"].tolist()
        assert len(item["student_at"]) == len(item["teacher_at"])
        assert np.all(np.diff(item["student_at"]) > 0) and np.all(np.diff(item["teacher_at"]) > 0)
        for p, q in zip(item["student_at"].tolist(), item["teacher_at"].tolist()):
            student_text, teacher_text = _read(student_tokenizer, ids[:p + 1]), _read(source, teacher[:q + 1])
            if "\ufffd" in student_text + teacher_text:
                continue  # a boundary inside a character: the decoders spell a cut character each their own way
            assert student_text == teacher_text
            checked += 1
        matched += len(item["student_at"])
        # the teacher reads the whole block: its text is the block's text, up to the end of a character the block
        # cuts after its last byte
        assert _read(source, teacher).startswith(_read(student_tokenizer, ids).rstrip("\ufffd"))
    assert checked > 0.95 * matched and matched > 2 * len(view)  # more than a couple of boundaries a block


def test_a_gz_training_text_gives_the_teacher_the_readings_of_the_plain_file(texts, tokenizers, tmp_path):
    """The same text as .txt.gz: the teacher reads it back from the store's text copy, made when the view is made,
    and every block's reading is the plain file's."""
    import gzip

    from langswap.training.store import TEXTS

    student_tokenizer, source = tokenizers["sentencepiece"], tokenizers["source"]
    packed = tmp_path / "train.txt.gz"
    packed.write_bytes(gzip.compress((texts / "train.txt").read_bytes()))
    plain = TeacherBlocks(_blocks(texts, student_tokenizer, tmp_path), student_tokenizer, source, positions=None)
    store = token_store([str(packed)], student_tokenizer, "causal", data_dir=tmp_path / "stores")
    view = TeacherBlocks(StoreBlocks(store, student_tokenizer, 32, "causal"), student_tokenizer, source,
                         positions=None)
    assert (store.folder / TEXTS).is_file() and len(view) == len(plain)
    for index in range(len(view)):
        mine, theirs = view[index], plain[index]
        assert mine.keys() == theirs.keys()
        assert all(np.array_equal(np.asarray(mine[key]), np.asarray(theirs[key])) for key in mine)


def test_the_teacher_frames_each_document_as_its_tokenizer_frames_documents(texts, tokenizers, tmp_path):
    """The student (SentencePiece) frames a document <s> text </s>, the GPT-2 style teacher text <|endoftext|>: one
    teacher frame for each document end the block holds, and no other special token."""
    student_tokenizer, source = tokenizers["sentencepiece"], tokenizers["source"]
    view = TeacherBlocks(_blocks(texts, student_tokenizer, tmp_path), student_tokenizer, source, positions=None)
    ends = 0
    for index in range(len(view)):
        item = view[index]
        teacher = item["teacher_ids"].tolist()
        assert teacher.count(source.eos_token_id) == item["input_ids"].tolist().count(student_tokenizer.eos_token_id)
        ends += teacher.count(source.eos_token_id)
    assert ends >= 100  # nearly every document ends inside a block


def _unknown_bpe(lines: list[str]):
    """SentencePiece-style BPE with an unknown token and no byte fallback: characters it never saw read as <unk>."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0)])
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                                             show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def test_chunks_one_tokenizer_cannot_spell_are_counted_not_matched(texts, tokenizers, tmp_path):
    """The target reads 日本語 as <unk> (its training lines are ASCII): those chunks are left unmatched and counted."""
    target = _unknown_bpe(english_lines(300, seed=5))
    view = TeacherBlocks(_blocks(texts, target, tmp_path), target, tokenizers["source"], positions=None)
    counted = sum(view[index]["teacher_unencodable_chunks"] for index in range(len(view)))
    assert counted >= 1
    for index in range(len(view)):
        item = view[index]
        ids = item["input_ids"].tolist()
        for p in item["student_at"].tolist():  # no matched position is an unknown token
            assert ids[p] != target.unk_token_id


@pytest.mark.parametrize("positions", [None, 12])
def test_the_likelihood_spans_are_single_chunks_inside_one_document(positions, texts, tokenizers, tmp_path):
    """`chunk_adjacent` marks a matched position whose previous one ends the chunk just before it in the same
    document: a span it marks holds no frame or unknown token on either side, every seam between documents and
    every span around an unknown token is unmarked, also where the teacher is cut at its position limit; the
    collator keeps it aligned with `student_at`, row after row."""
    from langswap.training.data import LMCollator

    target, source = _unknown_bpe(english_lines(300, seed=5)), tokenizers["source"]
    view = TeacherBlocks(_blocks(texts, target, tmp_path), target, source, positions=positions)
    frames = {target.bos_token_id, target.eos_token_id, target.unk_token_id}
    marked = seams = unknowns = 0
    for index in range(len(view)):
        item = view[index]
        at, teacher_at, adjacent = item["student_at"], item["teacher_at"], item["chunk_adjacent"]
        assert adjacent.dtype == bool and len(adjacent) == len(at) == len(teacher_at)
        ids, teacher = item["input_ids"].tolist(), item["teacher_ids"].tolist()
        for k in range(1, len(at)):
            span, teacher_span = ids[at[k - 1] + 1:at[k] + 1], teacher[teacher_at[k - 1] + 1:teacher_at[k] + 1]
            if adjacent[k]:
                marked += 1
                assert not frames & set(span) and source.eos_token_id not in teacher_span
            else:
                seams += target.eos_token_id in span
                unknowns += target.unk_token_id in span
    assert marked > 2 * len(view) and seams > 0 and unknowns > 0
    items = [view[index] for index in range(5)]
    expected = np.concatenate([item["chunk_adjacent"] for item in items])
    batch = TeacherCollator(LMCollator(target, "causal"))([dict(item) for item in items])
    assert torch.equal(batch["chunk_adjacent"], torch.from_numpy(expected))
    assert len(batch["chunk_adjacent"]) == len(batch["student_at"])


def test_a_teacher_cut_at_its_position_limit_keeps_only_matches_inside(texts, tokenizers, tmp_path):
    student_tokenizer, source = tokenizers["sentencepiece"], tokenizers["source"]
    blocks = _blocks(texts, student_tokenizer, tmp_path)
    whole = TeacherBlocks(blocks, student_tokenizer, source, positions=None)[3]
    cut = TeacherBlocks(blocks, student_tokenizer, source, positions=10)[3]
    assert len(cut["teacher_ids"]) == 10 and np.all(cut["teacher_at"] < 10)
    keep = whole["teacher_at"] < 10
    assert np.array_equal(cut["student_at"], whole["student_at"][keep])


@pytest.mark.parametrize("document_mask", [False, True])
def test_the_same_model_and_tokenizer_as_teacher_gives_the_student_states_where_both_read_the_same_tokens(
        document_mask, texts, tokenizers, models, tmp_path):
    """Known answer for the positions and the flattening: with the student as its own teacher, wherever the teacher
    has read exactly the student's tokens up to the matched position, the distance there is zero."""
    from langswap.kernels import hidden_state_distance
    from langswap.models import load_model
    from langswap.training.data import LMCollator

    tokenizer = tokenizers["source"]
    blocks = _blocks(texts, tokenizer, tmp_path)
    view = TeacherBlocks(blocks, tokenizer, tokenizer, positions=None)
    collator = TeacherCollator(LMCollator(tokenizer, "causal"))
    if document_mask:
        pytest.importorskip("transformers.masking_utils", reason="packed documents need transformers 4.54 or later")
    collator = TeacherCollator(LMCollator(tokenizer, "causal", document_mask=document_mask), 0,
                               tokenizer.eos_token_id)
    batch = collator([view[index] for index in range(6)])
    assert ("teacher_position_ids" in batch) == document_mask
    model = load_model(models["source"])
    with torch.no_grad():
        student = model(input_ids=batch["input_ids"], position_ids=batch.get("position_ids"),
                        output_hidden_states=True).hidden_states
        teacher = model(input_ids=batch["teacher_ids"], position_ids=batch.get("teacher_position_ids"),
                        output_hidden_states=True).hidden_states
    length, width = batch["input_ids"].shape[1], batch["teacher_ids"].shape[1]
    flat_student, flat_teacher = batch["input_ids"].reshape(-1), batch["teacher_ids"].reshape(-1)
    pairs = []
    for s, t in zip(batch["student_at"].tolist(), batch["teacher_at"].tolist()):
        row_s, p = divmod(s, length)
        row_t, q = divmod(t, width)
        assert row_s == row_t  # a block's matches stay in its row
        if p == q and torch.equal(flat_student[row_s * length:s + 1], flat_teacher[row_t * width:t + 1]):
            pairs.append((s, t))
    assert len(pairs) > 20
    s, t = (torch.tensor(column) for column in zip(*pairs))
    assert float(hidden_state_distance(student, teacher, s, t, (1, 2), "mse")) < 1e-8
    # and a pairing off by one is far from it
    assert float(hidden_state_distance(student, teacher, s, t.roll(1), (1, 2), "mse")) > 0.01


def test_the_chunk_likelihood_match_is_the_binary_cross_entropy_of_each_chunk_s_probability():
    """Known answer on hand-made logits: row 0 has matched positions 0 and 2 on the student's side (one chunk of
    two tokens) and 0 and 1 on the teacher's (the same chunk as one token); row 1 one matched position (no chunk)."""
    from langswap.training.teacher import chunk_likelihood_match

    student_logits = torch.tensor([[[0.0, 1.0], [2.0, 0.0], [0.0, 0.0]], [[0.0, 0.0]] * 3])
    student_ids = torch.tensor([[0, 1, 0], [0, 0, 0]])
    teacher_logits = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], [[0.0, 0.0, 0.0]] * 2])
    teacher_ids = torch.tensor([[0, 2], [0, 0]])
    student_at, teacher_at = torch.tensor([0, 2, 3]), torch.tensor([0, 1, 2])  # row 1: position 0 of each
    value = chunk_likelihood_match(student_logits, student_ids, teacher_logits, teacher_ids, student_at, teacher_at,
                                   (3, 2))
    log_s = torch.log_softmax(torch.tensor([0.0, 1.0]), 0)[1] + torch.log_softmax(torch.tensor([2.0, 0.0]), 0)[0]
    p_t = torch.softmax(torch.tensor([1.0, 0.0, 0.0]), 0)[2]
    expected = -(p_t * log_s + (1 - p_t) * torch.log1p(-log_s.exp()))
    assert torch.allclose(value, expected)
    # the teacher's softmax runs over its own tokenizer's tokens: a third logit the student's side lacks is cut
    cut = chunk_likelihood_match(student_logits, student_ids, torch.cat([teacher_logits, torch.full((2, 2, 1), 9.0)],
                                 -1), teacher_ids, student_at, teacher_at, (3, 2))
    assert torch.allclose(cut, expected)
    # a span whose end is not adjacent to its start (an unmatched chunk between) is left out
    apart = chunk_likelihood_match(student_logits, student_ids, teacher_logits, teacher_ids, student_at, teacher_at,
                                   (3, 2), torch.tensor([False, False, False]))
    assert float(apart) == 0.0
    assert torch.allclose(chunk_likelihood_match(student_logits, student_ids, teacher_logits, teacher_ids, student_at,
                                                 teacher_at, (3, 2), torch.tensor([False, True, False])), expected)


def test_distillation_and_training_share_one_definition_of_the_teachers_options():
    """`DistillConfig` and `TeacherConfig` take layers, distance and when from `TeacherMatch`: the same defaults,
    choices and checks, each error naming its own section, while each keeps its own fields' order."""
    import dataclasses

    from langswap.training.teacher import TeacherMatch
    from langswap.transfer.distill import DistillConfig

    fields = {cls: {field.name: field for field in dataclasses.fields(cls)} for cls in (DistillConfig, TeacherConfig)}
    for name in ("layers", "distance", "when"):
        one, other = fields[DistillConfig][name], fields[TeacherConfig][name]
        assert one.default == other.default and one.metadata.get("choices") == other.metadata.get("choices")
    assert list(fields[TeacherConfig]) == ["weight", "model", "layers", "distance", "likelihood_weight", "when"]
    assert list(fields[DistillConfig])[5:7] == ["layers", "distance"] and list(fields[DistillConfig])[-2] == "when"
    for cls, section in ((DistillConfig, "distill"), (TeacherConfig, "teacher")):
        assert issubclass(cls, TeacherMatch) and cls(layers=[2, 2, -1]).layers == (2, -1)
        with pytest.raises(ConfigError, match=rf"^{section}\.distance is 'l1'; choose mse or cosine"):
            cls(distance="l1")
        with pytest.raises(ConfigError, match=rf"^{section}\.when is 'never'; choose teacher-better or always"):
            cls(when="never")
        with pytest.raises(ConfigError, match=rf"^{section}\.layers holds 0"):
            cls(layers=[0])


def test_the_likelihood_check_compares_the_same_bytes_and_decides_when_the_teacher_teaches():
    """Known answer: uniform logits over 4 tokens cost log 4 nats a token, over 2 tokens log 2; the side with the
    lower sum reads the text better, a tie counts against the teacher, and `when` decides from the report."""
    import math

    from langswap.training.teacher import LikelihoodCheck, not_measured

    check = LikelihoodCheck("chunk")
    check.units = 3
    check.add("teacher", torch.zeros(6, 2), torch.zeros(6, dtype=torch.long))
    check.add("student", torch.zeros(6, 4), torch.zeros(6, dtype=torch.long))
    report = check.report(windows_left_out=1)
    assert list(report) == ["measured", "chunks", "windows_left_out", "teacher_nats_per_chunk",
                            "student_nats_per_chunk", "teacher_worse"]
    assert report["teacher_nats_per_chunk"] == round(6 * math.log(2) / 3, 4) and not report["teacher_worse"]
    assert report["student_nats_per_chunk"] == round(6 * math.log(4) / 3, 4)
    tie = LikelihoodCheck("block")
    tie.units = 1
    for side in ("teacher", "student"):
        tie.add(side, torch.zeros(2, 3), torch.tensor([0, 1]))
    worse = tie.report()
    assert worse["blocks"] == 1 and worse["teacher_worse"]
    better, always = TeacherConfig(weight=1), TeacherConfig(weight=1, when="always")
    assert better.teaches(report) and not better.teaches(worse) and always.teaches(worse)
    assert better.teaches(not_measured("no training block has two matched positions"))


@pytest.fixture(scope="module")
def plain(models, texts, tmp_path_factory):
    """The weights of a run without a teacher, which runs with one are compared with."""
    from safetensors.torch import load_file

    report = train(_config(models, texts, tmp_path_factory.mktemp("plain") / "plain"))
    return load_file(str(report.model / "model.safetensors"))


def _config(models, texts, output: Path, **options) -> TrainConfig:
    base = dict(model=str(models["student"]), train_text=str(texts / "train.txt"), output=str(output),
                preset="embeddings", steps=4, batch_size=2, sequence_length=32, save_steps=2, logging_steps=1,
                data_dir=str(output.parent / "stores"))
    base.update(options)
    return TrainConfig(**base)


def test_training_with_the_teacher_adds_its_distance_and_resumes_to_the_same_weights(models, texts, plain,
                                                                                    tmp_path):
    from safetensors.torch import load_file

    teacher = {"weight": 1.0, "layers": [1, -1], "when": "always", "likelihood_weight": 0.5}
    taught = train(_config(models, texts, tmp_path / "taught", teacher=teacher))
    summary = taught.phases[0].teacher
    assert summary.teacher_distance > 0 and summary.teacher_matched > 5 and summary.layers == [1, 2]
    assert summary.teacher_likelihood > 0 and summary.used
    assert summary.check == {"measured": False, "why": "teacher.when is always"}  # used whatever it reads
    a, b = plain, load_file(str(taught.model / "model.safetensors"))
    changed = [name for name in a if not torch.equal(a[name], b[name])]
    assert changed and all("embed" in name or "lm_head" in name for name in changed), changed

    # killed after its first checkpoint, rerun: the same weights as the uninterrupted run
    from transformers import TrainerCallback

    class Crash(Exception):
        pass

    class CrashAt3(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                raise Crash()

    config = _config(models, texts, tmp_path / "resumed", teacher=teacher)
    with pytest.raises(Crash):
        train(config, callbacks=[CrashAt3()])
    resumed = train(config)
    c = load_file(str(resumed.model / "model.safetensors"))
    assert all(torch.equal(b[name], c[name]) for name in b)


def test_a_teacher_matched_below_its_last_layer_is_read_only_that_deep_and_teaches_the_same(models, texts,
                                                                                             tmp_path, monkeypatch):
    """Matching block 1 of 2 without the likelihood term: the teacher's forward stops after block 1 and the run
    ends on the weights of one whose teacher reads the whole body."""
    from safetensors.torch import load_file

    from langswap.models import HiddenStates

    calls = []
    early = HiddenStates._early
    monkeypatch.setattr(HiddenStates, "_early", lambda self, inputs: calls.append(1) or early(self, inputs))
    teacher = {"weight": 1.0, "layers": [1], "when": "always"}
    stopped = train(_config(models, texts, tmp_path / "stopped", teacher=teacher))
    assert len(calls) >= 4 and stopped.phases[0].teacher.layers == [1]
    monkeypatch.setattr(HiddenStates, "_early", lambda self, inputs: None)  # every batch through the whole body
    whole = train(_config(models, texts, tmp_path / "whole", teacher=teacher))
    a, b = load_file(str(stopped.model / "model.safetensors")), load_file(str(whole.model / "model.safetensors"))
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_teacher_that_reads_the_text_worse_than_the_model_is_not_used_unless_asked(models, texts, plain, tmp_path):
    """Before any update both read the first training blocks: a teacher with the higher loss is dropped (the run
    is the run without it, bitwise), and a teacher with the lower loss teaches (`when: always` keeps any teacher:
    the test above)."""
    from safetensors.torch import load_file

    worse = {"weight": 1.0, "model": str(models["peaky_source"])}
    dropped = train(_config(models, texts, tmp_path / "dropped", teacher=worse))
    assert dropped.phases[0].teacher.used is False and dropped.phases[0].teacher.check["teacher_worse"]
    a, b = plain, load_file(str(dropped.model / "model.safetensors"))
    assert all(torch.equal(a[name], b[name]) for name in a)
    better = train(_config(models, texts, tmp_path / "better", model=str(models["peaky_student"]),
                           teacher={"weight": 1.0}))
    check = better.phases[0].teacher.check
    assert check["measured"] and not check["teacher_worse"] and check["blocks"] > 4
    assert check["teacher_nats_per_block"] < check["student_nats_per_block"]


def test_bad_teachers_are_refused(models, texts, tmp_path):
    with pytest.raises(ConfigError, match="teacher.weight"):
        TeacherConfig(weight=-1)
    with pytest.raises(ConfigError, match="teacher.layers holds 0, the input embeddings"):
        TeacherConfig(weight=1, layers=[0])
    with pytest.raises(ConfigError, match="teacher.layers is 'last'; give a list of layer indices"):
        TeacherConfig(weight=1, layers="last")
    assert TeacherConfig(weight=1, layers=[2, 2, -1]).layers == (2, -1)
    with pytest.raises(ConfigError, match="teacher.when"):
        TeacherConfig(weight=1, when="sometimes")
    with pytest.raises(MissingResourceError, match="teacher.model"):
        _config(models, texts, tmp_path / "a", teacher={"weight": 1, "model": str(tmp_path / "nowhere")}).validate()
    with pytest.raises(ConfigError, match="architecture"):
        train(_config(models, texts, tmp_path / "b", teacher={"weight": 1, "model": str(models["gpt2"])}))
    with pytest.raises(ConfigError, match="records no source model"):
        train(_config(models, texts, tmp_path / "c", model=str(models["source"]), teacher={"weight": 1}))
    with pytest.raises(ConfigError, match="blocks"):
        train(_config(models, texts, tmp_path / "d", teacher={"weight": 1, "layers": [5]}))
    with pytest.raises(ConfigError, match="several text streams"):
        _config(models, texts, tmp_path / "e", preset="ramen", teacher={"weight": 1},
                recipe={"source_model": str(models["source"]), "source_text": str(texts / "eval.txt")}).validate()


def test_teachers_the_run_cannot_use_are_refused_with_the_reason(models, texts, tokenizers, tmp_path, monkeypatch):
    """Another width (hidden states are matched entry by entry), a masked LM (its state at a token reads the whole
    window), and a sharded run (the teacher would be a whole copy on every process): each refused before any
    update, saying why and what to set."""
    import transformers
    from conftest import wordpiece_tokenizer

    import langswap.training.run as run

    wide = transformers.LlamaConfig(vocab_size=len(tokenizers["source"]), hidden_size=48, intermediate_size=64,
                                    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                    max_position_embeddings=128, tie_word_embeddings=False)
    torch.manual_seed(0)
    wider = save_model(transformers.LlamaForCausalLM(wide), tokenizers["source"], tmp_path / "wider")
    with pytest.raises(ConfigError, match=r"teacher's width \(hidden_size 48\) is not the model's \(32\)"):
        train(_config(models, texts, tmp_path / "a", teacher={"weight": 1, "model": str(wider)}))
    assert not (tmp_path / "a" / "model").exists()

    wordpiece = wordpiece_tokenizer(english_lines(300, seed=5), 300)
    masked = save_model(tiny_model("bert", len(wordpiece)), wordpiece, tmp_path / "bert")
    with pytest.raises(ConfigError, match="teacher.weight is for causal LMs.*Set teacher.weight: 0"):
        train(_config(models, texts, tmp_path / "b", model=str(masked),
                      teacher={"weight": 1, "model": str(masked)}))

    monkeypatch.setattr(run, "sharding_engine", lambda: "FSDP")
    with pytest.raises(ConfigError, match="teacher.weight is set under FSDP.*whole unsharded copy on every process"):
        train(_config(models, texts, tmp_path / "c", teacher={"weight": 1}))

