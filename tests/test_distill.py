"""Token distillation (langswap.transfer.distill): a relabelled tokenizer recovered by distillation alone, rows and weights
that must not move left bitwise as they were, the untied head's two rules, skips and refusals.

The known answer: a target tokenizer that is the source tokenizer with its ids shuffled reads every text into the
same pieces, so its chunks are single tokens and the best student row of each piece is the source row of the same
piece. Distillation from random rows must find it (cosine > 0.99) for every piece the text shows at least 5 times.
Matched at layer 1, the raw residual stream after the first block: the last layer of a LayerNorm model (GPT-2) comes
after a final LayerNorm, and every block reads the stream through one, so the component of an input row along the
all-ones direction never reaches it and cannot be recovered there.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import byte_level_tokenizer, english_lines, sentencepiece_tokenizer, tiny_model, wordpiece_tokenizer
from families import relabelled

from langswap.errors import ConfigError
from langswap.reports import DistillationReport
from langswap.transfer.distill import DistillConfig, coverage_order, distill

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lines() -> list[str]:
    return english_lines(400)


@pytest.fixture(scope="module")
def source_tokenizer():
    return byte_level_tokenizer(english_lines(), 400)


def random_rows(model, seed: int, keep: np.ndarray | None = None) -> torch.Tensor:
    """Overwrite the model's input rows with random ones of the same scale (rows `keep` stay); returns the old
    matrix."""
    weight = model.get_input_embeddings().weight
    before = weight.detach().clone()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        weight.copy_(torch.randn(weight.shape, generator=generator) * before.std())
        if keep is not None:
            weight[torch.from_numpy(keep)] = before[torch.from_numpy(keep)]
    return before


def token_counts(tokenizer, lines: list[str]) -> Counter:
    return Counter(token for line in lines for token in tokenizer(line, add_special_tokens=False)["input_ids"])


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_relabelled_tokenizer_is_recovered_from_random_rows(kind, lines, source_tokenizer):
    target_tokenizer, permutation = relabelled(source_tokenizer, seed=1)
    model = tiny_model(kind, len(source_tokenizer))
    special = np.zeros(len(source_tokenizer), dtype=bool)
    special[0] = True  # <|endoftext|>: copied by a transfer, the frame every line is read after
    source = random_rows(model, seed=5, keep=special)
    before = model.get_input_embeddings().weight.detach().clone()
    config = DistillConfig(tokens=40_000, learning_rate=1e-2, layers=(1,), batch_lines=16, held_out_lines=32,
                           head="keep", when="always")  # a random body: neither side reads the text
    report = distill(model, source, source_tokenizer, target_tokenizer, lines, ~special, config)

    assert report.kept and report.loss_end < 0.01 * report.loss_start, report
    assert report.teacher_check.as_dict() == {"measured": False, "why": "no source head was given (distill's source_head)"}
    assert report.chunks_skipped == report.chunks_too_long == 0
    learned = model.get_input_embeddings().weight.detach()
    counts = token_counts(target_tokenizer, lines[:-32])
    frequent = sorted(token for token, count in counts.items() if count >= 5)
    source_of = np.argsort(permutation)  # target id -> source id of the same piece
    similarity = torch.nn.functional.cosine_similarity(learned[frequent], source[source_of[frequent]], dim=-1)
    assert len(frequent) > 100
    assert similarity.min() > 0.99, (similarity.min(), int((similarity <= 0.99).sum()))
    # a row the training text never shows gets no gradient, and AdamW (weight decay 0) leaves it exactly
    unseen = sorted(set(range(1, len(target_tokenizer))) - set(counts))
    assert unseen and torch.equal(learned[unseen], before[unseen])


def _untied_setup(lines, source_tokenizer):
    """A Llama body (untied head) with a target tokenizer of another family, half its rows trainable."""
    target_tokenizer = sentencepiece_tokenizer(lines, 300)
    model = tiny_model("llama", len(target_tokenizer), seed=1)
    source = torch.randn(len(source_tokenizer), model.config.hidden_size, generator=torch.Generator().manual_seed(2))
    trainable = np.random.default_rng(3).random(len(target_tokenizer)) < 0.5
    return model, source * 0.02, target_tokenizer, trainable


@pytest.mark.parametrize("head", ["lm", "keep"])
def test_only_trainable_rows_change_and_everything_is_restored(head, lines, source_tokenizer):
    model, source, target_tokenizer, trainable = _untied_setup(lines, source_tokenizer)
    model.train()
    frozen = model.model.layers[0].mlp.up_proj.weight
    frozen.requires_grad_(False)
    flags = {name: parameter.requires_grad for name, parameter in model.named_parameters()}
    before = snapshot(model)
    source_before = source.clone()
    config = DistillConfig(tokens=3_000, learning_rate=1e-2, batch_lines=8, held_out_lines=16, head=head,
                           when="always")
    report = distill(model, source, source_tokenizer, target_tokenizer, lines[:120], trainable, config)

    assert report.kept and report.updates > 0 and report.tokens >= 3_000, report
    after = snapshot(model)
    for name, tensor in before.items():
        if name not in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.equal(after[name], tensor), name
    assert torch.equal(source, source_before)
    rows = torch.from_numpy(trainable)
    inputs_before, inputs_after = before["model.embed_tokens.weight"], after["model.embed_tokens.weight"]
    assert torch.equal(inputs_after[~rows], inputs_before[~rows])
    seen = np.zeros(len(trainable), dtype=bool)
    seen[list(token_counts(target_tokenizer, lines[:104]))] = True
    moved = (inputs_after != inputs_before).any(dim=1).numpy()
    assert moved[trainable & seen].all() and not moved[~trainable].any()
    outputs_before, outputs_after = before["lm_head.weight"], after["lm_head.weight"]
    if head == "keep":
        assert torch.equal(outputs_after, outputs_before)
        assert report.next_token_loss_end == pytest.approx(report.next_token_loss_start, abs=0.5)
    else:
        assert torch.equal(outputs_after[~rows], outputs_before[~rows])
        # every output row takes part in the softmax, so every trainable one moves
        assert (outputs_after[rows] != outputs_before[rows]).any(dim=1).all()
        assert report.next_token_loss_end < report.next_token_loss_start - 0.2, report
    assert model.training
    assert {name: parameter.requires_grad for name, parameter in model.named_parameters()} == flags
    assert model.get_input_embeddings().weight.dtype == torch.float32


def test_the_heads_own_learning_rate_moves_only_the_output_rows(lines, source_tokenizer):
    """head: lm with head_learning_rate: the same as learning_rate gives the run without it bitwise; a far lower one
    leaves the input rows bitwise as they were learnt (the head reads the states detached) and moves the output rows
    less."""
    runs = {}
    for name, rate in (("default", None), ("same", 1e-2), ("low", 1e-5)):
        model, source, target_tokenizer, trainable = _untied_setup(lines, source_tokenizer)
        before = snapshot(model)
        config = DistillConfig(tokens=2_000, learning_rate=1e-2, head_learning_rate=rate, batch_lines=8,
                               held_out_lines=16, head="lm", when="always")
        report = distill(model, source, source_tokenizer, target_tokenizer, lines[:120], trainable, config)
        assert report.kept, report
        after = snapshot(model)
        runs[name] = {which: (after[which], (after[which] - before[which]).abs().max().item())
                      for which in ("model.embed_tokens.weight", "lm_head.weight")}
    for which in ("model.embed_tokens.weight", "lm_head.weight"):
        assert torch.equal(runs["same"][which][0], runs["default"][which][0])
    assert torch.equal(runs["low"]["model.embed_tokens.weight"][0], runs["default"]["model.embed_tokens.weight"][0])
    assert 0 < runs["low"]["lm_head.weight"][1] < runs["default"]["lm_head.weight"][1] / 20


def test_held_out_loss_goes_down_and_the_run_repeats_bitwise(lines, source_tokenizer):
    """A GPT-2 body (tied) read through a SentencePiece-style target tokenizer whose rows start random; the
    teacher is the body with the source tokenizer's rows."""
    target_tokenizer = sentencepiece_tokenizer(lines, 300)
    results = []
    for _ in range(2):
        model = tiny_model("gpt2", len(target_tokenizer), seed=4)
        source = torch.randn(len(source_tokenizer), 32, generator=torch.Generator().manual_seed(6)) * 0.02
        trainable = np.ones(len(target_tokenizer), dtype=bool)
        trainable[:3] = False  # <unk> <s> </s>
        config = DistillConfig(tokens=6_000, learning_rate=3e-3, batch_lines=8, held_out_lines=24, seed=7,
                               when="always")
        report = distill(model, source, source_tokenizer, target_tokenizer, lines[:200], trainable, config)
        results.append((report, model.get_input_embeddings().weight.detach().clone()))
    report = results[0][0]
    assert report.kept and report.loss_end < 0.7 * report.loss_start, report
    assert report.held_out_lines == 24 and report.lines == 176 and report.held_out_chunks > 0
    assert report.chunks_matched > 0 and report.updates >= 6_000 // (8 * 128)
    assert report.head.startswith("tied")
    assert torch.equal(results[0][1], results[1][1])
    assert {k: v for k, v in report.as_dict().items() if k != "seconds"} == \
        {k: v for k, v in results[1][0].as_dict().items() if k != "seconds"}


