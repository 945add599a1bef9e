"""`tiktotok`: Tik-to-Tok (Remy, Delobelle, Berendt, Demuynck and Demeester, 2023), from a bilingual dictionary.

Every target token is matched to a few source tokens in three steps, on the package's canonical tokens, and its row
is a weighted mix of theirs:

1. **Non-alphabetic tokens** (punctuation, digits, symbols: no letter in the text): the source token with the same
   canonical form (`CanonicalToken.key`, word start included), copied; none: the fallback.
2. **Whole dictionary words**: a word-start target token whose text is a target-side dictionary word (exactly, else
   lower-cased, else title-cased) takes the word's translations, most frequent first: ordered by how many dictionary
   lines give that translation for the word (case variants of the word merged), ties in dictionary order. A
   translation that is one source token gives that token; a longer one gives the first token of its source
   tokenisation (as a word). Repeated source tokens count once, at their first place.
3. **Everything else** with text: its vector in the bilingual fastText model of the dictionary
   (`resources.dictionary_fasttext`), spelt with the target tags that fit a word start or a continuation
   (`LanguageTags.token`), against every source token with letters spelt with the source tags; the `candidates`
   (3) most similar by cosine, in row blocks (`kernels.topk_cosine`; never a dense V_t x V_s matrix).

Weights over a token's candidates, best first: `best_weight` (30%) to the first, `second_weight` (10%) to the
second, and the rest (60%) spread evenly over all of them, the first two included; a single candidate takes all.

Variants (`variant`, the paper's ablation): `shared` copies every token whose canonical form the source vocabulary
has (alphabetic or not) and leaves the rest to the fallback; `dictionary` adds step 2 to step 1; `full` (default) is
all three steps.

Taken from the method's description (the paper's text and code could not be read to check against): the three
steps, top-3 fastText candidates, the 30/10/60 weights, the symmetrised dictionary corpus with language tags. Its
successor's code (trans-tokenizers) keeps a comment describing a 40/20/40 split of the same shape, so the split is an
option. Decided here: how whole words are recognised (word-start token, exact then case
variants), the order of translations, what a multi-token translation gives, the tags of a token, that `shared` copies
alphabetic matches too (it is the resource-free baseline of the ablation), and that copied rows are `copied` and
dictionary rows `translated` in provenance.tsv (fastText rows are `mixed`).

Memory: beside the source and new matrices, the dictionary steps' Python lists (O(V_t x translations)) and, in step
3, the bilingual fastText vectors of the N open target tokens and of every source token (float32 (N + V_s) x D: 63 MiB
at 128k with D = 64), their working copies in the similarity step (under 100 MiB), one block of similarities
(256 MiB; 768 MiB while near-ties are re-scored in float64) and the top-k lists (N x 3 int64 + float32, and as Python
lists: about 25 MiB at N = 128,256): about 0.5 GiB at Llama-3 size (V_t = V_s = 128,256), never V_t x V_s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from langswap.errors import ConfigError
from langswap.kernels import topk_cosine
from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method
from langswap.methods.overlap import copy_exact_matches
from langswap.progress import bar as progress_bar
from langswap.resources.dictionary_fasttext import SOURCE_TAGS, TARGET_TAGS
from langswap.resources.dictionary import check_direction
from langswap.tokens import Vocabulary

VARIANTS = ("shared", "dictionary", "full")


@dataclass(frozen=True, kw_only=True)
class TikToTokConfig(MethodConfig):
    """Tik-to-Tok (Remy et al., 2023)."""

    variant: Literal["shared", "dictionary", "full"] = field(
        default="full", metadata={"help": "shared: copy tokens both vocabularies have; dictionary: also whole "
                                          "dictionary words; full: also every other token by bilingual fastText.",
                                  "choices": VARIANTS})
    candidates: int = field(default=3, metadata={"help": "Source tokens taken per target token from fastText."})
    best_weight: float = field(default=0.3, metadata={"help": "Weight of the best candidate, besides its share "
                                                              "of the rest."})
    second_weight: float = field(default=0.1, metadata={"help": "Weight of the second candidate, besides its "
                                                                "share of the rest."})

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ConfigError(f"method.variant is {self.variant!r}; choose one of: {', '.join(VARIANTS)}.")
        if self.candidates < 1:
            raise ConfigError(f"method.candidates is {self.candidates}; it must be at least 1.")
        if not (0 <= self.best_weight and 0 <= self.second_weight and self.best_weight + self.second_weight <= 1):
            raise ConfigError(f"method.best_weight ({self.best_weight}) and method.second_weight "
                              f"({self.second_weight}) must be non-negative and sum to at most 1.")


def candidate_weights(count: int, best: float = 0.3, second: float = 0.1) -> np.ndarray:
    """Weights of `count` candidates, best first: `best` and `second` to the first two, the rest of the mass spread
    evenly over all; one candidate takes everything (the weights always sum to 1)."""
    if count == 1:
        return np.ones(1)
    weights = np.full(count, (1.0 - best - second) / count)
    weights[0] += best
    weights[1] += second
    return weights


def is_alphabetic(text: str) -> bool:
    return any(character.isalpha() for character in text)


def whole_words(vocabulary: Vocabulary) -> set[str]:
    """The texts of a vocabulary's word-start tokens: the words it holds whole."""
    return {text for token in vocabulary.tokens if token.word_start and (text := vocabulary.word_text(token.id))}


