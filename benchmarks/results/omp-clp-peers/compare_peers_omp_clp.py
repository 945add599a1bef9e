"""langswap's `omp` and `clp` against the peers' own code on identical inputs: mergekit's tokensurgeon and langsfer.

1. `omp` against mergekit's tokensurgeon (PyPI `mergekit`):
   a. the pursuit alone: `langswap.methods.omp.orthogonal_matching_pursuit(targets, atoms, k, tolerance=0.0)`
      against `mergekit.tokensurgeon.omp.batch_omp(targets, atoms, k)` on seeded random inputs, with the peer given
      float32 inputs (what tokensurgeon runs on: float32 or bf16 weights work in float32) and float64 inputs (which
      separates the algorithm from its arithmetic);
   b. the whole method on a tiny byte-level tokenizer pair (tests/test_omp.py's): langswap's `run_method("omp")`
      against `mergekit.scripts.tokensurgeon.build_embedding_matrix` (exact matches copied, the rest
      `compute_new_embeddings` with batch_omp), both on the same tokenizer folders, source rows and helper (donor)
      rows.
2. `clp` against langsfer (PyPI `langsfer`): langswap's `run_method("clp")` against
   `langsfer.high_level.clp_transfer(...).initialize()` on the same tokenizer pair (tests/test_clp.py's) and arrays.

Each peer also runs once with its special tokens kept out of the overlap (mergekit: the source vocabulary handed to
build_embedding_matrix without them; langsfer: an ExactMatchTokenOverlap whose source vocabulary lacks them, through
the initializer's own `token_overlap_strategy`), which shows how much of the difference that alone explains.

langswap runs in this interpreter; the peers run in a subprocess with --peers-python (a virtual environment that has
mergekit and langsfer; see comparison.md for how it was made), and arrays go both ways as .npy files in a
temporary folder. Inputs are small on purpose; nothing is timed.

    python benchmarks/results/omp-clp-peers/compare_peers_omp_clp.py [--peers-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[3]  # benchmarks/results/<name>/ in the repository
DEFAULT_PEERS_PYTHON = Path("/root/.cache/peers-venv/bin/python")
RESULTS = REPO / "benchmarks" / "results" / "omp-clp-peers"

# (candidate atoms, dimensions, k, inputs); every case codes TARGETS rows
PURSUIT_CASES = [(500, 64, 8, "gaussian"), (500, 64, 64, "gaussian"), (5000, 576, 8, "gaussian"),
                 (5000, 576, 64, "gaussian"), (5000, 576, 64, "anisotropic")]
TARGETS = 200


NOTES = """## Causes, read from the peers' code (mergekit 0.1.5, langsfer 0.1.0)

- 1a: with float64 inputs `batch_omp` picks the same atoms in the same order as langswap and its coefficients agree
  to 1e-14. With float32 (tokensurgeon's working dtype for float32 and bf16 weights: `work_dtype` in
  `mergekit/tokensurgeon/omp.py::batch_omp`) the scores near a tie are float32 noise: at k = dim the residual of the
  last steps is ~1e-6 and the picks there are arbitrary; on ill-conditioned (anisotropic) atoms a few rows take
  another path from step ~29 on. Both paths fit equally well (residual gap <= 5e-4).
- 1b: tokensurgeon's atoms are every shared normalized token, special ones included:
  `mergekit/scripts/tokensurgeon.py::compute_new_embeddings` builds `shared_vocab` from
  `set(orig_vocab) & set(donor_vocab)`, and `mergekit/tokenizer/normalization.py::normalize_token` maps
  `<|endoftext|>` to `(SPECIAL, "bos_token")` on both sides, so the special row is one more atom; langswap copies
  special tokens by role outside the atoms. Rows whose pursuit picks that atom differ; without it (control row)
  every row agrees to float32 precision. `tolerance` changes nothing visible (tokensurgeon fits the steps after an
  exact fit with coefficients ~1e-7).
