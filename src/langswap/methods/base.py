"""The method interface: configs, the registry, and the shared finishing step of every method.

A method is a pure function `(TransferInputs, config) -> TokenMapping`, or `-> Mapping[str, TokenMapping]` when it
offers candidates (`combined`'s `mode: auto`): the caller's judge (`run_method(judge=...)`, the loss of each finished
candidate on held-out target text) keeps the best, and without a judge the first is kept. A mapping of candidates may
carry `weights` (candidate -> evidence -> weight), which the record's choice then reports. The mapping
(`methods/mapping.py`) says, for each target token, how its row is made: copied from a source row, mixed from source
rows with weights, a base row plus an offset, or left unplaced. The shared finishing step (`finish_mapping`) then
copies special tokens by role, places what the method left with the configured fallback, checks each row against its
kind's rule, and applies the same mapping to every source matrix (input embeddings, an untied output head, an output
bias), so one similarity pass serves them all. Random rows come from a generator seeded by `config.seed`, never global
state.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np
import torch

from langswap.config import from_dict
from langswap.errors import MissingResourceError, VocabularyError
from langswap.methods.mapping import Kind, TokenMapping, build_matrix
from langswap.registry import Registry
from langswap.reports import MethodChoice
from langswap.resources.kinds import get_resource
from langswap.resources.kinds.vectors import AlignedVectors
from langswap.tokens import Vocabulary, match_special_tokens

logger = logging.getLogger(__name__)


FALLBACKS = ("random", "mean", "subword")
DEFAULT_METHOD = "combined"  # what a transfer config without `method.name` runs


@dataclass(frozen=True, kw_only=True)
class MethodConfig:
    """Options every method has."""

    seed: int = field(default=0, metadata={"help": "Seed for every random row; results are bitwise reproducible."})
    fallback: Literal["random", "mean", "subword"] = field(
        default="subword", metadata={"help": "How to place tokens the method cannot: random (the papers' choice), "
                                            "mean (the source mean row) or subword (mean of the source rows of the "
                                            "token's text as the source tokenizer splits it)."})
    unmatched_special: Literal["error", "fallback"] = field(
        default="error", metadata={"help": "A target special token whose role the source lacks: stop with an error, "
                                           "or place it with the fallback."})

    @property
    def method_name(self) -> str:
        return METHOD_NAMES[type(self)]

    def unused_kinds(self) -> tuple[str, ...]:
        """Optional resource kinds these options make the method ignore (not loaded even when given)."""
        return ()

    def needed_kinds(self) -> tuple[str, ...]:
        """Optional resource kinds these options make the method need (checked, and an error when not given)."""
        return ()

    def offers_candidates(self) -> bool:
        """Whether these options make the method offer several mappings for the transfer to choose among."""
        return False


@dataclass
class TransferInputs:
    """What methods consume. Source matrices have exactly len(source vocabulary) rows, in float32 or (in a transfer)
    the model's dtype: a method converts the rows it computes with.

    `resources` maps a resource kind's name (`langswap.resources.kinds`) to its loaded resource; a method reads the
    kinds it `requires` with `resource(name)`. Aligned word vectors may also be given as `source_vectors` and
    `target_vectors` (WordVectors in one space), which stand for the `vectors` resource."""

    source: Vocabulary
    target: Vocabulary
    source_embeddings: torch.Tensor  # (V_s, d), float32 or the model's dtype: convert the rows you compute with
    source_vectors: object | None = None  # shorthand: WordVectors in the shared space, the `vectors` resource
    target_vectors: object | None = None
    resources: dict[str, object] = field(default_factory=dict)
    device: object | None = None  # torch device of the similarity searches and the pursuit; None: the CPU
    # an extended vocabulary (`transfer.steps.Growth`): the target ids below `kept` are the source's tokens at their
    # own ids, and their rows are copied whatever the method makes; `padding` holds the rows appended after the
    # target's ("embeddings", "output_embeddings", "output_bias"), so the matrices reach the padded size
    kept: int = 0
    padding: dict[str, torch.Tensor | None] | None = None

    def __post_init__(self):
        rows, _ = self.source_embeddings.shape
        assert rows == len(self.source), f"{rows} embedding rows for {len(self.source)} source tokens"
        if self.source_vectors is not None and self.target_vectors is not None:
            self.resources.setdefault("vectors", AlignedVectors(self.source_vectors, self.target_vectors))

    def resource(self, name: str):
        """The loaded resource of kind `name`; a MissingResourceError naming what to set when it was not given."""
        if name not in self.resources:
            kind = get_resource(name)
            raise MissingResourceError(f"this transfer has no '{name}' resource ({kind.description}); set "
                                       + ", ".join(f"resources.{key}" for key in kind.keys() or kind.reads)
                                       + " as needed.")
        return self.resources[name]


@dataclass
class MethodResult:
    """The new matrices, in the dtype of the source matrices, and how each row was made."""

    mapping: TokenMapping
    embeddings: torch.Tensor  # (V_t, d)
    output_embeddings: torch.Tensor | None = None  # (V_t, d) for an untied head
    output_bias: torch.Tensor | None = None  # (V_t,)
    choice: MethodChoice | None = None  # where the method offered candidates: their losses and the one kept
    # where the kept candidate mixes its evidence and the method offers the same evidence chosen (`combined`'s
    # `mix` and `choose`): (that candidate's name, its result), for training's start (`langswap.start_rows`)
    sibling: "tuple[str, MethodResult] | None" = None
    candidate: str | None = None  # its name among the method's candidates, where it offered several
    # where the candidate judged just before it is its sibling (`mix`, judged before `choose` over the same
    # evidence): (that candidate's name, the ids of the rows the two make otherwise, `differing_rows`)
    unlike: "tuple[str, torch.Tensor] | None" = None


@dataclass(frozen=True)
class MethodSpec:
    name: str
    config_cls: type
    function: Callable
    requires: tuple[str, ...]
    description: str
    optional: tuple[str, ...] = ()  # kinds used when the config gives them (`ResourceKind.given`)

    def kinds(self, config, method: "MethodConfig | None" = None) -> tuple[str, ...]:
        """The resource kinds a transfer or bench config makes this method read: every required kind, every kind
        the method options need (`needed_kinds`), and each optional kind the config gives, unless the method
        options ignore it (`unused_kinds`). The options are
        `method`, else the config's own `method` (a transfer's; a bench names one per variant)."""
        method = method if method is not None else getattr(config, "method", None)
        unused = method.unused_kinds() if isinstance(method, MethodConfig) else ()
        needed = tuple(name for name in (method.needed_kinds() if isinstance(method, MethodConfig) else ())
                       if name not in self.requires)
        return self.requires + needed + tuple(name for name in self.optional if name not in unused
                                              and name not in needed and get_resource(name).given(config))


# every module of langswap.methods registers its methods here when the first one is looked up
_REGISTRY = Registry("method", "langswap.methods", "`langswap methods` describes them")
METHOD_NAMES: dict[type, str] = {}


def register_method(name: str, config_cls: type, requires: tuple[str, ...] = (), optional: tuple[str, ...] = ()):
    """Decorator: register `function(inputs, config) -> TokenMapping` under `name`. `requires` names resource kinds
    (`langswap resources`) the method cannot run without; `optional` names kinds it uses when a config gives them
    (the method reads `name in inputs.resources`). A name no kind is registered under is an error here, not when a
    transfer runs."""
    for what, names in (("requires", requires), ("optional", optional)):
        if isinstance(names, str):
            raise ValueError(f"method {name!r}: {what} must be a tuple of resource kind names, not the string "
                             f"{names!r} (write {what}=({names!r},))")
        for kind in names:
            get_resource(kind)

    def decorator(function):
        doc = (function.__doc__ or "").strip().splitlines()
        _REGISTRY.add(name, MethodSpec(name, config_cls, function, tuple(requires), doc[0] if doc else "",
                                       tuple(optional)))
        METHOD_NAMES[config_cls] = name
        return function

    return decorator


def method_names() -> list[str]:
    return _REGISTRY.names()


def get_method(name: str) -> MethodSpec:
    return _REGISTRY.get_entry(name)


def make_config(name: str, **options) -> MethodConfig:
    """The config of method `name` with `options` set; unknown options are errors."""
    return from_dict(get_method(name).config_cls, options, where="method.")


# -- the shared finishing step ---------------------------------------------------------------------------------------

def copy_special_tokens(mapping: TokenMapping, inputs: TransferInputs, config: MethodConfig) -> None:
    matched, unmatched = match_special_tokens(inputs.source, inputs.target)
    if matched:
        rows = np.fromiter(matched.keys(), dtype=np.int64)
        mapping.copy_rows(rows, np.fromiter(matched.values(), dtype=np.int64), Kind.SPECIAL)
    if unmatched:
        if config.unmatched_special == "error":
            described = ", ".join(f"'{inputs.target[i].token}' ({'/'.join(roles)})" for i, roles in unmatched.items())
            raise VocabularyError(
                f"the target tokenizer has special token(s) {described} whose role the source tokenizer lacks "
                f"(source roles: {', '.join(sorted(inputs.source.roles)) or 'none'}). Give the target tokenizer the "
                "source's special tokens, or place these rows with the fallback: --set method.unmatched_special="
                "fallback.")
        mapping.set_kind(np.fromiter(unmatched.keys(), dtype=np.int64), Kind.UNPLACED)


def subword_sources(inputs: TransferInputs, rows: np.ndarray) -> tuple[list[int], list[list[int]]]:
    """For each target row, the source ids of its surface text as the source tokenizer splits it."""
    tokens = [inputs.target[int(row)] for row in rows]
    # Partial UTF-8 (a lone byte of a multi-byte character) has no text to split; the target tokenizer rarely emits
    # it, since whole characters are merged, and with a tied head a copied byte row is a confident output row for a
    # token that hardly ever comes. It gets the mean row.
    kept = [(int(row), token) for row, token in zip(rows, tokens) if not token.special and token.text is not None]
    encoded = inputs.source.encode_surfaces([token.text for _, token in kept], [token.word_start for _, token in kept])
    placed, pieces = [], []
    for (row, _), ids in zip(kept, encoded):
        ids = [i for i in ids if not inputs.source[i].special]
        if ids:
            placed.append(row)
            pieces.append(ids)
    return placed, pieces


def apply_fallback(mapping: TokenMapping, inputs: TransferInputs, fallback: str) -> None:
    rows = mapping.rows_of(Kind.UNPLACED)
    if len(rows) == 0:
        return
    if fallback == "subword":
        placed, pieces = subword_sources(inputs, rows)
        if placed:
            lengths = np.array([len(ids) for ids in pieces], dtype=np.int64)
            sources = np.fromiter((i for ids in pieces for i in ids), dtype=np.int64, count=int(lengths.sum()))
            weights = np.repeat(1.0 / lengths, lengths)
            mapping.set_ragged_rows(np.asarray(placed), Kind.SUBWORD, lengths, sources, weights)
        # what even the source tokenizer cannot spell gets the mean
        mapping.set_kind(mapping.rows_of(Kind.UNPLACED), Kind.MEAN)
    elif fallback == "mean":
        mapping.set_kind(rows, Kind.MEAN)
    else:
        mapping.set_kind(rows, Kind.RANDOM)


def check_resources(spec: MethodSpec, config) -> None:
    """Fail early, with the fix, when `config` (a transfer or bench config) cannot give a resource the method needs
    (or an optional one it gives only in part)."""
    for name in spec.kinds(config):
        try:
            get_resource(name).check(config)
        except MissingResourceError as error:
            raise MissingResourceError(f"method '{spec.name}' needs resource '{name}': {error}") from error


def load_resources(spec: MethodSpec, config, target_tokenizer=None,
                   source_tokenizer=None) -> tuple[dict[str, object], dict[str, object]]:
    """The resources the method reads (`spec.kinds(config)`), loaded as `config` (already checked with
    `check_resources`, as a transfer config's `validate` does) says: ({kind: resource}, {kind: report}). Kinds made
    with the target tokenizer (`uses_target_tokenizer`) get `target_tokenizer`, and those made with both
    (`uses_source_tokenizer`) `source_tokenizer` too."""
    loaded, reports = {}, {}
    for name in spec.kinds(config):
        kind = get_resource(name)
        if kind.uses_source_tokenizer:
            assert None not in (target_tokenizer, source_tokenizer), f"resource kind {name!r} needs both tokenizers"
            loaded[name], reports[name] = kind.load(config, target_tokenizer, source_tokenizer)
        elif kind.uses_target_tokenizer:
            assert target_tokenizer is not None, f"resource kind {name!r} is loaded with the target tokenizer"
            loaded[name], reports[name] = kind.load(config, target_tokenizer)
        else:
            loaded[name], reports[name] = kind.load(config)
    return loaded, reports


def run_method(name_or_config, inputs: TransferInputs, source_matrices: dict[str, torch.Tensor] | None = None,
               progress: bool = False, judge: Callable[[MethodResult], float] | None = None,
               dtype: torch.dtype | None = None) -> MethodResult:
    """Run a registered method and build the new matrices.

    `source_matrices` may hold "output_embeddings" (V_s, d) and "output_bias" (V_s,) besides the input embeddings
    in `inputs`; each gets the same mapping, by the head and bias rule of each row's kind (KIND_RULES). Streams 0/1/2
    seed their random rows independently. Where the method offers candidate mappings, each is finished and given to
    `judge` (lower is better) and the best is returned, with the losses in `choice`; without a judge the first
    candidate is returned. `dtype`: that of the new matrices (default: each source matrix's own); they are summed
    in float32 either way.
    """
    config = make_config(name_or_config) if isinstance(name_or_config, str) else name_or_config
    spec = get_method(config.method_name)
    missing = [name for name in spec.requires if name not in inputs.resources]
    if missing:
        inputs.resource(missing[0])  # the error that says what to set
    made = spec.function(inputs, config, progress=progress)
    candidates = made if isinstance(made, Mapping) else {"": made}
    assert candidates, f"method {spec.name} offered no mapping"
    weights = getattr(candidates, "weights", None)
    if len(candidates) == 1 or judge is None:
        name, mapping = next(iter(candidates.items()))
        result = finish_mapping(spec.name, mapping, inputs, config, source_matrices, dtype)
        if len(candidates) > 1:
            result.choice = MethodChoice(chosen=name, by="default (nothing to compare on: no held-out target text, "
                                                          "or not a causal LM)", candidates=list(candidates),
                                         weights=weights)
        return result
    best, losses, previous = None, {}, None
    sibling = getattr(candidates, "sibling", lambda name: None)
    for name, mapping in candidates.items():
        result = finish_mapping(f"{spec.name} ({name})", mapping, inputs, config, source_matrices, dtype)
        result.candidate = name
        if previous is not None and sibling(previous.candidate) == name:
            result.unlike = (previous.candidate, differing_rows(previous, result))
        previous = result
        loss = float(judge(result))
        losses[name] = loss if math.isfinite(loss) else math.inf
        logger.info("%s (%s): %s %.4f", spec.name, name, getattr(judge, "what", "held-out loss"), losses[name])
        if best is None or losses[name] < losses[best[0]]:  # ties keep the earlier candidate
            best = (name, result)
    name, result = best
    previous = None
    result.choice = MethodChoice(chosen=name, by="held-out loss", losses={
        key: round(value, 5) if math.isfinite(value) else None for key, value in losses.items()}, weights=weights)
    logger.info("%s: kept %s", spec.name, name)
    other = sibling(name)
    if other is not None:
        result.sibling = (other, finish_mapping(f"{spec.name} ({other})", candidates[other], inputs, config,
                                                source_matrices, dtype))
    return result


def differing_rows(one: MethodResult, other: MethodResult) -> torch.Tensor:
    """The ids of the rows two results make otherwise (input rows, or the head's where both have their own)."""
    differ = (one.embeddings != other.embeddings).any(dim=1)
    if one.output_embeddings is not None and other.output_embeddings is not None:
        differ |= (one.output_embeddings != other.output_embeddings).any(dim=1)
    return torch.nonzero(differ).flatten()


def finish_mapping(name: str, mapping: TokenMapping, inputs: TransferInputs, config: MethodConfig,
                   source_matrices: dict[str, torch.Tensor] | None, dtype: torch.dtype | None = None) -> MethodResult:
    """Special tokens, the fallback and each kind's check for a method's mapping, then its matrices."""
    assert isinstance(mapping, TokenMapping) and len(mapping) == len(inputs.target)
    assert mapping.head is None or (len(mapping.head) == len(mapping) and mapping.head.head is None)
    for finished in (mapping, mapping.head):
        if finished is None:
            continue
        copy_special_tokens(finished, inputs, config)
        apply_fallback(finished, inputs, config.fallback)
        if inputs.kept:
            keep_source_rows(finished, inputs.kept)
        finished.check(len(inputs.source))  # each kind's rule (KIND_RULES), every row placed
    logger.info("%s: %s", name, mapping.summary())
    if mapping.head is not None:
        logger.info("%s, untied output head: %s", name, mapping.head.summary())
    source_matrices = source_matrices or {}
    padding = {which: rows for which, rows in (inputs.padding or {}).items() if rows is not None and len(rows)}
    result = MethodResult(mapping, build_matrix(mapping, inputs.source_embeddings, config.seed, "embeddings", dtype,
                                                padding.get("embeddings")))
    # an untied head and its bias follow the head's own mapping where the method made one; a tied head's bias
    # follows its rows, which are the input rows
    head = mapping.head if mapping.head is not None and source_matrices.get("output_embeddings") is not None \
        else mapping
    for which in ("output_embeddings", "output_bias"):
        if source_matrices.get(which) is not None:
            setattr(result, which, build_matrix(head, source_matrices[which], config.seed, which,
                                                dtype if which == "output_embeddings" else None, padding.get(which)))
    return result


def keep_source_rows(mapping: TokenMapping, kept: int) -> None:
    """An extended vocabulary: rows 0..kept-1 copy the source row of their own id (special tokens included, which
    keep their kind where the method matched them to their own id)."""
    rows = np.arange(kept)
    kinds = mapping.kinds[:kept]
    special = rows[kinds == Kind.SPECIAL]
    elsewhere = [row for row in special.tolist() if mapping.row(row)[0].tolist() != [row]]
    ordinary = np.concatenate([rows[kinds != Kind.SPECIAL], np.asarray(elsewhere, dtype=np.int64)])
    if len(ordinary):
        mapping.copy_rows(ordinary, ordinary)


def config_fields(config_cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_cls) if f.init]
