"""Token stores at scale (issue 35): how fast a store is built next to the tokenizer alone, how much memory a large
corpus adds to a training run, and how soon a rerun on a prepared store makes its first update.

    python benchmarks/bench_store.py prepare --gigabytes 2        # the tokenizer alone vs a fresh token_store build
    python benchmarks/bench_store.py memory --gigabytes 2         # peak RSS of `langswap train`, 1 MB vs 2 GB corpus
    python benchmarks/bench_store.py memory --gigabytes 2 --ranks 2   # the same under torchrun (CPU, gloo)
    python benchmarks/bench_store.py first-update --gigabytes 2   # seconds from the command to its first update
    python benchmarks/bench_store.py all --gigabytes 2
    python benchmarks/bench_store.py teacher-text --gigabytes 0.5 # a teacher reading documents back from a .gz

teacher-text: the corpus gzipped, its store, and the time to read random documents' text back as the teacher does
(`TokenStore.document_text`): from the .gz itself (a decompression up to each document, --old-documents of them)
against the store's text copy (made once by `prepare_texts`, timed, then --documents of them).

Goals (issue 35): a store builds at >= 2/3 of the tokenizer's own batched throughput; a large corpus adds < 200 MB
to a run's peak RSS; a rerun on a prepared store finishes its first optimizer update within 30 s.

The corpus is REPEATED SHARED DATA: ../shared/data's splits/de.train.txt, corpora/manpages.de.txt and
fortunes.de.txt, written one after another again and again until it holds --gigabytes. Its words repeat, so the
tokenizer's word cache hits more often than on distinct text; both sides of the throughput ratio read the same text.
The target tokenizer is trained on de.train.txt (10,000 tokens, from SmolLM2-135M's, as bench_calibration.py does)
unless --tokenizer names one; the model is a tiny Llama (hidden 64, 2 layers) built with it, trained with
`--preset embeddings` for --steps updates of 4 x 128 tokens. Peak RSS is wait4's ru_maxrss of the command (the
largest of it and its children); under torchrun each rank's VmHWM is also sampled from /proc every 0.05 s (Linux).
The first update is timed from the start of the command to the first write of curve.json (logging_steps=1); no
evaluation text is given, so there is no step-0 evaluation. --threads sets the tokenizer's threads (RAYON_NUM_THREADS)
everywhere; torch's threads follow OMP_NUM_THREADS as given.

Everything is made in the work folder (default ~/.cache/langswap/bench-store) and reused, except the stores and
runs that are measured, which are removed first. Figures go to --json, merged into what it holds by section
(prepare_SIZEGB, memory_SIZEGB, memory_SIZEGB_N_ranks, first_update_SIZEGB), each with the command that printed
it and the commands it timed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(os.environ.get("LANGSWAP_BENCH_DATA", REPO.parent / "shared" / "data"))
SHARED_FILES = ("splits/de.train.txt", "corpora/manpages.de.txt", "corpora/fortunes.de.txt")
SMALL_BYTES = 1_000_000
SAMPLE_BYTES = 64 << 20  # text the tokenizer alone is timed on
BATCH_SIZE, SEQUENCE_LENGTH = 4, 128


def parse_args(argv=None):
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--gigabytes", type=float, default=2.0, help="Size of the repeated corpus (GB, 1e9 bytes).")
    common.add_argument("--data", type=Path, default=DEFAULT_DATA)
    common.add_argument("--workdir", type=Path, default=Path("~/.cache/langswap/bench-store").expanduser())
    common.add_argument("--tokenizer", type=Path, help="Target tokenizer folder (default: train one of --vocab).")
    common.add_argument("--vocab", type=int, default=10_000)
    common.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="Tokenizer threads, here and in every command run (sets RAYON_NUM_THREADS and "
                             "TOKENIZERS_PARALLELISM; default: all cores).")
    common.add_argument("--steps", type=int, default=5, help="Updates of each training run.")
    common.add_argument("--ranks", type=int, default=1, help="memory: processes under torchrun (1: no torchrun).")
    common.add_argument("--documents", type=int, default=2000, help="teacher-text: documents read from the copy.")
    common.add_argument("--old-documents", type=int, default=20,
                        help="teacher-text: documents read from the .gz itself.")
    common.add_argument("--json", type=Path, default=REPO / "benchmarks" / "results" / "store.json")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("prepare", "memory", "first-update", "all", "teacher-text"):
        commands.add_parser(name, parents=[common])
    return parser.parse_args(argv)


# -- inputs: corpus, tokenizer, model (made once, reused) --------------------------------------------------------------

def build_corpus(data: Path, workdir: Path, gigabytes: float) -> tuple[Path, Path]:
    """(corpus of `gigabytes`, a corpus of its first SMALL_BYTES): the shared files one after another, again and
    again, cut at the end of a line."""
    corpus, small = workdir / f"corpus-{gigabytes:g}GB.txt", workdir / "corpus-1MB.txt"
    block = b"".join((data / name).read_bytes() for name in SHARED_FILES)  # each ends with a newline
    if not corpus.is_file():
        copies, rest = divmod(int(gigabytes * 1e9), len(block))
        partial = corpus.with_suffix(".partial")
        with open(partial, "wb") as out:
            for _ in range(copies):
                out.write(block)
            out.write(block[:block.rfind(b"\n", 0, rest) + 1])
        partial.rename(corpus)
        print(f"wrote {corpus}: {corpus.stat().st_size:,} bytes, repeated shared data ({copies} copies and part of "
              f"one of {len(block):,} bytes)", flush=True)
    if not small.is_file():
        small.write_bytes(block[:block.rfind(b"\n", 0, SMALL_BYTES) + 1])
    return corpus, small


def target_tokenizer(args) -> Path:
    if args.tokenizer:
        return args.tokenizer
    folder = args.workdir / f"tokenizer-{args.vocab}"
    if not (folder / "tokenizer.json").is_file():
        from langswap.demo.smollm2 import smollm2_135m
        from langswap.models import load_tokenizer
        from langswap.resources.tokenizer import train_tokenizer

        source = load_tokenizer(smollm2_135m())
        train_tokenizer(source, args.data / SHARED_FILES[0], args.vocab).save_pretrained(folder)
    return folder


def tiny_model(workdir: Path, tokenizer_folder: Path) -> Path:
    """A tiny Llama (hidden 64, 2 layers, untied head) with the target tokenizer, for training runs that measure
    the data path rather than the model."""
    folder = workdir / f"tiny-llama-{hashlib.sha1(str(tokenizer_folder.resolve()).encode()).hexdigest()[:8]}"
    if not (folder / "config.json").is_file():
        import torch
        import transformers

        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_folder)
        torch.manual_seed(0)
        config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                          max_position_embeddings=256, tie_word_embeddings=False,
                                          bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
        transformers.LlamaForCausalLM(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


# -- measuring a command -----------------------------------------------------------------------------------------------

def _proc(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _descendants(pid: int) -> list[int]:
    """Processes started by `pid` and by them (Linux: /proc/PID/task/TID/children)."""
    children = [int(child) for task in Path(f"/proc/{pid}/task").glob("*")
                for child in _proc(pid, f"task/{task.name}/children").split()]
    return children + [grandchild for child in children for grandchild in _descendants(child)]


def run_measured(command: list[str], log: Path, watch: dict[str, Path] | None = None) -> dict:
    """Run `command` (output to `log`): its seconds, peak RSS (MB, wait4's ru_maxrss: the largest of it and its
    children), each rank's sampled VmHWM (MB) and the seconds until each `watch` path first exists."""
    seen, ranks = {}, {}
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        now = time.perf_counter() - start
        seen.update({name: now for name, path in (watch or {}).items() if name not in seen and path.exists()})
        if pid:
            break
        for child in _descendants(process.pid):
            rank = [line[5:] for line in _proc(child, "environ").split(b"\0") if line.startswith(b"RANK=")]
            peak = [line.split()[1] for line in _proc(child, "status").splitlines() if line.startswith(b"VmHWM:")]
            if rank and peak:
                ranks[int(rank[0])] = max(ranks.get(int(rank[0]), 0), int(peak[0]) / 1024)
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"bench_store: `{' '.join(command)}` failed ({process.returncode}); end of {log}:\n{tail}")
    return {"run_command": " ".join(command), "seconds": round(now, 2),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "rank_peak_rss_mb": {rank: round(mb, 1) for rank, mb in sorted(ranks.items())},
            **{f"seconds_to_{name}": round(seconds, 2) for name, seconds in seen.items()}}


