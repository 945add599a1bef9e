"""`langswap train` and `langswap evaluate` at full size: a model of Llama-3-8B's shape on one GPU.

Builds under --workdir (kept and reused) a tokenizer of the shape's vocabulary size (128,256 tokens: a word-level
tokenizer over made-up words, so that it needs no data; the cost of a training step depends on how many tokens
there are, not on how they were learnt), Zipf-distributed text in those words, and the model with random bf16
weights (`bench_full_size.build_model`: Llama-3-8B's config, sharded safetensors). Then, each in a process of its
own so that peaks do not mix, for each preset (default: `adapters` and `embeddings`):

    langswap train --preset PRESET --steps 50 (batch 4 x 1024 tokens, precision bf16, gradient checkpointing)

printing tokens per second over the updates after the first 5 (the first ones include the allocator's warm-up),
peak GPU memory (torch.cuda.max_memory_allocated) and the training loss; and `langswap evaluate` of the trained
model (its own dtype, batched), its wall time and peak GPU memory. One JSON line per measurement, also written to
--workdir/results.jsonl.

    python benchmarks/bench_full_size_train.py                 # one H100 or H200: the 8B shape, 32 layers
    python benchmarks/bench_full_size_train.py --layers 8      # the same widths, fewer layers (less time and disk)
    python benchmarks/bench_full_size_train.py --tiny          # the CPU path: a small model of the same family

Disk: the checkpoint (16 GB) and one trained model folder at a time (deleted after it is evaluated).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_full_size import SHAPES, build_model  # noqa: E402

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 512, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=None, help="Fewer layers than Llama-3-8B's 32.")
    parser.add_argument("--presets", nargs="+", default=["adapters", "embeddings"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sequence-length", type=int, default=1024)
    parser.add_argument("--no-gradient-checkpointing", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="A small model of the same family (the CPU path).")
    parser.add_argument("--workdir", type=Path, default=Path("~/.cache/langswap/full-size-train").expanduser())
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one preset in this process
    return parser.parse_args(argv)


def made_up_words(count: int) -> list[str]:
    rng = random.Random(0)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words: set[str] = set()
    while len(words) < count:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    return sorted(words)


def build_tokenizer(folder: Path, size: int) -> Path:
    """A word-level tokenizer of `size` tokens (4 special ones, then made-up words), with a bos/eos token."""
    if (folder / "tokenizer.json").is_file():
        return folder
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<unk>", "<pad>"]
    vocabulary = {token: i for i, token in enumerate(specials + made_up_words(size - len(specials)))}
    tokenizer = Tokenizer(models.WordLevel(vocabulary, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=specials[0], eos_token=specials[1],
                                   unk_token="<unk>", pad_token="<pad>")
    fast.save_pretrained(folder)
    return folder


def build_text(path: Path, words: list[str], tokens: int) -> Path:
    """Lines of 20-200 Zipf-distributed words, `tokens` words in all."""
    if path.is_file():
        return path
    rng = random.Random(1)
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    lines, total = [], 0
    while total < tokens:
        length = rng.randint(20, 200)
        lines.append(" ".join(rng.choices(words, weights=weights, k=length)))
        total += length
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_one(args, model: Path, text: Path, preset: str) -> dict:
    """Train and evaluate in this process; one result line."""
    import torch
    from transformers import TrainerCallback

    from langswap.evaluation.language_modeling import evaluate_model
    from langswap.models import load_model, load_tokenizer
    from langswap.training.run import TrainConfig, train

    cuda = torch.cuda.is_available()
    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *unused, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter())

    output = args.workdir / f"run-{preset}"
    shutil.rmtree(output, ignore_errors=True)
    config = TrainConfig(model=str(model), train_text=str(text), output=str(output), preset=preset,
                         steps=args.steps, batch_size=args.batch_size, sequence_length=args.sequence_length,
                         precision="bf16" if cuda else "fp32", logging_steps=5, save_steps=10 ** 6,
                         gradient_checkpointing=not args.no_gradient_checkpointing, max_lines=20000)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    clock = time.perf_counter()
    report = train(config, callbacks=[Clock()])
    wall = time.perf_counter() - clock
    skip = max(0, min(5, len(times) - 2))
    per_update = (times[-1] - times[skip]) / (len(times) - 1 - skip) if len(times) > skip + 1 else None
    tokens = args.batch_size * args.sequence_length
    result = {"preset": preset, "steps": args.steps, "batch": f"{args.batch_size}x{args.sequence_length}",
              "device": torch.cuda.get_device_name() if cuda else "cpu",
              "tokens_per_second": round(tokens / per_update, 1) if per_update else None,
              "train_wall_seconds": round(wall, 1),
              "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
              "phases": [(p["name"], p["trainable_parameters"], p["train_loss"]) for p in report.phases]}
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    clock = time.perf_counter()
    trained = load_model(report.model, report.objective)  # its own dtype
    if cuda:
        trained = trained.to("cuda")
    lines = text.read_text(encoding="utf-8").splitlines()[:64]
    metrics = evaluate_model(trained, load_tokenizer(report.model), lines, report.objective, False).as_dict()
    result.update({"evaluate_seconds": round(time.perf_counter() - clock, 1),
                   "evaluate_dtype": str(next(trained.parameters()).dtype).removeprefix("torch."),
                   "evaluate_peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
                   "bits_per_byte": metrics.get("bits_per_byte")})
    shutil.rmtree(output, ignore_errors=True)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    shape_name = "tiny" if args.tiny else "llama3-8b"
    if args.tiny:
        SHAPES["tiny"] = TINY
    vocab = SHAPES[shape_name]["vocab_size"]
    tokenizer = build_tokenizer(args.workdir / f"tokenizer-{vocab}", vocab)
    words = [word for word in json.loads((tokenizer / "tokenizer.json").read_text())["model"]["vocab"]
             if not word.startswith("<")]
    text = build_text(args.workdir / f"text-{vocab}.txt", words,
                      args.steps * args.batch_size * args.sequence_length * 2)
    build = argparse.Namespace(shape=shape_name, layers=args.layers, workdir=args.workdir, dtype="bfloat16")
    model = build_model(build, tokenizer)
    if args.one:
        print(json.dumps(run_one(args, model, text, args.one)), flush=True)
        return 0
    for preset in args.presets:
        command = [sys.executable, __file__, "--one", preset, "--steps", str(args.steps), "--batch-size",
                   str(args.batch_size), "--sequence-length", str(args.sequence_length), "--workdir",
                   str(args.workdir)] + (["--layers", str(args.layers)] if args.layers else []) \
            + (["--tiny"] if args.tiny else []) + (["--no-gradient-checkpointing"]
                                                   if args.no_gradient_checkpointing else [])
        done = subprocess.run(command, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            print(f"{preset}: failed (exit {done.returncode})\n{done.stderr[-3000:]}", flush=True)
            continue
        print(lines[-1], flush=True)
        with open(args.workdir / "results.jsonl", "a", encoding="utf-8") as out:
            out.write(lines[-1] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
