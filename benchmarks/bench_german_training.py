"""SmolLM2-135M -> German: bits per byte at step 0 and after short embedding-only training, per method.

A `langswap bench` run on the shared data (the fixed splits, MUSE en-de): the German tokenizer and the fastText
vectors are the ones benchmarks/bench_quality.py caches (built here the same way when missing), the methods are
random, overlap and wechsel, each measured on the first 300 lines of de.test.txt at steps 0, 50 and 200 of
embedding-only training (train.preset: embeddings) with a small batch on the CPU, beside bits per byte on the first
300 lines of en.test.txt read with each model's own tokenizer (what English keeps). Then a part-of-speech probe on
UD German-GSD (train on dev, test on test) for the source model and the step-0 random and wechsel models, and on
UD English-EWT for the source model as a reference.

The bench folder (default ~/.cache/langswap/bench-german) is resumable: rerun the same command after an interruption.
The table, results and plot are copied to benchmarks/results/training-de/ and docs/german-embedding-training.png.

    python benchmarks/bench_german_training.py [--steps 0 50 200] [--batch-size 2] [--sequence-length 128]
    python benchmarks/bench_german_training.py --seed 1 --methods overlap wechsel     # the same with another data order
    python benchmarks/bench_german_training.py --tag long --steps 0 200 600 --methods overlap wechsel   # longer
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("LANGSWAP_BENCH_DATA", REPO.parent / "shared" / "data"))
QUALITY_CACHE = Path("~/.cache/langswap/bench-quality").expanduser()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=Path("~/.cache/langswap/bench-german").expanduser())
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 50, 200])
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--eval-lines", type=int, default=300)
    parser.add_argument("--methods", nargs="+", default=["random", "overlap", "wechsel"])
    parser.add_argument("--skip-probe", action="store_true")
    parser.add_argument("--table7", action="store_true", help="Instead: WECHSEL's (k, temperature) grid with n-gram "
                        "and frequency subword vectors at the given steps (default step 0), into WORKDIR-table7.")
    parser.add_argument("--probe-sentences", type=int, default=None, help="Cap the sentences of each UD split.")
    parser.add_argument("--seed", type=int, default=0, help="Training seed (data order). Another seed runs into "
                        "WORKDIR-seedN, writes benchmarks/results/training-de-seedN/ and skips the probes, which "
                        "measure step-0 models only.")
    parser.add_argument("--tag", default=None, help="Run into WORKDIR-TAG and benchmarks/results/training-de-TAG/, "
                        "skipping the probes (e.g. --tag long --steps 0 200 600 for a longer schedule, which must "
                        "not replace the main figures).")
    return parser.parse_args(argv)


def cached_resources(data: Path, model: Path) -> dict:
    """German tokenizer (49,152 tokens) and fastText vectors as bench_quality.py makes them; built when missing."""
    from langswap.resources.fasttext_train import FastTextConfig, train_fasttext

    QUALITY_CACHE.mkdir(parents=True, exist_ok=True)
    vectors = {}
    for language in ("en", "de"):
        path = QUALITY_CACHE / f"fasttext-{language}-100d-10ep-min3.bin"
        if not path.exists():
            print(f"training {path.name}", flush=True)
            train_fasttext(data / "splits" / f"{language}.train.txt", path,
                           FastTextConfig(dim=100, epoch=10, minCount=3))
        vectors[language] = path
    tokenizer = QUALITY_CACHE / "tokenizer-de-49152"
    if not (tokenizer / "tokenizer.json").exists():
        from langswap.models import load_tokenizer
        from langswap.files import atomic_directory
        from langswap.resources.tokenizer import train_tokenizer

        print("training the German tokenizer", flush=True)
        with atomic_directory(tokenizer, overwrite=True) as folder:
            train_tokenizer(load_tokenizer(model), data / "splits" / "de.train.txt", 49152).save_pretrained(folder)
    return {"tokenizer": tokenizer, "vectors": vectors}


RECORDED = ("table.md", "results.jsonl", "bits_per_byte.png", "bench-input.yaml")


def run_and_record(bench: dict, results_dir: Path) -> dict:
    """Write bench-input.yaml into the bench folder, run the bench, print its table and time, and copy table,
    results, plot and input to `results_dir`; returns run_bench's result. A bench folder without results starts
    from those recorded in `results_dir` (the bench resumes from them). Entries without a `calibration:` section
    run uncalibrated (`strength: 0`)."""
    from langswap.bench import BenchConfig, run_bench
    from langswap.config import from_dict

    # the benchmarks measure each method alone: frequency calibration (a transfer's default for causal LMs) only
    # where an entry asks for it
    bench = {**bench, "methods": [entry if isinstance(entry, dict) and "calibration" in entry
                                  else {**({"name": entry} if isinstance(entry, str) else entry),
                                        "calibration": {"strength": 0}}
                                  for entry in bench["methods"]]}
    workdir = Path(bench["output"])
    workdir.mkdir(parents=True, exist_ok=True)
    recorded = results_dir / "results.jsonl"
    if not (workdir / "results.jsonl").exists() and recorded.is_file():
        # a bench folder made afresh (another machine, a cleared cache) resumes from the recorded measurements, so
        # the copy below keeps them beside the new ones
        shutil.copy2(recorded, workdir / "results.jsonl")
        print(f"bench folder {workdir} starts from the measurements recorded in {recorded}", flush=True)
    (workdir / "bench-input.yaml").write_text(yaml.safe_dump(bench, sort_keys=False), encoding="utf-8")
    clock = time.perf_counter()
    result = run_bench(from_dict(BenchConfig, bench), progress=False)
    print((workdir / "table.md").read_text(), flush=True)
    print(f"bench: {time.perf_counter() - clock:.0f} s", flush=True)
    results_dir.mkdir(parents=True, exist_ok=True)
    for name in RECORDED:
        if (workdir / name).exists():
            shutil.copy2(workdir / name, results_dir / name)
    return result


def shared_data_ready(script: str, data: Path, needed: list[Path]) -> bool:
    """Whether every file a benchmark needs is under the shared data folder `data` (when not, says so: the script
    then runs nothing); sets up logging for the run."""
    if not all(path.is_file() for path in needed):
        print(f"{script}: shared data not found under {data}; give --data. Nothing was run.")
        return False
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    return True


def main(argv=None) -> int:
    args = parse_args(argv)
    splits = args.data / "splits"
    needed = [splits / "de.train.txt", splits / "de.test.txt", splits / "en.test.txt",
              args.data / "dicts" / "muse-en-de.tsv"]
    if not shared_data_ready("bench_german_training", args.data, needed):
        return 0
    from langswap.demo.smollm2 import smollm2_135m

    model = smollm2_135m()
    resources = cached_resources(args.data, model)
    bench = {
        "source_model": str(model), "target_tokenizer": str(resources["tokenizer"]),
        "train_text": str(splits / "de.train.txt"), "eval_text": str(splits / "de.test.txt"),
        "eval_lines": args.eval_lines, "source_text": str(splits / "en.test.txt"), "output": str(args.workdir),
        "steps": args.steps, "methods": [{"name": name} for name in args.methods],
        "resources": {"source_vectors": str(resources["vectors"]["en"]),
                      "target_vectors": str(resources["vectors"]["de"]),
                      "dictionary": str(args.data / "dicts" / "muse-en-de.tsv")},
        "train": {"preset": "embeddings", "batch_size": args.batch_size, "sequence_length": args.sequence_length,
                  "save_steps": 25, "logging_steps": 5, "max_lines": 20000},
    }
    if args.table7:
        return run_table7(args, bench)
    results_dir = REPO / "benchmarks" / "results" / "training-de"
    if args.seed:
        bench["train"]["seed"] = args.seed
    tag = args.tag or (f"seed{args.seed}" if args.seed else None)
    if tag:
        args.workdir = args.workdir.with_name(f"{args.workdir.name}-{tag}")
        bench["output"] = str(args.workdir)
        results_dir = results_dir.with_name(f"training-de-{tag}")
        args.skip_probe = True
    result = run_and_record(bench, results_dir)
    if not tag:
        (REPO / "docs").mkdir(exist_ok=True)
        shutil.copy2(args.workdir / "bits_per_byte.png", REPO / "docs" / "german-embedding-training.png")

    if not args.skip_probe:
        probe_rows = run_probes(args, model, args.workdir)
        (results_dir / "pos-probe.json").write_text(json.dumps(probe_rows, indent=2) + "\n", encoding="utf-8")
    del result
    return 0


TABLE7_GRID = [{"neighbors": 1, "temperature": 1}, {"neighbors": [10, 50], "temperature": [0.1, 1]}]


def run_table7(args, bench: dict) -> int:
    """WECHSEL's Table 7 as a langswap bench grid: (k, t) in {(1,1), (10,0.1), (10,1), (50,0.1), (50,1)} with
    n-gram and frequency (TFR) subword vectors, the paper's other settings (no exact-match copy, no word-start
    matching, random fallback)."""
    steps = args.steps if args.steps != [0, 50, 200] else [0]
    workdir = args.workdir.with_name(args.workdir.name + "-table7")
    paper = {"exact_matches": False, "match_word_start": False, "fallback": "random"}
    bench = {**bench, "output": str(workdir), "steps": steps, "methods": [
        {"name": "wechsel", "label": f"wechsel {source}", "subword_source": source, **paper, "grid": TABLE7_GRID}
        for source in ("ngrams", "frequency")]}
    run_and_record(bench, REPO / "benchmarks" / "results" / "table7-de")
    return 0


def run_probes(args, model: Path, workdir: Path) -> list[dict]:
    from langswap.evaluation.probes import ProbeConfig, pos_probe

    ud = args.data / "ud"
    config = ProbeConfig(max_sentences=args.probe_sentences) if args.probe_sentences else ProbeConfig()
    jobs = [("source model (English SmolLM2, its own tokenizer)", model, "de_gsd")]
    for name in ("random", "wechsel"):
        if name in args.methods:
            jobs.append((f"{name} (step 0)", workdir / "runs" / name / "transfer", "de_gsd"))
    jobs.append(("source model (English SmolLM2, its own tokenizer)", model, "en_ewt"))
    rows = []
    for label, folder, treebank in jobs:
        clock = time.perf_counter()
        result = pos_probe(folder, ud / f"{treebank}-ud-dev.conllu", ud / f"{treebank}-ud-test.conllu", config)
        row = {"model": label, "treebank": treebank, **result.as_dict(), "seconds": round(time.perf_counter() - clock)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(main())
