"""Code-switched joint word vectors: held-out precision@1 under other corpus and fastText settings.

Trains one joint fastText model per setting on `splits/en.train.txt` and the target language's `splits/*.train.txt`
with the language's dictionary (as `langswap fasttext --joint`, `resources.joint.train_joint_vectors`) and prints
the held-out precision@1 (nearest neighbour and CSLS; over all held-out words and over those whose translations are
spelled otherwise, `_distinct`), and two diagnostics: the share of held-out queries whose
nearest target word is the query's own spelling (one string has one vector in a joint model), and precision@1 after
centring each language's words on their own mean. With --refine, also the precision after a rotation fitted on the
dictionary pairs the corpus switched (orthogonal Procrustes from the source words' vectors to their translations'
in the joint space: the alignment-refinement step of Wang et al., 2020, "Cross-lingual alignment vs joint
training"), and after three rounds of self-learning on top of it (the pairs of mutual CSLS nearest neighbours among
the 20,000 most frequent words of each side added to the fit). Models are kept under --workdir, so a rerun only
measures; beside each, the words file that `resources.joint_vectors` reads.

    python benchmarks/results/joint-de/explore_joint.py --language de --setting passes=1 --setting passes=2 \\
        --setting epoch=20
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/, for the bench modules
from bench_german_training import DEFAULT_DATA  # noqa: E402

DICTIONARIES = {"de": "muse-en-de.tsv", "sw": "freedict-en-sw.tsv"}


def parse_setting(text: str) -> dict:
    out = {}
    for part in text.split(","):
        key, _, value = part.partition("=")
        out[key.strip()] = float(value) if "." in value else int(value)
    return out


def measure(source, target, heldout, retrieval_words: int) -> dict:
    from langswap.resources.joint import heldout_precision
    from langswap.resources.retrieval import nearest_translations

    report = heldout_precision(source, target, heldout, retrieval_words)
    pairs = [(s, t) for s, t in heldout if source.word_id(s) >= 0 and target.word_id(t) >= 0]
    queries = sorted({s for s, _ in pairs})
    candidates = list(target.words[:retrieval_words])
    by_cosine, _ = nearest_translations(source.vectors(queries), target.vectors(candidates),
                                        source.word_matrix(retrieval_words), 1, 10)
    own = sum(1 for query, ranked in zip(queries, by_cosine) if candidates[int(ranked[0])].lower() == query.lower())
    report["top1_is_own_spelling"] = round(own / max(len(queries), 1), 4)
    # each language centred on the mean of its own words (a language offset the shared contexts leave)
    centred = {}
    for name, view in (("source", source), ("target", target)):
        mean = view.word_matrix(retrieval_words).mean(axis=0)
        centred[name] = mean
    gold_index = {word: i for i, word in enumerate(candidates)}
    for _, word in pairs:
        if word not in gold_index:
            gold_index[word] = len(candidates)
            candidates.append(word)
    q = source.vectors(queries) - centred["source"]
    c = target.vectors(candidates) - centred["target"]
    q /= np.linalg.norm(q, axis=1, keepdims=True) + 1e-12
    c /= np.linalg.norm(c, axis=1, keepdims=True) + 1e-12
    best = np.concatenate([np.argmax(q[i:i + 256] @ c.T, axis=1) for i in range(0, len(q), 256)])
    gold = {word: set() for word in queries}
    for s, t in pairs:
        gold[s].add(gold_index[t])
    report["precision_at_1_centred"] = round(float(np.mean([int(b) in gold[w] for w, b in zip(queries, best)])), 4)
    return report


def refined(source, target, dictionary, heldout, retrieval_words: int) -> dict:
    """Held-out precision@1 after a Procrustes rotation on the switched pairs, then after self-learning."""
    from langswap.resources.alignment import procrustes
    from langswap.resources.joint import heldout_precision
    from langswap.resources.retrieval import nearest_translations

    held = {s.casefold() for s, _ in heldout}
    train = [(s, t) for s, t in dictionary.pairs
             if s.casefold() not in held and source.word_id(s) >= 0 and target.word_id(t) >= 0]
    keys = ("precision_at_1", "precision_at_1_csls", "precision_at_1_distinct", "precision_at_1_csls_distinct")
    out = {"refine_pairs": len(train)}
    rotation = procrustes(source.vectors([s for s, _ in train]), target.vectors([t for _, t in train]))
    report = heldout_precision(source.with_transform(rotation), target, heldout, retrieval_words)
    out.update({f"procrustes_{key}": report.get(key) for key in keys})
    source_words, target_words = source.words[:20000], target.words[:20000]
    for _ in range(3):
        queries, candidates = source.with_transform(rotation).vectors(source_words), target.vectors(target_words)
        forward = nearest_translations(queries, candidates, queries, 1)[1][:, 0].tolist()
        backward = nearest_translations(candidates, queries, candidates, 1)[1][:, 0].tolist()
        induced = [(source_words[i], target_words[j]) for i, j in enumerate(forward)
                   if backward[j] == i and source_words[i].casefold() not in held]
        pairs = train + induced
        rotation = procrustes(source.vectors([s for s, _ in pairs]), target.vectors([t for _, t in pairs]))
    report = heldout_precision(source.with_transform(rotation), target, heldout, retrieval_words)
    out.update({f"self_learning_{key}": report.get(key) for key in keys}, self_learning_induced=len(induced))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--language", choices=sorted(DICTIONARIES), required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "langswap" / "explore-joint")
    parser.add_argument("--setting", action="append", default=None, help="key=value[,key=value]: JointConfig "
                        "fields (share, passes) and FastTextConfig fields (dim, epoch, minCount, ...).")
    parser.add_argument("--refine", action="store_true", help="Also measure a Procrustes rotation fitted in the "
                        "joint space, and self-learning on top of it.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    from langswap.resources.dictionary import Dictionary
    from langswap.resources.fasttext_train import train_fasttext
    from langswap.resources.joint import (JOINT_FASTTEXT, JointConfig, views, word_lists, write_code_switched_corpus,
                                         write_words_file)

    if not (args.data / "splits").is_dir():
        print(f"no shared data at {args.data}; nothing measured")
        return 0
    source_text = args.data / "splits" / "en.train.txt"
    target_text = args.data / "splits" / f"{args.language}.train.txt"
    dictionary = Dictionary.load(args.data / "dicts" / DICTIONARIES[args.language])
    joint_fields = {f.name for f in fields(JointConfig)}
    args.workdir.mkdir(parents=True, exist_ok=True)
    for text in args.setting or ["passes=1"]:
        setting = parse_setting(text)
        config = JointConfig(**{k: v for k, v in setting.items() if k in joint_fields})
        options = replace(JOINT_FASTTEXT, **{k: v for k, v in setting.items() if k not in joint_fields})
        name = f"{args.language}-" + "-".join(f"{k}{v}" for k, v in sorted(setting.items()))
        model = args.workdir / f"{name}.bin"
        sidecar = args.workdir / f"{name}.json"
        with tempfile.TemporaryDirectory() as workdir:
            corpus = Path(workdir) / "corpus.txt"
            made = write_code_switched_corpus(source_text, target_text, dictionary, corpus, config)
            clock = time.perf_counter()
            if not model.is_file():
                train_fasttext(corpus, model, options, progress=False, split_words=False)
            seconds = time.perf_counter() - clock
        words = word_lists(made)
        source, target = views(model, words)
        report = measure(source, target, made["heldout"], config.retrieval_words)
        if args.refine:
            report.update(refined(source, target, dictionary, made["heldout"], config.retrieval_words))
        report.update({"setting": setting, "joint": asdict(config), "fasttext": asdict(options),
                       "train_seconds": round(seconds, 1), "lines": made["lines"]})
        sidecar.write_text(json.dumps(report, indent=2), encoding="utf-8")
        write_words_file(model, {**report, "config": report["joint"]}, words)  # a transfer reads the model
        print(json.dumps({"setting": text, **{k: report.get(k) for k in (
            "precision_at_1", "precision_at_1_csls", "precision_at_1_distinct", "precision_at_1_csls_distinct",
            "distinct_queries", "precision_at_1_centred", "top1_is_own_spelling", "queries", "train_seconds")},
            **{k: v for k, v in report.items() if k.startswith(("procrustes_", "self_learning_", "refine_"))}}),
            flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
