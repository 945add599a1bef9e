"""The method interface: configs, the registry, token mappings and how a mapping becomes matrices.

A method is a pure function `(TransferInputs, config) -> TokenMapping`. The mapping says, for each target token,
how its row is made: copied from a source row, mixed from source rows with weights, or left unplaced. The shared
`finish` step then copies special tokens by role, places what the method left with the configured fallback, and
applies the same mapping to every source matrix (input embeddings, an untied output head, an output bias), so one
similarity pass serves them all. Random rows come from a generator seeded by `config.seed`, never global state.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np
import torch

from langswap.errors import ConfigError, MissingResourceError, VocabularyError
from langswap.kernels import mix_rows
from langswap.tokens import Vocabulary, match_special_tokens

logger = logging.getLogger(__name__)


class Kind(enum.IntEnum):
    """How a target row was made."""

    UNPLACED = 0  # only inside a method, before the fallback
    SPECIAL = 1  # copied from the source special token with the same role
    COPIED = 2  # copied from the source token with the same canonical form
    MIXED = 3  # weighted mix of source rows (WECHSEL and friends)
    SUBWORD = 4  # fallback: mean of the source rows of the token's text split by the source tokenizer
    MEAN = 5  # fallback: the source mean row
    RANDOM = 6  # per-dimension normal with the source rows' mean and standard deviation


FALLBACKS = ("random", "mean", "subword")


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


@dataclass
class TransferInputs:
    """What methods consume. Source matrices are float32 with exactly len(source vocabulary) rows."""

    source: Vocabulary
    target: Vocabulary
    source_embeddings: torch.Tensor  # (V_s, d)
    source_vectors: object | None = None  # WordVectors in the shared (aligned) space
    target_vectors: object | None = None  # WordVectors in the shared (aligned) space

    def __post_init__(self):
        rows, _ = self.source_embeddings.shape
        assert rows == len(self.source), f"{rows} embedding rows for {len(self.source)} source tokens"


@dataclass
class TokenMapping:
    """Per target token: kind, source ids (-1 = none) and weights. sources/weights: (V_t, width)."""

    kinds: np.ndarray
    sources: np.ndarray
    weights: np.ndarray

    @classmethod
    def empty(cls, size: int, width: int = 1) -> "TokenMapping":
        return cls(np.zeros(size, dtype=np.int8), np.full((size, width), -1, dtype=np.int64),
                   np.zeros((size, width), dtype=np.float32))

    def __len__(self) -> int:
        return len(self.kinds)

    def set_rows(self, rows, kind: Kind, sources, weights) -> None:
        """Set rows (index array) to `kind` with (len(rows), w) sources and weights, widening the table if needed."""
        sources = np.asarray(sources, dtype=np.int64).reshape(len(rows), -1)
        weights = np.asarray(weights, dtype=np.float32).reshape(len(rows), -1)
        width = sources.shape[1]
        if width > self.sources.shape[1]:
            extra = width - self.sources.shape[1]
            self.sources = np.pad(self.sources, ((0, 0), (0, extra)), constant_values=-1)
            self.weights = np.pad(self.weights, ((0, 0), (0, extra)))
        self.kinds[rows] = kind
        self.sources[rows] = -1
        self.weights[rows] = 0.0
        self.sources[rows, :width] = sources
        self.weights[rows, :width] = weights

    def copy_rows(self, rows, source_ids, kind: Kind = Kind.COPIED) -> None:
        self.set_rows(np.asarray(rows), kind, np.asarray(source_ids)[:, None], np.ones((len(rows), 1)))

    def rows_of(self, kind: Kind) -> np.ndarray:
        return np.flatnonzero(self.kinds == kind)

    def counts(self) -> dict[str, int]:
        return {kind.name.lower(): int((self.kinds == kind).sum()) for kind in Kind if (self.kinds == kind).any()}

    def summary(self) -> str:
        parts = [f"{name} {count:,}" for name, count in self.counts().items()]
        return " | ".join(parts + [f"total {len(self):,}"])


@dataclass
class MethodResult:
    """The new matrices, in the dtype of the source matrices, and how each row was made."""

    mapping: TokenMapping
    embeddings: torch.Tensor  # (V_t, d)
    output_embeddings: torch.Tensor | None = None  # (V_t, d) for an untied head
    output_bias: torch.Tensor | None = None  # (V_t,)


@dataclass(frozen=True)
class MethodSpec:
    name: str
    config_cls: type
    function: Callable
    requires: tuple[str, ...]
    description: str


_REGISTRY: dict[str, MethodSpec] = {}
METHOD_NAMES: dict[type, str] = {}


def register_method(name: str, config_cls: type, requires: tuple[str, ...] = ()):
    """Decorator: register `function(inputs, config) -> TokenMapping` under `name`."""

    def decorator(function):
        if name in _REGISTRY:
            raise ValueError(f"method {name!r} registered twice")
        doc = (function.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = MethodSpec(name, config_cls, function, tuple(requires), doc[0] if doc else "")
        METHOD_NAMES[config_cls] = name
        return function

    return decorator


def method_names() -> list[str]:
    _load_builtin_methods()
    return sorted(_REGISTRY)


def get_method(name: str) -> MethodSpec:
    _load_builtin_methods()
    if name not in _REGISTRY:
        raise ConfigError(f"unknown method '{name}'. Available methods: {', '.join(sorted(_REGISTRY))} "
                          "(`langswap methods` describes them).")
    return _REGISTRY[name]


def _load_builtin_methods() -> None:
    """Import every module of this package once, so each method file registers itself; nothing lists them."""
    import importlib
    import pkgutil

    import langswap.methods as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def make_config(name: str, **options) -> MethodConfig:
    """The config of method `name` with `options` set; unknown options are errors."""
    from langswap.config import from_dict

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
        rows = np.fromiter(unmatched.keys(), dtype=np.int64)
        mapping.kinds[rows] = Kind.UNPLACED


def subword_sources(inputs: TransferInputs, rows: np.ndarray) -> tuple[list[int], list[list[int]]]:
    """For each target row, the source ids of its surface text as the source tokenizer splits it."""
    placed, pieces = [], []
    for row in rows:
        token = inputs.target[int(row)]
        if token.special:
            continue
        text = token.text
        if text is None:
            # Partial UTF-8 (a lone byte of a multi-byte character) has no text to split; the target tokenizer
            # rarely emits it, since whole characters are merged, and with a tied head a copied byte row is a
            # confident output row for a token that hardly ever comes. It gets the mean row.
            continue
        ids = [i for i in inputs.source.encode_surface(text, token.word_start) if not inputs.source[i].special]
        if ids:
            placed.append(int(row))
            pieces.append(ids)
    return placed, pieces


def apply_fallback(mapping: TokenMapping, inputs: TransferInputs, fallback: str) -> None:
    rows = mapping.rows_of(Kind.UNPLACED)
    if len(rows) == 0:
        return
    if fallback == "subword":
        placed, pieces = subword_sources(inputs, rows)
        if placed:
            width = max(len(ids) for ids in pieces)
            sources = np.full((len(placed), width), -1, dtype=np.int64)
            weights = np.zeros((len(placed), width), dtype=np.float32)
            for i, ids in enumerate(pieces):
                sources[i, :len(ids)] = ids
                weights[i, :len(ids)] = 1.0 / len(ids)
            mapping.set_rows(np.asarray(placed), Kind.SUBWORD, sources, weights)
        rows = mapping.rows_of(Kind.UNPLACED)  # what even the source tokenizer cannot spell gets the mean
        mapping.kinds[rows] = Kind.MEAN
    elif fallback == "mean":
        mapping.kinds[rows] = Kind.MEAN
    else:
        mapping.kinds[rows] = Kind.RANDOM


def random_rows(matrix: torch.Tensor, count: int, seed: int, stream: int) -> torch.Tensor:
    """(count, d) rows ~ N(mean_j, std_j) per dimension j of `matrix` (or (count,) for a vector)."""
    table = matrix.to(torch.float32)
    generator = np.random.default_rng([seed, stream])
    mean, std = table.mean(dim=0).numpy(), table.std(dim=0).numpy()
    shape = (count,) + tuple(table.shape[1:])
    noise = generator.standard_normal(shape).astype(np.float32)
    return torch.from_numpy(mean + std * noise)


def build_matrix(mapping: TokenMapping, matrix: torch.Tensor, seed: int, stream: int) -> torch.Tensor:
    """Apply a finished mapping to one source matrix (V_s, d) or bias (V_s,); returns (V_t, ...) in its dtype."""
    table = matrix.detach().to(torch.float32)
    out = mix_rows(table, torch.from_numpy(mapping.sources), torch.from_numpy(mapping.weights))
    mean_rows = mapping.rows_of(Kind.MEAN)
    if len(mean_rows):
        out[torch.from_numpy(mean_rows)] = table.mean(dim=0)
    random = mapping.rows_of(Kind.RANDOM)
    if len(random):
        # drawn for every target row so a token's random row does not depend on which other rows are random
        out[torch.from_numpy(random)] = random_rows(table, len(mapping), seed, stream)[torch.from_numpy(random)]
    assert not (mapping.kinds == Kind.UNPLACED).any(), "finish() must place every row"
    return out.to(matrix.dtype)


def check_resources(spec: MethodSpec, has_vectors: bool) -> None:
    """Fail early, with the fix, when a method's declared resources are missing."""
    if "vectors" in spec.requires and not has_vectors:
        raise MissingResourceError(
            f"method '{spec.name}' needs word vectors for both languages: set resources.source_vectors and "
            "resources.target_vectors (fastText .bin or .vec; `langswap fasttext` trains them), and "
            "resources.dictionary or resources.alignment to align them.")