def test_coverage_order_reads_every_trainable_row_before_any_again():
    """Rows 1-6 trainable; row 9 is not. The greedy order takes, per token, the lines with the most rows not yet
    read, until the budget; the rest follow in the seed's order."""
    ids = [np.array(line) for line in ([1, 1, 1, 9], [2, 9], [1, 2], [3, 4, 9, 9], [5], [9, 9], [6, 6, 6, 6, 6, 6],
                                       [1, 2, 3, 4, 5, 6, 9, 9])]
    trainable = np.zeros(10, dtype=bool)
    trainable[1:7] = True
    order = coverage_order(ids, trainable, budget=10, rng=np.random.default_rng(0))
    assert sorted(order.tolist()) == list(range(len(ids)))
    # [5] and [1, 2] teach a new row per token (the tie goes by the seed's draw); then the long line (rows 3, 4 and 6
    # new, 1, 2 and 5 read once: 4.5 / 8) beats [3, 4, 9, 9] (2 / 4); those 11 tokens hold every row and the budget
    assert set(order[:2].tolist()) == {2, 4} and order[2] == 7
    rest = order[3:].tolist()
    draw = np.random.default_rng(0).permutation(len(ids)).tolist()
    assert rest == [index for index in draw if index not in (2, 4, 7)]
    assert np.array_equal(order, coverage_order(ids, trainable, budget=10, rng=np.random.default_rng(0)))
    # a larger budget goes on by what is read least: [3, 4, 9, 9] (rows read once: 1 / 4), then [2, 9] (1 / 6)
    # before [1, 1, 1, 9] and the line of 6s (1 / 12 each)
    longer = coverage_order(ids, trainable, budget=20, rng=np.random.default_rng(0)).tolist()
    assert longer[3:5] == [3, 1] and set(longer[5:6]) <= {0, 6}


