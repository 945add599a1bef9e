"""Known answers: a ciphered language, Procrustes, WECHSEL twins, uniform perplexity, logits kept by surgery."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from langswap.methods import Kind, TransferInputs, make_config, run_method
from langswap.kernels import mix_rows, topk_cosine
from langswap.resources.alignment import align, procrustes
from langswap.resources.dictionary import Dictionary
from langswap.resources.vectors import WordVectors
from langswap.tokens import Vocabulary

from conftest import (TOKENIZER_BUILDERS, WORDS, byte_level_tokenizer, cipher_line, cipher_word, english_lines,
                      tiny_model, uniform_lm)


# -- ciphered language ---------------------------------------------------------------------------------------------------

def test_procrustes_recovers_the_rotation(cipher_vectors):
    source = WordVectors.load(cipher_vectors["source"])
    target = WordVectors.load(cipher_vectors["target"])
    dictionary = Dictionary([(word, cipher_word(word)) for word in WORDS])
    alignment = align(source, target, dictionary)
    assert np.allclose(alignment.rotation, cipher_vectors["rotation"], atol=1e-4)
    assert alignment.report.precision_at_1 == 1.0
    assert alignment.report.precision_at_1_csls == 1.0
    assert alignment.report.word_pairs == 4 * len(WORDS)  # the/The on each side, crossed as in WECHSEL


def test_held_out_words_leave_every_case_variant_out_of_the_fit(cipher_vectors, monkeypatch):
    """The/the are one held-out word: a variant left in the fit would teach the rotation the test translation."""
    import langswap.resources.alignment as alignment_module

    fitted, queried = [], []
    fit, precision = alignment_module._fit, alignment_module.dictionary_precision
    monkeypatch.setattr(alignment_module, "_fit", lambda s, t, pairs, n: fitted.append(pairs) or fit(s, t, pairs, n))
    monkeypatch.setattr(alignment_module, "dictionary_precision",
                        lambda *args, **kwargs: queried.append(args[3]) or precision(*args, **kwargs))
    source = WordVectors.load(cipher_vectors["source"])
    target = WordVectors.load(cipher_vectors["target"])
    report = align(source, target, Dictionary([(word, cipher_word(word)) for word in WORDS])).report
    held_out_fit, final_fit = fitted
    queries = queried[0]
    assert report.heldout_words == len(WORDS) // 5 and len(queries) == 2 * report.heldout_words
    assert {q.casefold() for q in queries} == {q.lower() for q in queries if q.islower()}  # both forms of each word
    assert not {s.casefold() for s, _ in held_out_fit} & {q.casefold() for q in queries}
    assert len(held_out_fit) == len(final_fit) - 4 * report.heldout_words  # 4 pairs per word: the/The x both


def test_procrustes_on_exact_data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((50, 8))
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    assert np.allclose(procrustes(x, x @ q), q, atol=1e-5)


def whole_word_cipher_world(cipher_vectors):
    """Twin tokenizers of English and its cipher, large enough that most words are one token on both sides, the
    cipher vectors aligned by their dictionary, and random source embeddings: (inputs, twins), twins being
    (word, source id, target id) of each word that is one token on both sides."""
    english = english_lines(1500)
    source_tokenizer = byte_level_tokenizer(english, vocab_size=600)
    target_tokenizer = byte_level_tokenizer([cipher_line(line) for line in english], vocab_size=600)
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    alignment = align(WordVectors.load(cipher_vectors["source"]), WordVectors.load(cipher_vectors["target"]),
                      Dictionary([(word, cipher_word(word)) for word in WORDS]))
    embeddings = torch.randn(len(source), 16, generator=torch.Generator().manual_seed(0))
    twins = []
    for word in WORDS:
        source_ids = source_tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        target_ids = target_tokenizer(" " + cipher_word(word), add_special_tokens=False)["input_ids"]
        if len(source_ids) == 1 and len(target_ids) == 1:
            twins.append((word, source_ids[0], target_ids[0]))
    assert len(twins) >= 60, f"only {len(twins)} words were single tokens on both sides"
    return TransferInputs(source, target, embeddings, alignment.source, alignment.target), twins


def test_wechsel_maps_each_token_onto_its_cipher_twin(cipher_vectors):
    inputs, twins = whole_word_cipher_world(cipher_vectors)
    result = run_method(make_config("wechsel", exact_matches=False), inputs)  # the mixing itself is under test
    for word, source_id, row in twins:
        assert result.mapping.kinds[row] == Kind.MIXED
        sources, weights = result.mapping.row(row)
        best = int(sources[np.argmax(weights)])
        assert best == source_id, f"{cipher_word(word)!r} mixed mostly from {inputs.source[best].token!r}, not {word!r}"
        assert weights.max() > 0.5


# -- kernels ---------------------------------------------------------------------------------------------------------

def test_blocked_topk_equals_dense_topk():
    rng = np.random.default_rng(0)
    queries, keys = rng.standard_normal((300, 12)), rng.standard_normal((500, 12))
    queries[5] = 0.0
    values, indices = topk_cosine(queries, keys, 7, block_bytes=4 * 500 * 13)  # 13-row blocks
    unit = lambda m: m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    dense = unit(queries) @ unit(keys).T
    expected = np.sort(dense, axis=1)[:, ::-1][:, :7]
    assert np.allclose(values.numpy(), expected, atol=1e-5)
    assert np.allclose(np.take_along_axis(dense, indices.numpy(), axis=1), expected, atol=1e-5)


def test_near_ties_rescored_in_chunks_give_the_same_top_k():
    """Nearly parallel vectors make every row a near-tie: the float64 rescoring runs in chunks bounded by
    block_bytes, with the same result as in one piece."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal(50)
    queries = (base + 1e-4 * rng.standard_normal((300, 50))).astype(np.float32)
    keys = (base + 1e-4 * rng.standard_normal((2000, 50))).astype(np.float32)
    whole = topk_cosine(queries, keys, 64)
    chunked = topk_cosine(queries, keys, 64, block_bytes=1 << 16)  # a chunk of the rescoring holds 2 rows
    assert torch.equal(whole[1], chunked[1]) and torch.equal(whole[0], chunked[0])
    unit = lambda m: m.astype(np.float64) / np.linalg.norm(m.astype(np.float64), axis=1, keepdims=True)  # noqa: E731
    exact = np.sort(unit(queries) @ unit(keys).T, axis=1)[:, ::-1][:, :64]
    assert np.allclose(whole[0].numpy(), exact, atol=1e-6)


