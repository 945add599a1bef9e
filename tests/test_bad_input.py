"""Bad input: each case raises a `LangswapError` subclass whose message names the fix, and leaves nothing behind.

"Nothing behind" means: the output folder (or file) is absent, or unchanged when it existed before, and its parent
holds no `.partial` / `.old-` leftovers of an interrupted write. Two cases are deliberately *not* errors: vectors of
different dimension (PCA brings the larger side down) and an embedding matrix padded beyond its tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import WORDS, byte_level_tokenizer, cipher_word, save_model, tiny_model, wordpiece_tokenizer, write_vec
from langswap.config import from_dict
from langswap.errors import ConfigError, LangswapError, OutputExistsError, ResourceFormatError, VocabularyError
from langswap.transfer import TransferConfig, transfer
from langswap.resources.alignment import align
from langswap.resources.dictionary import Dictionary
from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
from langswap.resources.vectors import WordVectors
from langswap.resources.tokenizer import train_tokenizer

# -- helpers ---------------------------------------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".partial" in p.name or ".old-" in p.name)


def assert_nothing_written(output: Path, before: dict[str, bytes] | None = None) -> None:
    if before is None:
        assert not output.exists(), f"{output} was written although the run failed"
    else:
        assert snapshot(output) == before, f"{output} was changed although the run failed"
    assert leftovers(output.parent) == []


def assert_message(error: pytest.ExceptionInfo, *words: str) -> None:
    assert isinstance(error.value, LangswapError)
    message = str(error.value)
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in message: {message}"


def config(source_model, target_tokenizer, output, method="overlap", **extra) -> TransferConfig:
    data = {"source_model": str(source_model), "target_tokenizer": str(target_tokenizer), "output": str(output),
            "method": method, **extra}
    return from_dict(TransferConfig, data)


def wechsel_resources(source_vectors, target_vectors, dictionary) -> dict:
    return {"resources": {"source_vectors": str(source_vectors), "target_vectors": str(target_vectors),
                          "dictionary": str(dictionary)}}


def read_record(folder: Path) -> dict:
    return json.loads((folder / "langswap.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def bad_texts(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bad-texts")
    empty = folder / "empty.txt"
    empty.write_bytes(b"")
    blank = folder / "blank.txt"
    blank.write_bytes(b"\n   \n\t\n")
    latin1 = folder / "latin1.txt"
    latin1.write_bytes("Zit qdfyxqyt ol tqlc.\nCqyu ugk dq caf\u00e9 tqlc.\n".encode("latin-1"))
    return {"empty": empty, "blank": blank, "latin1": latin1}


@pytest.fixture(scope="module")
def wordpiece_folder(tmp_path_factory, ciphered) -> Path:
    folder = tmp_path_factory.mktemp("xx-wordpiece")
    wordpiece_tokenizer(ciphered, vocab_size=300).save_pretrained(folder)
    return folder


# -- dictionaries and word vectors -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reversed_dictionary(tmp_path_factory, corpus_dir) -> Path:
    """The conftest dictionary written target<TAB>source: no pair has both words in the vectors."""
    path = tmp_path_factory.mktemp("dict") / "xx-en.tsv"
    path.write_text("".join(f"{cipher_word(w)}\t{w}\n" for w in WORDS), encoding="utf-8")
    return path


def test_dictionary_with_no_covered_pair_align(cipher_vectors, reversed_dictionary):
    source, target = WordVectors.load(cipher_vectors["source"]), WordVectors.load(cipher_vectors["target"])
    with pytest.raises(VocabularyError) as error:
        align(source, target, Dictionary.load(reversed_dictionary))
    assert_message(error, "none of the", "xx-en.tsv", "source<TAB>target", "reversed")


def test_dictionary_with_no_covered_pair_transfer(gpt2_folder, target_tokenizer_folder, cipher_vectors,
                                                  reversed_dictionary, tmp_path):
    output = tmp_path / "out"
    settings = config(gpt2_folder, target_tokenizer_folder, output, "wechsel",
                      **wechsel_resources(cipher_vectors["source"], cipher_vectors["target"], reversed_dictionary))
    with pytest.raises(VocabularyError) as error:
        transfer(settings)
    assert_message(error, "none of the", "source<TAB>target", "reversed")
    assert_nothing_written(output)


def test_dictionary_file_without_pairs(tmp_path):
    path = tmp_path / "dictionary.txt"
    path.write_text("one two three\nfour five six\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError) as error:
        Dictionary.load(path)
    assert_message(error, "no source<TAB>target lines", "one pair per line")


@pytest.mark.parametrize("line, shown", [("house", "line 2: 'house'"), ("house\t", "line 2: 'house'"),
                                         ("\thaus", "line 2: 'haus'"), ("a\tb\tc", "line 2: 'a\\tb\\tc'")])
def test_dictionary_lines_with_one_column_or_empty_fields_are_named(tmp_path, line, shown):
    path = tmp_path / "en-de.tsv"
    path.write_text(f"dog\tHund\n{line}\ncat\tKatze\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError) as error:
        Dictionary.load(path)
    assert_message(error, "1 line(s) that are not two non-empty fields", shown, "source<TAB>target")


def test_a_dictionary_in_neither_vocabulary_or_the_wrong_way_round_is_named():
    from langswap.resources.dictionary import check_direction

    english = {"dog", "cat", "house", "tree", "water"}
    german = {"hund", "katze", "haus", "baum", "wasser"}
    dictionary = Dictionary([("dog", "Hund"), ("cat", "Katze"), ("house", "Haus"), ("tree", "Baum")], "en-de.tsv")
    counts = check_direction(dictionary, english, german)
    assert counts["source_side_in_source"] == 4 and counts["target_side_in_target"] == 4  # case variants tried
    reversed_ = Dictionary([(target, source) for source, target in dictionary.pairs], "de-en.tsv")
    with pytest.raises(VocabularyError) as error:
        check_direction(reversed_, english, german)
    assert_message(error, "looks reversed", "4 of its 4 source-side words", "swap the columns")
    with pytest.raises(VocabularyError) as error:
        check_direction(Dictionary([("chien", "perro")], "fr-es.tsv"), english, german)
    assert_message(error, "none of the 1 pairs", "these two languages")
    # a dictionary whose few shared words make it look partly reversed is still taken
    mixed = Dictionary(dictionary.pairs + [("Hund", "dog")], "en-de.tsv")
    assert check_direction(mixed, english, german)["source_side_in_target"] == 1


@pytest.fixture(scope="module")
def mixed_dimension_vectors(tmp_path_factory, cipher_vectors) -> dict[str, Path]:
    """16-dimensional English and ciphered vectors, and 12-dimensional cuts of each."""
    folder = tmp_path_factory.mktemp("dims")
    out = {}
    for side in ("source", "target"):
        vectors = WordVectors.load(cipher_vectors[side])
        matrix = vectors.word_matrix()
        out[side + "16"] = cipher_vectors[side]
        out[side + "12"] = write_vec(folder / f"{side}12.vec", vectors.words, matrix[:, :12])
    return out


@pytest.mark.parametrize("source_dim, target_dim", [(16, 12), (12, 16)])
def test_vectors_of_different_dimension_are_reduced_by_pca(mixed_dimension_vectors, corpus_dir, source_dim,
                                                           target_dim):
    source = WordVectors.load(mixed_dimension_vectors[f"source{source_dim}"])
    target = WordVectors.load(mixed_dimension_vectors[f"target{target_dim}"])
    alignment = align(source, target, Dictionary.load(corpus_dir / "en-xx.tsv"))
    larger = "source" if source_dim > target_dim else "target"
    assert alignment.report.pca == f"{larger} vectors reduced from 16 to 12 dimensions by PCA"
    assert alignment.report.dimension == 12
    assert alignment.source.dim == alignment.target.dim == 12
    assert alignment.report.pairs_used > 0


def test_vectors_of_different_dimension_transfer(gpt2_folder, target_tokenizer_folder, mixed_dimension_vectors,
                                                 corpus_dir, tmp_path):
    output = tmp_path / "out"
    settings = config(gpt2_folder, target_tokenizer_folder, output, "wechsel",
                      **wechsel_resources(mixed_dimension_vectors["source16"], mixed_dimension_vectors["target12"],
                                          corpus_dir / "en-xx.tsv"))
    report = transfer(settings)
    assert "reduced from 16 to 12 dimensions by PCA" in report.alignment.pca
    assert read_record(output)["alignment"]["pca"] == report.alignment.pca
    assert leftovers(tmp_path) == []


def test_dictionary_too_small_for_the_dimension(gpt2_folder, target_tokenizer_folder, cipher_vectors, tmp_path):
    small = tmp_path / "small.tsv"
    small.write_text("".join(f"{w}\t{cipher_word(w)}\n" for w in ("house", "water", "river")), encoding="utf-8")
    source, target = WordVectors.load(cipher_vectors["source"]), WordVectors.load(cipher_vectors["target"])
    with pytest.raises(VocabularyError) as error:
        align(source, target, Dictionary.load(small))
    assert_message(error, "at least 16", "larger dictionary", "lower dimension")

    output = tmp_path / "out"
    settings = config(gpt2_folder, target_tokenizer_folder, output, "wechsel",
                      **wechsel_resources(cipher_vectors["source"], cipher_vectors["target"], small))
    with pytest.raises(VocabularyError):
        transfer(settings)
    assert_nothing_written(output)


# -- special tokens ----------------------------------------------------------------------------------------------------


def test_target_special_role_missing_in_source(gpt2_folder, wordpiece_folder, tmp_path):
    output = tmp_path / "out"
    with pytest.raises(VocabularyError) as error:
        transfer(config(gpt2_folder, wordpiece_folder, output, "overlap"))
    assert_message(error, "[CLS]", "cls", "[MASK]", "source roles: bos, eos, unk", "method.unmatched_special=fallback")
    assert_nothing_written(output)


def test_target_special_role_missing_in_source_with_fallback(gpt2_folder, wordpiece_folder, tmp_path):
    output = tmp_path / "out"
    transfer(config(gpt2_folder, wordpiece_folder, output,
                    {"name": "overlap", "unmatched_special": "fallback", "fallback": "mean"}))
    rows = [line.split("\t") for line in (output / "provenance.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    kinds = {token: kind for _, token, kind, _ in rows}
    assert kinds["'[UNK]'"] == "special"  # the role the source has is copied
    for token in ("[CLS]", "[SEP]", "[MASK]", "[PAD]"):
        assert kinds[f"'{token}'"] == "mean"  # the others get the fallback
    assert read_record(output)["config"]["method"]["unmatched_special"] == "fallback"


# -- embedding matrix vs tokenizer -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resized_models(tmp_path_factory, english) -> dict:
    """GPT-2 folders whose embedding matrix has 10 rows fewer, and 24 (huge) rows more, than the tokenizer."""
    tokenizer = byte_level_tokenizer(english)
    out = {"tokens": len(tokenizer)}
    short = tiny_model("gpt2", len(tokenizer) - 10)
    out["short"] = save_model(short, tokenizer, tmp_path_factory.mktemp("gpt2-short"))
    padded = tiny_model("gpt2", len(tokenizer) + 24)
    with torch.no_grad():
        padded.get_input_embeddings().weight[len(tokenizer):] = 1000.0
    out["padded"] = save_model(padded, tokenizer, tmp_path_factory.mktemp("gpt2-padded"))
    return out


def test_embedding_matrix_smaller_than_tokenizer(resized_models, target_tokenizer_folder, tmp_path):
    output = tmp_path / "out"
    with pytest.raises(VocabularyError) as error:
        transfer(config(resized_models["short"], target_tokenizer_folder, output, "overlap"))
    tokens = resized_models["tokens"]
    assert_message(error, f"{tokens - 10:,} rows", f"{tokens:,} tokens", "does not belong to this model",
                   "tokenizer saved with the model")
    assert_nothing_written(output)


@pytest.mark.parametrize("fallback", ["random", "mean"])
def test_embedding_matrix_padded_beyond_tokenizer(resized_models, target_tokenizer_folder, tmp_path, fallback):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    output = tmp_path / "out"
    transfer(config(resized_models["padded"], target_tokenizer_folder, output,
                    {"name": "overlap", "fallback": fallback}))
    record = read_record(output)
    assert record["source_padded_rows"] == 24
    model = AutoModelForCausalLM.from_pretrained(output)
    weight = model.get_input_embeddings().weight
    assert weight.shape[0] == len(AutoTokenizer.from_pretrained(output))
    assert float(weight.detach().abs().max()) < 100  # the padded rows (all 1000) went into no row, no mean and no std
    for line in (output / "provenance.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        sources = line.split("\t")[3]
        for source in filter(None, sources.split(" ")):
            assert int(source.split(":")[0]) < resized_models["tokens"]


# -- text files --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["empty", "blank"])
def test_empty_tokenizer_training_text(gpt2_folder, bad_texts, kind):
    from transformers import AutoTokenizer

    with pytest.raises(ResourceFormatError) as error:
        train_tokenizer(AutoTokenizer.from_pretrained(gpt2_folder), bad_texts[kind], 300)
    assert_message(error, "tokenizer training text", "has no text", "UTF-8", "one document or paragraph per line")


def test_non_utf8_tokenizer_training_text_in_transfer(gpt2_folder, bad_texts, tmp_path):
    output = tmp_path / "out"
    settings = from_dict(TransferConfig, {"source_model": str(gpt2_folder), "target_text": str(bad_texts["latin1"]),
                                          "output": str(output), "method": "random"})
    with pytest.raises(ResourceFormatError) as error:
        transfer(settings)
    assert_message(error, "not UTF-8", "line 2", "byte 0xe9", "iconv")
    assert_nothing_written(output)


@pytest.mark.parametrize("kind, words", [("empty", ("has no words",)), ("blank", ("has no words",)),
                                         ("latin1", ("not UTF-8", "line 2", "0xe9", "iconv"))])
def test_bad_fasttext_training_text(bad_texts, tmp_path, kind, words):
    output = tmp_path / "vectors.bin"
    with pytest.raises(ResourceFormatError) as error:
        train_fasttext(bad_texts[kind], output, FastTextConfig(dim=8, epoch=1, minCount=1, bucket=100, thread=1))
    assert_message(error, "training text", *words)
    assert_nothing_written(output)


@pytest.mark.parametrize("kind, words", [("empty", ("evaluation text", "has no text")),
                                         ("latin1", ("evaluation text", "not UTF-8", "line 2", "0xe9"))])
def test_bad_evaluation_text(gpt2_folder, target_tokenizer_folder, bad_texts, tmp_path, kind, words):
    output = tmp_path / "out"
    with pytest.raises(ResourceFormatError) as error:
        transfer(config(gpt2_folder, target_tokenizer_folder, output, "overlap", eval_text=str(bad_texts[kind])))
    assert_message(error, *words)
    assert_nothing_written(output)


# -- an existing output folder -----------------------------------------------------------------------------------------


def test_existing_output_folder(gpt2_folder, target_tokenizer_folder, tmp_path):
    output = tmp_path / "out"
    output.mkdir()
    (output / "notes.txt").write_text("keep me", encoding="utf-8")
    (output / "sub").mkdir()
    (output / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = snapshot(output)
    with pytest.raises(OutputExistsError) as error:
        transfer(config(gpt2_folder, target_tokenizer_folder, output, "overlap"))
    assert_message(error, "already exists", "--overwrite", "another --output")
    assert_nothing_written(output, before)

    transfer(config(gpt2_folder, target_tokenizer_folder, output, "overlap", overwrite=True))
    assert not (output / "notes.txt").exists() and not (output / "sub").exists()
    assert (output / "langswap.json").is_file() and (output / "provenance.tsv").is_file()
    assert leftovers(tmp_path) == []


# -- .vec files --------------------------------------------------------------------------------------------------------


def test_vec_file_without_header(cipher_vectors, tmp_path):
    lines = Path(cipher_vectors["source"]).read_text(encoding="utf-8").splitlines()
    path = tmp_path / "headless.vec"
    path.write_text("\n".join(lines[1:]) + "\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, "headless.vec", "'<word count> <dimension>' header", "200000 300")


def test_vec_file_line_with_wrong_number_of_values(cipher_vectors, tmp_path):
    lines = Path(cipher_vectors["source"]).read_text(encoding="utf-8").splitlines()
    lines[2] = " ".join(lines[2].split(" ")[:-1])  # line 3 loses its last value
    path = tmp_path / "short-line.vec"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, "line 3", "15 numbers", "dimension 16", "fix the header or the line")


def test_bad_vec_file_in_transfer(gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, tmp_path):
    path = tmp_path / "broken.vec"
    path.write_text("the 0.1 0.2\n", encoding="utf-8")
    output = tmp_path / "out"
    settings = config(gpt2_folder, target_tokenizer_folder, output, "wechsel",
                      **wechsel_resources(cipher_vectors["source"], path, corpus_dir / "en-xx.tsv"))
    with pytest.raises(ResourceFormatError) as error:
        transfer(settings)
    assert_message(error, "broken.vec", "header")
    assert_nothing_written(output)


# -- config errors -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("data, words", [
    ({"sorce_model": "x"}, ("unknown key 'sorce_model'", "Did you mean 'source_model'?", "Valid keys here:",
                            "target_tokenizer", "eval_lines")),
    ({"align": {"heldout_word": 5}}, ("unknown key 'align.heldout_word'", "Did you mean 'heldout_words'?",
                                      "csls_neighbors")),
    ({"resources": {"dictionnary": "d.tsv"}}, ("'resources.dictionnary'", "Did you mean 'dictionary'?")),
    ({"method": {"name": "wechsel", "neighbours": 5}}, ("unknown key 'method.neighbours'",
                                                        "Did you mean 'neighbors'?", "temperature")),
    ({"zzz": 1}, ("unknown key 'zzz'", "Valid keys here:", "source_model")),
])
def test_unknown_config_key(data, words):
    with pytest.raises(ConfigError) as error:
        from_dict(TransferConfig, data)
    assert_message(error, *words)


@pytest.mark.parametrize("method", ["wechel", {"name": "fasttext"}])
def test_unknown_method_name(method):
    with pytest.raises(ConfigError) as error:
        from_dict(TransferConfig, {"method": method})
    from langswap.methods import method_names

    assert {"overlap", "random", "wechsel"} <= set(method_names())
    assert_message(error, "unknown method", "Available methods: " + ", ".join(method_names()), "langswap methods")


@pytest.mark.parametrize("data, words", [
    ({"eval_lines": "many"}, ("'eval_lines' must be an integer", "'many'")),
    ({"eval_lines": 2.5}, ("'eval_lines' must be an integer",)),
    ({"overwrite": "yes"}, ("'overwrite' must be true or false",)),
    ({"source_model": 3}, ("'source_model' must be a string",)),
    ({"vocab_size": "big"}, ("'vocab_size' must be an integer",)),
    ({"align": {"normalize": 1}}, ("'align.normalize' must be true or false",)),
    ({"method": {"name": "wechsel", "temperature": "hot"}}, ("'method.temperature' must be a number",)),
    ({"method": {"name": "wechsel", "subword_source": "chars"}}, ("'method.subword_source'", "ngrams, frequency")),
    ({"method": {"name": "random", "fallback": "zero"}}, ("'method.fallback'", "random, mean, subword")),
    ({"method": {"name": "wechsel", "neighbors": 0}}, ("method.neighbors", "at least 1")),
    ({"method": 3}, ("'method' must be a method name or a mapping",)),
    ({"align": 3}, ("'align' must be a mapping",)),
    ({"resources": "files.yaml"}, ("'resources' must be a mapping",)),
])
def test_bad_config_value(data, words):
    with pytest.raises(ConfigError) as error:
        from_dict(TransferConfig, data)
    assert_message(error, *words)


def test_method_options_without_a_name_use_the_default_method():
    """`--set method.neighbors=20` (the help's own example) must not need method.name: the default is combined."""
    from langswap.methods.base import DEFAULT_METHOD

    settings = from_dict(TransferConfig, {"method": {"neighbors": 20}})
    assert DEFAULT_METHOD == "combined"
    assert settings.method.method_name == DEFAULT_METHOD and settings.method.neighbors == 20


# -- models and tokenizers the transfer cannot serve -------------------------------------------------------------------


def test_a_model_without_its_language_model_head(english, tmp_path):
    """A bare BertModel would load as BertForMaskedLM with a random head, silently (transformers' notice is below
    langswap's log level)."""
    import transformers

    tokenizer = wordpiece_tokenizer(english)
    bare = transformers.BertModel(tiny_model("bert", len(tokenizer)).config)
    bare.save_pretrained(tmp_path / "bare")
    tokenizer.save_pretrained(tmp_path / "bare")
    wordpiece_tokenizer([cipher_word(word) for word in english[:300]]).save_pretrained(tmp_path / "target")
    output = tmp_path / "out"
    with pytest.raises(ResourceFormatError) as error:
        transfer(config(tmp_path / "bare", tmp_path / "target", output, "overlap"))
    assert_message(error, "BertModel", "cls.predictions", "would be random", "language-model head")
    assert_nothing_written(output)
    from langswap.models import load_model

    assert load_model(tmp_path / "bare", require_head=False).config.vocab_size == len(tokenizer)  # probes may


def test_a_roberta_target_whose_pad_token_has_another_id(english, tmp_path):
    """RoBERTa numbers positions from its pad id + 1: a target pad at id 4 would shift every position."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from conftest import roberta_tokenizer

    source_tokenizer = roberta_tokenizer(english)
    source = save_model(tiny_model("roberta", len(source_tokenizer)), source_tokenizer, tmp_path / "source")
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.train_from_iterator([cipher_word(word) for word in english[:300]], trainers.BpeTrainer(
        vocab_size=380, special_tokens=["<s>", "</s>", "<unk>", "<mask>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    backend.post_processor = processors.RobertaProcessing(("</s>", 1), ("<s>", 0))
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                            pad_token="<pad>", mask_token="<mask>", cls_token="<s>",
                            sep_token="</s>").save_pretrained(tmp_path / "target")
    output = tmp_path / "out"
    with pytest.raises(VocabularyError) as error:
        transfer(config(source, tmp_path / "target", output, "overlap"))
    assert_message(error, "pad token at id 4", "pad token at id 1", "every position would shift")
    assert_nothing_written(output)


def test_a_tokenizer_whose_ids_have_gaps(english):
    """len(tokenizer) counts tokens; with a hole in the ids the last ones would have no row."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from langswap.tokens import Vocabulary

    spec = json.loads(byte_level_tokenizer(english).backend_tokenizer.to_str())
    vocabulary = spec["model"]["vocab"]
    victim = next(token for token, token_id in vocabulary.items() if token_id == 300)
    del vocabulary[victim]
    spec["model"]["merges"] = [merge for merge in spec["model"]["merges"]
                               if victim not in (merge if isinstance(merge, list) else merge.split(" "))
                               and "".join(merge if isinstance(merge, list) else merge.split(" ")) != victim]
    holed = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), eos_token="<|endoftext|>")
    with pytest.raises(VocabularyError) as error:
        Vocabulary(holed)
    assert_message(error, f"{len(holed):,} tokens", "gaps", "0 .. N-1")


