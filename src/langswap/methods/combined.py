"""`combined`: every piece of evidence a target token has, each weighted by how reliable it is.

1. **Exact match**: a token whose canonical form the source vocabulary has keeps that row (`copied`), as in
   `overlap`, FVT, FOCUS, CLP and tokensurgeon, unless it is a **false friend**: a word-start dictionary word none
   of whose translations is itself (German `die`, `also`, `Gift`), which is treated as every other token below (its
   spelling is then the copy, beside its translations).
2. Every other token with text gets one distribution over source rows from each kind of evidence it has:
   - **spelling** (always): its text split by the source tokenizer, the mean of the pieces (FVT; `spelling:
     length` weights pieces by their bytes);
   - **translations** (when `resources.dictionary` is given): a word-start token that is a dictionary word takes its
     translations, most frequent first, with Tik-to-Tok's 30/10/60 weights (`tiktotok`'s dictionary step);
   - **aligned neighbours** (when word vectors are given, `resources.joint_vectors` or two vector files with a
     dictionary or an alignment): WECHSEL's softmax(cosine / 0.1) over the 10 nearest source tokens of the same
     word-start role;
   - **a helper's neighbours** (when `resources.helper_model` is given: a model that already uses the target
     tokenizer, as CLP's): softmax(cosine / 0.1) over the 10 shared tokens nearest in the helper's embedding space,
     as their source rows;
   - **aligned parallel text** (with `parallel_weight` above 0, when `resources.parallel_text` or
     `resources.translation_table` is given): the token's translation probabilities p(source token | target token)
     from word-aligned parallel text (RAMEN's, `langswap.resources.parallel`).
   Each evidence has a weight: spelling `spelling_weight` (1), translations `dictionary_weight` (1), parallel text
   `parallel_weight` (0: off unless asked for; docs/results.md has the Swahili measurement), neighbours
   `vectors_weight`, by default the aligned space's held-out precision@1 over words whose translation is spelled
   otherwise (the share of such unseen dictionary words whose nearest neighbour is their translation; a few
   hundredths for the German and Swahili spaces of docs/results.md), so a poor alignment counts little; the helper
   `helper_weight`, by default its measured agreement with the source model (`helper_agreement`: the share of shared
   tokens whose nearest shared token in the helper's space is among their 10 nearest in the source model's; chance is
   about 10 / shared tokens). `mode: mix` mixes a token's distributions by these weights, normalised over the
   evidence it has; `mode: choose` takes its heaviest evidence alone (ties: translations, then parallel text, then a
   helper's neighbours, then aligned neighbours, then spelling). `mode: auto` (default) offers both, over every
   subset of the evidence beyond spelling (`EvidenceCandidates`: each evidence weighted as above or left out), as
   candidates: a transfer with target-language text keeps the one whose model (calibrated, where the transfer
   calibrates) has the lower loss on its held-out lines (`held_out_lines`), and without such text (or for a masked
   LM) keeps `mix` of all the evidence. Where a token has one kind of evidence the two modes agree, so a transfer
   without resources has one candidate.
3. Special tokens by role, and what has no text (partial UTF-8 bytes) by the shared fallback (`subword`: the mean
   row). No row is random unless the fallback is set to `random`.

Rows get the kind of their strongest evidence: `translated` where a translation (dictionary or parallel text) is in
the row, `mixed` where neighbours (aligned or the helper's) are, `subword` where spelling alone made them.

Decided here, not read from a paper: the weights (spelling and a human dictionary trusted alike; vectors as much as
their measured precision; a helper as much as its geometry agrees with the source model's where both are known), the
false-friend rule, the two modes and choosing between them on held-out text (with a large dictionary, translations
alone predict better; with a small one, mixing does). They are the same for every language; docs/results.md has
the figures.

Memory: beside the source and new matrices, each evidence's rows (small arrays per row, 8 to 16 bytes per source:
O(V_t x (pieces + translations + 2 x neighbors)), tens of MiB at 128k), and the steps the evidence needs, one after
another, so the peak is the largest: the aligned neighbours as `wechsel` finds them (about 1.4 GiB at V_t = V_s =
128,256 with D = 300); the helper's neighbours, its rows of the N open and M shared tokens and their copies in the
similarity step (float32 (2 N + 3 M) x D_h, N + M <= V_t: about 3 GiB at 128k with D_h = 2,048) and one block of
similarities (256 MiB); and, unless `helper_weight` is set, the helper's agreement (`helper_agreement`), whose
similarity step holds the shared tokens' helper rows and, three times, their source rows in float32: M x (D_h + 3 d)
x 4 bytes (6.8 GiB at M = 128,256, d = 4,096, D_h = 2,048). The mapping holds at most (pieces + translations +
2 x neighbors) entries per row; `mode: auto` makes each candidate's mapping when it is judged, and the transfer holds
at most two candidates' new matrices at once.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from langswap.errors import ConfigError
from langswap.kernels import topk_cosine
from langswap.methods.base import Kind, MethodConfig, TokenMapping, TransferInputs, register_method, subword_sources
from langswap.methods.fvt import WEIGHTINGS, piece_weights
from langswap.methods.overlap import copied_sources, copy_exact_matches
from langswap.methods.ramen import table_rows
from langswap.methods.tiktotok import _whole_word_candidates, candidate_weights, whole_words
from langswap.methods.wechsel import WechselConfig, nearest_sources, token_vectors
from langswap.progress import bar as progress_bar
from langswap.reports import AlignmentReport
from langswap.resources.dictionary import case_variants, check_direction

logger = logging.getLogger(__name__)

HELPER_SAMPLE = 2000  # shared tokens the helper's agreement with the source model is measured on


@dataclass(frozen=True, kw_only=True)
class CombinedConfig(MethodConfig):
    """Copies, spelling, dictionary translations and aligned neighbours, weighted by reliability."""

    spelling: Literal["mean", "length"] = field(
        default="mean", metadata={"help": "Weights of the source pieces of a token's spelling: mean (FVT) or length "
                                          "(by bytes).", "choices": WEIGHTINGS})
    spelling_weight: float = field(default=1.0, metadata={"help": "Weight of the spelling evidence."})
    dictionary_weight: float = field(default=1.0, metadata={
        "help": "Weight of dictionary translations, where resources.dictionary is given."})
    vectors_weight: float | None = field(default=None, metadata={
        "help": "Weight of the aligned neighbours, where word vectors are given; default: the alignment's held-out "
                "precision@1."})
    parallel_weight: float = field(default=0.0, metadata={
        "help": "Weight of translation probabilities from aligned parallel text (resources.parallel_text or "
                "resources.translation_table); 0, the default, leaves them out (docs/results.md: in Swahili at "
                "step 0 they gained 0.2% on test text and lost 1% on held-out text)."})
    helper_weight: float | None = field(default=None, metadata={
        "help": "Weight of the neighbours in a helper model's space, where resources.helper_model is given; "
                "default: the helper's measured agreement with the source model (see the module docstring)."})
    mode: Literal["auto", "mix", "choose"] = field(default="auto", metadata={
        "help": "mix: each row mixes the distributions of its evidence by their weights; choose: each row takes its "
                "heaviest evidence alone (ties: translations, then parallel text, then a helper's neighbours, then "
                "aligned neighbours, then spelling); auto: both, each also without every subset of the evidence beyond "
                "spelling, and a transfer keeps the one that predicts held-out target text best (mix of all without "
                "such text).",
        "choices": ("auto", "mix", "choose")})
    false_friends: bool = field(default=True, metadata={
        "help": "A token both vocabularies share that is a dictionary word none of whose translations is itself "
                "(German `die`, `also`, `Gift`) gets its evidence like any other token instead of the copy (whose "
                "row is still its spelling)."})
    neighbors: int = field(default=10, metadata={"help": "Aligned source neighbours mixed into a token."})
    temperature: float = field(default=0.1, metadata={"help": "Softmax temperature over their cosines."})

    def offers_candidates(self) -> bool:
        return self.mode == "auto"

    def __post_init__(self):
        weights = {"spelling_weight": self.spelling_weight, "dictionary_weight": self.dictionary_weight,
                   "parallel_weight": self.parallel_weight,
                   "vectors_weight": 0.0 if self.vectors_weight is None else self.vectors_weight,
                   "helper_weight": 0.0 if self.helper_weight is None else self.helper_weight}
        negative = [f"method.{name} = {value}" for name, value in weights.items() if not value >= 0]
        if negative:
            raise ConfigError(f"{', '.join(negative)}: evidence weights must be non-negative numbers.")
        if self.neighbors < 1 or not self.temperature > 0:
            raise ConfigError(f"method.neighbors ({self.neighbors}) must be at least 1 and method.temperature "
                              f"({self.temperature}) positive.")


    def unused_kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind, weight in (("dictionary", self.dictionary_weight), ("vectors", self.vectors_weight),
                                               ("helper_model", self.helper_weight),
                                               ("translations", self.parallel_weight)) if weight == 0)


@dataclass
class Evidence:
    """One kind of evidence for some target rows: for rows[i], sources[i] with weights[i] summing to 1."""

    name: str
    weight: float
    rows: list[int]
    sources: list[np.ndarray]
    weights: list[np.ndarray]


def vectors_reliability(vectors, config: CombinedConfig) -> float:
    """`vectors_weight`, or else the aligned space's held-out precision@1 over the words whose translations are
    spelled otherwise (`precision_at_1_distinct`; the neighbours place tokens the vocabularies do not share), or
    over all held-out words, with a warning, where a report predates that measure."""
    if config.vectors_weight is not None:
        return config.vectors_weight
    report = vectors.report or AlignmentReport()
    if report.distinct_queries is not None:  # measured, perhaps as None (no such word held out)
        precision = report.precision_at_1_distinct
        if precision is None:
            logger.warning("combined: no held-out dictionary word of the aligned vectors has a translation spelled "
                           "otherwise, so their precision@1 on such words is unmeasured; their neighbours get no "
                           "weight. Set method.vectors_weight to use them.")
            return 0.0
        return float(precision)
    precision = report.precision_at_1
    if precision is None:
        logger.warning("combined: the aligned vectors come without a held-out precision@1 (a saved alignment without "
                       "its report.json, or too few dictionary words to hold some out); their neighbours get no "
                       "weight. Set method.vectors_weight to use them.")
        return 0.0
    logger.warning("combined: the aligned vectors' report predates the precision@1 over words spelled otherwise; "
                   "their neighbours are weighted by the precision@1 over all held-out words (%s), which counts "
                   "same-spelled pairs. Align or train them again, or set method.vectors_weight.", precision)
    return float(precision)


def spelling_evidence(inputs: TransferInputs, rows: np.ndarray, config: CombinedConfig) -> Evidence:
    placed, pieces = subword_sources(inputs, rows)
    flat = piece_weights(inputs, pieces, config.spelling) if placed else np.zeros(0)
    splits = np.cumsum([len(ids) for ids in pieces])[:-1]
    return Evidence("spelling", config.spelling_weight, placed, [np.asarray(ids, dtype=np.int64) for ids in pieces],
                    np.split(flat, splits) if placed else [])


def translation_evidence(inputs: TransferInputs, rows: np.ndarray, config: CombinedConfig) -> Evidence:
    dictionary = inputs.resource("dictionary")
    check_direction(dictionary, whole_words(inputs.source), whole_words(inputs.target),
                    "the source tokenizer's vocabulary", "the target tokenizer's vocabulary")
    placed, candidates = _whole_word_candidates(inputs, dictionary, rows)
    return Evidence("translations", config.dictionary_weight, placed,
                    [np.asarray(ids, dtype=np.int64) for ids in candidates],
                    [candidate_weights(len(ids)) for ids in candidates])


def parallel_evidence(inputs: TransferInputs, rows: np.ndarray, config: CombinedConfig) -> Evidence:
    """The rows' translation probabilities from aligned parallel text (`ramen`'s table rows)."""
    placed, lengths, sources, probs = table_rows(inputs.resource("translations"), inputs)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    chosen = np.flatnonzero(np.isin(placed, rows))
    return Evidence("parallel", config.parallel_weight, placed[chosen].tolist(),
                    [sources[starts[i]:starts[i + 1]] for i in chosen],
                    [probs[starts[i]:starts[i + 1]].astype(np.float64) for i in chosen])


def neighbour_evidence(inputs: TransferInputs, rows: np.ndarray, config: CombinedConfig, weight: float,
                       progress: bool) -> Evidence:
    vectors = inputs.resource("vectors")
    options = WechselConfig(neighbors=config.neighbors, temperature=config.temperature)
    source_vectors = token_vectors(inputs.source, vectors.source, options)
    target_vectors = np.zeros((len(inputs.target), source_vectors.shape[1]), dtype=np.float32)
    target_vectors[rows] = token_vectors(inputs.target, vectors.target, options)[rows]
    groups = {"target_groups": np.array([t.word_start for t in inputs.target.tokens], dtype=np.int64),
              "source_groups": np.array([t.word_start for t in inputs.source.tokens], dtype=np.int64)}
    bar = progress_bar(progress, int((np.abs(target_vectors).sum(axis=1) > 0).sum()), "combined neighbours", "token")
    placed, sources, weights = nearest_sources(target_vectors, source_vectors, config.neighbors, config.temperature,
                                               progress=bar.update if bar is not None else None, **groups,
                                               device=inputs.device)
    if bar is not None:
        bar.close()
    sources, weights = sources.numpy(), weights.numpy()
    keep = [sources[i] >= 0 for i in range(len(placed))]
    return Evidence("neighbours", weight, placed.tolist(), [sources[i][k] for i, k in enumerate(keep)],
                    [weights[i][k] for i, k in enumerate(keep)])


def helper_agreement(helper: torch.Tensor, overlap_targets: np.ndarray, overlap_sources: np.ndarray,
                     source_embeddings: torch.Tensor, neighbors: int, sample: int = HELPER_SAMPLE,
                     seed: int = 0) -> float:
    """How far a helper's geometry predicts the source model's, measured on the tokens both know: the share of (up
    to `sample`) shared tokens whose nearest other shared token in the helper's space is among their `neighbors`
    nearest in the source model's space (chance: about neighbors / shared tokens; a helper that is the source model
    under another tokenizer: 1)."""
    if len(overlap_targets) <= neighbors + 1:
        return 0.0
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(overlap_targets), size=min(sample, len(overlap_targets)), replace=False))
    helper_keys = helper[torch.from_numpy(overlap_targets)]
    source_keys = source_embeddings[torch.from_numpy(overlap_sources)]
    nearest = []
    for keys, k in ((helper_keys, 2), (source_keys, neighbors + 1)):
        _, found = topk_cosine(keys[torch.from_numpy(picked)], keys, k)
        # drop each query itself (the first where the query row is its own best match)
        nearest.append([[int(j) for j in row if j != i][:k - 1] for i, row in zip(picked.tolist(), found.tolist())])
    return float(np.mean([h[0] in set(s) for h, s in zip(*nearest)]))


def helper_evidence(inputs: TransferInputs, mapping: TokenMapping, rows: np.ndarray, config: CombinedConfig,
                    progress: bool) -> Evidence:
    """Each row's nearest shared tokens in the helper's space (softmax of cosine / temperature over the
    `neighbors` nearest), as their source rows; weighted by `helper_weight` or `helper_agreement`."""
    helper = inputs.resource("helper_model").embeddings
    overlap = mapping.rows_of(Kind.COPIED)
    sources_of = copied_sources(mapping, overlap)
    weight = config.helper_weight
    if weight is None:
        weight = helper_agreement(helper, overlap, sources_of, inputs.source_embeddings, config.neighbors,
                                  seed=config.seed)
        logger.info("combined: the helper's nearest shared token is among the source model's %d nearest for %.3f "
                    "of the shared tokens tried", config.neighbors, weight)
    if weight <= 0 or len(overlap) == 0:
        return Evidence("helper", 0.0, [], [], [])
    k = min(config.neighbors, len(overlap))
    bar = progress_bar(progress, len(rows), "combined helper", "token")
    similarities, found = topk_cosine(helper[torch.from_numpy(rows)], helper[torch.from_numpy(overlap)], k,
                                      progress=bar.update if bar is not None else None, device=inputs.device)
    if bar is not None:
        bar.close()
    weights = torch.softmax(similarities.to(torch.float64) / config.temperature, dim=1).numpy()
    sources = sources_of[found.numpy()]
    return Evidence("helper", weight, rows.tolist(), list(sources), list(weights))


def choose_evidence(size: int, evidence: list[Evidence]) -> list[Evidence]:
    """Each row's heaviest evidence alone (the later in the list on ties), as single-evidence lists for
    `mix_evidence`."""
    best = np.full(size, -1.0)
    owner = np.full(size, -1)
    for index, item in enumerate(evidence):
        if item.weight <= 0 or not item.rows:
            continue
        rows = np.asarray(item.rows, dtype=np.int64)
        take = item.weight >= best[rows]
        best[rows[take]] = item.weight
        owner[rows[take]] = index
    chosen = []
    for index, item in enumerate(evidence):
        keep = [i for i, row in enumerate(item.rows) if owner[row] == index]
        chosen.append(Evidence(item.name, item.weight, [item.rows[i] for i in keep], [item.sources[i] for i in keep],
                               [item.weights[i] for i in keep]))
    return chosen


def mix_evidence(size: int, evidence: list[Evidence]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                                np.ndarray]:
    """Each row's distributions mixed by their evidence weights, normalised over the evidence the row has; a source
    that several give appears once. Returns (rows, lengths, sources, weights, strongest evidence index per row)."""
    total = np.zeros(size)
    strongest = np.full(size, -1)
    row_parts, source_parts, weight_parts = [], [], []
    for index, item in enumerate(evidence):
        if item.weight <= 0 or not item.rows:
            continue
        rows = np.asarray(item.rows, dtype=np.int64)
        total[rows] += item.weight
        strongest[rows] = index  # evidence is listed weakest claim first
        lengths = np.array([len(s) for s in item.sources], dtype=np.int64)
        row_parts.append(np.repeat(rows, lengths))
        source_parts.append(np.concatenate(item.sources).astype(np.int64))
        weight_parts.append(np.concatenate(item.weights).astype(np.float64) * item.weight)
    if not row_parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0), empty
    rows = np.concatenate(row_parts)
    sources = np.concatenate(source_parts)
    weights = np.concatenate(weight_parts) / total[rows]
    width = np.int64(sources.max() + 1)
    keys, inverse = np.unique(rows * width + sources, return_inverse=True)  # sorted by row, then source
    merged = np.bincount(inverse, weights=weights)
    merged_rows, merged_sources = keys // width, keys % width
    placed, lengths = np.unique(merged_rows, return_counts=True)
    return placed, lengths, merged_sources, merged, strongest[placed]


def false_friends(inputs: TransferInputs, rows: np.ndarray, dictionary) -> np.ndarray:
    """The copied rows whose token is a word-start dictionary word none of whose translations is the word itself
    (ignoring case). The word is looked up as written, and only where the dictionary lacks it lower- or title-cased:
    German `arm` (poor) is a false friend although `Arm` translates as `arm`."""
    by_target = dictionary.translations()
    out = []
    for row in rows:
        token = inputs.target[int(row)]
        text = inputs.target.word_text(int(row))
        if not token.word_start or not text or not any(c.isalpha() for c in text):
            continue
        found = next((by_target[variant] for variant in case_variants(text) if variant in by_target), None)
        if found and text.lower() not in {translation.lower() for translation in found}:
            out.append(int(row))
    return np.asarray(out, dtype=np.int64)


def base_mapping(inputs: TransferInputs, config: CombinedConfig) -> tuple[TokenMapping, TokenMapping | None]:
    """Exact matches copied, false friends (where a dictionary is given) left to the evidence; and, where there are
    false friends, the mapping with them still copied (for candidates without the translations)."""
    mapping = TokenMapping.empty(len(inputs.target))
    copy_exact_matches(mapping, inputs)
    if "dictionary" in inputs.resources and config.dictionary_weight > 0 and config.false_friends:
        friends = false_friends(inputs, mapping.rows_of(Kind.COPIED), inputs.resource("dictionary"))
        if len(friends):
            copied = mapping.copy()
            mapping.set_kind(friends, Kind.UNPLACED)
            logger.info("combined: %s shared tokens are dictionary words translated otherwise", f"{len(friends):,}")
            return mapping, copied
    return mapping, None


def place_evidence(mapping: TokenMapping, evidence: list[Evidence]) -> TokenMapping:
    """Write each row's mixed evidence into `mapping`, with the kind of its strongest evidence."""
    placed, lengths, sources, weights, strongest = mix_evidence(len(mapping), evidence)
    kinds = {"spelling": Kind.SUBWORD, "neighbours": Kind.MIXED, "helper": Kind.MIXED,
             "parallel": Kind.TRANSLATED, "translations": Kind.TRANSLATED}
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for index, item in enumerate(evidence):
        chosen = np.flatnonzero(strongest == index)
        if len(chosen) == 0:
            continue
        entries = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in chosen])
        mapping.set_ragged_rows(placed[chosen], kinds[item.name], lengths[chosen], sources[entries],
                                weights[entries])
    return mapping


