"""The `langswap` command, run in-process through `langswap.cli.main([...])` with stdout/stderr captured."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import unwrapped
from langswap.cli import build_parser, main
from langswap.config import from_dict, to_dict
from langswap.methods.base import config_fields, get_method, method_names
from langswap.transfer import ResourcesConfig, TransferConfig
from langswap.resources.alignment import AlignConfig


def run_raw(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["-q", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """As run_raw, with stderr unwrapped (`conftest.unwrapped`)."""
    code, out, err = run_raw(capsys, *argv)
    return code, out, unwrapped(err)


def wechsel_sets(cipher_vectors, corpus_dir) -> list[str]:
    return ["--set", f"resources.source_vectors={cipher_vectors['source']}",
            "--set", f"resources.target_vectors={cipher_vectors['target']}",
            "--set", f"resources.dictionary={corpus_dir / 'en-xx.tsv'}"]


def check_transfer_folder(folder: Path) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    provenance = (folder / "provenance.tsv").read_text(encoding="utf-8").splitlines()
    assert provenance[0] == "id\ttoken\tkind\tsources" and len(provenance) == len(tokenizer) + 1
    return json.loads((folder / "langswap.json").read_text(encoding="utf-8"))


# -- self-description -------------------------------------------------------------------------------------------------


def test_methods_lists_every_method_and_option(capsys):
    code, out, _ = run(capsys, "methods")
    assert code == 0
    sections: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line and not line.startswith(" "):
            name = line.split(":", 1)[0]
            sections[name] = []
        else:
            sections[name].append(line.strip())
    assert sorted(sections) == method_names()
    assert {"random", "overlap", "wechsel"} <= set(sections)
    for name in method_names():
        options = {line.split(" = ", 1)[0] for line in sections[name]}
        assert options == {field.name for field in config_fields(get_method(name).config_cls)}, name
    assert "needs: vectors" in out.splitlines()[[line.split(":")[0] for line in out.splitlines()].index("wechsel")]
    ramen = out.splitlines()[[line.split(":")[0] for line in out.splitlines()].index("ramen")]
    assert "needs with its default options: translations" in ramen and "as its options say: vectors" in ramen


@pytest.mark.parametrize("method", ["wechsel", "overlap", "random"])
def test_init_config_round_trips(capsys, tmp_path, method):
    code, out, _ = run(capsys, "init-config", "--method", method)
    assert code == 0
    data = yaml.safe_load(out)
    assert data["method"]["name"] == method
    assert to_dict(from_dict(TransferConfig, data)) == data
    # written to a file, the same text
    target = tmp_path / "config.yaml"
    assert run(capsys, "init-config", "--method", method, "--output", target)[0] == 0
    assert target.read_text(encoding="utf-8") == out


def test_transfer_help_names_every_field(capsys):
    with pytest.raises(SystemExit) as exit_code:
        build_parser().parse_args(["transfer", "--help"])
    assert exit_code.value.code == 0
    text = capsys.readouterr().out
    from langswap.transfer.calibrate import CalibrationConfig
    from langswap.transfer.distill import DistillConfig

    nested = {"resources": ResourcesConfig, "align": AlignConfig, "calibration": CalibrationConfig,
              "distill": DistillConfig}
    expected = [f"{name}.{field.name} ({field.default!r})" for name, cls in nested.items()
                for field in dataclasses.fields(cls)]
    for field in dataclasses.fields(TransferConfig):
        if field.name in nested:
            continue
        if field.name == "method":
            expected.append("method.name ('combined')")
        else:
            expected.append(f"{field.name} ({field.default!r})")
    for entry in expected:
        assert entry in text, f"`langswap transfer --help` does not describe {entry}"
    for field in dataclasses.fields(TransferConfig):
        if field.name not in nested:
            assert field.metadata.get("help"), f"TransferConfig.{field.name} has no help text"


# flags that set no config field: the YAML file, --set, output format and actions; each without a default of its own
CLI_ONLY = {"config", "set", "json", "list", "remove"}


def test_every_flag_sets_a_config_field_and_writes_no_default_of_its_own():
    """Every subcommand's flags come from its config's fields: each carries the field's help and choices, and its
    default is None, so the field's own default applies when the flag is absent (tests below run the commands)."""
    import argparse

    subcommands = next(action for action in build_parser()._actions
                       if isinstance(action, argparse._SubParsersAction)).choices
    assert {"tokenizer", "fasttext", "align", "align-parallel", "lexicon", "evaluate", "demo", "bench", "transfer",
            "train", "prepare", "enrich", "init-config"} <= set(subcommands)
    checked = 0
    for command, parser in subcommands.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if action.dest in CLI_ONLY or (command, action.dest) == ("transfer", "method"):  # method.name
                assert not action.default, f"{command} {action.option_strings}: a default of its own"
                continue
            assert hasattr(action, "config_field"), (
                f"langswap {command} {'/'.join(action.option_strings) or action.dest} is written by hand in cli.py; "
                "make it a config field and build it with add_flags")
            config_cls, name = action.config_field
            field = {item.name: item for item in dataclasses.fields(config_cls)}[name]
            assert action.default is None, f"{command} --{name}: default {action.default!r} beside the field's"
            assert field.metadata.get("help") and action.help.startswith(field.metadata["help"]), (command, name)
            if field.metadata.get("choices") and action.option_strings:
                assert ", ".join(field.metadata["choices"]) in action.help
            checked += 1
    assert checked >= 60


