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

from langswap.errors import ConfigError
from langswap.resources.dictionary import Dictionary, require_coverage
from langswap.resources.retrieval import RetrievalConfig, dictionary_precision
from langswap.resources.vectors import WordVectors

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class LexiconConfig(RetrievalConfig):
    """Bilingual lexicon induction on word vectors that already share one space."""

    ks: tuple[int, ...] = field(default=(1, 5), metadata={"help": "Report precision@k for each of these k."})
    max_queries: int | None = field(default=None, metadata={"help": "Evaluate only the first N covered source "
                                                                     "words, in dictionary order (null: all)."})


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