def test_the_coverage_order_reads_more_of_the_new_rows_within_a_small_budget(lines, source_tokenizer):
    """The same run twice, the text read at random and by coverage: within a budget of a tenth of the text the
    coverage order shows more of the trainable rows in context, and the report says how many."""
    target_tokenizer = sentencepiece_tokenizer(lines, 300)
    read = {}
    for order in ("random", "coverage"):
        model = tiny_model("gpt2", len(target_tokenizer), seed=4)
        source = torch.randn(len(source_tokenizer), 32, generator=torch.Generator().manual_seed(6)) * 0.02
        trainable = np.ones(len(target_tokenizer), dtype=bool)
        trainable[:3] = False
        config = DistillConfig(tokens=1_000, learning_rate=3e-3, batch_lines=8, held_out_lines=24, when="always",
                               order=order)
        report = distill(model, source, source_tokenizer, target_tokenizer, lines[:300], trainable, config)
        assert report.order == order and 0 < report.rows_read <= trainable.sum()
        assert f"of the rows read in context ({order} order)" in report.summary()
        read[order] = report.rows_read
    assert read["coverage"] > read["random"], read


def test_unencodable_chunks_are_read_but_not_matched(lines, source_tokenizer):
    target_tokenizer = wordpiece_tokenizer(lines, 300)  # [UNK] for characters it never saw
    model = tiny_model("gpt2", len(target_tokenizer))
    source = torch.randn(len(source_tokenizer), 32, generator=torch.Generator().manual_seed(0)) * 0.02
    trainable = np.ones(len(target_tokenizer), dtype=bool)
    trainable[:5] = False
    text = [line.replace("the ", "the ☃ ", 1) for line in lines[:40]]
    config = DistillConfig(tokens=500, learning_rate=1e-3, batch_lines=8, held_out_lines=0)
    report = distill(model, source, source_tokenizer, target_tokenizer, text, trainable, config)
    assert report.chunks_skipped > 0 and report.chunks_matched > 0
    assert report.loss_start is None and report.kept
    # the likelihood match reads a span between two matched positions only where it is one chunk both sides spelled
    from langswap.chunks import ChunkAligner
    from langswap.transfer.distill import _Limits, _windows

    limits = _Limits(max_length=128, positions=None, source_rows=len(source_tokenizer),
                     target_rows=len(target_tokenizer))
    unknown = target_tokenizer.unk_token_id
    cut = 0
    for aligned in ChunkAligner(source_tokenizer, target_tokenizer).align_batch(text):
        for window in _windows(aligned, 0, 1, limits)[0]:
            assert len(window.adjacent) == len(window.target_at) and not window.adjacent[:1].any()
            for k in range(1, len(window.target_at)):
                span = window.target_ids[window.target_at[k - 1] + 1:window.target_at[k] + 1]
                if window.adjacent[k]:
                    assert unknown not in span.tolist()
                cut += unknown in span.tolist()
            assert (~window.adjacent[1:]).sum() <= window.unencodable
    assert cut > 0


def test_rows_are_put_back_when_the_held_out_loss_rises(lines, source_tokenizer):
    model, source, target_tokenizer, trainable = _untied_setup(lines, source_tokenizer)
    before = snapshot(model)
    # rows 0.02 apart moved by about 1 per update: the first block's output (the raw residual stream) is far off
    config = DistillConfig(tokens=1_000, learning_rate=1.0, layers=(1,), batch_lines=8, held_out_lines=16,
                           when="always")
    report = distill(model, source, source_tokenizer, target_tokenizer, lines[:80], trainable, config)
    assert not report.kept and report.loss_end > report.loss_start and report.put_back
    assert all(torch.equal(tensor, before[name]) for name, tensor in snapshot(model).items())


