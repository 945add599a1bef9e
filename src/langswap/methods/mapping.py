"""Token mappings: how each target row is made, stored by row, and how a mapping becomes matrices.

A `TokenMapping` gives every target token a `Kind` and, where the kind mixes source rows, the source ids and weights
of its own row only, compressed by row (CSR): row i's entries are `indices[indptr[i]:indptr[i + 1]]` (source ids,
int64) and `weights[indptr[i]:indptr[i + 1]]` (float32). One token mixed from 500 source tokens costs 500 entries,
where a table padded to the longest row costs V_t x 500.

A row of kind BASE_PLUS_OFFSET is made from another model's matrices instead of the source's: row `base_row` of a
named base (`add_base`), plus an additive offset per matrix (TEMA: the row of an existing target-language model,
moved by an offset). Each kind states its rule in `KIND_RULES`: how many sources it has, what its weights promise,
and what its output-head row and output-bias entry are; `TokenMapping.check` enforces the first two, and
`build_matrix` the last two.

Memory: a method fills a mapping with `set_rows`, `set_ragged_rows`, `copy_rows`, `set_kind` and `set_base_rows`;
each call keeps its own arrays as a pending write (O(its rows + its entries)), and the first read of the entries
(`indptr`, `row`, `build_matrix`, `check`, ...) compresses every pending write at once, the last write to a row
winning. A finished mapping holds V_t bytes of kinds, 8 (V_t + 1) bytes of `indptr` and 12 bytes per entry (an int64
id and a float32 weight), plus, for BASE_PLUS_OFFSET rows, 8 bytes of base row and the float32 offsets (d per matrix,
1 for the bias). Compressing briefly needs about twice the entries of the pending writes, and 32 bytes per row.
Write rows in blocks: a call per row works, at a Python call's cost each. Reading `kinds` never compresses; it is
read-only, so a kind only changes through the setters, which keep the entries in step.

Not handled: weights that mix the base rows of several bases in one row (a BASE_PLUS_OFFSET row has one base row).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import torch

from langswap.errors import MissingResourceError
from langswap.kernels import mix_csr_rows

# The matrices a mapping builds, in the order of their random streams (0, 1, 2): `build_matrix(..., which)` takes one
# of these names, and so do a BASE_PLUS_OFFSET row's offsets.
MATRICES = ("embeddings", "output_embeddings", "output_bias")

MAX_PENDING = 4096  # setter calls kept before they are compressed (each costs Python work when compressing)
SUM_TOLERANCE = 1e-4  # |sum of a distribution row's float32 weights - 1| allowed (softmax over 500 float32 values)


class Kind(enum.IntEnum):
    """How a target row was made (KIND_RULES says what each promises)."""

    UNPLACED = 0  # only inside a method, before the fallback
    SPECIAL = 1  # copied from the source special token with the same role
    COPIED = 2  # copied from the source token with the same canonical form
    MIXED = 3  # weighted mix of source rows (WECHSEL and friends)
    SUBWORD = 4  # fallback: mean of the source rows of the token's text split by the source tokenizer
    MEAN = 5  # fallback: the source mean row
    RANDOM = 6  # per-dimension normal with the source rows' mean and standard deviation
    BASE_PLUS_OFFSET = 7  # a row of a named base model's matrix plus an additive offset (TEMA)
    TRANSLATED = 8  # weighted mix of the source rows of a token's translations (Tik-to-Tok's dictionary, RAMEN)
    COMBINED = 9  # linear combination of source rows with any finite coefficients (OMP's sparse code)


@dataclass(frozen=True)
class KindRule:
    """What a row of one kind holds and promises, and how its output head row and output bias are made."""

    fewest_sources: int
    most_sources: int | None  # None: any number
    weights: str  # "one": a single weight of exactly 1; "distribution": non-negative, summing to 1; "finite": any
    # numbers (a linear combination, not a mix; every entry's weight is finite, whatever the kind); "none"
    base: bool  # a base row plus offsets instead of source entries
    head: str  # the row of an untied output head
    bias: str  # the entry of an output bias


_SAME_WEIGHTS = ("the same weights over the source head's rows", "the same weights over the source biases")
_ONE_SOURCE = ("the source head's row of the same source token", "the source bias of the same source token")

KIND_RULES: dict[Kind, KindRule] = {
    Kind.UNPLACED: KindRule(0, 0, "none", False, "none: a finished mapping has no unplaced row", "none"),
    Kind.SPECIAL: KindRule(1, 1, "one", False, *_ONE_SOURCE),
    Kind.COPIED: KindRule(1, 1, "one", False, *_ONE_SOURCE),
    Kind.MIXED: KindRule(1, None, "distribution", False, *_SAME_WEIGHTS),
    Kind.SUBWORD: KindRule(1, None, "distribution", False, *_SAME_WEIGHTS),
    Kind.MEAN: KindRule(0, 0, "none", False, "the mean of the source head's rows", "the mean of the source biases"),
    Kind.RANDOM: KindRule(0, 0, "none", False, "per dimension, a normal draw with the source head's mean and "
                          "standard deviation (random stream 1)", "a normal draw with the source biases' mean and "
                          "standard deviation (random stream 2)"),
    Kind.TRANSLATED: KindRule(1, None, "distribution", False, *_SAME_WEIGHTS),
    Kind.COMBINED: KindRule(1, None, "finite", False, *_SAME_WEIGHTS),
    Kind.BASE_PLUS_OFFSET: KindRule(
        0, 0, "none", True,
        "the base's output head row (its input embedding row where the base ties its head), plus the row's "
        "output_embeddings offset (zero where none is given)",
        "the base's output bias (zero where the base has none: that is the logit it computes), plus the row's "
        "output_bias offset (zero where none is given)"),
}


@dataclass
class BaseMatrices:
    """The matrices of a model whose rows BASE_PLUS_OFFSET rows start from; widths must match the source model's."""

    embeddings: torch.Tensor  # (V_b, d)
    output_embeddings: torch.Tensor | None = None  # (V_b, d); None: the base ties its head to `embeddings`
    output_bias: torch.Tensor | None = None  # (V_b,); None: the base has no output bias, which is a bias of zero

    def __post_init__(self):
        rows, _ = self.embeddings.shape
        if self.output_embeddings is not None:
            assert self.output_embeddings.shape == self.embeddings.shape, "base head and embeddings differ in shape"
        if self.output_bias is not None:
            assert self.output_bias.shape == (rows,), f"base bias of shape {tuple(self.output_bias.shape)}"

    def __len__(self) -> int:
        return self.embeddings.shape[0]

    def shape_of(self, which: str) -> tuple[int, ...]:
        """The trailing shape of one base row of matrix `which`: (d,) or () for the bias."""
        return () if which == "output_bias" else tuple(self.embeddings.shape[1:])

    def rows(self, which: str, base_rows: np.ndarray) -> torch.Tensor:
        """float32 rows `base_rows` of the base matrix `which`, by the rules of KIND_RULES[BASE_PLUS_OFFSET]."""
        index = torch.from_numpy(np.asarray(base_rows, dtype=np.int64))
        if which == "output_bias":
            if self.output_bias is None:
                return torch.zeros(len(index), dtype=torch.float32)
            return self.output_bias.detach().to(torch.float32)[index]
        matrix = self.output_embeddings if which == "output_embeddings" and self.output_embeddings is not None \
            else self.embeddings
        return matrix.detach()[index].to(torch.float32)