@pytest.mark.parametrize("device, words", [
    ("gpu", ("method_device 'gpu' is not a device", "cpu, cuda or cuda:N")),
    pytest.param("cuda", ("method_device is 'cuda'", "no CUDA GPU", "give cpu"),
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
])
def test_a_method_device_that_is_not_here_is_refused(gpt2_folder, target_tokenizer_folder, tmp_path, device, words):
    output = tmp_path / "out"
    with pytest.raises(ConfigError) as error:
        transfer(config(gpt2_folder, target_tokenizer_folder, output, method_device=device))
    assert_message(error, *words)
    assert_nothing_written(output)


def _custom_code_model(gpt2_folder: Path, folder: Path, model_type: str = "langswap_custom") -> Path:
    """gpt2_folder copied with a config.json whose auto_map names code in the folder; that code, if ever imported,
    writes a marker file."""
    import shutil

    shutil.copytree(gpt2_folder, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(model_type=model_type, architectures=["CustomForCausalLM"],
                  auto_map={"AutoConfig": "configuration_custom.CustomConfig",
                            "AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"})
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    for module in ("configuration_custom.py", "modeling_custom.py"):
        (folder / module).write_text(f"open({str(folder / 'EXECUTED')!r}, 'w').write('{module}')\n", encoding="utf-8")
    return folder


def test_a_model_that_needs_code_of_its_own_is_refused_and_its_code_never_runs(gpt2_folder, target_tokenizer_folder,
                                                                               tmp_path):
    from langswap.models import load_model

    source = _custom_code_model(gpt2_folder, tmp_path / "custom")
    output = tmp_path / "out"
    with pytest.raises(ConfigError) as error:
        transfer(config(source, target_tokenizer_folder, output))
    assert_message(error, str(source), "trust_remote_code", "never runs code", "architecture transformers ships")
    assert_nothing_written(output)
    with pytest.raises(ConfigError) as error:
        load_model(source)  # evaluate, train and the probes load through it
    assert_message(error, "trust_remote_code")
    assert not (source / "EXECUTED").exists()


def test_a_hub_model_that_needs_code_of_its_own_is_refused_with_the_reason(monkeypatch):
    """Where no folder can be read first, transformers' own refusal (trust_remote_code=False) is turned into ours."""
    import transformers

    from langswap.models import load_config

    def refuse(name, **options):
        assert options.get("trust_remote_code") is False  # never None: transformers would ask on a terminal
        raise ValueError(f"The repository {name} contains custom code which must be executed to correctly load the "
                         "model. Please pass the argument `trust_remote_code=True` to allow custom code to be run.")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", refuse)
    with pytest.raises(ConfigError) as error:
        load_config("someone/custom-model")
    assert_message(error, "someone/custom-model", "trust_remote_code", "never runs code")


@pytest.mark.parametrize("stream", ["on", "off"])
def test_weights_whose_shapes_disagree_with_config_json_are_named(english, target_tokenizer_folder, tmp_path, stream):
    tokenizer = byte_level_tokenizer(english)
    source = save_model(tiny_model("llama", len(tokenizer)), tokenizer, tmp_path / "source")
    settings = json.loads((source / "config.json").read_text(encoding="utf-8"))
    settings["intermediate_size"] *= 2  # the config of another model beside these weights
    (source / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    output = tmp_path / "out"
    with pytest.raises(ResourceFormatError) as error:
        transfer(config(source, target_tokenizer_folder, output, stream=stream))
    assert_message(error, "model.safetensors", "mlp.gate_proj.weight", f"[{settings['intermediate_size'] // 2}, ",
                   f"config.json makes it [{settings['intermediate_size']}, ", "config.json that was saved with")
    assert_nothing_written(output)


@pytest.mark.parametrize("stream", ["on", "off"])
def test_an_output_disk_without_room_is_refused_before_writing_saying_how_much_is_needed(
        gpt2_folder, target_tokenizer_folder, tmp_path, monkeypatch, stream):
    import shutil

    from langswap.errors import OutputSpaceError

    free = 1000
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**12, 10**12 - free, free))
    output = tmp_path / "deeper" / "out"
    with pytest.raises(OutputSpaceError) as error:
        transfer(config(gpt2_folder, target_tokenizer_folder, output, stream=stream))
    assert_message(error, str(output), "needs about", "GiB", "0.00 GiB free", "on a disk with room")
    assert_nothing_written(output)
    monkeypatch.undo()
    written = transfer(config(gpt2_folder, target_tokenizer_folder, output, stream=stream)).output
    size = sum(path.stat().st_size for path in Path(written).rglob("*") if path.is_file())
    needed = float(str(error.value).split("needs about ")[1].split(" GiB")[0]) * 2**30
    assert size <= needed  # the estimate covers what is then written


def test_an_architecture_without_a_language_model_class_is_named_as_such(tmp_path):
    """T5 has no causal- or masked-LM class: the refusal says what langswap handles (and the shape check, which runs
    where transformers reports a tensor of another shape, stays out of its way)."""
    from transformers import T5Config, T5ForConditionalGeneration

    from langswap.models import load_model

    T5ForConditionalGeneration(T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1,
                                        num_heads=2)).save_pretrained(tmp_path / "t5")
    with pytest.raises(ConfigError) as error:
        load_model(tmp_path / "t5")
    assert_message(error, "as a causal language model", "*ForCausalLM")
