"""How long an extension's finishing steps take where only the head moves: the separation (four amounts, each read on
both texts' check lines) and the expected-count fit (two pseudo-counts over the new rows and two over every row, two
rounds each, the check lines read after each) of SmolLM2-135M-Instruct extended by German tokens, with its head
untied (as the extension's distillation leaves it), once reading the whole model at every reading and once reading
the body once per set of lines (`langswap.head_inputs`). Both runs start from the same rows; the table gives each
step's seconds and what each chose, with its check losses, which should agree to the fourth digit.

Needs the transfer bench_prune.py writes first (its cache folder):

    python benchmarks/bench_prune.py --language de --extend 10000 --separate --distill 20000
    python benchmarks/bench_finishing.py --language de

Writes benchmarks/results/finishing-LANG/table.md and results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_german_training import DEFAULT_DATA, REPO  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", default="de")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--transfer", default="transfer-fvt-separate-distill20000-keep",
                        help="The transfer folder in bench_prune.py's cache to start from (an untied head).")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    workdir = Path(f"~/.cache/langswap/bench-prune-{args.language}-10000").expanduser()
    folder = workdir / args.transfer
    if not (folder / "langswap.json").is_file():
        print(f"bench_finishing: no transfer at {folder}; run bench_prune.py first (this file's docstring)")
        return 0
    import numpy as np

    import langswap.head_inputs as head_inputs
    from langswap.models import is_tied, load_model, load_tokenizer
    from langswap.resources.text import read_text_lines
    from langswap.transfer.calibrate import CalibrationConfig, count_fit, separate

    tokenizer = load_tokenizer(folder)
    target = read_text_lines(workdir / "train.txt", "training text")[:20100]
    source = read_text_lines(args.data / "splits" / "en.train.txt", "English training text")[:20100]
    config = CalibrationConfig(strength=1.0)
    reading_once = head_inputs.head_alone_moves

    def run(reuse: bool) -> dict:
        head_inputs.head_alone_moves = reading_once if reuse else (lambda model: False)
        model = load_model(folder)
        assert not is_tied(model), "start from an untied head (a distilled transfer)"
        size = model.get_output_embeddings().weight.shape[0]
        new = np.arange(size) >= 49152
        start = time.perf_counter()
        separation = separate(model, tokenizer, target, source, config, new)
        middle = time.perf_counter()
        fit = count_fit(model, tokenizer, target, source, config, new, source_rows=~new,
                        target_loss=separation.held_out_loss, source_loss=separation.held_out_source_loss)
        end = time.perf_counter()
        return {"separation_seconds": round(middle - start, 1), "count_fit_seconds": round(end - middle, 1),
                "separation": separation.as_dict(), "count_fit": fit.as_dict()}

    runs = {"whole model each reading": run(False), "body read once": run(True)}
    head_inputs.head_alone_moves = reading_once
    table = ["| reading | separation, s | expected-count fit, s | amount | fit | check losses after (target / English) |",
             "|---|---|---|---|---|---|"]
    for name, result in runs.items():
        fit = result["count_fit"]
        after = fit["losses"]["after"]
        table.append(f"| {name} | {result['separation_seconds']} | {result['count_fit_seconds']} | "
                     f"{result['separation']['amount']:g} | k = {fit['smoothing']:g}, "
                     f"{'every row' if fit['source_rows'] else 'new rows'} | {after['target']:.4f} / "
                     f"{after['source']:.4f} |")
    out = REPO / "benchmarks" / "results" / f"finishing-{args.language}"
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/bench_finishing.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (out / "results.json").write_text(json.dumps({"command": command, "transfer": str(folder), **runs}, indent=2)
                                      + "\n", encoding="utf-8")
    (out / "table.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