def _whole_word_candidates(inputs: TransferInputs, dictionary, rows) -> tuple[list[int], list[list[int]]]:
    """For each target row that is a dictionary word: its source candidates, most frequent translation first."""
    first_token: dict[str, int | None] = {}
    placed, candidates = [], []
    for row in rows:
        token = inputs.target[int(row)]
        text = inputs.target.word_text(int(row))
        if not token.word_start or text is None:
            continue
        ids: list[int] = []
        for source in dictionary.translations_of(text):
            if source not in first_token:
                encoded = [i for i in inputs.source.encode_surface(source, True) if not inputs.source[i].special]
                first_token[source] = encoded[0] if encoded else None
            source_id = first_token[source]
            if source_id is not None and source_id not in ids:
                ids.append(source_id)
        if ids:
            placed.append(int(row))
            candidates.append(ids)
    return placed, candidates


def tagged_token_vectors(vocabulary: Vocabulary, vectors, tags, rows=None) -> np.ndarray:
    """(len(rows), D) bilingual-fastText vector of each token (all when `rows` is None), spelt with `tags`; zero rows
    for tokens without text."""
    rows = range(len(vocabulary)) if rows is None else rows
    texts = []
    for row in rows:
        text = vocabulary.word_text(int(row))
        texts.append(tags.token(text, vocabulary[int(row)].word_start) if text else "")
    matrix = vectors.vectors(texts)
    matrix[[index for index, text in enumerate(texts) if not text]] = 0.0
    return matrix


def _set_weighted(mapping: TokenMapping, rows: list[int], candidates: list[list[int]], kind: Kind,
                  config: TikToTokConfig) -> None:
    if not rows:
        return
    lengths = np.array([len(ids) for ids in candidates], dtype=np.int64)
    sources = np.fromiter((i for ids in candidates for i in ids), dtype=np.int64, count=int(lengths.sum()))
    weights = np.concatenate([candidate_weights(len(ids), config.best_weight, config.second_weight)
                              for ids in candidates])
    mapping.set_ragged_rows(np.asarray(rows, dtype=np.int64), kind, lengths, sources, weights)


@register_method("tiktotok", TikToTokConfig, requires=("bilingual_vectors",))
def tiktotok(inputs: TransferInputs, config: TikToTokConfig, progress: bool = False) -> TokenMapping:
    """Non-alphabetic tokens copied, dictionary words from their translations, the rest from bilingual fastText."""
    mapping = TokenMapping.empty(len(inputs.target))
    if config.variant == "shared":
        copy_exact_matches(mapping, inputs)
        return mapping
    # step 1: non-alphabetic tokens, by canonical form
    copy_exact_matches(mapping, inputs, only=lambda token: token.text is not None and not is_alphabetic(token.text))
    alphabetic = np.array([not token.special and token.text is not None and is_alphabetic(token.text)
                           for token in inputs.target.tokens])
    # step 2: whole dictionary words
    resource = inputs.resource("bilingual_vectors")
    check_direction(resource.dictionary, whole_words(inputs.source), whole_words(inputs.target),
                    "the source tokenizer's vocabulary", "the target tokenizer's vocabulary")
    open_rows = np.flatnonzero(alphabetic & (mapping.kinds == Kind.UNPLACED))
    placed, candidates = _whole_word_candidates(inputs, resource.dictionary, open_rows)
    _set_weighted(mapping, placed, candidates, Kind.TRANSLATED, config)
    if config.variant == "dictionary":
        return mapping
    # step 3: the rest, by their nearest source tokens in the bilingual space
    open_rows = np.flatnonzero(alphabetic & (mapping.kinds == Kind.UNPLACED))
    if len(open_rows) == 0:
        return mapping
    target_vectors = tagged_token_vectors(inputs.target, resource.vectors, TARGET_TAGS, open_rows)
    source_vectors = tagged_token_vectors(inputs.source, resource.vectors, SOURCE_TAGS)
    # candidates are source tokens with letters, as the target tokens are
    source_alphabetic = np.array([bool(text) and is_alphabetic(text) for text in
                                  (inputs.source.word_text(i) for i in range(len(inputs.source)))])
    usable = np.flatnonzero((np.abs(source_vectors).sum(axis=1) > 0) & source_alphabetic)
    with_vector = np.abs(target_vectors).sum(axis=1) > 0
    if len(usable) == 0 or not with_vector.any():
        return mapping
    bar = progress_bar(progress, int(with_vector.sum()), "tiktotok neighbours", "token")
    _, indices = topk_cosine(target_vectors[with_vector], source_vectors[usable], config.candidates,
                             progress=bar.update if bar is not None else None, device=inputs.device)
    if bar is not None:
        bar.close()
    chosen = usable[indices.numpy()]
    _set_weighted(mapping, open_rows[with_vector].tolist(), chosen.tolist(), Kind.MIXED, config)
    return mapping
