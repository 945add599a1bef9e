"""Rows a run shows too rarely, moved back onto the frequency line after training, read on the development lines:
what `unshown_rows: recalibrate` does when a model is written (langswap.training.recalibrated_rows), applied here to
a bench_calibration.py bench's trained models (its runs made with `unshown_rows: train`), computed on its own so the
two cross-check. Each row of a text token the training text shows fewer than `--below` times (with `--shows`: its
count in the training text times the epochs the run read) moves along the trained model's mean head input until its
mean logit is calibration's log-frequency (`--estimates`: held-out or add-k) plus the mean offset of the rows counted
at least three times (`--exclude-moved`: those of them that do not move).

    python benchmarks/results/calibration-sw-full-16000-testlike-dev/recalibrate_after.py \
        --bench ~/.cache/langswap/bench-calibration-sw-full-16000-testlike --variant combined_cal \
        --estimates held-out --shows --below 1 5 10 20 40

`--variant` as losses_by_count.py takes it (a variant's last training run), or VARIANT/RUN for one run's model. The figures: recalibrate_after.txt.
"""
import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langswap.evaluation.language_modeling import causal_lm_score
from langswap.resources.text import read_text_lines
from langswap.resources.tokenizer import text_tokens, token_counts
from langswap.transfer.calibrate import CalibrationConfig, frequency_line, mean_head_input

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "calibration-sw-200k-10000-testlike-dev"))
from losses_by_count import model_folder  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--bench")
parser.add_argument("--variant")
parser.add_argument("--estimates", nargs="+", default=["add-k", "held-out"])
parser.add_argument("--shares", nargs="+", type=float, default=[1.0])
parser.add_argument("--up-only", action="store_true")
parser.add_argument("--below", type=float, nargs="+", default=[1])
parser.add_argument("--shows", action="store_true", help="--below counts expected shows (count x epochs)")
parser.add_argument("--exclude-moved", action="store_true",
                    help="the offset from the rows counted at least three times that do not move (as "
                         "langswap.training.recalibrated_rows takes it); default: from every such row")
args = parser.parse_args()
bench = Path(args.bench).expanduser()
runs = bench / "bench" / "runs"
path = runs / args.variant / "model" if (runs / args.variant / "model").is_dir() else model_folder(runs, args.variant)
tokenizer = AutoTokenizer.from_pretrained(path)
import json as _json
record = _json.loads((path.parent / "langswap-train.json").read_text()) if (path.parent / "langswap-train.json").exists() else None
epochs = record["training_data"]["train"]["epochs"] if record else 1.0
# the lines the run read (training's max_lines, e.g. 20,000 of the whole German split's 63,971), which are also the
# lines calibration counts (calibration.lines, 20,000)
train = read_text_lines(bench / "train.txt", "training text",
                        max_lines=record["training_data"]["train"]["documents"] if record else None)
dev = (bench / "dev.txt").read_text(encoding="utf-8").splitlines()[:300]
size = len(tokenizer)
counts_all = token_counts(tokenizer, train, size)
texts = np.array([bool(t) for t in text_tokens(tokenizer)])
print(path, "epochs", epochs, "lines", len(train), flush=True)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
base = causal_lm_score(model, tokenizer, dev)
print("as trained", round(base.bits_per_byte, 4), flush=True)
config = CalibrationConfig(strength=1.0)
hidden = mean_head_input(model, tokenizer, train[:config.hidden_lines], config.max_length)
weight = model.get_output_embeddings().weight
saved = weight.detach().clone()
current = (saved @ hidden).numpy()
for estimate in args.estimates:
    logf, how, counts = frequency_line(tokenizer, train, weight.shape[0], CalibrationConfig(strength=1.0,
                                                                                          frequencies=estimate))
    logf = logf[:size]
    reference = texts & (counts_all >= 3)
    offset = float(np.mean(current[:size][reference] - logf[reference]))
    print(estimate, {k: v for k, v in how.items() if k != "cross_entropy"}, flush=True)
    direction = hidden / hidden.dot(hidden)
    for below in args.below:
        unshown = texts & ((counts_all * (epochs if args.shows else 1.0)) < below)
        shift = offset
        if args.exclude_moved:
            kept = reference & ~unshown
            shift = float(np.mean(current[:size][kept] - logf[kept])) if kept.any() else offset
        distance = np.zeros(weight.shape[0])
        distance[:size] = np.where(unshown, logf + shift - current[:size], 0.0)
        if args.up_only:
            distance = np.maximum(distance, 0.0)
        for share in args.shares:
            with torch.no_grad():
                weight.copy_(saved + share * torch.from_numpy(distance).float()[:, None] * direction[None, :])
            score = causal_lm_score(model, tokenizer, dev)
            print(f"{estimate} below {below} rows {int(unshown.sum())} mean move "
                  f"{float(distance[:size][unshown].mean()):.3f} share {share}: {score.bits_per_byte:.4f}", flush=True)
        with torch.no_grad():
            weight.copy_(saved)
