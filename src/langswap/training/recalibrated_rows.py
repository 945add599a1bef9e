"""Rows of tokens the run shows too rarely for training to place them, put back on the frequency line when the model
is written (`TrainConfig.unshown_rows: recalibrate`, the default).

A token the training text never shows is never a target, so every update lowers its output row (softmax's push away
from each context) and nothing raises it again: after a long run on a small text, new text that needs such tokens
(the letters and syllables of words the text lacks) reads far worse than at step 0 (docs/design.md, "Tokens the
training text never shows"). A token the run shows a few times is pushed down in every other context and raised in
those few, and a short run on a large text shows most of a large vocabulary that rarely. Holding the rows
(`unshown_rows: hold`) keeps the transfer's rows, but they then stay probable in the contexts where the text shows
the longer tokens that take them in. Recalibrating lets them train like every row and, when the model is written (the
run's model and each snapshot), moves each row of a token the run shows fewer than `recalibrate_below` times as a
target (the stores' counts times the epochs read) along the mean head input h̄, so that its mean logit h̄ . w_t sits
where calibration puts a token of its frequency (`langswap.transfer.calibrate`, `langswap.frequency_line`): on the
line a log f + c that the other rows counted at least three times lie on after training (slope 1, the offset c their
mean distance from it), at calibration's held-out frequencies: a token the counted lines show r < 3 times gets the frequency new text gives
such tokens, measured on lines kept out of the counts and read by a tokenizer trained without them
(`held_out_log_frequencies`), a more frequent one its relative frequency. The rows' directions, what training learnt
of the contexts, stay; only their level moves. A tied head's input rows move with the output rows, as calibration
moves them; a model with an output bias moves the bias instead.

Training itself is not changed: the rows train on (a resumed run continues from the rows as trained) and the move is
made on the model as it is written; the run's evaluation curve is the model as trained, and the phase's summary gives
the held-out loss on the evaluation text before and after the move where the run has one.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import numpy as np
import torch

from langswap.frequency_line import (CHECK_LINES, HIDDEN_LINES, LINES, MAX_LENGTH, LineSettings, frequency_line,
                                     mean_head_input)
from langswap.reports import UnshownRecalibration

logger = logging.getLogger(__name__)

REFERENCE_COUNT = 3  # rows counted at least this often set the line's offset (training has placed them)


def text_lines(documents, limit: int) -> list[str]:
    """The first `limit` non-empty lines of an iterable of documents."""
    lines: list[str] = []
    for document in documents:
        for line in document.splitlines():
            if line.strip():
                lines.append(line)
                if len(lines) >= limit:
                    return lines
    return lines


@dataclass
class Recalibration:
    """What moving the rows `ids` needs, computed once for a run: the frequency line's log-frequencies and counts on
    the training text's `lines`, and the lines whose head inputs are averaged."""

    ids: np.ndarray
    tokenizer: object
    lines: list[str]
    log_frequencies: np.ndarray
    counts: np.ndarray
    frequency: float  # the new-text frequency of a token the counted lines never show
    below: float | None = None  # the run's recalibrate_below, for the report

    @classmethod
    def prepare(cls, tokenizer, ids: np.ndarray, lines: list[str], below: float | None = None) \
            -> "Recalibration | str":
        """The recalibration of rows `ids` by the training text's `lines`, or why there is none (no held-out
        estimate: too few lines for check lines, or no tokenizer like the model's can be trained on them)."""
        config = LineSettings(frequencies="held-out")
        logf, how, counts = frequency_line(tokenizer, lines, len(tokenizer), config)
        if how.get("estimate") != "held-out":
            return ("no held-out frequency for tokens the text never shows: "
                    + how.get("fallback", f"fewer than {2 * config.check_lines} lines of training text"))
        frequency = float(how["per_count"]["0"]["frequency"])
        return cls(np.asarray(ids, dtype=np.int64), tokenizer, lines, logf, counts, frequency, below)

    @torch.no_grad()
    def move(self, model) -> tuple[UnshownRecalibration, list]:
        """Move the rows in place; returns the report and what `restore` needs to put them back."""
        head = model.get_output_embeddings()
        weight, bias = head.weight, getattr(head, "bias", None)
        size = min(weight.shape[0], len(self.log_frequencies))
        ids = self.ids[self.ids < size]
        hidden = mean_head_input(model, self.tokenizer, self.lines[:HIDDEN_LINES], MAX_LENGTH).to(weight.device)
        current = (weight.detach().to(torch.float32) @ hidden).cpu().numpy()[:size]
        if bias is not None:
            current = current + bias.detach().to(torch.float32).cpu().numpy()[:size]
        logf, counts = self.log_frequencies[:size], self.counts[:size]
        counted = counts >= REFERENCE_COUNT
        reference = counted.copy()
        reference[ids] = False
        if not reference.any():  # every counted row moves: they set the line as they are
            reference = counted
        if not reference.any():
            return UnshownRecalibration(rows=0, shown_below=self.below, frequency=float(f"{self.frequency:.4g}"),
                                        mean_move=0.0), []
        offset = float(np.mean(current[reference] - logf[reference]))
        distance = logf[ids] + offset - current[ids]
        index = torch.as_tensor(ids, device=weight.device)
        delta = torch.as_tensor(distance, dtype=torch.float32, device=weight.device)
        if bias is not None:
            saved = [(bias, bias.detach()[index].clone())]
            bias.index_add_(0, index, delta.to(bias.dtype))
        else:
            saved = [(weight, weight.detach()[index].clone())]
            direction = hidden / hidden.dot(hidden).clamp_min(1e-12)
            weight.index_add_(0, index, (delta[:, None] * direction[None, :]).to(weight.dtype))
        report = UnshownRecalibration(rows=len(ids), shown_below=self.below, frequency=float(f"{self.frequency:.4g}"),
                                      mean_move=round(float(distance.mean()), 4) if len(ids) else 0.0)
        return report, [(parameter, index, rows) for parameter, rows in saved]

    @staticmethod
    @torch.no_grad()
    def restore(saved: list) -> None:
        for parameter, index, rows in saved:
            parameter.index_copy_(0, index, rows)

    @contextlib.contextmanager
    def moved(self, model):
        """The rows moved for the duration (a snapshot written), then put back as trained."""
        _, saved = self.move(model)
        try:
            yield
        finally:
            self.restore(saved)