@dataclass
class _Write:
    """One setter call, kept until the mapping is compressed: rows (n,), entries per row (n,), the flat entries,
    and for BASE_PLUS_OFFSET rows their base codes (n,), base rows (n,) and offsets {matrix: (n, ...)}."""

    rows: np.ndarray
    lengths: np.ndarray
    sources: np.ndarray
    weights: np.ndarray
    base_codes: np.ndarray | None = None
    base_rows: np.ndarray | None = None
    offsets: dict[str, np.ndarray] | None = None


def _row_array(rows) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1)  # a copy: a caller may reuse its array


class TokenMapping:
    """Per target token: its kind, and its source ids and weights compressed by row (see the module docstring).

    kinds: (V_t,) int8, read-only; indptr: (V_t + 1,) int64; indices: (nnz,) int64; weights: (nnz,) float32.
    """

    def __init__(self, size: int):
        self._kinds = np.zeros(size, dtype=np.int8)
        self._indptr = np.zeros(size + 1, dtype=np.int64)
        self._indices = np.zeros(0, dtype=np.int64)
        self._weights = np.zeros(0, dtype=np.float32)
        # BASE_PLUS_OFFSET rows, sorted by target row: base code (an index into _base_names), base row, offsets
        self._base_targets = np.zeros(0, dtype=np.int64)
        self._base_codes = np.zeros(0, dtype=np.int64)
        self._base_rows = np.zeros(0, dtype=np.int64)
        self._offsets: dict[str, np.ndarray] = {}
        self._offset_shapes: dict[str, tuple[int, ...]] = {}
        self._base_names: list[str] = []
        self.bases: dict[str, BaseMatrices] = {}
        self._pending: list[_Write] = []
        # the untied output head's (and output bias's) own mapping, where a method makes one (omp from a helper's
        # head); None: the head gets this mapping, as every method's does by default
        self.head: TokenMapping | None = None

    @classmethod
    def empty(cls, size: int) -> "TokenMapping":
        """A mapping of `size` unplaced rows."""
        return cls(size)

    @classmethod
    def from_csr(cls, kinds, indptr, indices, weights) -> "TokenMapping":
        """A mapping from its arrays (kinds (V_t,), indptr (V_t + 1,), indices and weights (nnz,))."""
        kinds = np.asarray(kinds)
        indptr = np.asarray(indptr, dtype=np.int64)
        mapping = cls(len(kinds))
        assert indptr.shape == (len(kinds) + 1,) and indptr[0] == 0 and (np.diff(indptr) >= 0).all()
        mapping._write(np.arange(len(kinds)), kinds.astype(np.int8), np.diff(indptr), indices, weights)
        return mapping

    def copy(self) -> "TokenMapping":
        """An independent copy: setting its rows leaves this mapping as it is. Base matrices are shared, not copied
        (they are read, never written)."""
        import copy

        shared = {id(mapping.bases): dict(mapping.bases) for mapping in (self, self.head) if mapping is not None}
        return copy.deepcopy(self, memo=shared)

    def __len__(self) -> int:
        return len(self._kinds)

    def __repr__(self) -> str:
        return f"TokenMapping({self.summary()})"

    # -- setting rows --------------------------------------------------------------------------------------------------

    def set_rows(self, rows, kind: Kind, sources, weights) -> None:
        """Rows (n,) become `kind`, row i mixed from sources[i] with weights[i] ((n, w) each); ids < 0 are padding
        and are dropped, so each row keeps only its own sources."""
        rows = _row_array(rows)
        if len(rows) == 0:
            return
        sources = np.asarray(sources, dtype=np.int64).reshape(len(rows), -1)
        weights = np.asarray(weights, dtype=np.float32).reshape(len(rows), -1)
        assert sources.shape == weights.shape, f"sources {sources.shape} and weights {weights.shape} differ"
        valid = sources >= 0
        self._write(rows, kind, valid.sum(axis=1), sources[valid], weights[valid])

    def set_ragged_rows(self, rows, kind: Kind, lengths, sources, weights) -> None:
        """Rows (n,) become `kind`, row i mixed from the next lengths[i] entries of the flat sources and weights
        ((sum of lengths,) each): rows of any lengths without a table padded to the longest."""
        rows = _row_array(rows)
        lengths = np.array(lengths, dtype=np.int64).reshape(-1)  # copies: a caller may reuse its arrays
        sources = np.array(sources, dtype=np.int64).reshape(-1)
        weights = np.array(weights, dtype=np.float32).reshape(-1)
        assert len(lengths) == len(rows) and (lengths >= 0).all(), "one non-negative length per row"
        assert len(sources) == len(weights) == lengths.sum(), "lengths must add up to the entries given"
        assert (sources >= 0).all(), "ragged rows hold no padding"
        self._write(rows, kind, lengths, sources, weights)

    def copy_rows(self, rows, source_ids, kind: Kind = Kind.COPIED) -> None:
        """Rows (n,) become copies (weight 1) of source rows source_ids (n,)."""
        rows = _row_array(rows)
        self.set_ragged_rows(rows, kind, np.ones(len(rows), dtype=np.int64), source_ids, np.ones(len(rows)))

    def set_kind(self, rows, kind: Kind) -> None:
        """Rows (n,) become `kind`, a kind made without sources (UNPLACED, MEAN, RANDOM); they lose any they had."""
        rule = KIND_RULES[Kind(kind)]
        assert rule.most_sources == 0 and not rule.base, f"{Kind(kind).name} rows need sources: use set_rows"
        rows = _row_array(rows)
        empty = np.zeros(0, dtype=np.int64)
        self._write(rows, kind, np.zeros(len(rows), dtype=np.int64), empty, empty.astype(np.float32))

    def add_base(self, name: str, embeddings: torch.Tensor, output_embeddings: torch.Tensor | None = None,
                 output_bias: torch.Tensor | None = None) -> None:
        """Name the matrices of a base model that BASE_PLUS_OFFSET rows start from (held by reference)."""
        assert name not in self.bases, f"base {name!r} added twice"
        self.bases[name] = BaseMatrices(embeddings, output_embeddings, output_bias)
        self._base_names.append(name)

    def set_base_rows(self, rows, base: str, base_rows, offsets: dict[str, np.ndarray] | None = None) -> None:
        """Rows (n,) become BASE_PLUS_OFFSET: row base_rows[i] of base `base`, plus offsets[matrix][i] for each
        matrix named in `offsets` ("embeddings", "output_embeddings": (n, d); "output_bias": (n,)); a matrix
        without an offset gets the base row unchanged."""
        if base not in self.bases:
            raise MissingResourceError(f"base {base!r} is not added to this mapping (add_base names its matrices; "
                                       f"added: {', '.join(self.bases) or 'none'}).")
        rows = _row_array(rows)
        base_rows = np.array(base_rows, dtype=np.int64).reshape(-1)
        assert len(base_rows) == len(rows), f"{len(base_rows)} base rows for {len(rows)} rows"
        assert ((base_rows >= 0) & (base_rows < len(self.bases[base]))).all(), f"base rows outside base {base!r}"
        checked = {}
        for which, offset in (offsets or {}).items():
            assert which in MATRICES, f"offset for unknown matrix {which!r} (one of {', '.join(MATRICES)})"
            offset = np.array(offset, dtype=np.float32)
            shape = self.bases[base].shape_of(which)
            assert offset.shape == (len(rows),) + shape, f"{which} offsets of shape {offset.shape}, not {shape}"
            assert self._offset_shapes.setdefault(which, shape) == shape, f"{which} offsets of two widths"
            checked[which] = offset
        empty = np.zeros(0, dtype=np.int64)
        self._write(rows, Kind.BASE_PLUS_OFFSET, np.zeros(len(rows), dtype=np.int64), empty,
                    empty.astype(np.float32), np.full(len(rows), self._base_names.index(base), dtype=np.int64),
                    base_rows, checked)

    def _write(self, rows, kind, lengths, sources, weights, base_codes=None, base_rows=None, offsets=None) -> None:
        assert (base_codes is not None) == (np.ndim(kind) == 0 and kind == Kind.BASE_PLUS_OFFSET), \
            "BASE_PLUS_OFFSET rows are set with set_base_rows, and only they"
        self._kinds[rows] = kind
        self._pending.append(_Write(rows, np.asarray(lengths, dtype=np.int64),
                                    np.asarray(sources, dtype=np.int64).reshape(-1),
                                    np.asarray(weights, dtype=np.float32).reshape(-1), base_codes, base_rows,
                                    offsets))
        if len(self._pending) >= MAX_PENDING:
            self._compact()

    # -- compressing ---------------------------------------------------------------------------------------------------

    def _state_as_writes(self) -> list[_Write]:
        """The compressed state as writes: every other row with its entries, then the base rows."""
        size = len(self._kinds)
        lengths = np.diff(self._indptr)
        other = np.ones(size, dtype=bool)
        other[self._base_targets] = False  # base rows hold no entries, so the entries stay in step
        writes = [_Write(np.flatnonzero(other), lengths[other], self._indices, self._weights)]
        if len(self._base_targets):
            writes.append(_Write(self._base_targets, np.zeros(len(self._base_targets), dtype=np.int64),
                                 self._indices[:0], self._weights[:0], self._base_codes, self._base_rows,
                                 dict(self._offsets)))
        return writes

    def _compact(self) -> None:
        """Merge the pending writes into the CSR arrays; the last write to a row wins."""
        if not self._pending:
            return
        size = len(self._kinds)
        writes = self._state_as_writes() + self._pending
        firsts = np.cumsum([0] + [len(write.rows) for write in writes])
        owner = np.full(size, -1, dtype=np.int64)  # the sequence number of the last write of each row
        for write, first in zip(writes, firsts):
            np.maximum.at(owner, write.rows, first + np.arange(len(write.rows)))
        lengths = np.zeros(size, dtype=np.int64)
        kept = []
        for write, first in zip(writes, firsts):
            keep = owner[write.rows] == first + np.arange(len(write.rows))
            lengths[write.rows[keep]] = write.lengths[keep]
            kept.append(keep)
        indptr = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        indices = np.empty(indptr[-1], dtype=np.int64)
        weights = np.empty(indptr[-1], dtype=np.float32)
        targets, codes, base_rows, offsets = [], [], [], {which: [] for which in self._offset_shapes}
        for write, keep in zip(writes, kept):
            kept_lengths = write.lengths[keep]
            total = int(kept_lengths.sum())
            if total:
                within = np.arange(total) - np.repeat(np.cumsum(kept_lengths) - kept_lengths, kept_lengths)
                destination = np.repeat(indptr[write.rows[keep]], kept_lengths) + within
                entries = np.repeat(keep, write.lengths)
                indices[destination] = write.sources[entries]
                weights[destination] = write.weights[entries]
            if write.base_codes is not None and keep.any():
                targets.append(write.rows[keep])
                codes.append(write.base_codes[keep])
                base_rows.append(write.base_rows[keep])
                for which, shape in self._offset_shapes.items():
                    given = write.offsets.get(which)
                    offsets[which].append(given[keep] if given is not None
                                          else np.zeros((int(keep.sum()),) + shape, dtype=np.float32))
        self._indptr, self._indices, self._weights = indptr, indices, weights
        if targets:
            order = np.argsort(np.concatenate(targets), kind="stable")
            self._base_targets = np.concatenate(targets)[order]
            self._base_codes = np.concatenate(codes)[order]
            self._base_rows = np.concatenate(base_rows)[order]
            self._offsets = {which: np.concatenate(parts)[order] for which, parts in offsets.items()}
        else:
            self._base_targets, self._base_codes, self._base_rows = (np.zeros(0, dtype=np.int64) for _ in range(3))
            self._offsets = {which: np.zeros((0,) + shape, dtype=np.float32)
                             for which, shape in self._offset_shapes.items()}
        self._pending = []

    # -- reading -------------------------------------------------------------------------------------------------------

    @staticmethod
    def _read_only(array: np.ndarray) -> np.ndarray:
        view = array.view()
        view.flags.writeable = False
        return view

    @property
    def kinds(self) -> np.ndarray:
        """(V_t,) int8 Kind of each row (read-only: the setters change kinds)."""
        return self._read_only(self._kinds)

    @property
    def indptr(self) -> np.ndarray:
        self._compact()
        return self._read_only(self._indptr)

    @property
    def indices(self) -> np.ndarray:
        self._compact()
        return self._read_only(self._indices)

    @property
    def weights(self) -> np.ndarray:
        self._compact()
        return self._read_only(self._weights)

    def row(self, token_id: int) -> tuple[np.ndarray, np.ndarray]:
        """(source ids, weights) of one target row, in the order they were set."""
        self._compact()
        start, stop = self._indptr[token_id], self._indptr[token_id + 1]
        return self._read_only(self._indices[start:stop]), self._read_only(self._weights[start:stop])

    def base_rows(self) -> tuple[np.ndarray, list[str], np.ndarray]:
        """BASE_PLUS_OFFSET rows: (target rows (m,) sorted, their bases' names (m,), their base rows (m,))."""
        self._compact()
        return (self._read_only(self._base_targets), [self._base_names[code] for code in self._base_codes],
                self._read_only(self._base_rows))

    def base_of(self, token_id: int) -> tuple[str, int] | None:
        """(base name, base row) of a BASE_PLUS_OFFSET row; None for any other."""
        self._compact()
        at = int(np.searchsorted(self._base_targets, token_id))
        if at < len(self._base_targets) and self._base_targets[at] == token_id:
            return self._base_names[self._base_codes[at]], int(self._base_rows[at])
        return None

    def offsets(self, which: str) -> np.ndarray | None:
        """(m, d) or (m,) offsets of matrix `which` for the rows of `base_rows()` (zero rows where a row was given
        none), or None where no row has one for `which`."""
        self._compact()
        return self._read_only(self._offsets[which]) if which in self._offsets else None

    @property
    def width(self) -> int:
        """Entries of the longest row."""
        return int(np.diff(self.indptr).max(initial=0))

    @property
    def nbytes(self) -> int:
        """Bytes of the compressed arrays (not the base matrices, which are held by reference)."""
        self._compact()
        arrays = [self._kinds, self._indptr, self._indices, self._weights, self._base_targets, self._base_codes,
                  self._base_rows, *self._offsets.values()]
        return sum(array.nbytes for array in arrays)

    def rows_of(self, kind: Kind) -> np.ndarray:
        return np.flatnonzero(self._kinds == kind)

    def counts(self) -> dict[str, int]:
        return {kind.name.lower(): int((self._kinds == kind).sum()) for kind in Kind if (self._kinds == kind).any()}

    def summary(self) -> str:
        parts = [f"{name} {count:,}" for name, count in self.counts().items()]
        return " | ".join(parts + [f"total {len(self):,}"])

    # -- the rules -----------------------------------------------------------------------------------------------------

    def check(self, source_rows: int) -> None:
        """Every row keeps its kind's rule (KIND_RULES), and every row is placed; raises AssertionError naming the
        first row that does not. `source_rows` is the number of source rows ids may point at."""
        self._compact()
        size = len(self._kinds)
        known = np.isin(self._kinds, [int(kind) for kind in Kind])
        if not known.all():
            row = int(np.flatnonzero(~known)[0])
            raise AssertionError(f"row {row} has kind {int(self._kinds[row])}, which is no Kind")
        lengths = np.diff(self._indptr)
        entry_rows = np.repeat(np.arange(size), lengths)
        bad = (self._indices < 0) | (self._indices >= source_rows) | ~np.isfinite(self._weights)
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            raise AssertionError(f"row {int(entry_rows[at])} has source {int(self._indices[at])} with weight "
                                 f"{float(self._weights[at])}; sources are rows 0..{source_rows - 1} with finite "
                                 "weights")
        sums = np.bincount(entry_rows, weights=self._weights.astype(np.float64), minlength=size)
        negative = np.bincount(entry_rows, weights=self._weights < 0, minlength=size) > 0
        not_one = np.bincount(entry_rows, weights=self._weights != 1.0, minlength=size) > 0
        is_base = np.zeros(size, dtype=bool)
        is_base[self._base_targets] = True
        for kind, rule in KIND_RULES.items():
            rows = np.flatnonzero(self._kinds == kind)
            if len(rows) == 0:
                continue
            name = kind.name.lower()
            if kind == Kind.UNPLACED:
                raise AssertionError(f"{len(rows):,} rows are unplaced (row {int(rows[0])} first); the fallback "
                                     "places every row")
            count = lengths[rows]
            wrong = (count < rule.fewest_sources) | ((count > rule.most_sources) if rule.most_sources is not None
                                                     else False)
            _refuse(rows, wrong, lambda row: f"row {row} ({name}) has {lengths[row]} sources; a {name} row has "
                    + _count_phrase(rule))
            if rule.weights == "one":
                _refuse(rows, not_one[rows], lambda row: f"row {row} ({name}) has weights {self.row(row)[1]}; a "
                        f"{name} row has the single weight 1")
            elif rule.weights == "distribution":
                _refuse(rows, negative[rows] | (np.abs(sums[rows] - 1.0) > SUM_TOLERANCE),
                        lambda row: f"row {row} ({name}) has weights summing to {sums[row]:.6f} (smallest "
                                    f"{self.row(row)[1].min():.6f}); a {name} row's weights are non-negative and "
                                    "sum to 1")
            _refuse(rows, is_base[rows] != rule.base,
                    lambda row: f"row {row} ({name}) {'lacks' if rule.base else 'has'} a base row")
        for which, offsets in self._offsets.items():
            finite = np.isfinite(offsets.reshape(len(offsets), -1)).all(axis=1)
            _refuse(self._base_targets, ~finite, lambda row: f"row {row} has a non-finite {which} offset")
        for code, name in enumerate(self._base_names):
            chosen = self._base_codes == code
            _refuse(self._base_targets[chosen], self._base_rows[chosen] >= len(self.bases[name]),
                    lambda row: f"row {row} starts from a row outside base {name!r}")


