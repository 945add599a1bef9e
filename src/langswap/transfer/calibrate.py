"""Frequency calibration: move each new output row so the model's mean logit for the token fits its frequency.

At step 0 a transferred model's output rows come from source tokens: a German token mixed from `Ġh` and `aus` gets a
logit that has nothing to do with how often the token occurs in German. Over a text, the mean logit a causal LM
gives token t is exactly h̄ . w_t + b_t (h̄: the mean of the hidden states the output head reads, w_t: the token's
head row, b_t: its output bias, if any), and in a trained model that mean logit grows with the token's
log-frequency, nearly linearly. Calibration measures h̄ on target text, and moves each chosen row so that its mean
logit sits on that line at the token's log-frequency in the target text, by a share `strength` of the distance:

    b_t += s (a log f_t + c - m_t)                        (a model with an output bias)
    w_t += s (a log f_t + c - m_t) h̄ / |h̄|^2              (otherwise; a tied head's input row moves too, unless
                                                           `tied_head` unties or skips it)

The slope `a` is 1 by default (a calibrated model's logits are log-probabilities up to a shift), and the offset `c`
centres the moves (their mean over the moved rows is zero before the rule below), so no text of the source language
is needed. `rounds` repeats the measurement and the move (moving tied rows moves h̄ a little). h̄ is averaged over the
first `hidden_lines` lines. Frequencies come from the target tokenizer's counts on up to `lines` lines, estimated for
new text on the check lines as read by a tokenizer trained without them: by add-k smoothing (`choose_smoothing`, the
default) or by held-out estimation for tokens counted fewer than 3 times (`held_out_log_frequencies`).

Calibration makes the best model to use as it is, and `langswap train` starts from the best start: training on the
target text teaches the model that text's frequencies by itself, and a token the text shows never, once or twice is
lowered by training too, with little in the text to raise it again, so a calibration's lowering of such a token would
stay on top of training's. The move is written beside the model (`langswap.calibration_move`), and training takes
that lowering off first (its `calibration: spare-rare`, rows counted fewer than 3 times; the default, except in an
extension trained with source-language text in every batch), which gives exactly the transfer calibrated with
`lower_min_count: 3`. `lower_min_count` spares such rows in the transfer itself.

The premise (a model whose logits track log-frequencies) holds for trained models, not for every model: the last
`check_lines` lines of the text are kept out of the counts, and unless the calibrated model's mean token loss on them
is lower than before, the rows are put back and the report says so (`skipped`).

Causal LMs only: a masked LM's mean logit over unmasked positions is not its prior over tokens.

`separate` is the extension's step after calibration: given source-language text, it moves the new rows along the
direction of the head's input that tells target positions from source-language ones, keeping their mean logit on
target text, so that they take less of the source language's probability (docs/design.md, "Extending a vocabulary").

`count_fit` comes last (by default in an extension; a pass of the model over the counted lines a round, for each
pseudo-count tried after the first round): the line sets each moved row's level
against the other moved rows (the offset `c`), which is all a softmax over moved rows alone needs; an extension's
softmax also holds the source rows, which never move, and there the new rows' shared level matters. At every position
of counted lines the model's probabilities summed give each token's expected count E; a logit of log((n + k) / (E +
k)) per moved row (n: its count there) is the shift that makes the two meet to first order, and it goes along a
direction of the head's input that adds it at the target text's mean head input and nothing at the source-language
text's, where that text is given (docs/design.md, "Extending a vocabulary").
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass, field

import numpy as np
import torch

from langswap.calibration_move import CalibrationMove
from langswap.errors import ConfigError, LangswapError
from langswap.frequency_line import (CHECK_LINES, HIDDEN_LINES, LINES, MAX_LENGTH, frequency_line, mean_head_input,
                                     read_head_inputs, smoothed_log_frequencies, split_check_lines)
from langswap.head_inputs import CheckLines, CountedLines, mean_token_loss
from langswap.models import is_tied, objective_of
from langswap.reports import (CalibrationReport, CountFitReport, Frequencies, InputRows, LossCheck, SeparationReport,
                              Spread, TextPair, UpOnlyRows)
from langswap.resources.tokenizer import token_counts
from langswap.surgery import set_config_value

logger = logging.getLogger(__name__)

COUNT_FIT_LINES = 1000  # counted lines read for the expected counts
COUNT_FIT_SMOOTHINGS = (0.5, 5.0)  # the pseudo-counts the expected-count fit chooses among on the check lines
SOURCE_ROWS_RISE = 0.005  # the most the source-language check loss may rise where the fit moves the source rows


@dataclass(frozen=True, kw_only=True)
class CalibrationConfig:
    """Frequency calibration of the output rows after a transfer (`langswap.transfer.calibrate`)."""

    strength: float | None = field(default=None, metadata={
        "help": "Share of the distance to the frequency line each chosen row moves: 0 turns calibration off, 1 "
                "puts every mean logit on the line; unset: 1 for a causal LM when the transfer has target-language "
                "text (calibration.text, target_text or resources.token_text), otherwise off."})
    rows: str = field(default="all", metadata={
        "help": "Which rows move: all (every non-special row), new (rows the method did not copy) or auto (both "
                "tried, the one with the lower mean token loss on the check lines kept; all without check lines).",
        "choices": ("all", "new", "auto")})
    slope: float = field(default=1.0, metadata={"help": "Mean logit per unit of log-frequency on the line."})
    frequencies: str = field(default="add-k", metadata={
        "help": "How counts become the frequencies rows move towards: add-k (add-`smoothing` counts) or held-out "
                "(a token counted r < 3 times gets the frequency in new text of the tokens counted r times, "
                "measured on the check lines read by a tokenizer trained without them; more frequent tokens their "
                "relative frequency; add-k where no tokenizer can be trained or there are no check lines). "
                "held-out starts better and ends training better or worse depending on the text (docs/design.md).",
        "choices": ("add-k", "held-out")})
    smoothing: float | None = field(default=None, metadata={
        "help": "add-k's pseudo-count, added to every token's count before its frequency is taken; unset: the one "
                "that best predicts the check lines when a tokenizer like the target's is trained on the counted "
                "lines alone (`choose_smoothing`), or 0.5 without check lines."})
    rounds: int = field(default=1, metadata={"help": "Measure and move this many times."})
    text: str | None = field(default=None, metadata={
        "help": "Target-language text the frequencies and hidden states are taken from; default: the transfer's "
                "target_text or resources.token_text."})
    lines: int = field(default=LINES, metadata={"help": "Lines of text counted for the frequencies."})
    hidden_lines: int = field(default=HIDDEN_LINES, metadata={"help": "Lines whose hidden states are averaged."})
    max_length: int = field(default=MAX_LENGTH, metadata={"help": "Tokens of each line read for the hidden states."})
    lower_min_count: int = field(default=0, metadata={
        "help": "A row moves down only where the counted lines show its token at least this many times; rows of "
                "rarer tokens move up only (0, the default: every row may move, the better model to use as it is; "
                "`langswap train` then takes the lowering of rows counted fewer than its calibration_min_count (3) "
                "times off before training, since training on text that lacks them lowers them by itself and a "
                "calibration's lowering would stay on top; 1: the rows of tokens the lines never show move up "
                "only)."})
    tied_head: str = field(default="move", metadata={
        "help": "A tied head: move (the input rows move with the output rows), untie (the head gets its own copy "
                "of the matrix first, so only it moves) or skip (no calibration).",
        "choices": ("move", "untie", "skip")})
    check_lines: int = field(default=CHECK_LINES, metadata={
        "help": "Lines of the text, kept out of the counts, on which the calibrated model must predict better than "
                "before; otherwise the rows are put back (0: no check)."})
    source_text: str | None = field(default=None, metadata={
        "help": "Source-language text, for a transfer into an extended vocabulary: the new rows then also move along "
                "the direction of the head's input that best tells target-language positions from source-language "
                "ones (`separate`), their mean logit on target text kept, so that they take less of the source "
                "language's probability. Off unless set; a causal LM only."})
    separation: float | None = field(default=None, metadata={
        "help": "How far the new rows move along that direction (the direction is scaled to part the two texts' "
                "mean head inputs by 2 logits); unset: chosen among 0, 0.5, 1 and 2 on the check lines of both "
                "texts, as the lowest sum of the two mean token losses each relative to no move among the amounts "
                "that leave the source-language loss within 0.5% of the source model's (where none does, the one "
                "with the lowest source-language loss)."})

    count_fit: str = field(default="auto", metadata={
        "help": "After the frequency line (and an extension's separation), move the same rows once more so that each "
                "one's expected count on counted lines (the sum of its probability over their positions) meets its "
                "count there: log((count + k) / (expected + k)), k the pseudo-count count_fit_smoothing, along the "
                "direction of the head's input that adds 1 to the logit at the target text's mean head input and 0 "
                "at the source-language text's (calibration.source_text; otherwise along the target mean alone). "
                "The line sets each row's level against the other moved rows; where the softmax also holds rows "
                "that do not move (an extension's source rows), this sets it against them too. Kept only where the "
                "check lines read better (both texts' summed, each relative to before). auto: in an extension; "
                "on; off.", "choices": ("auto", "on", "off")})
    count_fit_lines: int = field(default=COUNT_FIT_LINES, metadata={
        "help": "Counted lines the model reads for the expected counts (a pass of the model over them), spread evenly "
                "over the counted lines."})
    count_fit_smoothing: float | None = field(default=None, metadata={
        "help": "Pseudo-count k added to both the count and the expected count of every row; unset: the fit made "
                "with each of " + ", ".join(f"{k:g}" for k in COUNT_FIT_SMOOTHINGS) + " from the same start and the "
                "one whose check lines read best chosen (then kept only where it reads them better than no fit); "
                "where rows have few counted positions the larger one tends to win."})
    count_fit_source_rows: str = field(default="auto", metadata={
        "help": "auto: in an extension with source_text, the fit is also made over the source model's own rows (every "
                "non-special row), along the direction of the head's input that adds 1 at the target text's mean "
                "head input, 0 at the source-language text's and varies least over the source-language positions; "
                "chosen where its check lines read best and the source-language check loss rises by at most "
                f"{SOURCE_ROWS_RISE:.1%} (so a source row's level on the target language follows the pieces the new "
                "tokens took from it); on: as auto, and in an extension without source_text too, along the target "
                "text's mean head input (a self-extension, whose target language is the one the source model "
                "reads: there is no other language to keep); off: only the rows calibration moved.",
        "choices": ("auto", "on", "off")})
    count_fit_rounds: int = field(default=2, metadata={
        "help": "Count, move, and count again this many times (each round after the first a pass of the model over "
                "the lines for each pseudo-count tried)."})

    def __post_init__(self):
        if self.count_fit not in ("auto", "on", "off"):
            raise ConfigError(f"calibration.count_fit is {self.count_fit!r}; choose auto, on or off.")
        if self.count_fit_source_rows not in ("auto", "on", "off"):
            raise ConfigError(f"calibration.count_fit_source_rows is {self.count_fit_source_rows!r}; choose auto, on "
                              "or off.")
        smoothing = self.count_fit_smoothing
        if self.count_fit_lines < 1 or self.count_fit_rounds < 1 or not (
                smoothing is None or (smoothing > 0 and math.isfinite(smoothing))):
            raise ConfigError("calibration.count_fit_lines and count_fit_rounds must be at least 1, "
                              "count_fit_smoothing a finite pseudo-count above 0 (0.5: add-half) or unset (chosen "
                              "on the check lines).")
        if self.strength is not None and not 0 <= self.strength <= 1:
            raise ConfigError(f"calibration.strength is {self.strength}; give a share in [0, 1] (0: off).")
        if self.tied_head not in ("move", "untie", "skip"):
            raise ConfigError(f"calibration.tied_head is {self.tied_head!r}; choose move, untie or skip.")
        if self.rows not in ("all", "new", "auto"):
            raise ConfigError(f"calibration.rows is {self.rows!r}; choose all, new or auto.")
        if self.smoothing is not None and not (self.smoothing > 0 and math.isfinite(self.smoothing)):
            raise ConfigError(f"calibration.smoothing is {self.smoothing}; give a finite pseudo-count above 0 (0.5: "
                              "add-half), or leave it unset to have it chosen.")
        if self.lower_min_count < 0:
            raise ConfigError(f"calibration.lower_min_count is {self.lower_min_count}; give a count of at least 0 (0: "
                              "every row may move down).")
        if self.frequencies not in ("add-k", "held-out"):
            raise ConfigError(f"calibration.frequencies is {self.frequencies!r}; choose add-k or held-out.")
        if self.frequencies == "held-out" and self.smoothing is not None:
            raise ConfigError("calibration.smoothing is add-k's pseudo-count; with frequencies: held-out leave it "
                              "unset.")
        if self.separation is not None and not (self.separation >= 0 and math.isfinite(self.separation)):
            raise ConfigError(f"calibration.separation is {self.separation}; give a finite amount of at least 0 (0: no "
                              "move), or leave it unset to have it chosen on the check lines.")
        if self.rounds < 1 or self.lines < 1 or self.hidden_lines < 1 or self.max_length < 2 or self.check_lines < 0:
            raise ConfigError("calibration.rounds, lines and hidden_lines must be at least 1, max_length at least 2, "
                              "check_lines at least 0.")

    @property
    def enabled(self) -> bool:
        """Asked for explicitly (a strength above 0): a transfer that cannot calibrate is then an error."""
        return self.strength is not None and self.strength > 0

    def plan(self, has_text: bool, causal: bool) -> tuple[float, str | None]:
        """(the strength a transfer applies, why it applies none): an unset strength is 1 where the model is a
        causal LM and target-language text is at hand, otherwise 0 with the reason."""
        if self.strength is not None:
            return self.strength, None if self.strength > 0 else "calibration.strength is 0"
        if not causal:
            return 0.0, "not a causal LM (a masked LM's mean logit is not its prior over tokens)"
        if not has_text:
            return 0.0, "no target-language text: set calibration.text (or target_text)"
        return 1.0, None


def calibratable(model) -> bool:
    """Whether frequency calibration applies to `model`: a causal LM."""
    return objective_of(model.config) == "causal" and not type(model).__name__.endswith("ForMaskedLM")


def untie_head(model) -> None:
    """Give a tied model's output layer its own copy of the embedding matrix (config.tie_word_embeddings false), so
    moving output rows leaves the input rows where they are."""
    if not is_tied(model):
        return
    output = model.get_output_embeddings()
    output.weight = torch.nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    set_config_value(model.config, "tie_word_embeddings", False)


def tie_head(model) -> None:
    """Undo `untie_head`: the output layer shares the embedding matrix again."""
    set_config_value(model.config, "tie_word_embeddings", True)
    model.get_output_embeddings().weight = model.get_input_embeddings().weight


def log_frequencies(tokenizer, lines: list[str], size: int, smoothing: float = 0.5) -> np.ndarray:
    """(size,) log of each token id's add-`smoothing` smoothed relative frequency in `lines`."""
    return smoothed_log_frequencies(token_counts(tokenizer, lines, size), smoothing)


