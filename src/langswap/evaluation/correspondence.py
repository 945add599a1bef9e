"""Correspondence tables: target tokens with the source tokens they were made from (WECHSEL's Table 6).

Rows are read from the mapping row by row (`langswap.methods.provenance`, which `provenance.tsv` reads too)."""

from __future__ import annotations

import numpy as np

from langswap.methods.mapping import Kind, TokenMapping
from langswap.methods.provenance import base_name, kind_name, show_token, token_sources
from langswap.tokens import Vocabulary

__all__ = ["correspondence_rows", "format_correspondence", "kind_name", "show_token", "token_sources"]


def correspondence_rows(mapping: TokenMapping, source: Vocabulary, target: Vocabulary, count: int = 12,
                        seed: int = 0, min_length: int = 4, token_ids: list[int] | None = None) -> list[dict]:
    """`count` sampled (or the given) target tokens: kind and [(source token, weight)] best first.

    Sampled tokens are word starts of at least `min_length` characters made from what they mean (mixed from aligned
    neighbours, or from dictionary translations), the interesting case."""
    if token_ids is None:
        meaning = np.isin(mapping.kinds, [Kind.MIXED, Kind.TRANSLATED])
        candidates = [t.id for t in target.tokens if meaning[t.id] and t.word_start
                      and t.text is not None and len(t.text) >= min_length]
        rng = np.random.default_rng(seed)
        token_ids = sorted(rng.choice(candidates, size=min(count, len(candidates)), replace=False).tolist()) \
            if candidates else []
    rows = []
    for token_id in token_ids:
        sources = [(show_token(source, source_id), weight) for source_id, weight in token_sources(mapping, token_id)]
        row = {"id": int(token_id), "token": show_token(target, token_id), "kind": kind_name(mapping, token_id),
               "sources": sources}
        base = base_name(mapping, token_id)
        if base is not None:
            row["base"] = base  # `NAME[ROW]`: a base row plus an offset, made from no source token
        rows.append(row)
    return rows


def format_correspondence(rows: list[dict], top: int = 3) -> str:
    """A markdown table: target token | how made | top source tokens with weights."""
    lines = ["| target token | made by | nearest source tokens (weight) |", "|---|---|---|"]
    for row in rows:
        sources = ", ".join(f"{name} ({weight:.2f})" for name, weight in row["sources"][:top]) \
            or (f"{row['base']} + offset" if row.get("base") else "-")
        lines.append(f"| {row['token']} | {row['kind']} | {sources} |")
    return "\n".join(lines)
