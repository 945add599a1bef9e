"""`langswap bench`: methods x steps on the tiny model, table and plots, grids, resume, bad YAML."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from conftest import unwrapped

from langswap.bench import REFERENCE, BenchConfig, expand_variants, format_table, run_bench
from langswap.cli import main
from langswap.config import from_dict, to_dict
from langswap.errors import ConfigError
from langswap.records import has_model_record
from langswap.reports import PhaseReport, PhaseTeacher
from langswap.start_rows import START_FILE


def _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, **changes) -> Path:
    data = {
        "source_model": str(gpt2_folder), "target_tokenizer": str(target_tokenizer_folder),
        "train_text": str(corpus_dir / "xx.txt"), "eval_text": str(corpus_dir / "xx.test.txt"), "eval_lines": 20,
        "output": str(tmp_path / "bench"), "steps": [0, 2, 4],
        "methods": ["random", {"name": "overlap"}, {"name": "wechsel", "neighbors": 3}],
        "resources": {"source_vectors": str(cipher_vectors["source"]),
                      "target_vectors": str(cipher_vectors["target"]), "dictionary": str(corpus_dir / "en-xx.tsv")},
        "align": {"heldout_words": 20},
        "train": {"preset": "embeddings", "batch_size": 2, "sequence_length": 32, "save_steps": 2},
    }
    data.update(changes)
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_bench_writes_table_plots_and_resumes(capsys, tmp_path, gpt2_folder, target_tokenizer_folder,
                                              cipher_vectors, corpus_dir):
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir)
    assert main(["-q", "bench", str(path)]) == 0
    out = capsys.readouterr().out
    bench = tmp_path / "bench"
    table = (bench / "table.md").read_text()
    assert table in out
    lines = table.splitlines()
    assert lines[0] == ("| method | bits per byte @ 0 | bits per byte @ 2 | bits per byte @ 4 | perplexity @ 0 | "
                        "perplexity @ 2 | perplexity @ 4 | tokens per byte | seconds per update |")
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| " + REFERENCE, "| random", "| overlap", "| wechsel"]
    rows = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()]
    assert [(r["variant"], r["step"]) for r in rows] == [(REFERENCE, 0)] + [
        (v, s) for v in ("random", "overlap", "wechsel") for s in (0, 2, 4)]
    by = {(r["variant"], r["step"]): r["bits_per_byte"] for r in rows}
    # each figure is the held-out score of the model at that step: step 0 is the transfer, the last the trained model
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.models import load_model, load_tokenizer
    from langswap.resources.text import read_text_lines

    held_out = read_text_lines(corpus_dir / "xx.test.txt", max_lines=20)
    # the reference is the untouched source model with its own tokenizer, the same in every step's column
    reference = causal_lm_score(load_model(gpt2_folder), load_tokenizer(gpt2_folder), held_out).bits_per_byte
    assert rows[0]["bits_per_byte"] == pytest.approx(reference, abs=1e-5)
    assert lines[2].count(f"{rows[0]['bits_per_byte']:.4f}") == 3
    (train_folder,) = (bench / "runs" / "wechsel").glob("train-4steps-*")
    for step, folder in ((0, bench / "runs" / "wechsel" / "transfer"), (4, train_folder / "model")):
        score = causal_lm_score(load_model(folder), load_tokenizer(folder), held_out)
        assert by[("wechsel", step)] == pytest.approx(score.bits_per_byte, abs=1e-5)
    # embedding-only training moves every method (the values are measured, not copied)
    assert len({by[("random", s)] for s in (0, 2, 4)}) == 3
    for metric in ("bits_per_byte", "perplexity"):
        assert (bench / f"{metric}.png").read_bytes()[:4] == b"\x89PNG"
    # the step-2 model is the training snapshot; the step-0 model is the transfer
    assert (train_folder / "snapshots" / "step-2" / "model.safetensors").exists()
    assert (bench / "runs" / "wechsel" / "transfer" / "provenance.tsv").exists()

    # resume: a lost measurement is redone, the others are read back, the trained models are not retrained
    (bench / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows[:-1]) + "\n")
    model_file = train_folder / "model" / "model.safetensors"
    mtime = model_file.stat().st_mtime_ns
    assert main(["-q", "bench", str(path)]) == 0
    again = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()]
    assert again[-1] == rows[-1]
    assert model_file.stat().st_mtime_ns == mtime

    # a shorter schedule trains anew beside the old one (its step 2 is not the 4-step run's step 2); step 0 is reused
    shorter = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0, 2])
    assert main(["-q", "bench", str(shorter)]) == 0
    (short_folder,) = (bench / "runs" / "wechsel").glob("train-2steps-*")
    assert train_folder.is_dir() and (short_folder / "model" / "model.safetensors").exists()
    added = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()][len(again):]
    assert [(r["variant"], r["step"]) for r in added] == [("random", 2), ("overlap", 2), ("wechsel", 2)]
    assert {r["setting"]["trained_with"]["steps"] for r in added} == {2}
    held = causal_lm_score(load_model(short_folder / "model"), load_tokenizer(short_folder / "model"), held_out)
    assert added[-1]["bits_per_byte"] == pytest.approx(held.bits_per_byte, abs=1e-5)
    assert f"| {by[('random', 0)]:.4f}" in (bench / "table.md").read_text().replace("**", "")

    # other held-out lines: every step is measured again, nothing is retrained
    fewer = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, eval_lines=10)
    assert main(["-q", "bench", str(fewer)]) == 0
    remeasured = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()][
        len(again) + len(added):]
    assert len(remeasured) == 10 and {r["setting"]["measured_with"]["eval_lines"] for r in remeasured} == {10}
    assert model_file.stat().st_mtime_ns == mtime

    # a step the finished 4-step run has passed without a snapshot: a clear error, nothing retrained
    extra = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0, 1, 2, 4])
    assert main(["-q", "bench", str(extra)]) == 2
    err = unwrapped(capsys.readouterr().err)
    assert "no model was saved at step(s) [1]" in err and "train-4steps-" in err

    # the same label with other options is refused
    changed = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                          methods=[{"name": "wechsel", "neighbors": 5}])
    assert main(["-q", "bench", str(changed)]) == 2
    assert "variant 'wechsel'" in unwrapped(capsys.readouterr().err)


def test_a_bench_killed_while_training_resumes_to_the_same_figures(tmp_path, gpt2_folder, target_tokenizer_folder,
                                                                    cipher_vectors, corpus_dir):
    import os
    import signal
    import subprocess
    import sys
    import time

    options = dict(methods=[{"name": "wechsel", "neighbors": 3}], steps=[0, 4, 40], reference=False,
                   train={"preset": "embeddings", "batch_size": 2, "sequence_length": 32, "save_steps": 2})
    (tmp_path / "whole").mkdir()
    (tmp_path / "killed").mkdir()
    whole_yaml = _bench_yaml(tmp_path / "whole", gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                             **options)
    assert main(["-q", "bench", str(whole_yaml)]) == 0
    killed_yaml = _bench_yaml(tmp_path / "killed", gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                              **options)
    process = subprocess.Popen([sys.executable, "-m", "langswap", "-q", "bench", str(killed_yaml)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    runs = tmp_path / "killed" / "bench" / "runs" / "wechsel"
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if any(int(c.name.split("-")[1]) >= 6 for c in runs.glob("train-*/phase-*/checkpoint-*")):
            break
        time.sleep(0.05)
    assert process.poll() is None, "the bench ended before it could be killed: " + process.stderr.read().decode()
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "killed" / "bench" / "table.md").exists()
    assert list(runs.glob("train-*/phase-*/checkpoint-*")), "killed before training had saved a checkpoint"
    assert main(["-q", "bench", str(killed_yaml)]) == 0

    def figures(root):
        rows = [json.loads(line) for line in (root / "bench" / "results.jsonl").read_text().splitlines()]
        return {(row["variant"], row["step"]): row["bits_per_byte"] for row in rows}

    assert figures(tmp_path / "killed") == figures(tmp_path / "whole")
    assert len(figures(tmp_path / "whole")) == 3


def test_grid_expands_to_labelled_variants():
    table7 = [{"neighbors": 1, "temperature": 1}, {"neighbors": [10, 50], "temperature": [0.1, 1]}]
    variants = expand_variants([{"name": "wechsel", "grid": table7, "subword_source": "ngrams"}])
    assert [v.label for v in variants] == [
        "wechsel neighbors=1,temperature=1", "wechsel neighbors=10,temperature=0.1", "wechsel neighbors=10,temperature=1",
        "wechsel neighbors=50,temperature=0.1", "wechsel neighbors=50,temperature=1"]
    assert variants[1].method == {"name": "wechsel", "subword_source": "ngrams", "neighbors": 10, "temperature": 0.1}
    product = expand_variants([{"name": "wechsel", "label": "w", "grid": {"subword_source": ["ngrams", "frequency"],
                                                                          "neighbors": [1, 10]}}])
    assert len(product) == 4 and product[0].label == "w subword_source=ngrams,neighbors=1"


def test_each_plot_draws_one_line_per_method_and_the_reference_dashed(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from langswap.bench import write_report

    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda figure=None: figures.append(figure))
    rows = [{"variant": REFERENCE, "step": step, "bits_per_byte": 2.0} for step in (0, 5)]
    rows += [{"variant": "random", "step": 0, "bits_per_byte": 6.0},
             {"variant": "random", "step": 5, "bits_per_byte": 4.0},
             {"variant": "wechsel", "step": 0, "bits_per_byte": 3.0},
             {"variant": "wechsel", "step": 5, "bits_per_byte": 2.5, "pos_accuracy": 0.7}]
    written = write_report(tmp_path, rows, [REFERENCE, "random", "wechsel"], [0, 5])
    assert [path.name for path in written] == ["table.md", "bits_per_byte.png", "pos_accuracy.png"]
    lines = {line.get_label(): line for line in figures[0].axes[0].get_lines()}
    assert set(lines) == {REFERENCE, "random", "wechsel"}
    assert list(lines["random"].get_xdata()) == [0, 5] and list(lines["random"].get_ydata()) == [6.0, 4.0]
    assert list(lines["wechsel"].get_ydata()) == [3.0, 2.5]
    assert lines[REFERENCE].get_linestyle() == "--" and set(lines[REFERENCE].get_ydata()) == {2.0}
    probe = {line.get_label(): list(line.get_ydata()) for line in figures[1].axes[0].get_lines()}
    assert probe == {"wechsel": [0.7]}  # a metric only one method has: one line, no reference
    for figure in figures:
        close(figure)


def test_bench_yaml_with_unknown_method_or_option_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown method 'wechse'.*overlap.*random.*wechsel"):
        expand_variants([{"name": "wechse"}])
    with pytest.raises(ConfigError, match=r"unknown key 'method.neigbors'.*Did you mean 'neighbors'.*temperature"):
        expand_variants([{"name": "wechsel", "neigbors": 5}])
    with pytest.raises(ConfigError, match=r"unknown key 'method.k'.*neighbors"):
        expand_variants([{"name": "wechsel", "grid": {"k": [1, 10]}}])
    with pytest.raises(ConfigError, match="same label"):
        expand_variants(["random", {"name": "random"}])
    with pytest.raises(ConfigError, match="unknown key 'method'.*Valid keys here: .*methods"):
        from_dict(BenchConfig, {"method": "wechsel"})


def test_bench_refuses_bad_train_options_before_working(tmp_path, gpt2_folder, target_tokenizer_folder,
                                                        cipher_vectors, corpus_dir, capsys):
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                       train={"presett": "embeddings"})
    assert main(["-q", "bench", str(path)]) == 2
    assert "unknown key 'train.presett'. Did you mean 'preset'" in unwrapped(capsys.readouterr().err)
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                       train={"steps": 10})
    assert main(["-q", "bench", str(path)]) == 2
    assert "train.steps is set by the bench itself" in unwrapped(capsys.readouterr().err)
    assert not (tmp_path / "bench" / "runs").exists()


def test_table_marks_the_best_value_of_each_column():
    rows = [{"variant": "a", "step": 0, "bits_per_byte": 2.0, "pos_accuracy": 0.5},
            {"variant": "b", "step": 0, "bits_per_byte": 1.5, "pos_accuracy": 0.75}]
    table = format_table(rows, ["a", "b"], [0])
    assert table.splitlines()[2] == "| a | 2.0000 | 0.5000 |"
    assert table.splitlines()[3] == "| b | **1.5000** | **0.7500** |"
    # the reference (untouched source model) fills every step's column and never takes the bold
    rows = [{"variant": REFERENCE, "step": 0, "bits_per_byte": 1.0}, {"variant": "a", "step": 0, "bits_per_byte": 3.0},
            {"variant": "a", "step": 5, "bits_per_byte": 2.0}]
    table = format_table(rows, [REFERENCE, "a"], [0, 5]).splitlines()
    assert table[2:] == [f"| {REFERENCE} | 1.0000 | 1.0000 |", "| a | **3.0000** | **2.0000** |"]


def test_bench_with_a_pos_probe_at_each_step(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors,
                                             corpus_dir):
    from conftest import WORDS, cipher_word, tagged_sentences, write_conllu

    from langswap.evaluation import ProbeConfig, pos_probe

    tag_of = {cipher_word(word): ("NOUN", "VERB", "DET")[i % 3] for i, word in enumerate(WORDS[:30])}
    train = write_conllu(tmp_path / "train.conllu", tagged_sentences(40, 0, tag_of))
    test = write_conllu(tmp_path / "test.conllu", tagged_sentences(15, 1, tag_of))
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0, 2],
                       methods=["overlap"], probe={"train": str(train), "test": str(test), "layer": 1})
    result = run_bench(from_dict(BenchConfig, yaml.safe_load(path.read_text())))
    assert [(row["variant"], row["step"]) for row in result.rows] == [(REFERENCE, 0), ("overlap", 0),
                                                                         ("overlap", 2)]
    folder = tmp_path / "bench" / "runs" / "overlap" / "transfer"
    for row, model in zip(result.rows, (gpt2_folder, folder)):
        assert row["pos_accuracy"] == pytest.approx(pos_probe(model, train, test, ProbeConfig(layer=1)).accuracy,
                                                    abs=1e-5)
    assert "POS probe accuracy @ 2" in (tmp_path / "bench" / "table.md").read_text()
    assert (tmp_path / "bench" / "pos_accuracy.png").exists()


def test_bench_on_a_masked_lm_reports_pseudo_bits_per_byte_and_perplexity(tmp_path, english, ciphered, corpus_dir):
    """BERT-style source: masked-LM training in the bench; pseudo bits per byte (comparable across tokenizers) and
    pseudo-perplexity in the table."""
    from conftest import save_model, tiny_model, wordpiece_tokenizer

    source_tokenizer = wordpiece_tokenizer(english)
    source = save_model(tiny_model("bert", len(source_tokenizer)), source_tokenizer, tmp_path / "bert")
    target = tmp_path / "xx-wordpiece"
    wordpiece_tokenizer(ciphered, vocab_size=380).save_pretrained(target)
    config = from_dict(BenchConfig, {
        "source_model": str(source), "target_tokenizer": str(target), "train_text": str(corpus_dir / "xx.txt"),
        "eval_text": str(corpus_dir / "xx.test.txt"), "eval_lines": 8, "output": str(tmp_path / "bench"),
        "steps": [0, 2], "methods": ["random", "overlap"],
        "train": {"preset": "embeddings", "batch_size": 4, "sequence_length": 32, "save_steps": 2}})
    rows = run_bench(config).rows
    assert [(row["variant"], row["step"]) for row in rows] == [(REFERENCE, 0), ("random", 0), ("random", 2),
                                                               ("overlap", 0), ("overlap", 2)]
    assert all("bits_per_byte" not in row and row["pseudo_perplexity"] > 1 for row in rows)
    from langswap.evaluation.language_modeling import pseudo_perplexity
    from langswap.models import load_model, load_tokenizer
    from langswap.resources.text import read_text_lines

    held_out = read_text_lines(corpus_dir / "xx.test.txt", max_lines=8)
    for variant, folder in ((REFERENCE, source), ("random", tmp_path / "bench" / "runs" / "random" / "transfer")):
        score = pseudo_perplexity(load_model(folder), load_tokenizer(folder), held_out)
        (row,) = [row for row in rows if row["variant"] == variant and row["step"] == 0]
        assert row["pseudo_bits_per_byte"] == pytest.approx(score.bits_per_byte, abs=1e-5)
    by = {(row["variant"], row["step"]): row["pseudo_perplexity"] for row in rows}
    assert by[("random", 0)] != by[("random", 2)]  # the masked-LM training moved the embeddings
    (train_folder,) = (tmp_path / "bench" / "runs" / "random").glob("train-2steps-*")
    record = json.loads((train_folder / "langswap-train.json").read_text())
    assert record["objective"] == "masked"
    header = (tmp_path / "bench" / "table.md").read_text().splitlines()[0]
    assert header == ("| method | pseudo bits per byte @ 0 | pseudo bits per byte @ 2 | pseudo-perplexity @ 0 | "
                      "pseudo-perplexity @ 2 | tokens per byte | seconds per update |")
    for metric in ("pseudo_bits_per_byte", "pseudo_perplexity"):
        assert (tmp_path / "bench" / f"{metric}.png").read_bytes()[:4] == b"\x89PNG"


def test_a_method_labelled_as_the_reference_is_refused():
    with pytest.raises(ConfigError, match="reference row's; give that method another `label:`"):
        expand_variants([{"name": "overlap", "label": REFERENCE}])


def test_a_changed_source_model_is_never_answered_from_old_results(capsys, tmp_path, gpt2_folder,
                                                                   target_tokenizer_folder, cipher_vectors, corpus_dir):
    """The variant record holds the model pair, and each measurement the digest of its variant's record: a bench
    pointed at another source model refuses the old runs, and once they are deleted measures afresh instead of
    reading back results.jsonl. A last line cut off by a kill is dropped and measured again."""
    import shutil

    from conftest import save_model, tiny_model

    from langswap.models import load_tokenizer

    tokenizer = load_tokenizer(gpt2_folder)
    other_model = save_model(tiny_model("gpt2", len(tokenizer), seed=1), tokenizer, tmp_path / "other-source")
    options = dict(methods=["random", "overlap"], steps=[0], reference=False)
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, **options)
    assert main(["-q", "bench", str(path)]) == 0
    bench = tmp_path / "bench"
    first = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()]
    # alignment options are no input of methods without vectors: their runs and figures stand
    realigned = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                            align={"heldout_words": 10}, **options)
    assert main(["-q", "bench", str(realigned)]) == 0
    assert [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()] == first

    other = _bench_yaml(tmp_path, other_model, target_tokenizer_folder, cipher_vectors, corpus_dir, **options)
    assert main(["-q", "bench", str(other)]) == 2
    assert "source_model" in capsys.readouterr().err
    shutil.rmtree(bench / "runs")
    assert main(["-q", "bench", str(other)]) == 0
    rows = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 4  # measured again, not read back
    assert rows[3]["variant"] == "overlap" and rows[3]["bits_per_byte"] != first[1]["bits_per_byte"]  # other model

    # a kill while a line was being appended leaves half a line: it is dropped and measured again
    text = (bench / "results.jsonl").read_text()
    (bench / "results.jsonl").write_text(text[:-40])
    assert main(["-q", "bench", str(other)]) == 0
    again = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()]
    assert again == rows


def test_a_train_mapping_without_a_preset_keeps_embeddings_only_training(tmp_path, gpt2_folder,
                                                                         target_tokenizer_folder, cipher_vectors,
                                                                         corpus_dir):
    """`train: {batch_size: ...}` as in docs/design.md's example: the bench still trains embeddings only."""
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir,
                       methods=["random"], steps=[0, 2], reference=False,
                       train={"batch_size": 2, "sequence_length": 32, "save_steps": 2})
    assert main(["-q", "bench", str(path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "bench" / "results.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 2 and rows[-1]["setting"]["trained_with"]["preset"] == "embeddings"
    (run,) = (tmp_path / "bench" / "runs" / "random").glob("train-2steps-*")
    record = json.loads((run / "langswap-train.json").read_text())
    assert [phase["trainable"] for phase in record["phases"]] == ["embeddings"]


GOLDEN = Path(__file__).parent / "golden" / "bench_tiny.json"
GOLDEN_PACKAGES = ("torch", "transformers", "tokenizers", "numpy")


def test_bench_figures_match_the_recorded_ones(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors,
                                               corpus_dir):
    """The tiny bench's figures, every method at every step, against tests/golden/bench_tiny.json: a change of
    structure that claims to keep behaviour keeps these figures. LANGSWAP_RECORD_GOLDEN=1 records them anew (say
    why in the commit). Figures recorded under other versions of the numeric libraries are not comparable."""
    import os
    from importlib.metadata import version

    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir)
    assert main(["-q", "bench", str(path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "bench" / "results.jsonl").read_text().splitlines()]
    figures = {f"{row['variant']}@{row['step']}": {"bits_per_byte": row["bits_per_byte"],
                                                   "perplexity": row["perplexity"]} for row in rows}
    versions = {name: version(name) for name in GOLDEN_PACKAGES}
    if os.environ.get("LANGSWAP_RECORD_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps({"versions": versions, "figures": figures}, indent=2) + "\n")
        pytest.skip(f"recorded {GOLDEN}")
    golden = json.loads(GOLDEN.read_text())
    differing = {name: (golden["versions"][name], versions[name]) for name in GOLDEN_PACKAGES
                 if golden["versions"][name].split("+")[0] != versions[name].split("+")[0]}
    if differing:
        pytest.skip(f"figures recorded under other versions: {differing}")
    assert set(figures) == set(golden["figures"])
    assert len(figures) == 10  # the reference, then three methods at steps 0, 2 and 4
    for key, recorded in golden["figures"].items():
        for metric, value in recorded.items():
            assert figures[key][metric] == pytest.approx(value, rel=2e-4), (key, metric)


def test_a_variant_depends_only_on_the_resources_its_method_reads():
    """Another method's resource (an alignment prepared for wechsel, a helper model) leaves focus's record alone."""
    from langswap.bench import _shared_for

    shared = {"resources": {"token_text": "de.txt", "token_vectors": None, "token_min_count": 10,
                            "alignment": None, "helper_model": None}, "align": {"seed": 0}, "target_tokenizer": "t"}
    later = {**shared, "resources": {**shared["resources"], "alignment": "alignment.npy", "helper_model": "h"}}
    assert _shared_for(shared, ("token_vectors",)) == _shared_for(later, ("token_vectors",))
    assert _shared_for(shared, ("vectors",)) != _shared_for(later, ("vectors",))
    assert _shared_for(later, ()) == {"target_tokenizer": "t"}


def test_a_variant_measured_under_other_defaults_is_measured_again_not_refused(tmp_path, gpt2_folder,
                                                                              target_tokenizer_folder,
                                                                              cipher_vectors, corpus_dir, monkeypatch):
    """A variant whose options resolve otherwise than when it ran (a langswap with other defaults; here the first
    run's resolution is altered) has the same inputs as given: it is transferred and measured again under a new
    key, while a label whose given inputs changed is still refused."""
    import langswap.bench

    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0],
                       methods=["overlap"])
    resolve = langswap.bench._resolved_method
    monkeypatch.setattr(langswap.bench, "_resolved_method", lambda method: {**resolve(method), "fallback": "old"})
    assert main(["-q", "bench", str(path)]) == 0
    monkeypatch.undo()
    bench = tmp_path / "bench"
    record = json.loads((bench / "runs" / "overlap" / "variant.json").read_text())
    assert record["resolved"]["method"]["fallback"] == "old" and record["method"] == {"name": "overlap"}
    transferred = (bench / "runs" / "overlap" / "transfer" / "model.safetensors").stat().st_mtime_ns
    assert main(["-q", "bench", str(path)]) == 0
    rows = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()]
    assert [row["variant"] for row in rows].count("overlap") == 2  # measured again, under a new key
    assert rows[-1]["bits_per_byte"] == rows[1]["bits_per_byte"]  # the defaults did not really change here
    assert (bench / "runs" / "overlap" / "transfer" / "model.safetensors").stat().st_mtime_ns != transferred
    assert json.loads((bench / "runs" / "overlap" / "variant.json").read_text())["resolved"]["method"][
        "fallback"] != "old"
    changed = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0],
                          methods=[{"name": "overlap", "fallback": "mean", "label": "overlap"}])
    with pytest.raises(ConfigError, match="was run with other inputs"):
        run_bench(from_dict(BenchConfig, yaml.safe_load(changed.read_text())))


