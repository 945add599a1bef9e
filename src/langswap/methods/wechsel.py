"""`wechsel`: WECHSEL (Minixhofer, Paischer and Rekabsaz, NAACL 2022).

Each token of both vocabularies gets a vector in a shared, aligned word-vector space, either from fastText's
character n-grams (`subword_source: ngrams`; the known word's vector when the token text is a known word) or, as
WECHSEL-TFR (`subword_source: frequency`), the frequency-weighted mean of the vectors of the words whose
tokenisation (with and without a leading space) contains the token. Each target token is then the
softmax(cosine / temperature) mix of its `neighbors` most similar source tokens.

Differences from the `wechsel` package, on purpose: source tokens without a vector (special tokens, partial UTF-8)
are never neighbours; by default a word-start target token is mixed from word-start source tokens and a
continuation from continuations (`Ġto` and `to` have the same text, hence the same vector, but not the same role);
the mixing runs in float32 in row blocks (no float64 copy, no dense V_t x V_s matrix); tokens without a vector get the
shared fallback (random by default, as in the paper) from a seeded generator.
Not handled: word2vec models without n-grams in `ngrams` mode (their unknown tokens get no vector and fall back).

Memory: beside the source and new matrices, the token vectors of both vocabularies (float32 V x D: 147 MiB each at
V = 128,256 and D = 300), up to five working copies of one vocabulary's vectors in the similarity step (a word-start
group's rows, unit rows, the keys transposed), one block of similarities (`kernels.DEFAULT_BLOCK_BYTES`, 256 MiB;
768 MiB while near-ties are re-scored in float64) and the top-k lists (V_t x k int64 + float32: 15 MiB at k = 10):
about 1.3 GiB at Llama-3 size (V_t = V_s = 128,256), never a V_t x V_s matrix. `subword_source: frequency` builds each
vocabulary's vectors from float64 sums and means (V x D: 294 MiB each at 128k), the `max_words` word vectors in
float64 (458 MiB at 200,000 x 300) and chunks of gathered word vectors (2 x 256 MiB): about 1.5 GiB at 128k before
the similarity step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method
from langswap.progress import bar as progress_bar
from langswap.kernels import softmax_weights, topk_cosine
from langswap.methods.overlap import copy_exact_matches
from langswap.tokens import Vocabulary


@dataclass(frozen=True, kw_only=True)
class WechselConfig(MethodConfig):
    """WECHSEL (Minixhofer et al., NAACL 2022)."""

    neighbors: int = field(default=10, metadata={"help": "Source tokens mixed into each target token."})
    temperature: float = field(default=0.1, metadata={"help": "Softmax temperature over cosine similarities."})
    subword_source: Literal["ngrams", "frequency"] = field(
        default="ngrams", metadata={"help": "Token vectors from fastText character n-grams (ngrams), or the "
                                            "frequency-weighted mean of the words containing the token "
                                            "(frequency, WECHSEL-TFR)."})
    max_words: int = field(default=200_000, metadata={"help": "Most frequent words used by subword_source=frequency."})
    exact_matches: bool = field(default=True, metadata={"help": "Copy the rows of exactly matching tokens first; "
                                                               "mix only the rest (false: mix every token, as the "
                                                               "paper)."})
    match_word_start: bool = field(default=True, metadata={"help": "Mix word-start target tokens from word-start "
                                                                   "source tokens and continuations from "
                                                                   "continuations (false: any, as the paper)."})

    def __post_init__(self):
        from langswap.errors import ConfigError

        if self.neighbors < 1:
            raise ConfigError(f"method.neighbors is {self.neighbors}; it must be at least 1.")
        if not self.temperature > 0:
            raise ConfigError(f"method.temperature is {self.temperature}; it must be greater than 0.")


def ngram_token_vectors(vocabulary: Vocabulary, vectors) -> np.ndarray:
    """(V, D) vector of each token's text (fastText n-grams for unknown texts); zero rows for tokens without text."""
    texts = [vocabulary.word_text(i) or "" for i in range(len(vocabulary))]
    matrix = vectors.vectors(texts)
    matrix[[i for i, text in enumerate(texts) if not text]] = 0.0
    return matrix


PAIR_CHUNK_VALUES = 2 ** 25  # float64 values gathered at once by frequency_token_vectors (256 MiB)


