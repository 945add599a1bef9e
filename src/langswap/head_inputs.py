"""A causal LM's readings of fixed lines that calibration's steps compare: its mean token loss (`mean_token_loss`)
and each row's expected count (`expected_counts`), and the same read with the body once while only the output head
moves (`CheckLines`, `CountedLines`).

The expected-count fit tries several pseudo-counts, each over two rounds, and reads the check lines after each; the
separation reads them at each amount it tries. Between those readings only output rows move. Where the head is
untied from the input embeddings and the model's logits are the head's output as it is (no softcapping or scaling
after it), that leaves every hidden state as it was, so the body's part of each reading (most of its cost) is the
same every time: `CheckLines` and `CountedLines` read the body once, keep the hidden states the head reads, and apply
the head as it is at each later reading. Where the head is tied (moving an output row moves an input row, and with
it the hidden states), or the states would take more than `BUDGET` bytes, every reading runs the model, as
`mean_token_loss` and `expected_counts` do.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from langswap.errors import ConfigError
from langswap.evaluation.language_modeling import causal_lm_batches, causal_lm_score
from langswap.frequency_line import body_reader, read_head_inputs
from langswap.models import is_tied

logger = logging.getLogger(__name__)

BUDGET = 2 ** 30  # bytes of hidden states kept for one set of lines (float32)
CHUNK = 1024  # positions whose logits are made at once
# model config fields that change the logits after the head: with one set, the head's output is not the logits
AFTER_HEAD = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def head_alone_moves(model) -> bool:
    """Whether moving the output head's rows leaves the model's hidden states as they are and its logits the head's
    output: an untied head on a model with nothing after the head (`AFTER_HEAD`)."""
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    after = [getattr(text, name, None) for name in AFTER_HEAD]
    return not is_tied(model) and all(value is None or value == 1 for value in after)


def mean_token_loss(model, tokenizer, lines: list[str], max_length: int, progress: bool = False,
                    without_rows: torch.Tensor | None = None) -> float:
    """Mean next-token cross-entropy (nats) of `model`, in eval mode, over the tokens of `lines`, each read in windows
    of up to `max_length` (`causal_lm_score`; `progress`: a bar labelled "held-out check"). `without_rows`: a boolean
    over the output rows taken out of every softmax, the positions that would predict one of them left out; in an
    extension whose new rows are those and read nothing of the lines (the source language, tokenised as the source
    reads it), the source model's own loss on them."""
    was_training = model.training
    model.eval()
    try:
        score = causal_lm_score(model, tokenizer, lines, max_length=max_length, progress=progress,
                                label="held-out check", without_rows=without_rows)
    finally:
        model.train(was_training)
    return score.nll / max(score.tokens, 1)


@torch.no_grad()
def expected_counts(model, tokenizer, lines: list[str], max_length: int, progress: bool = False,
                    chunk: int = 1024, keep_states: list | None = None,
                    budget: int | None = None) -> tuple[np.ndarray, np.ndarray, torch.Tensor, int]:
    """(expected counts, counts, mean head input, positions) of `model` reading `lines` (`read_head_inputs`): at every
    position that predicts a token of the line, each row's probability (summed: its expected count) and the token that
    follows (counted); the mean is over those positions. `keep_states`: a list the head inputs at those positions
    are appended to (float32, on the CPU), emptied and left so where they would take more than `budget` bytes."""
    keeping = keep_states is not None
    head = model.get_output_embeddings()
    weight = head.weight.detach().to(torch.float32).T  # (d, V), converted once for every chunk
    bias = getattr(head, "bias", None)
    bias = None if bias is None else bias.detach().to(torch.float32)
    size = weight.shape[1]
    expected = torch.zeros(size, dtype=torch.float64)
    counts = torch.zeros(size, dtype=torch.float64)
    total = torch.zeros(weight.shape[0], dtype=torch.float64)
    positions = 0

    def take(states: torch.Tensor, ids: list) -> None:
        nonlocal positions, keeping
        keep, follows, at = [], [], 0
        for line in ids:  # every position but a line's last predicts the next token
            keep.extend(range(at, at + len(line) - 1))
            follows.extend(line[1:])
            at += len(line)
        states = states[torch.tensor(keep, dtype=torch.long, device=states.device)]
        counts.add_(torch.bincount(torch.tensor(follows, dtype=torch.long), minlength=size)[:size].double())
        total.add_(states.double().sum(0).cpu())
        positions += len(keep)
        if keeping:
            keep_states.append(states.cpu())
            if budget is not None and positions * states.shape[1] * 4 > budget:
                keep_states.clear()
                keeping = False
        for start in range(0, len(states), chunk):
            logits = states[start:start + chunk] @ weight
            if bias is not None:
                logits = logits + bias
            expected.add_(torch.softmax(logits, dim=-1).sum(0).double().cpu())

    read_head_inputs(model, tokenizer, lines, max_length, take, progress=progress, label="expected counts",
                     with_ids=True)
    if not positions:
        raise ConfigError("expected counts: the text gave no token to predict; give lines of target-language text.")
    return expected.numpy(), counts.numpy(), (total / positions).float(), positions


