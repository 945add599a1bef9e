"""OMP (tokensurgeon): the pursuit's known answers, a helper that is the cipher of the source, bad helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from langswap.errors import MissingResourceError, VocabularyError
from langswap.methods import Kind, TransferInputs, make_config, run_method
from langswap.methods.omp import orthogonal_matching_pursuit
from langswap.resources.kinds.helper import HelperModel
from langswap.tokens import Vocabulary

from conftest import byte_level_tokenizer, cipher_word, save_model, tiny_model
from test_focus import CLEAR_WORDS, walk_lines


def test_pursuit_recovers_an_exact_sparse_code_and_stops_there():
    generator = torch.Generator().manual_seed(0)
    atoms = torch.randn(50, 20, generator=generator)
    truth = torch.zeros(6, 50)
    for row in range(6):
        picked = torch.randperm(50, generator=generator)[:3]
        truth[row, picked] = torch.randn(3, generator=generator) + torch.sign(torch.randn(3, generator=generator))
    targets = truth @ atoms
    indices, coefficients = orthogonal_matching_pursuit(targets, atoms, k=8)
    rebuilt = torch.zeros(6, 50, dtype=torch.float64).scatter_add_(1, indices, coefficients)
    assert torch.allclose(rebuilt, truth.double(), atol=1e-8)
    assert ((coefficients != 0).sum(dim=1) == 3).all()  # steps after an exact fit keep nothing


def _reference_omp(target: np.ndarray, atoms: np.ndarray, k: int):
    """The textbook loop: pick the atom with the largest |<residual, atom>|, refit by least squares."""
    chosen, residual = [], target.copy()
    for _ in range(k):
        scores = np.abs(atoms @ residual)
        scores[chosen] = -1
        chosen.append(int(scores.argmax()))
        coefficients, *_ = np.linalg.lstsq(atoms[chosen].T, target, rcond=None)
        residual = target - atoms[chosen].T @ coefficients
    return chosen, coefficients


def test_pursuit_equals_the_textbook_loop():
    rng = np.random.default_rng(1)
    atoms = rng.standard_normal((40, 16))
    targets = rng.standard_normal((5, 16))
    indices, coefficients = orthogonal_matching_pursuit(torch.from_numpy(targets), torch.from_numpy(atoms), k=10,
                                                        tolerance=0.0)
    for row in range(5):
        chosen, expected = _reference_omp(targets[row], atoms, 10)
        assert indices[row].tolist() == chosen
        assert np.allclose(coefficients[row].numpy(), expected, atol=1e-9)


@pytest.fixture(scope="module")
def cipher_pair():
    lines = walk_lines(3000, seed=1, cipher_share=0.5)
    source_tokenizer = byte_level_tokenizer(walk_lines(3000, seed=2, cipher_share=0.0), vocab_size=600)
    target_tokenizer = byte_level_tokenizer(lines, vocab_size=900)
    return source_tokenizer, target_tokenizer


def test_a_helper_that_is_the_cipher_of_the_source_maps_each_cipher_onto_its_twin(cipher_pair):
    """The helper's row of a ciphered word is the source row of its plain twin, and its row of a plain word is that
    word's source row: the pursuit finds the twin among the shared tokens with coefficient 1."""
    source_tokenizer, target_tokenizer = cipher_pair
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    # wide rows, as real models have: the pursuit ranks atoms by raw inner products, and in 24 dimensions a random
    # atom's can beat the twin's
    embeddings = torch.randn(len(source), 256, generator=torch.Generator().manual_seed(0))
    helper = torch.randn(len(target), 256, generator=torch.Generator().manual_seed(1))
    source_ids, target_ids = source_tokenizer.get_vocab(), target_tokenizer.get_vocab()
    for word in CLEAR_WORDS:
        plain, ciphered = "Ġ" + word, "Ġ" + cipher_word(word)
        if plain in source_ids:
            for form in (plain, ciphered):
                if form in target_ids:
                    helper[target_ids[form]] = embeddings[source_ids[plain]]
    inputs = TransferInputs(source, target, embeddings, resources={"helper_model": HelperModel(helper, None, "x")})
    mapping = run_method(make_config("omp"), inputs).mapping
    checked = 0
    for word in CLEAR_WORDS:
        plain, ciphered = "Ġ" + word, "Ġ" + cipher_word(word)
        if plain not in source_ids or ciphered not in target_ids or plain not in target_ids:
            continue
        row = target_ids[ciphered]
        if mapping.kinds[row] == Kind.COPIED:
            continue  # a cipher that happens to spell a source token is shared, copied
        assert mapping.kinds[row] == Kind.COMBINED
        sources, weights = mapping.row(row)
        assert sources.tolist() == [source_ids[plain]] and np.allclose(weights, [1.0], atol=1e-5)
        checked += 1
    assert checked >= 60