@pytest.fixture(scope="module")
def reader(lines, source_tokenizer):
    """A tiny GPT-2 trained for 150 updates on the lines (but the last 32) read by the source tokenizer: a model
    that reads this text, unlike a random one."""
    from langswap.batching import right_pad

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # module fixtures start before the autouse one-thread fixture
    model = tiny_model("gpt2", len(source_tokenizer), seed=4)
    model.train()
    encoded = [[0] + source_tokenizer(line, add_special_tokens=False)["input_ids"][:63] for line in lines[:-32]]
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(0)
    for _ in range(150):
        ids, real = right_pad([np.array(encoded[index]) for index in rng.choice(len(encoded), 16)], 0)
        labels = ids.masked_fill(real == 0, -100)
        model(input_ids=ids, attention_mask=real, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.set_num_threads(threads)
    model.eval()
    return model


@pytest.mark.parametrize("teacher", ["better", "worse"])
def test_a_teacher_that_reads_the_text_worse_than_the_student_is_not_followed(teacher, reader, lines,
                                                                              source_tokenizer):
    """The known answers: the relabelled tokenizer. A student with random rows reads the text worse than the trained
    teacher, and learns; a student with the right rows reads it better than a teacher given random rows, and is
    left bitwise as it was unless `when: always`."""
    import copy

    target_tokenizer, permutation = relabelled(source_tokenizer, seed=1)
    trained = reader.get_input_embeddings().weight.detach().clone()
    model = copy.deepcopy(reader)
    special = np.zeros(len(source_tokenizer), dtype=bool)
    special[0] = True
    with torch.no_grad():  # the right rows for the relabelled ids: target id t is the source piece source_of[t]
        model.get_input_embeddings().weight.copy_(trained[np.argsort(permutation)])
    if teacher == "better":
        random_rows(model, seed=5, keep=special)
        source = trained
    else:
        source = torch.randn(trained.shape, generator=torch.Generator().manual_seed(6)) * trained.std()
    before = snapshot(model)
    config = DistillConfig(tokens=2_000, learning_rate=1e-2, layers=(1,), batch_lines=16, held_out_lines=32)
    report = distill(model, source, source_tokenizer, target_tokenizer, lines, ~special, config,
                     source_head=(source, None))
    check = report.teacher_check
    assert check.measured and check.chunks > 100
    if teacher == "better":
        assert not check.teacher_worse and check.teacher_nats_per_chunk < check.student_nats_per_chunk
        assert report.updates > 0 and report.skipped is None
    else:
        assert check.teacher_worse and check.teacher_nats_per_chunk > check.student_nats_per_chunk
        assert "worse than the student" in report.skipped and report.updates == 0
        assert all(torch.equal(tensor, before[name]) for name, tensor in snapshot(model).items())
        assert not model.training and all(parameter.requires_grad for parameter in model.parameters())
        forced = distill(model, source, source_tokenizer, target_tokenizer, lines, ~special,
                         DistillConfig(**{**dataclasses.asdict(config), "when": "always"}),
                         source_head=(source, None))
        assert forced.updates > 0 and forced.skipped is None and forced.teacher_check.teacher_worse


def test_zero_tokens_skips_and_says_so(lines, source_tokenizer):
    model, source, target_tokenizer, trainable = _untied_setup(lines, source_tokenizer)
    before = snapshot(model)
    report = distill(model, source, source_tokenizer, target_tokenizer, lines, trainable, DistillConfig(tokens=0))
    assert "tokens is 0" in report.skipped and report.updates == 0
    assert all(torch.equal(tensor, before[name]) for name, tensor in snapshot(model).items())


def test_a_masked_lm_is_refused(lines, source_tokenizer):
    target_tokenizer = wordpiece_tokenizer(lines, 300)
    model = tiny_model("bert", len(target_tokenizer))
    source = torch.zeros(len(source_tokenizer), 32)
    with pytest.raises(ConfigError, match="causal LMs.*masked LM"):
        distill(model, source, source_tokenizer, target_tokenizer, lines, np.ones(len(target_tokenizer), bool),
                DistillConfig(tokens=100))


@pytest.mark.parametrize("fields, message", [
    ({"layers": (0,)}, "input embeddings"), ({"layers": ()}, "list of layer indices"),
    ({"distance": "l1"}, "mse or cosine"), ({"head": "untie"}, "lm, likelihood or keep"), ({"tokens": -1}, "at least 0"),
    ({"learning_rate": 0.0}, "above 0"), ({"max_length": 1}, "at least 2"),
    ({"head_learning_rate": float("nan")}, "head_learning_rate is nan"), ({"learning_rate": True}, "is True"),
    ({"order": "frequency"}, "random or coverage")])
def test_bad_config_values_say_what_to_give(fields, message):
    with pytest.raises(ConfigError, match=message):
        DistillConfig(**fields)


def test_layers_beyond_the_model_and_bad_inputs_are_refused(lines, source_tokenizer):
    model, source, target_tokenizer, trainable = _untied_setup(lines, source_tokenizer)
    assert DistillConfig(layers=[2, -1]).layers == (2, -1)
    with pytest.raises(ConfigError, match="2 blocks"):
        distill(model, source, source_tokenizer, target_tokenizer, lines, trainable, DistillConfig(layers=(3,), tokens=100))
    with pytest.raises(ConfigError, match="2 blocks"):
        distill(model, source, source_tokenizer, target_tokenizer, lines, trainable, DistillConfig(layers=(-3,), tokens=100))
    with pytest.raises(ConfigError, match="boolean mask"):
        distill(model, source, source_tokenizer, target_tokenizer, lines, trainable.astype(int), DistillConfig(tokens=100))
    with pytest.raises(Exception, match="source_embeddings has shape"):
        distill(model, source[:, :16], source_tokenizer, target_tokenizer, lines, trainable, DistillConfig(tokens=100))


def test_every_config_field_has_help_and_the_defaults_are_valid():
    import dataclasses

    config = DistillConfig()
    assert config.layers == (-1,) and config.distance == "mse"
    assert all(field.metadata.get("help") for field in dataclasses.fields(DistillConfig))
    # the options left unset resolve per transfer: off with a moderate rate; in an extension kept off the source
    # language, 20,000 tokens at 1e-2 with a tied head untied and kept; what is set stays
    plain, extension = config.resolved(extension=False), config.resolved(extension=True)
    assert (plain.tokens, plain.learning_rate, plain.head, plain.tied_head) == (0, 3e-4, "lm", "move")
    assert (extension.tokens, extension.learning_rate, extension.head, extension.tied_head) == (
        20_000, 1e-2, "keep", "untie")
    assert DistillConfig(tokens=0, head="lm").resolved(extension=True).tokens == 0
    assert DistillConfig(tokens=0, head="lm").resolved(extension=True).head == "lm"
    assert plain.resolved(extension=True) == plain


def test_a_transfer_into_an_extension_kept_off_the_source_language_distils_unless_told_not_to(tmp_path):
    from langswap.transfer import transfer_config

    text, english = tmp_path / "xx.txt", tmp_path / "en.txt"
    for path in (text, english):
        path.write_text("a line\n", encoding="utf-8")
    base = {"source_model": "m", "target_tokenizer": "t", "output": str(tmp_path / "out"),
            "calibration": {"text": str(text)}}
    assert transfer_config(base).distill.tokens == 0
    kept_off = transfer_config({**base, "calibration": {"text": str(text), "source_text": str(english)}}).distill
    assert (kept_off.tokens, kept_off.learning_rate, kept_off.tied_head, kept_off.head) == (20_000, 1e-2, "untie",
                                                                                           "keep")
    told = transfer_config({**base, "calibration": {"text": str(text), "source_text": str(english)},
                            "distill": {"tokens": 0}}).distill
    assert told.tokens == 0


def test_windows_hold_whole_chunks_that_spell_the_same_text_on_both_sides(lines, source_tokenizer):
    from langswap.chunks import ChunkAligner
    from langswap.transfer.distill import _Limits, _windows

    target_tokenizer = sentencepiece_tokenizer(lines, 300)
    limits = _Limits(max_length=8, positions=12, source_rows=len(source_tokenizer), target_rows=len(target_tokenizer))
    aligner = ChunkAligner(source_tokenizer, target_tokenizer)
    windows = too_long = 0
    for text in aligner.align_batch(lines[:30]):
        pieces, skipped = _windows(text, 0, 1, limits)
        too_long += skipped
        assert pieces or len(text) == skipped
        for window in pieces:
            windows += 1
            assert window.source_ids[0] == 0 and window.target_ids[0] == 1  # each side's frame token first
            assert len(window.target_ids) <= 8 and len(window.source_ids) <= 12
            assert window.target_at[-1] == len(window.target_ids) - 1  # a window ends where a chunk ends
            for source_at, target_at in zip(window.source_at, window.target_at):
                read_by_source = source_tokenizer.decode(window.source_ids[1:source_at + 1])
                read_by_target = target_tokenizer.decode(window.target_ids[1:target_at + 1])
                assert read_by_source.strip() == read_by_target.strip()
    assert windows > 30  # the lines are longer than one window


def test_a_transfer_distils_the_methods_rows_before_calibration_and_records_it(gpt2_folder, corpus_dir,
                                                                              target_tokenizer_folder, tmp_path):
    """`distill.tokens` turns the step on: it runs after the method and before calibration, on the target text
    without the lines candidates are judged on; special and copied rows stay bitwise as the method made them, the
    body too, and langswap.json says what it did. Streaming is refused (the step runs the model)."""
    from safetensors.torch import load_file

    from langswap.errors import ConfigError
    from langswap.methods.mapping import Kind
    from langswap.transfer import transfer, transfer_config

    text = str(corpus_dir / "xx.txt")
    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder), "method": "overlap",
            "target_text": text, "calibration": {"strength": 0}}
    transfer(transfer_config({**base, "output": str(tmp_path / "plain")}))
    transfer(transfer_config({**base, "output": str(tmp_path / "distilled"),
                              "distill": {"tokens": 600, "batch_lines": 4, "layers": [1], "learning_rate": 1e-2,
                                          "when": "always"}}))
    record = json.loads((tmp_path / "distilled" / "langswap.json").read_text(encoding="utf-8"))
    report = DistillationReport.from_dict(record["distillation"])
    assert report.tokens >= 600 and report.updates > 0 and report.text == text and report.kept
    assert report.loss_end < report.loss_start
    assert report.teacher_check.measured and report.teacher_check.chunks > 0  # the source head read
    assert json.loads((tmp_path / "plain" / "langswap.json").read_text(encoding="utf-8"))["distillation"] is None
    card = (tmp_path / "distilled" / "README.md").read_text(encoding="utf-8")
    assert f"- Token distillation: {report.rows:,} rows learned from the source model reading" in card
    assert "Token distillation" not in (tmp_path / "plain" / "README.md").read_text(encoding="utf-8")
    plain, distilled = load_file(tmp_path / "plain" / "model.safetensors"), load_file(tmp_path / "distilled" /
                                                                                      "model.safetensors")
    name = next(key for key in plain if key.endswith("wte.weight"))
    assert all(torch.equal(plain[key], distilled[key]) for key in plain if key != name)  # the body
    kinds = {}
    for line in (tmp_path / "plain" / "provenance.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        fields = line.split("\t")
        kinds[int(fields[0])] = fields[2]
    fixed = [row for row, kind in kinds.items() if kind in (Kind.SPECIAL.name.lower(), Kind.COPIED.name.lower())]
    moved = [row for row in kinds if row not in fixed]
    assert fixed and torch.equal(plain[name][fixed], distilled[name][fixed])
    assert not torch.equal(plain[name][moved], distilled[name][moved])
    with pytest.raises(ConfigError, match="token distillation"):
        transfer(transfer_config({**base, "output": str(tmp_path / "streamed"), "stream": "on",
                                  "distill": {"tokens": 100}}))


def test_a_transfer_that_will_not_fit_in_memory_is_refused_before_the_model_loads(gpt2_folder, corpus_dir,
                                                                                  target_tokenizer_folder, tmp_path,
                                                                                  monkeypatch):
    """The estimate counts the weights as stored, the token matrices and distillation's rows, moments and
    activations; where the machine has less free, the transfer stops before loading anything, says how much it needs
    and what to turn off; the output is not started."""
    import langswap.models
    import langswap.transfer.steps as steps
    from langswap.errors import ConfigError
    from langswap.models import load_config
    from langswap.transfer import transfer, transfer_config
    from langswap.transfer.config import plan_text_steps

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder), "method": "overlap",
            "target_text": str(corpus_dir / "xx.txt"), "output": str(tmp_path / "out")}
    model_config = load_config(str(gpt2_folder))
    plain = transfer_config({**base, "calibration": {"strength": 0}, "eval_text": str(corpus_dir / "xx.test.txt")})
    distilled = transfer_config({**base, "distill": {"tokens": 100}})
    plain_need = steps.memory_needed(plain, plan_text_steps(plain, True), model_config)
    need = steps.memory_needed(distilled, plan_text_steps(distilled, True), model_config)
    weights = (gpt2_folder / "model.safetensors").stat().st_size
    assert plain_need["weights"] == need["weights"] == weights and plain_need["distillation"] == 0
    assert need["distillation"] > 4 * model_config.vocab_size * model_config.n_embd * 4  # moments and activations
    assert need["total"] == weights + need["tokens"] + need["distillation"] + steps.LIBRARIES

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(steps, "available_memory", lambda: need["total"] - 1)
    monkeypatch.setattr(langswap.models, "load_model", no_loading)
    monkeypatch.setattr(steps, "load_model", no_loading, raising=False)  # where steps imports it at the top
    with pytest.raises(ConfigError, match=r"needs about .* GiB of memory .*token distillation .* GiB is free\. Turn "
                                          r"those steps off"):
        transfer(distilled)
    assert not (tmp_path / "out").exists()
    monkeypatch.setattr(steps, "available_memory", lambda: need["total"])  # enough: it loads
    with pytest.raises(AssertionError, match="the model was loaded"):
        transfer(distilled)
    assert steps.memory_needed(transfer_config({**base, "source_model": "org/not-a-folder"}), plan_text_steps(
        plain, True), model_config) is None  # a hub name: nothing to measure before it downloads