def test_a_bench_with_source_text_reports_what_the_source_language_keeps(tmp_path, gpt2_folder,
                                                                         target_tokenizer_folder, cipher_vectors,
                                                                         corpus_dir):
    """source_text: each model (the reference included) also reads the source-language text with its own
    tokenizer; every row has the target text's tokens per byte, one column in the table."""
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.models import load_model, load_tokenizer
    from langswap.resources.text import read_text_lines

    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0],
                       methods=["overlap"], source_text=str(corpus_dir / "en.txt"))
    assert main(["-q", "bench", str(path)]) == 0
    rows = {row["variant"]: row for row in map(json.loads, (tmp_path / "bench" / "results.jsonl").read_text()
                                               .splitlines())}
    english = read_text_lines(corpus_dir / "en.txt", max_lines=20)
    expected = causal_lm_score(load_model(gpt2_folder), load_tokenizer(gpt2_folder), english).bits_per_byte
    assert rows[REFERENCE]["source_bits_per_byte"] == pytest.approx(expected, abs=1e-5)
    # the transferred model reads English with the target tokenizer, as it now must: worse than the source
    assert rows["overlap"]["source_bits_per_byte"] > rows[REFERENCE]["source_bits_per_byte"]
    held_out = read_text_lines(corpus_dir / "xx.test.txt", max_lines=20)
    score = causal_lm_score(load_model(tmp_path / "bench" / "runs" / "overlap" / "transfer"),
                            load_tokenizer(target_tokenizer_folder), held_out)
    assert rows["overlap"]["tokens_per_byte"] == pytest.approx(score.tokens / score.bytes, abs=1e-5)
    header = (tmp_path / "bench" / "table.md").read_text().splitlines()[0]
    assert header == "| method | bits per byte @ 0 | perplexity @ 0 | source-language bits per byte @ 0 | " \
                     "tokens per byte |"