def test_mix_rows_matches_a_loop():
    matrix = torch.randn(20, 4)
    sources = torch.tensor([[0, 3, -1], [5, 5, 2]])
    weights = torch.tensor([[0.5, 0.5, 0.7], [0.2, 0.3, 0.5]])
    out = mix_rows(matrix, sources, weights, block_bytes=16)
    assert torch.allclose(out[0], 0.5 * matrix[0] + 0.5 * matrix[3])
    assert torch.allclose(out[1], 0.5 * matrix[5] + 0.5 * matrix[2])
    bias = mix_rows(torch.arange(20.0), sources, weights)
    assert torch.allclose(bias, torch.tensor([1.5, 3.5]))


# -- evaluation --------------------------------------------------------------------------------------------------------

def test_uniform_logits_give_perplexity_equal_to_vocabulary_size():
    from langswap.evaluation.language_modeling import causal_lm_score

    tokenizer = byte_level_tokenizer(english_lines(200), vocab_size=300)
    lines = english_lines(30, seed=9) + [" ".join(english_lines(20, seed=4))]  # the last one needs windows
    score = causal_lm_score(uniform_lm(len(tokenizer)), tokenizer, lines)
    assert score.perplexity == pytest.approx(len(tokenizer), rel=1e-6)
    expected_tokens = sum(len(tokenizer(line, add_special_tokens=False)["input_ids"]) for line in lines)
    assert score.tokens == expected_tokens  # every token scored once, windows included
    n_bytes = sum(len(line.encode()) for line in lines)
    assert score.bits_per_byte == pytest.approx(expected_tokens * math.log2(len(tokenizer)) / n_bytes, rel=1e-6)


