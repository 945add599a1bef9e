"""Language-model quality on held-out text.

- Causal LM: perplexity (per token) and bits per byte (total negative log-likelihood in bits over the UTF-8 bytes of
  the text). Token perplexities of models with different tokenizers do not compare; bits per byte do. Each line is
  scored on its own, after the tokenizer's bos token (or eos where there is no bos, as GPT-2 does), so the first
  token is predicted too. Lines longer than the context are scored in windows that overlap by half, each token
  scored once with as much left context as the window allows.
- Masked LM: pseudo-perplexity (Salazar et al., 2020): each token masked in turn and scored given all the others.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from langswap.errors import VocabularyError

LN2 = math.log(2)


@dataclass
class LMScore:
    lines: int
    tokens: int
    bytes: int
    nll: float  # total negative log-likelihood, nats
    perplexity: float
    bits_per_byte: float
    kind: str = "perplexity"  # or "pseudo-perplexity"

    def as_dict(self) -> dict:
        return {key: (round(value, 5) if isinstance(value, float) else value) for key, value in asdict(self).items()}


def _score(lines: list[str], tokens: int, nll: float, kind: str) -> LMScore:
    n_bytes = sum(len(line.encode("utf-8")) for line in lines)
    return LMScore(len(lines), tokens, n_bytes, nll, math.exp(nll / max(tokens, 1)), nll / LN2 / max(n_bytes, 1), kind)


def _context_length(model, max_length: int | None) -> int:
    limit = getattr(model.config, "max_position_embeddings", None) or 1024
    return min(limit, max_length or 1024)


def _windows(sequence: list[int], window: int) -> list[tuple[list[int], int]]:
    """(input ids, number of leading positions whose targets were scored by an earlier window)."""
    if len(sequence) <= window:
        return [(sequence, 0)]
    stride = max(1, window // 2)
    out, scored_until = [], 0  # tokens 1 .. scored_until have been scored
    start = 0
    while True:
        stop = min(start + window, len(sequence))
        chunk = sequence[start:stop]
        out.append((chunk, max(0, scored_until - start)))
        scored_until = stop - 1
        if stop == len(sequence):
            return out
        start += stride


@torch.no_grad()
def causal_lm_score(model, tokenizer, lines: list[str], max_length: int | None = None, batch_tokens: int = 4096,
                    progress: bool = False) -> LMScore:
    """Perplexity and bits per byte of a causal LM on `lines` (each scored on its own)."""
    prefix = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    window = _context_length(model, max_length)
    encoded = tokenizer(lines, add_special_tokens=False)["input_ids"]
    pieces: list[tuple[list[int], int]] = []
    for ids in encoded:
        sequence = ([prefix] if prefix is not None else []) + list(ids)
        if len(sequence) >= 2:
            pieces.extend(_windows(sequence, window))
    pieces.sort(key=lambda piece: len(piece[0]))
    device = next(model.parameters()).device
    total_nll, total_tokens = 0.0, 0
    bar = _bar(progress, len(pieces), "scoring")
    start = 0
    while start < len(pieces):
        stop = start + 1
        while stop < len(pieces) and (stop - start + 1) * len(pieces[stop][0]) <= batch_tokens:
            stop += 1
        batch = pieces[start:stop]
        longest = max(len(ids) for ids, _ in batch)
        input_ids = torch.zeros((len(batch), longest), dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        target_mask = torch.zeros((len(batch), longest - 1), dtype=torch.bool)
        for row, (ids, skip) in enumerate(batch):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
            target_mask[row, skip:len(ids) - 1] = True
        logits = model(input_ids=input_ids.to(device), attention_mask=attention.to(device)).logits[:, :-1].float()
        log_probs = torch.log_softmax(logits, dim=-1)
        targets = input_ids[:, 1:].to(device)
        picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        mask = target_mask.to(device)
        total_nll -= float(picked[mask].double().sum())
        total_tokens += int(mask.sum())
        if bar is not None:
            bar.update(len(batch))
        start = stop
    if bar is not None:
        bar.close()
    return _score(lines, total_tokens, total_nll, "perplexity")


@torch.no_grad()
def pseudo_perplexity(model, tokenizer, lines: list[str], max_length: int | None = None, batch_size: int = 64,
                      progress: bool = False) -> LMScore:
    """Pseudo-perplexity of a masked LM (Salazar et al., 2020) and the matching bits per byte."""
    if tokenizer.mask_token_id is None:
        raise VocabularyError("pseudo-perplexity needs a tokenizer with a mask token; this one has none (is the "
                              "model a causal LM? use perplexity instead).")
    window = _context_length(model, max_length)
    device = next(model.parameters()).device
    special = set(tokenizer.all_special_ids)
    total_nll, total_tokens = 0.0, 0
    bar = _bar(progress, len(lines), "pseudo-perplexity")
    for line in lines:
        ids = tokenizer(line, truncation=True, max_length=window)["input_ids"]
        positions = [i for i, token in enumerate(ids) if token not in special]
        base = torch.tensor(ids)
        for start in range(0, len(positions), batch_size):
            chunk = positions[start:start + batch_size]
            batch = base.repeat(len(chunk), 1)
            rows = torch.arange(len(chunk))
            where = torch.tensor(chunk)
            batch[rows, where] = tokenizer.mask_token_id
            logits = model(input_ids=batch.to(device)).logits.float()
            log_probs = torch.log_softmax(logits[rows, where], dim=-1)
            total_nll -= float(log_probs[rows, base[where]].double().sum())
            total_tokens += len(chunk)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return _score(lines, total_tokens, total_nll, "pseudo-perplexity")


def evaluate_model(model, tokenizer, lines: list[str], objective: str, progress: bool = False, **options) -> LMScore:
    if objective == "masked":
        return pseudo_perplexity(model, tokenizer, lines, progress=progress, **options)
    return causal_lm_score(model, tokenizer, lines, progress=progress, **options)


def _bar(progress: bool, total: int, desc: str):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="seq")
