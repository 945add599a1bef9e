"""What the frequent tokens' start rows are made of: for each token whose row `start_rows: frequent` takes from the
`choose` candidate (the run shows it at least `--min-shows` times), whether the kept `mix` row holds the source
model's own row for the same string (its spelling evidence is one source token, the token itself), read from the
transfer's provenance table.

The run's shows are the token's count in the bench's training text (read by the target tokenizer) times the epochs
that `--steps` updates of 2 x 128 tokens read, as `langswap train` counts them.

    python benchmarks/results/calibration-start/start_rows_evidence.py \
        --bench ~/.cache/langswap/bench-calibration-de-200k-10000-testlike --steps 1000
    python benchmarks/results/calibration-start/start_rows_evidence.py \
        --bench ~/.cache/langswap/bench-calibration-sw-full-16000-testlike --steps 1000

Prints a JSON line: the tokens, how many have their own source row in the mix, and the first 20 of each kind with
their count and provenance.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from safetensors.torch import load_file

from langswap.models import load_tokenizer
from langswap.start_rows import START_FILE


def provenance(path: Path) -> dict[int, list[str]]:
    rows = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if parts and parts[0].isdigit():
            rows[int(parts[0])] = parts[1:]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", type=Path, required=True, help="A bench_calibration.py workdir.")
    parser.add_argument("--variant", default=None, help="Run folder name under bench/runs (default: the first with "
                                                        "start rows).")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--min-shows", type=float, default=150)
    args = parser.parse_args()
    runs = sorted((args.bench / "bench" / "runs").glob("*/transfer"))
    transfer = next(run for run in runs if (run / START_FILE).is_file() and
                    (args.variant is None or run.parent.name == args.variant))
    tokenizer = load_tokenizer(transfer)
    ids = load_file(str(transfer / START_FILE))["ids"].tolist()
    counts = Counter()
    for line in (args.bench / "train.txt").read_text(encoding="utf-8").splitlines()[:20000]:
        counts.update(tokenizer(line)["input_ids"])
    epochs = args.steps * 2 * 128 / sum(counts.values())
    table = provenance(transfer / "provenance.tsv")
    frequent = sorted((i for i in ids if counts[i] * epochs >= args.min_shows), key=lambda i: -counts[i])

    def own_row(token_id: int) -> bool:
        """Whether the mix holds a source token spelt as this token is (the token's own string)."""
        spelled = "'" + tokenizer.decode([token_id]).replace(" ", "_") + "'"  # as the provenance table spells it
        evidence = table.get(token_id, ["", "", ""])[-1].split()
        return any(piece.split(":", 1)[1].rsplit(":", 1)[0] == spelled for piece in evidence if ":" in piece)

    own = [i for i in frequent if own_row(i)]
    other = [i for i in frequent if not own_row(i)]

    def show(group):
        return [(tokenizer.decode([i]), counts[i], table.get(i, [""])[-1]) for i in group[:20]]

    print(json.dumps({"transfer": str(transfer), "epochs": round(epochs, 3), "start_rows": len(ids),
                      "frequent": len(frequent), "with_own_source_row": len(own), "without": len(other),
                      "own": show(own), "other": show(other)}, ensure_ascii=False))


if __name__ == "__main__":
    main()