def frequency_token_vectors(vocabulary: Vocabulary, vectors, max_words: int) -> np.ndarray:
    """(V, D) frequency-weighted mean vector of the words whose tokenisation contains each token (WECHSEL-TFR)."""
    words = vectors.words[:max_words]
    freqs = torch.as_tensor(vectors.freqs[:max_words], dtype=torch.float64)
    word_vectors = torch.from_numpy(vectors.word_matrix(len(words))).to(torch.float64)
    tokenizer = vocabulary.tokenizer
    token_ids, word_ids = [], []
    for variant in (words, [" " + word for word in words]):
        encoded = tokenizer(variant, add_special_tokens=False)["input_ids"]
        for word_index, ids in enumerate(encoded):
            for token_id in set(ids):
                token_ids.append(token_id)
                word_ids.append(word_index)
    # a word counts once per token even when both spellings contain it
    pairs = np.unique(np.stack([np.asarray(token_ids, dtype=np.int64), np.asarray(word_ids, dtype=np.int64)]), axis=1)
    token_index, word_index = torch.from_numpy(pairs[0]), torch.from_numpy(pairs[1])
    weights = freqs[word_index]
    sums = torch.zeros((len(vocabulary), word_vectors.shape[1]), dtype=torch.float64)
    # in chunks of pairs: gathering all (pairs, D) rows at once took several GB for large word lists
    chunk = max(1, PAIR_CHUNK_VALUES // word_vectors.shape[1])
    for start in range(0, len(token_index), chunk):
        rows = word_index[start:start + chunk]
        sums.index_add_(0, token_index[start:start + chunk], word_vectors[rows] * weights[start:start + chunk, None])
    totals = torch.zeros(len(vocabulary), dtype=torch.float64).index_add_(0, token_index, weights)
    means = sums / totals.clamp_min(1e-300)[:, None]
    special = [token.id for token in vocabulary.tokens if token.special]
    means[special] = 0.0
    return means.to(torch.float32).numpy()


def token_vectors(vocabulary: Vocabulary, vectors, config: WechselConfig) -> np.ndarray:
    if config.subword_source == "frequency":
        return frequency_token_vectors(vocabulary, vectors, config.max_words)
    return ngram_token_vectors(vocabulary, vectors)


def nearest_sources(target_vectors: np.ndarray, source_vectors: np.ndarray, neighbors: int, temperature: float,
                    progress=None, target_groups: np.ndarray | None = None, source_groups: np.ndarray | None = None,
                    device=None) -> tuple[np.ndarray, torch.Tensor, torch.Tensor]:
    """The similarity-and-mixing step: for every target row with a vector, its top source rows and weights.

    target_vectors: (V_t, D), source_vectors: (V_s, D). Returns (target rows placed, source ids (n, k), weights
    (n, k)). Source rows that are zero never count as neighbours. With group labels (V_t,) and (V_s,), a target
    row only looks among source rows of its own group (all source rows where its group has none). `device`: where
    the search runs (`kernels.topk_cosine`)."""
    has_source = np.abs(source_vectors).sum(axis=1) > 0
    has_target = np.abs(target_vectors).sum(axis=1) > 0
    if target_groups is None or source_groups is None:
        target_groups, source_groups = np.zeros(len(target_vectors), int), np.zeros(len(source_vectors), int)
    placed, all_sources, all_weights = [], [], []
    for group in np.unique(target_groups[has_target]):
        target_rows = np.flatnonzero(has_target & (target_groups == group))
        source_rows = np.flatnonzero(has_source & (source_groups == group))
        if len(source_rows) == 0:
            source_rows = np.flatnonzero(has_source)
        if len(source_rows) == 0:
            continue
        similarities, indices = topk_cosine(target_vectors[target_rows], source_vectors[source_rows], neighbors,
                                            progress=progress, device=device)
        placed.append(target_rows)
        all_sources.append(torch.from_numpy(source_rows)[indices])
        all_weights.append(softmax_weights(similarities, temperature))
    if not placed:
        return np.zeros(0, dtype=np.int64), torch.empty((0, 0), dtype=torch.int64), torch.empty((0, 0))
    width = max(s.shape[1] for s in all_sources)
    all_sources = [torch.nn.functional.pad(s, (0, width - s.shape[1]), value=-1) for s in all_sources]
    all_weights = [torch.nn.functional.pad(w, (0, width - w.shape[1])) for w in all_weights]
    return np.concatenate(placed), torch.cat(all_sources), torch.cat(all_weights)


@register_method("wechsel", WechselConfig, requires=("vectors",))
def wechsel(inputs: TransferInputs, config: WechselConfig, progress: bool = False) -> TokenMapping:
    """Mix the source rows of each target token's nearest source tokens in aligned word-vector space (WECHSEL)."""
    mapping = TokenMapping.empty(len(inputs.target))
    if config.exact_matches:
        copy_exact_matches(mapping, inputs)
    vectors = inputs.resource("vectors")
    source_vectors = token_vectors(inputs.source, vectors.source, config)
    target_vectors = token_vectors(inputs.target, vectors.target, config)
    target_vectors[mapping.kinds != Kind.UNPLACED] = 0.0  # rows already copied need no neighbours
    bar = progress_bar(progress, int((np.abs(target_vectors).sum(axis=1) > 0).sum()), "wechsel neighbours", "token")
    groups = {}
    if config.match_word_start:
        groups = {"target_groups": np.array([t.word_start for t in inputs.target.tokens], dtype=np.int64),
                  "source_groups": np.array([t.word_start for t in inputs.source.tokens], dtype=np.int64)}
    rows, sources, weights = nearest_sources(target_vectors, source_vectors, config.neighbors, config.temperature,
                                             progress=bar.update if bar is not None else None, **groups,
                                             device=inputs.device)
    if bar is not None:
        bar.close()
    if len(rows):
        mapping.set_rows(rows, Kind.MIXED, sources.numpy(), weights.numpy())
    return mapping
