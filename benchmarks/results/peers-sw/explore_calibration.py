"""Does calibrating new rows to the target text's token frequencies lower bits per byte at step 0?

With a tied head, the mean logit a model gives token t over a text is roughly h̄ . e_t, where h̄ is the mean final
hidden state. In the source model that mean logit follows the token's log-frequency almost linearly; a transferred
row keeps whatever frequency its sources had. This script fits that line on the source model (English text, source
tokenizer), then moves each row of a transferred model along h̄ (the target model's mean hidden state on target
text) so that its mean logit sits on the line at the token's log-frequency in the target text, by a share `alpha`
(0: unchanged, 1: on the line), for all rows or the rows that were not copied, and scores each on held-out text.

    python benchmarks/results/peers-sw/explore_calibration.py \\
        --model ~/.cache/langswap/bench-tiktotok-de/runs/overlap/transfer --language de --alphas 0 0.5 1

Prints one line per setting: rows moved, alpha, bits per byte on the first --eval-lines lines of the test split.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for the bench modules
from bench_german_training import DEFAULT_DATA  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="A transferred model folder (with langswap.json).")
    parser.add_argument("--language", default="de")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.5, 1.0])
    parser.add_argument("--rows", choices=("all", "new"), nargs="+", default=["all", "new"])
    parser.add_argument("--slope", type=float, default=None, help="Fix the line's slope instead of fitting it on "
                        "the source model (the intercept then centres the shifts: no English text needed).")
    parser.add_argument("--rounds", type=int, default=1, help="Times the shift is recomputed with the new h.")
    parser.add_argument("--count-lines", type=int, default=20000, help="Lines counted for token frequencies.")
    parser.add_argument("--hidden-lines", type=int, default=200, help="Lines whose final hidden states are averaged.")
    parser.add_argument("--eval-lines", type=int, default=300)
    return parser.parse_args(argv)


@torch.no_grad()
def mean_hidden(model, tokenizer, lines: list[str]) -> torch.Tensor:
    total, count = None, 0
    for line in lines:
        ids = tokenizer(line, return_tensors="pt", truncation=True, max_length=128)["input_ids"]
        hidden = model(ids, output_hidden_states=True).hidden_states[-1][0]  # (T, d), after the final norm
        total = hidden.sum(dim=0) if total is None else total + hidden.sum(dim=0)
        count += hidden.shape[0]
    return total / count


def main(argv=None) -> int:
    args = parse_args(argv)
    from langswap.transfer.calibrate import log_frequencies
    from langswap.evaluation.language_modeling import evaluate_model
    from langswap.models import load_model, load_tokenizer
    from langswap.resources.text import read_text_lines

    record = json.loads((args.model / "langswap.json").read_text(encoding="utf-8"))
    source_path = record["config"]["source_model"]
    splits = args.data / "splits"
    english = read_text_lines(splits / "en.train.txt", "English text", max_lines=args.count_lines)
    target_lines = read_text_lines(splits / f"{args.language}.train.txt", "target text", max_lines=args.count_lines)
    eval_lines = read_text_lines(splits / f"{args.language}.test.txt", "test text", max_lines=args.eval_lines)

    if args.slope is None:
        source_tokenizer = load_tokenizer(source_path)
        source = load_model(source_path).eval()
        source_rows = source.get_input_embeddings().weight.detach().float()
        h_source = mean_hidden(source, source_tokenizer, english[:args.hidden_lines]).float()
        source_logf = log_frequencies(source_tokenizer, english, len(source_tokenizer))[:len(source_rows)]
        mean_logit = (source_rows @ h_source).numpy()
        slope, intercept = np.polyfit(source_logf, mean_logit, 1)
        fit = np.corrcoef(source_logf, mean_logit)[0, 1]
        print(f"source: mean logit = {slope:.4f} x log-frequency + {intercept:.4f} (r = {fit:.3f})", flush=True)
        del source
    else:
        slope, intercept = args.slope, None

    tokenizer = load_tokenizer(args.model)
    provenance = [line.split("\t") for line in (args.model / "provenance.tsv").read_text(
        encoding="utf-8").splitlines()[1:]]
    kinds = np.array([row[2] if len(row) > 2 else "" for row in provenance])
    target_logf = log_frequencies(tokenizer, target_lines, len(tokenizer))
    for rows in args.rows:
        for alpha in args.alphas:
            model = load_model(args.model).eval()
            weight = model.get_input_embeddings().weight
            for _ in range(args.rounds if alpha else 0):
                h = mean_hidden(model, tokenizer, target_lines[:args.hidden_lines]).float()
                current = (weight.detach().float() @ h).numpy()
                moved = np.ones(len(current), dtype=bool) if rows == "all" else ~np.isin(kinds[:len(current)],
                                                                                         ["copied", "special"])
                moved &= ~np.isin(kinds[:len(current)], ["special"])
                logf = target_logf[:len(current)]
                offset = intercept if intercept is not None else float(np.mean(current[moved] - slope * logf[moved]))
                delta = np.where(moved, alpha * (slope * logf + offset - current), 0.0)
                with torch.no_grad():
                    weight += torch.from_numpy(delta).float()[:, None] * (h / h.dot(h))[None, :].to(weight.dtype)
            score = evaluate_model(model, tokenizer, eval_lines, "causal")
            print(f"rows {rows} ({int(moved.sum()):,}), alpha {alpha}: bits per byte {score.bits_per_byte:.4f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
