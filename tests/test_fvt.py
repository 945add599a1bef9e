"""`fvt`: shared tokens copied, every other token the (length-weighted) mean of its source pieces."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import byte_level_tokenizer, cipher_line, english_lines
from langswap.methods import Kind, TransferInputs, make_config, run_method
from langswap.tokens import Vocabulary


@pytest.fixture(scope="module")
def inputs() -> TransferInputs:
    source = Vocabulary(byte_level_tokenizer(english_lines(400), vocab_size=360))
    target = Vocabulary(byte_level_tokenizer([cipher_line(line) for line in english_lines(400, seed=5)], 340))
    embeddings = torch.randn(len(source), 8, generator=torch.Generator().manual_seed(0))
    return TransferInputs(source, target, embeddings)


def test_each_row_is_its_pieces_mean_or_its_shared_twin(inputs):
    mapping = run_method(make_config("fvt", fallback="mean"), inputs).mapping
    checked = 0
    for token in inputs.target.tokens:
        if token.special or token.text is None:
            continue
        sources, weights = mapping.row(token.id)
        shared = inputs.source.lookup(token, inputs.target.family)
        if shared is not None:
            assert mapping.kinds[token.id] == Kind.COPIED and sources.tolist() == [shared]
            continue
        pieces = inputs.source.encode_surface(token.text, token.word_start)
        assert mapping.kinds[token.id] == Kind.SUBWORD
        assert sources.tolist() == pieces
        assert weights.tolist() == pytest.approx([1 / len(pieces)] * len(pieces))
        checked += 1
    assert checked > 50


def test_length_weighting_gives_each_piece_its_share_of_the_bytes(inputs):
    mapping = run_method(make_config("fvt", weighting="length"), inputs).mapping
    several = [row for row in mapping.rows_of(Kind.SUBWORD) if len(mapping.row(int(row))[0]) > 1]
    assert several
    for row in several:
        sources, weights = mapping.row(int(row))
        lengths = np.array([max(len(inputs.source[int(i)].raw), 1) for i in sources], dtype=float)  # a bare marker: 1
        assert weights.tolist() == pytest.approx((lengths / lengths.sum()).tolist())
    # unequal pieces get unequal weights somewhere
    assert any(len(set(np.round(mapping.row(int(row))[1], 6))) > 1 for row in several)


def test_the_mean_variant_is_overlap_with_the_subword_fallback(inputs):
    fvt = run_method(make_config("fvt"), inputs)
    overlap = run_method(make_config("overlap", fallback="subword"), inputs)
    assert torch.equal(fvt.embeddings, overlap.embeddings)
