"""Do development lines drawn like the test split pick the same rule as the slice's own last lines?

Reads two runs of benchmarks/bench_calibration.py on the same entries and steps, one with `--dev-draw test-like` and
one with `--dev-draw tail`, and prints, per language, step and method, each entry's bits per byte on its own
development lines, which entry each draw picks (the lowest), and whether the two draws rank every pair of entries the
same way:

    python benchmarks/results/dev-draws/compare_dev_draws.py \
        --pair sw benchmarks/results/calibration-sw-200k-10000-testlike-dev \
                  benchmarks/results/calibration-sw-200k-10000-tail-step0-dev \
        --pair de benchmarks/results/calibration-de-200k-10000-testlike-dev \
                  benchmarks/results/calibration-de-200k-10000-tail-step0-dev
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path


def figures(folder: Path) -> dict[tuple[str, int], float]:
    """(entry label, step) -> bits per byte, from a bench's results.jsonl (the reference row left out)."""
    rows = [json.loads(line) for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines() if line]
    return {(row["variant"], row["step"]): row["bits_per_byte"] for row in rows
            if "reference" not in row["variant"] and row.get("bits_per_byte") is not None}


def compare(language: str, new: Path, old: Path) -> list[str]:
    a, b = figures(new), figures(old)
    shared = sorted(set(a) & set(b))
    lines = [f"### {language}: test-like ({new.name}) against tail ({old.name})", "",
             "| entry | step | test-like | tail |", "|---|---|---|---|"]
    lines += [f"| {label} | {step} | {a[(label, step)]:.4f} | {b[(label, step)]:.4f} |" for label, step in shared]
    lines.append("")
    for step in sorted({step for _, step in shared}):
        for method in sorted({label.split()[0] for label, _ in shared}):
            labels = [label for label, s in shared if s == step and label.split()[0] == method]
            if len(labels) < 2:
                continue
            pick_a = min(labels, key=lambda label: a[(label, step)])
            pick_b = min(labels, key=lambda label: b[(label, step)])
            pairs = list(itertools.combinations(labels, 2))
            same = sum((a[(x, step)] < a[(y, step)]) == (b[(x, step)] < b[(y, step)]) for x, y in pairs)
            lines.append(f"- {method}, step {step}: test-like picks `{pick_a}`, tail picks `{pick_b}` "
                         f"({'the same' if pick_a == pick_b else 'different'}); {same} of {len(pairs)} pairs "
                         "ranked alike")
    return lines + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pair", nargs=3, action="append", metavar=("LANGUAGE", "TEST_LIKE", "TAIL"), required=True)
    args = parser.parse_args(argv)
    for language, new, old in args.pair:
        print("\n".join(compare(language, Path(new), Path(old))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
