"""Which candidate's rows should training start from? A start whose rows of frequent tokens are the `choose`
candidate's and whose other rows are the `mix` candidate's, made by hand from a bench_calibration.py bench's two
transfers, trained as the bench trains and scored on its development lines.

Both transfers are the bench's calibrated ones (`combined cal` and `combined cal method.mode=choose`), each with the
lowering of its rows counted fewer than 3 times taken off by its own calibration move, as `langswap train`'s
`calibration: spare-rare` takes it off. A token is frequent where the training text (its first 20,000 lines, read by
the target tokenizer) counts it at least `--min-count` times, or where the run shows it at least `--min-shows` times
(its count times the epochs that `--steps` updates of 2 x 128 tokens read). The start is trained with the bench's
train options (`train.preset: embeddings`, batch 2 x 128, `calibration: keep` as the rows are already spared) and
scored on the first 300 development lines, bits per byte. What `langswap transfer` and `langswap train` do by default
since (`start_rows: frequent`, docs/design.md "The start of training") differs in one way: they take from `choose`
only the rows it makes otherwise, not the rows both make alike and calibrate a little differently.

    python benchmarks/results/calibration-start/frequent_rows_from_choose.py \
        --bench ~/.cache/langswap/bench-calibration-sw-200k-10000-testlike --steps 200 1000 --min-count 100 \
        --out /tmp/runs/hyb-sw200k
    python benchmarks/results/calibration-start/frequent_rows_from_choose.py \
        --bench ~/.cache/langswap/bench-calibration-sw-full-16000-testlike --steps 200 1000 --min-shows 150 \
        --out /tmp/runs/hyb-swfull

Each start and run prints a JSON line: the plan, the count it took, the rows taken from `choose`, the step and the
bench's figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections import Counter
from pathlib import Path

import torch

from langswap.bench import _measure
from langswap.calibration_move import MOVE_FILE, CalibrationMove, take_off
from langswap.config import from_dict
from langswap.models import load_model, load_tokenizer
from langswap.resources.text import read_text_lines
from langswap.start_rows import START_FILE
from langswap.training.run import TrainConfig, train

BLOCK = 2 * 128  # tokens an update reads


def spared(folder: Path):
    model = load_model(folder)
    take_off(model, CalibrationMove.load(folder / MOVE_FILE), below_count=3)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", required=True, help="The bench_calibration.py work folder.")
    parser.add_argument("--steps", type=int, nargs="+", required=True)
    parser.add_argument("--min-count", type=int, nargs="*", default=[])
    parser.add_argument("--min-shows", type=float, nargs="*", default=[])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    bench = Path(args.bench).expanduser()
    runs = bench / "bench" / "runs"
    mix_folder, choose_folder = runs / "combined_cal" / "transfer", runs / "combined_cal_method.mode=choose" / "transfer"
    tokenizer = load_tokenizer(mix_folder)
    lines = [line.rstrip("\n") for line in open(bench / "train.txt", encoding="utf-8") if line.strip()][:20000]
    counts = Counter()
    for start in range(0, len(lines), 1000):
        for ids in tokenizer(lines[start:start + 1000], add_special_tokens=False)["input_ids"]:
            counts.update(ids)
    dev = read_text_lines(str(bench / "dev.txt"), "evaluation text", max_lines=300)
    mix, choose = spared(mix_folder), spared(choose_folder)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total = sum(counts.values()) + len(lines)
    plans = [(f"min{count}", count, steps) for count in args.min_count for steps in args.steps]
    plans += [(f"shows{shows:g}-{steps}", shows / (steps * BLOCK / total), steps)
              for shows in args.min_shows for steps in args.steps]
    for name, least, steps in plans:
        model = load_model(mix_folder)
        weight = model.get_input_embeddings().weight
        with torch.no_grad():
            weight.copy_(mix.get_input_embeddings().weight)
            ids = [token for token, count in counts.items() if count >= least and token < weight.shape[0]]
            weight[ids] = choose.get_input_embeddings().weight[ids]
        folder = out / f"start-{name}"
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(mix_folder, folder)
        (folder / MOVE_FILE).unlink()
        (folder / START_FILE).unlink(missing_ok=True)  # the start is made here
        model.save_pretrained(folder)
        figures = {"plan": name, "min_count": least, "rows_from_choose": len(ids)}
        print(json.dumps({**figures, "step": 0, **_measure(folder, dev, None, False)}), flush=True)
        trained = out / f"train-{name}-{steps}"
        train(from_dict(TrainConfig, {
            "model": str(folder), "train_text": str(bench / "train.txt"), "output": str(trained), "overwrite": True,
            "preset": "embeddings", "steps": steps, "batch_size": 2, "sequence_length": 128, "save_steps": 100,
            "logging_steps": 10, "max_lines": 20000, "calibration": "keep"}, where="train."))
        print(json.dumps({**figures, "step": steps, **_measure(trained / "model", dev, None, False)}), flush=True)


if __name__ == "__main__":
    main()
