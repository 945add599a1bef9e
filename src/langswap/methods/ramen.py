"""`ramen`: RAMEN's initialisation (Tran, 2020), E_t[i] = sum_j p(j | i) E_s[j].

Each target token's row is the mix of source rows weighted by the probabilities that the target token translates to
each source token. RAMEN gets the probabilities in one of two ways, both here (`probabilities`):

- `parallel`: from word-aligned parallel text (the `translations` resource: `resources.parallel_text`, or a table
  `langswap align-parallel` saved), p(s | t) = links(s, t) / links(t) over the symmetrised links of both tokenizers'
  tokens (`langswap.resources.parallel`).
- `vectors`: from aligned word vectors (the `vectors` resource, as WECHSEL's). Each token's vector is the
  frequency-weighted mean of the vectors of the `max_words` most frequent words whose tokenisation contains it
  (RAMEN's equation 4, over 50,000 words as in the paper); p(. | t) is sparsemax over the cosine similarities of t's
  vector to every source token's (Martins and Astudillo, 2016; the `entmax` package), so most of the mass goes to a
  few source tokens and the rest get none.
- A path instead of either word: a saved table, as `resources.translation_table`.

Read from the paper: the two ways to the probabilities, equation 4 over the 50,000 most frequent words, sparsemax,
the same weights for the output layer and its bias (`TokenMapping` gives an untied head and a bias the input rows'
weights), tokens without probabilities from a normal distribution. Decided here: with parallel text the aligner is
eflomal (RAMEN used fast_align) on subword tokens directly, where RAMEN aligned words and split them afterwards;
tokens without probabilities get the shared `fallback` (`subword` by default, as every method's: the mean of the
source rows of the token's pieces; `fallback: random` draws a per-dimension normal with the source embeddings' mean
and spread, where the paper draws N(0, 1/d^2)); the sparsemax is exact over all source tokens but
computed in row blocks with a top-k that widens until it holds each row's support (FOCUS's `sparse_anchor_weights`),
never a dense V_t x V_s matrix of similarities.

Memory: beside the source and new matrices, with `probabilities: parallel` (or a saved table), the table's rows copied
twice for the mapping (12 bytes per entry each: O(table entries), tens of MiB at 128k). With `probabilities: vectors`,
the token vectors as `wechsel`'s `subword_source: frequency` builds them (float64 sums and means, V x D: 294 MiB each
at V = 128,256 and D = 300; the 50,000 word vectors in float64, 114 MiB; about 1.1 GiB), then FOCUS's widening top-k
over every source token with a vector: working copies of the vectors (under 1 GiB at 128k), one block of similarities
(256 MiB; 768 MiB while near-ties are re-scored in float64), the first top-k lists (V_t x 64 x 12 bytes: 94 MiB)
and each row's support, 12 bytes per entry, as FOCUS keeps it (a wide support costs its own entries): about 1.3 GiB
at 128k, plus 12 bytes for each support entry beyond the first 64 of a row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from langswap.errors import ConfigError, VocabularyError
from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method
from langswap.methods.focus import sparse_anchor_weights
from langswap.methods.wechsel import frequency_token_vectors
from langswap.progress import bar as progress_bar
from langswap.resources.parallel import TranslationTable

logger = logging.getLogger(__name__)

WAYS = ("parallel", "vectors")
LOW_COVERAGE = 0.5  # share of the parallel text's target tokens with probabilities below which a transfer warns


@dataclass(frozen=True, kw_only=True)
class RamenConfig(MethodConfig):
    """RAMEN (Tran, 2020)."""

    probabilities: str = field(default="parallel", metadata={
        "help": "Where p(source token | target token) comes from: parallel (word-aligned parallel text, "
                "resources.parallel_text or resources.translation_table), vectors (sparsemax over cosines of "
                "aligned word vectors, resources.source_vectors ...), or the path of a table `langswap "
                "align-parallel` saved."})
    max_words: int = field(default=50_000, metadata={
        "help": "With probabilities=vectors: the most frequent words of each language whose vectors make the "
                "token vectors (RAMEN: 50,000)."})
    first_candidates: int = field(default=64, metadata={
        "help": "With probabilities=vectors: source tokens first searched for each row's sparsemax support; it "
                "widens fourfold where the support fills it, so the result does not depend on it (a speed "
                "setting)."})

    def __post_init__(self):
        if self.max_words < 1:
            raise ConfigError(f"method.max_words is {self.max_words}; give 1 or more words.")
        if self.first_candidates < 2:
            raise ConfigError(f"method.first_candidates is {self.first_candidates}; it must be at least 2.")
        if self.probabilities not in WAYS and not Path(self.probabilities).exists():
            raise ConfigError(f"method.probabilities is {self.probabilities!r}: give parallel, vectors, or the "
                              "folder of a table `langswap align-parallel` saved (no such path).")

    def needed_kinds(self) -> tuple[str, ...]:
        return {"parallel": ("translations",), "vectors": ("vectors",)}.get(self.probabilities, ())

    def unused_kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind in ("translations", "vectors") if kind not in self.needed_kinds())


def table_rows(table, inputs: TransferInputs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(target rows, their lengths, source ids, probabilities) of a table's non-empty, non-special rows."""
    if table.target_size != len(inputs.target) or table.source_size != len(inputs.source):
        raise VocabularyError(
            f"the translation table has {table.target_size:,} target and {table.source_size:,} source rows, the "
            f"vocabularies {len(inputs.target):,} and {len(inputs.source):,}: it was built for other tokenizers; "
            "build it again with `langswap align-parallel`.")
    lengths = np.diff(table.indptr)
    special = np.array([token.special for token in inputs.target.tokens], dtype=bool)
    rows = np.flatnonzero((lengths > 0) & ~special)
    keep = np.repeat((lengths > 0) & ~special, lengths)
    return rows, lengths[rows], table.indices[keep], table.probs[keep]


