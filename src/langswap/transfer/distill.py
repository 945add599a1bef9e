"""Token distillation: learn a transferred model's new input rows from the source model reading the same text.

A transfer gives a model, whose transformer body is the source model's, new input rows for a target tokenizer,
initialised by heuristics. The source model itself is the best teacher: it can read the same text with its own
tokenizer. Token Distillation (Dobler, Elliott and de Melo, 2025) moves the new rows so that the hidden states the
body computes reading the target tokenization match those it computes reading the source tokenization:

- Each line of target-language text is read by both tokenizers (`langswap.chunks`). Where both end a token on the
  same byte (a chunk boundary), both readings have seen exactly the same bytes, so the student's hidden state after
  target token `target_at[k]` is matched to the teacher's after source token `source_at[k]`. Every boundary of a
  line is matched, so a new token is also judged by what the positions after it read from it (the paper's
  "attention-aware" objective). Chunks holding bytes either tokenizer could not spell (`AlignedText.unencodable`)
  are read but not matched.
- The teacher is the same body fed the source model's input rows (`inputs_embeds = source_embeddings[source_ids]`,
  no gradient); no second copy of the model is made. The student is the body fed the model's own input rows, of
  which only the `trainable` ones (the new rows) are learned: they are optimised as a separate float32 parameter
  and written back at the end, so every other row, and every body weight, is left bitwise as it was.
- Distance, averaged over the matched positions and the chosen layers: "mse" is the squared error divided, channel
  by channel, by the teacher's mean square in that channel over the batch's matched positions (tokenkit's
  `alm_latents` with `l2_channelwise`), so a few channels with huge activations do not outweigh the rest; "cosine"
  is 1 - cos(student, teacher).
- Optimiser: AdamW with weight decay 0 (the rows are pulled towards a target, not towards zero), learning rate
  warmed up linearly over the first 5% of the token budget and then decayed linearly to 0 at its end.
- An untied output head with `head: lm`: the new output rows learn by the student's next-token cross-entropy on the
  target text, the gradient reaching only the output matrix (the head reads the student's last hidden state
  detached), and only its `trainable` rows, at a peak rate of their own where `head_learning_rate` is set. With a
  tied head the input rows ARE the output rows: with `tied_head: move` distillation moves both, and the output rows
  end where the input side puts them, learned for what they make the body compute, not for prediction, and `head`
  does not apply; with `tied_head: untie` the head keeps the rows as the method made them as a matrix of its own
  (written only where the learned rows are kept), and `head` applies as for an untied head.

Each line is read on its own, after the tokenizer's bos token (or eos where there is none, as GPT-2 does; as the
evaluation reads lines), in windows of whole chunks of at most `max_length` target tokens; the source side reads
the same bytes, up to the model's position limit. Windows are right-padded without an attention mask: a causal
model's real positions never attend to the padding after them. The last `held_out_lines` lines are not trained on;
the distillation loss on them is measured the same way before and after, and the learned rows are written into the
model only where it went down (otherwise the report says they were put back).

A teacher that reads the language worse than the student can only hold it back: before training, the held-out
lines are read by both (the teacher through the source model's head, the student through the model's), and with
`when: teacher-better` (the default) distillation runs only where the teacher's summed next-token loss over the
same chunks is lower (`teacher_check` in the report). That check, the options `layers`, `distance` and `when` and
their layer choice are the ones the teacher during training has (`langswap.training.teacher`: `TeacherMatch`,
`LikelihoodCheck`), and the distance is `kernels.hidden_state_distance` for both.

Rows the text never shows get no gradient and stay bitwise as they were (AdamW with weight decay 0 moves no row
whose gradient has always been zero). What the last layer cannot teach: a LayerNorm model (GPT-2) reads its stream
through a LayerNorm in every block and after the last, so the component of an input row along the all-ones
direction never reaches the last layer's states; matching them leaves it where the initialisation put it (an
earlier layer, whose states are the raw residual stream, does fix it).

Not handled: masked LMs (refused: their hidden state at a token describes that token within the whole window, not
the text read up to it, so the states after the last source and the last target token of a chunk need not agree,
and their head does not predict the next token); a head that scales or soft-caps its logits after the linear map
(Gemma 2, Cohere, Granite) learns its rows through the linear map alone; an output bias is left as it is; chunks
longer than a window are skipped (counted in `chunks_too_long`).
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from langswap.batching import right_pad
from langswap.chunks import ChunkAligner, adjacent_matches
from langswap.errors import ConfigError, NumericalError, VocabularyError
from langswap.kernels import hidden_state_distance
from langswap.models import HiddenStates, input_embedding_scale, is_tied, objective_of, position_limit
from langswap.progress import bar as progress_bar
from langswap.reports import DistillationReport, TeacherCheck
from langswap.training.teacher import (LikelihoodCheck, TeacherMatch, chunk_log_likelihoods, distance_field,
                                       layers_field, not_measured, when_field)
from langswap.transfer.calibrate import untie_head

logger = logging.getLogger(__name__)

WARMUP_SHARE = 0.05  # of the token budget, over which the learning rate rises linearly from 0
ALIGN_LINES = 256  # lines handed to the tokenizers at once


@dataclass(frozen=True, kw_only=True)
class DistillConfig(TeacherMatch):
    """Token distillation of the new rows after a transfer (`langswap.transfer.distill`)."""

    OPTION = "distill"

    tokens: int | None = field(default=None, metadata={
        "help": "Target tokens read for training (the budget; 0: no distillation); the last update may overshoot it "
                "by one batch. 20000 takes about 6 minutes for SmolLM2-135M on 2 CPU cores matching the last layer "
                "(2 at block 8 of 30), per candidate of the method (the default's mode auto offers two or more). "
                "Unset: 20000 in an extension kept off the source language (calibration.source_text), 0 otherwise."})
    max_length: int = field(default=128, metadata={
        "help": "Target tokens per window (bos included); a longer line is read in several windows of whole "
                "chunks. The source side reads the same bytes, however many tokens that takes."})
    batch_lines: int = field(default=8, metadata={"help": "Windows (lines, or pieces of long lines) per update."})
    learning_rate: float | None = field(default=None, metadata={
        "help": "AdamW's peak learning rate (weight decay 0), reached after 5% of the tokens, then decayed "
                "linearly to 0. Unset: 1e-2 in an extension kept off the source language, 3e-4 otherwise."})
    head_learning_rate: float | None = field(default=None, metadata={
        "help": "AdamW's peak learning rate for the output rows `head: lm` learns, on the same schedule (unset: "
                "learning_rate): the rate at which the input rows learn best need not suit the output rows."})
    layers: tuple[int, ...] = layers_field(
        "Hidden-state layers matched, indices into the model's hidden states (transformers' output_hidden_states) "
        "of a model of L blocks: 1 is the first block's output, L or -1 the last one's (after the final norm, for "
        "most models), and negative indices count back from it as in Python (-2: block L-1, -L: block 1). 0 (and "
        "-L-1), the input embeddings, is not allowed; several layers are averaged.")
    distance: str = distance_field(
        "mse (squared error divided channel by channel by the teacher's mean square in the channel) or cosine "
        "(1 - cosine similarity).")
    head: str | None = field(default=None, metadata={
        "help": "The new output rows: lm (they learn by the student's next-token cross-entropy on the text), "
                "likelihood (they learn so that each chunk of text between two boundaries gets the probability the "
                "source model gives it reading its own tokens: tokenkit's approximate likelihood matching) or keep "
                "(the output matrix stays). The gradient reaches only the output rows (the head reads the "
                "student's states detached). A tied head is the input matrix: lm and keep leave it to "
                "distillation itself, likelihood adds its gradient to the same rows. Unset: keep in an extension "
                "kept off the source language, lm otherwise.",
        "choices": ("lm", "likelihood", "keep")})
    tied_head: str | None = field(default=None, metadata={
        "help": "A tied head: move (the output rows are the distilled input rows) or untie (the head keeps the "
                "method's rows as a matrix of its own, config.tie_word_embeddings false, so the input rows learn "
                "for what they make the body compute and the output rows stay made for prediction; `head` then "
                "applies as for an untied head). The head is untied only where the learned rows are kept. Unset: "
                "untie in an extension kept off the source language, move otherwise.",
        "choices": ("move", "untie")})
    order: str = field(default="random", metadata={
        "help": "The order the training lines are read in: random (drawn from the seed) or coverage (first the "
                "lines that show the trainable rows read least so far, per token of the line, so that within the "
                "budget each new token is read in context before any is read again, as far as the text shows it; "
                "`coverage_order`); after the budget's worth of lines, the rest in the seed's order.",
        "choices": ("random", "coverage")})
    held_out_lines: int = field(default=32, metadata={
        "help": "Last lines of the text kept out of training, on which the loss is measured before and after "
                "(at most a quarter of the lines)."})
    when: str = when_field(
        "teacher-better (distil only where the source model, reading the held-out lines with its own tokenizer, "
        "gives them a higher likelihood than the transferred model does: a teacher that reads the language worse "
        "can only hold the student back) or always.")
    seed: int = field(default=0, metadata={"help": "Seed of the order in which lines are read."})

    def __post_init__(self):
        super().__post_init__()  # layers, distance, when
        if self.tokens is not None and (isinstance(self.tokens, bool) or not isinstance(self.tokens, int)
                                        or self.tokens < 0):
            raise ConfigError(f"distill.tokens is {self.tokens!r}; give a number of target tokens of at least 0 "
                              "(0 skips distillation).")
        if self.max_length < 2:
            raise ConfigError(f"distill.max_length is {self.max_length}; give at least 2 (a bos and a token).")
        if self.batch_lines < 1:
            raise ConfigError(f"distill.batch_lines is {self.batch_lines}; give at least 1.")
        if self.learning_rate is not None and not _is_rate(self.learning_rate):
            raise ConfigError(f"distill.learning_rate is {self.learning_rate!r}; give a finite number above 0, "
                              "e.g. 3e-4.")
        if self.head_learning_rate is not None and not _is_rate(self.head_learning_rate):
            raise ConfigError(f"distill.head_learning_rate is {self.head_learning_rate!r}; give a finite number above "
                              "0, e.g. 3e-4, or leave it unset to use distill.learning_rate.")
        if self.head not in (None, "lm", "likelihood", "keep"):
            raise ConfigError(f"distill.head is {self.head!r}; choose lm, likelihood or keep.")
        if self.tied_head not in (None, "move", "untie"):
            raise ConfigError(f"distill.tied_head is {self.tied_head!r}; choose move or untie.")
        if self.held_out_lines < 0:
            raise ConfigError(f"distill.held_out_lines is {self.held_out_lines}; give at least 0.")
        if self.order not in ("random", "coverage"):
            raise ConfigError(f"distill.order is {self.order!r}; choose random or coverage.")

    def resolved(self, extension: bool) -> DistillConfig:
        """The config with each option left unset given its default: `EXTENSION_DEFAULTS` for an extension kept off
        the source language (`extension`: the transfer is given calibration.source_text, which only an extension
        takes), `DEFAULTS` otherwise. A resolved config stays as it is."""
        defaults = EXTENSION_DEFAULTS if extension else DEFAULTS
        return dataclasses.replace(self, **{name: value for name, value in defaults.items()
                                            if getattr(self, name) is None})


# the options a transfer resolves (`DistillConfig.resolved`): off, and where set, a moderate rate that moves both
# sides of a tied head; in an extension kept off the source language, the setting measured there
# (docs/design.md, "Token distillation"): 20,000 tokens at 1e-2, a tied head untied and kept as the method made it
DEFAULTS = {"tokens": 0, "learning_rate": 3e-4, "head": "lm", "tied_head": "move"}
EXTENSION_DEFAULTS = {"tokens": 20_000, "learning_rate": 1e-2, "head": "keep", "tied_head": "untie"}


def _is_rate(value) -> bool:
    """Whether `value` is a usable learning rate: a finite number above 0 (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class _Window:
    """One piece of a line read by both tokenizers: each side's ids (bos first) and the positions matched.

    source_ids: (S,) int64; target_ids: (T,) int64, T <= max_length.
    source_at, target_at: (M,) int64 positions in the window after which both sides have read the same bytes
        (chunk boundaries not marked unencodable).
    adjacent: (M,) bool, whether each matched position's previous one ends the chunk just before it (no unmatched
        chunk between: `chunks.adjacent_matches`), which the likelihood match reads.
    unencodable: chunks of the window not matched (marked unencodable); too_long: chunks of its line skipped for
        being longer than a window (counted on one window of the line, or the next window read)."""

    source_ids: np.ndarray
    target_ids: np.ndarray
    source_at: np.ndarray
    target_at: np.ndarray
    adjacent: np.ndarray
    unencodable: int
    too_long: int = 0


def distill(model, source_embeddings, source_tokenizer, target_tokenizer, lines: list[str], trainable,
            config: DistillConfig, progress: bool = False, source_head: tuple | None = None) -> DistillationReport:
    """Learn the `trainable` input rows of `model` (and, for an untied head with `head: lm`, its output rows) by
    token distillation on `lines`, as the module docstring says; returns the report.

    model: the transferred causal LM; its input embeddings (V_t, d) are the target rows, already initialised.
    source_embeddings: (V_s, d) tensor or array, the source model's input matrix (read, never changed).
    source_tokenizer, target_tokenizer: fast tokenizers of the source model and of `model`.
    lines: target-language text, one line per item; the last `held_out_lines` are held out.
    trainable: (V_t,) bool, the rows that may change (a shorter mask is padded with False: padding rows stay).
    source_head: (output matrix (V_s, d), bias (V_s,) or None) of the source model (its input matrix where the
        head is tied), with which the teacher's likelihood of the held-out lines is read for `when`; None: not
        read, and the report's teacher_check says so (distillation then runs as with `when: always`).

    The report: tokens (target tokens read), updates, loss_start / loss_end (distillation loss on the held-out
    lines before and with the learned rows; None without held-out lines), next_token_loss_start / _end (the mean
    next-token loss on them, nats, through the head's linear map), kept (whether the learned rows were written:
    the held-out distillation loss went down, or there was no held-out check) and put_back (why not),
    chunks_matched (first pass over the text), chunks_skipped (unencodable), chunks_too_long, held_out_chunks,
    text_repeated (the budget outlasted the text), rows, head, layers, distance, seconds, teacher_check (the
    teacher's and the student's nats per held-out chunk); or, when nothing is done, `skipped` with the reason and
    no other change to the model.

    Costs, besides the model: the trainable rows, their AdamW moments and (untied head, `head: lm`) the same for
    the output rows, in float32; per update, each side's hidden states for one batch, read only as deep as the
    deepest matched layer (`models.HiddenStates`) unless an untied head learns from the last. Options left unset
    in `config` take `DEFAULTS` (a transfer resolves them first: `DistillConfig.resolved`).
    """
    config = config.resolved(extension=False)
    if config.tokens == 0:
        return DistillationReport(skipped="distill.tokens is 0: the rows are left as the transfer made them",
                                  tokens=0, updates=0)
    started = time.perf_counter()
    _refuse_masked(model)
    run = _Distillation(model, source_embeddings, trainable, config)
    if not run.trainable.any():
        return DistillationReport(skipped="no row is trainable: nothing to distill", tokens=0, updates=0)
    if not lines:
        raise ConfigError("distillation needs target-language text; none was given (distill lines).")
    held_count = min(config.held_out_lines, len(lines) // 4)
    train_lines, held_lines = list(lines[:len(lines) - held_count]), list(lines[len(lines) - held_count:])
    run.read_with(source_tokenizer, target_tokenizer, source_head)
    report = DistillationReport(**run.report_head())
    bar = progress_bar(progress, config.tokens, "distill", "tok")
    try:
        run.freeze()
        held_windows = [window for text in _aligned(run.aligner, held_lines)
                        for window in _windows(text, run.source_bos, run.target_bos, run.limits)[0]]
        check = run.teacher_check(held_windows, source_head, (len(source_tokenizer), len(target_tokenizer)))
        report.teacher_check = TeacherCheck.from_dict(check)
        if not config.teaches(check):
            logger.warning("token distillation skipped: the source model reads the %d held-out lines worse than "
                           "the transferred model (%.3f against %.3f nats a chunk); distill.when: always distils "
                           "anyway", len(held_lines), check["teacher_nats_per_chunk"],
                           check["student_nats_per_chunk"])
            return dataclasses.replace(
                report, skipped=f"the teacher reads the held-out lines worse than the student "
                                f"({check['teacher_nats_per_chunk']} against {check['student_nats_per_chunk']} nats a "
                                "chunk): the rows are left as the transfer made them",
                tokens=0, updates=0, seconds=round(time.perf_counter() - started, 2))
        loss_start, token_loss_start, match_start = run.measure(held_windows, False) if held_windows \
            else (None, None, None)
        trained = run.train(train_lines, bar)
        loss_end, token_loss_end, match_end = run.measure(held_windows, True) if held_windows else (None, None, None)
        # like any training step, distillation can make things worse (a learning rate too high for the model, too
        # few tokens); the held-out lines decide, and the model keeps its rows unless they improved: the input rows by
        # the distillation loss, an untied head's rows learnt by likelihood by the likelihood match, a tied head's
        # rows (both at once) by the sum of the two
        kept = loss_start is None or loss_end < loss_start
        head_kept = None
        if match_start is not None and run.head_rows is not None:
            head_kept = match_end < match_start
        elif match_start is not None:
            kept = head_kept = loss_end + match_end < loss_start + match_start
        if kept or head_kept:
            run.write_back(inputs=kept, head=kept if head_kept is None else head_kept)
    finally:
        if bar is not None:
            bar.close()
        run.thaw()

    report = dataclasses.replace(
        report, tokens=trained["read"], updates=trained["updates"], lines=len(train_lines), order=config.order,
        rows_read=trained["rows_read"],
        held_out_lines=len(held_lines), loss_start=_round(loss_start), loss_end=_round(loss_end),
        last_train_loss=_round(trained["train_loss"]), next_token_loss_start=_round(token_loss_start),
        next_token_loss_end=_round(token_loss_end), likelihood_loss_start=_round(match_start),
        likelihood_loss_end=_round(match_end), kept=kept, head_kept=head_kept, untied=bool(run.untie and (kept or head_kept)),
        chunks_matched=trained["matched"], chunks_skipped=trained["unencodable"], chunks_too_long=trained["too_long"],
        held_out_chunks=sum(len(window.target_at) for window in held_windows), text_repeated=trained["repeated"],
        seconds=round(time.perf_counter() - started, 2))
    _log_outcome(report, len(held_lines))
    return report


class _Distillation:
    """One distillation's state: the model and its matrices, the source rows (scaled as the model's input layer
    scales its own), the learned rows and the head's, and how the text is read; its steps are the methods, in the
    order `distill` calls them."""

    def __init__(self, model, source_embeddings, trainable, config: DistillConfig):
        self.model, self.config = model, config
        self.input_weight = model.get_input_embeddings().weight
        self.rows, width = self.input_weight.shape
        source = torch.as_tensor(source_embeddings)
        if source.dim() != 2 or source.shape[1] != width:
            raise VocabularyError(f"source_embeddings has shape {tuple(source.shape)}; it must be (source "
                                  f"vocabulary, {width}), the source model's input matrix, of the width of this "
                                  "model's body.")
        self.softcap = getattr(model.config, "final_logit_softcapping", None)
        self.input_scale = input_embedding_scale(model)
        # rows read as inputs_embeds skip the layer's scale (Gemma-3's sqrt(d)): apply it here
        self.source = source if self.input_scale == 1.0 else _ScaledRows(source, self.input_scale)
        self.trainable = _row_mask(trainable, self.rows, "input")
        self.layers = config.match_layers(model.config)  # the teacher is this body, fed the source rows
        self.output = model.get_output_embeddings()
        tied = is_tied(model)
        # the head's rows, now the input matrix, become its own at the end
        self.untie = tied and config.tied_head == "untie"
        self.head_rule = "none" if self.output is None else "tied" if tied and not self.untie else config.head
        # the chunk-likelihood match reaches the head's rows: its own (untied) or the learned input rows (tied)
        self.likelihood = config.head == "likelihood" and self.head_rule in ("tied", "likelihood")
        self.source_head = self.sizes = None  # the source model's head and both tokenizers' sizes (`read_with`)

    def read_with(self, source_tokenizer, target_tokenizer, source_head: tuple | None = None) -> None:
        """How the text is read and cut (the aligner, the windows' limits and frames), and the learned rows;
        `source_head` (matrix, bias) is what the teacher predicts with where the head learns by likelihood."""
        config, model = self.config, self.model
        self.sizes = (len(source_tokenizer), len(target_tokenizer))
        if self.likelihood:
            if source_head is None:
                raise ConfigError("distill.head: likelihood needs the source model's head (distill's source_head), "
                                  "to read the teacher's likelihood of the text; choose head: lm or keep.")
            weight, bias = source_head
            device = self.input_weight.device
            self.source_head = (torch.as_tensor(weight)[:self.sizes[0]].to(device, torch.float32),
                                None if bias is None else torch.as_tensor(bias)[:self.sizes[0]].to(device,
                                                                                                  torch.float32))
        self.aligner = ChunkAligner(source_tokenizer, target_tokenizer)
        self.target_tokenizer = target_tokenizer
        self.limits = _Limits(config.max_length, position_limit(model.config), len(self.source), self.rows)
        if self.limits.positions is not None and config.max_length > self.limits.positions:
            raise ConfigError(f"distill.max_length is {config.max_length}, more than the {self.limits.positions} "
                              f"positions this model reads; give at most {self.limits.positions}.")
        self.source_bos, self.target_bos = frame_id(source_tokenizer), frame_id(target_tokenizer)
        self.body = model.base_model
        # training reads the body only as deep as the deepest matched layer unless an untied head learns from the
        # last
        self.states = HiddenStates(self.body, self.layers, model.config.num_hidden_layers)
        self.device, self.dtype = self.input_weight.device, self.input_weight.dtype
        self.trained_ids = torch.from_numpy(np.flatnonzero(self.trainable)).to(self.device)
        self.slot_of = torch.full((self.rows,), -1, dtype=torch.long, device=self.device)
        self.slot_of[self.trained_ids] = torch.arange(len(self.trained_ids), device=self.device)
        self.learned = torch.nn.Parameter(self.input_weight.detach()[self.trained_ids].to(torch.float32).clone())
        self.parameters = [{"params": [self.learned], "peak": config.learning_rate}]
        self.head_ids = self.head_rows = None
        if self.head_rule in ("lm", "likelihood"):
            # the same tokens' output rows; an output matrix of another size (padding rows) keeps its extra rows
            weight = self.output.weight
            self.head_ids = torch.from_numpy(np.flatnonzero(self.trainable[:weight.shape[0]])).to(weight.device)
            self.head_rows = torch.nn.Parameter(weight.detach()[self.head_ids].to(torch.float32).clone())
            self.parameters.append({"params": [self.head_rows],
                                    "peak": config.head_learning_rate or config.learning_rate})

    def report_head(self) -> dict:
        head = {"tied": "tied (the distilled input rows are the output rows)",
                "none": "none (the model has no output layer)",
                "lm": "lm (new output rows learned by next-token loss)",
                "likelihood": "likelihood (new output rows learned so that each chunk gets the source model's "
                              "probability of it)",
                "keep": "keep (output matrix unchanged)"}[self.head_rule]
        untied = ", untied (the head keeps its own rows where the learned ones are kept)" if self.untie else ""
        if self.likelihood and self.head_rule == "tied":
            untied += ", learned for each chunk's likelihood as well"
        return {"rows": int(self.trainable.sum()), "head": head + untied, "layers": list(self.layers),
                "distance": self.config.distance}

    def freeze(self) -> None:
        """Every parameter frozen (the learned rows are their own), dropout off: the teacher and the student read
        through the same function."""
        self.flags = [(parameter, parameter.requires_grad) for parameter in self.model.parameters()]
        self.was_training = self.model.training
        for parameter, _ in self.flags:
            parameter.requires_grad_(False)
        self.model.eval()

    def thaw(self) -> None:
        for parameter, flag in getattr(self, "flags", []):
            parameter.requires_grad_(flag)
        if hasattr(self, "was_training"):
            self.model.train(self.was_training)

    def student_inputs(self, ids: torch.Tensor, learning: bool) -> torch.Tensor:
        """(B, L, d) model-dtype inputs for target ids (B, L): the learned rows where trainable (`learning`), the
        model's own rows elsewhere."""
        base = F.embedding(ids, self.input_weight)
        if learning:
            slots = self.slot_of[ids]
            learned = F.embedding(slots.clamp_min(0), self.learned).to(self.dtype)
            base = torch.where((slots >= 0)[..., None], learned, base)
        return base if self.input_scale == 1.0 else base * self.input_scale

    def head_weight(self, learning: bool) -> torch.Tensor | None:
        """(V, d) the output matrix as the model has it, or (`learning`) with the learned rows in place."""
        if self.output is None:
            return None
        if learning and self.head_rule == "tied":
            return self.input_weight.detach().index_copy(0, self.trained_ids, self.learned.detach().to(self.dtype))
        if learning and self.head_rows is not None:
            weight = self.output.weight
            return weight.detach().index_copy(0, self.head_ids, self.head_rows.detach().to(weight.dtype))
        return self.output.weight.detach()

    def teacher_check(self, windows: list[_Window], source_head, sizes: tuple[int, int]) -> dict:
        """Whose likelihood of `windows` is higher (`LikelihoodCheck`): the teacher's (the body reading the source
        tokens through the source model's rows and `source_head`) or the student's (the model as the transfer made
        it)? Each window holds whole chunks, the same bytes on both sides, so the two sums of next-token losses are
        over the same text: the report gives each per chunk, in nats, and `teacher_worse` where the teacher's is not
        lower. Windows holding a chunk either tokenizer cannot spell are left out (an unknown token stands for bytes
        the other side spells out), and each side's softmax runs over its own tokenizer's tokens (`sizes`: source,
        target), not a matrix's padding rows."""
        if source_head is None:
            return not_measured("no source head was given (distill's source_head)")
        if self.output is None:
            return not_measured("the model has no output layer")
        clean = [window for window in windows if not window.unencodable]
        if not clean:
            return not_measured("no held-out lines (fewer than 4 lines of text, or held_out_lines 0)" if not windows
                                else "every held-out window holds a chunk one of the tokenizers cannot spell")
        source_size, target_size = sizes
        weight, bias = source_head
        weight = weight[:source_size].to(self.device, torch.float32)
        bias = None if bias is None else bias[:source_size].to(self.device, torch.float32)
        student_weight = self.head_weight(False)[:target_size].to(torch.float32)
        student_bias = getattr(self.output, "bias", None)
        student_bias = None if student_bias is None else student_bias[:target_size].to(torch.float32)
        check = LikelihoodCheck("chunk")
        with torch.no_grad():
            for start in range(0, len(clean), self.config.batch_lines):
                part = clean[start:start + self.config.batch_lines]
                batch = _Batch(part, self.device)
                check.units += sum(len(window.target_at) for window in part)
                teacher_inputs = self.source[batch.source_ids.to(self.source.device)].to(self.device, self.dtype)
                hidden = self.body(inputs_embeds=teacher_inputs, use_cache=False).last_hidden_state
                states = hidden[:, :-1][batch.source_predicts].to(torch.float32)
                check.add("teacher", _logits(states, weight, bias, self.softcap),
                          batch.source_ids[:, 1:][batch.source_predicts])
                hidden = self.body(inputs_embeds=self.student_inputs(batch.target_ids, False),
                                   use_cache=False).last_hidden_state
                states = hidden[:, :-1][batch.predicts].to(torch.float32)
                check.add("student", _logits(states, student_weight, student_bias, self.softcap),
                          batch.target_ids[:, 1:][batch.predicts])
        return check.report(windows_left_out=len(windows) - len(clean))

    def measure(self, windows: list[_Window], learning: bool) -> tuple[float | None, float | None, float | None]:
        """(distillation loss, next-token loss, chunk-likelihood match where the head learns by it, else None) over
        `windows`, each averaged over matched positions, predicted tokens and batches: of the model as it is, or
        (`learning`) with the learned rows."""
        distill_sum = matched = token_sum = predicted = likelihood_sum = batches = 0.0
        weight = self.head_weight(learning)
        bias = getattr(self.output, "bias", None)
        with torch.no_grad():
            for start in range(0, len(windows), self.config.batch_lines):
                batch = _Batch(windows[start:start + self.config.batch_lines], self.device)
                loss, count, hidden, teacher = _distill_loss(self.states.whole, self.source, batch, self.layers,
                                                             self.config.distance,
                                                             lambda ids: self.student_inputs(ids, learning),
                                                             self.dtype)
                distill_sum += float(loss) * count
                matched += count
                if weight is not None:
                    loss, count = _next_token_loss(hidden, batch, weight, bias, self.softcap)
                    token_sum += float(loss) * count
                    predicted += count
                if self.likelihood:
                    likelihood_sum += float(self._likelihood_loss(hidden, teacher, batch, weight))
                    batches += 1
        return (distill_sum / matched if matched else None, token_sum / predicted if predicted else None,
                likelihood_sum / batches if batches else None)

    def train(self, train_lines: list[str], bar) -> dict:
        """The updates over `train_lines` until the token budget is read; returns the counts of the first pass, the
        tokens read, the updates made and the last batch's loss."""
        config = self.config
        optimizer = torch.optim.AdamW(self.parameters, lr=config.learning_rate, weight_decay=0.0)
        counts = {"matched": 0, "unencodable": 0, "too_long": 0, "read": 0, "updates": 0, "repeated": False,
                  "train_loss": None}
        warmup = WARMUP_SHARE * config.tokens
        rng = np.random.default_rng(config.seed)
        order = None
        if config.order == "coverage":
            ids = self.target_tokenizer(train_lines, add_special_tokens=False)["input_ids"]
            order = coverage_order([np.asarray(line, dtype=np.int64) for line in ids], self.trainable,
                                   config.tokens, rng)
        read_rows = np.zeros(self.rows, dtype=bool)
        for windows, first_pass in _batches(self.aligner, train_lines, self.source_bos, self.target_bos, self.limits,
                                            config.batch_lines, rng, order):
            batch = _Batch(windows, self.device)
            for window in windows:
                read_rows[window.target_ids] = True
            if first_pass:
                counts["matched"] += len(batch.target_at)
                counts["unencodable"] += sum(window.unencodable for window in windows)
                counts["too_long"] += sum(window.too_long for window in windows)
            counts["repeated"] |= not first_pass
            # linear warm-up to the peak over the first 5% of the tokens, then linear decay to 0 at the budget
            read = counts["read"]
            rate = min((read + batch.target_tokens) / warmup, 1.0,
                       max(config.tokens - read, 0) / (config.tokens - warmup))
            for group in optimizer.param_groups:
                group["lr"] = group["peak"] * rate
            loss = self._update(optimizer, batch, counts)
            counts["train_loss"] = float(loss.detach())
            counts["read"] += batch.target_tokens
            if bar is not None:
                bar.update(batch.target_tokens)
            if counts["read"] >= config.tokens:
                break
        counts["rows_read"] = int((read_rows & self.trainable).sum())
        if not counts["updates"]:
            raise ConfigError(f"no update was made: the {len(train_lines):,} training lines hold no chunk that both "
                              "tokenizers can spell within distill.max_length tokens. Check that the text is in the "
                              "target language and that both tokenizers read it.")
        return counts

    def _update(self, optimizer, batch: _Batch, counts: dict) -> torch.Tensor:
        """One update on `batch` (none where its chunks are all unencodable); returns the distillation loss."""
        with torch.enable_grad():
            reader = self.states if self.head_rows is None and not self.likelihood else self.states.whole
            loss, _, hidden, teacher = _distill_loss(reader, self.source, batch, self.layers, self.config.distance,
                                                     lambda ids: self.student_inputs(ids, True), self.dtype)
            total = loss
            if self.likelihood:
                total = total + self._likelihood_loss(hidden.detach(), teacher, batch)
            elif self.head_rows is not None:
                # the head reads the student's states detached: this loss moves the output rows only
                weight = self.output.weight
                weight = weight.detach().index_copy(0, self.head_ids, self.head_rows.to(weight.dtype))
                total = total + _next_token_loss(hidden.detach(), batch, weight, getattr(self.output, "bias", None),
                                                 self.softcap)[0]
            if not torch.isfinite(total):
                raise NumericalError(
                    f"the distillation loss became {float(total)} at update {counts['updates'] + 1}; the model is "
                    "left as it was. Lower distill.learning_rate, and check that the model's rows and "
                    "source_embeddings are finite and that no trainable input row is all zeros.")
            if total.requires_grad:  # a batch whose chunks are all unencodable has nothing to learn from
                optimizer.zero_grad(set_to_none=True)
                total.backward()
                optimizer.step()
                counts["updates"] += 1
        return loss

    def _likelihood_loss(self, hidden: torch.Tensor, teacher: torch.Tensor, batch: _Batch,
                         weight: torch.Tensor | None = None) -> torch.Tensor:
        """The likelihood match: the mean squared difference, in nats, between each chunk's log-probability
        (`training.teacher.chunk_log_likelihoods`) under the head (`weight`; default: with its learned rows, their
        gradient kept) reading the student's states `hidden` (B, T, d) and under the source head reading the
        teacher's `teacher` (B, S, d), over the batch's chunks; its gradient reaches the learned head rows only.
        Squared log-probabilities, not tokenkit's binary cross-entropy of probabilities: the latter barely moves a
        chunk both sides find unlikely, and bits per byte are a mean of log-probabilities."""
        if weight is None and self.head_rows is not None:
            weight = self.output.weight.detach().index_copy(0, self.head_ids,
                                                            self.head_rows.to(self.output.weight.dtype))
        elif weight is None:  # a tied head: the learned input rows are its rows
            weight = self.input_weight.detach().index_copy(0, self.trained_ids, self.learned.to(self.dtype))
        student = _logits(hidden.to(torch.float32), weight, getattr(self.output, "bias", None), self.softcap)
        with torch.no_grad():
            source = _logits(teacher.to(torch.float32), *self.source_head, self.softcap)
        log_student, log_teacher = chunk_log_likelihoods(student, batch.target_ids, source, batch.source_ids,
                                                         batch.target_at, batch.source_at, self.sizes,
                                                         batch.adjacent)
        if not len(log_student):
            return student.new_zeros(())
        return (log_student - log_teacher).square().mean()

    def write_back(self, inputs: bool = True, head: bool = True) -> None:
        """The learned rows into the model, the input rows (`inputs`) and the head's (`head`); an untied head first
        gets a copy of the rows the method made."""
        if self.untie and (inputs or head):
            untie_head(self.model)
            self.output = self.model.get_output_embeddings()
        with torch.no_grad():
            if inputs:
                self.input_weight[self.trained_ids] = self.learned.detach().to(self.dtype)
            if self.head_rows is not None and head:
                self.output.weight[self.head_ids] = self.head_rows.detach().to(self.output.weight.dtype)


def _log_outcome(report: DistillationReport, held_lines: int) -> None:
    loss_start, loss_end = report.loss_start, report.loss_end
    if not report.kept:
        report.put_back = (f"the held-out distillation loss rose ({loss_start:.4f} -> {loss_end:.4f}): the rows "
                           "are left as the transfer made them")
        logger.warning("token distillation put back: on %d held-out lines its loss went from %.4f to %.4f; lower "
                       "distill.learning_rate or raise distill.tokens", held_lines, loss_start, loss_end)
    elif loss_start is not None:
        logger.info("distilled %s rows over %s target tokens (%s updates): held-out distillation loss %.4f -> %.4f, "
                    "next-token loss %s -> %s | chunks matched %s, unencodable %s, too long %s",
                    f"{report.rows:,}", f"{report.tokens:,}", f"{report.updates:,}", loss_start, loss_end,
                    report.next_token_loss_start, report.next_token_loss_end, f"{report.chunks_matched:,}",
                    f"{report.chunks_skipped:,}", f"{report.chunks_too_long:,}")
    else:
        logger.info("distilled %s rows over %s target tokens (%s updates); no held-out check (fewer than 4 lines "
                    "of text, or distill.held_out_lines 0)", f"{report.rows:,}", f"{report.tokens:,}",
                    f"{report.updates:,}")


def _refuse_masked(model) -> None:
    if objective_of(model.config) == "masked" or type(model).__name__.endswith("ForMaskedLM"):
        raise ConfigError(
            f"token distillation is for causal LMs, and this model ({type(model).__name__}) is a masked LM: its "
            "hidden state at a token describes that token within the whole window, not the text read up to it, so "
            "the states after the last source and the last target token of a chunk need not agree, and its head "
            "does not predict the next token. Set distill.tokens: 0 for this model.")


def _row_mask(mask, rows: int, which: str) -> np.ndarray:
    """`mask` as a (rows,) bool array, padded with False where it is shorter (padding rows stay)."""
    if isinstance(mask, torch.Tensor):
        mask = mask.detach().cpu().numpy()
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.ndim != 1:
        raise ConfigError(f"trainable must be a one-dimensional boolean mask over the {which} rows; got dtype "
                          f"{mask.dtype} and shape {mask.shape}.")
    if len(mask) > rows:
        raise VocabularyError(f"the trainable mask has {len(mask):,} entries but the model's {which} matrix "
                              f"{rows:,} rows; give one entry per row of the target vocabulary.")
    return np.concatenate([mask, np.zeros(rows - len(mask), dtype=bool)])


def frame_id(tokenizer) -> int | None:
    """The token each window starts with: bos, or eos where there is none (GPT-2), as the evaluation reads lines."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


@dataclass(frozen=True)
class _Limits:
    max_length: int  # target tokens per window, frame included
    positions: int | None  # the model's position limit, for the source side
    source_rows: int
    target_rows: int


def _aligned(aligner, lines: list[str]):
    for start in range(0, len(lines), ALIGN_LINES):
        yield from aligner.align_batch(lines[start:start + ALIGN_LINES])


def _windows(text, source_bos: int | None, target_bos: int | None, limits: _Limits) -> tuple[list[_Window], int]:
    """(the windows of one aligned line, chunks skipped as longer than a window): runs of whole chunks, each within
    the target and source limits."""
    chunks = len(text)
    if not chunks:
        return [], 0
    source_frame = [] if source_bos is None else [source_bos]
    target_frame = [] if target_bos is None else [target_bos]
    source_ids, target_ids = text.source.ids, text.target.ids
    if len(source_ids) and int(source_ids.max()) >= limits.source_rows:
        raise VocabularyError(f"the source tokenizer gives token id {int(source_ids.max())}, but source_embeddings "
                              f"has {limits.source_rows:,} rows; pass the source model's input matrix and its "
                              "tokenizer.")
    if len(target_ids) and int(target_ids.max()) >= limits.target_rows:
        raise VocabularyError(f"the target tokenizer gives token id {int(target_ids.max())}, but the model has "
                              f"{limits.target_rows:,} input rows; pass the transferred model and its tokenizer.")
    # first token of each chunk on each side (chunk k starts after the last token of chunk k - 1)
    source_from = np.concatenate([[text.source.prefix], text.source_at[:-1] + 1])
    target_from = np.concatenate([[text.target.prefix], text.target_at[:-1] + 1])
    target_room = limits.max_length - len(target_frame)
    source_room = None if limits.positions is None else limits.positions - len(source_frame)
    out = []
    first = too_long = 0
    while first < chunks:
        # the last chunk that fits with chunk `first` on both sides
        last = int(np.searchsorted(text.target_at, target_from[first] + target_room - 1, side="right")) - 1
        if source_room is not None:
            last = min(last, int(np.searchsorted(text.source_at, source_from[first] + source_room - 1,
                                                 side="right")) - 1)
        if last < first:  # one chunk longer than a window
            too_long += 1
            first += 1
            continue
        keep = ~text.unencodable[first:last + 1]
        source_start, target_start = int(source_from[first]), int(target_from[first])
        source_end, target_end = int(text.source_at[last]) + 1, int(text.target_at[last]) + 1
        out.append(_Window(
            source_ids=np.concatenate([source_frame, source_ids[source_start:source_end]]).astype(np.int64),
            target_ids=np.concatenate([target_frame, target_ids[target_start:target_end]]).astype(np.int64),
            source_at=(text.source_at[first:last + 1][keep] - source_start + len(source_frame)).astype(np.int64),
            target_at=(text.target_at[first:last + 1][keep] - target_start + len(target_frame)).astype(np.int64),
            adjacent=adjacent_matches(~keep), unencodable=int((~keep).sum())))
        first = last + 1
    return out, too_long


def coverage_order(ids: list[np.ndarray], trainable: np.ndarray, budget: int, rng) -> np.ndarray:
    """The order of lines (their target ids `ids`) that `distill.order: coverage` reads: greedily the line with the
    most to teach per token, where a trainable row's share in a line is 1 / (1 + the times the lines taken before
    it show the row), summed over the distinct trainable rows of the line and divided by its length; lines with no
    trainable row teach nothing. Taken until the lines hold `budget` tokens (ties in `rng`'s order), then every other
    line in `rng`'s order."""
    trainable = np.asarray(trainable, dtype=bool)
    shown_ids = [line[line < len(trainable)] for line in ids]  # ids beyond the mask are refused when read
    shown_ids = [line[trainable[line]] for line in shown_ids]
    rows = [np.unique(line) for line in shown_ids]
    shown = np.zeros(len(trainable), dtype=np.int64)
    draw = rng.permutation(len(ids))
    rank = np.empty(len(ids), dtype=np.int64)
    rank[draw] = np.arange(len(ids))

    def gain(index: int) -> float:
        return float((1.0 / (1.0 + shown[rows[index]])).sum()) / max(len(ids[index]), 1)

    heap = [(-gain(index), int(rank[index]), index) for index in range(len(ids)) if len(rows[index])]
    heapq.heapify(heap)
    taken, tokens = [], 0
    while heap and tokens < budget:
        _, position, index = heapq.heappop(heap)
        score = gain(index)
        if heap and score < -heap[0][0]:  # gains only fall: a line that fell below the next is looked at again later
            heapq.heappush(heap, (-score, position, index))
            continue
        taken.append(index)
        tokens += len(ids[index])
        np.add.at(shown, shown_ids[index], 1)
    chosen = np.zeros(len(ids), dtype=bool)
    chosen[taken] = True
    return np.concatenate([np.asarray(taken, dtype=np.int64), draw[~chosen[draw]]])


def _batches(aligner, lines: list[str], source_bos, target_bos, limits: _Limits, batch_lines: int, rng,
             order: np.ndarray | None = None):
    """(batch of `batch_lines` windows, whether it is of the first pass over the text): lines in `order` (default:
    drawn from `rng`); after the last line the windows seen are read again in an order drawn from `rng`, until the
    caller stops."""
    order = rng.permutation(len(lines)) if order is None else order
    seen: list[_Window] = []
    pending: list[_Window] = []
    carried = 0  # chunks too long for a window, from lines that gave no window yet
    for start in range(0, len(order), ALIGN_LINES):
        picked = [lines[index] for index in order[start:start + ALIGN_LINES]]
        for text in aligner.align_batch(picked):
            windows, too_long = _windows(text, source_bos, target_bos, limits)
            carried += too_long
            for window in windows:
                if carried:
                    window = dataclasses.replace(window, too_long=carried)
                    carried = 0
                seen.append(window)
                pending.append(window)
                if len(pending) == batch_lines:
                    yield pending, True
                    pending = []
    if pending:
        yield pending, True
    while seen:
        pending = []
        for index in rng.permutation(len(seen)):
            pending.append(seen[index])
            if len(pending) == batch_lines:
                yield pending, False
                pending = []
        if pending:
            yield pending, False


class _Batch:
    """Windows right-padded into (B, S) source and (B, T) target id tensors, with the flat positions matched."""

    def __init__(self, windows: list[_Window], device):
        self.source_ids, source_real = right_pad([w.source_ids for w in windows], 0)
        self.target_ids, target_real = right_pad([w.target_ids for w in windows], 0)
        source_length, target_length = self.source_ids.shape[1], self.target_ids.shape[1]
        self.source_at = torch.from_numpy(np.concatenate(
            [w.source_at + row * source_length for row, w in enumerate(windows)]).astype(np.int64)).to(device)
        self.target_at = torch.from_numpy(np.concatenate(
            [w.target_at + row * target_length for row, w in enumerate(windows)]).astype(np.int64)).to(device)
        self.adjacent = torch.from_numpy(np.concatenate([w.adjacent for w in windows]).astype(bool)).to(device)
        self.target_tokens = int(target_real.sum())
        # next-token pairs: position p predicts p + 1, both inside the window
        self.predicts = (target_real[:, 1:].bool()).to(device)
        self.source_predicts = (source_real[:, 1:].bool()).to(device)
        self.source_ids = self.source_ids.to(device)
        self.target_ids = self.target_ids.to(device)


class _ScaledRows:
    """A source matrix whose looked-up rows come multiplied by the model's input scale, batch by batch (a scaled
    copy of a 262,144-row matrix would cost gigabytes)."""

    def __init__(self, rows: torch.Tensor, scale: float):
        self.rows, self.scale = rows, scale

    @property
    def device(self):
        return self.rows.device

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, ids: torch.Tensor) -> torch.Tensor:
        return self.rows[ids] * self.scale


def _distill_loss(reader, source: torch.Tensor, batch: _Batch, layers: tuple[int, ...], distance: str,
                  student_inputs, dtype) -> tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]:
    """(loss, matched positions, the student's and the teacher's deepest hidden states read (B, T, d) and (B, S,
    d): the last layer's where `reader` reads the whole body) for one batch; the loss is a float32 scalar averaged over matched positions and
    layers, with gradient to whatever `student_inputs` learns. `reader` maps inputs_embeds to hidden states
    (`models.HiddenStates`, or its `whole`)."""
    with torch.no_grad():
        # index the source matrix where it lies: only the rows read travel to the model's device
        teacher_inputs = source[batch.source_ids.to(source.device)].to(batch.source_ids.device, dtype)
        teacher = reader(inputs_embeds=teacher_inputs)
    student = reader(inputs_embeds=student_inputs(batch.target_ids))
    total = hidden_state_distance(student, teacher, batch.target_at, batch.source_at, layers, distance)
    return total, len(batch.target_at), student[-1], teacher[-1]


def _logits(states: torch.Tensor, weight: torch.Tensor, bias, softcap: float | None) -> torch.Tensor:
    """The head's logits of `states`, float32, capped as the model caps them (Gemma-2's final_logit_softcapping)."""
    logits = F.linear(states, weight.to(torch.float32), None if bias is None else bias.to(torch.float32))
    return logits if not softcap else torch.tanh(logits / softcap) * softcap


def _next_token_loss(hidden: torch.Tensor, batch: _Batch, weight: torch.Tensor, bias,
                     softcap: float | None = None) -> tuple[torch.Tensor, int]:
    """(mean next-token cross-entropy, predicted tokens) of the head (weight (V, d), bias (V,) or None) reading
    `hidden` (B, T, d), in float32, over the pairs inside each window."""
    states = hidden[:, :-1][batch.predicts].to(torch.float32)
    targets = batch.target_ids[:, 1:][batch.predicts]
    if not len(targets):
        return states.new_zeros(()), 0
    return F.cross_entropy(_logits(states, weight, bias, softcap), targets), len(targets)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)
