"""Which rows of an extension should meet their counts? At step 0, on SmolLM2 + 10,000 German tokens (`fvt`,
calibrated and kept off English as `langswap transfer` does with `calibration.source_text`), shift output rows by
log((n + k) / (E + k)) (n: a token's count on German training lines read by the extended tokenizer, E: its expected
count there, the model's probabilities summed over the positions) along a direction v of the head's input with
v . m_target = 1 and v . m_source = 0 (each text's mean head input), so each row's mean logit on English stays.

`--rows old`: the source rows, down only (a source token that begins new ones, `ĠH` of `ĠHaus`, keeps the
probability of all its continuations); `--rows new`: the new rows, either way (`calibration.count_fit` in
`langswap.transfer.calibrate` is this, made part of the transfer); `--rounds`: count again after each shift.

    python benchmarks/results/extension-yield/fit_rows.py --workdir ~/.cache/langswap/bench-prune-de-10000 --rows new

The workdir holds bench_prune.py's extended tokenizer and the transfer `transfer-fvt-separate-nofit` (made here as
bench_prune.py makes it with `--separate --count-fit off` where absent). Settings are compared on the check half of
the development lines and reported on both halves (bench_prune.py's halves).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from bench_calibration import TEST_LINE_CHARS, split_text  # noqa: E402
from bench_german_training import DEFAULT_DATA  # noqa: E402


def read_counts(model, tokenizer, lines, max_length=128):
    """(expected counts, counts, mean head input, positions) of `model` reading `lines` (bos first, as the scores)."""
    head = model.get_output_embeddings()
    size = head.weight.shape[0]
    expected = torch.zeros(size, dtype=torch.float64)
    counts = torch.zeros(size, dtype=torch.float64)
    hidden_sum = torch.zeros(head.weight.shape[1], dtype=torch.float64)
    positions = 0
    captured = {}
    handle = head.register_forward_pre_hook(lambda module, args: captured.__setitem__("h", args[0].detach()))
    model.eval()
    try:
        encoded = [ids for ids in tokenizer(lines, truncation=True, max_length=max_length)["input_ids"] if len(ids) > 1]
        with torch.no_grad():
            for ids in encoded:
                input_ids = torch.tensor([ids])
                logits = model(input_ids=input_ids).logits[0, :-1].float()
                probs = torch.softmax(logits, dim=-1)
                expected += probs.sum(0).double()
                counts += torch.bincount(torch.tensor(ids[1:]), minlength=size).double()
                hidden_sum += captured["h"][0, :-1].double().sum(0)
                positions += len(ids) - 1
    finally:
        handle.remove()
    return expected.numpy(), counts.numpy(), (hidden_sum / positions).float(), positions


def score(model, tokenizer, lines):
    from langswap.evaluation.language_modeling import causal_lm_score
    return causal_lm_score(model, tokenizer, lines).bits_per_byte


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--language", default="de")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--extend", type=int, default=10000)
    parser.add_argument("--count-lines", type=int, default=1000)
    parser.add_argument("--spread", action="store_true",
                        help="Count on --count-lines lines spread evenly over the training text.")
    parser.add_argument("--first-lines", action="store_true",
                        help="Count on the training text's first --count-lines lines (as the transfer does) rather "
                             "than its last.")
    parser.add_argument("--strengths", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--pseudo", type=float, nargs="+", default=[0.5, 5.0])
    parser.add_argument("--rows", choices=("old", "new", "both"), default="old",
                        help="old: source rows, down only; new: the new rows, either way; both.")
    parser.add_argument("--rounds", type=int, default=1, help="Count, shift, count again: this many times.")
    parser.add_argument("--tied", action="store_true",
                        help="Keep SmolLM2's head tied, so the shifted rows' input rows move too (as the transfer "
                             "moves them by default); otherwise the head is untied first and only output rows move.")
    args = parser.parse_args(argv)

    from langswap.demo.smollm2 import smollm2_135m
    from langswap.models import load_model, load_tokenizer
    from langswap.transfer import transfer, transfer_config
    from langswap.transfer.calibrate import untie_head

    splits = args.data / "splits"
    workdir = args.workdir.expanduser()
    workdir.mkdir(parents=True, exist_ok=True)
    train, dev = split_text(splits / f"{args.language}.train.txt", workdir, 0, 300, "test-like",
                            TEST_LINE_CHARS[args.language])
    folder = workdir / "tokenizer"
    if not (folder / "tokenizer.json").exists():  # as bench_prune.py makes it
        from langswap.files import atomic_directory
        from langswap.models import save_tokenizer
        from langswap.resources.extension import extend_tokenizer
        from langswap.resources.text import read_text_lines
        keep = read_text_lines(splits / "en.train.txt", "English training text")
        with atomic_directory(folder, overwrite=True) as made:
            save_tokenizer(extend_tokenizer(load_tokenizer(smollm2_135m()), read_text_lines(train, "training text"),
                                            args.extend, keep_lines=keep).tokenizer, made)
    output = workdir / "transfer-fvt-separate-nofit"
    if not (output / "langswap.json").exists():
        transfer(transfer_config({"source_model": str(smollm2_135m()), "target_tokenizer": str(folder),
                                  "method": "fvt", "output": str(output),
                                  "calibration": {"text": str(train), "source_text": str(splits / "en.train.txt"),
                                                  "count_fit": "off"}}))
    tokenizer = load_tokenizer(output)
    model = load_model(output)
    if not args.tied:
        untie_head(model)
    first_new = len(load_tokenizer(smollm2_135m()))
    target = dev.read_text(encoding="utf-8").splitlines()
    english = (splits / "en.test.txt").read_text(encoding="utf-8").splitlines()[300:600]
    half = len(target) // 2
    halves = {"check": {"target": target[:half], "English": english[:150]},
              "scored": {"target": target[half:], "English": english[150:]}}
    train_lines = train.read_text(encoding="utf-8").splitlines()
    count_lines = train_lines[:args.count_lines] if args.first_lines else train_lines[-args.count_lines:]
    if args.spread:
        count_lines = train_lines[::max(1, len(train_lines) // args.count_lines)][:args.count_lines]
    english_train = (splits / "en.train.txt").read_text(encoding="utf-8").splitlines()[:300]

    expected, counts, m_target, positions = read_counts(model, tokenizer, count_lines)
    _, _, m_source, _ = read_counts(model, tokenizer, english_train)
    gram = torch.stack([m_target, m_source]).double()
    coefficients = torch.linalg.solve(gram @ gram.T, torch.tensor([1.0, 0.0], dtype=torch.float64))
    direction = (coefficients @ gram).float()
    old = np.zeros(len(counts), dtype=bool)
    old[:first_new] = True
    special = set(tokenizer.all_special_ids)
    for i in special:
        old[i] = False
    weight = model.get_output_embeddings().weight
    start = weight.detach().clone()
    results = {"positions_counted": positions, "direction_dot": {
        "target": round(float(direction @ m_target), 4), "source": round(float(direction @ m_source), 4)}}
    prefix_mass = float(expected[old].sum() - counts[old].sum()) / positions
    results["old_rows_surplus_per_position"] = round(prefix_mass, 4)
    print(json.dumps(results))
    rows = []
    baseline = {half_name: {text: score(model, tokenizer, lines) for text, lines in texts.items()}
                for half_name, texts in halves.items()}
    rows.append({"strength": 0, "pseudo": None, "rows": 0, **baseline})
    print(rows[-1], flush=True)
    new = ~old
    new[list(special)] = False
    new[len(tokenizer):] = False

    def shifts(expected, pseudo):
        ratio = np.log((counts + pseudo) / (expected + pseudo))
        delta = np.zeros_like(ratio)
        if args.rows in ("old", "both"):
            delta[old] = np.minimum(ratio[old], 0.0)
        if args.rows in ("new", "both"):
            delta[new] = ratio[new]
        return delta

    for pseudo in args.pseudo:
        for strength in args.strengths:
            with torch.no_grad():
                weight.copy_(start)
            delta = np.zeros(len(counts))
            moved_expected = expected
            for round_ in range(args.rounds):
                step = shifts(moved_expected, pseudo)
                delta += step
                with torch.no_grad():
                    weight.copy_(start + torch.from_numpy(strength * delta).float()[:, None] * direction[None, :])
                if round_ + 1 < args.rounds:
                    moved_expected = read_counts(model, tokenizer, count_lines)[0]
            scores = {half_name: {text: score(model, tokenizer, lines) for text, lines in texts.items()}
                      for half_name, texts in halves.items()}
            rows.append({"strength": strength, "pseudo": pseudo, "rows": int((delta < 0).sum()),
                         "mean_delta_old": round(float(delta[old].mean()), 4),
                         "mean_delta_new": round(float(delta[new].mean()), 4), "rounds": args.rounds, **scores})
            print(rows[-1], flush=True)
    with torch.no_grad():
        weight.copy_(start)
    results["rows"] = rows
    name = (f"fit-{args.language}-{args.rows}-{args.rounds}" + ("-tied" if args.tied else "")
            + ("-first" if args.first_lines else "") + ("-spread" if args.spread else "")
            + (f"-lines{args.count_lines}" if args.count_lines != 1000 else ""))
    (HERE / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