def test_a_bench_entry_can_distil_and_one_without_keeps_its_record(capsys, tmp_path, gpt2_folder,
                                                                   target_tokenizer_folder, cipher_vectors,
                                                                   corpus_dir):
    """`distill:` beside an entry's options runs token distillation in its transfer (the bench's training text is
    the transfer's target text); an entry without it writes no distill key, so its measurements stay those of
    before. Bad options are refused before any work."""
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0],
                       methods=[{"name": "overlap", "calibration": {"strength": 0}},
                                {"name": "overlap", "label": "overlap distilled", "calibration": {"strength": 0},
                                 "distill": {"tokens": 300, "layers": [1], "learning_rate": 0.01,
                                             "when": "always"}}])
    assert main(["-q", "bench", str(path)]) == 0
    runs = tmp_path / "bench" / "runs"
    record = json.loads((runs / "overlap_distilled" / "transfer" / "langswap.json").read_text())
    assert record["distillation"]["tokens"] >= 300 and record["distillation"]["kept"]
    assert json.loads((runs / "overlap" / "transfer" / "langswap.json").read_text())["distillation"] is None
    assert json.loads((runs / "overlap" / "variant.json").read_text())["distill"] is None
    assert "distill" not in json.loads((runs / "overlap" / "variant.json").read_text())["resolved"]
    rows = {r["variant"]: r["bits_per_byte"] for r in map(json.loads, (tmp_path / "bench" / "results.jsonl")
                                                          .read_text().splitlines())}
    assert rows["overlap distilled"] != rows["overlap"]
    bad = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0],
                      methods=[{"name": "overlap", "distill": {"tokns": 3}}])
    assert main(["-q", "bench", str(bad)]) == 2
    assert "tokns" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="distill must be a mapping"):
        expand_variants([{"name": "overlap", "distill": 3}])


