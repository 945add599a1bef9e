"""TEMA on real data: a poorly trained German model L2 enriched from SmolLM2-135M (L1) with MUSE en-de.

L2 comes from benchmarks/train_tema_l2.py (built first where it is missing, with the same options). Each variant is
one `langswap.enrich` run (`EnrichConfig`) into --workdir/enriched/NAME:

- projection "1": the paper's equations with its anchor, the token "1";
- projection: the same with the default anchors (every digit and punctuation mark both models have);
- lstsq, procrustes: the linear-map variant, blend 0.5;
- projection "1" + words: the paper's whole recipe, with up to --new-words dictionary words L2 lacks added and
  fine-tuned embeddings-only (--new-word-steps updates) on the sentences of de.train.txt that hold them;
- projection "1" + words, no text: the same words with their subword-mean rows only, not fine-tuned;
- words alone: the words added and fine-tuned as above, no row moved by TEMA (procrustes with blend 0), to tell
  the two parts of the recipe apart.

The first four add no words (max_new_words: 0).

Every model (L2 and each L2') is measured by bits per byte on the first --eval-lines lines of de.test.txt and by a
linear POS probe on the last layer (UD German-GSD: trained on dev, tested on test). The table and the figures go to
benchmarks/results/tema-de/ (table.md, results.json). Rerunning reuses finished enrich runs and measurements.

    OMP_NUM_THREADS=1 python benchmarks/bench_tema.py [--layers 4] [--steps 300] [--new-words 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_german_training import shared_data_ready  # noqa: E402
from train_tema_l2 import DEFAULT_DATA, DEFAULT_WORKDIR, REPO, build_l2  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "tema-de"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--layers", type=int, default=4, help="L2's layers (train_tema_l2.py).")
    parser.add_argument("--vocab-size", type=int, default=16384, help="L2's vocabulary (train_tema_l2.py).")
    parser.add_argument("--steps", type=int, default=300, help="L2's training updates (train_tema_l2.py).")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-lines", type=int, default=300)
    parser.add_argument("--new-words", type=int, default=1000, help="max_new_words of the + words variant.")
    parser.add_argument("--new-word-steps", type=int, default=50, help="train_steps of the + words variant.")
    parser.add_argument("--probe-sentences", type=int, default=None, help="Cap the sentences of each UD split.")
    parser.add_argument("--skip-probe", action="store_true")
    return parser.parse_args(argv)


def variants(args) -> dict[str, dict]:
    words = {"max_new_words": args.new_words, "target_text": str(args.data / "splits" / "de.train.txt"),
             "train_steps": args.new_word_steps, "batch_size": args.batch_size,
             "sequence_length": args.sequence_length}
    return {
        'projection "1"': {"method": "projection", "anchors": ["1"], "max_new_words": 0},
        "projection": {"method": "projection", "max_new_words": 0},
        "lstsq": {"method": "lstsq", "blend": 0.5, "max_new_words": 0},
        "procrustes": {"method": "procrustes", "blend": 0.5, "max_new_words": 0},
        'projection "1" + words, no text': {"method": "projection", "anchors": ["1"], "max_new_words": args.new_words},
        "words alone (procrustes, blend 0)": {"method": "procrustes", "blend": 0.0, **words},
        'projection "1" + words': {"method": "projection", "anchors": ["1"], **words},
    }


def folder_name(label: str) -> str:
    return label.replace('"', "").replace(" + ", "-").replace(" ", "-")


def made_with(folder: Path, options: dict) -> bool:
    """Whether `folder` holds an enrich output made with these options."""
    record = folder / "langswap.json"
    if not record.is_file():
        return False
    config = json.loads(record.read_text(encoding="utf-8"))["config"]
    return all(config.get(key) == value for key, value in options.items())


def measure(folder: Path, lines: list[str], args) -> dict:
    from langswap.evaluation.language_modeling import evaluate_model
    from langswap.evaluation.probes import ProbeConfig, pos_probe
    from langswap.models import load_model, load_tokenizer

    clock = time.perf_counter()
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    score = evaluate_model(model, tokenizer, lines, "causal")
    row = {"bits_per_byte": round(score.bits_per_byte, 4), "tokens": score.tokens, "bytes": score.bytes}
    if not args.skip_probe:
        ud = args.data / "ud"
        config = ProbeConfig(max_sentences=args.probe_sentences) if args.probe_sentences else ProbeConfig()
        probe = pos_probe(model, ud / "de_gsd-ud-dev.conllu", ud / "de_gsd-ud-test.conllu", config,
                          tokenizer=tokenizer)
        row.update(pos_accuracy=round(probe.accuracy, 4), pos_majority=round(probe.majority_baseline, 4))
    row["measure_seconds"] = round(time.perf_counter() - clock)
    return row


def main(argv=None) -> int:
    args = parse_args(argv)
    needed = [args.data / "splits" / "de.train.txt", args.data / "splits" / "de.test.txt",
              args.data / "dicts" / "muse-en-de.tsv", args.data / "ud" / "de_gsd-ud-dev.conllu"]
    if not shared_data_ready("bench_tema", args.data, needed):
        return 0
    from langswap.demo.smollm2 import smollm2_135m
    from langswap.enrich import EnrichConfig, enrich
    from langswap.resources.text import read_text_lines

    l2 = build_l2(args)
    l1 = smollm2_135m()
    lines = read_text_lines(args.data / "splits" / "de.test.txt", "held-out text", max_lines=args.eval_lines)
    RESULTS.mkdir(parents=True, exist_ok=True)
    results_path = RESULTS / "results.json"
    setup = {"l1": "SmolLM2-135M-Instruct (langswap.demo.smollm2)", "l2": str(l2).replace(str(Path.home()), "~"),
             "layers": args.layers, "vocab_size": args.vocab_size, "l2_steps": args.steps,
             "batch_size": args.batch_size, "sequence_length": args.sequence_length, "eval_lines": args.eval_lines,
             "probe_sentences": args.probe_sentences}
    previous = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else {}
    rows = previous.get("rows", {}) if previous.get("setup") == setup else {}

    jobs = [("L2 (as trained)", l2, None)] + [(label, args.workdir / "enriched" / folder_name(label), options)
                                                 for label, options in variants(args).items()]
    for label, folder, options in jobs:
        if label in rows and rows[label].get("options") == options:
            continue
        row = {"options": options}
        if options is not None and not made_with(folder, options):
            clock = time.perf_counter()
            dictionary = args.data / "dicts" / "muse-en-de.tsv"
            enrich(EnrichConfig(l1=str(l1), l2=str(l2), dictionary=str(dictionary), output=str(folder),
                                overwrite=True, seed=args.seed, language="de", **options))
            row["enrich_seconds"] = round(time.perf_counter() - clock)
        if options is not None:
            record = json.loads((folder / "langswap.json").read_text(encoding="utf-8"))
            row.update(pairs=record["counts"]["translation_pairs"], rows_changed=record["counts"]["rows_changed"],
                       words_added=record["counts"]["words_added"], change_mean=record["change_norm"]["mean"],
                       change_max=record["change_norm"]["max"])
        row.update(measure(folder, lines, args))
        rows[label] = row
        print(json.dumps({label: row}), flush=True)
        results_path.write_text(json.dumps({"setup": setup, "rows": rows}, indent=2) + "\n", encoding="utf-8")

    table = format_table(rows, args)
    (RESULTS / "table.md").write_text(table, encoding="utf-8")
    print(table, end="", flush=True)
    return 0


def format_table(rows: dict[str, dict], args) -> str:
    probe = not args.skip_probe
    header = "| model | bits per byte | rows changed | words added | mean change norm |" + (
        " POS probe accuracy |" if probe else "")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for label, row in rows.items():
        cells = [label, f"{row['bits_per_byte']:.4f}", f"{row.get('rows_changed', '-'):,}" if "rows_changed" in row
                 else "-", f"{row['words_added']:,}" if "words_added" in row else "-",
                 f"{row['change_mean']:.4f}" if "change_mean" in row else "-"]
        if probe:
            cells.append(f"{row['pos_accuracy']:.4f}" if "pos_accuracy" in row else "-")
        lines.append("| " + " | ".join(cells) + " |")
    majority = next((row["pos_majority"] for row in rows.values() if "pos_majority" in row), None)
    note = f"\nPOS majority-tag baseline: {majority:.4f}.\n" if probe and majority is not None else ""
    return "\n".join(lines) + "\n" + note


if __name__ == "__main__":
    sys.exit(main())