def head_input_states(model, tokenizer, lines: list[str], max_length: int, progress: bool = False,
                      label: str = "calibration") -> torch.Tensor:
    """(positions, d) float32 hidden states the output head reads at every position of `lines`, on the CPU."""
    states = []
    read_head_inputs(model, tokenizer, lines, max_length, lambda hidden: states.append(hidden.cpu()),
                     progress=progress, label=label)
    return torch.cat(states)


def input_row_moves(before: torch.Tensor, after: torch.Tensor, moved: np.ndarray) -> InputRows:
    """What a calibration did to a tied model's input rows (`before`, `after`: (V, d)): how many of the rows
    `moved` names did move, and over those, each move's size relative to the row's own norm (median, 90th
    percentile, largest)."""
    rows = torch.from_numpy(np.flatnonzero(moved))
    start = before[rows].to(torch.float32)
    shift = (after.detach()[rows].to(torch.float32) - start).norm(dim=1)
    relative = (shift / start.norm(dim=1).clamp_min(1e-12)).cpu().numpy()
    relative = relative[(shift > 0).cpu().numpy()]
    if not len(relative):
        return InputRows(moved=0)
    return InputRows(moved=len(relative), relative_shift=Spread(
        median=round(float(np.median(relative)), 4), p90=round(float(np.quantile(relative, 0.9)), 4),
        max=round(float(relative.max()), 4)))


