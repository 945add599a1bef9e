"""Retrieving translations among word vectors that share one space: nearest neighbours by cosine and by CSLS
(Conneau et al., 2018), in row blocks, and precision@k against a dictionary. Used by the alignment's held-out check
(`resources.alignment`) and by lexicon induction (`evaluation.lexicon`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from langswap.kernels import DEFAULT_BLOCK_BYTES, block_rows_for, topk_cosine, unit_rows
from langswap.resources.vectors import WordVectors


@dataclass(frozen=True, kw_only=True)
class RetrievalConfig:
    """How translations are retrieved; shared by lexicon induction and the alignment's held-out check."""

    csls_neighbors: int = field(default=10, metadata={"help": "Neighbourhood size of CSLS's hubness terms."})
    retrieval_words: int = field(default=200_000, metadata={"help": "Most frequent target words searched for "
                                                                     "translations (gold words beyond them are "
                                                                     "added); as many source words make CSLS's "
                                                                     "hubness term."})
    case_variants: bool = field(default=True, metadata={"help": "Try each dictionary word as given, lower-cased "
                                                                 "and title-cased."})


def nearest_translations(queries, candidates, source_pool, k: int, csls_neighbors: int = RetrievalConfig.csls_neighbors,
                         block_bytes: int = DEFAULT_BLOCK_BYTES) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best candidates of each query, by cosine and by CSLS.

    queries: (n, D) source words; candidates: (m, D) target words; source_pool: (p, D) source words, the population
    of CSLS's candidate-side hubness term; numpy or torch, all in one space. Returns (by_cosine, by_csls), each
    (n, min(k, m)) int64 candidate indices, best first.

    CSLS(x, y) = 2 cos(x, y) - r_T(x) - r_S(y), where r_T(x) is the mean cosine of x to its `csls_neighbors` nearest
    candidates and r_S(y) that of y to its nearest `source_pool` rows. r_T(x) is the same for every candidate of one
    query, so the ranking needs only 2 cos(x, y) - r_S(y). Queries are scored in row blocks of at most `block_bytes`
    of similarities; no (n, m) matrix is built.
    """
    n_queries, dim = queries.shape
    n_candidates, candidate_dim = candidates.shape
    assert dim == candidate_dim == source_pool.shape[1], (queries.shape, candidates.shape, source_pool.shape)
    k = min(k, n_candidates)
    by_cosine = topk_cosine(queries, candidates, k, block_bytes=block_bytes)[1]
    by_csls = torch.empty((n_queries, k), dtype=torch.int64)
    if n_queries == 0 or k == 0:
        return by_cosine, by_csls
    neighbors = max(1, min(csls_neighbors, len(source_pool)))
    candidate_hub = topk_cosine(candidates, source_pool, neighbors, block_bytes=block_bytes)[0].mean(dim=1)  # r_S
    queries_t = unit_rows(torch.as_tensor(queries, dtype=torch.float32))
    candidates_t = unit_rows(torch.as_tensor(candidates, dtype=torch.float32)).T
    step = block_rows_for(n_candidates, block_bytes)
    for start in range(0, n_queries, step):
        scores = (queries_t[start:start + step] @ candidates_t).mul_(2).sub_(candidate_hub)
        by_csls[start:start + step] = torch.topk(scores, k, dim=1).indices
    return by_cosine, by_csls


def precision_at(ranked: torch.Tensor, gold: list[set[int]], ks: Sequence[int]) -> dict[int, float]:
    """For each k, the fraction of rows of `ranked` ((n, K) candidate indices, best first) with a gold index among
    their first k (all K where k > K); gold[i] holds the correct indices of row i."""
    assert len(ranked) == len(gold), (len(ranked), len(gold))
    first_hit = np.array([next((rank for rank, index in enumerate(row) if index in answers), len(row))
                          for row, answers in zip(ranked.tolist(), gold)], dtype=np.int64)
    return {k: float((first_hit < k).sum()) / max(len(gold), 1) for k in ks}


def retrieval_precision(queries, candidates, gold: list[set[int]], source_pool, ks: Sequence[int] = (1,),
                        csls_neighbors: int = RetrievalConfig.csls_neighbors,
                        block_bytes: int = DEFAULT_BLOCK_BYTES, subset: np.ndarray | None = None) -> dict:
    """Precision@k of retrieving a gold candidate for each query, by cosine and by CSLS.

    queries: (n, D); candidates: (m, D); gold[i]: candidate indices correct for query i; source_pool: (p, D), see
    `nearest_translations`. Returns {"precision_at_{k}": ..., "precision_at_{k}_csls": ..., "queries": n}, rounded to
    4 decimals. With `subset` (a boolean mask over the queries), the same measures over those queries alone are
    added with the suffix `_distinct`, and their number as "distinct_queries"."""
    by_cosine, by_csls = nearest_translations(queries, candidates, source_pool, max(ks), csls_neighbors, block_bytes)
    report: dict = {}
    for suffix, ranked in (("", by_cosine), ("_csls", by_csls)):
        for k, value in precision_at(ranked, gold, ks).items():
            report[f"precision_at_{k}{suffix}"] = round(value, 4)
    report["queries"] = len(queries)
    if subset is not None:
        rows = np.flatnonzero(subset)
        for suffix, ranked in (("", by_cosine), ("_csls", by_csls)):
            for k, value in precision_at(ranked[torch.from_numpy(rows)], [gold[i] for i in rows], ks).items():
                report[f"precision_at_{k}{suffix}_distinct"] = round(value, 4) if len(rows) else None
        report["distinct_queries"] = int(len(rows))
    return report


def dictionary_precision(source: WordVectors, target: WordVectors, pairs: list[tuple[str, str]],
                         query_words: list[str], ks: Sequence[int] = (1,),
                         csls_neighbors: int = RetrievalConfig.csls_neighbors,
                         retrieval_words: int = RetrievalConfig.retrieval_words) -> dict:
    """`retrieval_precision` of `query_words` (source words of `pairs`) among the target words, each query's gold
    being the target words it is paired with; `pairs` are (source, target) words both known to the vectors, which
    share one space. Adds "retrieval_candidates" to the report, and the same measures over the queries none of whose
    translations is spelled like the query, ignoring case (suffix `_distinct`): a name or a loanword is retrieved by
    its spelling alone in one joint space, so only these say how far the space ties words that differ."""
    candidate_words = list(target.words[:retrieval_words])
    candidate_index = {word: i for i, word in reversed(list(enumerate(candidate_words)))}
    for _, target_word in pairs:  # gold words beyond the frequency cut-off are still retrievable
        if target_word not in candidate_index:
            candidate_index[target_word] = len(candidate_words)
            candidate_words.append(target_word)
    gold: dict[str, set[int]] = {word: set() for word in query_words}
    translations: dict[str, set[str]] = {word: set() for word in query_words}
    for source_word, target_word in pairs:
        if source_word in gold:
            gold[source_word].add(candidate_index[target_word])
            translations[source_word].add(target_word)
    assert all(gold.values()), "every query word must be the source word of a pair"
    distinct = np.array([all(target_word.casefold() != word.casefold() for target_word in translations[word])
                         for word in query_words], dtype=bool)
    report = retrieval_precision(source.vectors(query_words), target.vectors(candidate_words),
                                 [gold[word] for word in query_words], source.word_matrix(retrieval_words), ks,
                                 csls_neighbors, subset=distinct)
    report["retrieval_candidates"] = len(candidate_words)
    return report