def train_command(model: Path, corpus: Path, output: Path, data_dir: Path, steps: int, ranks: int = 1) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}"] if ranks > 1 \
        else [sys.executable]
    return launcher + ["-m", "langswap.cli", "train", "--model", str(model), "--train-text", str(corpus), "--output",
                       str(output), "--preset", "embeddings", "--steps", str(steps),
                       "--set", f"batch_size={BATCH_SIZE}", "--set", f"sequence_length={SEQUENCE_LENGTH}",
                       "--set", "logging_steps=1", "--set", "save_steps=100000", "--set", f"data_dir={data_dir}"]


def prepare_store(model: Path, corpus: Path, data_dir: Path) -> None:
    subprocess.run([sys.executable, "-m", "langswap.cli", "-q", "prepare", "--model", str(model), "--train-text",
                    str(corpus), "--preset", "embeddings", "--set", f"data_dir={data_dir}"], check=True)


# -- the subcommands ---------------------------------------------------------------------------------------------------

def bench_prepare(args, corpus: Path, tokenizer_folder: Path) -> dict:
    """(a) the tokenizer alone on the corpus's first SAMPLE_BYTES, in batches as store.py makes them; (b) a fresh
    token_store of the whole corpus."""
    from langswap.models import load_tokenizer
    from langswap.training.data import iter_documents
    from langswap.training.store import BATCH_BYTES, BATCH_DOCUMENTS, BatchEncoder, token_store

    tokenizer = load_tokenizer(tokenizer_folder)
    encode = BatchEncoder(tokenizer)  # the store's own call of the tokenizer: what it costs without the store
    batches, batch, size, sample = [], [], 0, 0
    for document in iter_documents(corpus):
        batch.append(document.text)
        size += len(document.text.encode("utf-8"))
        if len(batch) >= BATCH_DOCUMENTS or size >= BATCH_BYTES:
            batches.append(batch)
            batch, sample, size = [], sample + size, 0
            if sample >= SAMPLE_BYTES:
                break
    batches, sample = batches + ([batch] if batch else []), sample + size
    clock = time.perf_counter()
    for batch in batches:
        encode(batch)
    alone = time.perf_counter() - clock
    del batches
    data_dir = args.workdir / "stores-prepare"
    shutil.rmtree(data_dir, ignore_errors=True)
    clock = time.perf_counter()
    store = token_store([corpus], tokenizer, "causal", data_dir=data_dir, progress=True)
    built = time.perf_counter() - clock
    result = {"tokenizer_bytes": sample, "tokenizer_seconds": round(alone, 2),
              "tokenizer_bytes_per_second": round(sample / alone), "store_bytes": store.bytes,
              "store_tokens": store.num_tokens, "store_seconds": round(built, 2),
              "store_bytes_per_second": round(store.bytes / built)}
    result["ratio"] = round(result["store_bytes_per_second"] / result["tokenizer_bytes_per_second"], 3)
    shutil.rmtree(data_dir, ignore_errors=True)  # as large as the corpus; measured, not kept
    return result


