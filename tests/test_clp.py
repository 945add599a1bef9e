"""CLP-Transfer: the paper's weights, a helper that is the cipher of the source, the size guard."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from langswap.errors import ConfigError
from langswap.methods import Kind, TransferInputs, make_config, run_method
from langswap.resources.kinds.helper import HelperModel
from langswap.tokens import Vocabulary

from conftest import byte_level_tokenizer, cipher_word
from test_focus import CLEAR_WORDS, walk_lines


def half_cipher_world():
    """(source, target, source embeddings (V_s, 64), random helper rows (V_t, 64)): plain English walks for the
    source, walks with half the words ciphered for the target."""
    source_tokenizer = byte_level_tokenizer(walk_lines(3000, seed=2, cipher_share=0.0), vocab_size=600)
    target_tokenizer = byte_level_tokenizer(walk_lines(3000, seed=1, cipher_share=0.5), vocab_size=900)
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    embeddings = torch.randn(len(source), 64, generator=torch.Generator().manual_seed(0))
    helper = torch.randn(len(target), 64, generator=torch.Generator().manual_seed(1))
    return source, target, embeddings, helper


@pytest.fixture(scope="module")
def cipher_inputs():
    """A half-ciphered target language and a helper whose row of each word, plain or ciphered, is the source row of
    the plain word (other rows random): the helper is the cipher of the source model."""
    source, target, embeddings, helper = half_cipher_world()
    source_ids, target_ids = source.tokenizer.get_vocab(), target.tokenizer.get_vocab()
    twins = {}
    for word in CLEAR_WORDS:
        plain, ciphered = "Ġ" + word, "Ġ" + cipher_word(word)
        if plain in source_ids and plain in target_ids and ciphered in target_ids:
            helper[target_ids[plain]] = helper[target_ids[ciphered]] = embeddings[source_ids[plain]]
            twins[target_ids[ciphered]] = source_ids[plain]
    inputs = TransferInputs(source, target, embeddings, resources={"helper_model": HelperModel(helper, None, "x")})
    return inputs, twins


def test_weights_are_similarities_over_their_sum_across_every_overlapping_token(cipher_inputs):
    inputs, _ = cipher_inputs
    mapping = run_method(make_config("clp"), inputs).mapping
    helper = inputs.resource("helper_model").embeddings.double()
    unit = helper / helper.norm(dim=1, keepdim=True)
    overlap = mapping.rows_of(Kind.COPIED)
    placed = np.flatnonzero(np.isin(mapping.kinds, [Kind.MIXED, Kind.COMBINED]))
    assert len(placed) > 50
    for row in placed[:20]:
        similarities = (unit[overlap] @ unit[row]).numpy()
        sources, weights = mapping.row(int(row))
        assert len(sources) == len(overlap)  # every overlapping token, in the overlap's order
        assert np.allclose(weights, similarities / similarities.sum(), atol=1e-5)


def test_with_neighbors_each_cipher_leans_most_on_its_twin(cipher_inputs):
    inputs, twins = cipher_inputs
    mapping = run_method(make_config("clp", neighbors=10), inputs).mapping
    leaning = 0
    for row, twin in twins.items():
        if mapping.kinds[row] == Kind.COPIED:
            continue
        sources, weights = mapping.row(row)
        assert len(sources) == 10
        leaning += int(sources[np.argmax(weights)] == twin)
    assert len(twins) >= 60 and leaning == len([r for r in twins if mapping.kinds[r] != Kind.COPIED])


def test_too_many_weights_are_refused_with_the_fix(cipher_inputs, monkeypatch):
    import langswap.methods.clp as module

    inputs, _ = cipher_inputs
    monkeypatch.setattr(module, "MAX_ENTRIES", 1000)
    with pytest.raises(ConfigError, match="set method.neighbors"):
        run_method(make_config("clp"), inputs)
    assert run_method(make_config("clp", neighbors=1), inputs).mapping.counts()["mixed"] > 0


def test_a_row_whose_similarities_nearly_cancel_goes_to_the_fallback():
    """Weights are similarity / sum: where the sum nearly cancels they blow up, and such a row is not used."""
    import torch

    from langswap.methods.clp import similarity_weights

    similarities = torch.tensor([[0.3, 0.2, 0.1], [0.5, -0.49, 0.01], [0.4, -0.05, 0.3]], dtype=torch.float64)
    weights, usable = similarity_weights(similarities)
    assert torch.allclose(weights.sum(dim=1), torch.ones(3, dtype=torch.float64))
    assert usable.tolist() == [True, False, True]  # row 2: weights 25, -24.5, 0.5