def test_an_entry_s_own_train_options_train_its_runs_alone(tmp_path, corpus_dir):
    """`train:` in a method entry (here the source model as a teacher) reaches that entry's runs and no other's, in
    a training folder of its own, over the bench's train options; a teacher that is off keys a run as before the
    option existed. Trained rows carry the loop's time per update."""
    from langswap.bench import _loop_timing, _train_config

    config = from_dict(BenchConfig, {"train_text": str(corpus_dir / "xx.txt"), "eval_text": str(corpus_dir / "xx.txt"),
                                     "steps": [0, 2], "train": {"preset": "embeddings", "batch_size": 2}})
    plain, plain_key = _train_config(config, tmp_path / "run")
    taught, taught_key = _train_config(config, tmp_path / "run", {"teacher": {"weight": 1.0}, "batch_size": 4})
    assert (taught.teacher.weight, taught.batch_size, taught.preset) == (1.0, 4, "embeddings")
    assert (plain.teacher.weight, plain.batch_size) == (0.0, 2) and plain.output != taught.output
    assert "teacher" not in plain_key and taught_key["teacher"]["weight"] == 1.0
    matched, matched_key = _train_config(config, tmp_path / "run", {"teacher": {"likelihood_weight": 1.0}})
    assert matched_key["teacher"]["likelihood_weight"] == 1.0 and matched.output != plain.output
    assert config.train == {"preset": "embeddings", "batch_size": 2}  # an entry leaves the bench's options alone
    with pytest.raises(ConfigError, match="train.steps is set by the bench itself"):
        _train_config(config, tmp_path / "run", {"steps": 3})
    # a calibration start that takes nothing off the variant's transfer keys its run as `keep` does (as runs made
    # before the option existed are keyed)
    keep, keep_key = _train_config(config, tmp_path / "run", {"calibration": "keep"})
    assert "calibration" not in keep_key and "calibration_min_count" not in keep_key
    spare = {"calibration": "spare-rare"}
    assert _train_config(config, tmp_path / "run", spare, calibration={"lower_min_count": 3})[1] == keep_key
    assert _train_config(config, tmp_path / "run", {"calibration": "undo"}, calibration={"strength": 0})[1] == keep_key
    lowered = _train_config(config, tmp_path / "run", spare, calibration={})  # lower_min_count 0, the default
    assert lowered[1]["calibration"] == "spare-rare" and lowered[0].output != keep.output
    assert lowered[1] == plain_key  # spare-rare is the default
    assert _train_config(config, tmp_path / "run", {"calibration": "undo"}, calibration={})[1] != keep_key
    # start rows key a run only where its transfer wrote them (or is not made yet): a transfer without them trains
    # as before the option existed
    assert plain_key["start_rows"] == "frequent"
    transfer = tmp_path / "run" / "transfer"
    transfer.mkdir(parents=True)
    (transfer / "langswap.json").write_text("{}", encoding="utf-8")
    assert has_model_record(transfer)
    without = _train_config(config, tmp_path / "run")[1]
    assert "start_rows" not in without and "start_rows_shows" not in without
    (transfer / START_FILE).write_bytes(b"")
    assert _train_config(config, tmp_path / "run")[1] == plain_key
    (variant,) = expand_variants([{"name": "random", "train": {"teacher": {"weight": 1}}}])
    assert variant.train == {"teacher": {"weight": 1}}
    with pytest.raises(ConfigError, match="train must be a mapping"):
        expand_variants([{"name": "random", "train": 3}])
    phases = [PhaseReport(loop_updates=4, loop_seconds=2.0, loop_tokens=400),
              PhaseReport(loop_updates=1, loop_seconds=0.5, loop_tokens=100)]
    assert _loop_timing(phases) == {"seconds_per_update": 0.5, "train_tokens_per_second": 200.0}
    assert _loop_timing([PhaseReport(name="a phase of an older record")]) == {}
    dropped = [dataclasses.replace(phases[0], teacher=PhaseTeacher(used=False, check={"teacher_worse": True}))]
    assert _loop_timing(dropped) == {"seconds_per_update": 0.5, "train_tokens_per_second": 200.0,
                                     "teacher_used": False}