def bench_memory(args, model: Path, corpus: Path, small: Path) -> dict:
    """Peak RSS of the same training run on `small` and on `corpus`; one process builds each store in the run
    (removed first), under torchrun both stores are prepared first."""
    runs, data_dir = {}, args.workdir / "stores"
    for name, text in (("small", small), ("large", corpus)):
        output = args.workdir / "runs" / f"memory-{name}-{args.ranks}"
        shutil.rmtree(output, ignore_errors=True)
        if args.ranks == 1:
            shutil.rmtree(data_dir, ignore_errors=True)
        else:
            prepare_store(model, text, data_dir)
        runs[name] = run_measured(train_command(model, text, output, data_dir, args.steps, args.ranks),
                                  output.with_suffix(".log"))
        runs[name]["corpus_bytes"] = text.stat().st_size
    result = {"ranks": args.ranks, "store_built_in_run": args.ranks == 1, **runs,
              "added_mb": round(runs["large"]["peak_rss_mb"] - runs["small"]["peak_rss_mb"], 1)}
    if args.ranks > 1:
        result["rank_added_mb"] = {rank: round(runs["large"]["rank_peak_rss_mb"][rank] - peak, 1)
                                   for rank, peak in runs["small"]["rank_peak_rss_mb"].items()
                                   if rank in runs["large"]["rank_peak_rss_mb"]}
    return result