def test_a_transfer_that_unties_a_tied_head_writes_the_methods_rows_as_the_head(gpt2_folder, corpus_dir,
                                                                                target_tokenizer_folder, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from langswap.transfer import transfer, transfer_config

    base = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder), "method": "overlap",
            "target_text": str(corpus_dir / "xx.txt"), "calibration": {"strength": 0}}
    transfer(transfer_config({**base, "output": str(tmp_path / "plain")}))
    transfer(transfer_config({**base, "output": str(tmp_path / "untied"),
                              "distill": {"tokens": 600, "batch_lines": 4, "layers": [1], "learning_rate": 1e-2,
                                          "when": "always", "tied_head": "untie", "head": "keep"}}))
    assert json.loads((tmp_path / "untied" / "langswap.json").read_text(encoding="utf-8"))["distillation"]["untied"]
    plain = load_file(tmp_path / "plain" / "model.safetensors")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "untied")
    assert model.config.tie_word_embeddings is False
    rows = plain[next(key for key in plain if key.endswith("wte.weight"))]
    assert torch.equal(model.get_output_embeddings().weight.detach(), rows)  # the method's rows, for prediction
    assert not torch.equal(model.get_input_embeddings().weight.detach(), rows)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_hidden_states_stop_after_the_deepest_layer_matched(kind):
    from langswap.models import HiddenStates

    model = tiny_model(kind, 50)
    body = model.base_model
    calls = Counter()
    blocks = [module for module in body.modules() if isinstance(module, torch.nn.ModuleList)][0]
    handles = [block.register_forward_hook(lambda module, args, output, index=index: calls.update([index]))
               for index, block in enumerate(blocks)]
    inputs = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(0), requires_grad=True)
    reader = HiddenStates(body, (1,), 2)
    assert reader.stops_early
    early = reader(inputs_embeds=inputs)
    assert calls == Counter({0: 2, 1: 1})  # the check's whole forward, then block 0 alone
    calls.clear()
    early = reader(inputs_embeds=inputs)
    assert calls == Counter({0: 1})
    whole = body(inputs_embeds=inputs, output_hidden_states=True, use_cache=False).hidden_states
    assert len(early) == 2 and torch.equal(early[1], whole[1])
    gradient = torch.autograd.grad(early[1].square().sum(), inputs)[0]
    assert torch.equal(gradient, torch.autograd.grad(whole[1].square().sum(), inputs)[0])
    for handle in handles:
        handle.remove()
    assert not HiddenStates(body, (2,), 2).stops_early  # the last layer is the final norm's output


