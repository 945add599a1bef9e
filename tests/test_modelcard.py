"""Model cards: the README.md a hub reads, written from the record of a real tiny transfer and training."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import byte_level_tokenizer, cipher_line, english_lines, save_model, tiny_model, wordpiece_tokenizer
from langswap.config import to_dict
from langswap.errors import ConfigError, MissingResourceError
from langswap.modelcard import MARKER, read_front_matter, write_model_card
from langswap.training.run import TrainConfig, train
from langswap.transfer import transfer, transfer_config

SOURCE_README = "---\nlicense: apache-2.0\nlanguage: en\n---\n\n# A tiny English model\n"


def front_matter(path: Path) -> dict:
    """Parsed with yaml alone, as a hub parses it: the text between the first two '---' lines."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


def body(path: Path) -> str:
    return path.read_text(encoding="utf-8").split("---\n", 2)[2]


def copy_of(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def set_record(folder: Path, **config) -> None:
    record = json.loads((folder / "langswap.json").read_text(encoding="utf-8"))
    record["config"].update(config)
    (folder / "langswap.json").write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture(scope="module")
def source(tmp_path_factory, english) -> Path:
    """A tiny GPT-2 whose README.md front matter names its license."""
    tokenizer = byte_level_tokenizer(english)
    folder = save_model(tiny_model("gpt2", len(tokenizer)), tokenizer, tmp_path_factory.mktemp("licensed-gpt2"))
    (folder / "README.md").write_text(SOURCE_README, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def transferred(tmp_path_factory, source, target_tokenizer_folder, cipher_vectors, corpus_dir) -> Path:
    """A wechsel transfer of `source`, scored on held-out text; the folder as `transfer` leaves it."""
    output = tmp_path_factory.mktemp("cards") / "xx-model"
    transfer(transfer_config({
        "source_model": str(source), "target_tokenizer": str(target_tokenizer_folder), "output": str(output),
        "method": {"name": "wechsel", "neighbors": 5},
        "resources": {"source_vectors": str(cipher_vectors["source"]), "target_vectors": str(cipher_vectors["target"]),
                      "dictionary": str(corpus_dir / "en-xx.tsv")},
        "eval_text": str(corpus_dir / "xx.test.txt"), "eval_lines": 20}))
    # transfer writes the card itself; save_pretrained does not bring the source's README along, so nothing was kept
    assert MARKER in (output / "README.md").read_text(encoding="utf-8")
    assert not (output / "README.original.md").exists()
    return output


def test_a_transfer_gets_the_metadata_hubs_read_and_a_body_from_its_record(transferred, source, cipher_vectors,
                                                                           tmp_path):
    folder = copy_of(transferred, tmp_path)
    card = write_model_card(folder, language="no")  # Norwegian: YAML 1.1 reads a bare `no` as false
    assert card == folder / "README.md"
    front = front_matter(card)
    assert front == {"language": ["no"], "library_name": "transformers", "license": "apache-2.0",
                     "pipeline_tag": "text-generation", "tags": ["langswap", "language-transfer", "wechsel"]}
    assert read_front_matter(card) == front
    assert "base_model" not in front  # a local folder with no hub name: nothing is guessed

    text = body(card)
    record = json.loads((folder / "langswap.json").read_text(encoding="utf-8"))
    assert text.lstrip().startswith(MARKER)
    assert "`wechsel`" in text and "`neighbors=5`" in text and "`temperature=0.1`" in text
    for name in ("en.vec", "xx.vec", "en-xx.tsv", "xx.test.txt"):
        assert f"`{name}`" in text
    assert str(cipher_vectors["source"].parent) not in text and str(source.parent) not in text  # base names only
    assert f"precision@1 {record['alignment']['precision_at_1']:.3f}" in text
    assert record["target_vocabulary"] in text
    assert f"mixed {record['counts']['mixed']:,}" in text
    assert f"bits per byte: {record['metrics']['bits_per_byte']:.4f}" in text
    assert f"perplexity: {record['metrics']['perplexity']:,.2f}" in text
    assert "AutoModelForCausalLM.from_pretrained" in text
    assert "## Training" not in text


def test_figures_and_metadata_only_where_they_are_known(gpt2_folder, target_tokenizer_folder, tmp_path):
    """No held-out text, a source without README and no language: no figures, no license, no language."""
    output = tmp_path / "plain"
    transfer(transfer_config({"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
                              "output": str(output), "method": "overlap"}))
    card = write_model_card(output)
    assert front_matter(card) == {"library_name": "transformers", "pipeline_tag": "text-generation",
                                  "tags": ["langswap", "language-transfer", "overlap"]}
    text = body(card).lower()
    assert "`overlap`" in text and "fallback=subword" in text
    for figure in ("held-out", "bits per byte", "perplexity", "loss"):
        assert figure not in text
    assert "resources:" not in text and "alignment:" not in text


def test_the_hub_name_of_the_source_and_license_fields_with_yaml_special_characters(transferred, source, tmp_path):
    folder = copy_of(transferred, tmp_path)
    set_record(folder, source_model="example-org/tiny-gpt2")  # a hub name: not a folder here
    assert front_matter(write_model_card(folder))["base_model"] == "example-org/tiny-gpt2"
    assert "`example-org/tiny-gpt2` (hub)" in body(folder / "README.md")

    # a snapshot in a hub cache names its repository; its README's license comes along, quoted where YAML needs it
    snapshot = tmp_path / "hub" / "models--example-org--tiny-gpt2" / "snapshots" / "0123abcd"
    shutil.copytree(source, snapshot)
    (snapshot / "README.md").write_text("---\nlicense: other\nlicense_name: 'tiny: research only'\n"
                                        "license_link: LICENSE\ntags: [english]\n---\n# Tiny\n", encoding="utf-8")
    set_record(folder, source_model=str(snapshot))
    front = front_matter(write_model_card(folder))
    assert front["base_model"] == "example-org/tiny-gpt2"
    assert (front["license"], front["license_name"], front["license_link"]) == ("other", "tiny: research only",
                                                                                 "LICENSE")
    assert front["tags"] == ["langswap", "language-transfer", "wechsel"]  # the source's own tags are not copied

    assert front_matter(write_model_card(folder, source_model="other-org/name"))["base_model"] == "other-org/name"
    with pytest.raises(ConfigError, match="not a hub name"):
        write_model_card(folder, source_model="/some/folder")


def test_a_readme_langswap_did_not_write_is_kept(transferred, tmp_path):
    folder = copy_of(transferred, tmp_path)
    (folder / "README.md").write_text("# Notes someone wrote\n", encoding="utf-8")
    write_model_card(folder)
    assert (folder / "README.original.md").read_text(encoding="utf-8") == "# Notes someone wrote\n"
    assert MARKER in (folder / "README.md").read_text(encoding="utf-8")
    assert "`README.original.md`" in body(folder / "README.md")
    write_model_card(folder)  # langswap's own card is rewritten, the kept one stays as it is
    assert sorted(path.name for path in folder.glob("README*")) == ["README.md", "README.original.md"]


def test_a_folder_without_a_record_is_refused(tmp_path):
    with pytest.raises(MissingResourceError, match="langswap.json"):
        write_model_card(tmp_path)


def test_a_trained_model_and_its_snapshots_get_cards_naming_the_training(transferred, corpus_dir, tmp_path):
    start = copy_of(transferred, tmp_path)
    write_model_card(start, language="xx")  # as the transfer writes it; the training's cards take the language on
    config = TrainConfig(model=str(start), train_text=str(corpus_dir / "xx.txt"),
                         eval_text=str(corpus_dir / "xx.test.txt"), output=str(tmp_path / "trained"), steps=2,
                         batch_size=4, sequence_length=32, save_steps=3, eval_steps=3, logging_steps=1,
                         eval_sequences=4, preset="embeddings", snapshot_steps=[0, 1])
    report = train(config)

    card = write_model_card(report.model)
    front = front_matter(card)
    assert (front["license"], front["language"]) == ("apache-2.0", ["xx"])
    assert front["tags"] == ["langswap", "language-transfer", "wechsel", "continued-pretraining"]
    text = body(card)
    training = json.loads((report.model / "langswap.json").read_text(encoding="utf-8"))["training"]
    assert "trained for 2 updates" in text and "preset `embeddings`" in text and "`xx.txt`" in text
    assert "Phase `1-embeddings`: embeddings trained, 2 updates" in text
    assert f"Held-out loss at the end (update 2): {training['final_eval'][-1]['loss']:.4f}" in text
    assert "before any training" in text  # the transfer's figures stay, said to be the transfer's

    snapshots = Path(config.output) / "snapshots"
    after_one = write_model_card(snapshots / "step-1", training=config.output, step=1)  # the run's record
    text = body(after_one)
    assert "after 1 update of training" in text and "snapshot at update 1" in text and "objective causal" in text
    assert "Held-out loss" not in text  # nothing was measured for this snapshot
    assert front_matter(after_one)["license"] == "apache-2.0"
    assert "AutoModelForCausalLM" in text

    at_zero = write_model_card(snapshots / "step-0", training={"config": to_dict(config)}, step=0)
    assert "continued-pretraining" not in front_matter(at_zero)["tags"]
    assert "at update 0, before any training" in body(at_zero) and "trained further" not in body(at_zero)


def test_a_masked_model_loads_as_a_masked_lm(tmp_path, corpus_dir):
    source_tokenizer = wordpiece_tokenizer(english_lines(300, seed=5))
    source = save_model(tiny_model("bert", len(source_tokenizer)), source_tokenizer, tmp_path / "bert")
    target = tmp_path / "xx-wordpiece"
    wordpiece_tokenizer([cipher_line(line) for line in english_lines(300, seed=1)]).save_pretrained(target)
    output = tmp_path / "bert-xx"
    transfer(transfer_config({"source_model": str(source), "target_tokenizer": str(target), "output": str(output),
                              "method": "overlap", "eval_text": str(corpus_dir / "xx.test.txt"), "eval_lines": 3}))
    card = write_model_card(output)
    assert front_matter(card)["pipeline_tag"] == "fill-mask"
    text = body(card)
    assert "AutoModelForMaskedLM.from_pretrained" in text and "AutoModelForCausalLM" not in text
    assert "pseudo bits per byte:" in text and "pseudo-perplexity:" in text


def _calibration_line(data: dict) -> str:
    from langswap.reports import CalibrationReport

    return CalibrationReport.from_dict(data).summary()


def test_the_calibration_line_says_what_moved_and_what_moved_up_only():
    # "smoothing" is how records before `frequencies` named the estimate

    line = _calibration_line({
        "rows": 9983, "strength": 1.0, "through": "head rows along the mean hidden state",
        "smoothing": {"smoothing": 0.5}, "up_only_rows": {"rows": 412, "below_count": 2},
        "input_rows": {"moved": 9983, "relative_shift": {"median": 0.08, "p90": 0.2, "max": 0.9}}})
    assert "9,983 output rows moved" in line and "counts smoothed by 0.5" in line
    assert "412 rows of tokens counted fewer than 2 times moved up only" in line
    assert "tied input rows moved with them" in line
    assert "frequencies of rare tokens held out" in _calibration_line({
        "rows": 5, "strength": 1.0, "frequencies": {"estimate": "held-out", "per_count": {}}})
    assert "counts smoothed by 2" in _calibration_line({
        "rows": 5, "strength": 1.0, "frequencies": {"estimate": "add-k", "smoothing": 2.0}})
    assert _calibration_line({"rows": 0, "skipped": "put back"}) == "none (put back)"
    assert "moved up only" not in _calibration_line({"rows": 5, "strength": 1.0, "up_only_rows": {"rows": 0,
                                                                                              "below_count": 1}})