def _head(model) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The head's (d, V) float32 weight, transposed, and its float32 bias (None without)."""
    head = model.get_output_embeddings()
    bias = getattr(head, "bias", None)
    return head.weight.detach().to(torch.float32).T, None if bias is None else bias.detach().to(torch.float32)


def _logits(states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    logits = states.to(weight.device) @ weight
    return logits + bias if bias is not None else logits


class CheckLines:
    """The mean next-token loss (nats) of a model on fixed lines, read as `mean_token_loss` reads them (the windows
    of `causal_lm_score`), each time the head has moved: the first reading keeps the head inputs at the scored
    positions where `head_alone_moves(model)` and they fit in `BUDGET`; later readings apply the head to them. The
    caller moves nothing but head rows between readings."""

    def __init__(self, model, tokenizer, lines: list[str], max_length: int, progress: bool = False):
        self.model, self.tokenizer, self.lines, self.max_length, self.progress = (model, tokenizer, lines, max_length,
                                                                                   progress)
        self.states: torch.Tensor | None = None
        self.targets: torch.Tensor | None = None
        self.reuse = head_alone_moves(model)

    @torch.no_grad()
    def loss(self) -> float:
        """The model's mean token loss on the lines as its head is now."""
        if not self.reuse:
            return mean_token_loss(self.model, self.tokenizer, self.lines, self.max_length, self.progress)
        if self.states is None:
            self._read()
            if self.states is None:  # over the budget
                self.reuse = False
                return self.loss()
        weight, bias = _head(self.model)
        total = 0.0
        for start in range(0, len(self.states), CHUNK):
            log_probs = torch.log_softmax(_logits(self.states[start:start + CHUNK], weight, bias), dim=-1)
            targets = self.targets[start:start + CHUNK].to(log_probs.device)
            total -= float(log_probs.gather(-1, targets[:, None]).double().sum())
        return total / max(len(self.targets), 1)

    @torch.no_grad()
    def _read(self) -> None:
        width = self.model.get_output_embeddings().weight.shape[1]
        states, targets, size = [], [], 0
        batches = causal_lm_batches(self.model, self.tokenizer, self.lines, self.max_length)
        next(batches)
        with body_reader(self.model) as read:
            for input_ids, attention, batch_targets, batch_mask in batches:
                size += int(batch_mask.sum()) * width * 4
                if size > BUDGET:
                    logger.info("check lines read by the model each time: their hidden states would take over %d MiB",
                                BUDGET >> 20)
                    return
                hidden = read(input_ids, attention)
                states.append(hidden[batch_mask.to(hidden.device)].to(torch.float32).cpu())
                targets.append(batch_targets[batch_mask])
        self.states = torch.cat(states) if states else torch.zeros(0, width)
        self.targets = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long)


class CountedLines:
    """`expected_counts` of a model on fixed lines, each time the head has moved: the first reading keeps the head
    inputs at the counted positions where `head_alone_moves(model)` and they fit in `BUDGET`; later readings apply
    the head to them. The caller moves nothing but head rows between readings."""

    def __init__(self, model, tokenizer, lines: list[str], max_length: int, progress: bool = False):
        self.model, self.tokenizer, self.lines, self.max_length, self.progress = (model, tokenizer, lines, max_length,
                                                                                   progress)
        self.states: torch.Tensor | None = None
        self.reuse = head_alone_moves(model)

    @torch.no_grad()
    def expected(self) -> tuple[np.ndarray, np.ndarray, torch.Tensor, int]:
        """(expected counts, counts, mean head input, positions), as `expected_counts` returns them."""
        if self.states is None:
            kept = [] if self.reuse else None
            read = expected_counts(self.model, self.tokenizer, self.lines, self.max_length, self.progress,
                                   keep_states=kept, budget=BUDGET)
            if kept:
                self.states, self.read = torch.cat(kept), read
            else:  # a tied head, or states over the budget
                self.reuse = False
            return read
        weight, bias = _head(self.model)
        expected = torch.zeros(weight.shape[1], dtype=torch.float64)
        for start in range(0, len(self.states), CHUNK):
            expected.add_(torch.softmax(_logits(self.states[start:start + CHUNK], weight, bias), dim=-1)
                          .sum(0).double().cpu())
        _, counts, mean, positions = self.read
        return expected.numpy(), counts, mean, positions