def test_teacher_twins_pair_a_taught_entry_with_the_same_entry_untaught(corpus_dir):
    from langswap.bench import teacher_twins

    config = from_dict(BenchConfig, {"train_text": str(corpus_dir / "xx.txt"), "eval_text": str(corpus_dir / "xx.txt"),
                                     "steps": [0, 2], "train": {"preset": "embeddings", "batch_size": 2}})
    variants = expand_variants([
        {"name": "overlap", "label": "plain"},
        {"name": "overlap", "label": "taught", "train": {"teacher": {"weight": 1}}},
        {"name": "overlap", "label": "off", "train": {"teacher": {"weight": 0}}},
        {"name": "overlap", "label": "other rate", "train": {"learning_rate": 0.1}},
        {"name": "overlap", "label": "taught, other rate", "train": {"learning_rate": 0.1, "teacher": {"weight": 2}}},
        {"name": "random", "label": "random taught", "train": {"teacher": {"weight": 1}}},
        {"name": "overlap", "label": "chunks matched", "train": {"teacher": {"likelihood_weight": 1}}},
        {"name": "overlap", "label": "raw, taught", "calibration": {"strength": 0},
         "train": {"teacher": {"weight": 1}}}])
    pairs = [(taught.label, plain.label) for taught, plain in teacher_twins(config, variants)]
    assert pairs == [("taught", "plain"), ("taught", "off"), ("taught, other rate", "other rate"),
                     ("chunks matched", "plain"), ("chunks matched", "off")]
    # a teacher in the bench's own `train:` teaches every entry that does not turn it off: only "off" is untaught
    taught_bench = from_dict(BenchConfig, {**to_dict(config), "train": {**config.train, "teacher": {"weight": 1}}})
    assert [(t.label, p.label) for t, p in teacher_twins(taught_bench, variants)] == [
        ("plain", "off"), ("taught", "off"), ("chunks matched", "off")]
    # options the bench sets and an entry repeats resolve to the same run
    same = expand_variants([{"name": "overlap", "label": "plain"},
                            {"name": "overlap", "label": "taught",
                             "train": {"batch_size": 2, "teacher": {"weight": 1}}}])
    assert [(t.label, p.label) for t, p in teacher_twins(config, same)] == [("taught", "plain")]


