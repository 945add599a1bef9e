"""Training speed on a GPU: `langswap train` against a bare PyTorch loop of the same model, batch and precision.

Builds everything on the machine it runs on (nothing is downloaded): a model with random weights of the SmolLM2-135M
shape (`--shape smollm2-135m`: hidden 576, 30 layers, 9 heads of which 3 key/value, MLP 1,536, 49,152 tokens, tied
head) or the Llama-3.2-1B shape (`--shape llama-3.2-1b`: hidden 2,048, 16 layers, 32 heads of which 8 key/value,
MLP 8,192, 128,256 tokens, tied head), a word-level tokenizer of that vocabulary and a text drawn from a random
bigram chain over its words (Zipf distributed successors, so the loss has something to learn), packed as `langswap
train` packs it. Then, for each variant, `--steps` updates of batch `--batch-size` x `--sequence-length`, timed per update after `--warmup` updates
(which pay for allocation, autotuning and compilation):

- `bare eager`: the model, AdamW (foreach), gradient clipping at 1.0, bf16 autocast on fp32 master weights, SDPA;
  nothing else. `bare fused`: the same with fused AdamW (what `langswap full` uses on CUDA: like with like);
  `bare fused+compile`: fused AdamW and torch.compile.
- `langswap ...`: `langswap.training.run.train` (the Trainer, packing, phases) with preset `full` or `embeddings`
  and the speed options named in the label (`TrainConfig.attention`, `compile`, `fused_optimizer`,
  `liger_kernel`, `document_mask`, gradient accumulation).

Prints per variant: tokens per second (median update), model-FLOPs utilisation (6 x matmul parameters x tokens plus
attention, 12 x layers x hidden x sequence length per token, as PaLM counts it, over the device's dense bf16 peak:
`--peak-tflops`, or H100 SXM 989, H100 PCIe 756, H200 989, A100 312, L4 121), peak GPU memory, and the time of the
whole run beside its updates (phase start, checkpoint, evaluation). An embeddings-only phase is given the same model
FLOPs as a full one: its MFU says how fast it runs against that yardstick, not how much of its work is useful.

Without a GPU it runs the same code on the CPU at `--shape tiny` (no MFU), so the command is checked anywhere:

    python benchmarks/bench_gpu_train.py                      # on a CUDA machine: SmolLM2-135M shape, bf16
    python benchmarks/bench_gpu_train.py --shape tiny --steps 6 --warmup 2   # CPU check
    python benchmarks/bench_gpu_train.py --variants "bare eager" "langswap full"
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

SHAPES = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, vocab_size=49152, max_position_embeddings=2048, rope_theta=100000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True),
    "llama-3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rope_theta=500000.0,
                         rms_norm_eps=1e-5, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=2048, max_position_embeddings=512, tie_word_embeddings=True),
}
# dense bf16 peak TFLOP/s by device name (no sparsity)
PEAKS = {"H100 PCIe": 756.0, "H100": 989.4, "H200": 989.4, "A100": 312.0, "L4": 121.0, "A10G": 125.0}
VARIANTS = {
    "bare eager": {"bare": True},
    "bare fused": {"bare": True, "fused": True},
    "bare fused+compile": {"bare": True, "fused": True, "compile": True},
    "langswap full": {"preset": "full"},
    "langswap full, foreach AdamW": {"preset": "full", "fused_optimizer": "off"},
    "langswap full + compile": {"preset": "full", "compile": True},
    "langswap full + liger": {"preset": "full", "liger_kernel": True},
    "langswap full + document mask": {"preset": "full", "document_mask": True},
    "langswap full, micro-batch / 4, accumulation 4": {"preset": "full", "accumulation": 4},
    "langswap embeddings": {"preset": "embeddings"},
    "langswap embeddings + compile": {"preset": "embeddings", "compile": True},
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None,
                        help="Model shape (default smollm2-135m on a GPU, tiny on the CPU).")
    parser.add_argument("--batch-size", type=int, default=None, help="Sequences per update (default 32; CPU 4).")
    parser.add_argument("--sequence-length", type=int, default=None, help="Default 512; CPU 64.")
    parser.add_argument("--steps", type=int, default=30, help="Updates per variant.")
    parser.add_argument("--warmup", type=int, default=10, help="Updates not timed at the start.")
    parser.add_argument("--precision", choices=("bf16", "fp32"), default=None, help="Default bf16 on a GPU.")
    parser.add_argument("--peak-tflops", type=float, help="The device's dense peak, for MFU.")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), help="Default: all (CPU: no compile, "
                        "no liger).")
    parser.add_argument("--workdir", type=Path, help="Where the model, tokenizer and text are built (default: a "
                        "temporary folder).")
    parser.add_argument("--output", type=Path, help="JSON results (default benchmarks/results/gpu-train-speed-"
                        "DEVICE.json).")
    return parser.parse_args(argv)


def word_tokenizer(vocab: int):
    """A word-level tokenizer of `vocab` tokens: <|endoftext|> (bos and eos), <unk>, then the words w2 ...
    w{vocab-1}."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<|endoftext|>": 0, "<unk>": 1, **{f"w{i}": i for i in range(2, vocab)}}
    backend = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
                                   unk_token="<unk>")


