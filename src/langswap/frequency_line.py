"""The frequency line calibration moves rows towards, and the head inputs it reads: shared by the transfer's
calibration (`langswap.transfer.calibrate`, whose module docstring gives the method) and training's recalibration of
the rows a run shows too rarely (`langswap.training.recalibrated_rows`).

A text's token counts become log-frequencies for new text: its last `check_lines` lines are kept out of the counts
and read by a tokenizer like the target's trained on the counted lines alone (`proxy_counts`), and on them the counts
are smoothed (add-k, `choose_smoothing`) or held out (`held_out_log_frequencies`). `mean_head_input` is the mean of
the hidden states the output head reads over a text.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from langswap.batching import length_batches, right_pad
from langswap.errors import ConfigError, LangswapError
from langswap.progress import bar as progress_bar
from langswap.resources.tokenizer import token_counts, train_tokenizer_on_lines

logger = logging.getLogger(__name__)

LINES = 20000  # lines of text counted
CHECK_LINES = 100  # lines after them kept out of the counts, on which new text's frequencies are measured
HIDDEN_LINES = 200  # lines whose head inputs are averaged
MAX_LENGTH = 128  # tokens of each line read for the head inputs


@dataclass(frozen=True, kw_only=True)
class LineSettings:
    """What `frequency_line` reads of its settings (`CalibrationConfig` has the same fields)."""

    lines: int = LINES
    check_lines: int = CHECK_LINES
    frequencies: str = "add-k"
    smoothing: float | None = None


def smoothed_log_frequencies(counts: np.ndarray, smoothing: float) -> np.ndarray:
    """log of add-`smoothing` relative frequencies of `counts`."""
    return np.log((counts + smoothing) / (counts.sum() + smoothing * len(counts)))


# Never less than add-half: below it the retrained tokenizer's verdict was not borne out on held-out development
# lines (docs/design.md, "Counts are smoothed for new text").
SMOOTHING_GRID = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
FALLBACK_SMOOTHING = 0.5


def proxy_counts(tokenizer, counted: list[str], held: list[str]) -> tuple[np.ndarray, np.ndarray] | str:
    """(token counts of `counted`, token counts of `held`), both read by a tokenizer like `tokenizer` (its family
    and size) trained on `counted` alone; or, where there is none (a slow tokenizer, a failed retraining, check
    lines without tokens), why.

    Why a tokenizer of its own: calibration text is usually the text the target tokenizer was trained on, and a
    tokenizer reading its own training text has a token for most of its words, while words it never saw split into
    pieces that such counts hardly contain (intermediate merges of BPE). Counted by the target tokenizer, held-out
    lines of that text are not new to it; read by a tokenizer that never saw them, they are new text, as the text a
    transferred model meets is new to its tokenizer."""
    try:
        proxy = train_tokenizer_on_lines(tokenizer, counted, len(tokenizer), keep_placeholders=True,
                                         count_never_shown=False).tokenizer
        size = len(proxy)
        counts, held_counts = token_counts(proxy, counted, size), token_counts(proxy, held, size)
    except LangswapError as error:  # a slow tokenizer: no Rust trainer
        return f"no tokenizer could be trained on the text ({error})"
    except Exception as error:  # noqa: BLE001 - the Rust trainer and tokenizer raise bare Exceptions
        # (a Unigram tokenizer without an unk id retrained on text that lacks a character of the check lines)
        logger.warning("calibration frequencies: the tokenizer retrained on the counted lines failed (%s: %s); "
                       "add-%g smoothing is used", type(error).__name__, error, FALLBACK_SMOOTHING)
        return f"the tokenizer retrained on the counted lines failed ({type(error).__name__}: {error})"
    if not held_counts.sum():
        return "the check lines have no tokens"
    return counts, held_counts


def choose_smoothing(tokenizer, counted: list[str], held: list[str],
                     proxy: tuple[np.ndarray, np.ndarray] | str | None = None) -> dict:
    """The add-k pseudo-count of SMOOTHING_GRID under which the token counts of `counted` best predict the tokens of
    `held` (lowest cross-entropy), both read by a tokenizer like `tokenizer` trained on `counted` alone
    (`proxy_counts`, or `proxy` where the caller has it). Returns {"smoothing": k, "cross_entropy": {k: nats per
    token}} or, where there is no such tokenizer, {"smoothing": 0.5, "fallback": why}."""
    proxy = proxy_counts(tokenizer, counted, held) if proxy is None else proxy
    if isinstance(proxy, str):
        return {"smoothing": FALLBACK_SMOOTHING, "fallback": proxy}
    counts, held_counts = proxy
    entropy = {k: float(-(held_counts * smoothed_log_frequencies(counts, k)).sum() / held_counts.sum())
               for k in SMOOTHING_GRID}
    best = min(entropy, key=entropy.get)
    report = {"smoothing": best, "cross_entropy": {f"{k:g}": round(value, 4) for k, value in entropy.items()}}
    if best in (SMOOTHING_GRID[0], SMOOTHING_GRID[-1]):
        report["at_edge"] = True  # the best pseudo-count may lie beyond the grid
    return report


HELD_OUT_COUNTS = 3  # counts 0, 1 and 2 each get the frequency their class shows in new text


def held_out_log_frequencies(counts: np.ndarray, proxy: tuple[np.ndarray, np.ndarray],
                             below: int = HELD_OUT_COUNTS) -> tuple[np.ndarray, dict]:
    """((size,) log-frequencies for the token `counts` of the counted lines, a report), by held-out estimation
    (Jelinek and Mercer 1985) on `proxy`: the counts of the counted lines and of the check lines by a tokenizer
    trained on the counted lines alone (`proxy_counts`).

    A token counted r < `below` times gets the mean share of the check lines' tokens that the proxy's tokens
    counted r times have; a token counted more often gets its relative frequency, scaled by the share of the check
    lines those tokens have together. Unlike add-k, this need not rank an unseen token below one seen once: a
    tokenizer trained on a text has tokens for that text's words, while new words split into pieces the text
    rarely shows whole (the intermediate merges of BPE), so in new text the tokens its training text never showed
    can be more frequent than those it showed once. A class the proxy lacks, or one the check lines never show, gets
    half an occurrence of the check lines spread over its tokens."""
    proxy_counted, proxy_held = proxy
    held_total = float(proxy_held.sum())
    frequent = proxy_counted >= below
    scale = (float(proxy_held[frequent].sum()) / held_total) / (
        float(proxy_counted[frequent].sum()) / max(float(proxy_counted.sum()), 1.0)) if frequent.any() else 1.0
    frequencies = counts / max(float(counts.sum()), 1.0) * scale
    per_count = {}
    for r in range(below):
        members = proxy_counted == r
        share = max(float(proxy_held[members].sum()), 0.5) / (max(int(members.sum()), 1) * held_total)
        frequencies = np.where(counts == r, share, frequencies)
        per_count[str(r)] = {"tokens": int((counts == r).sum()), "frequency": float(f"{share:.4g}")}
    return np.log(frequencies / frequencies.sum()), {
        "estimate": "held-out", "per_count": per_count, "above": {"from_count": below, "scale": round(scale, 4)},
        "check_tokens": int(held_total)}


def frequency_line(tokenizer, lines: list[str], size: int, config: LineSettings) \
        -> tuple[np.ndarray, dict, np.ndarray]:
    """((size,) log-frequencies calibration moves rows towards, how they were estimated, (size,) each token's count
    on the counted lines): counted on the lines `split_check_lines` keeps for counting (up to `config.lines`), then
    estimated as `config.frequencies` says (`held_out_log_frequencies`, or add-k smoothing by `config.smoothing` or,
    unset, by `choose_smoothing`), on the check lines read by a tokenizer trained without them."""
    counted, held = split_check_lines(lines, config)
    counted = counted[:config.lines]
    counts = token_counts(tokenizer, counted, size)
    estimate = config.frequencies
    if estimate == "add-k" and config.smoothing is not None:
        how = {"estimate": "add-k", "smoothing": config.smoothing, "set": "calibration.smoothing"}
    elif not held:
        how = {"estimate": "add-k", "smoothing": FALLBACK_SMOOTHING,
               "fallback": "no check lines (check_lines: 0, or too little text)"}
    else:
        proxy = proxy_counts(tokenizer, counted, held)
        if estimate == "held-out" and not isinstance(proxy, str):
            logf, how = held_out_log_frequencies(counts, proxy)
            logger.info("calibration frequencies held out: in new text (%d check lines read by a tokenizer trained "
                        "without them) a token counted %s", len(held), ", ".join(
                            f"{r} times has frequency {v['frequency']:.3g}" for r, v in how["per_count"].items()))
            return logf, how, counts
        how = {"estimate": "add-k", **choose_smoothing(tokenizer, counted, held, proxy)}
        logger.info("calibration counts smoothed by %g (chosen on %d check lines read by a tokenizer trained "
                    "without them)%s", how["smoothing"], len(held),
                    f"; {how['fallback']}" if "fallback" in how else "")
    return smoothed_log_frequencies(counts, how["smoothing"]), how, counts


class _HeadReached(Exception):
    """Raised by a forward pre-hook on the output head once it has the head's input, so the head itself is never
    computed (`body_reader`)."""


@contextmanager
def body_reader(model):
    """Within the block, `read(input_ids, attention_mask)` runs the model (in eval mode, its mode restored after) as
    far as its output head and returns the (batch, length, d) hidden states the head would read, as the model
    computes them; the head itself is never computed."""
    head = model.get_output_embeddings()
    caught: list[torch.Tensor] = []

    def record(module, args):
        caught.append(args[0].detach())
        raise _HeadReached

    device = next(model.parameters()).device

    def read(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        caught.clear()
        try:
            model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device))
        except _HeadReached:
            pass
        return caught.pop()

    handle = head.register_forward_pre_hook(record)
    was_training = model.training
    model.eval()
    try:
        yield read
    finally:
        handle.remove()
        model.train(was_training)


@torch.no_grad()
def read_head_inputs(model, tokenizer, lines: list[str], max_length: int, take, batch_tokens: int = 4096,
                     progress: bool = False, label: str = "calibration", with_ids: bool = False) -> None:
    """Call `take((positions, d) float32 tensor)` with the hidden states the output head reads at every position of
    `lines` (each read up to `max_length` tokens, with the tokenizer's special tokens), a batch of about
    `batch_tokens` tokens at a time, right-padded (a causal model's real positions never see the padding); the
    forward stops where the head would start. `with_ids`: `take(states, ids)` with the batch's token ids too (a list
    per line, the states being their positions line after line)."""
    encoded = [ids for ids in tokenizer(lines, truncation=True, max_length=max_length)["input_ids"] if ids]
    encoded.sort(key=len)
    if not encoded:
        raise ConfigError(f"{label}: the text gave no tokens to read; give text in the language it is for.")
    bar = progress_bar(progress, len(encoded), label, "line")
    try:
        with body_reader(model) as read:
            for start, stop in length_batches([len(ids) for ids in encoded], batch_tokens):
                batch = encoded[start:stop]
                input_ids, attention = right_pad(batch, 0)
                hidden = read(input_ids, attention)
                states = hidden[attention.bool().to(hidden.device)].to(torch.float32)
                take(states, batch) if with_ids else take(states)
                if bar is not None:
                    bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()


def mean_head_input(model, tokenizer, lines: list[str], max_length: int, batch_tokens: int = 4096,
                    progress: bool = False, keep_states: bool = False):
    """(d,) float32 mean of the hidden states the output head reads, over every position of `lines`
    (`read_head_inputs`); with `keep_states`, (that mean, the (positions, d) states themselves, on the CPU), read
    once."""
    sums, states = [], []

    def take(hidden):
        sums.append((hidden.sum(dim=0), hidden.shape[0]))
        if keep_states:
            states.append(hidden.cpu())

    read_head_inputs(model, tokenizer, lines, max_length, take, batch_tokens, progress)
    mean = sum(total for total, _ in sums) / sum(count for _, count in sums)
    return (mean, torch.cat(states)) if keep_states else mean


def split_check_lines(lines: list[str], config: LineSettings) -> tuple[list[str], list[str]]:
    """(lines counted, lines held out for the check): the last `check_lines` check where the text has at least twice
    as many lines; otherwise every line is counted and there is no check."""
    if config.check_lines and len(lines) >= 2 * config.check_lines:
        return lines[:-config.check_lines], lines[-config.check_lines:]
    return lines, []
