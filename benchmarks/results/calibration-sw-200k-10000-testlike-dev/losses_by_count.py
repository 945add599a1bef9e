"""Where a bench_calibration.py bench's models lose: the development lines' token losses (nats), summed by how often
the training text shows each token (read by the target tokenizer). Each model is a bench entry's run (its trained
model/ or last phase's final/, or its transfer/ for step 0); each line is read on its own after the tokenizer's bos
(or eos) token, as the bench scores it.

With no arguments, the Swahili 200 kB slice's seed-1 runs of `python benchmarks/bench_calibration.py --language sw
--slice-bytes 200000 --steps 0 1000 --entries "combined cal train.seed=1" "combined raw train.seed=1"` and the
calibrated transfer at step 0 (losses_by_count.txt); `--held` adds the runs of `--steps 0 200 1000 --entries
"combined cal train.unshown_rows=hold" "combined raw train.unshown_rows=hold"`. Any other bench folder and entries:

    python benchmarks/results/calibration-sw-200k-10000-testlike-dev/losses_by_count.py [--held]
    python benchmarks/results/calibration-sw-200k-10000-testlike-dev/losses_by_count.py \
        --bench ~/.cache/langswap/bench-calibration-sw-full-16000-testlike \
        --runs "step 0=combined_cal@0" "calibrated=combined_cal" "uncalibrated=combined_raw"
"""

import argparse
import collections
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

SLICE = "~/.cache/langswap/bench-calibration-sw-200k-10000-testlike"
SLICE_RUNS = ["calibrated, 1,000 updates=combined_cal_train.seed=1",
              "uncalibrated, 1,000 updates=combined_raw_train.seed=1", "calibrated, step 0=combined_cal_train.seed=1@0"]
HELD_RUNS = ["calibrated, held, 1,000 updates=combined_cal_train.unshown_rows=hold",
             "uncalibrated, held, 1,000 updates=combined_raw_train.unshown_rows=hold"]
BUCKETS = ("0", "1-2", "3-9", "10-99", "100+")


def bucket(count: int) -> str:
    return "0" if count == 0 else "1-2" if count < 3 else "3-9" if count < 10 else "10-99" if count < 100 else "100+"


def model_folder(runs: Path, spec: str) -> Path:
    """`variant` (its last training run's model/, or its phase's final/ where model/ is absent), `variant@0` (its
    transfer) or `variant@N` (its last run of N updates)."""
    variant, _, step = spec.partition("@")
    if step == "0":
        return runs / variant / "transfer"
    trained = sorted((runs / variant).glob(f"train-{step or '*'}steps-*"), key=lambda path: path.stat().st_mtime)
    trained = [folder for folder in trained if (folder / "model").is_dir() or any(folder.glob("phase-*/final"))]
    if not trained:
        raise SystemExit(f"{runs / variant} has no training run")
    folder = trained[-1]
    return folder / "model" if (folder / "model").is_dir() else next(folder.glob("phase-*/final"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench", default=SLICE, help="The bench_calibration.py work folder.")
    parser.add_argument("--runs", nargs="+", default=None, metavar="LABEL=VARIANT[@0|@N]")
    parser.add_argument("--held", action="store_true", help="With the default bench: the held runs too.")
    args = parser.parse_args()
    bench = Path(args.bench).expanduser()
    specs = args.runs or SLICE_RUNS + (HELD_RUNS if args.held else [])
    models = {label: model_folder(bench / "bench" / "runs", spec)
              for label, _, spec in (item.partition("=") for item in specs)}
    tokenizer = AutoTokenizer.from_pretrained(next(iter(models.values())))
    train = (bench / "train.txt").read_text(encoding="utf-8").splitlines()
    dev = (bench / "dev.txt").read_text(encoding="utf-8").splitlines()[:300]
    counts = collections.Counter(i for ids in tokenizer(train, add_special_tokens=False)["input_ids"] for i in ids)
    unseen = sum(1 for token in range(len(tokenizer)) if counts[token] == 0)
    print(f"{unseen:,} of {len(tokenizer):,} tokens never occur in the tokenised training text")
    encoded = tokenizer(dev, add_special_tokens=False)["input_ids"]
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    table = {}
    for name, path in models.items():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        sums, tokens = collections.defaultdict(float), collections.Counter()
        with torch.no_grad():
            for ids in encoded:
                logits = model(torch.tensor([[prefix] + ids])).logits[0, :-1].float()
                losses = -torch.log_softmax(logits, -1)[torch.arange(len(ids)), torch.tensor(ids)]
                for token, loss in zip(ids, losses.tolist()):
                    sums[bucket(counts[token])] += loss
                    tokens[bucket(counts[token])] += 1
        table[name] = {key: {"tokens": tokens[key], "nats": round(sums[key], 1)} for key in BUCKETS}
        print(name, path, json.dumps(table[name]), flush=True)
    print("\n| development tokens counted in the training text | tokens | " + " | ".join(models) + " |")
    print("|---|---|" + "---|" * len(models))
    for key in BUCKETS:
        first = next(iter(table.values()))[key]["tokens"]
        print(f"| {key} | {first:,} | " + " | ".join(f"{table[name][key]['nats']:,.0f}" for name in models) + " |")


if __name__ == "__main__":
    main()