# -- the commands -----------------------------------------------------------------------------------------------------


def test_fasttext_trains_tiny_model(capsys, corpus_dir, tmp_path):
    from langswap.resources.vectors import WordVectors

    output = tmp_path / "en.bin"
    code, out, _ = run(capsys, "fasttext", corpus_dir / "en.txt", "--output", output, "--set", "dim=16",
                       "--set", "epoch=1", "--set", "minCount=1", "--set", "bucket=1000", "--set", "thread=1")
    assert code == 0 and f"wrote {output}" in out
    vectors = WordVectors.load(output)
    assert vectors.dim == 16 and "house" in vectors and vectors.has_subwords
    assert np.isfinite(vectors.vectors(["house", "Haus", "unseen"])).all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en.bin"]


def test_tokenizer_trains_target_tokenizer(capsys, gpt2_folder, corpus_dir, tmp_path):
    from transformers import AutoTokenizer

    from langswap.tokens import BYTE_LEVEL, Vocabulary

    output = tmp_path / "xx-tokenizer"
    code, out, _ = run(capsys, "tokenizer", "--source", gpt2_folder, "--text", corpus_dir / "xx.txt",
                       "--output", output, "--vocab-size", 320)
    assert code == 0 and f"wrote {output}" in out
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert 256 < len(tokenizer) <= 320 and tokenizer.eos_token == "<|endoftext|>"
    assert Vocabulary(tokenizer).family == BYTE_LEVEL
    assert "Ġzit" in tokenizer.get_vocab()  # 'the' in the cipher is a whole token
    assert sorted(p.name for p in tmp_path.iterdir()) == ["xx-tokenizer"]


def test_align_cipher_vectors(capsys, cipher_vectors, corpus_dir, tmp_path):
    output = tmp_path / "aligned"
    code, out, _ = run(capsys, "align", "--source-vectors", cipher_vectors["source"], "--target-vectors",
                       cipher_vectors["target"], "--dictionary", corpus_dir / "en-xx.tsv", "--output", output,
                       "--set", "heldout_words=20")
    assert code == 0 and "precision@1 1.0" in out and "on 20 held-out words (40 queries" in out
    report = json.loads((output / "report.json").read_text(encoding="utf-8"))
    assert report["precision_at_1"] == 1.0 and report["precision_at_1_csls"] == 1.0
    assert report["heldout_words"] == 20 and report["queries"] == 40  # each word held out in both cases (the/The)
    assert report["pca"] is None
    rotation = np.load(output / "alignment.npy")
    np.testing.assert_allclose(rotation, cipher_vectors["rotation"], atol=1e-4)
    assert (output / "source.aligned.vec").is_file() and not (output / "target_transform.npy").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aligned"]


