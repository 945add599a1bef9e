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
    "tiktotok": {},
    "fvt": {"weighting": "length"},
    "focus": {"first_candidates": 4},
    "omp": {"k": 8},
    "clp": {},
    "combined": {"vectors_weight": 0.5, "parallel_weight": 0.5},
    "ramen": {},
}


def test_every_method_has_a_row():
    missing = set(method_names()) - set(CASES)
    assert not missing, f"registered methods without a contract-test row: {sorted(missing)}"


def method_inputs(source_tokenizer, target_tokenizer, cipher_vectors, folder, kept: int = 0) -> TransferInputs:
    """Every method's inputs for a pair of tokenizers: random source rows, the cipher's aligned word vectors and
    dictionary, and each resource a method needs, made for `target_tokenizer` (`kept`: the target extends the
    source, whose ids below `kept` it keeps)."""
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    embeddings = torch.randn(len(source), 24, generator=torch.Generator().manual_seed(0)) * 0.3 + 0.1
    from langswap.resources.alignment import align
    from langswap.resources.dictionary import Dictionary

    source_vectors = WordVectors.load(cipher_vectors["source"])
    target_vectors = WordVectors.load(cipher_vectors["target"])
    from conftest import WORDS, cipher_word

    dictionary = Dictionary([(w, cipher_word(w)) for w in WORDS])
    alignment = align(source_vectors, target_vectors, dictionary)
    # tiktotok's resource: the dictionary and a small bilingual fastText model of it
    from langswap.resources.dictionary_fasttext import BILINGUAL_FASTTEXT, train_bilingual_fasttext
    from langswap.resources.kinds.bilingual_vectors import BilingualVectors

    (folder / "en-xx.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in dictionary.pairs), encoding="utf-8")
    model = train_bilingual_fasttext(folder / "en-xx.tsv", folder / "en-xx.bin",
                                     options=dataclasses.replace(BILINGUAL_FASTTEXT, bucket=20_000, thread=1))
    bilingual = BilingualVectors(dictionary, WordVectors.load(model))
    # focus's resource: token-level fastText of the target text under the target tokenizer
    from langswap.resources.kinds.token_vectors import TokenVectors
    from langswap.resources.token_vectors import FOCUS_FASTTEXT, load_token_vectors, token_words, train_token_fasttext

    (folder / "xx.txt").write_text("\n".join(cipher_line(line) for line in english_lines(400, seed=5)) + "\n",
                                   encoding="utf-8")
    train_token_fasttext(folder / "xx.txt", target_tokenizer, folder / "xx-tokens.bin",
                         dataclasses.replace(FOCUS_FASTTEXT, dim=16, minCount=3, bucket=20_000))
    tokens = TokenVectors(load_token_vectors(folder / "xx-tokens.bin", target_tokenizer)[0],
                          token_words(target_tokenizer))
    # omp's resource: a helper model's rows for the target tokens (another width, as a smaller helper has)
    from langswap.resources.kinds.helper import HelperModel

    helper = torch.randn(len(target), 12, generator=torch.Generator().manual_seed(3))
    # ramen's resource: translation probabilities from the ciphered text aligned with its English original
    from langswap.resources.parallel import translation_table

    parallel = english_lines(400, seed=5)
    translations = translation_table(parallel, [cipher_line(line) for line in parallel], source_tokenizer,
                                     target_tokenizer)
    return TransferInputs(source, target, embeddings, alignment.source, alignment.target,
                          resources={"bilingual_vectors": bilingual, "token_vectors": tokens, "dictionary": dictionary,
                                     "helper_model": HelperModel(helper, None, "random helper"),
                                     "translations": translations}, kept=kept)


@pytest.fixture(scope="module")
def source_tokenizer():
    return byte_level_tokenizer(english_lines(400), vocab_size=360)


@pytest.fixture(scope="module")
def inputs(source_tokenizer, cipher_vectors, tmp_path_factory) -> TransferInputs:
    target_tokenizer = byte_level_tokenizer([cipher_line(line) for line in english_lines(400, seed=5)], 340)
    return method_inputs(source_tokenizer, target_tokenizer, cipher_vectors, tmp_path_factory.mktemp("bilingual"))


@pytest.fixture(scope="module")
def extended_inputs(source_tokenizer, cipher_vectors, tmp_path_factory) -> TransferInputs:
    """The source tokenizer extended by 60 tokens of the ciphered text (`langswap tokenizer --extend`)."""
    from langswap.resources.extension import extend_tokenizer

    extended = extend_tokenizer(source_tokenizer, [cipher_line(line) for line in english_lines(400, seed=5)], 60)
    return method_inputs(source_tokenizer, extended.tokenizer, cipher_vectors, tmp_path_factory.mktemp("extended"),
                         kept=len(source_tokenizer))


def _run(name, inputs, seed=0, dtype=torch.float32, **extra):
    config = make_config(name, seed=seed, **{**CASES[name], **extra})
    data = TransferInputs(inputs.source, inputs.target, inputs.source_embeddings.to(dtype), inputs.source_vectors,
                          inputs.target_vectors, resources=dict(inputs.resources), kept=inputs.kept)
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
def test_into_an_extension_every_source_row_is_its_own_and_only_the_new_rows_are_made(name, extended_inputs):
    """Every method, given a target that extends the source: the input rows, output rows and bias of every source id
    are the source's bit for bit (special tokens included), and the new ids get rows of their own, finite."""
    result, output, bias = _run(name, extended_inputs)
    kept = extended_inputs.kept
    assert len(extended_inputs.target) == kept + 60
    assert torch.equal(result.embeddings[:kept], extended_inputs.source_embeddings)
    assert torch.equal(result.output_embeddings[:kept], output)
    assert torch.equal(result.output_bias[:kept], bias)
    new = result.embeddings[kept:]
    assert torch.isfinite(new).all() and new.shape == (60, 24)
    assert not (result.mapping.kinds[kept:] == Kind.UNPLACED).any()


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
    placed = np.flatnonzero(np.isin(mapping.kinds, [Kind.SPECIAL, Kind.COPIED, Kind.MIXED, Kind.SUBWORD]))
    sums = np.array([mapping.row(row)[1].sum() for row in placed])
    assert np.allclose(sums, 1.0, atol=1e-5)
    assert all((sources[weights > 0] < len(inputs.source)).all() for sources, weights in map(mapping.row, placed))


# What each kind promises, written out here rather than read from KIND_RULES, so the test checks the rules too:
# (fewest sources, most sources or None for any, what the weights are: "one", "distribution" or None).
KIND_PROMISES = {
    Kind.SPECIAL: (1, 1, "one"),
    Kind.COPIED: (1, 1, "one"),
    Kind.MIXED: (1, None, "distribution"),
    Kind.SUBWORD: (1, None, "distribution"),
    Kind.MEAN: (0, 0, None),
    Kind.RANDOM: (0, 0, None),
    Kind.BASE_PLUS_OFFSET: (0, 0, None),
    Kind.TRANSLATED: (1, None, "distribution"),
    Kind.COMBINED: (1, None, "finite"),
}


def test_every_kind_has_a_promise_and_a_rule():
    from langswap.methods.mapping import KIND_RULES

    assert set(KIND_PROMISES) == set(Kind) - {Kind.UNPLACED}, "a new Kind needs a row in KIND_PROMISES"
    assert set(KIND_RULES) == set(Kind)
    for kind, (fewest, most, weights) in KIND_PROMISES.items():
        rule = KIND_RULES[kind]
        assert (rule.fewest_sources, rule.most_sources, rule.weights) == (fewest, most, weights or "none")
        assert rule.head and rule.bias  # each kind states its output head and output bias rule


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fallback", ["random", "mean", "subword"])
def test_each_row_keeps_its_kinds_promise(name, fallback, inputs):
    result, _, _ = _run(name, inputs, fallback=fallback)
    mapping = result.mapping
    mapping.check(len(inputs.source))  # run_method checked it too; here it must agree with the row-by-row reading
    for row in range(len(mapping)):
        kind = Kind(int(mapping.kinds[row]))
        fewest, most, promised = KIND_PROMISES[kind]
        sources, weights = mapping.row(row)
        assert fewest <= len(sources) and (most is None or len(sources) <= most), (row, kind, sources)
        assert ((sources >= 0) & (sources < len(inputs.source))).all()
        if promised == "one":
            assert weights.tolist() == [1.0]
        elif promised == "distribution":
            assert (weights >= 0).all() and abs(float(weights.sum()) - 1.0) <= 1e-5
        elif promised == "finite":
            assert np.isfinite(weights).all()
        assert (mapping.base_of(row) is not None) == (kind == Kind.BASE_PLUS_OFFSET)


def _old_dense_build(mapping, matrix, seed, stream):
    """The matrices as langswap built them from a dense (V_t, width) table padded with -1: the reference the
    compressed mapping must equal bit for bit."""
    from langswap.methods.mapping import random_rows

    width = max(1, mapping.width)
    sources = np.full((len(mapping), width), -1, dtype=np.int64)
    weights = np.zeros((len(mapping), width), dtype=np.float32)
    for row in range(len(mapping)):
        row_sources, row_weights = mapping.row(row)
        sources[row, :len(row_sources)] = row_sources
        weights[row, :len(row_weights)] = row_weights
    table = matrix.detach().to(torch.float32)
    vector = table.dim() == 1
    table2 = table[:, None] if vector else table
    out = torch.zeros((len(mapping), table2.shape[1]))
    step = max(1, 256 * 2**20 // (4 * width * table2.shape[1]))
    for start in range(0, len(mapping), step):  # the old mix_rows: an embedding_bag over the padded table
        index = torch.from_numpy(sources[start:start + step])
        block_weights = torch.where(index >= 0, torch.from_numpy(weights[start:start + step]), torch.zeros(()))
        out[start:start + step] = torch.nn.functional.embedding_bag(index.clamp_min(0), table2,
                                                                    per_sample_weights=block_weights, mode="sum")
    out = out[:, 0] if vector else out
    mean_rows = torch.from_numpy(mapping.rows_of(Kind.MEAN))
    out[mean_rows] = table.mean(dim=0)
    random = torch.from_numpy(mapping.rows_of(Kind.RANDOM))
    out[random] = random_rows(table, len(mapping), seed, stream)[random]
    return out.to(matrix.dtype)


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().view(torch.int16 if tensor.element_size() == 2 else torch.int32)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fallback", ["random", "mean", "subword"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matrices_equal_the_dense_table_computation_bit_for_bit(name, fallback, dtype, inputs):
    result, output, bias = _run(name, inputs, fallback=fallback, dtype=dtype)
    for stream, (built, source) in enumerate([(result.embeddings, inputs.source_embeddings.to(dtype)),
                                              (result.output_embeddings, output), (result.output_bias, bias)]):
        assert torch.equal(_bits(built), _bits(_old_dense_build(result.mapping, source, 0, stream)))  # _run's seed


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
