"""SmolLM2-135M -> German or Swahili: Tik-to-Tok's three variants against wechsel, overlap and random.

A `langswap bench` run on the shared data: bits per byte on the first 300 lines of the language's test split at the
given steps of embedding-only training (`train.preset: embeddings`, batch 2 x 128, as bench_german_training.py),
beside bits per byte on the first 300 lines of splits/en.test.txt read with each model's own tokenizer.
Methods: random, overlap (= fvt with the mean of pieces), fvt with pieces weighted by length, wechsel (fastText
vectors of both languages aligned on the dictionary) and tiktotok with
`variant` shared, dictionary and full (the paper's ablation; the bilingual fastText model of the dictionary is built
once and cached).

- German: the tokenizer (49,152) and fastText vectors bench_quality.py caches (built the same way when missing);
  MUSE en-de (101,931 pairs).
- Swahili: a tokenizer of 16,384 tokens and fastText vectors trained on splits/sw.train.txt (7,353 verses; minCount
  2), English vectors as for German; FreeDict en-sw (1,434 pairs): the low-resource case Tik-to-Tok was made for.

The bench folder (default ~/.cache/langswap/bench-tiktotok-LANG) is resumable: rerun the same command after an
interruption, or with more steps (measurements already made are read back). Table, results and plot are copied to
benchmarks/results/tiktotok-LANG/.

    python benchmarks/bench_tiktotok.py --language de --steps 0
    python benchmarks/bench_tiktotok.py --language sw --steps 0 200
    python benchmarks/bench_tiktotok.py --language sw --bilingual-epochs 20 --methods "tiktotok full"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_german_training import (DEFAULT_DATA, QUALITY_CACHE, REPO, cached_resources,  # noqa: E402
                                   run_and_record, shared_data_ready)

METHODS = [{"name": "random"}, {"name": "overlap"}, {"name": "fvt", "label": "fvt length", "weighting": "length"},
           {"name": "wechsel"},
           {"name": "tiktotok", "label": "tiktotok shared", "variant": "shared"},
           {"name": "tiktotok", "label": "tiktotok dictionary", "variant": "dictionary"},
           {"name": "tiktotok", "label": "tiktotok full", "variant": "full"}]
DICTIONARIES = {"de": "muse-en-de.tsv", "sw": "freedict-en-sw.tsv"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted(DICTIONARIES), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--steps", type=int, nargs="+", default=[0, 200])
    parser.add_argument("--eval-lines", type=int, default=300)
    parser.add_argument("--methods", nargs="+", default=None, help="Labels of METHODS to run (default all).")
    parser.add_argument("--bilingual-epochs", type=int, default=None, help="fastText epochs of the bilingual model "
                        "(default Tik-to-Tok's 5); another value runs into WORKDIR-epochsN and "
                        "benchmarks/results/tiktotok-LANG-epochsN/.")
    return parser.parse_args(argv)


def swahili_resources(data: Path, model: Path) -> dict:
    """A Swahili tokenizer (16,384) and fastText vectors of sw.train; English vectors as bench_quality.py's."""
    from langswap.files import atomic_directory
    from langswap.models import load_tokenizer
    from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
    from langswap.resources.tokenizer import train_tokenizer

    english = cached_resources(data, model)["vectors"]["en"]
    vectors = QUALITY_CACHE / "fasttext-sw-100d-10ep-min2.bin"
    if not vectors.exists():
        print(f"training {vectors.name}", flush=True)
        train_fasttext(data / "splits" / "sw.train.txt", vectors, FastTextConfig(dim=100, epoch=10, minCount=2))
    tokenizer = QUALITY_CACHE / "tokenizer-sw-16384"
    if not (tokenizer / "tokenizer.json").exists():
        print("training the Swahili tokenizer", flush=True)
        with atomic_directory(tokenizer, overwrite=True) as folder:
            train_tokenizer(load_tokenizer(model), data / "splits" / "sw.train.txt", 16384).save_pretrained(folder)
    return {"tokenizer": tokenizer, "vectors": {"en": english, "sw": vectors}}


def language_bench(args, script: str, workdir: Path, methods: list[dict], resources: dict | None = None) -> dict | None:
    """The bench config of SmolLM2-135M -> args.language on the shared data (tokenizer, word vectors and dictionary
    as this module's docstring says, embedding-only training of batch 2 x 128), with `resources` added; None (after
    saying so) when the shared data is not there."""
    language = args.language
    splits = args.data / "splits"
    dictionary = args.data / "dicts" / DICTIONARIES[language]
    needed = [splits / f"{language}.train.txt", splits / f"{language}.test.txt", dictionary, splits / "en.train.txt",
              splits / "en.test.txt"]
    if not shared_data_ready(script, args.data, needed):
        return None
    from langswap.demo.smollm2 import smollm2_135m

    model = smollm2_135m()
    built = cached_resources(args.data, model) if language == "de" else swahili_resources(args.data, model)
    return {
        "source_model": str(model), "target_tokenizer": str(built["tokenizer"]), "language": language,
        "train_text": str(splits / f"{language}.train.txt"), "eval_text": str(splits / f"{language}.test.txt"),
        "eval_lines": args.eval_lines, "source_text": str(splits / "en.test.txt"), "output": str(workdir),
        "steps": args.steps, "methods": methods,
        "resources": {"source_vectors": str(built["vectors"]["en"]),
                      "target_vectors": str(built["vectors"][language]), "dictionary": str(dictionary),
                      **(resources or {})},
        "train": {"preset": "embeddings", "batch_size": 2, "sequence_length": 128, "save_steps": 25,
                  "logging_steps": 5, "max_lines": 20000},
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    language = args.language
    tag = f"-epochs{args.bilingual_epochs}" if args.bilingual_epochs else ""
    workdir = args.workdir or Path(f"~/.cache/langswap/bench-tiktotok-{language}{tag}").expanduser()
    methods = [m for m in METHODS if args.methods is None or m.get("label", m["name"]) in args.methods]
    bench = language_bench(args, "bench_tiktotok", workdir, methods,
                           {"bilingual_epochs": args.bilingual_epochs} if args.bilingual_epochs else None)
    if bench is None:
        return 0
    run_and_record(bench, REPO / "benchmarks" / "results" / f"tiktotok-{language}{tag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
