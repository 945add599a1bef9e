"""Per-token loss on held-out lines, by how often each token occurs in the training lines: where a calibrated start
gains or loses against an uncalibrated one, before and after training.

Reads a `bench_calibration.py` folder (its train.txt, dev.txt and tokenizer) and model folders (a variant's
`runs/NAME/transfer` or `runs/NAME/train-*/model`); prints, per model, the mean negative log-likelihood (nats) of the
first `--lines` development lines, and per bucket of training-line count: the held-out tokens in it, their mean
and total loss, and the bucket's vocabulary size and mean logit.

    python benchmarks/results/calibration-sw-200k-10000-dev/calibration_buckets.py \\
        ~/.cache/langswap/bench-calibration-sw-200k-10000 \\
        ~/.cache/langswap/bench-calibration-sw-200k-10000/bench/runs/overlap_raw/transfer ...
"""

from __future__ import annotations

import argparse
import glob
from pathlib import Path

import numpy as np
import torch

BINS = [0, 1, 3, 10, 30, 100, 1e9]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path, help="A bench_calibration.py folder.")
    parser.add_argument("models", type=Path, nargs="+")
    parser.add_argument("--lines", type=int, default=150)
    args = parser.parse_args(argv)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from langswap.transfer.calibrate import token_counts

    tokenizer = AutoTokenizer.from_pretrained(glob.glob(str(args.workdir / "tokenizer-*"))[0])
    train = (args.workdir / "train.txt").read_text(encoding="utf-8").splitlines()
    dev = (args.workdir / "dev.txt").read_text(encoding="utf-8").splitlines()[:args.lines]
    counts = token_counts(tokenizer, train, len(tokenizer))
    for folder in args.models:
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        loss, tokens = np.zeros(len(BINS) - 1), np.zeros(len(BINS) - 1)
        hidden_sum, positions = None, 0
        with torch.no_grad():
            for line in dev:
                ids = tokenizer(line, return_tensors="pt", truncation=True, max_length=128)["input_ids"]
                if ids.shape[1] < 2:
                    continue
                out = model(ids, output_hidden_states=True)
                logp = torch.log_softmax(out.logits[0, :-1].float(), -1)
                target = ids[0, 1:]
                nll = -logp[torch.arange(len(target)), target].numpy()
                bucket = np.digitize(counts[target.numpy()], BINS) - 1
                np.add.at(loss, bucket, nll)
                np.add.at(tokens, bucket, 1)
                hidden = out.hidden_states[-1][0]
                hidden_sum = hidden.sum(0) if hidden_sum is None else hidden_sum + hidden.sum(0)
                positions += hidden.shape[0]
        mean_logits = (model.get_output_embeddings().weight.detach().float() @ (hidden_sum / positions)).numpy()
        print(f"{folder}: {int(tokens.sum())} held-out tokens, mean loss {loss.sum() / tokens.sum():.3f}")
        for i in range(len(BINS) - 1):
            chosen = (counts >= BINS[i]) & (counts < BINS[i + 1])
            print(f"  count [{BINS[i]:g}, {BINS[i + 1]:g}): {int(tokens[i]):5d} tokens, loss "
                  f"{loss[i] / max(tokens[i], 1):6.3f} (total {loss[i]:8.1f}) | {int(chosen.sum()):5d} vocabulary tokens, mean logit "
                  f"{mean_logits[chosen].mean():7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