def padded_mask(moved, size: int) -> np.ndarray:
    """`moved` as a (size,) bool array: cut to `size`, or padded with False (rows beyond the tokenizer, padding,
    stay)."""
    moved = np.asarray(moved, dtype=bool)[:size]
    return np.concatenate([moved, np.zeros(size - len(moved), dtype=bool)]) if len(moved) < size else moved


def head_as_configured(model, config: CalibrationConfig) -> tuple[bool, str | None]:
    """(whether a tied head was untied here, as `tied_head: untie` asks; why the step is skipped where the head is
    tied and `tied_head` is skip, else None)."""
    tied = is_tied(model)
    if tied and config.tied_head == "skip":
        return False, "the head is tied (calibration.tied_head: skip)"
    if tied and config.tied_head == "untie":
        untie_head(model)
        return True, None
    return False, None


def calibrate(model, tokenizer, lines: list[str], config: CalibrationConfig, moved: np.ndarray,
              line: tuple[np.ndarray, dict, np.ndarray] | None = None, progress: bool = False,
              loss_before: float | None = None) -> CalibrationReport:
    """Move the output rows `moved` (a boolean mask over the vocabulary) of `model` as the module docstring says;
    returns the report (rows moved, mean |move| of the mean logits before and after, per round; with the check, the
    held-out loss of the model as left, unrounded, as `held_out_loss`). `line`: `frequency_line`'s result for
    these lines and config, where the caller has it already. `progress`: a bar on each pass over the text.
    `loss_before`: the model's mean token loss on the check lines, where the caller measured it already."""
    assert config.strength is not None, "calibrate() takes a resolved strength (CalibrationConfig.plan)"
    if not calibratable(model):
        raise ConfigError("frequency calibration is for causal LMs (a masked LM's mean logit over unmasked "
                          "positions is not its prior); set calibration.strength: 0 for this model.")
    untied, skipped = head_as_configured(model, config)
    if skipped:
        return CalibrationReport(rows=0, skipped=skipped)
    head = model.get_output_embeddings()
    weight = head.weight
    bias = getattr(head, "bias", None)
    size = weight.shape[0]
    moved = padded_mask(moved, size)
    if line is None:
        line = frequency_line(tokenizer, lines, size, config)
    logf, frequencies, counts = line
    up_only = counts < config.lower_min_count
    assert len(logf) == size, (len(logf), size)
    lines, held = split_check_lines(lines, config)
    before = None
    if held:
        before = mean_token_loss(model, tokenizer, held, config.max_length, progress) if loss_before is None \
            else loss_before
    moves_inputs = bias is None and is_tied(model)
    saved = (weight.detach().clone(), None if bias is None else bias.detach().clone()) \
        if held or moves_inputs else None
    rounds, logits, directions = [], [], []
    for _ in range(config.rounds):
        hidden = mean_head_input(model, tokenizer, lines[:config.hidden_lines], config.max_length, progress=progress)
        with torch.no_grad():
            current = (weight.detach().to(torch.float32) @ hidden.to(weight.device)).cpu().numpy()
            if bias is not None:
                current = current + bias.detach().to(torch.float32).cpu().numpy()
            offset = float(np.mean(current[moved] - config.slope * logf[moved]))
            distance = np.where(moved, config.slope * logf + offset - current, 0.0)
            distance = np.where(up_only, np.maximum(distance, 0.0), distance)
            delta = torch.from_numpy(config.strength * distance).to(torch.float32)
            logits.append(delta.numpy().copy())
            if bias is not None:
                bias += delta.to(bias.device, bias.dtype)
                directions.append(None)
            else:
                direction = (hidden / hidden.dot(hidden).clamp_min(1e-12)).to(weight.device)
                weight += (delta.to(weight.device)[:, None] * direction[None, :]).to(weight.dtype)
                directions.append(direction.detach().to(torch.float32).cpu().numpy())
        rounds.append({"mean_abs_distance": round(float(np.abs(distance[moved]).mean()), 4)})
    report = CalibrationReport(
        rows=int(moved.sum()), strength=config.strength, slope=config.slope,
        through="output bias" if bias is not None else "head rows along the mean hidden state", rounds=rounds,
        frequencies=Frequencies.from_dict(frequencies),
        up_only_rows=UpOnlyRows(rows=int((up_only & moved).sum()), below_count=config.lower_min_count),
        input_rows=input_row_moves(saved[0], weight, moved) if moves_inputs else InputRows(moved=0),
        move=CalibrationMove(logits, directions, np.asarray(counts), tied=moves_inputs))
    if held:
        after = mean_token_loss(model, tokenizer, held, config.max_length, progress)
        report.check = LossCheck(lines=len(held), loss_before=round(before, 4), loss_after=round(after, 4))
        report.held_out_loss = min(before, after)
        if not after < before:
            with torch.no_grad():
                weight.copy_(saved[0])
                if bias is not None:
                    bias.copy_(saved[1])
            if untied:
                tie_head(model)
            logger.warning("frequency calibration put back: on %d held-out lines of the text the mean token loss "
                           "went from %.4f to %.4f", len(held), before, after)
            return dataclasses.replace(
                report, rows=0, held_out_loss=before, input_rows=InputRows(moved=0), move=None,
                skipped=f"put back: it raised the mean token loss on {len(held)} held-out lines of the text "
                        f"({before:.4f} -> {after:.4f})")
    logger.info("calibrated %s output rows to the target text's frequencies (mean |distance| %s)%s",
                f"{report.rows:,}", ", ".join(str(r["mean_abs_distance"]) for r in rounds),
                f"; held-out token loss {before:.4f} -> {after:.4f}" if held else "")
    return report