def run_method(name_or_config, inputs: TransferInputs, source_matrices: dict[str, torch.Tensor] | None = None,
               progress: bool = False) -> MethodResult:
    """Run a registered method and build the new matrices.

    `source_matrices` may hold "output_embeddings" (V_s, d) and "output_bias" (V_s,) besides the input embeddings
    in `inputs`; each gets the same mapping. Streams 0/1/2 seed their random rows independently.
    """
    config = make_config(name_or_config) if isinstance(name_or_config, str) else name_or_config
    spec = get_method(config.method_name)
    check_resources(spec, inputs.source_vectors is not None and inputs.target_vectors is not None)
    mapping = spec.function(inputs, config, progress=progress)
    assert isinstance(mapping, TokenMapping) and len(mapping) == len(inputs.target)
    copy_special_tokens(mapping, inputs, config)
    apply_fallback(mapping, inputs, config.fallback)
    logger.info("%s: %s", spec.name, mapping.summary())
    source_matrices = source_matrices or {}
    result = MethodResult(mapping, build_matrix(mapping, inputs.source_embeddings, config.seed, 0))
    if source_matrices.get("output_embeddings") is not None:
        result.output_embeddings = build_matrix(mapping, source_matrices["output_embeddings"], config.seed, 1)
    if source_matrices.get("output_bias") is not None:
        result.output_bias = build_matrix(mapping, source_matrices["output_bias"], config.seed, 2)
    return result


def config_fields(config_cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(config_cls) if f.init]
