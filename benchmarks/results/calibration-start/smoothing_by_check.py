"""Which add-k smoothing should calibration use: the one under which the counts predict the check lines' tokens
best (`choose_smoothing`, what the transfer does), or the one under which the calibrated model reads the check
lines best? For a bench's calibrated default transfer, the move is taken off (`calibration-move.safetensors`) and
calibration is made again with each smoothing of a grid, as the transfer made it (its config, the same lines and
check lines); each is scored on the check lines (the model's mean token loss, what a check-loss rule would judge
by) and on the bench's development lines (bits per byte, what is reported).

    python benchmarks/results/calibration-start/smoothing_by_check.py \
        --bench ~/.cache/langswap/bench-calibration-de-200k-10000-testlike
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from langswap.calibration_move import MOVE_FILE, CalibrationMove, take_off
from langswap.evaluation.language_modeling import causal_lm_score
from langswap.resources.text import read_text_lines
from langswap.transfer.calibrate import CalibrationConfig, calibrate

parser = argparse.ArgumentParser()
parser.add_argument("--bench", required=True)
parser.add_argument("--variant", default="combined_cal")
parser.add_argument("--grid", nargs="+", type=float, default=[0.125, 0.25, 0.5, 1.0, 2.0])
parser.add_argument("--dev-lines", type=int, default=300)
args = parser.parse_args()

bench = Path(args.bench).expanduser()
folder = bench / "bench" / "runs" / args.variant / "transfer"
record = json.loads((folder / "langswap.json").read_text())
settings = record["config"]["calibration"]
made = record["calibration"]
tokenizer = AutoTokenizer.from_pretrained(folder)
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
move = CalibrationMove.load(folder / MOVE_FILE)
moved = np.any(np.stack([logits != 0 for logits in move.logits]), axis=0)
take_off(model, move)
lines = read_text_lines(settings["text"], "target text", max_lines=settings["lines"])
dev = (bench / "dev.txt").read_text(encoding="utf-8").splitlines()[:args.dev_lines]
fields = {f.name for f in dataclasses.fields(CalibrationConfig)}
kept = {k: v for k, v in settings.items() if k in fields and k not in ("strength", "smoothing", "check_lines")}
base = CalibrationConfig(**kept, strength=1.0, check_lines=made["check"]["lines"])
print(folder, "rows moved", int(moved.sum()), "the transfer's smoothing", made["frequencies"], flush=True)
weight = model.get_output_embeddings().weight
saved = weight.detach().clone()
for smoothing in args.grid:
    with torch.no_grad():
        weight.copy_(saved)
    report = calibrate(model, tokenizer, lines, dataclasses.replace(base, smoothing=smoothing), moved)
    score = causal_lm_score(model, tokenizer, dev)
    print(f"smoothing {smoothing:g}: check loss {report.check.loss_before:.4f} -> {report.check.loss_after:.4f}, "
          f"development bits per byte {score.bits_per_byte:.4f}", flush=True)