- 2: langsfer's overlap is `langsfer/token_overlap.py::ExactMatchTokenOverlap` on raw `get_vocab()` strings, which
  keeps `<|endoftext|>` in the overlap (and in the weighted average); langswap leaves special tokens out. Without it
  (control row) rows agree to 1.6e-7 where similarity sums are large. langsfer
  (`langsfer/initialization.py::WeightedAverageEmbeddingsInitialization._compute_non_overlapping_token_embeddings`)
  divides by the row sum whatever its sign or size; langswap leaves rows with sum <= 1e-3 (all negative sums
  included) to the fallback. langswap's similarities are float32 (the helper's float32 rows), langsfer's float64,
  so rows with a small positive sum differ by (float32 error) / sum.
- 3: tokensurgeon strips only the word-start prefix it guesses from the tokenizer's class ('Ġ' for a generic fast
  tokenizer, so '▁' tokens stay as they are) and langsfer compares raw strings, so neither matches 'Ġthe' with
  '▁the' or a byte-level token with its SentencePiece spelling.

## Peers' environment

    # --system-site-packages: it sees the main env's torch 2.13, transformers 5.24, numpy 2.4, scipy 1.17
    python3 -m venv --system-site-packages /root/.cache/peers-venv
    /root/.cache/peers-venv/bin/pip install --no-deps mergekit==0.1.5 langsfer==0.1.0
    /root/.cache/peers-venv/bin/pip install immutables "peft>=0.18" scikit-learn "more-itertools<11" gensim platformdirs

