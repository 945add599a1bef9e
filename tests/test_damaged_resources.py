"""Damaged resource files: each is refused with a `ResourceFormatError` (or `MissingResourceError`) that names the
file and what is wrong, before anything is computed from it; a complete file still loads with the right shape.

The damage is what an interrupted download or copy leaves (a file cut short) or a file written for other inputs (a
matrix of another shape). A fastText .bin cut inside its dictionary is only given to `check_fasttext_bin`, never to
`WordVectors.load`: fastText itself, should that check ever be skipped, would read such a file until memory runs out.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import WORDS, cipher_word, english_lines, unwrapped, write_vec
from langswap.cli import main
from langswap.errors import LangswapError, MissingResourceError, ResourceFormatError
from langswap.models import load_model, load_tokenizer
from langswap.resources.kinds import resources_config
from langswap.resources.kinds.vectors import load_aligned
from langswap.resources.alignment import load_alignment
from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
from langswap.resources.vectors import WordVectors, check_fasttext_bin

DIM = 16
BUCKET = 1000


def assert_message(error: pytest.ExceptionInfo, *words: str) -> None:
    assert isinstance(error.value, LangswapError)
    message = unwrapped(str(error.value))
    for word in words:
        assert word.lower() in message.lower(), f"{word!r} not in message: {message}"


def cut(source: Path, target: Path, keep: float | int) -> Path:
    """`target`: the first `keep` bytes of `source` (a fraction of them where `keep` is a float)."""
    data = source.read_bytes()
    target.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    return target


# -- fastText .bin ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fasttext_bin(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fasttext")
    text = folder / "en.txt"
    text.write_text("\n".join(english_lines(300)) + "\n", encoding="utf-8")
    config = FastTextConfig(dim=DIM, epoch=1, minCount=1, bucket=BUCKET, thread=1)
    return train_fasttext(text, folder / "en.bin", config)


def test_complete_bin_loads_with_the_shapes_of_its_header(fasttext_bin):
    layout = check_fasttext_bin(fasttext_bin)
    vectors = WordVectors.load(fasttext_bin)
    assert layout.dim == vectors.dim == DIM and layout.size == fasttext_bin.stat().st_size
    assert layout.words == len(vectors) and layout.labels == 0
    assert layout.input_shape == (len(vectors) + BUCKET, DIM) and layout.output_shape == (len(vectors), DIM)
    assert vectors.vectors(["house", "unseen"]).shape == (2, DIM)


@pytest.mark.parametrize("keep, where", [(0.6, "input matrix"), (0.999, "output matrix")])
def test_truncated_bin(fasttext_bin, tmp_path, keep, where):
    path = cut(fasttext_bin, tmp_path / "cut.bin", keep)
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    size = fasttext_bin.stat().st_size
    assert_message(error, str(path), "not a complete fastText .bin model", f"ends inside its {where}",
                   f"{path.stat().st_size:,} of {size:,} bytes", "download or copy it again")


@pytest.mark.parametrize("keep", [0, 10, 100, 0.01])
def test_bin_cut_in_its_header_or_dictionary(fasttext_bin, tmp_path, keep):
    path = cut(fasttext_bin, tmp_path / "cut.bin", keep)
    with pytest.raises(ResourceFormatError) as error:
        check_fasttext_bin(path)  # not WordVectors.load: see the module docstring
    assert_message(error, str(path), "not a complete fastText .bin model", "download or copy it again")
    if keep == 0.01:
        assert_message(error, "ends inside its dictionary")


def test_bin_whose_matrix_has_another_dimension_than_its_header(fasttext_bin, tmp_path):
    data = bytearray(fasttext_bin.read_bytes())
    struct.pack_into("<i", data, 8, 8)  # Args::save writes dim first, after magic and version
    path = tmp_path / "dim8.bin"
    path.write_bytes(bytes(data))
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    words = check_fasttext_bin(fasttext_bin).words
    assert_message(error, str(path), "damaged fastText .bin model", f"{words + BUCKET:,} x 16 input matrix",
                   "dimension 8", f"says {words + BUCKET:,} x 8")


def test_bin_with_bytes_after_its_output_matrix(fasttext_bin, tmp_path):
    path = tmp_path / "longer.bin"
    path.write_bytes(fasttext_bin.read_bytes() + b"\0" * 5)
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, str(path), "5 byte(s) after the end of its output matrix",
                   f"({fasttext_bin.stat().st_size:,} bytes)")


def test_quantised_bin_is_refused(fasttext_bin, tmp_path):
    layout = check_fasttext_bin(fasttext_bin)
    data = bytearray(fasttext_bin.read_bytes())
    matrix_bytes = [17 + 4 * rows * cols for rows, cols in (layout.input_shape, layout.output_shape)]
    data[len(data) - sum(matrix_bytes)] = 1  # the input matrix's quantised flag
    path = tmp_path / "quantised.bin"
    path.write_bytes(bytes(data))
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, str(path), "quantised fastText model (.ftz)", "give the full .bin model")


def test_align_from_a_truncated_bin_exits_2_and_writes_nothing(capsys, fasttext_bin, tmp_path):
    """The reported case: an alignment was written from a .bin cut short. Here the dictionary pairs each word with
    itself, so the alignment of the cut file with the whole one would succeed if the cut file were read."""
    source = cut(fasttext_bin, tmp_path / "cut.bin", 0.6)
    dictionary = tmp_path / "en-en.tsv"
    dictionary.write_text("".join(f"{word}\t{word}\n" for word in WORDS), encoding="utf-8")
    output = tmp_path / "aligned"
    code = main(["-q", "align", "--source-vectors", str(source), "--target-vectors", str(fasttext_bin),
                 "--dictionary", str(dictionary), "--output", str(output)])
    err = unwrapped(capsys.readouterr().err)
    assert code == 2 and "Traceback" not in err
    assert f"'{source}' is not a complete fastText .bin model" in err and "ends inside its input matrix" in err
    assert not output.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["cut.bin", "en-en.tsv"]


# -- .vec -------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vec_text(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("vec") / "en.vec"
    vectors = np.random.default_rng(0).standard_normal((len(WORDS), DIM)).astype(np.float32)
    return write_vec(path, WORDS, vectors).read_text(encoding="utf-8")


def test_vec_truncated_at_a_line_end(vec_text, tmp_path):
    lines = vec_text.splitlines(keepends=True)
    path = tmp_path / "cut.vec"
    path.write_text("".join(lines[:41]), encoding="utf-8")  # header and 40 rows
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, str(path), "is truncated", f"promises {len(WORDS)} words", "ends after 40 (line 41)",
                   "download or copy it again")
    assert len(WordVectors.load(path, max_words=40)) == 40  # asking for no more than there is is no error


def test_vec_truncated_in_the_middle_of_a_line(vec_text, tmp_path):
    lines = vec_text.splitlines(keepends=True)
    path = tmp_path / "cut.vec"
    path.write_text("".join(lines[:41]) + " ".join(lines[41].split(" ")[:6]), encoding="utf-8")  # word + 5 values
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, str(path), "is truncated", "middle of line 42 (5 of 16 numbers)",
                   f"after 40 of the {len(WORDS)} words")


def test_vec_whose_rows_have_another_dimension_than_its_header(vec_text, tmp_path):
    lines = vec_text.splitlines(keepends=True)
    path = tmp_path / "dim.vec"
    path.write_text(f"{len(WORDS)} 20\n" + "".join(lines[1:]), encoding="utf-8")
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, str(path), "line 2 has 16 numbers", "header says dimension 20")


def test_saved_vec_with_unwritable_words_is_complete(tmp_path):
    """`save_vec` leaves out words a .vec line cannot hold; its header counts the rows written, so it loads."""
    words = ["house", "", "no\u00a0break", "water"]
    path = tmp_path / "saved.vec"
    assert WordVectors(words, vectors=np.eye(4, DIM)).save_vec(path) == 2
    loaded = WordVectors.load(path)
    assert loaded.words == ["house", "water"] and loaded.dim == DIM


@pytest.mark.parametrize("value, words", [("abc", ["no number", "'abc'"]), ("nan", ["not finite"])])
def test_vec_with_a_bad_value(vec_text, tmp_path, value, words):
    lines = vec_text.splitlines(keepends=True)
    parts = lines[5].split(" ")
    parts[3] = value
    lines[5] = " ".join(parts)
    path = tmp_path / "bad.vec"
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(ResourceFormatError) as error:
        WordVectors.load(path)
    assert_message(error, str(path), f"line 6 (word {WORDS[4]!r})", *words)


# -- alignments -------------------------------------------------------------------------------------------------------


@pytest.fixture
def vectors(cipher_vectors) -> tuple[WordVectors, WordVectors]:
    return WordVectors.load(cipher_vectors["source"]), WordVectors.load(cipher_vectors["target"])


def test_complete_alignment_loads(cipher_vectors, vectors, tmp_path):
    path = tmp_path / "alignment.npy"
    np.save(path, cipher_vectors["rotation"].astype(np.float32))
    source, target = load_alignment(path, *vectors)
    assert source.dim == target.dim == DIM and target.transform is None
    np.testing.assert_allclose(source.vectors(["house"]), target.vectors([cipher_word("house")]), atol=1e-4)


@pytest.mark.parametrize("shape, words", [((12, 16), ["12 x 16", "rows must equal", "source vectors 'en.vec', 16"]),
                                          ((16, 12), ["16 x 12", "columns must equal", "target vectors 'xx.vec'"])])
def test_alignment_of_the_wrong_shape(cipher_vectors, tmp_path, shape, words):
    path = tmp_path / "alignment.npy"
    np.save(path, np.eye(*shape, dtype=np.float32))
    resources = resources_config(source_vectors=str(cipher_vectors["source"]),
                                target_vectors=str(cipher_vectors["target"]), alignment=str(path))
    with pytest.raises(ResourceFormatError) as error:
        load_aligned(resources, None)
    assert_message(error, str(path), *words, "rerun `langswap align`")


def test_target_transform_of_the_wrong_shape(vectors, tmp_path):
    np.save(tmp_path / "alignment.npy", np.eye(DIM, 12, dtype=np.float32))
    np.save(tmp_path / "target_transform.npy", np.eye(20, 12, dtype=np.float32))
    with pytest.raises(ResourceFormatError) as error:
        load_alignment(tmp_path / "alignment.npy", *vectors)
    assert_message(error, str(tmp_path / "target_transform.npy"), "20 x 12", "'xx.vec', of dimension 16")


def test_truncated_alignment(vectors, tmp_path):
    whole = tmp_path / "whole.npy"
    np.save(whole, np.eye(DIM, dtype=np.float32))
    path = cut(whole, tmp_path / "alignment.npy", 0.7)
    with pytest.raises(ResourceFormatError) as error:
        load_alignment(path, *vectors)
    assert_message(error, str(path), f"has {path.stat().st_size:,} bytes", f"needs {whole.stat().st_size:,}",
                   "truncated")
    path = cut(whole, tmp_path / "alignment.npy", 20)  # inside the .npy header
    with pytest.raises(ResourceFormatError) as error:
        load_alignment(path, *vectors)
    assert_message(error, str(path), "not a complete .npy file")


@pytest.mark.parametrize("matrix, words", [
    (np.ones(DIM, dtype=np.float32), ["shape (16,)", "not a matrix"]),
    (np.full((DIM, DIM), np.nan, dtype=np.float32), ["256 values", "not finite"]),
])
def test_alignment_that_is_no_finite_matrix(vectors, tmp_path, matrix, words):
    path = tmp_path / "alignment.npy"
    np.save(path, matrix)
    with pytest.raises(ResourceFormatError) as error:
        load_alignment(path, *vectors)
    assert_message(error, str(path), *words)


# -- model weights and tokenizers -------------------------------------------------------------------------------------


@pytest.fixture
def model_copy(gpt2_folder, tmp_path) -> Path:
    return Path(shutil.copytree(gpt2_folder, tmp_path / "model"))


def test_complete_model_loads(model_copy):
    model = load_model(model_copy)
    assert model.get_input_embeddings().weight.shape[1] == 32


def test_truncated_safetensors(model_copy):
    path = model_copy / "model.safetensors"
    size = path.stat().st_size
    cut(Path(shutil.copy(path, model_copy.parent / "whole.safetensors")), path, 0.6)
    with pytest.raises(ResourceFormatError) as error:
        load_model(model_copy)
    assert_message(error, str(path), "not a complete safetensors file", f"{int(size * 0.6):,} of the {size:,} bytes",
                   "download or copy the model")
    cut(model_copy.parent / "whole.safetensors", path, 100)  # inside the JSON header
    with pytest.raises(ResourceFormatError) as error:
        load_model(model_copy)
    assert_message(error, str(path), "fewer than its header alone needs")


def test_truncated_and_missing_shards(model_copy):
    from transformers import AutoModelForCausalLM

    sharded = model_copy.parent / "sharded"
    AutoModelForCausalLM.from_pretrained(model_copy).save_pretrained(sharded, max_shard_size="100KB")
    shards = sorted(sharded.glob("*.safetensors"))
    assert len(shards) > 1
    whole = shards[-1].read_bytes()
    shards[-1].write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ResourceFormatError) as error:
        load_model(sharded)
    assert_message(error, str(shards[-1]), "not a complete safetensors file", f"of the {len(whole):,} bytes")
    shards[-1].unlink()
    with pytest.raises(MissingResourceError) as error:
        load_model(sharded)
    assert_message(error, str(sharded), f"lacks 1 of the {len(shards)} weight shards", shards[-1].name)


@pytest.mark.parametrize("damage, words", [
    (lambda text: text[: len(text) // 2], ["is truncated", "stops in the middle"]),
    (lambda text: '{"version": "1.0"}', ["valid JSON but not a tokenizer", "missing"]),
    (lambda text: "", ["is empty"]),
])
def test_damaged_tokenizer_json(model_copy, damage, words):
    path = model_copy / "tokenizer.json"
    path.write_text(damage(path.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(ResourceFormatError) as error:
        load_tokenizer(model_copy)
    assert_message(error, str(path), *words, "save the tokenizer again")


def test_complete_tokenizer_loads(model_copy):
    tokenizer = load_tokenizer(model_copy)
    assert tokenizer.is_fast and len(tokenizer) > 256
