"""Which held-out lines pick `combined`'s candidate the way development lines drawn like the test split would?

`langswap transfer` keeps the candidate of `combined` (mode auto) whose model has the lowest mean token loss on the
last `held_out_lines` (100) lines of the target text, each line read on its own in windows of 128 tokens. This bench
makes the three candidates a dictionary gives as transfers of their own (`mix`, `choose`, and `spelling only`:
`dictionary_weight: 0`), each calibrated as the transfer calibrates, and scores each (bits per byte) on:

    tail100 per line      the transfer's own check lines: the text's last 100 lines, each on its own (128 tokens)
    tail100 as a stream   the same lines joined by spaces and read as one running text (windows of 128 tokens)
    spread100 per line    100 lines spread evenly over the rest of the text, each on its own
    longest100 per line   the rest of the text's 100 longest lines, each on its own
    dev300 (truth)        bench_calibration.py's development lines (first 300), drawn like the test split

and says which candidate each selection would keep. A selection is only worth having if it keeps what the
development lines keep, in every language. The spread and longest lines are counted by calibration (only the tail
is held out of its counts) and every line of the text trained the tokenizer; the development lines are neither.

    python benchmarks/bench_held_out.py --language de --slice-bytes 200000
    python benchmarks/bench_held_out.py --language sw --slice-bytes 200000

The training text, development lines and tokenizer are bench_calibration.py's (the same folder,
~/.cache/langswap/bench-calibration-LANG-SLICE-VOCAB-testlike, made here if absent); the models go to its
`held-out/` folder, the table to benchmarks/results/held-out-LANG-SLICE-VOCAB/.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibration import TEST_LINE_CHARS, split_text  # noqa: E402
from bench_german_training import DEFAULT_DATA, REPO, shared_data_ready  # noqa: E402
from bench_tiktotok import DICTIONARIES  # noqa: E402

CANDIDATES = {"mix": {"mode": "mix"}, "choose": {"mode": "choose"},
              "spelling only": {"mode": "mix", "dictionary_weight": 0.0}}
WINDOW = 128  # HELD_OUT_TOKENS: the window the transfer reads its held-out lines in


def selections(lines: list[str], dev: list[str]) -> dict[str, tuple[list[str], int | None]]:
    """Each selection's lines and the window they are read in (None: the model's context)."""
    tail, body = lines[-100:], lines[:-100]
    step = len(body) // 100
    return {"tail100 per line": (tail, WINDOW), "tail100 as a stream": ([" ".join(tail)], WINDOW),
            "spread100 per line": ([body[index * step] for index in range(100)], WINDOW),
            "longest100 per line": (sorted(body, key=len, reverse=True)[:100], WINDOW),
            "dev300 (truth)": (dev[:300], None)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted(DICTIONARIES), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--slice-bytes", type=int, default=200_000, help="Bytes of the training split (0: all).")
    parser.add_argument("--vocab", type=int, default=10_000)
    args = parser.parse_args(argv)
    splits = args.data / "splits"
    dictionary = args.data / "dicts" / DICTIONARIES[args.language]
    if not shared_data_ready("bench_held_out", args.data, [splits / f"{args.language}.train.txt", dictionary]):
        return 0
    name = f"{args.language}-{args.slice_bytes // 1000 if args.slice_bytes else 'full'}k-{args.vocab}"
    name = name.replace("fullk", "full")
    workdir = Path(f"~/.cache/langswap/bench-calibration-{name}-testlike").expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    train, dev = split_text(splits / f"{args.language}.train.txt", workdir, args.slice_bytes, 300, "test-like",
                            TEST_LINE_CHARS[args.language])

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langswap.config import from_dict
    from langswap.demo.smollm2 import smollm2_135m
    from langswap.evaluation.language_modeling import causal_lm_score
    from langswap.files import atomic_directory
    from langswap.models import load_tokenizer
    from langswap.resources.tokenizer import train_tokenizer
    from langswap.transfer import transfer
    from langswap.transfer.config import HELD_OUT_LINES, HELD_OUT_TOKENS, TransferConfig

    if (HELD_OUT_LINES, HELD_OUT_TOKENS) != (100, WINDOW):
        raise SystemExit(f"the transfer now holds out {HELD_OUT_LINES} lines read in {HELD_OUT_TOKENS} tokens; "
                         "update this bench's selections")
    model = smollm2_135m()
    tokenizer = workdir / f"tokenizer-{args.vocab}"
    if not (tokenizer / "tokenizer.json").exists():
        with atomic_directory(tokenizer, overwrite=True) as folder:
            train_tokenizer(load_tokenizer(model), train, args.vocab).save_pretrained(folder)
    lines = train.read_text(encoding="utf-8").splitlines()
    chosen = selections(lines, dev.read_text(encoding="utf-8").splitlines())
    scores: dict[str, dict[str, float]] = {}
    for label, options in CANDIDATES.items():
        folder = workdir / "held-out" / label.replace(" ", "-")
        if not (folder / "langswap.json").exists():
            transfer(from_dict(TransferConfig, {
                "source_model": str(model), "target_tokenizer": str(tokenizer), "language": args.language,
                "output": str(folder), "overwrite": True, "method": {"name": "combined", **options},
                "resources": {"dictionary": str(dictionary), "token_text": str(train)},
                "calibration": {"text": str(train)}}))
        cache = folder / "held-out-scores.json"
        found = json.loads(cache.read_text()) if cache.exists() else {}
        if set(found) != set(chosen):
            loaded = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
            reader = AutoTokenizer.from_pretrained(folder)
            found = {selection: round(causal_lm_score(loaded, reader, text, max_length=window).bits_per_byte, 5)
                     for selection, (text, window) in chosen.items()}
            cache.write_text(json.dumps(found, indent=1))
        scores[label] = found
        print(label, found, flush=True)
    table = ["| selection | " + " | ".join(CANDIDATES) + " | kept |", "|---" * (len(CANDIDATES) + 2) + "|"]
    for selection in chosen:
        kept = min(CANDIDATES, key=lambda label: scores[label][selection])
        table.append(f"| {selection} | " + " | ".join(
            f"**{scores[label][selection]:.4f}**" if label == kept else f"{scores[label][selection]:.4f}"
            for label in CANDIDATES) + f" | {kept} |")
    print("\n".join(table))
    results = REPO / "benchmarks" / "results" / f"held-out-{name}"
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").write_text(json.dumps(scores, indent=1) + "\n", encoding="utf-8")
    (results / "table.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
