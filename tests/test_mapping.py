"""Token mappings compressed by row: setting rows, each kind's rule, base rows plus offsets, and the mixing kernel."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from langswap.kernels import mix_csr_rows, mix_rows
from langswap.methods import Kind, TokenMapping
from langswap.methods.mapping import build_matrix


def _old_mix_rows(matrix, sources, weights, block_bytes=256 * 2**20):
    """The mixing of a dense (N, width) table padded with -1, as langswap did it before mappings were compressed."""
    vector = matrix.dim() == 1
    table = (matrix if not vector else matrix[:, None]).to(torch.float32)
    n_rows, width = sources.shape
    out = torch.zeros((n_rows, table.shape[1]), dtype=torch.float32)
    step = max(1, block_bytes // (4 * max(width * table.shape[1], 1)))
    for start in range(0, n_rows, step):
        index = sources[start:start + step]
        block_weights = torch.where(index >= 0, weights[start:start + step], torch.zeros(()))
        out[start:start + step] = torch.nn.functional.embedding_bag(index.clamp_min(0), table,
                                                                    per_sample_weights=block_weights, mode="sum")
    return out[:, 0] if vector else out


def _bits(tensor):
    return tensor.contiguous().view(torch.int32)


@pytest.mark.parametrize("block_bytes", [4 * 8, 4 * 8 * 50, 256 * 2**20])
def test_compressed_mixing_equals_the_padded_table_bit_for_bit(block_bytes):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 12, 300)
    lengths[17] = 500  # one wide row
    lengths[40:60] = 0  # a run of rows without sources
    sources = np.full((300, lengths.max()), -1, dtype=np.int64)
    weights = np.zeros(sources.shape, dtype=np.float32)
    for row, length in enumerate(lengths):
        sources[row, :length] = rng.integers(0, 1000, length)
        weights[row, :length] = rng.dirichlet(np.ones(length)) if length else []
    matrix, bias = torch.randn(1000, 8, generator=torch.Generator().manual_seed(1)), torch.randn(1000)
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    valid = sources >= 0
    for table in (matrix, bias):
        expected = _old_mix_rows(table, torch.from_numpy(sources), torch.from_numpy(weights), block_bytes)
        compressed = mix_csr_rows(table, indptr, sources[valid], weights[valid], block_bytes=block_bytes)
        padded = mix_rows(table, torch.from_numpy(sources), torch.from_numpy(weights), block_bytes=block_bytes)
        assert torch.equal(_bits(compressed), _bits(expected))
        assert torch.equal(_bits(padded), _bits(expected))
        # rows asked for beyond the mapping's come zero, after the same rows, for the caller to fill in place
        longer = mix_csr_rows(table, indptr, sources[valid], weights[valid], block_bytes=block_bytes,
                              rows=len(indptr) + 2)
        assert torch.equal(_bits(longer[:len(indptr) - 1]), _bits(expected)) and not longer[len(indptr) - 1:].any()
    assert torch.equal(mix_csr_rows(matrix, np.zeros(4, dtype=np.int64), [], []), torch.zeros(3, 8))


def test_rows_keep_only_their_own_sources_and_the_last_write_wins():
    mapping = TokenMapping.empty(6)
    mapping.set_rows([0, 1], Kind.MIXED, [[3, 4, -1], [5, -1, -1]], [[0.25, 0.75, 0.0], [1.0, 0.0, 0.0]])
    mapping.set_ragged_rows([2, 3], Kind.SUBWORD, [3, 1], [7, 8, 9, 1], [1 / 3, 1 / 3, 1 / 3, 1.0])
    mapping.copy_rows([1, 4], [6, 2], Kind.COPIED)  # row 1 is copied now: its mixed sources go
    mapping.set_kind([3], Kind.MEAN)  # and row 3 loses its piece
    mapping.set_kind([5], Kind.RANDOM)
    assert mapping.kinds.tolist() == [Kind.MIXED, Kind.COPIED, Kind.SUBWORD, Kind.MEAN, Kind.COPIED, Kind.RANDOM]
    assert mapping.indptr.tolist() == [0, 2, 3, 6, 6, 7, 7]
    assert mapping.indices.tolist() == [3, 4, 6, 7, 8, 9, 2]
    assert mapping.weights.tolist() == pytest.approx([0.25, 0.75, 1.0, 1 / 3, 1 / 3, 1 / 3, 1.0])
    assert mapping.width == 3
    mapping.check(source_rows=10)
    mapping.set_rows([0], Kind.MIXED, [[1, 2]], [[0.5, 0.5]])  # writes after a read are compressed at the next one
    assert mapping.row(0)[0].tolist() == [1, 2]
    assert mapping.counts() == {"copied": 2, "mixed": 1, "subword": 1, "mean": 1, "random": 1}
    with pytest.raises(ValueError, match="read-only"):
        mapping.kinds[0] = Kind.MEAN  # kinds change through the setters, which keep the sources in step


def test_one_row_of_500_sources_costs_500_entries_not_a_table_500_wide():
    size, width = 50_000, 500
    mapping = TokenMapping.empty(size)
    mapping.set_kind(np.arange(size), Kind.MEAN)
    rng = np.random.default_rng(0)
    weights = rng.dirichlet(np.ones(width)).astype(np.float32)
    mapping.set_rows([123], Kind.MIXED, rng.integers(0, 1000, width)[None], weights[None])
    dense_bytes = size * width * (8 + 4)  # the (V_t, 500) int64 ids and float32 weights of a padded table
    assert mapping.nbytes <= size * (1 + 8) + 8 + width * 12 < dense_bytes / 500
    matrix = torch.randn(1000, 4, generator=torch.Generator().manual_seed(0))
    built = build_matrix(mapping, matrix, seed=0)
    sources, row_weights = mapping.row(123)
    expected = (torch.tensor(row_weights)[:, None].double() * matrix[torch.tensor(sources)].double()).sum(0)
    assert torch.allclose(built[123].double(), expected, atol=1e-5)
    assert torch.equal(built[0], matrix.mean(0))


def test_check_names_the_row_that_breaks_its_kinds_rule():
    def mapping_of(kinds, indptr, indices, weights):
        return TokenMapping.from_csr(np.array(kinds, dtype=np.int8), indptr, indices, weights)

    fine = mapping_of([Kind.COPIED, Kind.MIXED, Kind.MEAN], [0, 1, 3, 3], [4, 1, 2], [1.0, 0.4, 0.6])
    fine.check(source_rows=5)
    cases = [
        (mapping_of([Kind.COPIED, Kind.MIXED], [0, 1, 3], [4, 1, 2], [1.0, 0.4, 0.5]), "row 1 .*sum to 1"),
        (mapping_of([Kind.MIXED], [0, 2], [1, 2], [1.2, -0.2]), "row 0 .*non-negative"),
        (mapping_of([Kind.COPIED], [0, 2], [1, 2], [0.5, 0.5]), "row 0 .*exactly 1"),
        (mapping_of([Kind.SPECIAL], [0, 1], [1], [0.5]), "row 0 .*single weight 1"),
        (mapping_of([Kind.MEAN], [0, 1], [1], [1.0]), "row 0 .*exactly 0"),
        (mapping_of([Kind.SUBWORD], [0, 0], [], []), "row 0 .*at least 1"),
        (mapping_of([Kind.COPIED], [0, 1], [9], [1.0]), "row 0 has source 9"),
        (mapping_of([Kind.MIXED, Kind.UNPLACED], [0, 1, 1], [1], [1.0]), "unplaced"),
        (mapping_of([Kind.BASE_PLUS_OFFSET], [0, 0], [], []), "row 0 .*lacks a base row"),
    ]
    for mapping, message in cases:
        with pytest.raises(AssertionError, match=message):
            mapping.check(source_rows=5)


def test_run_method_checks_the_mapping_a_method_returns(monkeypatch):
    from langswap.methods import base, run_method
    from langswap.methods.base import TransferInputs
    from langswap.tokens import Vocabulary

    from conftest import byte_level_tokenizer, english_lines

    vocabulary = Vocabulary(byte_level_tokenizer(english_lines(100), vocab_size=280))
    inputs = TransferInputs(vocabulary, vocabulary, torch.randn(len(vocabulary), 4))

    def broken(inputs, config, progress=False):
        mapping = TokenMapping.empty(len(inputs.target))
        mapping.set_rows(np.arange(len(mapping)), Kind.MIXED, np.zeros((len(mapping), 2)), np.full((len(mapping), 2),
                                                                                                   0.4))
        return mapping

    spec = base.get_method("overlap")
    monkeypatch.setitem(base._REGISTRY, "overlap", dataclasses.replace(spec, function=broken))
    with pytest.raises(AssertionError, match="weights summing to 0.8"):
        run_method("overlap", inputs)


# -- a base row plus an offset (TEMA) ---------------------------------------------------------------------------------

def _base_mapping(base_head: bool, base_bias: bool, offsets: dict):
    generator = torch.Generator().manual_seed(3)
    base = {"embeddings": torch.randn(7, 4, generator=generator),
            "output_embeddings": torch.randn(7, 4, generator=generator) if base_head else None,
            "output_bias": torch.randn(7, generator=generator) if base_bias else None}
    mapping = TokenMapping.empty(5)
    mapping.add_base("target_model", **base)
    mapping.copy_rows([0], [2])
    mapping.set_base_rows([1, 3, 4], "target_model", [6, 0, 6], offsets)
    mapping.set_kind([2], Kind.MEAN)
    mapping.copy_rows([4], [1])  # a base row overwritten by a copy is a copy, with no base
    return mapping, base


def test_base_plus_offset_rows_follow_their_head_and_bias_rules():
    generator = torch.Generator().manual_seed(4)
    source = {"embeddings": torch.randn(3, 4, generator=generator),
              "output_embeddings": torch.randn(3, 4, generator=generator),
              "output_bias": torch.randn(3, generator=generator)}
    offsets = {"embeddings": np.arange(12, dtype=np.float32).reshape(3, 4) / 10,
               "output_embeddings": -np.ones((3, 4), dtype=np.float32),
               "output_bias": np.array([0.5, 1.5, 2.5], dtype=np.float32)}
    mapping, base = _base_mapping(base_head=True, base_bias=True, offsets=offsets)
    mapping.check(source_rows=3)
    assert mapping.kinds.tolist() == [Kind.COPIED, Kind.BASE_PLUS_OFFSET, Kind.MEAN, Kind.BASE_PLUS_OFFSET,
                                      Kind.COPIED]
    assert mapping.base_of(1) == ("target_model", 6) and mapping.base_of(3) == ("target_model", 0)
    assert mapping.base_of(4) is None and mapping.row(1)[0].tolist() == []
    built = {which: build_matrix(mapping, source[which], 0, which) for which in source}
    for which, matrix in built.items():
        assert torch.equal(matrix[0], source[which][2]) and torch.equal(matrix[4], source[which][1])
        assert torch.equal(matrix[2], source[which].mean(0))
        for row, base_row, offset_row in ((1, 6, 0), (3, 0, 1)):
            assert torch.equal(matrix[row], base[which][base_row] + torch.tensor(offsets[which][offset_row]))


def test_a_base_without_head_or_bias_counts_as_tied_and_unbiased_and_offsets_default_to_zero():
    source = {"embeddings": torch.randn(3, 4), "output_embeddings": torch.randn(3, 4), "output_bias": torch.randn(3)}
    offsets = {"embeddings": np.ones((3, 4), dtype=np.float32)}  # no head or bias offset: zero
    mapping, base = _base_mapping(base_head=False, base_bias=False, offsets=offsets)
    head = build_matrix(mapping, source["output_embeddings"], 0, "output_embeddings")
    bias = build_matrix(mapping, source["output_bias"], 0, "output_bias")
    embeddings = build_matrix(mapping, source["embeddings"], 0, "embeddings")
    assert torch.equal(head[1], base["embeddings"][6]) and torch.equal(head[3], base["embeddings"][0])
    assert bias[1] == 0.0 and bias[3] == 0.0
    assert torch.equal(embeddings[1], base["embeddings"][6] + 1.0)


def test_base_rows_are_refused_when_they_do_not_fit():
    mapping, _ = _base_mapping(base_head=True, base_bias=True, offsets={})
    from langswap.errors import MissingResourceError

    with pytest.raises(MissingResourceError, match="base 'other' is not added"):
        mapping.set_base_rows([0], "other", [0])
    with pytest.raises(AssertionError, match="outside base"):
        mapping.set_base_rows([0], "target_model", [7])
    with pytest.raises(AssertionError, match="offsets of shape"):
        mapping.set_base_rows([0], "target_model", [1], {"embeddings": np.zeros((1, 5))})
    with pytest.raises(AssertionError, match="rows of shape"):
        build_matrix(mapping, torch.randn(3, 6), 0, "embeddings")  # a base 4 wide for a model 6 wide
    mapping.set_base_rows([0], "target_model", [1], {"output_bias": np.array([np.nan], dtype=np.float32)})
    with pytest.raises(AssertionError, match="row 0 has a non-finite output_bias offset"):
        mapping.check(source_rows=3)


def test_provenance_and_correspondence_name_a_base_row(tmp_path):
    from langswap.evaluation.correspondence import correspondence_rows, format_correspondence
    from langswap.methods.base import MethodResult, TransferInputs
    from langswap.methods.provenance import refuse_non_finite_rows, write_provenance
    from langswap.errors import NumericalError
    from langswap.tokens import Vocabulary

    from conftest import byte_level_tokenizer, english_lines

    vocabulary = Vocabulary(byte_level_tokenizer(english_lines(100), vocab_size=280))
    size = len(vocabulary)
    mapping = TokenMapping.empty(size)
    mapping.add_base("target_model", torch.randn(size, 4))
    mapping.copy_rows(np.arange(size), np.arange(size))
    mapping.set_base_rows([5], "target_model", [9], {"embeddings": np.ones((1, 4), dtype=np.float32)})
    mapping.set_rows([6], Kind.MIXED, [[2, 3]], [[0.25, 0.75]])
    write_provenance(tmp_path / "provenance.tsv", mapping, vocabulary, vocabulary)
    lines = (tmp_path / "provenance.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[6].split("\t")[2:] == ["base_plus_offset", "target_model[9]+offset"]
    assert lines[7].split("\t")[3] == f"3:{vocabulary[3].token!r}:0.7500 2:{vocabulary[2].token!r}:0.2500"
    rows = correspondence_rows(mapping, vocabulary, vocabulary, token_ids=[5, 6])
    assert rows[0]["base"] == "target_model[9]" and rows[0]["sources"] == [] and "base" not in rows[1]
    assert "target_model[9] + offset" in format_correspondence(rows)
    embeddings = build_matrix(mapping, torch.randn(size, 4), 0)
    embeddings[5] = float("nan")
    inputs = TransferInputs(vocabulary, vocabulary, torch.randn(size, 4))
    with pytest.raises(NumericalError, match=r"in 1 rows \(5 .*base_plus_offset from target_model\[9\] plus an "):
        refuse_non_finite_rows(MethodResult(mapping, embeddings), inputs)


def test_a_copy_is_independent_and_shares_its_base_matrices():
    mapping, _ = _base_mapping(base_head=True, base_bias=True, offsets=None)
    mapping.set_rows([2], Kind.MIXED, [[0, 1]], [[0.25, 0.75]])
    copy = mapping.copy()
    copy.set_rows([0, 2], Kind.MIXED, [[1], [0]], [[1.0], [1.0]])
    assert mapping.kinds.tolist()[:3] == [Kind.COPIED, Kind.BASE_PLUS_OFFSET, Kind.MIXED]
    assert mapping.row(2)[0].tolist() == [0, 1] and mapping.row(2)[1].tolist() == [0.25, 0.75]
    assert copy.kinds.tolist()[:3] == [Kind.MIXED, Kind.BASE_PLUS_OFFSET, Kind.MIXED]
    assert copy.row(2)[0].tolist() == [0] and copy.base_of(1) == mapping.base_of(1)
    assert all(copy.bases[name] is base for name, base in mapping.bases.items()) and mapping.bases
