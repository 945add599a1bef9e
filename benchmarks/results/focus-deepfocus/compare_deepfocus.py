"""langswap's `focus` against the peer package deepfocus (1.0.1, konstantinjdobler/focus) on identical inputs.

Both get the same source and target tokenizers (small BPE tokenizers trained here on the first --lines lines of the
shared English and German training splits), the same seeded random source embeddings (V_s x 64) and ONE token-level
fastText model trained by langswap (`train_token_fasttext`). langswap's `focus` runs in this environment;
deepfocus's `FOCUS(..., fasttext_model_path=<the same .bin>, exact_match_all=True, match_symbols=False,
fuzzy_match_all=False)` runs in its own virtual environment (--deepfocus-python), which also dumps how deepfocus
classified every target token (its overlap with the source token it copies, its anchors, its random rows).

The rows are then compared, grouped by (langswap's row kind, what deepfocus did with the row), and every group whose
rows may differ is explained from what the two did:

- copied rows: the same source token, or another one (deepfocus's canonical forms collide, see below);
- mixed rows: whether the row's sparsemax support (under langswap's anchors or deepfocus's) holds an anchor that the
  two treat differently (present in one set only, or copied from another source token). Rows whose support holds no
  such anchor are computed from the same anchors and must agree to float precision. As a second check, langswap's
  sparsemax (`sparse_anchor_weights`) is run on deepfocus's anchor set and compared with deepfocus's mixed rows;
- rows without a vector of their own: langswap's fallback against deepfocus's N(mean, std) draws (seed 42), which
  are regenerated here to confirm what they are.

    python benchmarks/results/focus-deepfocus/compare_deepfocus.py        # byte-level BPE source and target
    python benchmarks/results/focus-deepfocus/compare_deepfocus.py --target-family sentencepiece \\
        --output-name comparison-sentencepiece.md

deepfocus lives in its own environment (it must not be installed beside langswap):

    python3 -m venv /root/.cache/deepfocus-venv && /root/.cache/deepfocus-venv/bin/pip install deepfocus==1.0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[3]  # benchmarks/results/<name>/ in the repository
DEFAULT_DATA = Path(os.environ.get("LANGSWAP_BENCH_DATA", REPO.parent / "shared" / "data"))
RESULTS = REPO / "benchmarks" / "results" / "focus-deepfocus"
DEFAULT_VENV_PYTHON = Path("/root/.cache/deepfocus-venv/bin/python")
DIM = 64
SPECIALS = {"byte_level": {"tokens": ["<|endoftext|>"],
                           "wrapper": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                                       "unk_token": "<|endoftext|>"}},
            "sentencepiece": {"tokens": ["<unk>", "<s>", "</s>"],
                              "wrapper": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}}}

# Run by the deepfocus environment's python: argv[1] is the work folder.
DEEPFOCUS_RUNNER = r'''
import json, sys, time
from pathlib import Path
import numpy as np, torch, fasttext
from transformers import PreTrainedTokenizerFast
from deepfocus import FOCUS
from deepfocus.focus import get_overlapping_tokens, is_very_rare_token

work = Path(sys.argv[1])
spec = json.loads((work / "inputs.json").read_text())
def load(name):
    return PreTrainedTokenizerFast(tokenizer_file=str(work / f"{name}.tokenizer.json"), **spec[name]["wrapper"])
source, target = load("source"), load("target")
embeddings = torch.from_numpy(np.load(work / "source-embeddings.npy"))
start = time.perf_counter()
matrix = FOCUS(target_tokenizer=target, source_tokenizer=source, source_embeddings=embeddings,
               fasttext_model_path=str(work / "target-tokens.bin"), exact_match_all=True, match_symbols=False,
               fuzzy_match_all=False, processes=1, verbosity="silent")
seconds = time.perf_counter() - start
np.save(work / "deepfocus.npy", matrix.numpy())

# how deepfocus classified each target token (the same calls FOCUS makes)
overlap, new = get_overlapping_tokens(target, source, match_symbols=False, exact_match_all=True,
                                      fuzzy_match_all=False)
model = fasttext.load_model(str(work / "target-tokens.bin"))
from importlib.metadata import version
versions = {name: version(name) for name in ("deepfocus", "entmax", "fastdist", "fasttext", "torch", "transformers")}
record = {"seconds": seconds, "versions": versions, "overlap": {}, "new": {}}
for native, info in overlap.items():
    record["overlap"][info.target.id] = {
        "source": info.source[0].id, "candidates": [s.id for s in info.source], "canonical": info.target.canonical_form,
        "anchor": not bool(is_very_rare_token(native, model)), "descriptor": info.descriptor}
for native, info in new.items():
    record["new"][info.target.id] = {"canonical": info.target.canonical_form,
                                     "random": bool(is_very_rare_token(info.target.native_form, model))}
(work / "deepfocus.json").write_text(json.dumps(record))
print(f"deepfocus FOCUS: {seconds:.2f} s", flush=True)
'''


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=5000, help="Lines of each training split used (default 5000).")
    parser.add_argument("--vocab", type=int, default=6000, help="Size of each tokenizer (default 6000).")
    parser.add_argument("--min-count", type=int, default=3, help="fastText minCount of the token-level model.")
    parser.add_argument("--epoch", type=int, default=30,
                        help="fastText epochs (default 30; FOCUS's 3 suit its large corpora: on a few thousand lines "
                             "the vectors stay nearly parallel and sparsemax keeps almost every anchor).")
    parser.add_argument("--fallback", default="subword", choices=["subword", "mean", "random"])
    parser.add_argument("--target-family", default="byte_level", choices=sorted(SPECIALS),
                        help="The target tokenizer's family (the source is byte-level BPE).")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "langswap" / "compare-deepfocus")
    parser.add_argument("--deepfocus-python", type=Path, default=DEFAULT_VENV_PYTHON)
    parser.add_argument("--output-name", default="comparison.md", help="File written under " + str(RESULTS))
    return parser.parse_args(argv)


# -- inputs ------------------------------------------------------------------------------------------------------------

def first_lines(path: Path, count: int) -> list[str]:
    lines = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                lines.append(line.rstrip("\n"))
            if len(lines) == count:
                break
    return lines


def train_bpe(lines: list[str], vocab_size: int, family: str):
    """A `tokenizers` BPE tokenizer: GPT-2 style byte-level, or Llama-2 style SentencePiece with byte fallback."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    specials = SPECIALS[family]["tokens"]
    if family == "byte_level":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator(lines, trainer)
        return tokenizer
    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tokenizer.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials + byte_tokens, show_progress=False)
    tokenizer.train_from_iterator(lines, trainer)
    spec = json.loads(tokenizer.to_str())  # the <0xNN> pieces are ordinary vocabulary entries, as in Llama-2
    spec["added_tokens"] = [entry for entry in spec["added_tokens"] if entry["content"] not in byte_tokens]
    return Tokenizer.from_str(json.dumps(spec))


