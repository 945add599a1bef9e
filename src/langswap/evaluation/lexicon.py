"""Bilingual lexicon induction: how well word vectors in one shared space retrieve a dictionary's translations.

Each dictionary source word that both vector sets know is a query. Target words are ranked by cosine (nearest
neighbour) and by CSLS (cross-domain similarity local scaling, Conneau et al., 2018, "Word translation without
parallel data"), and a query is correct at k when any of its gold translations (every covered dictionary pair of that
source word, case variants included) is among its k best candidates. Precision@k is the fraction of correct queries.

The candidates are the `retrieval_words` most frequent target words, plus the target word of every covered pair that
falls beyond that cut-off (so every query stays answerable; those extra words are distractors for the other queries
too). CSLS's hubness term of a candidate is its mean cosine to its `csls_neighbors` nearest source words among the
`retrieval_words` most frequent ones. The same retrieval judges `align`'s held-out precision@1.

Not handled: vectors in different spaces (nothing here fits a map: run `langswap align` first, or use vectors trained
jointly); separating test pairs from the pairs an alignment was fitted on (give a held-out test dictionary, such as
MUSE's `.5000-6500.txt` files); multi-word entries (they count only where the vectors have them as one token).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from langswap.errors import ConfigError
from langswap.methods.kernels import DEFAULT_BLOCK_BYTES, block_rows_for, topk_cosine, unit_rows
from langswap.resources.dictionary import Dictionary, require_coverage
from langswap.resources.vectors import WordVectors

logger = logging.getLogger(__name__)


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


@dataclass(frozen=True, kw_only=True)
class LexiconConfig(RetrievalConfig):
    """Bilingual lexicon induction on word vectors that already share one space."""

    ks: tuple[int, ...] = field(default=(1, 5), metadata={"help": "Report precision@k for each of these k."})
    max_queries: int | None = field(default=None, metadata={"help": "Evaluate only the first N covered source "
                                                                     "words, in dictionary order (null: all)."})


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
                        block_bytes: int = DEFAULT_BLOCK_BYTES) -> dict:
    """Precision@k of retrieving a gold candidate for each query, by cosine and by CSLS.

    queries: (n, D); candidates: (m, D); gold[i]: candidate indices correct for query i; source_pool: (p, D), see
    `nearest_translations`. Returns {"precision_at_{k}": ..., "precision_at_{k}_csls": ..., "queries": n}, rounded to
    4 decimals."""
    by_cosine, by_csls = nearest_translations(queries, candidates, source_pool, max(ks), csls_neighbors, block_bytes)
    report: dict = {}
    for suffix, ranked in (("", by_cosine), ("_csls", by_csls)):
        for k, value in precision_at(ranked, gold, ks).items():
            report[f"precision_at_{k}{suffix}"] = round(value, 4)
    report["queries"] = len(queries)
    return report


def dictionary_precision(source: WordVectors, target: WordVectors, pairs: list[tuple[str, str]],
                         query_words: list[str], ks: Sequence[int] = (1,),
                         csls_neighbors: int = RetrievalConfig.csls_neighbors,
                         retrieval_words: int = RetrievalConfig.retrieval_words) -> dict:
    """`retrieval_precision` of `query_words` (source words of `pairs`) among the target words, each query's gold
    being the target words it is paired with; `pairs` are (source, target) words both known to the vectors, which
    share one space. Adds "retrieval_candidates" to the report."""
    candidate_words = list(target.words[:retrieval_words])
    candidate_index = {word: i for i, word in reversed(list(enumerate(candidate_words)))}
    for _, target_word in pairs:  # gold words beyond the frequency cut-off are still retrievable
        if target_word not in candidate_index:
            candidate_index[target_word] = len(candidate_words)
            candidate_words.append(target_word)
    gold: dict[str, set[int]] = {word: set() for word in query_words}
    for source_word, target_word in pairs:
        if source_word in gold:
            gold[source_word].add(candidate_index[target_word])
    assert all(gold.values()), "every query word must be the source word of a pair"
    report = retrieval_precision(source.vectors(query_words), target.vectors(candidate_words),
                                 [gold[word] for word in query_words], source.word_matrix(retrieval_words), ks,
                                 csls_neighbors)
    report["retrieval_candidates"] = len(candidate_words)
    return report


def _check_options(ks: Sequence[int], csls_neighbors: int, retrieval_words: int, max_queries: int | None) -> None:
    if not ks or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in ks):
        raise ConfigError(f"ks is {list(ks)!r}; give one or more whole numbers of at least 1, e.g. ks: [1, 5].")
    for name, value, least in (("csls_neighbors", csls_neighbors, 1), ("retrieval_words", retrieval_words, 1)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
            raise ConfigError(f"{name} is {value!r}; it must be a whole number of at least {least}.")
    if max_queries is not None and (isinstance(max_queries, bool) or not isinstance(max_queries, (int, np.integer))
                                    or max_queries < 1):
        raise ConfigError(f"max_queries is {max_queries!r}; give a whole number of at least 1, or null for all "
                          "covered source words.")


def lexicon_induction(source: WordVectors, target: WordVectors, dictionary: Dictionary,
                      ks: Sequence[int] = LexiconConfig.ks, csls_neighbors: int = LexiconConfig.csls_neighbors,
                      retrieval_words: int = LexiconConfig.retrieval_words,
                      case_variants: bool = LexiconConfig.case_variants,
                      max_queries: int | None = LexiconConfig.max_queries) -> dict:
    """Precision@k of translating the dictionary's source words with vectors that already share one space.

    source, target: word vectors of the two languages, of one dimension D (after any transform); dictionary:
    source<TAB>target pairs. The options are `LexiconConfig`'s. Returns a report: the vector names, the dictionary
    coverage ("dictionary_entries", "entries_covered", "covered_fraction", "word_pairs" = covered pairs),
    "precision_at_{k}" (cosine) and "precision_at_{k}_csls" for each k, "queries", "retrieval_candidates" and
    "csls_neighbors".
    """
    _check_options(ks, csls_neighbors, retrieval_words, max_queries)
    if source.dim != target.dim:
        raise ConfigError(
            f"the source vectors ({source.name}) have dimension {source.dim} and the target vectors ({target.name}) "
            f"{target.dim}: lexicon induction compares vectors that already share one space. Align them first "
            "(`langswap align`) and evaluate its source.aligned.vec against the target vectors.")
    covered = require_coverage(dictionary, source, target, variants=case_variants)
    query_words = list(dict.fromkeys(source_word for source_word, _ in covered.pairs))[:max_queries]
    result = dictionary_precision(source, target, covered.pairs, query_words, sorted(set(ks)), csls_neighbors,
                                  retrieval_words)
    report = {"source_vectors": source.name, "target_vectors": target.name, **covered.report(), **result,
              "csls_neighbors": csls_neighbors}
    logger.info("lexicon induction: %s | %d queries among %d candidates",
                " | ".join(f"{key.replace('precision_at_', 'P@')} {value}" for key, value in result.items()
                           if key.startswith("precision_at_")), result["queries"], result["retrieval_candidates"])
    return report