def chain_text(path: Path, vocab: int, tokens: int, seed: int = 0) -> Path:
    """About `tokens` words of `word_tokenizer(vocab)` drawn from a random bigram chain, lines of 100-400 words."""
    import numpy as np

    rng = np.random.default_rng(seed)
    successors = rng.integers(2, vocab, size=(vocab, 16))
    weights = 1.0 / np.arange(1, 17)
    weights /= weights.sum()
    lines, written, word = [], 0, 2
    while written < tokens:
        length = int(rng.integers(100, 400))
        choices = rng.choice(16, size=length, p=weights)
        line = []
        for choice in choices:
            word = int(successors[word, choice])
            line.append(f"w{word}")
        lines.append(" ".join(line))
        written += length + 1
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def build_world(folder: Path, shape: dict, tokens: int, seed: int = 0) -> tuple[Path, Path]:
    """A Llama-shaped model folder with random weights and a word-level tokenizer of its vocabulary, and a text of
    about `tokens` words drawn from a random bigram chain. Returns (model folder, text file)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = word_tokenizer(shape["vocab_size"])
    torch.manual_seed(seed)
    config = LlamaConfig(**shape, bos_token_id=0, eos_token_id=0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # a 1B model's random draw takes a CPU long
        model = LlamaForCausalLM(config)
    model_folder = folder / "model"
    model.save_pretrained(model_folder)
    tokenizer.save_pretrained(model_folder)
    return model_folder, chain_text(folder / "train.txt", shape["vocab_size"], tokens, seed)


def model_flops_per_token(config, sequence_length: int) -> float:
    """6 x the parameters that multiply (the body and the output layer, not the input lookup) plus attention's
    12 x layers x hidden x sequence length (PaLM's count, causal masking not discounted)."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    head_dim = hidden // heads
    per_layer = (hidden * head_dim * (heads + 2 * kv_heads) + hidden * hidden + 3 * hidden * config.intermediate_size)
    matmul = layers * per_layer + config.vocab_size * hidden
    return 6.0 * matmul + 12.0 * layers * hidden * sequence_length


def device_peak(args) -> tuple[float | None, str]:
    import torch

    if args.peak_tflops:
        return args.peak_tflops, f"given, {args.peak_tflops} TFLOP/s"
    if not torch.cuda.is_available():
        return None, "CPU: no peak"
    name = torch.cuda.get_device_name()
    for key, peak in PEAKS.items():
        if key in name:
            return peak, f"{name}: dense bf16 {peak} TFLOP/s"
    return None, f"{name}: unknown peak (give --peak-tflops)"


def bare_loop(model_folder: Path, blocks, args, options: dict) -> dict:
    """The careful bare loop: returns per-update seconds and losses."""
    import torch
    from transformers import AutoModelForCausalLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_folder, attn_implementation="sdpa").to(device, torch.float32)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01,
                                  **({"fused": True} if options.get("fused") else {}))
    step_model = torch.compile(model) if options.get("compile") else model
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    times, losses = [], []
    for step in range(args.steps):
        start = time.perf_counter()
        rows = torch.arange(step * args.batch_size, (step + 1) * args.batch_size) % len(blocks)
        batch = blocks[rows].to(device, non_blocking=True)
        with autocast:
            loss = step_model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {"times": times, "losses": [float(loss) for loss in losses]}