def load_tokenizer(work: Path, name: str, family: str):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(work / f"{name}.tokenizer.json"), **SPECIALS[family]["wrapper"])


def build_inputs(args, work: Path) -> dict:
    from langswap.resources.token_vectors import FOCUS_FASTTEXT, train_token_fasttext

    splits = args.data / "splits"
    english, german = first_lines(splits / "en.train.txt", args.lines), first_lines(splits / "de.train.txt", args.lines)
    (work / "target-text.txt").write_text("\n".join(german) + "\n", encoding="utf-8")
    train_bpe(english, args.vocab, "byte_level").save(str(work / "source.tokenizer.json"))
    train_bpe(german, args.vocab, args.target_family).save(str(work / "target.tokenizer.json"))
    spec = {"source": {"family": "byte_level", "wrapper": SPECIALS["byte_level"]["wrapper"]},
            "target": {"family": args.target_family, "wrapper": SPECIALS[args.target_family]["wrapper"]}}
    (work / "inputs.json").write_text(json.dumps(spec, indent=2))
    source, target = load_tokenizer(work, "source", "byte_level"), load_tokenizer(work, "target", args.target_family)
    rng = np.random.default_rng(0)
    np.save(work / "source-embeddings.npy", rng.standard_normal((len(source), DIM)).astype(np.float32))
    options = dataclasses.replace(FOCUS_FASTTEXT, minCount=args.min_count, thread=2, bucket=200_000,
                                  epoch=args.epoch)
    record = train_token_fasttext(work / "target-text.txt", target, work / "target-tokens.bin", options)
    return {"source": source, "target": target, "fasttext": record, "options": dataclasses.asdict(options)}