def rarely_shown_text_tokens(counted: tuple[np.ndarray, list[np.ndarray]], epochs: list[float],
                             below: float) -> np.ndarray:
    """The ids of the text tokens that a run shows fewer than `below` times as targets, from `counted`
    (`text_token_counts` of its token arrays): each array's count of the token times the epochs the run reads of
    that array, summed."""
    texts, counts = counted
    shows = np.zeros(len(texts))
    for count, read in zip(counts, epochs):
        shows += count * read
    return np.flatnonzero(texts & (shows < below))


def prepare_recalibration(tokenizer, ids: np.ndarray | None, documents, model_is_causal: bool,
                          below: float | None = None) -> Recalibration | None:
    """The run's `Recalibration` of the rows `ids` (the text tokens the run shows fewer than `below` times), from the
    lines of `documents` that calibration would read (its `lines` counted and `check_lines` after them); None (and a
    log line saying why) where there is nothing to move or no estimate."""
    if ids is None or len(ids) == 0:
        return None
    if not model_is_causal:
        logger.info("unshown_rows: recalibrate moves no row of a masked LM (its mean logit is not its prior)")
        return None
    prepared = Recalibration.prepare(tokenizer, ids, text_lines(documents, LINES + CHECK_LINES), below)
    if isinstance(prepared, str):
        logger.warning("unshown_rows: recalibrate moves no row: %s", prepared)
        return None
    logger.info("unshown_rows: recalibrate: the rows of %s tokens the run shows fewer than %g times go to the "
                "frequency line when the model is written (a token the text never shows: %.3g, held out)",
                f"{len(ids):,}", below, prepared.frequency)
    return prepared