def test_hidden_states_fall_back_where_a_state_is_not_its_blocks_output():
    from langswap.models import HiddenStates

    class Body(torch.nn.Module):
        """Hidden state 1 is block 0's output doubled: not what transformers' models give."""

        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)])

        def forward(self, inputs_embeds, output_hidden_states=False, use_cache=False):
            first = self.blocks[0](inputs_embeds)
            last = self.blocks[1](first)
            return type("Output", (), {"hidden_states": (inputs_embeds, 2 * first, last)})

    body = Body()
    reader = HiddenStates(body, (1,), 2)
    assert reader.stops_early
    inputs = torch.randn(1, 3, 4)
    states = reader(inputs_embeds=inputs)
    assert torch.equal(states[1], 2 * body.blocks[0](inputs)) and not reader.stops_early


def test_distilling_an_early_layer_reads_only_the_blocks_below_it_and_learns_the_same_rows(lines, source_tokenizer,
                                                                                          monkeypatch):
    from langswap.models import HiddenStates

    target_tokenizer, _ = relabelled(source_tokenizer, seed=2)
    special = np.zeros(len(source_tokenizer), dtype=bool)
    special[0] = True
    config = DistillConfig(tokens=2_000, learning_rate=1e-2, layers=(1,), batch_lines=8, held_out_lines=16,
                           head="keep", when="always")
    rows = []
    for early in (True, False):
        if not early:
            monkeypatch.setattr(HiddenStates, "_early", lambda self, inputs: None)
        model = tiny_model("llama", len(source_tokenizer), seed=3)
        source = random_rows(model, seed=4, keep=special)
        report = distill(model, source, source_tokenizer, target_tokenizer, lines[:100], ~special, config)
        assert report.kept and report.updates > 0, report
        rows.append(model.get_input_embeddings().weight.detach().clone())
    assert torch.equal(rows[0], rows[1])


