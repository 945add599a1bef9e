"""SmolLM2-135M -> German or Swahili: the peers' methods (FVT, FOCUS, WECHSEL, CLP, OMP) and RAMEN's against overlap,
random and langswap's `combined` (with the bench's dictionary and aligned vectors).

A `langswap bench` run on the shared data: bits per byte on the first 300 lines of the language's test split at the
given steps of embedding-only training (`train.preset: embeddings`, batch 2 x 128, as bench_german_training.py),
with the same tokenizers, word vectors and English lines as bench_tiktotok.py. FOCUS's token-level fastText model is
trained on the language's training split (`resources.token_text`) and cached. RAMEN's translation probabilities come
from the language's parallel text (`resources.parallel_text`: splits/en-sw.parallel.train.tsv, the New Testament
verses not in the test split; corpora/gettext.en-de.tsv, message catalogues), aligned by eflomal and cached, or from
the bench's aligned word vectors (`ramen vectors`).

The bench folder (default ~/.cache/langswap/bench-peers-LANG) is resumable; table, results and plot are copied to
benchmarks/results/peers-LANG/.

    python benchmarks/bench_peers.py --language de --steps 0
    python benchmarks/bench_peers.py --language sw --steps 0 200 --methods overlap focus
    python benchmarks/bench_peers.py --language sw --calibrate 0.5 1   # each method also frequency-calibrated
    python benchmarks/bench_peers.py --language sw --steps 0 200 --methods random overlap wechsel "ramen parallel" \
        "ramen vectors" --workdir ~/.cache/langswap/bench-ramen-sw
    python benchmarks/bench_peers.py --language de --helper ~/.cache/langswap/helper-de/l2-train-4layers-300steps/model

Adding --helper changes the resources every resource-using variant was made with, so those run again (give another
--workdir to keep both).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_german_training import DEFAULT_DATA, REPO, run_and_record  # noqa: E402
from bench_tiktotok import DICTIONARIES, language_bench  # noqa: E402

METHODS = [{"name": "random"}, {"name": "overlap"}, {"name": "fvt", "label": "fvt length", "weighting": "length"},
           {"name": "wechsel"}, {"name": "focus"}, {"name": "combined"},
           {"name": "ramen", "label": "ramen parallel"}, {"name": "ramen", "label": "ramen vectors",
                                                          "probabilities": "vectors"}]
PARALLEL = {"sw": "splits/en-sw.parallel.train.tsv", "de": "corpora/gettext.en-de.tsv"}
# with --helper (a model that uses the target tokenizer: benchmarks/train_tema_l2.py --tokenizer)
HELPER_METHODS = [{"name": "clp", "label": "clp top100", "neighbors": 100}, {"name": "omp"}]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted(DICTIONARIES), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--steps", type=int, nargs="+", default=[0])
    parser.add_argument("--eval-lines", type=int, default=300)
    parser.add_argument("--methods", nargs="+", default=None, help="Labels of METHODS to run (default all).")
    parser.add_argument("--calibrate", type=float, nargs="*", default=[], metavar="STRENGTH",
                        help="Also run each method with frequency calibration at these strengths (label + cal S).")
    parser.add_argument("--calibrate-rows", choices=("all", "new"), default="all")
    parser.add_argument("--calibrated-only", action="store_true", help="Run only the calibrated copies.")
    parser.add_argument("--helper", type=Path, default=None, help="A model with the target tokenizer; adds clp and "
                        "omp (benchmarks/train_tema_l2.py --tokenizer trains one).")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    language = args.language
    workdir = args.workdir or Path(f"~/.cache/langswap/bench-peers-{language}").expanduser()
    candidates = METHODS + (HELPER_METHODS if args.helper else [])
    methods = [m for m in candidates if args.methods is None or m.get("label", m["name"]) in args.methods]
    methods += [{**m, "label": f"{m.get('label', m['name'])} + cal {strength:g}",
                 "calibration": {"strength": strength, "rows": args.calibrate_rows}}
                for strength in args.calibrate for m in list(methods) if m["name"] != "random"]
    if args.calibrated_only:
        methods = [m for m in methods if "calibration" in m]
    resources = {"token_text": str(args.data / "splits" / f"{language}.train.txt"),
                 "parallel_text": str(args.data / PARALLEL[language]),
                 **({"helper_model": str(args.helper)} if args.helper else {})}
    bench = language_bench(args, "bench_peers", workdir, methods, resources)
    if bench is None:
        return 0
    results = f"peers-{language}" if args.workdir is None else args.workdir.name.removeprefix("bench-")
    run_and_record(bench, REPO / "benchmarks" / "results" / results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