def _count_phrase(rule: KindRule) -> str:
    if rule.most_sources == rule.fewest_sources:
        return f"exactly {rule.fewest_sources}"
    return f"at least {rule.fewest_sources}" if rule.most_sources is None else \
        f"{rule.fewest_sources} to {rule.most_sources}"


def _refuse(rows: np.ndarray, wrong: np.ndarray, message) -> None:
    if np.any(wrong):
        first = np.flatnonzero(wrong)
        extra = f" ({len(first):,} rows break it)" if len(first) > 1 else ""
        raise AssertionError(message(int(rows[first[0]])) + extra)


# -- from a mapping to matrices ----------------------------------------------------------------------------------------

STATS_ROWS = 2048  # rows of a table converted to float64 at a time for its column statistics


def column_stats(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std) of each column of `matrix` (or of a vector), as float32. A float32 matrix gives torch's own
    `mean` and `std`; a matrix in another dtype is summed in float64 over blocks of rows, never converted whole."""
    if matrix.dtype == torch.float32:
        return matrix.mean(dim=0), matrix.std(dim=0)
    rows = matrix.shape[0]
    total = torch.zeros(matrix.shape[1:], dtype=torch.float64)
    squares = torch.zeros(matrix.shape[1:], dtype=torch.float64)
    for start in range(0, rows, STATS_ROWS):
        block = matrix[start:start + STATS_ROWS].to(torch.float64)
        total += block.sum(dim=0)
        squares += (block * block).sum(dim=0)
    mean = total / rows
    variance = (squares - rows * mean * mean).clamp_min(0) / max(rows - 1, 1)
    return mean.to(torch.float32), variance.sqrt().to(torch.float32)


def random_rows(matrix: torch.Tensor, count: int, seed: int, stream: int,
                rows: np.ndarray | None = None) -> torch.Tensor:
    """(count, d) rows ~ N(mean_j, std_j) per dimension j of `matrix` (or (count,) for a vector); with `rows`, only
    those of the count rows (drawn in blocks, so row i is the same whichever others are asked for)."""
    chosen = np.arange(count) if rows is None else np.asarray(rows, dtype=np.int64)
    out = torch.empty((len(chosen),) + tuple(matrix.shape[1:]), dtype=torch.float32)
    for where, values in random_row_blocks(matrix, count, seed, stream, chosen):
        out[torch.from_numpy(where)] = values
    return out


def random_row_blocks(matrix: torch.Tensor, count: int, seed: int, stream: int, rows: np.ndarray):
    """`random_rows` a block at a time: (positions in `rows`, float32 values) for each block of at most about 2 MiB
    of noise, so a caller can write them where they go without holding them all."""
    mean, std = (stat.numpy() for stat in column_stats(matrix.detach()))
    generator = np.random.default_rng([seed, stream])
    rows = np.asarray(rows, dtype=np.int64)
    block = max(1, STATS_ROWS * 64 // max(int(np.prod(matrix.shape[1:], dtype=np.int64)), 1))
    for start in range(0, count, block):
        noise = generator.standard_normal((min(block, count - start),) + tuple(matrix.shape[1:]))
        chosen = np.flatnonzero((rows >= start) & (rows < start + len(noise)))
        if len(chosen):
            yield chosen, torch.from_numpy(mean + std * noise[rows[chosen] - start].astype(np.float32))


def build_matrix(mapping: TokenMapping, matrix: torch.Tensor, seed: int, which: str = "embeddings",
                 dtype: torch.dtype | None = None, after: torch.Tensor | None = None) -> torch.Tensor:
    """Apply a finished mapping to one source matrix (V_s, d) or bias (V_s,); returns (V_t, ...) in `dtype` (default:
    the matrix's own).

    `which` names the matrix (one of MATRICES): it picks the random stream (0, 1, 2) and, for BASE_PLUS_OFFSET rows,
    the base matrix and the offsets, as KIND_RULES states per kind. Mixed rows are summed in float32 in blocks of
    rows (`mix_csr_rows`), whatever the matrix's dtype: the only (V_t, d) array is the result. `after`: rows that
    follow the mapping's (an extension's padding), written into the same result rather than concatenated to it.
    """
    stream = MATRICES.index(which)
    table = matrix.detach()
    mapping._compact()  # the writable arrays themselves: torch warns on views of read-only ones
    extra = 0 if after is None else len(after)
    out = mix_csr_rows(table, mapping._indptr, mapping._indices, mapping._weights, dtype=dtype or matrix.dtype,
                       rows=len(mapping) + extra)
    if extra:
        out[len(mapping):] = after.to(out.dtype)
    mean_rows = mapping.rows_of(Kind.MEAN)
    if len(mean_rows):
        out[torch.from_numpy(mean_rows)] = column_stats(table)[0].to(out.dtype)
    random = mapping.rows_of(Kind.RANDOM)
    if len(random):
        # drawn for every target row so a token's random row does not depend on which other rows are random
        for where, values in random_row_blocks(table, len(mapping), seed, stream, random):
            out[torch.from_numpy(random[where])] = values.to(out.dtype)
    targets, names, base_rows = mapping.base_rows()
    if len(targets):
        offsets = mapping.offsets(which)
        names = np.asarray(names)
        for name in dict.fromkeys(names):
            chosen = np.flatnonzero(names == name)
            base = mapping.bases[name]
            assert base.shape_of(which) == tuple(table.shape[1:]), \
                f"base {name!r} rows of shape {base.shape_of(which)} for a {which} of rows {tuple(table.shape[1:])}"
            values = base.rows(which, base_rows[chosen])
            if offsets is not None:
                values = values + torch.from_numpy(offsets[chosen])
            out[torch.from_numpy(np.array(targets[chosen]))] = values.to(out.dtype)
    assert not (mapping.kinds == Kind.UNPLACED).any(), "finish() must place every row"
    return out
