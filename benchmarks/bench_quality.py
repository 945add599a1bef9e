"""Quality benchmark: SmolLM2-135M (English) to German, every method and fallback, against the `wechsel` package.

Reads the fixed splits of the shared benchmark data (default /work/shared/data; see its README.md), never copies
them. Steps, with the slow artefacts cached in a work folder outside the repository (default
~/.cache/langswap/bench-quality) so that a rerun only scores:

1. a German tokenizer of SmolLM2's family trained on splits/de.train.txt (vocabulary 49,152);
2. fastText vectors (skipgram, dim 100, 10 epochs, minCount 3, n-grams 3-6 by default) on de.train and en.train;
3. alignment of the two with the MUSE en-de dictionary (`langswap.transfer.prepare_vectors`): held-out
   precision@1, nearest neighbour and CSLS;
4. bits per byte and token perplexity on the first 300 lines of splits/de.test.txt for the source model with its
   own tokenizer, `random`, `overlap` x 3 fallbacks, `wechsel` (subword_source ngrams and frequency) x 3 fallbacks;
5. the `wechsel` package (pip `wechsel`) on the same fastText models, dictionary, tokenizers and source matrix:
   its apply() timed, its matrix scored as it comes and with its random rows (info.not_found) set to the source
   mean row;
6. a whole `langswap transfer` (method wechsel, same inputs, no eval_text) into a temporary folder, timed.

Prints a table and writes results.json and results.md to --output (default benchmarks/results/quality-de/).
Run: nice -n 10 python benchmarks/bench_quality.py [--dim 100] [--epochs 10] [--eval-lines 300]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import io
import json
import logging
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("LANGSWAP_BENCH_DATA", "/work/shared/data"))
DEFAULT_OUTPUT = REPO / "benchmarks" / "results" / "quality-de"
DEFAULT_WORKDIR = Path("~/.cache/langswap/bench-quality").expanduser()

# Figures measured on the same splits by others, for scale (bits per byte).
REFERENCE = {"source model, its own tokenizer": 2.15, "uniform predictor": 2.99, "wechsel package": 3.85,
             "wechsel package, random rows -> mean": 2.97, "exact matches copied + mean elsewhere": 2.93,
             "FVT": 2.55, "random": 5.94}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="Shared benchmark data folder.")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="Folder for results.json/results.md.")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR,
                        help="Cache of the tokenizer and fastText models (outside the repository).")
    parser.add_argument("--vocab-size", type=int, default=49152, help="German tokenizer size.")
    parser.add_argument("--dim", type=int, default=100, help="fastText dimension.")
    parser.add_argument("--epochs", type=int, default=10, help="fastText epochs.")
    parser.add_argument("--min-count", type=int, default=3, help="fastText minCount.")
    parser.add_argument("--eval-lines", type=int, default=300, help="First lines of de.test scored.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of every langswap method.")
    parser.add_argument("--skip-package", action="store_true", help="Do not run the `wechsel` package.")
    parser.add_argument("--skip-transfer", action="store_true", help="Do not time a whole `langswap transfer`.")
    parser.add_argument("--redo", action="store_true", help="Rebuild the cached tokenizer and fastText models.")
    return parser.parse_args(argv)


class Results:
    """Rows and facts, written after every step so a crash keeps what was measured."""

    def __init__(self, output: Path, meta: dict):
        self.output = output
        self.data = {"meta": meta, "alignment": None, "rows": [], "timings": {}, "package": {}, "reference": REFERENCE}

    def add_row(self, name: str, method: str, fallback: str, score, counts, seconds: float | None = None,
                config: dict | None = None):
        row = {"model": name, "method": method, "fallback": fallback, **score.as_dict(), "counts": counts,
               "method_seconds": None if seconds is None else round(seconds, 2), "config": config}
        self.data["rows"].append(row)
        print(f"    {name + ', ' + fallback:<56} {row['bits_per_byte']:.3f} bits/byte  "
              f"ppl {row['perplexity']:.1f}  "
              f"({row['tokens']:,} tokens)", flush=True)
        self.save()

    def save(self):
        self.output.mkdir(parents=True, exist_ok=True)
        (self.output / "results.json").write_text(json.dumps(self.data, indent=2, ensure_ascii=False) + "\n",
                                                  encoding="utf-8")
        (self.output / "results.md").write_text(markdown(self.data), encoding="utf-8")


def markdown(data: dict) -> str:
    meta = data["meta"]
    out = ["# Quality: SmolLM2-135M to German", "",
           f"First {meta['eval_lines']} lines of `splits/de.test.txt` ({meta.get('eval_bytes', '?'):,} bytes); "
           f"German tokenizer of {meta['vocab_size']:,} tokens trained on `splits/de.train.txt`; fastText "
           f"{meta['fasttext']}; dictionary `dicts/muse-en-de.tsv`. Bits per byte compare across tokenizers, token "
           "perplexity does not.", "",
           "| model | fallback | bits per byte | perplexity | tokens | rows made |", "|---|---|---|---|---|---|"]
    for row in data["rows"]:
        counts = row["counts"] if isinstance(row["counts"], str) else ", ".join(
            f"{k} {v:,}" for k, v in row["counts"].items())
        out.append(f"| {row['model']} | {row['fallback']} | {row['bits_per_byte']:.3f} | {row['perplexity']:.1f} | "
                   f"{row['tokens']:,} | {counts} |")
    alignment = data.get("alignment")
    if alignment:
        out += ["", "## Alignment (langswap `prepare_vectors`)", "",
                f"{alignment.get('word_pairs', 0):,} word pairs from {alignment.get('dictionary_entries', 0):,} "
                f"entries ({alignment.get('entries_covered', 0):,} covered); held-out precision@1 "
                f"{alignment.get('precision_at_1')} (nearest neighbour), {alignment.get('precision_at_1_csls')} "
                f"(CSLS) on {alignment.get('queries')} source words."]
    if data.get("package"):
        package = data["package"]
        out += ["", "## `wechsel` package", ""]
        out += [f"- {key}: {value}" for key, value in package.items() if key != "not_found_sample"]
        if package.get("not_found_sample"):
            out.append(f"- sample of its random rows: {', '.join(repr(t) for t in package['not_found_sample'])}")
    if data.get("timings"):
        out += ["", "## Timings (seconds)", ""]
        out += [f"- {key}: {value}" for key, value in data["timings"].items()]
    out += ["", "## Reference figures measured by others on the same splits (bits per byte)", ""]
    out += [f"- {key}: {value}" for key, value in data["reference"].items()]
    return "\n".join(out) + "\n"


def source_model_folder() -> Path:
    """The local SmolLM2-135M folder; retried for a while, since another process may still be converting it."""
    from langswap.demo.smollm2 import smollm2_135m

    for attempt in range(6):
        try:
            return smollm2_135m()
        except Exception as error:  # noqa: BLE001 - a half-written module or a rival conversion
            if attempt == 5:
                raise
            print(f"    smollm2_135m() failed ({type(error).__name__}: {error}); retrying in 60 s", flush=True)
            time.sleep(60)
    raise AssertionError("unreachable")


def main(argv=None) -> int:
    args = parse_args(argv)
    splits, dictionary = args.data / "splits", args.data / "dicts" / "muse-en-de.tsv"
    needed = [splits / "de.train.txt", splits / "de.test.txt", splits / "en.train.txt", dictionary]
    missing = [str(path) for path in needed if not path.is_file()]
    if missing:
        print(f"bench_quality: the shared benchmark data is not available (missing: {', '.join(missing)}). "
              "Give its folder with --data or LANGSWAP_BENCH_DATA; nothing was run.")
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    started = time.perf_counter()
    workdir = args.workdir.expanduser()
    workdir.mkdir(parents=True, exist_ok=True)

    # fastText first: it trains in a child process anyway, but nothing here has touched a HF tokenizer yet.
    from langswap.resources.fasttext_train import FastTextConfig, train_fasttext

    ft_config = FastTextConfig(dim=args.dim, epoch=args.epochs, minCount=args.min_count)
    print(f"1/7 fastText vectors (skipgram, dim {args.dim}, {args.epochs} epochs, minCount {args.min_count}, "
          f"n-grams {ft_config.minn}-{ft_config.maxn}) in {workdir}", flush=True)
    vectors, timings = {}, {}
    for language in ("en", "de"):
        path = workdir / f"fasttext-{language}-{args.dim}d-{args.epochs}ep-min{args.min_count}.bin"
        if args.redo or not path.exists():
            clock = time.perf_counter()
            train_fasttext(splits / f"{language}.train.txt", path, ft_config)
            timings[f"fasttext_train_{language}"] = round(time.perf_counter() - clock, 1)
            print(f"    trained {path.name} in {timings[f'fasttext_train_{language}']:.0f} s", flush=True)
        else:
            print(f"    cached {path.name}", flush=True)
        vectors[language] = path

    import torch

    from langswap.config import to_dict
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.methods.base import TransferInputs, make_config
    from langswap.models import load_model, load_tokenizer
    from langswap.transfer import ResourcesConfig, apply_method, prepare_vectors
    from langswap.resources.alignment import AlignConfig
    from langswap.files import atomic_directory
    from langswap.resources.text import read_text_lines
    from langswap.surgery import read_source_matrices
    from langswap.resources.tokenizer import train_tokenizer
    from langswap.tokens import Vocabulary

    print("2/7 source model SmolLM2-135M", flush=True)
    model_dir = source_model_folder()
    source_tokenizer = load_tokenizer(model_dir, "source tokenizer")
    model = load_model(model_dir)

    print(f"3/7 German tokenizer ({args.vocab_size:,} tokens) trained on de.train", flush=True)
    tokenizer_dir = workdir / f"tokenizer-de-{args.vocab_size}"
    if args.redo or not (tokenizer_dir / "tokenizer.json").exists():
        clock = time.perf_counter()
        with atomic_directory(tokenizer_dir, overwrite=True) as folder:
            train_tokenizer(source_tokenizer, splits / "de.train.txt", args.vocab_size).save_pretrained(folder)
        timings["tokenizer_train"] = round(time.perf_counter() - clock, 1)
    target_tokenizer = load_tokenizer(tokenizer_dir, "German tokenizer")

    lines = read_text_lines(splits / "de.test.txt", "German test text", max_lines=args.eval_lines)
    meta = {"source_model": str(model_dir), "target_tokenizer": str(tokenizer_dir), "vocab_size": len(target_tokenizer),
            "eval_lines": len(lines), "eval_bytes": sum(len(line.encode("utf-8")) for line in lines),
            "fasttext": f"skipgram dim {args.dim}, {args.epochs} epochs, minCount {args.min_count}, n-grams "
                        f"{ft_config.minn}-{ft_config.maxn}",
            "vectors": {language: str(path) for language, path in vectors.items()}, "data": str(args.data),
            "seed": args.seed, "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "torch": torch.__version__}
    results = Results(args.output, meta)
    results.data["timings"] = timings

    print("4/7 alignment with the MUSE en-de dictionary (prepare_vectors)", flush=True)
    resources = ResourcesConfig(source_vectors=str(vectors["en"]), target_vectors=str(vectors["de"]),
                                dictionary=str(dictionary))
    clock = time.perf_counter()
    source_vectors, target_vectors, alignment = prepare_vectors(resources, AlignConfig())
    timings["langswap_prepare_vectors"] = round(time.perf_counter() - clock, 1)
    results.data["alignment"] = alignment
    print(f"    {alignment['word_pairs']:,} word pairs ({alignment['entries_covered']:,} of "
          f"{alignment['dictionary_entries']:,} entries covered); held-out precision@1 "
          f"{alignment['precision_at_1']} (CSLS {alignment['precision_at_1_csls']}) on {alignment['queries']} "
          f"words ({timings['langswap_prepare_vectors']:.0f} s)", flush=True)
    results.save()

    print(f"5/7 scoring the first {len(lines)} lines of de.test", flush=True)
    results.add_row("source model, its own tokenizer", "-", "-", causal_lm_score(model, source_tokenizer, lines),
                    "-")
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    matrices = read_source_matrices(model, len(source))
    inputs = TransferInputs(source, target, matrices.embeddings, source_vectors, target_vectors)
    # Options that changed defaults are spelled out, so a row means the same whatever the current defaults are.
    every = ("random", "mean", "subword")
    runs = [("random", "random", {}, ("random",)),
            ("overlap", "overlap", {}, every),
            ("wechsel (ngrams)", "wechsel", {"subword_source": "ngrams", "exact_matches": False}, every),
            ("wechsel (ngrams, match_word_start=false)", "wechsel",
             {"subword_source": "ngrams", "exact_matches": False, "match_word_start": False}, ("random",)),
            ("wechsel (ngrams, exact_matches=true)", "wechsel", {"subword_source": "ngrams", "exact_matches": True},
             every),
            ("wechsel (frequency)", "wechsel", {"subword_source": "frequency", "exact_matches": False}, every)]
    for label, name, options, fallbacks in runs:
        for fallback in fallbacks:
            config = make_config(name, seed=args.seed, fallback=fallback, **options)
            clock = time.perf_counter()
            transferred, result, _ = apply_method(model, inputs, matrices, config, copy=True)
            seconds = time.perf_counter() - clock
            score = causal_lm_score(transferred, target_tokenizer, lines)
            results.add_row(label, name, fallback, score, result.mapping.counts(), seconds, to_dict(config))
            del transferred, result
            gc.collect()

    if not args.skip_package:
        print("6/7 the `wechsel` package on the same inputs", flush=True)
        run_package(results, model, source_tokenizer, target_tokenizer, matrices, vectors, dictionary, lines)
    if not args.skip_transfer:
        print("7/7 a whole `langswap transfer` (method wechsel, no eval_text)", flush=True)
        run_transfer(results, model_dir, tokenizer_dir, resources, args.seed)

    timings["benchmark_total"] = round(time.perf_counter() - started, 1)
    results.save()
    print()
    print(markdown(results.data))
    print(f"wrote {args.output / 'results.json'} and {args.output / 'results.md'}")
    return 0


def run_package(results: Results, model, source_tokenizer, target_tokenizer, matrices, vectors, dictionary, lines):
    """The `wechsel` package: WECHSEL(...).apply(...), scored as is and with its random rows set to the mean."""
    import fasttext
    import numpy as np
    import torch

    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.surgery import install_embeddings, update_special_token_ids

    try:
        from wechsel import WECHSEL
    except ImportError as error:
        print(f"    skipped: the wechsel package cannot be imported ({error}); pip install wechsel", flush=True)
        results.data["package"] = {"skipped": str(error)}
        return
    import wechsel as wechsel_package

    fasttext.FastText.eprint = lambda *args, **kwargs: None
    timings = results.data["timings"]
    clock = time.perf_counter()
    source_ft, target_ft = fasttext.load_model(str(vectors["en"])), fasttext.load_model(str(vectors["de"]))
    aligner = WECHSEL(source_ft, target_ft, bilingual_dictionary=str(dictionary))
    timings["package_init_load_and_align"] = round(time.perf_counter() - clock, 1)
    source_matrix = matrices.embeddings.numpy().astype(np.float32)
    clock = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # the package's progress bar cannot be switched off
        matrix, info = aligner.apply(source_tokenizer, target_tokenizer, source_matrix)
    timings["package_apply"] = round(time.perf_counter() - clock, 1)
    not_found_ids = sorted(set(target_tokenizer.convert_tokens_to_ids(list(info.not_found))))
    results.data["package"] = {"version": getattr(wechsel_package, "__version__", "?"),
                               "rows": int(matrix.shape[0]), "random_rows": len(info.not_found),
                               "random_rows_unique_ids": len(not_found_ids),
                               "init_seconds": timings["package_init_load_and_align"],
                               "apply_seconds": timings["package_apply"],
                               "not_found_sample": list(info.not_found[:20])}
    print(f"    apply() {timings['package_apply']:.1f} s (init + alignment "
          f"{timings['package_init_load_and_align']:.1f} s); {len(info.not_found):,} rows random", flush=True)
    matrix = torch.from_numpy(np.asarray(matrix, dtype=np.float32))
    for label, fallback, table in (("wechsel package", "random (package)", matrix),
                                   ("wechsel package, random rows -> mean", "mean", None)):
        if table is None:
            table = matrix.clone()
            if not_found_ids:
                table[torch.as_tensor(not_found_ids)] = matrices.embeddings.mean(dim=0)
        transferred = copy.deepcopy(model)
        install_embeddings(transferred, table)
        update_special_token_ids(transferred, target_tokenizer)
        counts = {"mixed": int(matrix.shape[0]) - len(not_found_ids),
                  ("random" if fallback.startswith("random") else "mean"): len(not_found_ids)}
        results.add_row(label, "wechsel package", fallback, causal_lm_score(transferred, target_tokenizer, lines),
                        counts)
        del transferred
        gc.collect()


def run_transfer(results: Results, model_dir: Path, tokenizer_dir: Path, resources, seed: int):
    """Time pipeline.transfer end to end (load, align, method, write) into a temporary folder."""
    from langswap.methods.base import make_config
    from langswap.transfer import TransferConfig, transfer

    with tempfile.TemporaryDirectory(prefix="bench-quality-transfer-") as folder:
        config = TransferConfig(source_model=str(model_dir), target_tokenizer=str(tokenizer_dir),
                                output=str(Path(folder) / "model"), method=make_config("wechsel", seed=seed),
                                resources=resources)
        clock = time.perf_counter()
        report = transfer(config)
        total = time.perf_counter() - clock
    timings = results.data["timings"]
    timings["langswap_transfer_total"] = round(total, 1)
    for key, value in report.seconds.items():
        timings[f"langswap_transfer_{key}"] = round(value, 1)
    from langswap.config import to_dict

    results.data["transfer_method"] = to_dict(config.method)
    results.data["transfer_counts"] = report.counts
    results.save()
    print(f"    transfer {total:.1f} s in all ({', '.join(f'{k} {v:.1f}' for k, v in report.seconds.items())})",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
