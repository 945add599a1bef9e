"""Where an extension's new rows should sit: target and English bits per byte at step 0 under rules for the new
output rows, on held-out lines of the training texts.

SmolLM2-135M, its tokenizer extended by `--size` tokens of the target language's training split (less its last 300
lines, the target development lines; `--keep-text` the English training split less its last 300 lines, the English
development lines), `fvt` rows, uncalibrated. Then, from the same rows (the head is tied, so each move moves the
input row as well):

- `calibrated`: the frequency calibration a transfer applies (rows towards the target text's frequency line along
  the mean hidden state h_t of target text, the line's offset the new rows' own mean);
- `kept-line`: the same, the line's offset that of the source rows seen at least 3 times (the source model's own
  relation between mean logit and log-frequency on target text);
- `calibrated+english` and `kept-line+english`: each, and the new rows' mean logit on English text (hidden state
  h_e) brought down to the English line (offset of the source rows English text uses, the new tokens' English
  counts add-half smoothed), each row moving in the span of h_t and h_e so that its target-text mean logit is as
  the rule puts it.

And how well one direction of the head's input tells the two languages apart, position by position: the
shrunk linear discriminant of 100 lines of each, scored on 40 other lines of each.

    python benchmarks/bench_extension_rows.py --language de --size 10000
    python benchmarks/bench_extension_rows.py --language de --size 10000 --rules calibrated --direction 1 2

Figures print; the work folder (default ~/.cache/langswap/bench-extension-rows-LANG-SIZE) keeps the tokenizer and
the transfer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibration import split_text  # noqa: E402
from bench_german_training import DEFAULT_DATA, shared_data_ready  # noqa: E402

RULES = ["uncalibrated", "calibrated", "kept-line", "calibrated+english", "kept-line+english"]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=("de", "sw"), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--size", type=int, default=10000)
    parser.add_argument("--rules", nargs="+", choices=RULES, default=RULES)
    parser.add_argument("--direction", type=float, nargs="*", default=[],
                        help="Also: calibrated rows moved by these amounts along the discriminant direction (scaled "
                             "so that a row's logit rises by 2 x amount more at the target text's mean head input "
                             "than at English's).")
    parser.add_argument("--workdir", type=Path, default=None)
    return parser.parse_args(argv)


def prepare(args, workdir: Path) -> tuple[Path, Path, dict]:
    """(the source model folder, the uncalibrated `fvt` transfer into the extended tokenizer, the texts' lines)."""
    from langswap.demo.smollm2 import smollm2_135m
    from langswap.files import atomic_directory
    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.resources.extension import extend_tokenizer
    from langswap.resources.text import read_text_lines
    from langswap.transfer import transfer, transfer_config

    splits = args.data / "splits"
    train, dev = split_text(splits / f"{args.language}.train.txt", workdir, 0, 300)
    english = (splits / "en.train.txt").read_text(encoding="utf-8").splitlines()
    lines = {"target": read_text_lines(train, "training text"), "target_dev": read_text_lines(dev, "dev text"),
             "english": [line for line in english[:-300] if line.strip()],
             "english_dev": [line for line in english[-300:] if line.strip()]}
    model = smollm2_135m()
    tokenizer = workdir / f"tokenizer-extend-{args.size}"
    if not (tokenizer / "tokenizer.json").exists():
        extension = extend_tokenizer(load_tokenizer(model), lines["target"], args.size, keep_lines=lines["english"])
        with atomic_directory(tokenizer, overwrite=True) as made:
            save_tokenizer(extension.tokenizer, made)
    folder = workdir / "fvt-uncalibrated"
    if not folder.exists():
        transfer(transfer_config({"source_model": str(model), "target_tokenizer": str(tokenizer), "method": "fvt",
                                  "output": str(folder), "calibration": {"strength": 0}}))
    return model, folder, lines


def separation(model, tokenizer, lines: dict) -> tuple[dict, torch.Tensor]:
    """Accuracy of the shrunk linear discriminant between target and English head inputs on held-out positions, and
    that direction, scaled so that it separates the two texts' means by 2 (`langswap.transfer.calibrate.discriminant`)."""
    from langswap.transfer.calibrate import discriminant, head_input_states, separation_accuracy

    fit = {name: head_input_states(model, tokenizer, lines[name][:100], 128) for name in ("target", "english")}
    test = {name: head_input_states(model, tokenizer, lines[name][100:140], 128) for name in ("target", "english")}
    direction = discriminant(fit["target"], fit["english"])
    correct = separation_accuracy(direction, test["target"], test["english"])
    correct = {"target": correct["target"], "english": correct["source"]}
    report = {"positions_fitted": {name: len(states) for name, states in fit.items()},
              "accuracy_held_out": round((correct["target"] + correct["english"]) / 2, 3), "per_language": correct}
    return report, direction  # the logit of a row moved by it changes by 2 more at the German mean than at English's


def main(argv=None) -> int:
    args = parse_args(argv)
    splits = args.data / "splits"
    if not shared_data_ready("bench_extension_rows", args.data,
                             [splits / f"{args.language}.train.txt", splits / "en.train.txt"]):
        return 0
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langswap.transfer.calibrate import mean_head_input, token_counts
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.records import read_model_record

    workdir = args.workdir or Path(f"~/.cache/langswap/bench-extension-rows-{args.language}-{args.size}").expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    source_folder, folder, lines = prepare(args, workdir)
    results = {}
    source_tokenizer = AutoTokenizer.from_pretrained(source_folder)
    source = AutoModelForCausalLM.from_pretrained(source_folder, dtype=torch.float32).eval()

    def measure(model, tokenizer) -> dict:
        """Bits per byte on the first 300 development lines of each language."""
        return {name: causal_lm_score(model, tokenizer, lines[name][:300]).bits_per_byte
                for name in ("target_dev", "english_dev")}

    results["source model"] = measure(source, source_tokenizer)
    del source
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    first, last = read_model_record(folder).vocabulary["new"]
    rows = model.get_input_embeddings().weight
    if model.get_output_embeddings().weight is not rows:
        raise SystemExit("this bench moves the rows of a tied head; SmolLM2's is tied")
    start = rows.detach().clone()
    size = len(start)
    ids = np.arange(size)
    new, kept = (ids >= first) & (ids <= last), ids < first
    hidden = {"target": mean_head_input(model, tokenizer, lines["target"][:200], 128),
              "english": mean_head_input(model, tokenizer, lines["english"][:200], 128)}
    counts = {name: token_counts(tokenizer, lines[name][:20000], size) for name in hidden}
    logf = {name: np.log((count + 0.5) / (count + 0.5).sum()) for name, count in counts.items()}
    logits = {name: (start @ state).numpy() for name, state in hidden.items()}
    english_rows = kept & (counts["english"] >= 3)
    offsets = {"new": float((logits["target"] - logf["target"])[new].mean()),
               "kept": float((logits["target"] - logf["target"])[kept & (counts["target"] >= 3)].mean()),
               "english": float((logits["english"] - logf["english"])[english_rows].mean())}
    cosine = float(hidden["target"] @ hidden["english"] / hidden["target"].norm() / hidden["english"].norm())
    print(f"cos(h_t, h_e) {cosine:.3f}; offsets {offsets}; new rows' mean logit on English text "
          f"{logits['english'][new].mean():.2f}, of source rows English uses "
          f"{logits['english'][english_rows].mean():.2f}", flush=True)

    def target_move(offset: float) -> np.ndarray:
        move = np.where(new, logf["target"] + offset - logits["target"], 0.0)
        return np.where(counts["target"] < 3, np.maximum(move, 0.0), move)  # calibration's up-only rule

    def place(target: np.ndarray, english: np.ndarray | None) -> None:
        """Rows move so that their mean logits change by `target` on target text and `english` on English text
        (`None`: along h_t alone, as calibration moves them)."""
        with torch.no_grad():
            if english is None:
                direction = hidden["target"] / hidden["target"].dot(hidden["target"])
                rows.copy_(start + torch.from_numpy(target).float()[:, None] * direction[None, :])
                return
            states = torch.stack([hidden["target"], hidden["english"]])
            weights = torch.linalg.solve((states @ states.T).double(),
                                         torch.from_numpy(np.stack([target, english])).double()).float()
            rows.copy_(start + weights.T @ states)

    english_down = np.where(new, np.minimum(logf["english"] + offsets["english"] - logits["english"], 0.0), 0.0)
    plans = {"uncalibrated": (np.zeros(size), None), "calibrated": (target_move(offsets["new"]), None),
             "kept-line": (target_move(offsets["kept"]), None),
             "calibrated+english": (target_move(offsets["new"]), english_down),
             "kept-line+english": (target_move(offsets["kept"]), english_down)}
    for rule in args.rules:
        began = time.time()
        place(*plans[rule])
        results[rule] = measure(model, tokenizer)
        results[rule]["new_rows_mean_logit"] = {name: round(float((rows.detach() @ state).numpy()[new].mean()), 2)
                                                for name, state in hidden.items()}
        print(f"{rule:20s} target {results[rule]['target_dev']:.4f}  English {results[rule]['english_dev']:.4f}  "
              f"({time.time() - began:.0f} s)", flush=True)
    place(np.zeros(size), None)
    results["separation"], direction = separation(model, tokenizer, lines)
    print("target/English positions told apart by one direction:", results["separation"], flush=True)
    for amount in args.direction:
        # calibrated rows, then every new row moved by `amount` along the discriminant, and back to its calibrated
        # mean logit on target text along h_t
        place(plans["calibrated"][0], None)
        with torch.no_grad():
            aim = (rows.detach() @ hidden["target"]).clone()
            rows[torch.from_numpy(new)] += amount * direction
            back = (aim - rows.detach() @ hidden["target"]) * torch.from_numpy(new).float()
            rows += back[:, None] * (hidden["target"] / hidden["target"].dot(hidden["target"]))[None, :]
        rule = f"calibrated+direction {amount:g}"
        results[rule] = measure(model, tokenizer)
        print(f"{rule:20s} target {results[rule]['target_dev']:.4f}  English {results[rule]['english_dev']:.4f}",
              flush=True)
    print("| rows | target bits per byte | English bits per byte |\n|---|---|---|")
    for label, figures in results.items():
        if "target_dev" in figures:
            print(f"| {label} | {figures['target_dev']:.4f} | {figures['english_dev']:.4f} |")
    (workdir / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