def test_transfer_with_a_saved_alignment(capsys, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                                         tmp_path):
    """`langswap align` once, then transfers that read its rotation (resources.alignment): no dictionary needed."""
    assert run(capsys, "align", "--source-vectors", cipher_vectors["source"], "--target-vectors",
               cipher_vectors["target"], "--dictionary", corpus_dir / "en-xx.tsv", "--output", tmp_path / "aligned",
               "--set", "heldout_words=20")[0] == 0
    alignment = tmp_path / "aligned" / "alignment.npy"
    code, out, _ = run(capsys, "transfer", "--source-model", gpt2_folder, "--target-tokenizer",
                       target_tokenizer_folder, "--method", "wechsel", "--output", tmp_path / "xx-model",
                       "--set", f"resources.source_vectors={cipher_vectors['source']}",
                       "--set", f"resources.target_vectors={cipher_vectors['target']}",
                       "--set", f"resources.alignment={alignment}")
    assert code == 0 and f"alignment: read from {alignment}" in out
    assert check_transfer_folder(tmp_path / "xx-model")["counts"]["mixed"] > 0


def test_transfer_with_yaml_config(capsys, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                                   tmp_path):
    output = tmp_path / "xx-model"
    settings = {"source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
                "output": str(output), "method": {"name": "wechsel", "neighbors": 5},
                "resources": {"source_vectors": str(cipher_vectors["source"]),
                              "target_vectors": str(cipher_vectors["target"]),
                              "dictionary": str(corpus_dir / "en-xx.tsv")},
                "align": {"heldout_words": 30}, "eval_lines": 10}
    config_file = tmp_path / "transfer.yaml"
    config_file.write_text(yaml.safe_dump(settings), encoding="utf-8")
    code, out, _ = run(capsys, "transfer", config_file, "--eval-text", corpus_dir / "xx.test.txt",
                       "--set", "method.temperature=0.2", "--set", "method.exact_matches=true")
    assert code == 0
    assert f"wrote {output}" in out and "precision@1 1.0" in out and "bits per byte" in out
    record = check_transfer_folder(output)
    method = record["config"]["method"]
    assert method["name"] == "wechsel" and method["neighbors"] == 5 and method["temperature"] == 0.2
    assert method["exact_matches"] is True
    assert record["alignment"]["precision_at_1"] == 1.0 and record["metrics"]["lines"] == 10
    assert record["counts"]["mixed"] > 0

    # the same file again: the folder exists; --overwrite replaces it
    assert run(capsys, "transfer", config_file)[0] == 2
    code, _, _ = run(capsys, "transfer", config_file, "--overwrite", "--set", "method.neighbors=2")
    assert code == 0 and check_transfer_folder(output)["config"]["method"]["neighbors"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["transfer.yaml", "xx-model"]


def test_transfer_with_set_overrides_only(capsys, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                                          tmp_path):
    output = tmp_path / "xx-model"
    code, out, _ = run(capsys, "transfer", "--set", f"source_model={gpt2_folder}",
                       "--set", f"target_tokenizer={target_tokenizer_folder}", "--set", f"output={output}",
                       *wechsel_sets(cipher_vectors, corpus_dir), "--set", "method.neighbors=3",
                       "--set", "method.fallback=mean", "--set", "align.heldout_words=30", "--set", "correspondence=4")
    assert code == 0 and f"wrote {output}" in out
    record = check_transfer_folder(output)
    assert record["method"] == "combined"  # the default method, with options set one by one
    assert record["config"]["method"]["neighbors"] == 3 and record["config"]["method"]["fallback"] == "mean"
    assert record["config"]["align"]["heldout_words"] == 30 and len(record["correspondence"]) <= 4
    assert "random" not in record["counts"]


def test_transfer_trains_tokenizer_from_target_text(capsys, gpt2_folder, corpus_dir, tmp_path):
    output = tmp_path / "xx-model"
    code, out, _ = run(capsys, "transfer", "--source-model", gpt2_folder, "--target-text", corpus_dir / "xx.txt",
                       "--method", "overlap", "--output", output, "--set", "vocab_size=300")
    assert code == 0
    record = check_transfer_folder(output)
    assert record["config"]["target_text"] == str(corpus_dir / "xx.txt")


def test_evaluate_prints_bits_per_byte(capsys, gpt2_folder, corpus_dir):
    code, out, _ = run(capsys, "evaluate", gpt2_folder, "--text", corpus_dir / "en.txt", "--lines", 20)
    assert code == 0
    match = re.search(r"perplexity ([\d.]+) \| bits per byte ([\d.]+) \| .* 20 lines", out)
    assert match, out
    assert float(match.group(1)) > 1 and float(match.group(2)) > 0

    code, out, _ = run(capsys, "evaluate", gpt2_folder, "--text", corpus_dir / "en.txt", "--lines", 20, "--json")
    result = json.loads(out)["language_modeling"]
    assert code == 0 and result["lines"] == 20 and result["bits_per_byte"] == pytest.approx(float(match.group(2)),
                                                                                             abs=1e-4)
    code, out, _ = run(capsys, "evaluate", gpt2_folder, "--text", corpus_dir / "en.txt", "--lines", 20, "--json",
                       "--set", "device=cpu")
    assert code == 0 and json.loads(out)["language_modeling"] == result


# -- bad input: exit code 2, one paragraph on stderr ------------------------------------------------------------------


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, cipher_vectors) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cli-bad")
    files = {"latin1": folder / "latin1.txt", "empty": folder / "empty.txt", "headless": folder / "headless.vec",
             "reversed": folder / "xx-en.tsv", "existing": folder / "existing"}
    files["latin1"].write_bytes("ok\ncaf\u00e9\n".encode("latin-1"))
    files["empty"].write_bytes(b"")
    files["headless"].write_text("\n".join(Path(cipher_vectors["source"]).read_text().splitlines()[1:]),
                                 encoding="utf-8")
    from conftest import WORDS, cipher_word

    files["reversed"].write_text("".join(f"{cipher_word(w)}\t{w}\n" for w in WORDS), encoding="utf-8")
    files["existing"].mkdir()
    (files["existing"] / "keep.txt").write_text("keep", encoding="utf-8")
    return files


