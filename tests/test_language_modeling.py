"""Strided perplexity windows and the masked-LM loss, against hand computations on tiny models."""

from __future__ import annotations

import math

import pytest
import torch

from langswap.errors import ConfigError, VocabularyError
from langswap.evaluation.language_modeling import (_windows, causal_lm_score, evaluate_model,
                                                   masked_lm_loss, pseudo_perplexity)
from langswap.evaluation.probes import window_spans
from langswap.masking import mask_tokens, special_tokens_mask

from conftest import TOKENIZER_BUILDERS, byte_level_tokenizer, english_lines, tiny_model, uniform_lm

WINDOW = 8


@pytest.fixture(scope="module")
def gpt2():
    tokenizer = byte_level_tokenizer(english_lines(300), vocab_size=300)
    return tiny_model("gpt2", len(tokenizer)), tokenizer  # 128 positions


@pytest.fixture(scope="module")
def bert():
    tokenizer = TOKENIZER_BUILDERS["wordpiece"](english_lines(300), vocab_size=300)
    return tiny_model("bert", len(tokenizer)), tokenizer


def sequence_of(tokenizer, line: str) -> list[int]:
    """What causal_lm_score scores: the bos token, then the line's tokens."""
    return [tokenizer.bos_token_id] + tokenizer(line, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def log_likelihoods(model, ids: list[int]) -> torch.Tensor:
    """(len(ids) - 1,) float64: log p(ids[j + 1] | ids[0 .. j]), one forward pass over ids."""
    logits = model(input_ids=torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, dim=-1)[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def context_start(target: int, window: int, stride: int) -> int:
    """First token the model reads when it predicts token `target`: window k starts at k * stride and predicts
    tokens k * stride + 1 ... k * stride + window; the first window that reaches the target scores it."""
    return max(0, math.ceil((target - window) / stride)) * stride


# -- strided windows ---------------------------------------------------------------------------------------------------

def test_windows_score_every_token_once_within_the_window():
    for length in range(2, 40):
        sequence = list(range(100, 100 + length))
        for window in range(1, 9):
            for stride in range(1, window + 1):
                scored = []
                for tokens, skip in _windows(sequence, window, stride):
                    assert len(tokens) - 1 <= window  # the model reads tokens[:-1]
                    for position in range(skip, len(tokens) - 1):
                        target = tokens[position + 1] - 100
                        scored.append(target)
                        # the target is read with position + 1 tokens of context, from context_start on
                        assert tokens[0] - 100 == context_start(target, window, stride)
                assert scored == list(range(1, length)), (length, window, stride)


def test_smaller_stride_gives_no_less_context_where_it_divides_the_larger():
    def context(target, stride):
        return target - context_start(target, WINDOW, stride)

    for target in range(1, 60):
        assert context(target, 1) == min(target, WINDOW)  # stride 1: the most context a window can give
        for small, large in ((1, 2), (2, 4), (4, 8), (1, 8), (3, 6)):
            assert context(target, small) >= context(target, large), (target, small, large)
    # where it does not divide, a smaller stride can give less: token 14 is read with 8 tokens at stride 6 (window
    # 6-13), with 4 at stride 5 (window 10-17)
    assert context(14, 6) == 8 and context(14, 5) == 4


def test_stride_equal_to_window_scores_disjoint_chunks(gpt2):
    model, tokenizer = gpt2
    lines = [" ".join(english_lines(3, seed=21)), english_lines(1, seed=22)[0]]
    expected = 0.0
    for line in lines:
        sequence = sequence_of(tokenizer, line)
        for start in range(0, len(sequence) - 1, WINDOW):  # chunk start .. start + 7 predicts start + 1 .. start + 8
            expected -= float(log_likelihoods(model, sequence[start:start + WINDOW + 1]).sum())
    score = causal_lm_score(model, tokenizer, lines, max_length=WINDOW, stride=WINDOW)
    assert score.nll == pytest.approx(expected, rel=1e-5)
    assert score.tokens == sum(len(sequence_of(tokenizer, line)) - 1 for line in lines)


@pytest.mark.parametrize("stride", [1, 2, 3, 5, 7, 8, None])
def test_each_token_gets_the_context_its_window_allows(gpt2, stride):
    """Per-token log-likelihoods by hand: token t read from context_start(t) on; their sum is the score's NLL."""
    model, tokenizer = gpt2
    line = " ".join(english_lines(2, seed=23))
    sequence = sequence_of(tokenizer, line)
    assert len(sequence) > 3 * WINDOW
    step = stride or WINDOW // 2
    passes: dict[int, torch.Tensor] = {}  # context start -> log-likelihoods of the tokens after it (causal model)
    expected = 0.0
    for target in range(1, len(sequence)):
        start = context_start(target, WINDOW, step)
        if start not in passes:
            passes[start] = log_likelihoods(model, sequence[start:start + WINDOW + 1])
        expected -= float(passes[start][target - start - 1])
    score = causal_lm_score(model, tokenizer, [line], max_length=WINDOW, stride=stride)
    assert score.nll == pytest.approx(expected, rel=1e-5)
    assert score.tokens == len(sequence) - 1


@pytest.mark.parametrize("stride", [1, 3, 8])
def test_every_token_is_scored_once_whatever_the_stride(stride):
    tokenizer = byte_level_tokenizer(english_lines(200), vocab_size=300)
    lines = english_lines(20, seed=9) + [" ".join(english_lines(10, seed=4)), "", "a"]
    score = causal_lm_score(uniform_lm(len(tokenizer)), tokenizer, lines, max_length=WINDOW, stride=stride)
    assert score.tokens == sum(len(tokenizer(line, add_special_tokens=False)["input_ids"]) for line in lines)
    assert score.perplexity == pytest.approx(len(tokenizer), rel=1e-6)


def test_lines_within_the_context_need_no_windows(gpt2):
    model, tokenizer = gpt2  # 128 positions, lines of at most about 60 tokens
    lines = english_lines(6, seed=24)
    assert max(len(sequence_of(tokenizer, line)) for line in lines) <= 128
    scores = [causal_lm_score(model, tokenizer, lines, stride=stride) for stride in (None, 1, 2, 17, 64, 128)]
    assert all(score == scores[0] for score in scores)  # exactly: the same single window per line
    expected = -sum(float(log_likelihoods(model, sequence_of(tokenizer, line)).sum()) for line in lines)
    assert scores[0].nll == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("stride", [0, -2, WINDOW + 1, 2.5, True])
def test_stride_out_of_range_is_a_config_error(gpt2, stride):
    model, tokenizer = gpt2
    with pytest.raises(ConfigError, match=r"stride .* from 1 to the window \(8 tokens"):
        causal_lm_score(model, tokenizer, ["a line"], max_length=WINDOW, stride=stride)


# -- pseudo-perplexity -------------------------------------------------------------------------------------------------

def test_pseudo_perplexity_of_a_long_line_scores_every_token(bert):
    """A line longer than the window is read in windows: all its tokens count, as bits per byte must."""
    _, tokenizer = bert
    vocabulary = len(tokenizer)
    long_line = " ".join(english_lines(12, seed=8))
    lines = english_lines(4, seed=2) + [long_line]
    expected = sum(len(tokenizer(line, add_special_tokens=False)["input_ids"]) for line in lines)
    assert len(tokenizer(long_line)["input_ids"]) > 3 * 16
    n_bytes = sum(len(line.encode()) for line in lines)
    for max_length, stride in ((16, None), (16, 3), (16, 14), (512, None)):
        score = pseudo_perplexity(uniform_lm(vocabulary), tokenizer, lines, max_length=max_length, stride=stride)
        assert score.tokens == expected
        assert score.bits_per_byte == pytest.approx(expected * math.log2(vocabulary) / n_bytes, rel=1e-6)


def test_pseudo_perplexity_scores_unknown_tokens_whose_bytes_it_counts(bert):
    """[UNK] stands for text: skipping it while its bytes stay in the denominator lowered bits per byte."""
    _, tokenizer = bert
    line = "the cat sat on the mat \u65e5\u672c\u8a9e \u65e5\u672c\u8a9e"
    ids = tokenizer(line, add_special_tokens=False)["input_ids"]
    assert ids.count(tokenizer.unk_token_id) >= 2
    score = pseudo_perplexity(uniform_lm(len(tokenizer)), tokenizer, [line])
    assert score.tokens == len(ids)
    assert score.bits_per_byte == pytest.approx(len(ids) * math.log2(len(tokenizer)) / len(line.encode()), rel=1e-6)


@pytest.mark.parametrize("metric", [pseudo_perplexity, masked_lm_loss])
def test_roberta_long_line_fits_its_usable_positions(metric):
    """RoBERTa's position ids start after the padding index: 130 positions hold 128 tokens. A window of the
    config's 130 indexed past the position table."""
    tokenizer = TOKENIZER_BUILDERS["roberta"](english_lines(300), vocab_size=300)
    model = tiny_model("roberta", len(tokenizer))
    assert model.config.max_position_embeddings == 130
    long_line = " ".join(english_lines(40, seed=3))
    content = tokenizer(long_line, add_special_tokens=False)["input_ids"]
    assert len(content) > 2 * 130
    score = metric(model, tokenizer, [long_line])
    if metric is pseudo_perplexity:
        assert score.tokens == len(content)
    assert math.isfinite(score.nll) and score.tokens > 0


def test_pseudo_perplexity_does_not_depend_on_how_copies_are_batched(bert):
    """The logit budget splits a window's masked copies into passes; the sum must not change."""
    import langswap.evaluation.language_modeling as language_modeling

    model, tokenizer = bert
    lines = english_lines(3, seed=4)
    whole = pseudo_perplexity(model, tokenizer, lines)
    budget = language_modeling.LOGIT_BUDGET
    try:
        language_modeling.LOGIT_BUDGET = 1  # one masked copy per forward pass
        split = pseudo_perplexity(model, tokenizer, lines)
    finally:
        language_modeling.LOGIT_BUDGET = budget
    assert split.tokens == whole.tokens
    assert split.nll == pytest.approx(whole.nll, rel=1e-5)


def test_pseudo_perplexity_windows_equal_a_hand_computation(bert):
    """Each scored token: masked in the window where it is most central, [CLS] and [SEP] around that window."""
    model, tokenizer = bert
    line = " ".join(english_lines(4, seed=12))
    content = tokenizer(line, add_special_tokens=False)["input_ids"]
    window, room = 12, 10  # [CLS] + 10 tokens + [SEP]
    assert len(content) > 2 * room
    nll = 0.0
    for start, stop, keep_from, keep_to in window_spans(len(content), room, causal=False, stride=5):
        ids = [tokenizer.cls_token_id] + content[start:stop] + [tokenizer.sep_token_id]
        for p in range(keep_from, keep_to):
            masked = list(ids)
            masked[1 + p - start] = tokenizer.mask_token_id
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([masked])).logits[0, 1 + p - start].double()
            nll -= float(torch.log_softmax(logits, dim=-1)[content[p]])
    score = pseudo_perplexity(model, tokenizer, [line], max_length=window, stride=5, batch_size=7)
    assert score.tokens == len(content)
    assert score.nll == pytest.approx(nll, rel=1e-5)
    with pytest.raises(ConfigError, match="stride"):
        pseudo_perplexity(model, tokenizer, [line], max_length=window, stride=11)


# -- masked-LM loss ----------------------------------------------------------------------------------------------------

def test_uniform_masked_lm_loss_perplexity_equals_vocabulary_size():
    tokenizer = TOKENIZER_BUILDERS["wordpiece"](english_lines(200), vocab_size=300)
    score = masked_lm_loss(uniform_lm(len(tokenizer)), tokenizer, english_lines(40, seed=3))
    assert score.kind == "masked-lm-loss" and score.tokens > 20
    assert score.perplexity == pytest.approx(len(tokenizer), rel=1e-6)
    assert math.isnan(score.bits_per_byte) and score.as_dict()["bits_per_byte"] is None


def test_masked_lm_loss_equals_a_hand_computation(bert):
    model, tokenizer = bert
    lines = english_lines(5, seed=5) + [" ".join(english_lines(3, seed=6))]
    generator = torch.Generator().manual_seed(11)  # the documented masking: one generator, lines in order
    nll, tokens = 0.0, 0
    for line in lines:
        ids = torch.tensor([tokenizer(line)["input_ids"]])
        masked, labels = mask_tokens(ids, tokenizer.mask_token_id, len(tokenizer), special_tokens_mask(tokenizer, ids),
                                     0.15, generator)
        selected = labels[0] != -100
        with torch.no_grad():
            log_probs = torch.log_softmax(model(input_ids=masked).logits[0].double(), dim=-1)
        nll -= float(log_probs[selected].gather(1, labels[0][selected][:, None]).sum())
        tokens += int(selected.sum())
    assert tokens > 5
    for batch_size in (1, 4, 32):  # padding must not leak into the scores
        score = masked_lm_loss(model, tokenizer, lines, seed=11, batch_size=batch_size)
        assert score.tokens == tokens
        assert score.nll == pytest.approx(nll, rel=1e-5)
        assert score.perplexity == pytest.approx(math.exp(nll / tokens), rel=1e-5)


def test_masked_lm_loss_is_deterministic_in_its_seed(bert):
    model, tokenizer = bert
    lines = english_lines(15, seed=7)
    torch.manual_seed(123)  # the global state plays no part
    first = masked_lm_loss(model, tokenizer, lines, seed=1)
    torch.manual_seed(456)
    assert masked_lm_loss(model, tokenizer, lines, seed=1) == first
    assert masked_lm_loss(model, tokenizer, lines, seed=2).nll != first.nll


def test_evaluate_model_routes_metrics(bert, gpt2):
    model, tokenizer = bert
    lines = english_lines(4, seed=8)
    assert evaluate_model(model, tokenizer, lines, "masked") == pseudo_perplexity(model, tokenizer, lines)
    routed = evaluate_model(model, tokenizer, lines, "masked", metric="masked-lm-loss", seed=3, probability=0.3)
    assert routed == masked_lm_loss(model, tokenizer, lines, seed=3, probability=0.3)
    causal, causal_tokenizer = gpt2
    assert evaluate_model(causal, causal_tokenizer, lines, "causal", False, max_length=WINDOW, stride=2) == \
        causal_lm_score(causal, causal_tokenizer, lines, max_length=WINDOW, stride=2)
    with pytest.raises(ConfigError, match="for masked LMs and this model is a causal LM; choose one of: perplexity"):
        evaluate_model(causal, causal_tokenizer, lines, "causal", metric="masked-lm-loss")
    with pytest.raises(ConfigError, match="choose one of: perplexity, pseudo-perplexity, masked-lm-loss"):
        evaluate_model(model, tokenizer, lines, "masked", metric="mlm")
    with pytest.raises(ConfigError, match="has no option stride; its options are: .*probability, seed"):
        evaluate_model(model, tokenizer, lines, "masked", metric="masked-lm-loss", stride=2)


def test_masked_lm_loss_needs_a_mask_token(gpt2):
    model, tokenizer = gpt2
    with pytest.raises(VocabularyError, match="masked-LM loss needs a tokenizer with a mask token"):
        masked_lm_loss(model, tokenizer, ["a line"])



def test_a_bfloat16_model_is_scored_in_its_own_dtype_with_bounded_logits(tmp_path, monkeypatch):
    """`langswap evaluate` keeps a model in the dtype it was saved in (an 8B model in bfloat16 is 16 GB, in float32
    32 GB) and scores it in batches whose logits stay under LOGIT_BUDGET; its figure is the float32 one to bfloat16
    precision."""
    from langswap.evaluation import language_modeling
    from langswap.models import load_model

    lines = english_lines(60, seed=3)
    tokenizer = byte_level_tokenizer(english_lines(300), vocab_size=300)
    model = tiny_model("llama", len(tokenizer))
    budget = len(tokenizer) * 64  # logits of 64 tokens at a time
    monkeypatch.setattr(language_modeling, "LOGIT_BUDGET", budget)
    scores = {}
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype).save_pretrained(tmp_path / str(dtype))
        loaded = load_model(tmp_path / str(dtype))
        seen = []
        loaded.register_forward_hook(lambda module, args, output: seen.append((module.dtype, output.logits.numel())))
        scores[dtype] = evaluate_model(loaded, tokenizer, lines, "causal").bits_per_byte
        assert seen and {dtype_seen for dtype_seen, _ in seen} == {dtype}
        assert max(size for _, size in seen) <= budget
        assert len(seen) > 1  # the 60 lines did not fit one batch
    assert scores[torch.bfloat16] == pytest.approx(scores[torch.float32], rel=0.02)