@pytest.mark.parametrize("head", ["keep", "lm"])
def test_a_tied_head_untied_keeps_the_methods_rows_for_prediction(head, lines, source_tokenizer):
    """`tied_head: untie`: the input rows learn by distillation; the head gets its own matrix, the rows as they
    were (`keep`), or with its trainable rows learned by next-token loss (`lm`); the model is untied only where
    the learned rows are kept."""
    from langswap.models import is_tied

    target_tokenizer = sentencepiece_tokenizer(lines, 300)
    model = tiny_model("gpt2", len(target_tokenizer), seed=4)
    source = torch.randn(len(source_tokenizer), 32, generator=torch.Generator().manual_seed(6)) * 0.02
    trainable = np.ones(len(target_tokenizer), dtype=bool)
    trainable[:3] = False
    before = model.get_input_embeddings().weight.detach().clone()
    config = DistillConfig(tokens=3_000, learning_rate=3e-3, batch_lines=8, held_out_lines=24, when="always",
                           tied_head="untie", head=head)
    report = distill(model, source, source_tokenizer, target_tokenizer, lines[:200], trainable, config)

    assert report.kept and report.untied and "untied" in report.head, report
    assert not is_tied(model) and model.config.tie_word_embeddings is False
    inputs, outputs = model.get_input_embeddings().weight.detach(), model.get_output_embeddings().weight.detach()
    assert torch.equal(inputs[:3], before[:3]) and not torch.equal(inputs[3:], before[3:])
    if head == "keep":
        assert torch.equal(outputs, before)
        assert report.next_token_loss_end == pytest.approx(report.next_token_loss_start, abs=0.5)
    else:
        assert torch.equal(outputs[:3], before[:3]) and not torch.equal(outputs[3:], before[3:])
        assert report.next_token_loss_end < report.next_token_loss_start, report

    # rows put back: the model stays tied, as it came
    model = tiny_model("gpt2", len(target_tokenizer), seed=4)
    bad = DistillConfig(tokens=1_000, learning_rate=1.0, layers=(1,), batch_lines=8, held_out_lines=24,
                        when="always", tied_head="untie", head=head)  # as in the put-back test above
    report = distill(model, source, source_tokenizer, target_tokenizer, lines[:200], trainable, bad)
    assert not report.kept and not report.untied and is_tied(model)
    assert torch.equal(model.get_input_embeddings().weight.detach(), before)