def spread_lines(lines: list[str], count: int) -> list[str]:
    """At most `count` of `lines`, evenly spaced over them (a text ordered by source or topic is sampled throughout,
    not only where it starts)."""
    return lines[::max(1, len(lines) // count)][:count] if count < len(lines) else list(lines)


def count_fit_direction(mean_target: torch.Tensor, mean_source: torch.Tensor | None = None,
                        source_states: torch.Tensor | None = None) -> torch.Tensor:
    """(d,) the direction the expected-count fit moves rows along: v . mean_target = 1 and, given the source-language
    text's mean head input, v . mean_source = 0, of the least norm (in the span of the two means); given the
    source-language positions' head inputs ((positions, d)) too, of the least variance over them instead (v' S v, S
    their covariance with its diagonal raised by `SHRINKAGE` of its mean variance), so that a row moved along it
    keeps its logit at each source-language position, not only on average."""
    if mean_source is None:
        return mean_target / mean_target.dot(mean_target).clamp_min(1e-12)
    means = torch.stack([mean_target, mean_source]).double()
    if source_states is None:
        weights = torch.linalg.solve(means @ means.T, torch.tensor([1.0, 0.0], dtype=torch.float64))
        return (weights @ means).float()
    solved = torch.linalg.solve(shrunk_covariance(source_states - source_states.mean(0)), means.T)  # S^-1 M', (d, 2)
    return (solved @ torch.linalg.solve(means @ solved, torch.tensor([1.0, 0.0], dtype=torch.float64))).float()


def count_fit(model, tokenizer, target_lines: list[str], source_lines: list[str], config: CalibrationConfig,
              moved: np.ndarray, progress: bool = False, target_loss: float | None = None,
              move: CalibrationMove | None = None, source_rows: np.ndarray | None = None,
              source_loss: float | None = None) -> CountFitReport:
    """Move the output rows `moved` so that each one's expected count on `count_fit_lines` counted lines of
    `target_lines`, spread evenly over them (`spread_lines`), meets its count there (`CalibrationConfig.count_fit`):
    a logit of log((n + k) / (E + k)) each, along the direction v of the head's input with v . m_target = 1 and,
    given source-language lines, v . m_source = 0 (each text's mean head input over the positions read), so that each
    row's mean logit on the source language stays; `count_fit_rounds` times, counting again with the rows as the last
    round left them. k is `count_fit_smoothing`, or where that is unset each of `COUNT_FIT_SMOOTHINGS` fitted from
    the same start and the one whose check lines (the last `check_lines` of each text) read best taken. Kept only
    where the check lines read better than before, their mean token losses summed, each relative to before;
    otherwise put back (a head this step untied tied again).
    `target_loss`, `source_loss`: the two texts' check losses as the model is (each measured here where None).
    `move`: calibration's move, which gets this one as a round of its own where it is kept (so `langswap train` can
    take it off as it takes calibration's). `source_rows`: an extension's source rows that may move as well (`count_fit_source_rows`): with
    source-language lines, the fit is also made over `moved` and them together, along `count_fit_direction` of
    least variance over the source-language positions, with each pseudo-count; such a fit is chosen only where the
    source-language check loss rises by at most `SOURCE_ROWS_RISE`. Without source-language lines (a
    self-extension) the fit over them all goes along the target text's mean head input, judged on the target check
    lines alone."""
    if not calibratable(model):
        raise ConfigError("calibration.count_fit is for causal LMs; set it to off for this model.")
    untied, skipped = head_as_configured(model, config)
    if skipped:
        return CountFitReport(rows=0, skipped=skipped)
    target_fit, target_check = split_check_lines(target_lines, config)
    source_fit, source_check = split_check_lines(source_lines, config) if source_lines else ([], [])
    if not target_check:
        why = (f"no check lines to keep it on (the text needs at least {2 * config.check_lines} lines, "
               "calibration.check_lines twice)")
        logger.warning("expected-count fit not made: %s", why)
        return CountFitReport(rows=0, skipped=why)
    counted = CountedLines(model, tokenizer, spread_lines(target_fit, config.count_fit_lines), config.max_length,
                           progress)
    expected, counts, mean_target, positions = counted.expected()
    head = model.get_output_embeddings()
    weight = head.weight
    size = weight.shape[0]
    source_rows = (padded_mask(source_rows, size) if source_rows is not None and source_rows.any()
                   and (bool(source_check and source_fit) or not source_lines) else None)
    mean_source, source_states = _source_head_inputs(model, tokenizer, config, source_fit,
                                                     source_rows is not None, progress)
    direction = count_fit_direction(mean_target, mean_source)
    along = ("direction that adds 1 at the target text's mean head input and 0 at the source-language text's"
             if mean_source is not None else "target text's mean head input")
    moved = padded_mask(moved, size)
    calibrated = moved
    candidates = _count_fit_candidates(config, calibrated, direction, mean_target, source_rows, source_states)
    checks = {which: CheckLines(model, tokenizer, lines, config.max_length, progress)
              for which, lines in (("target", target_check), ("source", source_check)) if lines}

    def losses(known: dict[str, float]) -> dict[str, float]:
        return {which: known[which] if which in known else check.loss() for which, check in checks.items()}

    before = losses({w: loss for w, loss in (("target", target_loss), ("source", source_loss)) if loss is not None})
    tied = is_tied(model)
    saved = weight.detach().clone()  # with a tied head also the input rows as they were

    tried, (rows, k, moved, chosen_direction), shift, surpluses = _best_fit(model, counted, config, candidates,
                                                                            counts, expected, losses, before, saved)
    after = tried[rows, k]
    if rows == "all" and source_states is not None:
        direction = chosen_direction
        along += ", of the least variance over the source-language positions"
    kept = _relative(after, before) < len(after)
    magnitude = np.abs(shift[moved])
    fits = {name: {f"{k_:g}": TextPair(**{w: round(v, 4) for w, v in losses_.items()})
                   for (rows_, k_), losses_ in tried.items() if rows_ == name} for name in ("new", "all")}
    report = CountFitReport(
        rows=int(moved.sum()), lines=len(counted.lines), positions=positions, smoothing=k,
        smoothings=fits["new"] if len(tried) > 1 else None, with_source_rows=fits["all"] or None,
        source_rows=int((moved & ~calibrated).sum()),
        surplus=surpluses[0], surplus_by_round=surpluses, direction=along, kept=kept,
        shift=Spread(median=round(float(np.median(magnitude)), 4), p90=round(float(np.quantile(magnitude, 0.9)), 4),
                     max=round(float(magnitude.max()), 4)) if len(magnitude) else None,
        losses={"before": TextPair(**{w: round(v, 4) for w, v in before.items()}),
                "after": TextPair(**{w: round(v, 4) for w, v in after.items()})})
    if kept:
        if tied:
            report.input_rows = input_row_moves(saved, model.get_input_embeddings().weight, moved)
        if move is not None:
            move.logits.append(shift.astype(np.float32))
            move.directions.append(direction.numpy().astype(np.float32))
        report.held_out_loss, report.held_out_source_loss = after["target"], after.get("source")
        logger.info("expected-count fit: %s rows moved (%.4f expected a position too many before); check-line loss "
                    "%s", f"{report.rows:,}", report.surplus, ", ".join(f"{w} {before[w]:.4f} -> {after[w]:.4f}"
                                                                  for w in after))
    else:
        with torch.no_grad():
            weight.copy_(saved)
        if untied:
            tie_head(model)
        report.held_out_loss, report.held_out_source_loss = before["target"], before.get("source")
        logger.info("expected-count fit put back: check-line loss %s", ", ".join(
            f"{w} {before[w]:.4f} -> {after[w]:.4f}" for w in after))
    return report


def _relative(after: dict[str, float], before: dict[str, float]) -> float:
    """The check losses `after`, each relative to `before`, summed (len(after) where nothing changed)."""
    return sum(after[which] / before[which] for which in after)


def _best_fit(model, counted: CountedLines, config: CalibrationConfig, candidates: list[tuple], counts: np.ndarray,
              expected: np.ndarray, losses, before: dict[str, float], saved: torch.Tensor):
    """`count_fit`'s candidates each fitted from the head rows `saved` (`_fit_rounds`) and read on the check lines
    (`losses({})`); the head left as the best admissible fit moved it (a fit of the source rows too only where the
    source-language check loss rises by at most `SOURCE_ROWS_RISE`). Returns (every fit's check losses by (rows,
    pseudo-count), the best candidate, the logits it added, its surplus before each round)."""
    weight = model.get_output_embeddings().weight
    tried = {}  # (rows, pseudo-count) -> the check losses after its fit
    best = None  # (relative loss, candidate, the logits added, surplus before each round, its rows unless last)
    for index, candidate in enumerate(candidates):  # each from the same start; the first round's counts are shared
        rows, k, rows_moved, along = candidate
        with torch.no_grad():
            weight.copy_(saved)
        shift, surpluses = _fit_rounds(model, counted, config, along, rows_moved, counts, expected, k)
        tried[rows, k] = losses({})
        logger.info("expected-count fit over %s with pseudo-count %g: check-line loss %s",
                    "the new rows" if rows == "new" else "every row", k,
                    ", ".join(f"{w} {before[w]:.4f} -> {tried[rows, k][w]:.4f}" for w in tried[rows, k]))
        admissible = (rows == "new" or "source" not in before
                      or tried[rows, k]["source"] <= before["source"] * (1 + SOURCE_ROWS_RISE))
        if admissible and (best is None or _relative(tried[rows, k], before) < best[0]):
            last = index == len(candidates) - 1  # the rows are the weights as they are
            best = (_relative(tried[rows, k], before), candidate, shift, surpluses,
                    None if last else weight.detach().clone())
    _, candidate, shift, surpluses, fitted = best
    if fitted is not None:
        with torch.no_grad():
            weight.copy_(fitted)
    return tried, candidate, shift, surpluses


def _source_head_inputs(model, tokenizer, config: CalibrationConfig, source_fit: list[str], keep_states: bool,
                        progress: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(the mean head input over the first `hidden_lines` of `source_fit`, with `keep_states` the head inputs at
    their positions too), read once; (None, None) without source-language lines."""
    if not source_fit:
        return None, None
    read = mean_head_input(model, tokenizer, source_fit[:config.hidden_lines], config.max_length, progress=progress,
                           keep_states=keep_states)
    return read if keep_states else (read, None)


def _count_fit_candidates(config: CalibrationConfig, calibrated: np.ndarray, direction: torch.Tensor,
                          mean_target: torch.Tensor, source_rows: np.ndarray | None,
                          source_states: torch.Tensor | None) -> list[tuple]:
    """`count_fit`'s fits to try, each (rows, pseudo-count, the rows moved, the direction): the rows calibration moved
    along `direction` with each pseudo-count, then, given `source_rows`, those and the source rows along the direction
    of least variance over `source_states`, the head inputs at the source-language lines' positions (along
    `direction` too where there are none: a self-extension)."""
    smoothings = (config.count_fit_smoothing,) if config.count_fit_smoothing is not None else COUNT_FIT_SMOOTHINGS
    candidates = [("new", k, calibrated, direction) for k in smoothings]
    if source_rows is not None:
        least_varying = (count_fit_direction(mean_target, source_states.mean(0), source_states)
                         if source_states is not None else direction)
        candidates += [("all", k, calibrated | source_rows, least_varying) for k in smoothings]
    return candidates


def _fit_rounds(model, counted: CountedLines, config: CalibrationConfig, direction: torch.Tensor,
                moved: np.ndarray, counts: np.ndarray, expected: np.ndarray, k: float) -> tuple[np.ndarray, list[float]]:
    """`count_fit`'s rounds with the pseudo-count k, from the model as it is and the counts `expected` it gives on
    the `counted` lines: each round adds log((n + k) / (E + k)) to the `moved` rows along `direction`, then counts again. Returns
    the logits added and the surplus (expected less counted, per position) before each round."""
    weight = model.get_output_embeddings().weight
    positions = counts.sum()
    shift, surpluses = np.zeros(len(counts)), []
    for round_ in range(config.count_fit_rounds):  # each round counts again with the rows the last one moved
        if round_:
            expected = counted.expected()[0]
        step = np.where(moved, np.log((counts + k) / (expected + k)), 0.0)
        surpluses.append(round(float((expected[moved] - counts[moved]).sum()) / positions, 4))
        shift += step
        with torch.no_grad():
            weight += (torch.from_numpy(step).to(torch.float32)[:, None] * direction[None, :]).to(weight.device,
                                                                                                  weight.dtype)
    return shift, surpluses


SEPARATIONS = (0.0, 0.5, 1.0, 2.0)  # amounts `separate` chooses among on the check lines
SOURCE_BOUND = 0.005  # the most the source-language check loss may exceed the source model's where `separate` chooses
SHRINKAGE = 0.1  # of the covariance's mean variance, added to its diagonal


def shrunk_covariance(centred: torch.Tensor) -> torch.Tensor:
    """(d, d) float64 covariance of centred (positions, d) states, its diagonal raised by `SHRINKAGE` of its mean
    variance (so that it can be solved against where positions are fewer than dimensions)."""
    centred = centred.double()
    covariance = centred.T @ centred / len(centred)
    return covariance + SHRINKAGE * covariance.diagonal().mean() * torch.eye(len(covariance), dtype=torch.float64)


def discriminant(target: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    """(d,) the shrunk linear discriminant between two sets of head inputs ((positions, d) each): the within-class
    covariance (its diagonal raised by `SHRINKAGE` of its mean variance) solved against the difference of the two
    means, scaled so that it parts the means by 2 (w . m_target - w . m_source = 2)."""
    means = target.mean(0), source.mean(0)
    covariance = shrunk_covariance(torch.cat([target - means[0], source - means[1]]))
    gap = (means[0] - means[1]).double()
    direction = torch.linalg.solve(covariance, gap)
    spread = float(direction.dot(gap))
    if not (spread > 0 and math.isfinite(spread)):
        raise LangswapError("the two texts give the model the same mean head input, so no direction tells them apart; "
                            "give source-language text that is not the target text.")
    return (2 * direction / spread).float()


def separation_accuracy(direction: torch.Tensor, target: torch.Tensor, source: torch.Tensor) -> dict[str, float]:
    """Share of each set's positions on its own side of the midpoint between the two sets' mean projections on
    `direction` ({"target": ..., "source": ...})."""
    middle = float(direction @ (target.mean(0) + source.mean(0))) / 2
    return {"target": float((target @ direction > middle).float().mean()),
            "source": float((source @ direction <= middle).float().mean())}


def held_out_accuracy(target: torch.Tensor, source: torch.Tensor, share: float = 0.2) -> float | None:
    """The mean of `separation_accuracy`'s two shares on a random `share` of each set's positions (seed 0), for the
    discriminant of the rest; None where a set has fewer than 10 positions."""
    if min(len(target), len(source)) < 10:
        return None
    generator = torch.Generator().manual_seed(0)
    parts = []
    for states in (target, source):
        order = torch.randperm(len(states), generator=generator)
        held = max(1, int(len(states) * share))
        parts.append((states[order[held:]], states[order[:held]]))
    right = separation_accuracy(discriminant(parts[0][0], parts[1][0]), parts[0][1], parts[1][1])
    return sum(right.values()) / 2


@torch.no_grad()
def separate(model, tokenizer, target_lines: list[str], source_lines: list[str], config: CalibrationConfig,
             moved: np.ndarray, progress: bool = False, target_loss: float | None = None) -> SeparationReport:
    """Move the output rows `moved` of an extended model along the direction of the head's input that tells target
    positions from source-language ones (`discriminant` of the first `hidden_lines` lines of each text less its
    check lines), projected off the target text's mean head input h_t so that each row's mean logit on target text
    stays as it is (nearly, where a tied head moves the input rows too): the same vector
    `a (w - (w . h_t) h_t / |h_t|^2)` is added to every moved row. `a` is
    `config.separation`, or, unset, the one of `SEPARATIONS` with the lowest sum of the mean token losses on the two
    texts' check lines, each relative to its loss at 0, among those that leave the source-language check loss within
    `SOURCE_BOUND` of the source model's (the model's loss with the moved rows and the padding taken out of the
    softmax, `mean_token_loss`'s `without_rows`); where none does, the one with the lowest source-language loss.
    Returns the report (the amount, the losses per amount, the source model's loss, the held-out accuracy of the
    direction, `held_out_loss`: the target check loss as left). `target_loss`: the mean token loss of the model as it
    is on the target check lines (`calibrate`'s `held_out_loss` with the same config and lines), which is then not
    measured again; None: measured."""
    if not calibratable(model):
        raise ConfigError("calibration.source_text is for causal LMs; leave it unset for this model.")
    _, skipped = head_as_configured(model, config)
    if skipped:
        return SeparationReport(rows=0, skipped=skipped)
    target_fit, target_check = split_check_lines(target_lines, config)
    source_fit, source_check = split_check_lines(source_lines, config)
    checked = bool(target_check) and bool(source_check)
    if config.separation is None and not checked:
        why = ("no check lines to choose the amount on (each text needs at least twice calibration.check_lines "
               "lines); set calibration.separation")
        logger.warning("new rows not moved off the source language: %s", why)
        return SeparationReport(rows=0, skipped=why)
    states = {name: head_input_states(model, tokenizer, lines[:config.hidden_lines], config.max_length, progress,
                                      label=f"{name}-language head inputs")
              for name, lines in (("target", target_fit), ("source", source_fit))}
    direction = discriminant(states["target"], states["source"])
    accuracy = held_out_accuracy(states["target"], states["source"])
    hidden = states["target"].mean(0)
    step = direction - direction.dot(hidden) / hidden.dot(hidden) * hidden
    weight = model.get_output_embeddings().weight
    rows = torch.from_numpy(np.flatnonzero(np.asarray(moved, dtype=bool)[:weight.shape[0]]))
    start = weight[rows.to(weight.device)].detach().clone()
    tied = is_tied(model)
    step = step.to(weight.device)

    def place(amount: float) -> None:
        weight[rows.to(weight.device)] = (start.to(torch.float32) + amount * step).to(weight.dtype)

    amounts = [config.separation] if config.separation is not None else list(SEPARATIONS)
    losses, reference = {}, None
    if checked:
        taken = torch.zeros(weight.shape[0], dtype=torch.bool)
        taken[rows] = True
        taken[len(tokenizer):] = True  # padding rows: the source's softmax has none of the extension's
        reference = mean_token_loss(model, tokenizer, source_check, config.max_length, without_rows=taken)
        checks = {name: CheckLines(model, tokenizer, lines, config.max_length, progress)
                  for name, lines in (("target", target_check), ("source", source_check))}
        for amount in amounts if 0.0 in amounts else [0.0, *amounts]:
            place(amount)
            losses[amount] = {name: target_loss if name == "target" and amount == 0.0 and target_loss is not None
                              else check.loss() for name, check in checks.items()}
        base = losses[0.0]
        ranked = {amount: sum(loss[name] / base[name] for name in base) for amount, loss in losses.items()}
        within = [amount for amount in amounts if losses[amount]["source"] <= reference * (1 + SOURCE_BOUND)]
        chosen = (config.separation if config.separation is not None else
                  min(within, key=lambda a: ranked[a]) if within else min(amounts, key=lambda a: losses[a]["source"]))
    else:
        chosen = config.separation
    place(chosen)
    report = SeparationReport(
        rows=int(len(rows)) if chosen else 0, amount=chosen,
        chosen_by="calibration.separation" if config.separation is not None else "check lines",
        check_lines=TextPair(target=len(target_check), source=len(source_check)),
        positions=TextPair(**{name: len(value) for name, value in states.items()}),
        direction_accuracy_held_out=None if accuracy is None else round(accuracy, 3),
        losses={f"{amount:g}": TextPair(**{name: round(value, 4) for name, value in loss.items()})
                for amount, loss in losses.items()},
        source_model_loss=None if reference is None else round(reference, 4),
        source_bound=SOURCE_BOUND if reference is not None else None)
    if tied:
        shifted = (weight[rows.to(weight.device)].detach().to(torch.float32) - start.to(torch.float32)).norm(dim=1)
        relative = (shifted / start.to(torch.float32).norm(dim=1).clamp_min(1e-12)).cpu()
        report.input_rows = InputRows(moved=int((shifted > 0).sum()), relative_shift_max=round(float(
            relative.max()), 4) if len(relative) else 0.0)
    if checked:
        report.held_out_loss, report.held_out_source_loss = losses[chosen]["target"], losses[chosen]["source"]
    checks = "; check losses (target, source) " + ", ".join(
        f"{a:g}: {v['target']:.4f} {v['source']:.4f}" for a, v in losses.items()) if losses else ""
    bound = "" if reference is None else f"; the source model's source-language check loss {reference:.4f}"
    logger.info("new rows moved %g along the direction that tells target from source-language positions (held-out "
                "accuracy %s)%s%s", chosen, "-" if accuracy is None else f"{accuracy:.3f}", checks, bound)
    return report

