"""`langswap train` and `langswap evaluate` at full size: Llama-3-8B's shape on one GPU, Llama-3.2-1B's on a CPU.

Builds under --workdir (kept and reused) a tokenizer of the shape's vocabulary size (128,256 tokens: the
word-level tokenizer of bench_gpu_train.py, so that it needs no data; the cost of a training step depends on how
many tokens there are, not on how they were learnt), text in those words from its random bigram chain, and the model
with random bf16 weights (`bench_full_size.build_model`: the --shape's config, sharded safetensors). Then, each in a
process of its own so that peaks do not mix, for each preset (default: `adapters` and `embeddings`):

    langswap train --preset PRESET --steps 50 (batch 4 x 1024 tokens, precision bf16, gradient checkpointing)

printing tokens per second over the updates after the first 5 (the first ones include the allocator's warm-up; each
update is timed from its start to its end by bench_train_speed.update_clock), peak GPU memory (allocated,
torch.cuda.max_memory_allocated, and reserved by the allocator, max_memory_reserved) and the training loss; and
`langswap evaluate` of the trained model (its own dtype, batched), its wall time and peak GPU memory. One JSON line
per measurement, also written to
--workdir/results.jsonl.

    python benchmarks/bench_full_size_train.py                 # one H100 or H200: the 8B shape, 32 layers
    python benchmarks/bench_full_size_train.py --layers 8      # the same widths, fewer layers (less time and disk)
    python benchmarks/bench_full_size_train.py --shape llama3.2-1b --steps 10 --batch-size 1 \
        --sequence-length 256                                  # Llama-3.2-1B's shape (tied, 128,256 tokens) on a CPU
    python benchmarks/bench_full_size_train.py --tiny          # the CPU path's check: a small model of the family

On a machine without a GPU the run trains in float32 (`--precision fp32`, the default there) and reports peak
resident memory (ru_maxrss of the training process) where a GPU run reports peak GPU memory.

Disk: the checkpoint (16 GB) and one run's output at a time (deleted after it is evaluated). A thread samples the
run's output folder every 2 s; `peak_output_gib` is the most it held (files linked twice counted once), in model
copies `peak_output_copies` (the checkpoint's size is one copy): a run keeps one trained copy at the end and at most
two while a phase's final folder is written.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_full_size import SHAPES, build_model  # noqa: E402
from bench_gpu_train import chain_text, word_tokenizer  # noqa: E402
from bench_train_speed import update_clock  # noqa: E402

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 4096, "max_position_embeddings": 512, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "rms_norm_eps": 1e-5}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    parser.add_argument("--layers", type=int, default=None, help="Fewer layers than the shape's.")
    parser.add_argument("--precision", choices=("bf16", "fp32"), default=None,
                        help="Default: bf16 on a GPU, fp32 on a CPU.")
    parser.add_argument("--presets", nargs="+", default=["adapters", "embeddings"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sequence-length", type=int, default=1024)
    parser.add_argument("--no-gradient-checkpointing", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="A small model of the same family (the CPU path).")
    parser.add_argument("--workdir", type=Path, default=Path("~/.cache/langswap/full-size-train").expanduser())
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one preset in this process
    return parser.parse_args(argv)


def build_tokenizer(folder: Path, size: int) -> Path:
    """`bench_gpu_train.word_tokenizer` of `size` tokens, saved in `folder` (kept and reused)."""
    if not (folder / "tokenizer.json").is_file():
        word_tokenizer(size).save_pretrained(folder)
    return folder


def peak_rss_gib() -> float:
    """This process's resident-memory high-water mark (ru_maxrss, KiB on Linux), in GiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)


def folder_bytes(folder: Path) -> int:
    """Bytes that the files under `folder` take on disk, each file linked more than once counted once."""
    seen, total = set(), 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                status = os.lstat(os.path.join(root, name))
            except FileNotFoundError:  # deleted while walked
                continue
            if (status.st_dev, status.st_ino) not in seen:
                seen.add((status.st_dev, status.st_ino))
                total += status.st_blocks * 512
    return total