def test_uniform_masked_lm_pseudo_perplexity_equals_vocabulary_size():
    from langswap.evaluation.language_modeling import pseudo_perplexity

    tokenizer = TOKENIZER_BUILDERS["wordpiece"](english_lines(200), vocab_size=300)
    score = pseudo_perplexity(uniform_lm(len(tokenizer)), tokenizer, english_lines(5, seed=3))
    assert score.perplexity == pytest.approx(len(tokenizer), rel=1e-6)
    assert score.kind == "pseudo-perplexity"


def test_correspondence_rows_name_the_sources_heaviest_first():
    from langswap.evaluation.correspondence import correspondence_rows, format_correspondence
    from langswap.methods.base import TokenMapping

    tokenizer = byte_level_tokenizer(english_lines(200), vocab_size=300)
    vocabulary = Vocabulary(tokenizer)
    word = lambda text: tokenizer.convert_tokens_to_ids("\u0120" + text)  # GPT-2's marker of a word start
    mapping = TokenMapping.empty(len(vocabulary))
    target = word("the")
    mapping.set_rows(np.array([target]), Kind.MIXED, [[word("and"), word("of"), -1]], [[0.25, 0.75, 0.0]])
    mapping.set_rows(np.array([word("of")]), Kind.COPIED, [[word("of")]], [[1.0]])
    rows = correspondence_rows(mapping, vocabulary, vocabulary, token_ids=[target, word("of")])
    assert rows == [{"id": target, "token": "_the", "kind": "mixed", "sources": [("_of", 0.75), ("_and", 0.25)]},
                    {"id": word("of"), "token": "_of", "kind": "copied", "sources": [("_of", 1.0)]}]
    assert format_correspondence(rows).splitlines()[2:] == ["| _the | mixed | _of (0.75), _and (0.25) |",
                                                            "| _of | copied | _of (1.00) |"]
    # sampling picks only mixed or translated word starts of at least min_length characters
    assert [row["id"] for row in correspondence_rows(mapping, vocabulary, vocabulary, min_length=3)] == [target]
    assert correspondence_rows(mapping, vocabulary, vocabulary, min_length=4) == []
    mapping.set_rows(np.array([word("and")]), Kind.TRANSLATED, [[word("of")]], [[1.0]])
    assert [row["id"] for row in correspondence_rows(mapping, vocabulary, vocabulary, min_length=3)] == sorted(
        [target, word("and")])


# -- surgery -----------------------------------------------------------------------------------------------------------

MODEL_FAMILIES = [("gpt2", "byte_level"), ("llama", "sentencepiece"), ("bert", "wordpiece"),
                  ("roberta", "roberta")]


@pytest.mark.parametrize("kind,family", MODEL_FAMILIES)
def test_overlap_onto_the_models_own_tokenizer_keeps_the_logits(kind, family, tmp_path):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    from langswap.transfer import transfer, transfer_config

    tokenizer = TOKENIZER_BUILDERS[family](english_lines(300), vocab_size=300)
    model = tiny_model(kind, len(tokenizer))
    source_folder = tmp_path / "source"
    model.save_pretrained(source_folder)
    tokenizer.save_pretrained(source_folder)
    config = transfer_config({"source_model": str(source_folder), "target_tokenizer": str(source_folder),
                              "output": str(tmp_path / "out"), "method": {"name": "overlap"}})
    report = transfer(config)
    assert report.counts.get("random", 0) == 0
    loader = AutoModelForMaskedLM if kind in ("bert", "roberta") else AutoModelForCausalLM
    from langswap.models import lm_load_arguments

    # (transformers < 4.51 drops a RoBERTa head's saved bias unless it loads with low_cpu_mem_usage)
    reloaded = loader.from_pretrained(tmp_path / "out", **lm_load_arguments(torch.float32))
    reloaded.eval()
    ids = torch.tensor([tokenizer(english_lines(1, seed=11)[0])["input_ids"][:40]])
    with torch.no_grad():
        assert torch.allclose(model(input_ids=ids).logits, reloaded(input_ids=ids).logits, atol=1e-5)
    tied = kind in ("gpt2", "bert", "roberta")
    from langswap.surgery import is_tied

    assert is_tied(reloaded) == tied