def bench_first_update(args, model: Path, corpus: Path) -> dict:
    """The training run again, in a fresh output folder, on the corpus's store (prepared first if missing)."""
    data_dir, output = args.workdir / "stores", args.workdir / "runs" / "first-update"
    prepare_store(model, corpus, data_dir)
    shutil.rmtree(output, ignore_errors=True)
    return run_measured(train_command(model, corpus, output, data_dir, args.steps), output.with_suffix(".log"),
                        {"record": output / "langswap-train.json", "first_update": output / "curve.json"})


def bench_teacher_text(args, corpus: Path, tokenizer_folder: Path) -> dict:
    """Random documents' text read back from a .gz part: from the file itself, and from the store's text copy."""
    import gzip
    import random

    from langswap.models import load_tokenizer
    from langswap.training.sources import read_document
    from langswap.training.store import TEXTS, token_store

    packed = corpus.with_name(corpus.name + ".gz")
    if not packed.is_file():
        partial = packed.with_suffix(".partial")
        with open(corpus, "rb") as source, gzip.open(partial, "wb", compresslevel=6) as out:
            shutil.copyfileobj(source, out, 1 << 24)
        partial.rename(packed)
    data_dir = args.workdir / "stores-teacher-text"
    shutil.rmtree(data_dir, ignore_errors=True)
    clock = time.perf_counter()
    store = token_store([packed], load_tokenizer(tokenizer_folder), "causal", data_dir=data_dir)
    build = time.perf_counter() - clock
    pick = random.Random(0)
    old = [pick.randrange(store.num_documents) for _ in range(args.old_documents)]
    clock = time.perf_counter()
    texts = [read_document(*store.source(index), store.record.get("text_field") or "text") for index in old]
    old_seconds = time.perf_counter() - clock
    clock = time.perf_counter()
    store.prepare_texts()
    copy_seconds = time.perf_counter() - clock
    assert [store.document_text(index) for index in old] == texts
    new = [pick.randrange(store.num_documents) for _ in range(args.documents)]
    clock = time.perf_counter()
    size = sum(len(store.document_text(index)) for index in new)
    new_seconds = time.perf_counter() - clock
    return {"gz": str(packed), "gz_bytes": packed.stat().st_size, "documents": store.num_documents,
            "store_seconds": round(build, 1), "copy_seconds": round(copy_seconds, 1),
            "copy_bytes": (store.folder / TEXTS).stat().st_size,
            "from_gz_documents": len(old), "from_gz_seconds_per_document": round(old_seconds / len(old), 4),
            "from_copy_documents": len(new), "from_copy_seconds_per_document": round(new_seconds / len(new), 7),
            "from_copy_characters": size}


def table(rows: list[tuple[str, str, str]]) -> None:
    for figure, value, goal in [("figure", "value", "goal")] + rows:
        print(f"  {figure:<64} {value:>20}  {goal}")


