"""Speed, memory and agreement of the WECHSEL similarity-and-mixing step (a benchmark that prints figures, not a test).

Compares, on identical seeded random inputs (|V_t| = |V_s| = --vocab, word-vector dim --dim, model dim --model-dim):

1. langswap: `methods.wechsel.nearest_sources` (blocked cosine top-k + softmax) then `methods.kernels.mix_rows`;
2. the `wechsel` package's `create_target_embeddings` (with minimal fake tokenizers, unit-normalised float64
   subword embeddings as `WECHSEL.apply` makes them, float32 source matrix);
3. the bare similarity matmul (V_t, D) @ (D, V_s) in float32, in the same row blocks as langswap's top-k
   (a single matmul would materialise a dense V_t x V_s matrix, 10 GB at 50k), timed as one figure.

Peak extra memory of langswap's step is measured in a fresh subprocess (RSS high-water mark from
`resource.getrusage` minus the RSS before the step, cross-checked by a psutil sampling thread).

    python benchmarks/bench_speed.py                 # 50k x 50k, ~2 minutes on 2 cores
    python benchmarks/bench_speed.py --vocab 5000    # quick check
    python benchmarks/bench_speed.py --methods-only  # each method's similarity step beside the bare matmul

`--methods-only` times, on the same inputs (the source vectors standing for the anchors, the target vectors for the
new tokens), the step each other method adds: focus's blocked sparsemax over every anchor, clp's top-100 cosine and
weights, combined's helper evidence (top-10 softmax, and the helper's agreement with the source model measured on
2,000 shared tokens), and omp's pursuit (k = 64, in the model dimension as the helper's rows are) on the first --omp-rows rows,
extrapolated to all of them and marked so. `--device cuda` runs them, and the matmul, on a GPU (the transfer's
`method_device`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import threading
import time

import numpy as np
import torch

from langswap.kernels import block_rows_for, mix_rows
from langswap.methods.wechsel import nearest_sources

NEIGHBORS = 10
TEMPERATURE = 0.1


def make_inputs(vocab: int, dim: int, model_dim: int):
    """Seeded float32 normals, generated directly in float32 (no float64 temporaries to skew the memory baseline)."""
    rng = np.random.default_rng(0)
    target_vectors = rng.standard_normal((vocab, dim), dtype=np.float32)
    source_vectors = rng.standard_normal((vocab, dim), dtype=np.float32)
    source_matrix = rng.standard_normal((vocab, model_dim), dtype=np.float32)
    return target_vectors, source_vectors, source_matrix


def langswap_step(target_vectors, source_vectors, source_matrix):
    rows, sources, weights = nearest_sources(target_vectors, source_vectors, NEIGHBORS, TEMPERATURE)
    mixed = mix_rows(torch.from_numpy(source_matrix), sources, weights)
    return rows, sources, mixed


def bare_matmul(target_vectors, source_vectors, device="cpu"):
    """(V_t, D) @ (D, V_s) in the row blocks langswap's top-k uses, each into one reused buffer (on `device`, where
    the query blocks are copied to as the top-k copies them)."""
    queries, keys_t = torch.from_numpy(target_vectors), torch.from_numpy(source_vectors).T.contiguous().to(device)
    step = min(block_rows_for(keys_t.shape[1]), queries.shape[0])
    buffer = torch.empty((step, keys_t.shape[1]), dtype=torch.float32, device=device)
    for start in range(0, queries.shape[0], step):
        stop = min(start + step, queries.shape[0])
        torch.mm(queries[start:stop].to(device), keys_t, out=buffer[:stop - start])
    if buffer.is_cuda:
        torch.cuda.synchronize()
    return step


class FakeTokenizer:
    """Just what `wechsel.create_target_embeddings` touches."""

    special_tokens_map: dict = {}

    def __init__(self, size: int):
        self.tokens = [f"t{i}" for i in range(size)]
        self.vocab = {token: i for i, token in enumerate(self.tokens)}

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, (int, np.integer)):
            return self.tokens[int(ids)]
        return [self.tokens[int(i)] for i in ids]


def package_step(target_vectors, source_vectors, source_matrix):
    import wechsel

    def unit(matrix):  # as WECHSEL.apply: float64 (np.zeros default), divided by norm + 1e-8
        matrix = matrix.astype(np.float64)
        return matrix / (np.linalg.norm(matrix, axis=1)[:, np.newaxis] + 1e-8)

    source_subword, target_subword = unit(source_vectors), unit(target_vectors)
    start = time.perf_counter()
    target_matrix, _, sources = wechsel.create_target_embeddings(
        source_subword, target_subword, FakeTokenizer(len(source_vectors)), FakeTokenizer(len(target_vectors)),
        source_matrix.copy(), neighbors=NEIGHBORS, temperature=TEMPERATURE, verbose=False)
    return time.perf_counter() - start, target_matrix, sources


def best_of(repeats: int, fn, *args):
    times, result = [], None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - start)
    return min(times), times, result


def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def memory_child(args) -> None:
    """Runs in a fresh process: RSS high-water mark of one langswap step, printed as JSON."""
    import psutil

    warm = make_inputs(512, args.dim, args.model_dim)
    langswap_step(*warm)  # load MKL / OpenMP and their buffers outside the measurement
    del warm
    inputs = make_inputs(args.vocab, args.dim, args.model_dim)
    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    sampled = [before]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            sampled.append(process.memory_info().rss)
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    result = langswap_step(*inputs)
    stop.set()
    thread.join()
    maxrss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    output_bytes = result[2].numel() * result[2].element_size()
    print(json.dumps({"rss_before": before, "maxrss_before": maxrss_before, "maxrss_after": maxrss_after,
                      "sampled_peak": max(sampled), "output_bytes": output_bytes}))


def peak_memory(args) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--vocab", str(args.vocab), "--dim", str(args.dim),
               "--model-dim", str(args.model_dim), "--_memory-child"]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def method_steps(args) -> None:
    """Each method's similarity step at vocab x vocab, beside the bare matmul, best of --repeats."""
    from langswap.methods.clp import similarity_weights
    from langswap.methods.focus import sparse_anchor_weights
    from langswap.methods.omp import orthogonal_matching_pursuit
    from langswap.kernels import topk_cosine

    target_vectors, source_vectors, source_matrix = make_inputs(args.vocab, args.dim, args.model_dim)
    device = args.device
    where = torch.cuda.get_device_name(device) if device.startswith("cuda") else f"{torch.get_num_threads()} threads"
    print(f"vocab {args.vocab} x {args.vocab}, dim {args.dim}, model dim {args.model_dim}; torch "
          f"{torch.__version__}, {where}; load average {os.getloadavg()[0]:.2f} at start")
    if device.startswith("cuda"):
        bare_matmul(target_vectors[:2048], source_vectors, device)  # warm-up: kernels and allocator
    t_matmul = best_of(args.repeats, bare_matmul, target_vectors, source_vectors, device)[0]
    print(f"bare matmul                          best {t_matmul:.2f} s")
    import importlib.util

    if importlib.util.find_spec("entmax") is None:
        print("focus  not timed: the entmax package is not installed")
    else:
        t_focus = best_of(args.repeats, sparse_anchor_weights, target_vectors, source_vectors, 64, None, device)[0]
        print(f"focus  sparsemax over every anchor   best {t_focus:.2f} s   {t_focus / t_matmul:.2f}x the matmul")

    def clp_step():
        similarities, _ = topk_cosine(target_vectors, source_vectors, 100, device=device)
        return similarity_weights(similarities)

    t_clp = best_of(args.repeats, clp_step)[0]
    print(f"clp    top-100 cosine and weights    best {t_clp:.2f} s   {t_clp / t_matmul:.2f}x the matmul")
    rows = min(args.omp_rows, args.vocab)
    atoms = torch.from_numpy(source_matrix).to(device)

    def omp_step():  # in the blocks methods.omp uses
        from langswap.methods.omp import BLOCK_VALUES

        block = max(1, min(BLOCK_VALUES // len(atoms), BLOCK_VALUES // (atoms.shape[1] * 64)))
        for start in range(0, rows, block):
            orthogonal_matching_pursuit(atoms[start:min(start + block, rows)] + 0.1, atoms, 64)

    from langswap.methods.combined import helper_agreement

    def combined_helper_step():  # combined's helper evidence: the top-10 softmax and the agreement measurement
        similarities, _ = topk_cosine(target_vectors, source_vectors, NEIGHBORS, device=device)
        torch.softmax(similarities.to(torch.float64) / TEMPERATURE, dim=1)
        every = np.arange(args.vocab)
        helper_agreement(torch.from_numpy(source_vectors), every, every, torch.from_numpy(source_matrix), NEIGHBORS)
        # (the agreement's 2,000 queries run on the CPU in a transfer too)

    t_combined = best_of(args.repeats, combined_helper_step)[0]
    print(f"combined helper top-10 and agreement best {t_combined:.2f} s   {t_combined / t_matmul:.2f}x the matmul "
          "(its aligned neighbours are the wechsel step)")
    if device.startswith("cuda"):  # the float64 batched kernels start on first use: not in the extrapolated time
        orthogonal_matching_pursuit(atoms[:8] + 0.1, atoms, 64)
    t_omp = best_of(1, omp_step)[0]
    print(f"omp    k=64 on {rows} rows (dim {args.model_dim}) {t_omp:.2f} s; all {args.vocab} rows by extrapolation "
          f"{t_omp * args.vocab / rows:.0f} s   {t_omp * args.vocab / rows / t_matmul:.1f}x the matmul")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=50_000, help="|V_t| = |V_s|")
    parser.add_argument("--dim", type=int, default=300, help="word-vector dimension")
    parser.add_argument("--model-dim", type=int, default=576, help="embedding-matrix dimension")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of langswap and the matmul (best kept)")
    parser.add_argument("--package-repeats", type=int, default=1, help="timed runs of the wechsel package")
    parser.add_argument("--skip-package", action="store_true", help="leave out the wechsel package")
    parser.add_argument("--methods-only", action="store_true", help="time each method's step beside the matmul")
    parser.add_argument("--omp-rows", type=int, default=2000, help="rows omp is timed on (then extrapolated)")
    parser.add_argument("--device", default="cpu", help="with --methods-only: where the steps run (cpu, cuda)")
    parser.add_argument("--_memory-child", dest="memory_child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args)
        return
    if args.methods_only:
        method_steps(args)
        return

    mib = 2**20
    print(f"vocab {args.vocab} x {args.vocab}, dim {args.dim}, model dim {args.model_dim}, k {NEIGHBORS}, "
          f"T {TEMPERATURE}; torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"load average {os.getloadavg()[0]:.2f} at start")
    memory = peak_memory(args)  # first, while nothing else of ours is resident
    target_vectors, source_vectors, source_matrix = make_inputs(args.vocab, args.dim, args.model_dim)

    # warm-up on a slice (thread pools, MKL buffers), then interleaved timed runs
    warm = min(args.vocab, 2048)
    langswap_step(target_vectors[:warm], source_vectors, source_matrix)
    bare_matmul(target_vectors[:warm], source_vectors)
    matmul_times, langswap_times = [], []
    result = None
    for _ in range(args.repeats):
        matmul_times.append(best_of(1, bare_matmul, target_vectors, source_vectors)[0])
        elapsed, _, result = best_of(1, langswap_step, target_vectors, source_vectors, source_matrix)
        langswap_times.append(elapsed)
    rows, ls_sources, mixed = result
    t_matmul, t_langswap = min(matmul_times), min(langswap_times)
    step = min(block_rows_for(args.vocab), args.vocab)
    print(f"bare matmul  (float32, row blocks of {step} x {args.vocab}, as langswap's top-k): "
          f"best {t_matmul:.2f} s  runs {', '.join(f'{t:.2f}' for t in matmul_times)}")
    print(f"langswap     nearest_sources + mix_rows: best {t_langswap:.2f} s  "
          f"runs {', '.join(f'{t:.2f}' for t in langswap_times)}")

    if not args.skip_package:
        package_step(target_vectors[:warm], source_vectors, source_matrix)  # warm-up
        package_times = []
        for _ in range(args.package_repeats):
            gc.collect()
            elapsed, package_matrix, package_sources = package_step(target_vectors, source_vectors, source_matrix)
            package_times.append(elapsed)
        t_package = min(package_times)
        print(f"wechsel pkg  create_target_embeddings:  best {t_package:.2f} s  "
              f"runs {', '.join(f'{t:.2f}' for t in package_times)}")
        print(f"ratio package / langswap      {t_package / t_langswap:.2f}x")
    print(f"ratio langswap / bare matmul  {t_langswap / t_matmul:.3f}x   (goal <= 1.3x)")

    if not args.skip_package:
        ours = np.zeros_like(package_matrix)
        ours[rows] = mixed.numpy()
        difference = np.abs(ours.astype(np.float64) - package_matrix.astype(np.float64))
        row_norm = np.linalg.norm(package_matrix.astype(np.float64), axis=1)
        relative = difference.max(axis=1) / np.maximum(row_norm, 1e-30)
        # rows whose neighbour set differs (near-ties at the k-th place, float32 vs float64 cosines)
        package_ids = np.full((len(package_matrix), NEIGHBORS), -1, dtype=np.int64)
        for i in range(len(package_matrix)):
            entry = package_sources.get(f"t{i}")
            if entry is not None:
                package_ids[i] = [int(token[1:]) for token in entry[0]]
        ours_ids = np.full_like(package_ids, -1)
        ours_ids[rows] = ls_sources.numpy()
        same_set = (np.sort(ours_ids, axis=1) == np.sort(package_ids, axis=1)).all(axis=1)
        print(f"max |langswap - package|      {difference.max():.3g}   relative to row norm "
              f"{relative.max():.3g}   (goal <= 1e-5)")
        print(f"rows with a different neighbour set: {int((~same_set).sum())} of {len(same_set)}; over the rest: "
              f"max abs {difference[same_set].max():.3g}, relative {relative[same_set].max():.3g}")
        if not same_set.all():  # how close to a tie the swapped neighbours were, in float64 cosine
            unit = lambda m: m.astype(np.float64) / np.linalg.norm(m.astype(np.float64), axis=1, keepdims=True)
            gaps = []
            for i in np.flatnonzero(~same_set):
                query = unit(target_vectors[i:i + 1])[0]
                ours_sims = np.sort(unit(source_vectors[ours_ids[i]]) @ query)
                package_sims = np.sort(unit(source_vectors[package_ids[i]]) @ query)
                gaps.append(np.abs(ours_sims - package_sims).max())
            print(f"  largest float64-cosine gap between swapped neighbours: {max(gaps):.3g} (near-ties at the k-th "
                  f"place, decided by float32 vs float64 rounding)")

    extra = memory["maxrss_after"] - memory["rss_before"]
    print(f"peak extra memory, langswap step (fresh process): {extra / mib:.0f} MiB from ru_maxrss "
          f"(psutil sampling {(memory['sampled_peak'] - memory['rss_before']) / mib:.0f} MiB), incl. the "
          f"{memory['output_bytes'] / mib:.0f} MiB output   (goal < 1024 MiB)")
    if memory["maxrss_before"] > memory["rss_before"] + 16 * mib:
        print(f"  note: high-water mark before the step was already {memory['maxrss_before'] / mib:.0f} MiB "
              f"(> RSS {memory['rss_before'] / mib:.0f} MiB), so the ru_maxrss figure may read low")
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