def vector_probabilities(inputs: TransferInputs, config: RamenConfig, progress: bool = False):
    """(target rows, lengths, source ids, probabilities): sparsemax over the cosines of frequency-weighted token
    vectors (RAMEN's equation 4) to every source token with a vector."""
    vectors = inputs.resource("vectors")
    source_vectors = frequency_token_vectors(inputs.source, vectors.source, config.max_words)
    target_vectors = frequency_token_vectors(inputs.target, vectors.target, config.max_words)
    anchors = np.flatnonzero(np.abs(source_vectors).sum(axis=1) > 0)
    rows = np.flatnonzero(np.abs(target_vectors).sum(axis=1) > 0)
    if len(anchors) == 0 or len(rows) == 0:
        return (np.zeros(0, np.int64),) * 3 + (np.zeros(0, np.float32),)
    bar = progress_bar(progress, len(rows), "ramen sparsemax", "token")
    lengths, indices, weights = sparse_anchor_weights(target_vectors[rows], source_vectors[anchors],
                                                      config.first_candidates,
                                                      progress=bar.update if bar is not None else None,
                                                      device=inputs.device)
    if bar is not None:
        bar.close()
    return rows, lengths, anchors[indices], weights


@register_method("ramen", RamenConfig, optional=("translations", "vectors"))
def ramen(inputs: TransferInputs, config: RamenConfig, progress: bool = False) -> TokenMapping:
    """Each target row the probability-weighted mix of the source rows it translates to (RAMEN)."""
    mapping = TokenMapping.empty(len(inputs.target))
    if config.probabilities == "vectors":
        rows, lengths, sources, probs = vector_probabilities(inputs, config, progress)
    else:
        if config.probabilities == "parallel":
            table = inputs.resource("translations")
        else:
            table = TranslationTable.load_for(config.probabilities, inputs.source.tokenizer, inputs.target.tokenizer,
                                              f"method.probabilities '{config.probabilities}'")
        rows, lengths, sources, probs = table_rows(table, inputs)
        share = table.report.covered_occurrences
        if share is not None and share < LOW_COVERAGE:
            logger.warning(
                "ramen: only %.0f%% of the target side's tokens in the parallel text have translation probabilities "
                "(%s tokens of the vocabulary); the other tokens get the fallback (%s). More parallel text, or a "
                "lower resources.parallel_min_count, covers more.", 100 * share, f"{len(rows):,}", config.fallback)
    if len(rows):
        mapping.set_ragged_rows(rows, Kind.TRANSLATED, lengths, sources, probs)
    logger.info("ramen: %s of %s target tokens have translation probabilities (%s)", f"{len(rows):,}",
                f"{len(inputs.target):,}", config.probabilities)
    return mapping