# -- the two runs ------------------------------------------------------------------------------------------------------

def run_langswap(args, work: Path, source, target):
    from langswap.methods import TransferInputs, make_config, run_method
    from langswap.resources.kinds.token_vectors import TokenVectors
    from langswap.resources.token_vectors import load_token_vectors, token_words
    from langswap.tokens import Vocabulary

    vectors, _ = load_token_vectors(work / "target-tokens.bin", target)
    embeddings = torch.from_numpy(np.load(work / "source-embeddings.npy"))
    inputs = TransferInputs(Vocabulary(source), Vocabulary(target), embeddings,
                            resources={"token_vectors": TokenVectors(vectors, token_words(target))})
    start = time.perf_counter()
    result = run_method(make_config("focus", fallback=args.fallback), inputs)
    seconds = time.perf_counter() - start
    np.save(work / "langswap.npy", result.embeddings.numpy())
    np.save(work / "langswap-kinds.npy", result.mapping.kinds)
    return result, inputs, vectors, seconds


def run_deepfocus(args, work: Path) -> tuple[dict, np.ndarray, float]:
    runner = work / "run_deepfocus.py"
    runner.write_text(DEEPFOCUS_RUNNER)
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="2", NUMBA_NUM_THREADS="2")
    start = time.perf_counter()
    done = subprocess.run([str(args.deepfocus_python), str(runner), str(work)], env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"deepfocus run failed (exit {done.returncode})")
    record = json.loads((work / "deepfocus.json").read_text())
    record["overlap"] = {int(k): v for k, v in record["overlap"].items()}
    record["new"] = {int(k): v for k, v in record["new"].items()}
    return record, np.load(work / "deepfocus.npy"), wall


# -- the comparison ----------------------------------------------------------------------------------------------------

def supports(new_rows, anchor_rows, vectors, words):
    """langswap's sparsemax over `anchor_rows` for each of `new_rows`: {row: {anchor row: weight}}."""
    from langswap.methods.focus import sparse_anchor_weights

    queries = vectors.vectors([words[r] for r in new_rows])
    anchors = vectors.vectors([words[r] for r in anchor_rows])
    lengths, indices, weights = sparse_anchor_weights(queries, anchors, 64)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    out = {}
    for i, row in enumerate(new_rows):
        span = slice(starts[i], starts[i + 1])
        out[int(row)] = dict(zip(np.asarray(anchor_rows)[indices[span]].tolist(), weights[span].tolist()))
    return out


def show(token) -> str:
    return repr(token.token)