def _taught_bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir) -> Path:
    """A bench of `overlap` (uncalibrated) trained 2 updates without and with a teacher (`when: always`)."""
    raw = {"strength": 0}
    return _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0, 2],
                       methods=[{"name": "overlap", "calibration": raw},
                                {"name": "overlap", "label": "overlap taught", "calibration": raw,
                                 "train": {"teacher": {"weight": 1, "when": "always"}}}])


def test_a_taught_entry_is_also_compared_at_equal_wall_time(tmp_path, gpt2_folder, target_tokenizer_folder,
                                                             cipher_vectors, corpus_dir, monkeypatch):
    """An entry trained with a teacher beside the same entry without one: the untaught one is trained again for as
    many updates as fit in the taught run's time (by the two runs' seconds per update) and reported in the last
    step's column under a label that says so; a rerun reuses it. The loop's times are fixed here (a taught update
    twice an untaught one's), so the run is 4 updates, not what this machine's load makes of it."""
    import langswap.bench as bench_module

    timing = bench_module._loop_timing

    def fixed(phases):
        taught = any(phase.teacher is not None and phase.teacher.used for phase in phases)
        return {**timing(phases), "seconds_per_update": 2.0 if taught else 1.0}

    monkeypatch.setattr(bench_module, "_loop_timing", fixed)
    path = _taught_bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir)
    assert main(["-q", "bench", str(path)]) == 0
    bench = tmp_path / "bench"
    rows = [json.loads(line) for line in (bench / "results.jsonl").read_text().splitlines()]
    by = {(row["variant"], row["step"]): row for row in rows}
    taught, plain = by[("overlap taught", 2)], by[("overlap", 2)]
    assert (taught["seconds_per_update"], plain["seconds_per_update"]) == (2.0, 1.0)
    (row,) = [row for row in rows if row.get("equal_time_of") == "overlap taught"]
    updates = 4
    assert (row["updates"], row["step"]) == (updates, 2)
    assert row["variant"] == f"overlap, {updates} updates (the time of overlap taught)"
    assert 0 < row["bits_per_byte"] < 20 and row["seconds_per_update"] > 0
    (folder,) = (bench / "runs" / "overlap").glob(f"train-{updates}steps-*")
    record = json.loads((folder / "langswap-train.json").read_text())
    assert record["phases"][-1]["steps"] == updates and not (folder / "snapshots").exists()
    table = (bench / "table.md").read_text()
    assert f"| {row['variant']} |  | " in table and table.splitlines()[0].endswith("| seconds per update |")

    def no_training(*args, **kwargs):
        raise AssertionError("a rerun trained again")

    monkeypatch.setattr("langswap.bench.train", no_training)
    assert main(["-q", "bench", str(path)]) == 0
    assert (bench / "table.md").read_text() == table