def main(argv=None) -> int:
    args = parse_args(argv)
    missing = [name for name in SHARED_FILES if not (args.data / name).is_file()]
    if missing:
        print(f"bench_store: {', '.join(str(args.data / name) for name in missing)} not there; give --data. "
              "Nothing was run.")
        return 0
    # before tokenizers starts its thread pool; inherited by every command this runs
    os.environ["RAYON_NUM_THREADS"] = str(args.threads)
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if args.threads > 1 else "false"
    args.workdir = args.workdir.expanduser()
    args.workdir.mkdir(parents=True, exist_ok=True)
    (args.workdir / "runs").mkdir(exist_ok=True)
    corpus, small = build_corpus(args.data, args.workdir, args.gigabytes)
    tokenizer_folder = target_tokenizer(args)
    import torch

    command = "python benchmarks/bench_store.py " + " ".join(sys.argv[1:] if argv is None else argv)
    base = {"command": command, "corpus": str(corpus), "corpus_bytes": corpus.stat().st_size,
            "corpus_kind": f"repeated shared data ({', '.join(SHARED_FILES)})", "tokenizer": str(tokenizer_folder),
            "tokenizer_threads": args.threads, "torch_threads": os.environ.get("OMP_NUM_THREADS", "torch default"),
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
                       f"{torch.__version__}"}
    print(f"{command}\ncorpus: {corpus} ({corpus.stat().st_size / 1e9:.3f} GB of repeated shared data); "
          f"{base['machine']}; tokenizer threads {args.threads}, torch threads {base['torch_threads']}", flush=True)
    results, rows = {}, []
    if args.command in ("prepare", "all"):
        result = results[f"prepare_{args.gigabytes:g}GB"] = {**base, **bench_prepare(args, corpus, tokenizer_folder)}
        rows += [(f"tokenizer alone, batched ({result['tokenizer_bytes'] / 1e6:,.0f} MB)",
                  f"{result['tokenizer_bytes_per_second'] / 1e6:.2f} MB/s", ""),
                 (f"token_store, fresh ({result['store_bytes'] / 1e6:,.0f} MB of text)",
                  f"{result['store_bytes_per_second'] / 1e6:.2f} MB/s, {result['store_seconds']:,.0f} s", ""),
                 ("token_store / tokenizer alone", f"{result['ratio']:.2f}", ">= 0.67")]
    if args.command in ("memory", "first-update", "all"):
        model = tiny_model(args.workdir, tokenizer_folder)
    if args.command in ("memory", "all"):
        section = f"memory_{args.gigabytes:g}GB" + (f"_{args.ranks}_ranks" if args.ranks > 1 else "")
        result = results[section] = {**base, **bench_memory(args, model, corpus, small)}
        ranks = f" ({args.ranks} ranks, max of all processes)" if args.ranks > 1 else ""
        for name in ("small", "large"):
            run = result[name]
            rows.append((f"peak RSS of train, {run['corpus_bytes'] / 1e6:,.0f} MB corpus{ranks}",
                         f"{run['peak_rss_mb']:,.0f} MB", ""))
            rows += [(f"  rank {rank}", f"{mb:,.0f} MB", "") for rank, mb in run["rank_peak_rss_mb"].items()]
        rows.append(("added by the large corpus" + (" (store built in the run)" if args.ranks == 1 else ""),
                     f"{result['added_mb']:,.0f} MB", "< 200 MB"))
        rows += [(f"  rank {rank}", f"{mb:,.0f} MB", "< 200 MB")
                 for rank, mb in result.get("rank_added_mb", {}).items()]
    if args.command in ("first-update", "all"):
        result = results[f"first_update_{args.gigabytes:g}GB"] = {**base, **bench_first_update(args, model, corpus)}
        rows += [("rerun: langswap-train.json written (stores open, no model yet)",
                  f"{result.get('seconds_to_record', 0):.1f} s", ""),
                 ("rerun on a prepared store: first update done", f"{result['seconds_to_first_update']:.1f} s",
                  "<= 30 s")]
    if args.command == "teacher-text":
        result = results[f"teacher_text_{args.gigabytes:g}GB"] = {
            **base, **bench_teacher_text(args, corpus, tokenizer_folder)}
        rows += [(f"store of the .gz ({result['gz_bytes'] / 1e6:,.0f} MB, {result['documents']:,} documents)",
                  f"{result['store_seconds']:,.0f} s", ""),
                 (f"a document read back from the .gz itself (mean of {result['from_gz_documents']})",
                  f"{result['from_gz_seconds_per_document'] * 1e3:,.1f} ms", ""),
                 (f"the text copy made ({result['copy_bytes'] / 1e6:,.0f} MB)", f"{result['copy_seconds']:,.1f} s", ""),
                 (f"a document read back from the copy (mean of {result['from_copy_documents']:,})",
                  f"{result['from_copy_seconds_per_document'] * 1e6:,.1f} us", "")]
    print(f"\n{command}")
    table(rows)
    measured = [run for section in results.values() for run in (section, section.get("small"), section.get("large"))
                if run and "run_command" in run]
    print("".join(f"  measured: {run['run_command']}\n" for run in measured), end="")
    if args.json:
        previous = json.loads(args.json.read_text()) if args.json.is_file() else {}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**previous, **results}, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