BAD_INPUTS = {
    "unknown key": (lambda f, g, t, v, c, o: ["transfer", "--source-model", g, "--target-tokenizer", t, "--output", o,
                                              "--set", "method.neighbours=3"], "Did you mean 'neighbors'?"),
    "unknown method": (lambda f, g, t, v, c, o: ["transfer", "--source-model", g, "--target-tokenizer", t,
                                                 "--output", o, "--method", "fasttext"], "Available methods"),
    "bad value": (lambda f, g, t, v, c, o: ["transfer", "--source-model", g, "--target-tokenizer", t, "--output", o,
                                            "--set", "eval_lines=many"], "must be an integer"),
    "missing config file": (lambda f, g, t, v, c, o: ["transfer", o / "nowhere.yaml"], "init-config"),
    "existing output": (lambda f, g, t, v, c, o: ["transfer", "--source-model", g, "--target-tokenizer", t,
                                                  "--method", "overlap", "--output", f["existing"]], "--overwrite"),
    "no vectors": (lambda f, g, t, v, c, o: ["transfer", "--source-model", g, "--target-tokenizer", t,
                                             "--method", "wechsel", "--output", o], "langswap fasttext"),
    "reversed dictionary": (lambda f, g, t, v, c, o: ["align", "--source-vectors", v["source"], "--target-vectors",
                                                      v["target"], "--dictionary", f["reversed"], "--output", o],
                            "reversed"),
    "vec header": (lambda f, g, t, v, c, o: ["align", "--source-vectors", f["headless"], "--target-vectors",
                                             v["target"], "--dictionary", c / "en-xx.tsv", "--output", o], "header"),
    "non-utf8 evaluation": (lambda f, g, t, v, c, o: ["evaluate", g, "--text", f["latin1"]], "line 2"),
    "empty fasttext text": (lambda f, g, t, v, c, o: ["fasttext", f["empty"], "--output", o / "x.bin"], "no words"),
    "empty tokenizer text": (lambda f, g, t, v, c, o: ["tokenizer", "--source", g, "--text", f["empty"],
                                                       "--output", o], "has no text"),
    "fasttext option": (lambda f, g, t, v, c, o: ["fasttext", c / "en.txt", "--output", o / "x.bin",
                                                  "--set", "dims=16"], "Did you mean 'dim'?"),
    "missing model": (lambda f, g, t, v, c, o: ["evaluate", o / "no-model", "--text", c / "en.txt"],
                      "tokenizer.json"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_exits_2_with_one_paragraph(capsys, case, bad_files, gpt2_folder, target_tokenizer_folder,
                                              cipher_vectors, corpus_dir, tmp_path):
    build, words = BAD_INPUTS[case]
    output = tmp_path / "out"
    argv = build(bad_files, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, output)
    before = sorted(p.name for p in bad_files["existing"].iterdir())
    code, out, err = run_raw(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err and "Traceback" not in out
    command = argv[0]
    start = err.find(f"langswap {command}: error: ")
    assert start >= 0, err
    message = err[start:].strip()
    assert "\n\n" not in message and message == err.strip()[err.strip().find("langswap " + command + ": error"):]
    assert words in unwrapped(message), message
    assert not output.exists() or not any(output.iterdir())
    assert not any(".partial" in p.name for p in tmp_path.iterdir())
    assert sorted(p.name for p in bad_files["existing"].iterdir()) == before


def test_evaluate_probe_and_finetune_from_the_command_line(capsys, gpt2_folder, tmp_path):
    from conftest import WORDS, write_conllu
    from langswap.evaluation import ProbeConfig, Sentence, pos_probe

    tags = ("DET", "NOUN", "VERB")
    sentences = [Sentence(words, [tags[WORDS.index(w) % 3] for w in words])
                 for words in ([WORDS[(i * 7 + j) % 40] for j in range(5)] for i in range(40))]
    train = write_conllu(tmp_path / "train.conllu", sentences[:30])
    test = write_conllu(tmp_path / "test.conllu", sentences[30:])
    code, out, _ = run(capsys, "evaluate", gpt2_folder, "--probe-pos", train, test, "--set", "probe.layer=0",
                       "--finetune", "pos", train, test, "--set", "finetune.epochs=1", "--json")
    assert code == 0
    result = json.loads(out)
    expected = pos_probe(gpt2_folder, train, test, ProbeConfig(layer=0))
    assert result["pos_probe"]["accuracy"] == pytest.approx(expected.accuracy)
    assert result["pos_probe"]["layer"] == 0
    assert 0 <= result["finetune"]["accuracy"] <= 1 and result["finetune"]["task"] == "pos"


def test_evaluate_refuses_nothing_to_do_and_a_metric_of_the_other_kind(capsys, gpt2_folder, corpus_dir):
    code, _, err = run(capsys, "evaluate", gpt2_folder)
    assert code == 2 and "nothing to evaluate" in err
    code, _, err = run(capsys, "evaluate", gpt2_folder, "--text", corpus_dir / "en.txt", "--set",
                       "metric=masked-lm-loss")
    assert code == 2 and "masked-lm-loss" in err
    code, _, err = run(capsys, "evaluate", gpt2_folder, "--probe-pos", "a.conllu", "b.conllu", "--set", "probe.layr=1")
    assert code == 2 and "Did you mean 'layer'" in err
    code, _, err = run(capsys, "evaluate", gpt2_folder, "--text", corpus_dir / "en.txt", "--set", "device=gpu0")
    assert code == 2 and "device 'gpu0'" in err
    if not torch.cuda.is_available():
        code, _, err = run(capsys, "evaluate", gpt2_folder, "--text", corpus_dir / "en.txt", "--set", "device=cuda")
        assert code == 2 and "no CUDA GPU" in err


def test_evaluate_passes_the_masks_seed_and_share_to_masked_lm_loss(capsys, tmp_path, corpus_dir):
    from conftest import english_lines, save_model, tiny_model, wordpiece_tokenizer
    from langswap.evaluation.language_modeling import masked_lm_loss
    from langswap.models import load_model, load_tokenizer
    from langswap.resources.text import read_text_lines

    tokenizer = wordpiece_tokenizer(english_lines(300))
    folder = save_model(tiny_model("bert", len(tokenizer)), tokenizer, tmp_path / "bert")
    code, out, _ = run(capsys, "evaluate", folder, "--text", corpus_dir / "en.txt", "--lines", "20", "--json",
                       "--set", "metric=masked-lm-loss", "--set", "seed=3", "--set", "mlm_probability=0.3")
    assert code == 0
    lines = read_text_lines(corpus_dir / "en.txt", max_lines=20)
    expected = masked_lm_loss(load_model(folder), load_tokenizer(folder), lines, probability=0.3, seed=3)
    default = masked_lm_loss(load_model(folder), load_tokenizer(folder), lines)
    result = json.loads(out)["language_modeling"]
    assert result["tokens"] == expected.tokens != default.tokens
    assert result["nll"] == pytest.approx(expected.nll, rel=1e-5)


def test_align_refuses_an_existing_output_before_any_work(capsys, tmp_path):
    """The folder is checked first: vectors that do not even exist are never read."""
    (tmp_path / "aligned").mkdir()
    code, _, err = run(capsys, "align", "--source-vectors", tmp_path / "missing.vec", "--target-vectors",
                       tmp_path / "missing.vec", "--dictionary", tmp_path / "missing.tsv", "--output",
                       tmp_path / "aligned")
    assert code == 2 and "'" + str(tmp_path / "aligned") + "' already exists" in err and "--overwrite" in err


def test_enrich_from_the_command_line(capsys, tmp_path, gpt2_folder, corpus_dir, ciphered):
    """`langswap enrich` builds its config from flags and --set keys, writes the folder and says what it changed;
    `langswap init-config --for enrich` writes a config the command takes."""
    from conftest import byte_level_tokenizer, save_model, tiny_model

    tokenizer = byte_level_tokenizer(ciphered, vocab_size=300)
    l2 = save_model(tiny_model("llama", len(tokenizer), seed=1), tokenizer, tmp_path / "l2")
    config = tmp_path / "enrich.yaml"
    assert main(["init-config", "--for", "enrich", "--output", str(config)]) == 0
    capsys.readouterr()
    assert main(["-q", "enrich", str(config), "--l1", str(gpt2_folder), "--l2", str(l2), "--dictionary",
                 str(corpus_dir / "en-xx.tsv"), "--output", str(tmp_path / "out"), "--method", "procrustes",
                 "--set", "blend=1", "--set", "max_new_words=0"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'out'}" in out and "row change (L2 norm)" in out
    record = json.loads((tmp_path / "out" / "langswap.json").read_text())
    assert record["config"]["method"] == "procrustes" and record["config"]["blend"] == 1.0
    assert main(["enrich", "--l1", str(gpt2_folder), "--l2", str(l2), "--dictionary", str(corpus_dir / "en-xx.tsv"),
                 "--output", str(tmp_path / "out"), "--method", "projection"]) == 2
    assert "exists" in capsys.readouterr().err


def test_the_fasttext_training_process_ends_when_its_parent_is_gone(tmp_path):
    """A killed `langswap fasttext` must not leave fastText's training holding every core."""
    import os
    import subprocess
    import sys
    import time

    child = ("import sys, time; from langswap.resources.fasttext_train import _exit_with_parent; "
             "_exit_with_parent(int(sys.argv[1]), 0.1); time.sleep(60)")
    parent = (f"import os, subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {child!r}, str(os.getpid())], "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid, flush=True)")  # exits at once
    pid = int(subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True).stdout)

    def alive() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its new parent to reap it has ended
            return stat.read().split(")")[-1].split()[0] != "Z"

    deadline = time.monotonic() + 120  # the child's imports may take a while on a loaded machine
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive()