def restricted(item: Evidence, rows: set[int]) -> Evidence:
    """`item` for the rows in `rows` only."""
    keep = [i for i, row in enumerate(item.rows) if row in rows]
    return Evidence(item.name, item.weight, [item.rows[i] for i in keep], [item.sources[i] for i in keep],
                    [item.weights[i] for i in keep])


class EvidenceCandidates(Mapping):
    """`mode: auto`'s candidates: both modes over every subset of the evidence beyond spelling (the full set first,
    then smaller ones), each mapping made when it is read, so a transfer holds one at a time. A candidate without the
    dictionary's translations keeps false friends copied, as a transfer without a dictionary does. `weights`: per
    candidate, each evidence's weight (0 where it is left out), which the record reports. A subset with one kind of
    evidence is one candidate (mixing and choosing agree), named `<evidence> only`."""

    def __init__(self, mapping: TokenMapping, copied: TokenMapping | None, evidence: list[Evidence]):
        self._made: dict[str, tuple] = {}
        self.weights: dict[str, dict[str, float]] = {}
        live = [item for item in evidence if item.weight > 0 and item.rows]
        first, optional = live[0], live[1:]  # spelling where it has weight: what every token has
        # without the translations, false friends stay copied: each item once for the rows still unplaced
        unplaced = set(copied.rows_of(Kind.UNPLACED).tolist()) if copied is not None else set()
        alone = {id(item): restricted(item, unplaced) for item in live} if copied is not None else {}
        for count in range(len(optional), -1, -1):
            for kept in itertools.combinations(optional, count):
                used = {id(first)} | {id(item) for item in kept}
                items = [item for item in live if id(item) in used]
                dropped = [item.name for item in optional if id(item) not in used]
                weights = {item.name: item.weight if id(item) in used else 0.0 for item in evidence}
                base = mapping
                if copied is not None and "translations" in dropped:
                    base = copied
                    items = [alone[id(item)] for item in items]
                if len(items) == 1:
                    self._add(f"{items[0].name} only", base, items, "mix", weights)
                    continue
                suffix = f" without {' and '.join(dropped)}" if dropped else ""
                for mode in ("mix", "choose"):
                    self._add(mode + suffix, base, items, mode, weights)

    def _add(self, name: str, base: TokenMapping, items: list[Evidence], mode: str, weights: dict) -> None:
        self._made[name] = (base, items, mode)
        self.weights[name] = {key: round(float(value), 6) for key, value in weights.items()}

    def __getitem__(self, name: str) -> TokenMapping:
        base, items, mode = self._made[name]
        evidence = choose_evidence(len(base), items) if mode == "choose" else items
        return place_evidence(base.copy(), evidence)

    def sibling(self, name: str) -> str | None:
        """The candidate with `name`'s evidence chosen where `name` mixes it (None otherwise)."""
        other = "choose" + name[len("mix"):] if name.startswith("mix") else None
        return other if other in self._made else None

    def __iter__(self):
        return iter(self._made)

    def __len__(self) -> int:
        return len(self._made)