def langswap_run(model_folder: Path, text: Path, folder: Path, args, options: dict) -> dict:
    from bench_train_speed import update_clock

    from langswap.training.run import TrainConfig, train

    accumulation = options.get("accumulation", 1)
    if args.batch_size % accumulation:
        raise SystemExit(f"--batch-size {args.batch_size} does not split into {accumulation} micro-batches")
    clock = update_clock()
    config = TrainConfig(model=str(model_folder), train_text=str(text), output=str(folder), overwrite=True,
                         preset=options["preset"], steps=args.steps, batch_size=args.batch_size // accumulation,
                         gradient_accumulation=accumulation, sequence_length=args.sequence_length,
                         precision=args.precision, save_steps=10 * args.steps, logging_steps=args.steps,
                         compile=bool(options.get("compile")), fused_optimizer=options.get("fused_optimizer", "auto"),
                         liger_kernel=bool(options.get("liger_kernel")),
                         document_mask=bool(options.get("document_mask")))
    report = train(config, callbacks=[clock])
    return {"times": clock.times, "losses": [report.phases[0].train_loss], "run_seconds": report.seconds}


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from langswap.training.data import pack

    cuda = torch.cuda.is_available()
    args.shape = args.shape or ("smollm2-135m" if cuda else "tiny")
    args.batch_size = args.batch_size or (32 if cuda else 4)
    args.sequence_length = args.sequence_length or (512 if cuda else 64)
    args.precision = args.precision or ("bf16" if cuda else "fp32")
    if args.warmup >= args.steps:
        raise SystemExit(f"--warmup {args.warmup} leaves no timed update of --steps {args.steps}")
    names = args.variants or [name for name in VARIANTS
                              if cuda or not (VARIANTS[name].get("compile") or VARIANTS[name].get("liger_kernel"))]
    if not cuda:
        print("no GPU: the CPU path, to check the command; its figures say nothing about a GPU", flush=True)
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None and "langswap full + liger" in names:
        print("langswap full + liger: skipped, the liger-kernel package is not installed", flush=True)
        names.remove("langswap full + liger")
    peak, peak_note = device_peak(args)
    results = {"device": torch.cuda.get_device_name() if cuda else "cpu", "peak": peak_note, "shape": args.shape,
               "batch_size": args.batch_size, "sequence_length": args.sequence_length, "precision": args.precision,
               "steps": args.steps, "warmup": args.warmup, "torch": torch.__version__, "variants": {}}
    tokens_per_update = args.batch_size * args.sequence_length
    with tempfile.TemporaryDirectory() as temporary:
        workdir = args.workdir or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        clock = time.perf_counter()
        model_folder, text = build_world(workdir, SHAPES[args.shape], tokens_per_update * (args.steps + 2))
        from transformers import AutoConfig, AutoTokenizer

        config = AutoConfig.from_pretrained(model_folder)
        flops = model_flops_per_token(config, args.sequence_length)
        blocks = pack(AutoTokenizer.from_pretrained(model_folder), text.read_text().splitlines(),
                      args.sequence_length, "causal").blocks
        print(f"built the {args.shape} model, tokenizer and {blocks.numel():,} tokens in "
              f"{time.perf_counter() - clock:.0f} s; {flops / 1e9:.2f} GFLOP per token; peak: {peak_note}",
              flush=True)
        print("| variant | tokens/s | MFU | peak GPU memory | run s (updates s) |\n|---|---|---|---|---|", flush=True)
        for name in names:
            options = VARIANTS[name]
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            try:
                if options.get("bare"):
                    measured = bare_loop(model_folder, blocks, args, options)
                else:
                    measured = langswap_run(model_folder, text, workdir / "run", args, options)
            except Exception as error:  # one variant's failure (a missing kernel, a compile error) is a figure too
                import traceback

                traceback.print_exc()
                print(f"| {name} | failed: {type(error).__name__}: {str(error)[:200]} | | | |", flush=True)
                results["variants"][name] = {"failed": f"{type(error).__name__}: {error}"[:2000]}
                continue
            wall = measured.get("run_seconds") or time.perf_counter() - start
            timed = measured["times"][args.warmup:]
            median = statistics.median(timed)
            speed = tokens_per_update / median
            mfu = speed * flops / (peak * 1e12) if peak else None
            memory = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
            results["variants"][name] = {"tokens_per_second": round(speed, 1), "mfu": mfu and round(mfu, 4),
                                         "peak_memory_gib": memory and round(memory, 2),
                                         "seconds_per_update": [round(t, 4) for t in measured["times"]],
                                         "run_seconds": round(wall, 1), "losses": measured["losses"]}
            print(f"| {name} | {speed:,.0f} | {'-' if mfu is None else f'{100 * mfu:.1f}%'} | "
                  f"{'-' if memory is None else f'{memory:.1f} GiB'} | {wall:.1f} ({sum(measured['times']):.1f}) |",
                  flush=True)
            if not all(math.isfinite(loss) for loss in measured["losses"] if loss is not None):
                print(f"  {name}: a non-finite loss", flush=True)
    output = args.output or REPO / "benchmarks" / "results" / (
        "gpu-train-speed-" + results["device"].replace(" ", "-").lower() + ".json")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