def _token_log_probs(model, tokenizer, lines: list[str]) -> torch.Tensor:
    """Each line's tokens' log-probabilities under `model`, read after the tokenizer's frame token, concatenated."""
    frame = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    found = []
    with torch.no_grad():
        for line in lines:
            ids = torch.tensor([[frame] + tokenizer(line, add_special_tokens=False)["input_ids"]])
            logits = model(input_ids=ids).logits[0, :-1].float()
            found.append(torch.log_softmax(logits, dim=-1).gather(-1, ids[0, 1:, None])[:, 0])
    return torch.cat(found)


@pytest.mark.parametrize("tied", [False, True])
def test_a_likelihood_head_learns_the_probabilities_the_teacher_gives_each_chunk(tied, lines, source_tokenizer):
    """The known answer: a relabelled tokenizer reads every line into the same pieces, so each chunk is one token and
    a student whose input rows are the teacher's, permuted, computes the teacher's hidden states. Its output rows
    start random; `head: likelihood` must bring each held-out token's log-probability close to the teacher's (a
    confident teacher: its head scaled up), on an untied head and on a tied one (the same rows, learned for both)."""
    import copy

    target_tokenizer, permutation = relabelled(source_tokenizer, seed=1)
    teacher = tiny_model("gpt2" if tied else "llama", len(source_tokenizer), seed=3)
    with torch.no_grad():
        teacher.get_output_embeddings().weight.mul_(1.0 if tied else 10.0)
    student = copy.deepcopy(teacher)
    source = teacher.get_input_embeddings().weight.detach().clone()
    special = np.zeros(len(source_tokenizer), dtype=bool)
    special[0] = True
    ids = torch.from_numpy(permutation)
    with torch.no_grad():
        student.get_input_embeddings().weight[ids] = source  # the input side is exact: nothing to distil
        if not tied:
            head = teacher.get_output_embeddings().weight.detach()
            scrambled = head[torch.randperm(len(head), generator=torch.Generator().manual_seed(7))]
            scrambled[0] = head[0]
            student.get_output_embeddings().weight.copy_(scrambled)
    if tied:  # the rows are the input rows: scramble them, the input side then has something to learn too
        with torch.no_grad():
            weight = student.get_input_embeddings().weight
            weight[1:] = weight[1:][torch.randperm(len(weight) - 1, generator=torch.Generator().manual_seed(7))]
    held = lines[-32:]
    teacher_log_probs = _token_log_probs(teacher, source_tokenizer, held)
    gap_before = (_token_log_probs(student, target_tokenizer, held) - teacher_log_probs).abs().mean()
    config = DistillConfig(tokens=40_000, learning_rate=0.1, batch_lines=16, held_out_lines=32, head="likelihood",
                           when="always", layers=(1,))
    head_rows = teacher.get_output_embeddings().weight.detach().clone()
    by_lm = copy.deepcopy(student)
    report = distill(student, source, source_tokenizer, target_tokenizer, lines, ~special, config,
                     source_head=(head_rows, None))
    gap_after = (_token_log_probs(student, target_tokenizer, held) - teacher_log_probs).abs().mean()

    # untied, the input rows (exact already) are decided apart from the head's; tied, both at once
    assert (report.kept if tied else report.head_kept and not report.kept) and "likelihood" in report.head, report
    assert report.likelihood_loss_end < 0.2 * report.likelihood_loss_start, report
    assert gap_after < 0.3 * gap_before, (float(gap_before), float(gap_after))
    if tied:
        return
    # next-token loss learns the text, not the teacher: it ends further from the teacher's probabilities
    distill(by_lm, source, source_tokenizer, target_tokenizer, lines, ~special,
            dataclasses.replace(config, head="lm"), source_head=(head_rows, None))
    assert (_token_log_probs(by_lm, target_tokenizer, held) - teacher_log_probs).abs().mean() > 1.5 * gap_after
    with pytest.raises(ConfigError, match="needs the source model's head"):
        distill(copy.deepcopy(teacher), source, source_tokenizer, target_tokenizer, lines, ~special, config)




def test_a_likelihood_head_learns_in_bfloat16(lines, source_tokenizer):
    """A model stored in bfloat16 (as most checkpoints load): the head's logits are taken in float32."""
    model, source, target_tokenizer, trainable = _untied_setup(lines, source_tokenizer)
    model = model.to(torch.bfloat16)
    head = model.get_output_embeddings().weight.detach().float().clone()
    config = DistillConfig(tokens=1_000, learning_rate=1e-2, batch_lines=8, held_out_lines=16, head="likelihood",
                           when="always")
    report = distill(model, source, source_tokenizer, target_tokenizer, lines[:120], trainable, config,
                     source_head=(torch.randn(len(source_tokenizer), model.config.hidden_size), None))
    assert report.updates > 0 and report.likelihood_loss_start is not None
    assert report.head_kept is not None
    if report.head_kept:
        assert not torch.equal(model.get_output_embeddings().weight.detach().float(), head)