def compare(args, work, inputs, result, vectors, df, df_matrix):
    from langswap.methods import Kind
    from langswap.resources.token_vectors import token_words

    source_vocab, target_vocab = inputs.source, inputs.target
    words = token_words(target_vocab.tokenizer)
    E = inputs.source_embeddings.numpy()
    ls_matrix = result.embeddings.numpy()
    mapping = result.mapping
    kinds = mapping.kinds
    n = len(target_vocab)
    diff = np.abs(ls_matrix.astype(np.float64) - df_matrix.astype(np.float64)).max(axis=1)

    # deepfocus's view of every row
    df_kind, df_source = {}, {}
    for row, info in df["overlap"].items():
        df_kind[row], df_source[row] = "copied", info["source"]
    for row, info in df["new"].items():
        df_kind[row] = "random" if info["random"] else "mixed"
    assert len(df_kind) == n, f"deepfocus classified {len(df_kind)} of {n} target tokens"

    # the anchors of each: target row -> the source row it stands for
    ls_anchor = {}
    for row in mapping.rows_of(Kind.COPIED):
        if words[row] and words[row] in vectors:
            ls_anchor[int(row)] = int(mapping.row(int(row))[0][0])
    df_anchor = {row: info["source"] for row, info in df["overlap"].items() if info["anchor"]}
    differing = {a for a in set(ls_anchor) | set(df_anchor) if ls_anchor.get(a) != df_anchor.get(a)}

    ls_mixed = [int(r) for r in mapping.rows_of(Kind.MIXED)]
    df_mixed = sorted(r for r, k in df_kind.items() if k == "mixed")
    ls_support = supports(ls_mixed, sorted(ls_anchor), vectors, words)
    df_support = supports(df_mixed, sorted(df_anchor), vectors, words)

    # check 1: langswap's kernel on langswap's anchors rebuilds langswap's rows (sanity)
    def rebuild(support, anchor_map, rows):
        out = np.zeros((len(rows), E.shape[1]), dtype=np.float64)
        for i, row in enumerate(rows):
            for anchor, weight in support[row].items():
                out[i] += weight * E[anchor_map[anchor]]
        return out

    check_ls = np.abs(rebuild(ls_support, ls_anchor, ls_mixed) - ls_matrix[ls_mixed]).max() if ls_mixed else 0.0
    # check 2: langswap's kernel on deepfocus's anchors rebuilds deepfocus's rows
    check_df = np.abs(rebuild(df_support, df_anchor, df_mixed) - df_matrix[df_mixed]).max() if df_mixed else 0.0
    # check 2b: the same in float64, dense (deepfocus's arithmetic: float64 cosines, entmax's sparsemax, float64 mix)
    def dense64(rows, anchor_map):
        from entmax import sparsemax

        anchors = sorted(anchor_map)
        q = vectors.vectors([words[r] for r in rows]).astype(np.float64)
        a = vectors.vectors([words[r] for r in anchors]).astype(np.float64)
        cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (a / np.linalg.norm(a, axis=1, keepdims=True)).T
        weights = sparsemax(torch.from_numpy(cos), dim=1).numpy()
        return weights @ E[[anchor_map[x] for x in anchors]].astype(np.float64)

    check_df64 = np.abs(dense64(df_mixed, df_anchor) - df_matrix[df_mixed]).max() if df_mixed else 0.0
    check_ls64 = np.abs(dense64(ls_mixed, ls_anchor) - ls_matrix[ls_mixed]).max() if ls_mixed else 0.0
    support_sizes = np.array([len(ls_support[r]) for r in ls_mixed]) if ls_mixed else np.zeros(1)
    # check 3: deepfocus's random rows are N(mean, std) draws of a generator seeded 42, in target id order
    random_rows = sorted(r for r, k in df_kind.items() if k == "random")
    gen = torch.Generator().manual_seed(42)
    source_t = inputs.source_embeddings
    mean, std = source_t.mean(dim=0), source_t.std(dim=0)
    expected = torch.stack([torch.normal(mean, std, generator=gen) for _ in random_rows]).numpy() if random_rows \
        else np.zeros((0, E.shape[1]))
    check_random = float(np.abs(expected - df_matrix[random_rows]).max()) if random_rows else 0.0
    # check 4: deepfocus's copied rows are the rows of the source token it names
    copied_rows = sorted(df_source)
    check_copy = float(np.abs(df_matrix[copied_rows] - E[[df_source[r] for r in copied_rows]]).max())

    groups: dict[tuple, list[int]] = defaultdict(list)
    for row in range(n):
        kind = Kind(int(kinds[row])).name.lower()
        theirs = df_kind[row]
        if theirs == "copied" and kind in ("copied", "special"):
            mine = int(mapping.row(row)[0][0])
            detail = "same source" if mine == df_source[row] else "another source"
        elif theirs == "mixed" and kind == "mixed":
            touched = (set(ls_support[row]) | set(df_support[row])) & differing
            detail = "support touches a differing anchor" if touched else "same anchors in support"
        else:
            detail = ""
        groups[(kind, theirs, detail)].append(row)

    def reason(key) -> str:
        kind, theirs, detail = key
        if detail == "same source":
            return "both copy the same source row"
        if detail == "another source":
            return "canonical collision: deepfocus copies another source token with the same canonical string"
        if detail == "same anchors in support":
            return "same anchors, same sparsemax: float precision only"
        if detail == "support touches a differing anchor":
            return "an anchor in the support is copied from another source row, or is an anchor on one side only"
        if kind == "special" and theirs == "mixed":
            return "special token: langswap copies the source special of its role; deepfocus matches no source " \
                   "token, and as its string is a word of the fastText model (fastText's own end-of-line word " \
                   "'</s>' is in every model) it mixes it"
        if kind == "special":
            return f"special token: langswap copies the source special of its role; deepfocus finds no match ({theirs})"
        if kind == "copied":
            return f"langswap's canonical form (bytes, word start) matches a source token; deepfocus's canonical " \
                   f"string matches none ({theirs})"
        if theirs == "copied":
            return "deepfocus's canonical string matches a source token; langswap's canonical form (bytes, word " \
                   "start) matches none"
        if theirs == "random" and kind in ("subword", "mean", "random"):
            return f"no vector of its own: langswap's `{args.fallback}` fallback, deepfocus's N(mean, std) seed 42"
        return "other"

    order = {"special": 0, "copied": 1, "mixed": 2, "subword": 3, "mean": 4, "random": 5}
    table = ["| langswap row | deepfocus row | detail | rows | ≤1e-5 | ≤1e-3 | max abs diff | why |",
             "|---|---|---|---:|---:|---:|---:|---|"]
    for key in sorted(groups, key=lambda k: (order.get(k[0], 9), k[1], k[2])):
        rows = groups[key]
        d = diff[rows]
        table.append(f"| {key[0]} | {key[1]} | {key[2] or '-'} | {len(rows):,} | {(d <= 1e-5).sum():,} | "
                     f"{(d <= 1e-3).sum():,} | {d.max():.2e} | {reason(key)} |")
    total = (f"| all | | | {n:,} | {(diff <= 1e-5).sum():,} | {(diff <= 1e-3).sum():,} | {diff.max():.2e} | |")
    table.append(total)

    # examples of each class of difference
    examples = []
    collide = groups.get(("copied", "copied", "another source"), []) + groups.get(("special", "copied",
                                                                                   "another source"), [])
    for row in collide[:3]:
        mine, theirs = int(mapping.row(row)[0][0]), df_source[row]
        cands = df["overlap"][row]["candidates"]
        examples.append(f"- {show(target_vocab[row])}: langswap copies {show(source_vocab[mine])}, deepfocus "
                        f"{show(source_vocab[theirs])} (deepfocus canonical {df['overlap'][row]['canonical']!r}, "
                        f"{len(cands)} source tokens share it; deepfocus takes the "
                        f"{'highest' if theirs == max(cands) else 'lowest' if theirs == min(cands) else 'middle'} id)")
    only_df = [r for k, rows in groups.items() if k[1] == "copied" and k[0] not in ("copied", "special") for r in rows]
    for row in only_df[:3]:
        examples.append(f"- {show(target_vocab[row])} ({Kind(int(kinds[row])).name.lower()} in langswap): deepfocus "
                        f"copies {show(source_vocab[df_source[row]])} (canonical "
                        f"{df['overlap'][row]['canonical']!r})")
    only_ls = [r for k, rows in groups.items() if k[0] in ("copied", "special") and k[1] != "copied" for r in rows]
    for row in only_ls[:3]:
        examples.append(f"- {show(target_vocab[row])}: langswap copies "
                        f"{show(source_vocab[int(mapping.row(row)[0][0])])}; deepfocus {df_kind[row]} (canonical "
                        f"{df['new'][row]['canonical']!r})")
    for anchor in sorted(differing)[:10]:
        mine, theirs = ls_anchor.get(anchor), df_anchor.get(anchor)
        examples.append(f"- differing anchor {show(target_vocab[anchor])}: langswap's source "
                        f"{show(source_vocab[mine]) if mine is not None else 'none (not an anchor)'}, deepfocus's "
                        f"{show(source_vocab[theirs]) if theirs is not None else 'none (not an anchor)'}")
    # overlap that differs, by deepfocus's canonical string and what the target token is
    def what(token) -> str:
        if token.special:
            return "special"
        if token.text is None:
            return "partial UTF-8"
        if vocabulary_is_byte_fallback(token):
            return "byte fallback"
        return "whitespace" if not token.text.strip() else "text"

    def vocabulary_is_byte_fallback(token) -> bool:
        return target_vocab.is_byte_fallback(token.id)

    overlap_classes = defaultdict(list)
    for row in range(n):
        mine = int(mapping.row(row)[0][0]) if kinds[row] in (Kind.COPIED, Kind.SPECIAL) else None
        theirs = df_source.get(row)
        if mine != theirs:
            canonical = (df["overlap"].get(row) or df["new"].get(row))["canonical"]
            side = "both copy, other source" if mine is not None and theirs is not None else \
                "deepfocus copies only" if theirs is not None else "langswap copies only"
            overlap_classes[(side, what(target_vocab[row]), canonical if side != "langswap copies only" else None)] \
                .append(row)
    overlap_lines = [f"- {side}: {len(rows):,} {kind} tokens"
                     + (f" with deepfocus canonical {canonical!r}" if canonical is not None else "")
                     + f", e.g. {', '.join(show(target_vocab[r]) for r in rows[:4])}"
                     for (side, kind, canonical), rows in sorted(overlap_classes.items(), key=lambda x: -len(x[1]))]
    touched_rows = groups.get(("mixed", "mixed", "support touches a differing anchor"), [])
    weight_on_differing = [sum(w for a, w in ls_support[r].items() if a in differing) for r in touched_rows]

    figures = {
        "target tokens": n, "source tokens": len(source_vocab),
        "overlap (langswap copied)": int((kinds == Kind.COPIED).sum()),
        "overlap (deepfocus, incl. specials)": len(df["overlap"]),
        "anchors langswap / deepfocus": f"{len(ls_anchor):,} / {len(df_anchor):,}",
        "anchors differing (one side only, or other source)": len(differing),
        "mixed rows langswap / deepfocus": f"{len(ls_mixed):,} / {len(df_mixed):,}",
        "deepfocus random rows": len(random_rows),
    }
    checks = [
        f"- langswap's sparsemax on langswap's anchors rebuilds langswap's mixed rows: max abs diff {check_ls:.2e}",
        f"- langswap's sparsemax (`sparse_anchor_weights`, float32) on deepfocus's anchors rebuilds deepfocus's mixed "
        f"rows (fastdist float64 cosine + entmax): max abs diff {check_df:.2e} over {len(df_mixed):,} rows",
        f"- the same float64 dense (cosines, entmax sparsemax, mix) on deepfocus's anchors: max abs diff "
        f"{check_df64:.2e} from deepfocus's rows; on langswap's anchors: {check_ls64:.2e} from langswap's rows",
        f"- sparsemax support of langswap's mixed rows: median {np.median(support_sizes):.0f}, max "
        f"{support_sizes.max()} of {len(ls_anchor):,} anchors",
        f"- deepfocus's {len(random_rows):,} random rows are torch.normal(source mean, source std) draws of a "
        f"generator seeded 42, in target id order: max abs diff {check_random:.2e}",
        f"- deepfocus's {len(copied_rows):,} copied rows are the rows of the source tokens it matched: max abs diff "
        f"{check_copy:.2e}",
    ]
    if touched_rows:
        checks.append(f"- mixed rows whose support touches a differing anchor: {len(touched_rows):,}; langswap's "
                      f"weight on those anchors: median {np.median(weight_on_differing):.3f}, max "
                      f"{max(weight_on_differing):.3f}")
    return table, figures, checks, overlap_lines + examples, diff