def test_transfer_with_a_helper_model_folder(cipher_pair, tmp_path):
    from langswap.transfer import transfer, transfer_config

    source_tokenizer, target_tokenizer = cipher_pair
    source_folder = save_model(tiny_model("llama", len(source_tokenizer)), source_tokenizer, tmp_path / "source")
    helper_folder = save_model(tiny_model("gpt2", len(target_tokenizer), seed=3), target_tokenizer, tmp_path / "helper")
    target_tokenizer.save_pretrained(tmp_path / "target")
    config = transfer_config({"source_model": str(source_folder), "target_tokenizer": str(tmp_path / "target"),
                              "output": str(tmp_path / "out"), "method": {"name": "omp", "k": 16},
                              "resources": {"helper_model": str(helper_folder)}})
    report = transfer(config)
    assert report.counts["combined"] > 0
    import json

    record = json.loads((tmp_path / "out" / "langswap.json").read_text(encoding="utf-8"))
    assert record["resources"]["helper_model"]["hidden_size"] == 32
    assert "combined" in (tmp_path / "out" / "provenance.tsv").read_text(encoding="utf-8")


def test_a_helper_with_another_tokenizer_is_refused(cipher_pair, tmp_path):
    from langswap.transfer import transfer, transfer_config

    source_tokenizer, target_tokenizer = cipher_pair
    source_folder = save_model(tiny_model("gpt2", len(source_tokenizer)), source_tokenizer, tmp_path / "source")
    target_tokenizer.save_pretrained(tmp_path / "target")
    config = transfer_config({"source_model": str(source_folder), "target_tokenizer": str(tmp_path / "target"),
                              "output": str(tmp_path / "out"), "method": "omp",
                              "resources": {"helper_model": str(source_folder)}})  # the source's tokenizer
    with pytest.raises(VocabularyError, match="does not use the target tokenizer"):
        transfer(config)
    assert not (tmp_path / "out").exists()
    config = transfer_config({"source_model": str(source_folder), "target_tokenizer": str(tmp_path / "target"),
                              "output": str(tmp_path / "out"), "method": "omp"})
    with pytest.raises(MissingResourceError, match="resources.helper_model"):
        transfer(config)


def test_an_untied_helper_head_codes_the_untied_source_head_on_its_own(cipher_pair, tmp_path):
    """A helper whose head rows are the source head's (input rows random): the input rows get codes of the input
    helper rows, the head rows the exact twin from the head; the folder says so in provenance-head.tsv."""
    import json

    from langswap.models import load_model
    from langswap.transfer import transfer, transfer_config

    source_tokenizer, target_tokenizer = cipher_pair
    source_model = tiny_model("llama", len(source_tokenizer))
    source_folder = save_model(source_model, source_tokenizer, tmp_path / "source")
    helper = tiny_model("llama", len(target_tokenizer), seed=4)
    source_head = source_model.get_output_embeddings().weight.detach()
    source_ids, target_ids = source_tokenizer.get_vocab(), target_tokenizer.get_vocab()
    twins = {}
    with torch.no_grad():
        for word in CLEAR_WORDS:
            plain, ciphered = "Ġ" + word, "Ġ" + cipher_word(word)
            if plain in source_ids and plain in target_ids and ciphered in target_ids:
                helper.get_output_embeddings().weight[target_ids[plain]] = source_head[source_ids[plain]]
                helper.get_output_embeddings().weight[target_ids[ciphered]] = source_head[source_ids[plain]]
                twins[target_ids[ciphered]] = source_ids[plain]
    helper_folder = save_model(helper, target_tokenizer, tmp_path / "helper")
    target_tokenizer.save_pretrained(tmp_path / "target")
    config = transfer_config({"source_model": str(source_folder), "target_tokenizer": str(tmp_path / "target"),
                              "output": str(tmp_path / "out"), "method": {"name": "omp", "k": 16},
                              "resources": {"helper_model": str(helper_folder)}})
    transfer(config)
    out = load_model(tmp_path / "out")
    head = out.get_output_embeddings().weight.detach()
    record = json.loads((tmp_path / "out" / "langswap.json").read_text(encoding="utf-8"))
    assert record["head_counts"]["combined"] > 0
    assert (tmp_path / "out" / "provenance-head.tsv").is_file()
    exact = [row for row, twin in twins.items() if torch.allclose(head[row], source_head[twin], atol=1e-4)]
    # in 32 dimensions a random shared row can outscore the twin for a few words; most are found exactly
    assert len(twins) >= 60 and len(exact) >= 0.8 * len(twins)
    inputs_rows = out.get_input_embeddings().weight.detach()
    assert not torch.allclose(inputs_rows[list(twins)], head[list(twins)])