@register_method("combined", CombinedConfig, optional=("dictionary", "vectors", "helper_model", "translations"))
def combined(inputs: TransferInputs, config: CombinedConfig,
             progress: bool = False) -> TokenMapping | EvidenceCandidates:
    """Copy exact matches; mix spelling, dictionary translations, aligned and helper neighbours by reliability."""
    mapping, copied = base_mapping(inputs, config)
    rows = np.array([row for row in mapping.rows_of(Kind.UNPLACED) if not inputs.target[int(row)].special],
                    dtype=np.int64)
    if len(rows) == 0:
        return mapping
    evidence = [spelling_evidence(inputs, rows, config)]
    if "vectors" in inputs.resources:
        weight = vectors_reliability(inputs.resource("vectors"), config)
        if weight > 0:
            evidence.append(neighbour_evidence(inputs, rows, config, weight, progress))
    if "helper_model" in inputs.resources and config.helper_weight != 0:
        found = helper_evidence(inputs, mapping, rows, config, progress)
        if found.weight > 0:
            evidence.append(found)
    if "translations" in inputs.resources and config.parallel_weight > 0:
        evidence.append(parallel_evidence(inputs, rows, config))
    if "dictionary" in inputs.resources and config.dictionary_weight > 0:
        evidence.append(translation_evidence(inputs, rows, config))
    logger.info("combined: %s", ", ".join(f"{item.name} for {len(item.rows):,} tokens (weight {item.weight:.3g})"
                                          for item in evidence))
    size = len(inputs.target)
    if config.mode == "choose":
        return place_evidence(mapping, choose_evidence(size, evidence))
    if config.mode == "mix" or sum(1 for item in evidence if item.weight > 0 and item.rows) < 2:
        return place_evidence(mapping, evidence)  # with one kind of evidence, mixing and choosing are the same
    return EvidenceCandidates(mapping, copied, evidence)
