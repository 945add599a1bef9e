"""`langswap transfer` at full size: a model of Llama-3-8B's shape on this machine, wall time and peak memory.

Builds under --workdir (default ~/.cache/langswap/full-size; kept and reused):
- a source tokenizer of Llama-3's family and size: SmolLM2's byte-level BPE retrained to 128,000 tokens, plus 256
  reserved special tokens (Llama-3's 128,256), on all the shared text (English, German and Swahili: the English
  alone holds fewer than 50,000 merges, and Llama-3's vocabulary is multilingual too), and a German target
  tokenizer of the same family and size (`langswap.resources.tokenizer.train_tokenizer` on the shared German text);
  where the text does not hold that many merges a tokenizer is smaller, and the table gives both sizes;
- a model with Llama-3-8B's config (hidden 4,096, 32 layers, MLP 14,336, 32 heads, 8 key-value heads, 128,256
  tokens, untied head) and random weights, written as 5 GB safetensors shards with their index in --dtype.

Then the time of loading and canonicalising (`langswap.tokens.Vocabulary`) each tokenizer, and of a
SentencePiece-family tokenizer of Gemma-2's 256,000 pieces made from theirs; and per method: the time of copying the
checkpoint's files (`cp -r`, the floor for any transfer that writes a new checkpoint), and `langswap transfer`
(stream: auto, no target text, so nothing runs the model) under `/usr/bin/time`, which gives its wall time and peak
resident memory. `wechsel` uses the bench's fastText vectors and MUSE en-de (benchmarks/bench_quality.py builds them
under ~/.cache/langswap/bench-quality). The goal (issue 18): peak memory below 3 times the two new embedding matrices
plus 2 GiB, wall time within 2 times the copy plus the method's own compute (langswap.json's `seconds.method`).

    python benchmarks/bench_full_size.py                              # bfloat16; overlap and wechsel
    python benchmarks/bench_full_size.py --dtype float32 --methods overlap
    python benchmarks/bench_full_size.py --extend 10000 --methods fvt    # into an extension of the source's tokenizer
    python benchmarks/bench_full_size.py --methods overlap --output benchmarks/results/full-size-transfer/results.json

Disk: the checkpoint (16 GB in bfloat16, 32 GB in float32) plus one transfer's output of the same size; the output
is deleted after it is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SHAPES = {
    "llama3-8b": {"hidden_size": 4096, "num_hidden_layers": 32, "intermediate_size": 14336,
                  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                  "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": False,
                  "rms_norm_eps": 1e-5},
    "llama3.2-1b": {"hidden_size": 2048, "num_hidden_layers": 16, "intermediate_size": 8192,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                    "max_position_embeddings": 8192, "rope_theta": 500000.0, "tie_word_embeddings": True,
                    "rms_norm_eps": 1e-5},
}
ENGLISH = ["splits/en.train.txt", "corpora/manpages.en.txt", "corpora/bible.en.txt", "corpora/debian-reference.en.txt"]
SWAHILI = ["splits/sw.train.txt"]
GERMAN = ["splits/de.train.txt", "corpora/manpages.de.txt", "corpora/fortunes.de.txt",
          "corpora/debian-reference.de.txt"]
RESERVED = 256  # Llama-3's special tokens beyond its 128,000 BPE tokens
SHARD_BYTES = 5 * 10**9


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--layers", type=int, default=None, help="Fewer layers than the shape's (less disk); the "
                                                                 "token matrices keep their size.")
    parser.add_argument("--methods", nargs="+", default=["overlap", "wechsel"])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--workdir", type=Path, default=Path("~/.cache/langswap/full-size").expanduser())
    parser.add_argument("--vectors", type=Path, default=Path("~/.cache/langswap/bench-quality").expanduser())
    parser.add_argument("--extend", type=int, default=0, help="Target tokenizer: the source's extended by this "
                                                              "many German tokens (a transfer into an extension) "
                                                              "instead of a German tokenizer of its own.")
    parser.add_argument("--extend-lines", type=int, default=20000, help="German lines the extension learns from.")
    parser.add_argument("--output", type=Path, default=None, help="Also write every figure, the command and the "
                                                                  "machine's load to this JSON file.")
    return parser.parse_args(argv)


def joined_text(data: Path, files: list[str], path: Path) -> Path:
    if not path.is_file():
        with open(path.with_suffix(".partial"), "w", encoding="utf-8") as out:
            for name in files:
                out.write((data / name).read_text(encoding="utf-8"))
        path.with_suffix(".partial").rename(path)
    return path


def build_tokenizers(args, size: int) -> tuple[Path, Path]:
    from langswap.demo.smollm2 import smollm2_135m
    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.resources.tokenizer import train_tokenizer

    source, target = args.workdir / f"tokenizer-en-{size}", args.workdir / f"tokenizer-de-{size}"
    if not source.is_dir():
        english = joined_text(args.data, ENGLISH + GERMAN + SWAHILI, args.workdir / "en-de-sw.txt")
        smollm2 = load_tokenizer(smollm2_135m())
        tokenizer = train_tokenizer(smollm2, english, size - RESERVED)
        tokenizer.add_special_tokens({"additional_special_tokens": [f"<|reserved_special_token_{i}|>"
                                                                    for i in range(RESERVED)]})
        save_tokenizer(tokenizer, source)
    if not target.is_dir():
        german = joined_text(args.data, GERMAN, args.workdir / "de.txt")
        save_tokenizer(train_tokenizer(load_tokenizer(source), german, size), target)
    return source, target


def build_extension(args, source: Path) -> Path:
    """The source tokenizer extended by `args.extend` tokens learnt from the first `args.extend_lines` German lines."""
    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.resources.extension import extend_tokenizer

    folder = args.workdir / f"{source.name}-extended-{args.extend}"
    if not folder.is_dir():
        german = joined_text(args.data, GERMAN, args.workdir / "de.txt")
        with open(german, encoding="utf-8") as text:
            lines = [line for _, line in zip(range(args.extend_lines), text)]
        extension = extend_tokenizer(load_tokenizer(source), lines, args.extend, progress=True)
        save_tokenizer(extension.tokenizer, folder.with_name(folder.name + ".partial"))
        folder.with_name(folder.name + ".partial").rename(folder)
    return folder


def build_model(args, tokenizer_folder: Path) -> Path:
    """The shape's config with random weights (normal, std 0.02; norms 1), sharded like save_pretrained."""
    import torch
    import transformers
    from safetensors.torch import save_file

    shape = dict(SHAPES[args.shape])
    if args.layers:
        shape["num_hidden_layers"] = args.layers
    folder = args.workdir / f"{args.shape}-{shape['num_hidden_layers']}layers-{args.dtype}"
    if (folder / "model.safetensors.index.json").is_file():
        transformers.AutoTokenizer.from_pretrained(tokenizer_folder).save_pretrained(folder)  # the current one
        return folder
    dtype = getattr(torch, args.dtype)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_folder)
    config = transformers.LlamaConfig(**shape, bos_token_id=tokenizer.bos_token_id,
                                      eos_token_id=tokenizer.eos_token_id)
    config.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(config)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    # drawn on the GPU where there is one (8 billion normal draws take minutes on a CPU's one generator thread)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator(device).manual_seed(0)
    shards, shard, size = [], {}, 0

    def flush():
        nonlocal shard, size
        if shard:
            name = f"model-{len(shards) + 1:05d}.safetensors"
            save_file(shard, str(partial / name), metadata={"format": "pt"})
            shards.append((name, list(shard)))
            print(f"  wrote {name} ({size / 2**30:.2f} GiB)", flush=True)
        shard, size = {}, 0

    for name, parameter in meta.named_parameters():
        tensor = torch.empty(parameter.shape, dtype=dtype, device=device)
        if name.endswith("norm.weight"):
            tensor.fill_(1.0)
        else:
            tensor.normal_(0.0, 0.02, generator=generator)
        tensor = tensor.cpu()
        bytes_ = tensor.numel() * tensor.element_size()
        if size and size + bytes_ > SHARD_BYTES:
            flush()
        shard[name] = tensor
        size += bytes_
    flush()
    total = len(shards)
    weight_map = {}
    for number, (name, names) in enumerate(shards, start=1):
        final = f"model-{number:05d}-of-{total:05d}.safetensors"
        (partial / name).rename(partial / final)
        weight_map.update({key: final for key in names})
    total_size = sum((partial / file).stat().st_size for file in set(weight_map.values()))
    (partial / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total_size}, "weight_map": dict(sorted(weight_map.items()))}, indent=2))
    setattr(config, "dtype" if hasattr(config, "dtype") else "torch_dtype", dtype)
    config.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(folder)
    return folder


