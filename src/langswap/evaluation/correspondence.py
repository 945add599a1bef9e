"""Correspondence tables: target tokens with the source tokens they were made from (WECHSEL's Table 6)."""

from __future__ import annotations

import numpy as np

from langswap.methods.base import Kind, TokenMapping
from langswap.tokens import Vocabulary


def show_token(vocabulary: Vocabulary, token_id: int) -> str:
    """A token for people: `_` marks a word start; specials and partial UTF-8 as in the vocabulary."""
    token = vocabulary[token_id]
    text = token.text if token.text is not None else token.token
    return ("_" if token.word_start else "") + text if not token.special else token.token


def token_sources(mapping: TokenMapping, token_id: int) -> list[tuple[int, float]]:
    """(source id, weight) pairs a target row was made from, heaviest first."""
    order = np.argsort(-mapping.weights[token_id], kind="stable")
    return [(int(mapping.sources[token_id, j]), float(mapping.weights[token_id, j]))
            for j in order if mapping.sources[token_id, j] >= 0]


def kind_name(mapping: TokenMapping, token_id: int) -> str:
    return Kind(int(mapping.kinds[token_id])).name.lower()


def correspondence_rows(mapping: TokenMapping, source: Vocabulary, target: Vocabulary, count: int = 12,
                        seed: int = 0, min_length: int = 4, token_ids: list[int] | None = None) -> list[dict]:
    """`count` sampled (or the given) target tokens: kind and [(source token, weight)] best first.

    Sampled tokens are word starts of at least `min_length` characters made by mixing, the interesting case."""
    if token_ids is None:
        candidates = [t.id for t in target.tokens if mapping.kinds[t.id] == Kind.MIXED and t.word_start
                      and t.text is not None and len(t.text) >= min_length]
        rng = np.random.default_rng(seed)
        token_ids = sorted(rng.choice(candidates, size=min(count, len(candidates)), replace=False).tolist()) \
            if candidates else []
    rows = []
    for token_id in token_ids:
        sources = [(show_token(source, source_id), weight) for source_id, weight in token_sources(mapping, token_id)]
        rows.append({"id": int(token_id), "token": show_token(target, token_id), "kind": kind_name(mapping, token_id),
                     "sources": sources})
    return rows


def format_correspondence(rows: list[dict], top: int = 3) -> str:
    """A markdown table: target token | how made | top source tokens with weights."""
    lines = ["| target token | made by | nearest source tokens (weight) |", "|---|---|---|"]
    for row in rows:
        sources = ", ".join(f"{name} ({weight:.2f})" for name, weight in row["sources"][:top]) or "-"
        lines.append(f"| {row['token']} | {row['kind']} | {sources} |")
    return "\n".join(lines)
