"""How each target row was made, for people: `provenance.tsv`, and the error that names non-finite new rows.

Both read a `TokenMapping` row by row (its compressed rows; nothing is widened to a table). The correspondence
table (`langswap.evaluation.correspondence`) reads the same functions. `write_table` writes every provenance file,
the transfer's (`write_provenance`) and `langswap enrich`'s, whose columns are its own (translations, change of
norm). Fields are written as given: a tab or newline inside one is not escaped (tokens are shown with `repr`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from langswap.errors import NumericalError
from langswap.methods.mapping import Kind, TokenMapping
from langswap.numerics import non_finite_rows
from langswap.tokens import Vocabulary


def show_token(vocabulary: Vocabulary, token_id: int) -> str:
    """A token for people: `_` marks a word start; specials and partial UTF-8 as in the vocabulary."""
    token = vocabulary[token_id]
    text = token.text if token.text is not None else token.token
    return ("_" if token.word_start else "") + text if not token.special else token.token


def token_sources(mapping: TokenMapping, token_id: int) -> list[tuple[int, float]]:
    """(source id, weight) pairs a target row was made from, heaviest first (by magnitude: a COMBINED row's
    coefficients may be negative; ties in the order they were set)."""
    sources, weights = mapping.row(token_id)
    order = np.argsort(-np.abs(weights), kind="stable")
    return [(int(sources[j]), float(weights[j])) for j in order]


def kind_name(mapping: TokenMapping, token_id: int) -> str:
    return Kind(int(mapping.kinds[token_id])).name.lower()


def base_name(mapping: TokenMapping, token_id: int) -> str | None:
    """`NAME[ROW]` of a BASE_PLUS_OFFSET row's base row; None for any other row."""
    base = mapping.base_of(token_id)
    return None if base is None else f"{base[0]}[{base[1]}]"


def write_table(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    """A provenance file: a line of column names, then one tab-separated line per row (each field as `str` gives
    it)."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\t".join(header) + "\n")
        handle.writelines("\t".join(map(str, row)) + "\n" for row in rows)


def write_provenance(path: Path, mapping: TokenMapping, source: Vocabulary, target: Vocabulary) -> None:
    """One line per target token: id, token, how made, source tokens with weights (`ID:'TOKEN':WEIGHT` each, heaviest
    first), or for a BASE_PLUS_OFFSET row its base row as `NAME[ROW]+offset`."""
    indptr, indices, weights, kinds = mapping.indptr, mapping.indices, mapping.weights, mapping.kinds
    names = {int(kind): Kind(int(kind)).name.lower() for kind in np.unique(kinds)}
    base_targets, base_names, base_rows = mapping.base_rows()
    bases = {int(row): f"{name}[{int(base)}]+offset" for row, name, base in zip(base_targets, base_names, base_rows)}
    # every row's sources, heaviest first (ties in stored order), formatted at once
    rows_of = np.repeat(np.arange(len(mapping)), np.diff(indptr))
    order = np.lexsort((np.arange(len(weights)), -np.abs(weights), rows_of))
    shown = {int(source_id): f"{int(source_id)}:{show_token(source, int(source_id))!r}:"
             for source_id in np.unique(indices)}  # each source token spelled once, however many rows name it
    entries = [shown[source_id] + f"{weight:.4f}"
               for source_id, weight in zip(indices[order].tolist(), weights[order].tolist())]

    def sources(token_id: int) -> str:
        base = bases.get(token_id)
        return base if base is not None else " ".join(entries[int(indptr[token_id]):int(indptr[token_id + 1])])

    write_table(path, ("id", "token", "kind", "sources"),
                ((token_id, repr(show_token(target, token_id)), names[int(kinds[token_id])], sources(token_id))
                 for token_id in range(len(mapping))))


def refuse_non_finite_rows(result, inputs) -> None:
    """A method's matrices must be finite: a NaN row would be written into the model and spread through training.

    `result` is a MethodResult and `inputs` its TransferInputs."""
    for what, matrix in (("input embeddings", result.embeddings), ("output embeddings", result.output_embeddings),
                         ("output bias", result.output_bias)):
        if matrix is None:
            continue
        rows = non_finite_rows(matrix).tolist()
        if rows:
            shown = "; ".join(f"{row} {show_token(inputs.target, row)!r} ({kind_name(result.mapping, row)} from "
                              + _made_from(result.mapping, inputs.source, row) + ")" for row in rows[:5])
            raise NumericalError(
                f"the new {what} hold NaN or infinite values in {len(rows):,} rows ({shown}"
                f"{'; ...' if len(rows) > 5 else ''}); nothing was written. The source rows they are made from, or "
                "the word vectors, hold non-finite values: check the source model with `langswap evaluate` and the "
                "vector files.")


def _made_from(mapping: TokenMapping, source: Vocabulary, row: int) -> str:
    base = base_name(mapping, row)
    if base is not None:
        return f"{base} plus an offset"
    return ", ".join(f"{source_id} {show_token(source, source_id)!r}"
                     for source_id, _ in token_sources(mapping, row)) or "no source"