def test_a_teacher_its_check_dropped_gets_no_row_at_equal_time(tmp_path, gpt2_folder, target_tokenizer_folder,
                                                              cipher_vectors, corpus_dir, monkeypatch):
    """A taught entry whose teacher the check dropped trained as the plain entry did: however its time per update
    came out, the plain entry is not trained again for it."""
    import langswap.bench as bench_module

    timing = bench_module._loop_timing

    def dropped(phases):
        taught = any(phase.teacher is not None for phase in phases)
        return {**timing(phases), "seconds_per_update": 2.0 if taught else 1.0,
                **({"teacher_used": False} if taught else {})}

    monkeypatch.setattr(bench_module, "_loop_timing", dropped)
    path = _taught_bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir)
    assert main(["-q", "bench", str(path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "bench" / "results.jsonl").read_text().splitlines()]
    assert {(row["variant"], row["step"]) for row in rows} >= {("overlap taught", 2), ("overlap", 2)}
    assert not [row for row in rows if row.get("equal_time_of")]
    assert [row["teacher_used"] for row in rows if row["variant"] == "overlap taught" and row["step"] == 2] == [False]


def test_a_distilled_entry_is_compared_at_equal_wall_time_counting_its_distillation(
        tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, monkeypatch):
    """An entry whose transfer distils beside the same entry without distillation: the plain one is trained again
    for as many updates as fit in the distilled one's distillation and training time. Times are fixed here (1 s an
    update for both, 3 s of distillation), so that is 2 + 3 = 5 updates whatever this machine's load."""
    import langswap.bench as bench_module

    timing = bench_module._loop_timing
    monkeypatch.setattr(bench_module, "_loop_timing", lambda phases: {**timing(phases), "seconds_per_update": 1.0})
    seconds = bench_module._distillation_seconds
    looked_up = []

    def fixed(output, variant):
        looked_up.append(seconds(output, variant))  # the record's own figure, before it is fixed
        return 3.0

    monkeypatch.setattr(bench_module, "_distillation_seconds", fixed)
    raw = {"strength": 0}
    path = _bench_yaml(tmp_path, gpt2_folder, target_tokenizer_folder, cipher_vectors, corpus_dir, steps=[0, 2],
                       methods=[{"name": "overlap", "calibration": raw},
                                {"name": "overlap", "label": "overlap distilled", "calibration": raw,
                                 "distill": {"tokens": 300, "layers": [1], "learning_rate": 0.01, "when": "always"}}])
    assert main(["-q", "bench", str(path)]) == 0
    assert len(looked_up) == 1 and looked_up[0] > 0  # the distilled transfer's record holds its seconds
    rows = [json.loads(line) for line in (tmp_path / "bench" / "results.jsonl").read_text().splitlines()]
    (row,) = [row for row in rows if row.get("equal_time_of") == "overlap distilled"]
    assert (row["updates"], row["step"]) == (5, 2)
    assert row["variant"] == "overlap, 5 updates (the time of overlap distilled)"
    assert 0 < row["bits_per_byte"] < 20
    assert f"| {row['variant']} |" in (tmp_path / "bench" / "table.md").read_text()


def test_the_bench_knows_an_extension_from_a_replacement(tmp_path):
    from conftest import byte_level_tokenizer, cipher_word, english_lines

    from langswap.bench import _extends
    from langswap.models import save_tokenizer
    from langswap.resources.extension import extend_tokenizer

    lines = english_lines(300)
    source = byte_level_tokenizer(lines)
    save_tokenizer(source, tmp_path / "source")
    target = [" ".join(cipher_word(word) for word in line.split()) for line in lines]
    save_tokenizer(extend_tokenizer(source, target, 20).tokenizer, tmp_path / "extended")
    save_tokenizer(byte_level_tokenizer(target), tmp_path / "replaced")
    assert _extends(str(tmp_path / "source"), str(tmp_path / "extended"))
    assert not _extends(str(tmp_path / "source"), str(tmp_path / "replaced"))
    assert not _extends(str(tmp_path / "source"), str(tmp_path / "source"))


def test_the_separation_s_options_enter_a_variant_s_digest_only_where_it_runs():
    """A calibrated variant without calibration.source_text resolves to the options it had before the separation
    existed (so its cached measurements stay); one with it names both the text and the amount. The expected-count
    fit's options enter only where it runs: count_fit not auto, or auto into an extension."""
    from langswap.bench import _resolved_calibration
    from langswap.transfer.calibrate import CalibrationConfig

    plain = _resolved_calibration({"text": "de.txt"})
    assert "source_text" not in plain and "separation" not in plain
    fit = {"count_fit", "count_fit_lines", "count_fit_smoothing", "count_fit_rounds"}
    assert set(plain) == set(to_dict(CalibrationConfig())) - {"source_text", "separation"} - fit
    extension = _resolved_calibration({"text": "de.txt"}, extension=True)  # auto fits an extension: in its key
    assert extension["count_fit"] == "auto" and "count_fit_smoothing" in extension
    fitted = _resolved_calibration({"text": "de.txt", "count_fit": "on"})
    assert fitted["count_fit"] == "on" and fitted["count_fit_lines"] == 1000 and fitted["count_fit_smoothing"] is None
    separated = _resolved_calibration({"text": "de.txt", "source_text": "en.txt", "separation": 1.0})
    assert separated["source_text"] == "en.txt" and separated["separation"] == 1.0
    assert _resolved_calibration({"text": "de.txt", "source_text": "en.txt"})["separation"] is None
