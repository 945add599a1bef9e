"""Where the Swahili 200 kB models lose after 1,000 updates: the development lines' token losses (nats), summed by
how often the training text shows each token (read by the target tokenizer), for the seed-1 runs of
`python benchmarks/bench_calibration.py --language sw --slice-bytes 200000 --steps 0 1000 --entries
"combined cal train.seed=1" "combined raw train.seed=1"` (their bench folder must be there), and the calibrated
transfer at step 0; with `--held`, the runs of `--steps 0 200 1000 --entries "combined cal train.unshown_rows=hold"
"combined raw train.unshown_rows=hold"` (the rows of tokens the slice never shows held) too. Each line is read on its
own after the tokenizer's bos (or eos) token, as the bench scores it.

    python benchmarks/results/calibration-sw-200k-10000-testlike-dev/losses_by_count.py [--held]
"""

import collections
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

BENCH = Path("~/.cache/langswap/bench-calibration-sw-200k-10000-testlike").expanduser()
RUNS = BENCH / "bench" / "runs"
MODELS = {"calibrated, 1,000 updates": RUNS / "combined_cal_train.seed=1/train-1000steps-fe0fd33e/phase-1-embeddings/final",
          "uncalibrated, 1,000 updates": RUNS / "combined_raw_train.seed=1/train-1000steps-47dc4485/phase-1-embeddings/final",
          "calibrated, step 0": RUNS / "combined_cal_train.seed=1/transfer"}
HELD = {"calibrated, held, 1,000 updates": "combined_cal_train.unshown_rows=hold",
        "uncalibrated, held, 1,000 updates": "combined_raw_train.unshown_rows=hold"}
BUCKETS = ("0", "1-2", "3-9", "10-99", "100+")


def bucket(count: int) -> str:
    return "0" if count == 0 else "1-2" if count < 3 else "3-9" if count < 10 else "10-99" if count < 100 else "100+"


def main() -> None:
    if "--held" in sys.argv[1:]:
        for name, label in HELD.items():  # the run's model/ (its phase's weights are dropped once it is written)
            MODELS[name] = next((RUNS / label).glob("train-1000steps-*")) / "model"
    tokenizer = AutoTokenizer.from_pretrained(MODELS["calibrated, step 0"])
    train = (BENCH / "train.txt").read_text(encoding="utf-8").splitlines()
    dev = (BENCH / "dev.txt").read_text(encoding="utf-8").splitlines()[:300]
    counts = collections.Counter(i for ids in tokenizer(train, add_special_tokens=False)["input_ids"] for i in ids)
    unseen = sum(1 for token in range(len(tokenizer)) if counts[token] == 0)
    print(f"{unseen:,} of {len(tokenizer):,} tokens never occur in the tokenised training text")
    encoded = tokenizer(dev, add_special_tokens=False)["input_ids"]
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    table = {}
    for name, path in MODELS.items():
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
        print(name, json.dumps(table[name]), flush=True)
    print("\n| development tokens counted in the training text | tokens | " + " | ".join(MODELS) + " |")
    print("|---|---|" + "---|" * len(MODELS))
    for key in BUCKETS:
        first = next(iter(table.values()))[key]["tokens"]
        print(f"| {key} | {first:,} | " + " | ".join(f"{table[name][key]['nats']:,.0f}" for name in MODELS) + " |")


if __name__ == "__main__":
    main()