langsfer pins numpy<2, scipy<1.13 and transformers<5, which the main env's packages break; the parts called here run
on them. platformdirs is imported by langsfer but not declared.
"""


# -- the peers' side (runs under --peers-python; imports no langswap) --------------------------------------------------


def run_peers(folder: Path) -> None:
    import torch

    spec = json.loads((folder / "spec.json").read_text())
    # 1a: batch_omp alone
    from mergekit.tokensurgeon.omp import batch_omp

    for name in spec["pursuit_cases"]:
        targets = torch.from_numpy(np.load(folder / f"{name}-targets.npy"))
        atoms = torch.from_numpy(np.load(folder / f"{name}-atoms.npy"))
        k = int(np.load(folder / f"{name}-k.npy"))
        for dtype in (torch.float32, torch.float64):
            indices, coefficients = batch_omp(targets.to(dtype), atoms.to(dtype), k)
            tag = str(dtype).removeprefix("torch.")
            np.save(folder / f"{name}-peer-{tag}-indices.npy", indices.numpy())
            np.save(folder / f"{name}-peer-{tag}-coefficients.npy", coefficients.numpy().astype(np.float64))

    from transformers import AutoTokenizer

    source_tokenizer = AutoTokenizer.from_pretrained(folder / "source-tokenizer")
    target_tokenizer = AutoTokenizer.from_pretrained(folder / "target-tokenizer")

    # 1b: tokensurgeon's whole embedding matrix (its CLI's `build_embedding_matrix`, method omp, k 64, batch 512)
    from types import SimpleNamespace

    from mergekit.common import ModelReference
    from mergekit.scripts.tokensurgeon import ApproximationMethod, TokenSurgeonOptions, build_embedding_matrix
    from mergekit.tokenizer.normalization import TokenMarker, normalized_vocabulary

    options = TokenSurgeonOptions(model=ModelReference.model_validate(str(folder / "source-tokenizer")),
                                  donor=ModelReference.model_validate(str(folder / "target-tokenizer")),
                                  out_path=str(folder / "unused"),
                                  method=ApproximationMethod.ORTHOGONAL_MATCHING_PURSUIT,
                                  k=spec["omp_k"], batch_size=512)
    orig_vocab, donor_vocab = normalized_vocabulary(source_tokenizer), normalized_vocabulary(target_tokenizer)
    source = torch.from_numpy(np.load(folder / "omp-source.npy"))
    helper = torch.from_numpy(np.load(folder / "omp-helper.npy"))
    without_special = {token: i for token, i in orig_vocab.items()
                       if not (isinstance(token, tuple) and token[0] == TokenMarker.SPECIAL)}
    for tag, vocab in (("", orig_vocab), ("-nospecial", without_special)):
        rows = build_embedding_matrix(SimpleNamespace(name="embed_tokens.weight"), source, helper, vocab, donor_vocab,
                                      junk_tokens=[], allow_prefix=False, allow_byte=False, is_lm_head=False,
                                      options=options)
        np.save(folder / f"omp-peer{tag}-rows.npy", rows.numpy())
        # the same test build_embedding_matrix applies: a donor token whose normalized form the source has is copied
        shared = sorted(donor_vocab[token] for token in donor_vocab if token in vocab)
        np.save(folder / f"omp-peer{tag}-shared.npy", np.array(shared, dtype=np.int64))

    # 3: overlap across tokenizer families (byte-level source, SentencePiece-style target)
    sp_target = AutoTokenizer.from_pretrained(folder / "sp-target-tokenizer")
    sp_vocab = normalized_vocabulary(sp_target)
    counts = {"mergekit": len(set(orig_vocab) & set(sp_vocab)),
              "mergekit_special": sum(isinstance(t, tuple) and t[0] == TokenMarker.SPECIAL
                                      for t in set(orig_vocab) & set(sp_vocab))}

    # 2: langsfer's clp_transfer (ExactMatchTokenOverlap, CosineSimilarity, IdentityWeights)
    from langsfer.embeddings import TransformersEmbeddings
    from langsfer.high_level import clp_transfer
    from langsfer.initialization import WeightedAverageEmbeddingsInitialization
    from langsfer.similarity import CosineSimilarity
    from langsfer.token_overlap import ExactMatchTokenOverlap
    from langsfer.weights import IdentityWeights

    class NoSpecialOverlap(ExactMatchTokenOverlap):
        def _get_source_vocab(self, tokenizer):
            return set(tokenizer.get_vocab()) - set(tokenizer.all_special_tokens)

    source = np.load(folder / "clp-source.npy")
    overlap, missing = ExactMatchTokenOverlap().apply(source_tokenizer, target_tokenizer)
    np.save(folder / "clp-peer-overlap.npy", np.array(sorted(target_tokenizer.convert_tokens_to_ids(overlap))))
    np.save(folder / "clp-peer-missing.npy", np.array(sorted(target_tokenizer.convert_tokens_to_ids(missing))))
    for helper_name in spec["clp_helpers"]:
        helper = np.load(folder / f"clp-helper-{helper_name}.npy")
        auxiliary = TransformersEmbeddings(helper, target_tokenizer)
        with np.errstate(all="ignore"):
            rows = clp_transfer(source_tokenizer, source, target_tokenizer, auxiliary).initialize(seed=0)
            control = WeightedAverageEmbeddingsInitialization(
                source_tokenizer=source_tokenizer, source_embeddings_matrix=source, target_tokenizer=target_tokenizer,
                target_auxiliary_embeddings=auxiliary, similarity_strategy=CosineSimilarity(),
                weights_strategy=IdentityWeights(), token_overlap_strategy=NoSpecialOverlap()).initialize(seed=0)
        np.save(folder / f"clp-peer-{helper_name}-rows.npy", rows)
        np.save(folder / f"clp-peer-nospecial-{helper_name}-rows.npy", control)
    overlap, _ = ExactMatchTokenOverlap().apply(source_tokenizer, sp_target)
    counts["langsfer"] = len(overlap)
    counts["langsfer_special"] = len(set(overlap) & set(source_tokenizer.all_special_tokens))
    (folder / "cross-family.json").write_text(json.dumps(counts))


# -- langswap's side ---------------------------------------------------------------------------------------------------


def pursuit_inputs(atoms: int, dim: int, kind: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((atoms, dim))
    t = rng.standard_normal((TARGETS, dim))
    if kind == "anisotropic":  # as embedding matrices are: decaying spectrum and a common mean direction
        scales = 1.0 / np.sqrt(1.0 + np.arange(dim))
        mean = rng.standard_normal(dim) * 0.5
        a, t = a * scales + mean, t * scales + mean
    return t.astype(np.float32), a.astype(np.float32)


def compare_pursuit(targets, atoms, ours, peer) -> dict:
    (i_ours, c_ours), (i_peer, c_peer) = ours, peer
    k = i_ours.shape[1]
    same_order = (i_ours == i_peer).all(axis=1)
    same_set = np.array([set(a) == set(b) for a, b in zip(i_ours, i_peer)])
    differs = i_ours != i_peer
    first = np.where(differs.any(axis=1), differs.argmax(axis=1), k)
    a64, t64 = atoms.astype(np.float64), targets.astype(np.float64)
    approx_ours = np.einsum("bk,bkd->bd", c_ours, a64[i_ours])
    approx_peer = np.einsum("bk,bkd->bd", c_peer, a64[i_peer])
    norm = np.linalg.norm(t64, axis=1)
    coefficient_diff = np.abs(c_ours - c_peer)[same_order].max() if same_order.any() else float("nan")
    return {
        "same_order": int(same_order.sum()), "same_set": int(same_set.sum()), "rows": len(targets),
        "first_divergence": int(first.min()) if (~same_order).any() else None,
        "coefficient_diff": float(coefficient_diff),
        "approximation_diff": float((np.linalg.norm(approx_ours - approx_peer, axis=1) / norm).max()),
        "residual_ours": float(np.median(np.linalg.norm(t64 - approx_ours, axis=1) / norm)),
        "residual_peer": float(np.median(np.linalg.norm(t64 - approx_peer, axis=1) / norm)),
        "residual_gap": float((np.abs(np.linalg.norm(t64 - approx_ours, axis=1)
                                      - np.linalg.norm(t64 - approx_peer, axis=1)) / norm).max()),
    }


def tokenizer_pair(folder: Path):
    """tests/test_omp.py's and tests/test_clp.py's pair: byte-level BPE, 600 source tokens, 900 target tokens of a
    half-ciphered language, saved and loaded back as both sides load them."""
    sys.path.insert(0, str(REPO / "tests"))
    from conftest import byte_level_tokenizer
    from test_focus import walk_lines
    from transformers import AutoTokenizer

    source = byte_level_tokenizer(walk_lines(3000, seed=2, cipher_share=0.0), vocab_size=600)
    target = byte_level_tokenizer(walk_lines(3000, seed=1, cipher_share=0.5), vocab_size=900)
    source.save_pretrained(folder / "source-tokenizer")
    target.save_pretrained(folder / "target-tokenizer")
    from conftest import sentencepiece_tokenizer  # the same target text, Llama-2 style (▁ word starts)

    sentencepiece_tokenizer(walk_lines(3000, seed=1, cipher_share=0.5), vocab_size=900).save_pretrained(
        folder / "sp-target-tokenizer")
    return (AutoTokenizer.from_pretrained(folder / "source-tokenizer"),
            AutoTokenizer.from_pretrained(folder / "target-tokenizer"))


def cipher_helper(source_tokenizer, target_tokenizer, embeddings, dim: int, seed: int) -> np.ndarray:
    """The tests' helper: random rows, except that a word and its cipher both get the source row of the plain word
    (the source rows are `dim` wide here, so helper and source rows are the same space for those words)."""
    import torch

    from conftest import cipher_word
    from test_focus import CLEAR_WORDS

    helper = torch.randn(len(target_tokenizer), dim, generator=torch.Generator().manual_seed(seed))
    source_ids, target_ids = source_tokenizer.get_vocab(), target_tokenizer.get_vocab()
    for word in CLEAR_WORDS:
        plain, ciphered = "Ġ" + word, "Ġ" + cipher_word(word)
        if plain in source_ids and plain in target_ids and ciphered in target_ids:
            helper[target_ids[plain]] = helper[target_ids[ciphered]] = torch.from_numpy(embeddings[source_ids[plain]])
    return helper.numpy()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peers-python", type=Path, default=DEFAULT_PEERS_PYTHON,
                        help="Python of a virtual environment with mergekit and langsfer installed.")
    parser.add_argument("--peer-side", type=Path, default=None, help=argparse.SUPPRESS)  # internal: the subprocess
    args = parser.parse_args(argv)
    if args.peer_side is not None:
        run_peers(args.peer_side)
        return 0
    if not args.peers_python.exists():
        print(f"compare_peers_omp_clp: {args.peers_python} not found; give --peers-python (a venv with mergekit and "
              "langsfer). Nothing was run.")
        return 1
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    torch.set_num_threads(1)
    from langswap.methods import Kind, TransferInputs, make_config, run_method
    from langswap.methods.omp import orthogonal_matching_pursuit
    from langswap.resources.kinds.helper import HelperModel
    from langswap.tokens import Vocabulary

    with tempfile.TemporaryDirectory(prefix="omp-clp-peers-") as tmp:
        folder = Path(tmp)
        cases = {}
        for seed, (atoms, dim, k, kind) in enumerate(PURSUIT_CASES):
            name = f"p{seed}"
            targets, candidates = pursuit_inputs(atoms, dim, kind, seed)
            np.save(folder / f"{name}-targets.npy", targets)
            np.save(folder / f"{name}-atoms.npy", candidates)
            np.save(folder / f"{name}-k.npy", np.array(k))
            cases[name] = (atoms, dim, k, kind, targets, candidates)

        source_tokenizer, target_tokenizer = tokenizer_pair(folder)
        source_vocabulary, target_vocabulary = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
        # omp: tests/test_omp.py's cipher helper, 256 wide (the source rows too, so the twins are exact)
        omp_source = torch.randn(len(source_vocabulary), 256, generator=torch.Generator().manual_seed(0)).numpy()
        omp_helper = cipher_helper(source_tokenizer, target_tokenizer, omp_source, 256, seed=1)
        np.save(folder / "omp-source.npy", omp_source)
        np.save(folder / "omp-helper.npy", omp_helper)
        # clp: tests/test_clp.py's, 64 wide; and the same helper moved off the origin by a common offset, as real
        # embedding matrices are (cosines then mostly positive)
        clp_source = torch.randn(len(source_vocabulary), 64, generator=torch.Generator().manual_seed(0)).numpy()
        clp_helpers = {"centred": cipher_helper(source_tokenizer, target_tokenizer, clp_source, 64, seed=1)}
        offset = np.random.default_rng(5).standard_normal(64).astype(np.float32)
        clp_helpers["offset"] = clp_helpers["centred"] + offset
        np.save(folder / "clp-source.npy", clp_source)
        for name, helper in clp_helpers.items():
            np.save(folder / f"clp-helper-{name}.npy", helper)
        (folder / "spec.json").write_text(json.dumps({"pursuit_cases": list(cases), "omp_k": 64,
                                                      "clp_helpers": list(clp_helpers)}))

        completed = subprocess.run([str(args.peers_python), str(Path(__file__).resolve()), "--peer-side", str(folder)],
                                   capture_output=True, text=True)
        if completed.returncode != 0:
            print(completed.stdout[-3000:], completed.stderr[-6000:])
            print("compare_peers_omp_clp: the peers' subprocess failed (above).")
            return 1

        lines = ["## 1a. Pursuit alone: langswap `orthogonal_matching_pursuit(tolerance=0.0)` vs mergekit `batch_omp`",
                 "",
                 f"{TARGETS} target rows per case, float32 inputs; the peer run on them as float32 (what tokensurgeon "
                 "does) and as float64. Rows: how many of the rows picked the same atoms in the same order / the same "
                 "set. Coefficients: max |difference| over rows with the same order. Approximation: max over rows of "
                 "|approx_langswap - approx_peer| / |target|. Residual: median |target - approx| / |target|; gap: "
                 "max over rows of the difference of the two residual norms / |target|.",
                 "",
                 "| atoms x dim | k | inputs | peer dtype | same order | same set | first divergence (step) "
                 "| max coef diff | max approx diff | residual langswap | residual peer | max residual gap |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, (atoms, dim, k, kind, targets, candidates) in cases.items():
            ours = orthogonal_matching_pursuit(torch.from_numpy(targets), torch.from_numpy(candidates), k,
                                               tolerance=0.0)
            ours = (ours[0].numpy(), ours[1].numpy())
            for dtype in ("float32", "float64"):
                peer = (np.load(folder / f"{name}-peer-{dtype}-indices.npy"),
                        np.load(folder / f"{name}-peer-{dtype}-coefficients.npy"))
                r = compare_pursuit(targets, candidates, ours, peer)
                first = "-" if r["first_divergence"] is None else str(r["first_divergence"])
                lines.append(f"| {atoms} x {dim} | {k} | {kind} | {dtype} | {r['same_order']}/{r['rows']} | "
                             f"{r['same_set']}/{r['rows']} | {first} | {r['coefficient_diff']:.1e} | "
                             f"{r['approximation_diff']:.1e} | {r['residual_ours']:.4f} | {r['residual_peer']:.4f} | "
                             f"{r['residual_gap']:.1e} |")

        # 1b: the whole omp method
        lines += ["", "## 1b. Whole method: langswap `omp` vs tokensurgeon `build_embedding_matrix` (omp, k 64)", "",
                  f"Tokenizer pair of tests/test_omp.py ({len(source_vocabulary)} source, {len(target_vocabulary)} "
                  "target byte-level tokens), source rows and helper rows 256 wide, float32; cipher twins in the "
                  "helper. Shared: target rows each copies from the source (langswap: exact canonical matches plus "
                  "special tokens by role). Atoms: shared tokens the pursuit may choose. New rows: the rest; the "
                  "difference is over them (copied rows are compared too).", "",
                  "| langswap | peer | shared (langswap / peer) | atoms (langswap / peer) | copied rows max diff | "
                  "new rows | max abs diff | rows > 1e-4 | twin rows max diff |",
                  "|---|---|---|---|---|---|---|---|---|"]
        inputs = TransferInputs(source_vocabulary, target_vocabulary, torch.from_numpy(omp_source),
                                resources={"helper_model": HelperModel(torch.from_numpy(omp_helper), None, "helper")})
        from conftest import cipher_word
        from test_focus import CLEAR_WORDS

        target_ids = target_tokenizer.get_vocab()
        twins = np.array(sorted(target_ids["Ġ" + cipher_word(w)] for w in CLEAR_WORDS
                                if "Ġ" + cipher_word(w) in target_ids and "Ġ" + w in target_ids
                                and "Ġ" + w in source_tokenizer.get_vocab()), dtype=np.int64)
        special = np.array([t.id for t in target_vocabulary.tokens if t.special], dtype=np.int64)
        peer_shared_published = np.load(folder / "omp-peer-shared.npy")
        for tolerance in (1e-6, 0.0):
            result = run_method(make_config("omp", k=64, tolerance=tolerance), inputs)
            kinds = result.mapping.kinds
            ours_rows = result.embeddings.numpy()
            ours_shared = np.flatnonzero(np.isin(kinds, [Kind.COPIED, Kind.SPECIAL]))
            ours_atoms = np.flatnonzero(kinds == Kind.COPIED)  # langswap's atoms: the copied, non-special tokens
            combined = np.flatnonzero(kinds == Kind.COMBINED)
            for tag, label in (("", "as published"), ("-nospecial", "special token not an atom")):
                peer_rows = np.load(folder / f"omp-peer{tag}-rows.npy")
                # the peer's atoms are its shared tokens (special ones included); -nospecial drops them
                peer_atoms = np.setdiff1d(peer_shared_published, special) if tag else peer_shared_published
                same_atoms = "same" if np.array_equal(np.sort(ours_atoms), peer_atoms) else "differ"
                copied = np.setdiff1d(ours_shared, special) if tag else ours_shared  # -nospecial codes the specials
                copied_diff = np.abs(ours_rows[copied] - peer_rows[copied]).max()
                new = np.setdiff1d(combined, peer_shared_published)
                diff = np.abs(ours_rows[new] - peer_rows[new]).max(axis=1)
                twin_diff = np.abs(ours_rows[twins] - peer_rows[twins]).max() if len(twins) else float("nan")
                lines.append(f"| tolerance {tolerance:g} | {label} | {len(ours_shared)} / {len(peer_shared_published)}"
                             f" | {len(ours_atoms)} / {len(peer_atoms)} ({same_atoms}) | {copied_diff:.1e} | "
                             f"{len(new)} | {diff.max():.1e} | {(diff > 1e-4).sum()} | {twin_diff:.1e} |")

        # 2: clp
        peer_overlap = np.load(folder / "clp-peer-overlap.npy")
        peer_missing = np.load(folder / "clp-peer-missing.npy")
        lines += ["", "## 2. `clp` vs langsfer `clp_transfer(...).initialize()`", "",
                  "Same tokenizer pair, source rows 64 wide, the tests' cipher helper 64 wide (`centred`) and the same "
                  "helper plus one common offset row (`offset`, as real embedding matrices are). Overlap: target "
                  "tokens copied as the overlap (langswap: exact canonical matches; langsfer: ExactMatchTokenOverlap "
                  "on raw vocabulary strings). Compared: rows langswap mixes (kinds mixed/combined). Fallback rows: "
                  "new rows whose similarities sum to <= 1e-3 (langswap leaves them to the fallback; langsfer divides "
                  "by the sum anyway). Sums: of the float64 cosines of a compared row to the langswap overlap.", "",
                  "| helper | peer | overlap (langswap / langsfer) | new rows (langswap / langsfer) | rows compared | "
                  "max abs diff | smallest sum compared | max abs diff, sum > 1 | fallback rows in langswap "
                  "(sum < 0) | "
                  "langsfer's max abs value on them |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, helper in clp_helpers.items():
            inputs = TransferInputs(source_vocabulary, target_vocabulary, torch.from_numpy(clp_source),
                                    resources={"helper_model": HelperModel(torch.from_numpy(helper), None, "helper")})
            result = run_method(make_config("clp"), inputs)
            kinds = result.mapping.kinds
            ours_rows = result.embeddings.numpy()
            ours_overlap = np.flatnonzero(kinds == Kind.COPIED)  # specials are Kind.SPECIAL, outside the overlap
            mixed = np.flatnonzero(np.isin(kinds, [Kind.MIXED, Kind.COMBINED]))
            ours_new = np.array([t.id for t in target_vocabulary.tokens
                                 if not t.special and kinds[t.id] != Kind.COPIED])
            unit = helper.astype(np.float64) / np.linalg.norm(helper.astype(np.float64), axis=1, keepdims=True)
            sums = (unit[ours_new] @ unit[ours_overlap].T).sum(axis=1)
            fallback = ours_new[sums <= 1e-3]
            negative = int((sums < 0).sum())
            for tag, label in (("", "as published"), ("-nospecial", "special token not in overlap")):
                peer_rows = np.load(folder / f"clp-peer{tag}-{name}-rows.npy")
                row_diff = np.abs(ours_rows[mixed] - peer_rows[mixed]).max(axis=1)
                mixed_sums = (unit[mixed] @ unit[ours_overlap].T).sum(axis=1)
                diff, large = row_diff.max(), row_diff[mixed_sums > 1].max()
                blow = np.abs(peer_rows[fallback]).max() if len(fallback) else float("nan")
                overlap_peer = len(np.setdiff1d(peer_overlap, special)) if tag else len(peer_overlap)
                lines.append(f"| {name} | {label} | {len(ours_overlap)} / {overlap_peer} | {len(ours_new)} / "
                             f"{len(peer_missing)} | {len(mixed)} | {diff:.1e} | {mixed_sums.min():.2g} | "
                             f"{large:.1e} | {len(fallback)} ({negative}) | {blow:.1e} |")

        # 3: overlap across tokenizer families
        from transformers import AutoTokenizer

        counts = json.loads((folder / "cross-family.json").read_text())
        sp_target = Vocabulary(AutoTokenizer.from_pretrained(folder / "sp-target-tokenizer"))
        mapping = run_method(make_config("overlap"), TransferInputs(
            source_vocabulary, sp_target, torch.zeros(len(source_vocabulary), 4))).mapping
        lines += ["", "## 3. Overlap across tokenizer families", "",
                  "The same byte-level source tokenizer against a SentencePiece-style target "
                  f"({len(sp_target)} tokens, "
                  "▁ word starts, <0xNN> byte fallback) trained on the same target text: how many target tokens each "
                  "finds in the source (special tokens among them in brackets).", "",
                  "| langswap (canonical form) | tokensurgeon (normalized_vocabulary) | langsfer (raw strings) |",
                  "|---|---|---|",
                  f"| {int((mapping.kinds == Kind.COPIED).sum()) + int((mapping.kinds == Kind.SPECIAL).sum())} "
                  f"({int((mapping.kinds == Kind.SPECIAL).sum())}) | "
                  f"{counts['mergekit']} ({counts['mergekit_special']}) "
                  f"| {counts['langsfer']} ({counts['langsfer_special']}) |"]

    command = "python benchmarks/results/omp-clp-peers/compare_peers_omp_clp.py" + (
        "" if args.peers_python == DEFAULT_PEERS_PYTHON else f" --peers-python {shlex.quote(str(args.peers_python))}")
    text = "\n".join(lines)
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "comparison.md").write_text(f"# langswap omp / clp vs the peers' own code\n\nCommand: `{command}`\n\n"
                                           + text + "\n\n" + NOTES, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