def main(argv=None) -> int:
    args = parse_args(argv)
    if not (args.data / "splits" / "de.train.txt").is_file():
        print(f"compare_deepfocus: shared data not found under {args.data}; give --data. Nothing was run.")
        return 0
    if not args.deepfocus_python.is_file():
        print(f"compare_deepfocus: no deepfocus environment at {args.deepfocus_python}; create it with\n"
              "  python3 -m venv /root/.cache/deepfocus-venv && /root/.cache/deepfocus-venv/bin/pip install "
              "deepfocus==1.0.1\nor give --deepfocus-python. Nothing was run.")
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch.set_num_threads(2)
    started = time.perf_counter()
    work = args.workdir / args.target_family
    work.mkdir(parents=True, exist_ok=True)
    built = build_inputs(args, work)
    result, inputs, vectors, ls_seconds = run_langswap(args, work, built["source"], built["target"])
    df, df_matrix, df_wall = run_deepfocus(args, work)
    table, figures, checks, examples, diff = compare(args, work, inputs, result, vectors, df, df_matrix)
    total = time.perf_counter() - started

    command = ("python benchmarks/results/focus-deepfocus/compare_deepfocus.py "
               + " ".join(argv if argv is not None else sys.argv[1:]))
    versions = ", ".join(f"{name} {v}" for name, v in df["versions"].items())
    lines = [f"# langswap `focus` against deepfocus {df['versions']['deepfocus']}", "",
             f"Command: `{command.strip()}` (total {total:.0f} s on 2 CPU cores, beside another job)", "",
             f"Inputs: source byte-level BPE ({built['source'].__len__():,} tokens, first {args.lines:,} lines of "
             f"en.train.txt), target {args.target_family} BPE ({built['target'].__len__():,} tokens, first "
             f"{args.lines:,} lines of de.train.txt), source embeddings N(0, 1) (seed 0, {DIM} dims), one "
             f"token-level fastText model trained by langswap on the target lines (cbow, dim "
             f"{built['options']['dim']}, epoch {built['options']['epoch']}, minCount {args.min_count}: "
             f"{built['fasttext']['covered_tokens']:,} tokens with a vector); langswap fallback `{args.fallback}`; "
             "deepfocus FOCUS(exact_match_all=True, match_symbols=False, fuzzy_match_all=False, seed 42) in its own "
             f"environment ({versions}).", "",
             "| figure | value |", "|---|---|"]
    lines += [f"| {k} | {v:,} |" if isinstance(v, int) else f"| {k} | {v} |" for k, v in figures.items()]
    lines += ["", "Rows by (langswap's kind, deepfocus's treatment); agreement is the max abs difference of the row.",
              ""] + table
    lines += ["", "Checks:", ""] + checks
    if examples:
        lines += ["", "Overlap that differs (by deepfocus's canonical string), then examples:", ""] + examples
    lines += ["", f"Runtime: langswap focus {ls_seconds:.2f} s; deepfocus FOCUS {df['seconds']:.2f} s "
              f"(its subprocess {df_wall:.1f} s with imports and numba compilation)."]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / args.output_name).write_text(text, encoding="utf-8")
    print(f"written to {RESULTS / args.output_name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