def gemma_like_tokenizer(args, sources: list[Path], size: int = 256000) -> Path:
    """A SentencePiece-family tokenizer of Gemma-2's size (256,000 pieces: Metaspace, BPE with byte fallback), its
    pieces those of the two 128k tokenizers spelled with `▁` and then, to reach the size, joined pairs of them. No
    merges: it stands for the vocabulary that is canonicalised, not for a tokenization."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = args.workdir / f"tokenizer-sp-{size}"
    if folder.is_dir():
        return folder
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{byte:02X}>" for byte in range(256)]
    seen = set(pieces)
    words = []
    for source in sources:
        tokenizer = AutoTokenizer.from_pretrained(source)
        for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
            text = tokenizer.convert_tokens_to_string([token])
            if text and "\ufffd" not in text and not token.startswith("<|"):
                words.append(text.replace(" ", "\u2581"))
    for word in words:
        if word not in seen:
            seen.add(word)
            pieces.append(word)
    for first, second in zip(words, reversed(words)):
        if len(pieces) >= size:
            break
        joined = first + second.lstrip("\u2581")
        if joined not in seen:
            seen.add(joined)
            pieces.append(joined)
    vocabulary = {piece: index for index, piece in enumerate(pieces[:size])}
    backend = Tokenizer(models.BPE(vocab=vocabulary, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581")
    backend.decoder = decoders.Metaspace(replacement="\u2581")
    PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                            pad_token="<pad>").save_pretrained(folder)
    return folder


def vocabulary_seconds(folders: dict[str, Path]) -> dict[str, dict]:
    """Load time and canonicalisation time (`tokens.Vocabulary`) of each tokenizer, in a fresh process each."""
    found = {}
    for label, folder in folders.items():
        script = ("import json, time; from langswap.models import load_tokenizer; from langswap.tokens import "
                  f"Vocabulary; t = time.perf_counter(); tok = load_tokenizer({str(folder)!r}); "
                  "u = time.perf_counter(); v = Vocabulary(tok); w = time.perf_counter(); "
                  "print(json.dumps({'tokens': len(v), 'family': v.family, 'load_s': round(u - t, 2), "
                  "'canonical_s': round(w - u, 2)}))")
        output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        found[label] = json.loads(output.stdout.strip().splitlines()[-1])
        print(f"vocabulary {label}: {found[label]}", flush=True)
    return found


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak resident GiB) of a command under /usr/bin/time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        completed = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", report.name, *command])
        if completed.returncode:
            raise SystemExit(f"failed ({completed.returncode}): {' '.join(command)}")
        wall, kilobytes = report.read().split()[-2:]
    return float(wall), int(kilobytes) / 2**20


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.data.is_dir():
        print(f"bench_full_size: no shared data at {args.data}; nothing to do.")
        return 0
    if not Path("/usr/bin/time").is_file():
        print("bench_full_size: needs /usr/bin/time (apt install time) for peak memory.")
        return 1
    args.workdir.mkdir(parents=True, exist_ok=True)
    load_at_start = os.getloadavg()
    size = SHAPES[args.shape]["vocab_size"]
    clock = time.perf_counter()
    source_tokenizer, target_tokenizer = build_tokenizers(args, size)
    if args.extend:
        target_tokenizer = build_extension(args, source_tokenizer)
    model = build_model(args, source_tokenizer)
    print(f"inputs ready in {time.perf_counter() - clock:.0f} s: {model}", flush=True)
    vocabularies = vocabulary_seconds({"source": source_tokenizer, "target": target_tokenizer,
                                       "sentencepiece": gemma_like_tokenizer(args, [source_tokenizer,
                                                                                     target_tokenizer])})
    from transformers import AutoTokenizer

    rows = {"source": len(AutoTokenizer.from_pretrained(source_tokenizer)),
            "target": len(AutoTokenizer.from_pretrained(target_tokenizer))}
    index = json.loads((model / "model.safetensors.index.json").read_text())
    checkpoint_gib = index["metadata"]["total_size"] / 2**30
    hidden = SHAPES[args.shape]["hidden_size"]
    element = 2 if args.dtype == "bfloat16" else 4
    new_gib = 2 * rows["target"] * hidden * element / 2**30  # input and output matrices
    results = []
    for method in args.methods:
        copy = args.workdir / "copy"
        shutil.rmtree(copy, ignore_errors=True)
        copy_seconds, _ = timed(["cp", "-r", str(model), str(copy)])
        shutil.rmtree(copy)
        os.sync()
        output = args.workdir / f"out-{method}-{args.dtype}{f'-extend-{args.extend}' if args.extend else ''}"
        shutil.rmtree(output, ignore_errors=True)
        command = [sys.executable, "-m", "langswap", "-q", "transfer", "--source-model", str(model),
                   "--target-tokenizer", str(target_tokenizer), "--method", method, "--output", str(output)]
        if method in ("wechsel", "combined"):
            command += ["--set", f"resources.source_vectors={args.vectors / 'fasttext-en-100d-10ep-min3.bin'}",
                        "--set", f"resources.target_vectors={args.vectors / 'fasttext-de-100d-10ep-min3.bin'}",
                        "--set", f"resources.dictionary={args.data / 'dicts' / 'muse-en-de.tsv'}"]
        wall, peak = timed(command)
        record = json.loads((output / "langswap.json").read_text())
        shutil.rmtree(output)
        os.sync()
        bound = 3 * new_gib + 2
        method_seconds = record["seconds"].get("method", 0.0)
        row = {"method": method, "dtype": args.dtype, "checkpoint_gib": round(checkpoint_gib, 2),
               "new_matrices_gib": round(new_gib, 2), "copy_s": copy_seconds, "wall_s": wall,
               "method_s": method_seconds, "peak_gib": round(peak, 2), "peak_goal_gib": round(bound, 2),
               "wall_goal_s": round(2 * (copy_seconds + method_seconds), 1), "streamed": bool(record["streamed"]),
               "seconds": record["seconds"], "tokenizers": rows, "vocabulary": record.get("vocabulary")}
        results.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{args.shape} ({checkpoint_gib:.1f} GiB in {args.dtype}; tokenizers: {rows['source']:,} source and "
          f"{rows['target']:,} target tokens; the two new matrices {new_gib:.2f} GiB)\n")
    for label, found in vocabularies.items():
        print(f"{label} tokenizer: {found['tokens']:,} tokens ({found['family']}), loaded in {found['load_s']} s, "
              f"canonicalised in {found['canonical_s']} s")
    print("| method | copy s | transfer wall s (goal) | of it, method s | peak GiB (goal) |")
    print("|---|---|---|---|---|")
    for row in results:
        print(f"| {row['method']} | {row['copy_s']:.0f} | {row['wall_s']:.0f} ({row['wall_goal_s']:.0f}) | "
              f"{row['method_s']:.0f} | {row['peak_gib']:.2f} ({row['peak_goal_gib']:.2f}) |")
    if args.output:
        write_results(args, argv, results, vocabularies, checkpoint_gib, new_gib, rows, load_at_start)
    return 0


def write_results(args, argv, results, vocabularies, checkpoint_gib, new_gib, tokenizers, load_at_start) -> None:
    """The run's figures as JSON, with what a reader needs to repeat it: the command, versions, cores, load."""
    import platform

    import torch
    import transformers

    import langswap

    command = "python benchmarks/bench_full_size.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "command": command.strip(), "shape": args.shape, "dtype": args.dtype,
        "layers": args.layers or SHAPES[args.shape]["num_hidden_layers"], "extend": args.extend,
        "checkpoint_gib": round(checkpoint_gib, 2), "new_matrices_gib": round(new_gib, 2), "tokenizers": tokenizers,
        "vocabularies": vocabularies, "rows": results,
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in load_at_start],
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
                    "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "langswap": langswap.__version__},
    }, indent=2) + "\n", encoding="utf-8")
    print(f"results written to {args.output}")


if __name__ == "__main__":
    sys.exit(main())
