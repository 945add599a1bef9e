"""Print this folder's tables from the bench results they come from (bits per byte on development lines drawn like
the test split; the test splits are not read):

    python benchmarks/results/calibration-start/tables.py

Each row is a bench entry as `bench_calibration.py --entries` names it, each column a step; a result missing from
the files is shown as `-`.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent

TABLES = {
    "German, 200 kB (calibration-de-200k-10000-testlike-dev)": (
        "calibration-de-200k-10000-testlike-dev",
        ["overlap raw", "overlap cal", "overlap cal lower_min_count=0",
         "overlap cal smoothing=0.5 lower_min_count=0", "overlap cal frequencies=held-out lower_min_count=0",
         "combined raw", "combined cal", "combined cal smoothing=0.5 lower_min_count=0",
         "combined cal method.mode=choose", "overlap cal rows=auto", "fvt length cal", "tiktotok dictionary cal"]),
    "Swahili, 200 kB (calibration-sw-200k-10000-testlike-dev)": (
        "calibration-sw-200k-10000-testlike-dev",
        ["overlap raw", "overlap cal", "overlap cal lower_min_count=0 train.calibration=spare-rare",
         "overlap cal smoothing=0.5 lower_min_count=0", "overlap cal frequencies=held-out lower_min_count=0",
         "combined raw", "combined raw train.seed=1", "combined cal", "combined cal train.seed=1",
         "combined cal lower_min_count=0 train.calibration=spare-rare", "overlap cal rows=auto",
         "fvt length cal", "tiktotok dictionary cal"]),
    "Swahili, the whole split, a 16,000-token tokenizer (calibration-sw-full-16000-testlike-dev)": (
        "calibration-sw-full-16000-testlike-dev", ["combined raw", "combined cal",
                                                   "combined cal smoothing=0.5 lower_min_count=0"]),
    "German, the whole split, a 49,152-token tokenizer (calibration-de-full-49152-testlike-dev)": (
        "calibration-de-full-49152-testlike-dev", ["combined raw", "combined cal"]),
    "Swahili, 200 kB, word vectors given (calibration-sw-200k-10000-testlike-vectors-dev)": (
        "calibration-sw-200k-10000-testlike-vectors-dev", ["combined raw", "combined cal"]),
    "German, 200 kB, Gemma-3's family (calibration-de-200k-10000-testlike-gemma3-dev)": (
        "calibration-de-200k-10000-testlike-gemma3-dev", ["combined raw method.unmatched_special=fallback",
                                                          "combined cal method.unmatched_special=fallback"]),
    "English, 2 MB, a 32,000-token tokenizer (calibration-en-2000k-32000-testlike-dev)": (
        "calibration-en-2000k-32000-testlike-dev", ["overlap raw", "overlap cal", "overlap cal rows=new",
                                                    "overlap cal rows=auto"]),
}


def results(folder: str) -> dict:
    found = {}
    path = RESULTS / folder / "results.jsonl"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            found[(row["variant"], row["step"])] = row["bits_per_byte"]
    return found


def main() -> None:
    for title, (folder, entries) in TABLES.items():
        found = results(folder)
        steps = sorted({step for _, step in found}) or [0]
        reference = found.get(("source model, own tokenizer (reference)", 0))
        print(f"{title}; the source model with its own tokenizer: {reference if reference is not None else '-'}\n")
        print("| entry | " + " | ".join(f"step {step}" for step in steps) + " |")
        print("|---|" + "---|" * len(steps))
        for entry in entries:
            cells = [found.get((entry, step)) for step in steps]
            print(f"| {entry} | " + " | ".join("-" if cell is None else f"{cell:.4f}" for cell in cells) + " |")
        print()


if __name__ == "__main__":
    main()
