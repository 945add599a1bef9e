"""Contract tests over every registered method: one row per method in CASES, and a test that fails without it."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from langswap.config import from_dict, to_dict
from langswap.methods import Kind, TransferInputs, get_method, make_config, method_names, run_method
from langswap.resources.vectors import WordVectors
from langswap.tokens import Vocabulary

from conftest import byte_level_tokenizer, english_lines, cipher_line

# One row per registered method: options to run it with. A method without a row fails test_every_method_has_a_row.
CASES = {
    "random": {},
    "overlap": {},
    "wechsel": {"neighbors": 5, "temperature": 0.1},
}


def test_every_method_has_a_row():
    missing = set(method_names()) - set(CASES)
    assert not missing, f"registered methods without a contract-test row: {sorted(missing)}"


@pytest.fixture(scope="module")
def inputs(cipher_vectors) -> TransferInputs:
    source_tokenizer = byte_level_tokenizer(english_lines(400), vocab_size=360)
    target_tokenizer = byte_level_tokenizer([cipher_line(line) for line in english_lines(400, seed=5)], 340)
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    embeddings = torch.randn(len(source), 24, generator=torch.Generator().manual_seed(0)) * 0.3 + 0.1
    from langswap.resources.alignment import align
    from langswap.resources.dictionary import Dictionary

    source_vectors = WordVectors.load(cipher_vectors["source"])
    target_vectors = WordVectors.load(cipher_vectors["target"])
    from conftest import WORDS, cipher_word

    alignment = align(source_vectors, target_vectors, Dictionary([(w, cipher_word(w)) for w in WORDS]))
    return TransferInputs(source, target, embeddings, alignment.source, alignment.target)


def _run(name, inputs, seed=0, dtype=torch.float32, **extra):
    config = make_config(name, seed=seed, **{**CASES[name], **extra})
    data = TransferInputs(inputs.source, inputs.target, inputs.source_embeddings.to(dtype), inputs.source_vectors,
                          inputs.target_vectors)
    output = torch.randn(len(inputs.source), 24, generator=torch.Generator().manual_seed(1)).to(dtype)
    bias = torch.randn(len(inputs.source), generator=torch.Generator().manual_seed(2)).to(dtype)
    return run_method(config, data, {"output_embeddings": output, "output_bias": bias}), output, bias


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fallback", ["random", "mean", "subword"])
def test_shape_finite_and_every_row_placed(name, fallback, inputs):
    result, _, _ = _run(name, inputs, fallback=fallback)
    size = len(inputs.target)
    assert result.embeddings.shape == (size, 24)
    assert result.output_embeddings.shape == (size, 24)
    assert result.output_bias.shape == (size,)
    for matrix in (result.embeddings, result.output_embeddings, result.output_bias):
        assert torch.isfinite(matrix).all()
    assert not (result.mapping.kinds == Kind.UNPLACED).any()
    if name != "random":
        assert not (result.mapping.kinds == Kind.RANDOM).any() or fallback == "random"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_returns_the_source_dtype(name, dtype, inputs):
    result, _, _ = _run(name, inputs, dtype=dtype)
    assert result.embeddings.dtype == dtype
    assert result.output_embeddings.dtype == dtype


@pytest.mark.parametrize("name", sorted(CASES))
def test_special_tokens_copied_by_role(name, inputs):
    result, output, bias = _run(name, inputs)
    source_eos, target_eos = inputs.source.roles["eos"], inputs.target.roles["eos"]
    assert result.mapping.kinds[target_eos] == Kind.SPECIAL
    assert torch.equal(result.embeddings[target_eos], inputs.source_embeddings[source_eos])
    assert torch.equal(result.output_embeddings[target_eos], output[source_eos])
    assert torch.equal(result.output_bias[target_eos], bias[source_eos])


@pytest.mark.parametrize("name", sorted(CASES))
def test_bitwise_deterministic_whatever_the_global_random_state(name, inputs):
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    first, _, _ = _run(name, inputs, seed=7)
    torch.manual_seed(999)
    np.random.seed(999)
    random.seed(999)
    torch.randn(1000)
    np.random.standard_normal(1000)
    second, _, _ = _run(name, inputs, seed=7)
    assert torch.equal(first.embeddings, second.embeddings)
    assert torch.equal(first.output_embeddings, second.output_embeddings)
    assert torch.equal(first.output_bias, second.output_bias)
    assert np.array_equal(first.mapping.kinds, second.mapping.kinds)
    if (first.mapping.kinds == Kind.RANDOM).any():  # the seed matters where rows are random
        other, _, _ = _run(name, inputs, seed=8)
        assert not torch.equal(first.embeddings, other.embeddings)


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_round_trip(name):
    config = make_config(name, **CASES[name])
    assert from_dict(get_method(name).config_cls, to_dict(config)) == config
    from langswap.transfer import TransferConfig

    nested = to_dict(TransferConfig(method=config))["method"]
    assert nested["name"] == name
    assert from_dict(TransferConfig, {"method": nested}).method == config
    assert dataclasses.is_dataclass(config) and config.method_name == name


@pytest.mark.parametrize("name", sorted(CASES))
def test_mixing_weights_are_a_distribution(name, inputs):
    result, _, _ = _run(name, inputs)
    mapping = result.mapping
    placed = np.isin(mapping.kinds, [Kind.SPECIAL, Kind.COPIED, Kind.MIXED, Kind.SUBWORD])
    sums = mapping.weights[placed].sum(axis=1)
    assert np.allclose(sums, 1.0, atol=1e-5)
    assert (mapping.sources[placed][mapping.weights[placed] > 0] < len(inputs.source)).all()


def test_random_rows_follow_the_source_statistics(inputs):
    result, _, _ = _run("random", inputs)
    rows = torch.from_numpy(result.mapping.rows_of(Kind.RANDOM))
    drawn = result.embeddings[rows]
    assert torch.allclose(drawn.mean(0), inputs.source_embeddings.mean(0), atol=0.1)
    assert torch.allclose(drawn.std(0), inputs.source_embeddings.std(0), rtol=0.25)


def test_fallbacks_place_rows_as_documented(inputs):
    mean_result, _, _ = _run("overlap", inputs, fallback="mean")
    rows = mean_result.mapping.rows_of(Kind.MEAN)
    assert len(rows) > 0
    assert torch.allclose(mean_result.embeddings[rows[0]], inputs.source_embeddings.mean(0), atol=1e-6)
    subword_result, _, _ = _run("overlap", inputs, fallback="subword")
    rows = subword_result.mapping.rows_of(Kind.SUBWORD)
    assert len(rows) > 0
    row = int(rows[0])
    token = inputs.target[row]
    pieces = inputs.source.encode_surface(token.text, token.word_start)
    expected = inputs.source_embeddings[pieces].mean(0)
    assert torch.allclose(subword_result.embeddings[row], expected, atol=1e-6)
