"""TEMA (`langswap.enrich`): the projection by hand, the linear maps on a rotated toy, whole runs on tiny models
(an English GPT-2 as L1, a ciphered-language Llama with an untied head as L2, both 32 wide), and bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import byte_level_tokenizer, random_rotation, save_model, tiny_model
from langswap.enrich import (EnrichConfig, TranslationPairs, enrich, enriched_rows, fit_linear_map,
                             projection_offsets, translation_pairs, whole_word_tokens)
from langswap.errors import (ConfigError, MissingResourceError, NumericalError, OutputExistsError,
                             ResourceFormatError, VocabularyError)


@pytest.fixture(scope="module")
def l2_folder(tmp_path_factory, ciphered) -> Path:
    """A 'poorly trained' ciphered-language model: tiny Llama (untied head), byte-level tokenizer of 300 tokens, so
    many cipher words are no whole token of it."""
    tokenizer = byte_level_tokenizer(ciphered, vocab_size=300)
    return save_model(tiny_model("llama", len(tokenizer), seed=1), tokenizer, tmp_path_factory.mktemp("l2"))


def make_config(tmp_path, gpt2_folder, l2_folder, corpus_dir, **options) -> EnrichConfig:
    return EnrichConfig(l1=str(gpt2_folder), l2=str(l2_folder), dictionary=str(corpus_dir / "en-xx.tsv"),
                        output=str(tmp_path / "out"), max_new_words=0, **options)


def weights(folder):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder)
    return model, {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def changed_rows(before: torch.Tensor, after: torch.Tensor) -> list[int]:
    return (before != after).any(dim=1).nonzero().flatten().tolist()


# -- known answers ----------------------------------------------------------------------------------------------------

def test_projection_matches_a_hand_computation():
    # w = (1, 0, 0); anchor 1: v_x = (1, 2, 2), v_y = (1, 1, 0): a = (0, 2, 2), |a|^2 = 8, v_y . a = 2,
    # proj = 2/8 (0, 2, 2) = (0, 0.5, 0.5). Anchor 2: v_x = (3, 0, 0), v_y = (1, 0, 5): a = (2, 0, 0), |a|^2 = 4,
    # v_y . a = 2, proj = 2/4 (2, 0, 0) = (1, 0, 0). Two anchors: the mean, (0.5, 0.25, 0.25).
    w = torch.tensor([[1.0, 0.0, 0.0]])
    one = projection_offsets(w, torch.tensor([[1.0, 2.0, 2.0]]), torch.tensor([[1.0, 1.0, 0.0]]))
    assert torch.allclose(one, torch.tensor([[0.0, 0.5, 0.5]]))
    both = projection_offsets(w, torch.tensor([[1.0, 2.0, 2.0], [3.0, 0.0, 0.0]]),
                              torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 5.0]]))
    assert torch.allclose(both, torch.tensor([[0.5, 0.25, 0.25]]))

    # As rows of models: L1 = [w, v_x, w2], L2 = [u, v_y]; u = (0, 1, 0) is the translation of w and of
    # w2 = (1, 2, 0), the anchor is token 1 of both. For w: (0, 0.5, 0.5) as above. For w2: a = (0, 0, 2), |a|^2 = 4,
    # v_y . a = 0: no change. u' = u + the mean of the two changes = (0, 1, 0) + (0, 0.25, 0.25).
    l1 = torch.tensor([[1.0, 0.0, 0.0], [1.0, 2.0, 2.0], [1.0, 2.0, 0.0]])
    l2 = torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    pairs = TranslationPairs(np.array([0, 2]), np.array([0, 0]), np.array([True, True]))
    rows, new = enriched_rows(l1, l2, pairs, "projection", 0.5, np.array([1]), np.array([1]))
    assert rows.tolist() == [0]
    assert torch.allclose(new, torch.tensor([[0.0, 1.25, 0.25]]))

    # the anchor itself as a translation: a = 0 has no direction, so no change
    assert torch.equal(projection_offsets(torch.tensor([[1.0, 2.0, 2.0]]), torch.tensor([[1.0, 2.0, 2.0]]),
                                          torch.tensor([[1.0, 1.0, 0.0]])), torch.zeros(1, 3))


def test_linear_maps_recover_a_rotation_on_a_ciphered_toy(english, ciphered, corpus_dir):
    """L2's rows of the dictionary words are L1's rows of their English twins, rotated; the rows of a quarter of the
    pairs (standing for added words: not fitted on) are noise. Procrustes and least squares recover the rotation,
    blend 1 gives every translated row its rotated twin, blend 0.5 the midpoint."""
    from langswap.resources.dictionary import Dictionary
    from langswap.tokens import Vocabulary

    l1_vocabulary = Vocabulary(byte_level_tokenizer(english, vocab_size=400))
    l2_vocabulary = Vocabulary(byte_level_tokenizer(ciphered, vocab_size=400))
    dictionary = Dictionary.load(corpus_dir / "en-xx.tsv")
    pairs = translation_pairs(dictionary, whole_word_tokens(l1_vocabulary), whole_word_tokens(l2_vocabulary))
    assert len(pairs) >= 40 and len(set(pairs.l2_ids.tolist())) == len(pairs)  # one translation per cipher token
    dim = 8
    generator = torch.Generator().manual_seed(0)
    l1 = torch.randn(len(l1_vocabulary), dim, generator=generator)
    l2 = torch.randn(len(l2_vocabulary), dim, generator=generator)
    rotation = torch.from_numpy(random_rotation(dim, 3)).float()
    rotated = l1[torch.from_numpy(pairs.l1_ids)] @ rotation
    fitted = np.arange(len(pairs)) % 4 != 0
    pairs.fit = fitted
    l2[torch.from_numpy(pairs.l2_ids[fitted])] = rotated[torch.from_numpy(fitted)]

    for method in ("procrustes", "lstsq"):
        fit = torch.from_numpy(fitted)
        mapping = fit_linear_map(l1[torch.from_numpy(pairs.l1_ids)][fit], l2[torch.from_numpy(pairs.l2_ids)][fit],
                                 method)
        assert torch.allclose(mapping, rotation, atol=1e-4)
        rows, new = enriched_rows(l1, l2, pairs, method, 1.0, np.array([0]), np.array([0]))
        order = np.argsort(pairs.l2_ids)
        assert rows.tolist() == pairs.l2_ids[order].tolist()
        assert torch.allclose(new, rotated[torch.from_numpy(order)], atol=1e-4)
        _, half = enriched_rows(l1, l2, pairs, method, 0.5, np.array([0]), np.array([0]))
        old = l2[torch.from_numpy(rows)]
        assert torch.allclose(half, (old + rotated[torch.from_numpy(order)]) / 2, atol=1e-4)
        assert not torch.allclose(half[~torch.from_numpy(fitted[order])], old[~torch.from_numpy(fitted[order])])


def test_procrustes_fits_the_scale_of_the_rows():
    source = torch.randn(50, 6, generator=torch.Generator().manual_seed(1))
    rotation = torch.from_numpy(random_rotation(6, 2)).float()
    assert torch.allclose(fit_linear_map(source, 3.0 * source @ rotation, "procrustes"), 3.0 * rotation, atol=1e-4)


# -- whole runs -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,head", [("projection", "same"), ("procrustes", "keep")])
def test_enrich_changes_only_the_dictionary_rows(tmp_path, gpt2_folder, l2_folder, corpus_dir, method, head):
    config = make_config(tmp_path, gpt2_folder, l2_folder, corpus_dir, method=method, output_head=head,
                         anchors=["1", "."])
    report = enrich(config)
    _, before = weights(l2_folder)
    model, after = weights(config.output)
    assert model.get_output_embeddings() is not model.get_input_embeddings()  # still untied
    record = json.loads((Path(config.output) / "langswap.json").read_text(encoding="utf-8"))
    rows = record["enrich"]["changed_rows"]
    assert rows and report.counts["rows_changed"] == len(rows)
    assert record["enrich"]["anchors"] == (["1", "."] if method == "projection" else [])  # linear maps use none
    assert set(changed_rows(before["model.embed_tokens.weight"], after["model.embed_tokens.weight"])) == set(rows)
    head_changed = changed_rows(before["lm_head.weight"], after["lm_head.weight"])
    assert set(head_changed) == (set(rows) if head == "same" else set())
    assert all(torch.equal(before[name], after[name]) for name in before
               if name not in ("model.embed_tokens.weight", "lm_head.weight"))
    # every changed row is a cipher word's token whose English twin is an L1 token
    from langswap.models import load_tokenizer
    tokenizer = load_tokenizer(config.output)
    words = {tokenizer.convert_ids_to_tokens(row).lstrip("Ġ") for row in rows}
    cipher_words = {line.split("\t")[1].strip().lower()
                    for line in (corpus_dir / "en-xx.tsv").read_text(encoding="utf-8").splitlines()}
    assert {word.lower() for word in words} <= cipher_words
    provenance = (Path(config.output) / "provenance.tsv").read_text(encoding="utf-8").splitlines()
    assert provenance[0] == "id\ttoken\ttranslations\tchange_norm\trow" and len(provenance) == len(rows) + 1
    norms = [float(line.split("\t")[3]) for line in provenance[1:]]
    assert max(norms) == pytest.approx(record["change_norm"]["max"], abs=1e-5)
    assert np.mean(norms) == pytest.approx(record["change_norm"]["mean"], abs=1e-5)
    card = (Path(config.output) / "README.md").read_text(encoding="utf-8")
    assert "TEMA" in card and f"`{method}`" in card and gpt2_folder.name in card


def test_added_words_get_subword_mean_rows_without_text(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    """Without target text an added word's row is the mean of L2's rows of its old spelling; procrustes with blend 0
    keeps every row where it is, so that rule is what the output holds."""
    from langswap.models import load_tokenizer

    config = make_config(tmp_path, gpt2_folder, l2_folder, corpus_dir, method="procrustes", blend=0.0)
    config = EnrichConfig(**{**config.__dict__, "max_new_words": 4})
    report = enrich(config)
    old_tokenizer, new_tokenizer = load_tokenizer(l2_folder), load_tokenizer(config.output)
    assert len(report.added_words) == 4 and len(new_tokenizer) == len(old_tokenizer) + 4
    _, before = weights(l2_folder)
    _, after = weights(config.output)
    for offset, word in enumerate(report.added_words):
        new_id = len(old_tokenizer) + offset
        assert new_tokenizer(" " + word, add_special_tokens=False)["input_ids"] == [new_id]
        pieces = old_tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        assert len(pieces) > 1
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            assert torch.allclose(after[name][new_id], before[name][pieces].mean(dim=0), atol=1e-6)
    assert torch.equal(after["model.embed_tokens.weight"][:len(old_tokenizer)], before["model.embed_tokens.weight"])


def test_added_words_are_fine_tuned_on_the_target_text(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    from langswap.models import load_tokenizer

    base = make_config(tmp_path, gpt2_folder, l2_folder, corpus_dir, method="procrustes", blend=0.0)
    config = EnrichConfig(**{**base.__dict__, "max_new_words": 3, "target_text": str(corpus_dir / "xx.txt"),
                             "train_steps": 3, "batch_size": 2, "sequence_length": 32, "learning_rate": 0.05})
    report = enrich(config)
    assert report.training.steps == 3 and report.training.sentences > 0
    assert np.isfinite(report.training.train_loss)
    old_tokenizer = load_tokenizer(l2_folder)
    text = (corpus_dir / "xx.txt").read_text(encoding="utf-8")
    assert all(f" {word}" in text for word in report.added_words)  # words of the text, in its spelling
    _, before = weights(l2_folder)
    _, after = weights(config.output)
    matrix = "model.embed_tokens.weight"
    assert torch.equal(after[matrix][:len(old_tokenizer)], before[matrix])  # only the new rows came from training
    for offset, word in enumerate(report.added_words):
        pieces = old_tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        assert not torch.allclose(after[matrix][len(old_tokenizer) + offset], before[matrix][pieces].mean(dim=0))
    provenance = (Path(config.output) / "provenance.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert sum(line.endswith("\tadded") for line in provenance) == 3
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the training folder is gone


# -- bad input: a clear error, and nothing in the output folder -------------------------------------------------------

def refused(config: EnrichConfig, error: type, *phrases: str) -> None:
    with pytest.raises(error) as caught:
        enrich(config)
    message = str(caught.value)
    for phrase in phrases:
        assert phrase in message, message
    parent = Path(config.output).parent  # no output, no partial folder or lock beside it
    assert not parent.exists() or list(parent.iterdir()) == []


@pytest.mark.parametrize("content,phrase", [("the\tzit\nthe zit and\nof\tgy\n", "not two non-empty fields"),
                                            ("the\t\nof\tgy\n", "not two non-empty fields"),
                                            ("house\nhome\n", "no source<TAB>target lines")])
def test_dictionary_lines_of_another_shape(tmp_path, gpt2_folder, l2_folder, corpus_dir, content, phrase):
    (tmp_path / "dictionary").mkdir()
    path = tmp_path / "dictionary" / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    config = EnrichConfig(**{**make_config(tmp_path / "run", gpt2_folder, l2_folder, corpus_dir).__dict__,
                             "dictionary": str(path)})
    refused(config, ResourceFormatError, phrase, "source<TAB>target")


def test_dictionary_of_words_neither_model_has(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    path = tmp_path / "unknown.tsv"
    path.write_text("qzqzqz\tkxkxkx\nvbvbvb\tjwjwjw\n", encoding="utf-8")
    config = EnrichConfig(**{**make_config(tmp_path / "run", gpt2_folder, l2_folder, corpus_dir).__dict__,
                             "dictionary": str(path)})
    (tmp_path / "run").mkdir()
    refused(config, VocabularyError, "none of the 2 pairs", "Check that the dictionary is for these two languages")


def test_dictionary_in_the_wrong_direction(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    path = tmp_path / "reversed.tsv"
    lines = (corpus_dir / "en-xx.tsv").read_text(encoding="utf-8").splitlines()
    path.write_text("".join(f"{target}\t{source}\n" for source, target in (line.split("\t") for line in lines)),
                    encoding="utf-8")
    config = EnrichConfig(**{**make_config(tmp_path / "run", gpt2_folder, l2_folder, corpus_dir).__dict__,
                             "dictionary": str(path)})
    (tmp_path / "run").mkdir()
    refused(config, VocabularyError, "looks reversed", "swap the columns")


def test_anchors_missing_from_one_model(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    config = make_config(tmp_path, gpt2_folder, l2_folder, corpus_dir, anchors=["1", "the"])
    refused(config, VocabularyError, "'the' (not in L2)", "both models")


def test_models_of_different_hidden_size(tmp_path, gpt2_folder, corpus_dir, ciphered):
    import transformers

    tokenizer = byte_level_tokenizer(ciphered, vocab_size=300)
    wide = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64))
    folder = save_model(wide, tokenizer, tmp_path / "wide")
    config = make_config(tmp_path / "run", gpt2_folder, folder, corpus_dir)
    (tmp_path / "run").mkdir()
    refused(config, ConfigError, "hidden size 32", "hidden size 48")


@pytest.mark.parametrize("which", ["l1", "l2"])
def test_a_model_with_non_finite_weights(tmp_path, gpt2_folder, l2_folder, corpus_dir, which):
    """Each model is loaded and checked as the transfer checks its source (`transfer.steps.load_checked_model`); the
    error names which model, the tensor, and what to do."""
    from langswap.models import load_model, load_tokenizer

    broken = load_model(gpt2_folder if which == "l1" else l2_folder)
    with torch.no_grad():
        next(p for name, p in broken.named_parameters() if "embed" not in name and p.dim() == 2)[0, 0] = float("nan")
    folder = save_model(broken, load_tokenizer(gpt2_folder if which == "l1" else l2_folder), tmp_path / "broken")
    config = make_config(tmp_path / "run", folder if which == "l1" else gpt2_folder,
                         folder if which == "l2" else l2_folder, corpus_dir)
    (tmp_path / "run").mkdir()
    refused(config, NumericalError, f"{which.upper()} '{folder}' holds NaN or infinite weights",
            "Give an intact checkpoint.")


def test_l2_without_its_tokenizer_files(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in l2_folder.iterdir():
        if path.name in ("config.json", "generation_config.json", "model.safetensors"):
            shutil.copy(path, bare / path.name)
    config = make_config(tmp_path / "run", gpt2_folder, bare, corpus_dir)
    (tmp_path / "run").mkdir()
    refused(config, MissingResourceError, "no tokenizer files", "Save the tokenizer into it")


def test_an_existing_output_is_kept(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    config = make_config(tmp_path, gpt2_folder, l2_folder, corpus_dir)
    Path(config.output).mkdir()
    with pytest.raises(OutputExistsError, match="--overwrite"):
        enrich(config)
    assert list(Path(config.output).iterdir()) == []


def test_options_are_checked_before_anything_loads(tmp_path, gpt2_folder, l2_folder, corpus_dir):
    from langswap.config import from_dict

    for options, phrase in (({"method": "cca"}, "choose one of: projection, lstsq, procrustes"),
                            ({"blend": 1.5}, "between 0"), ({"train_steps": 0}, "at least 1")):
        config = EnrichConfig(**{**make_config(tmp_path, gpt2_folder, l2_folder, corpus_dir).__dict__, **options})
        with pytest.raises(ConfigError, match=phrase):
            config.validate()
    parsed = from_dict(EnrichConfig, {"l1": "a", "l2": "b", "anchors": 1})
    assert parsed.anchors == ["1"]
    assert from_dict(EnrichConfig, {"anchors": [1, "."]}).anchors == ["1", "."]