class DiskPeak:
    """The most `folder` holds while the `with` block runs, sampled every `every` seconds and once at the end."""

    def __init__(self, folder: Path, every: float = 2.0):
        self.folder, self.every, self.peak = folder, every, 0
        self.done = threading.Event()

    def sample(self) -> None:
        self.peak = max(self.peak, folder_bytes(self.folder) if self.folder.exists() else 0)

    def watch(self) -> None:
        while not self.done.wait(self.every):
            self.sample()

    def __enter__(self):
        self.thread = threading.Thread(target=self.watch, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        self.sample()


def shape_name(args) -> str:
    return "tiny" if args.tiny else args.shape


def run_one(args, model: Path, text: Path, preset: str) -> dict:
    """Train and evaluate in this process; one result line."""
    import torch

    from langswap.evaluation.language_modeling import evaluate_model
    from langswap.models import load_model, load_tokenizer
    from langswap.training.run import TrainConfig, train

    cuda = torch.cuda.is_available()
    clock_callback = update_clock()
    output = args.workdir / f"run-{preset}"
    shutil.rmtree(output, ignore_errors=True)
    config = TrainConfig(model=str(model), train_text=str(text), output=str(output), preset=preset,
                         steps=args.steps, batch_size=args.batch_size, sequence_length=args.sequence_length,
                         precision=args.precision or ("bf16" if cuda else "fp32"), logging_steps=5, save_steps=10 ** 6,
                         gradient_checkpointing=not args.no_gradient_checkpointing, max_lines=20000)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    clock = time.perf_counter()
    with DiskPeak(output) as disk:
        report = train(config, callbacks=[clock_callback])
    wall = time.perf_counter() - clock
    model_bytes = folder_bytes(Path(model))
    timed = clock_callback.times[5:] or clock_callback.times  # the first updates include the allocator's warm-up
    per_update = sum(timed) / len(timed) if timed else None
    tokens = args.batch_size * args.sequence_length
    result = {"shape": shape_name(args), "layers": args.layers, "preset": preset,
              "precision": config.precision, "steps": args.steps, "batch": f"{args.batch_size}x{args.sequence_length}",
              "device": torch.cuda.get_device_name() if cuda else "cpu",
              "tokens_per_second": round(tokens / per_update, 1) if per_update else None,
              "train_wall_seconds": round(wall, 1),
              "peak_gpu_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
              "peak_gpu_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2) if cuda else None,
              "peak_rss_gib": peak_rss_gib(),
              "peak_output_gib": round(disk.peak / 2**30, 2), "peak_output_copies": round(disk.peak / model_bytes, 2),
              "output_gib_at_end": round(folder_bytes(output) / 2**30, 2),
              "phases": [(p.name, p.trainable_parameters, p.train_loss) for p in report.phases]}
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
                   "peak_rss_gib_with_evaluate": peak_rss_gib(),
                   "bits_per_byte": metrics.get("bits_per_byte")})
    shutil.rmtree(output, ignore_errors=True)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.tiny:
        SHAPES["tiny"] = TINY
    vocab = SHAPES[shape_name(args)]["vocab_size"]
    tokenizer = build_tokenizer(args.workdir / f"tokenizer-{vocab}", vocab)
    text = args.workdir / f"text-{vocab}.txt"
    if not text.is_file():
        chain_text(text, vocab, args.steps * args.batch_size * args.sequence_length * 2)
    build = argparse.Namespace(shape=shape_name(args), layers=args.layers, workdir=args.workdir, dtype="bfloat16")
    model = build_model(build, tokenizer)
    if args.one:
        print(json.dumps(run_one(args, model, text, args.one)), flush=True)
        return 0
    for preset in args.presets:
        command = [sys.executable, __file__, "--one", preset, "--shape", args.shape, "--steps", str(args.steps),
                   "--batch-size", str(args.batch_size), "--sequence-length", str(args.sequence_length),
                   "--workdir", str(args.workdir)] + (["--layers", str(args.layers)] if args.layers else []) \
            + (["--precision", args.precision] if args.precision else []) \
            + (["--tiny"] if args.tiny else []) + (["--no-gradient-checkpointing"]
                                                   if args.no_gradient_checkpointing else [])
        done = subprocess.run(command, capture_output=True, text=True)
        shutil.rmtree(args.workdir / f"run-{preset}", ignore_errors=True)  # a failed run's folders: 16 GB a copy
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