@pytest.mark.parametrize("kind,family", MODEL_FAMILIES)
def test_untied_heads_and_biases_get_the_same_mixing(kind, family, tmp_path, cipher_vectors):
    """Transfer to another vocabulary: each new output row / bias entry is the mapping applied to the old ones."""
    from langswap.methods.base import TransferInputs as Inputs
    from langswap.transfer import apply_method
    from langswap.surgery import is_tied, output_bias, read_source_matrices

    tokenizer = TOKENIZER_BUILDERS[family](english_lines(300), vocab_size=300)
    target_tokenizer = TOKENIZER_BUILDERS[family]([cipher_line(l) for l in english_lines(300)], vocab_size=280)
    model = tiny_model(kind, len(tokenizer))
    source, target = Vocabulary(tokenizer), Vocabulary(target_tokenizer)
    matrices = read_source_matrices(model, len(source))
    new_model, result, _ = apply_method(model, Inputs(source, target, matrices.embeddings), matrices,
                                     make_config("overlap", fallback="subword"), copy=True)
    assert new_model.get_input_embeddings().weight.shape[0] == len(target)
    assert is_tied(new_model) == is_tied(model)
    mapping = result.mapping
    rows = mapping.rows_of(Kind.SUBWORD)[:5]
    for row in rows:
        picks, weights = mapping.row(row)
        expected = sum(w * matrices.embeddings[p] for p, w in zip(picks, weights))
        assert torch.allclose(new_model.get_input_embeddings().weight[row], expected, atol=1e-5)
        if not is_tied(model):
            old = model.get_output_embeddings().weight
            expected_out = sum(w * old[p] for p, w in zip(picks, weights))
            assert torch.allclose(new_model.get_output_embeddings().weight[row], expected_out, atol=1e-5)
        if output_bias(model) is not None:
            old_bias = output_bias(model)
            expected_bias = sum(w * old_bias[p] for p, w in zip(picks, weights))
            assert torch.allclose(output_bias(new_model)[row], expected_bias, atol=1e-5)
    assert len(rows) > 0


def test_frequency_token_vectors_are_frequency_weighted_means_of_the_words_containing_the_token(monkeypatch):
    """WECHSEL-TFR by hand: a token's vector is the frequency-weighted mean of the vectors of the words whose
    tokenisation (as a word start or inside text) contains it; the result does not depend on the chunking."""
    import langswap.methods.wechsel as wechsel

    tokenizer = byte_level_tokenizer(english_lines(300))
    vocabulary = Vocabulary(tokenizer)
    words = sorted({word for line in english_lines(50, seed=3) for word in line.split()})[:60]
    rng = np.random.default_rng(0)
    vectors = WordVectors(words, rng.standard_normal((len(words), 8)).astype(np.float32),
                          rng.uniform(1, 10, len(words)))
    result = wechsel.frequency_token_vectors(vocabulary, vectors, max_words=len(words))
    sums, totals = np.zeros((len(vocabulary), 8)), np.zeros(len(vocabulary))
    for index, word in enumerate(words):
        contained = set(tokenizer(word, add_special_tokens=False)["input_ids"])
        contained |= set(tokenizer(" " + word, add_special_tokens=False)["input_ids"])
        for token in contained:
            sums[token] += vectors.freqs[index] * vectors.word_matrix()[index]
            totals[token] += vectors.freqs[index]
    expected = sums / np.maximum(totals, 1e-300)[:, None]
    np.testing.assert_allclose(result, expected, atol=1e-5)
    assert (totals > 0).sum() > 20
    monkeypatch.setattr(wechsel, "PAIR_CHUNK_VALUES", 8 * 3)  # three pairs at a time
    np.testing.assert_array_equal(wechsel.frequency_token_vectors(vocabulary, vectors, len(words)), result)
