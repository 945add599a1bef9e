"""The reports langswap's steps make, typed: one dataclass each, built where the work is done, carried through the
transfer and training, written into the records (`langswap.records`) and read by the model card, the CLI and the
bench through their attributes and `summary()`.

    CalibrationReport    frequency calibration of output rows (`transfer/calibrate.py` `calibrate`)
    SeparationReport     an extension's new rows moved off the source language (`calibrate.separate`)
    DistillationReport   token distillation of new rows (`transfer/distill.py`)
    EvaluationMetrics    held-out figures of a text (`evaluation.language_modeling`)
    AlignmentReport      word vectors aligned by a dictionary (`resources/alignment.py`)
    MethodChoice         which of a method's candidate mappings a transfer kept (`methods.base.run_method`)
    VocabularyReport     a replaced or extended vocabulary (`transfer.steps.Growth`)
    MatchingReport       the transfer's copies against an independent count (`transfer.steps.check_matching`)
    PhaseReport          a training phase, planned and then run (`training/run.py`)

Every report keeps the keys it does not know in `extra` (a record written by a newer langswap, or a key a step adds
that no reader needs), written back unchanged. A field left None is not written (a record then reads as it did
before the field existed), except the fields marked `ALWAYS`, whose None says something (no held-out lines). A field
marked `NOT_WRITTEN` is carried between steps and never written (`held_out_loss`: the loss a finishing step leaves,
which the candidate choice reads instead of measuring it again).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from langswap.errors import ResourceFormatError

ALWAYS = {"always": True}
NOT_WRITTEN = {"written": False}


def nested(cls, mapping: bool = False) -> dict:
    """Field metadata: the value is a `cls` report, a list of them, or with `mapping` a mapping of them."""
    return {"nested": cls, "mapping": mapping}


@dataclass(kw_only=True)
class Report:
    """Fields every report has; `extra` holds the keys this version of langswap does not know."""

    extra: dict = field(default_factory=dict, repr=False, compare=False)
    WRITE_NONE: ClassVar[bool] = False  # write every field, None included (records)

    def __post_init__(self):
        """A nested report given as its JSON object (or a list or mapping of them) becomes the typed report."""
        for item in dataclasses.fields(self):
            if "nested" in item.metadata:
                value = getattr(self, item.name)
                if isinstance(value, (dict, list)) and not isinstance(value, Report):
                    setattr(self, item.name, _load(value, item.metadata["nested"], item.metadata["mapping"],
                                                   item.name))

    def as_dict(self) -> dict:
        """The JSON object written: the fields set (every one with WRITE_NONE), nested reports as their own objects,
        then the unknown keys."""
        data = {}
        for item in dataclasses.fields(self):
            if item.name == "extra" or item.metadata.get("written") is False:
                continue
            value = getattr(self, item.name)
            if value is None and not (self.WRITE_NONE or item.metadata.get("always")):
                continue
            data[item.name] = _plain(value)
        return {**data, **self.extra}

    @classmethod
    def from_dict(cls, data, where: str = "report"):
        """The report of a JSON object (a report passes through; None stays None); a key of no field goes to
        `extra`, a missing one keeps its default (a record written before the field existed), a null where a
        mapping or list belongs is the empty one."""
        if data is None or isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ResourceFormatError(f"{where} is not a langswap report: it holds no JSON object.")
        known = {item.name: item for item in dataclasses.fields(cls)
                 if item.name != "extra" and item.metadata.get("written") is not False}
        values = {}
        for key, value in data.items():
            if key not in known:
                continue
            item = known[key]
            if value is None and item.default_factory is not dataclasses.MISSING:
                value = item.default_factory()
            if "nested" in item.metadata:
                value = _load(value, item.metadata["nested"], item.metadata["mapping"], f"{where}: {key}")
            values[key] = value
        return cls(**values, extra={key: value for key, value in data.items() if key not in known})


def _plain(value):
    if isinstance(value, Report):
        return value.as_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _load(value, cls, mapping: bool, where: str):
    if isinstance(value, list):
        return [cls.from_dict(item, where) for item in value]
    if mapping and isinstance(value, dict):
        return {key: cls.from_dict(item, f"{where}: {key}") for key, item in value.items()}
    return cls.from_dict(value, where)


# -- formatting, shared by the summaries, the model card and the CLI -----------------------------------------------

# A hub repository id: an optional owner and a name, each of letters, digits, '-', '_' and '.', neither starting
# nor ending with '-' or '.', without '--' or '..' (the hub's own rules).
HUB_PART = r"[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"(?:{HUB_PART}/)?{HUB_PART}")


def is_hub_name(text: str) -> bool:
    """True when `text` has the form of a hub repository id ('gpt2', 'HuggingFaceTB/SmolLM2-135M')."""
    return bool(HUB_ID.fullmatch(text)) and "--" not in text and ".." not in text


def name(value) -> str:
    """A path's base name (the whole value when that is all there is); hub names stay whole."""
    if value is None:
        return ""
    text = str(value)
    if is_hub_name(text) and not Path(text).expanduser().exists():
        return text
    return Path(text).name or text


def count(number) -> str:
    return f"{number:,}" if isinstance(number, int) else str(number)


def value(item) -> str:
    return json.dumps(item) if isinstance(item, (bool, type(None), list, dict)) else str(item)


# -- calibration and separation ------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class Frequencies(Report):
    """How the token frequencies calibration moves towards were estimated."""

    smoothing: float | None = None  # the pseudo-count added to every count
    estimate: str | None = None  # "held-out": the frequencies of rare tokens held out


@dataclass(kw_only=True)
class Spread(Report):
    median: float | None = None
    p90: float | None = None
    max: float | None = None


@dataclass(kw_only=True)
class InputRows(Report):
    """What a step moving a tied head's output rows did to the input rows (the same matrix)."""

    moved: int | None = None
    relative_shift: Spread | None = field(default=None, metadata=nested(Spread))  # each move against its row's norm
    relative_shift_max: float | None = None


@dataclass(kw_only=True)
class UpOnlyRows(Report):
    rows: int | None = None  # rows of tokens counted fewer than below_count times, moved up only
    below_count: int | None = None


@dataclass(kw_only=True)
class LossCheck(Report):
    """The mean token loss on held-out lines before and after a step."""

    lines: int | None = None
    loss_before: float | None = None
    loss_after: float | None = None


@dataclass(kw_only=True)
class RowChoice(Report):
    """Which rows calibration moved where `calibration.rows` is auto: every non-special row (`all`) or those the
    method did not copy (`new`), whichever left the lower mean token loss on the check lines (`losses`)."""

    kept: str | None = None
    losses: dict | None = None  # rows -> mean token loss on the check lines after that calibration


@dataclass(kw_only=True)
class CalibrationReport(Report):
    """Frequency calibration of output rows (`transfer/calibrate.py`), or why it did not run (`skipped`)."""

    rows: int | None = None
    strength: float | None = None
    slope: float | None = None
    through: str | None = None  # the output bias, or the head rows along the mean hidden state
    rounds: list | None = None  # per round: {"mean_abs_distance": ...}
    frequencies: Frequencies | None = field(default=None, metadata=nested(Frequencies))
    up_only_rows: UpOnlyRows | None = field(default=None, metadata=nested(UpOnlyRows))
    input_rows: InputRows | None = field(default=None, metadata=nested(InputRows))
    check: LossCheck | None = field(default=None, metadata=nested(LossCheck))
    row_choice: RowChoice | None = field(default=None, metadata=nested(RowChoice))
    skipped: str | None = None
    text: str | None = None
    held_out_loss: float | None = field(default=None, metadata=NOT_WRITTEN)
    move: object | None = field(default=None, compare=False, metadata=NOT_WRITTEN)  # calibration_move.CalibrationMove
    move_file: str | None = None  # where the transfer wrote it, beside the model

    @property
    def estimate(self) -> Frequencies:
        """The frequency estimate (a record written before `frequencies` named it `smoothing`)."""
        if self.frequencies is not None:
            return self.frequencies
        return Frequencies.from_dict(self.extra.get("smoothing")) or Frequencies()

    def summary(self) -> str:
        """What calibration did to the output rows, in a line (the held-out figures are measured after it)."""
        if self.skipped:
            return f"none ({self.skipped})"
        rows = f"{count(self.rows)} output rows" if self.rows else "the output rows"
        text = f" of `{name(self.text)}`" if self.text else ""
        through = f", through the {self.through}" if self.through else ""
        estimate = self.estimate
        if estimate.estimate == "held-out":
            smoothed = ", frequencies of rare tokens held out"
        else:
            smoothed = f", counts smoothed by {value(estimate.smoothing)}" if estimate.smoothing is not None else ""
        if self.up_only_rows is not None and self.up_only_rows.rows:
            rare = ("never counted" if self.up_only_rows.below_count == 1
                    else f"counted fewer than {count(self.up_only_rows.below_count)} times")
            smoothed += f", {count(self.up_only_rows.rows)} rows of tokens {rare} moved up only"
        inputs = self.input_rows
        if inputs is not None and inputs.moved:
            shift = inputs.relative_shift or Spread()
            moved_inputs = (f"; the tied input rows moved with them ({count(inputs.moved)} rows; each move's size "
                            f"against its row's norm: median {value(shift.median)}, largest {value(shift.max)})")
        elif inputs is not None:
            moved_inputs = "; no input row moved"
        else:
            moved_inputs = ""
        if self.row_choice is not None and self.row_choice.kept:
            losses = ", ".join(f"{rows} {value(loss)}" for rows, loss in (self.row_choice.losses or {}).items())
            which = "every row" if self.row_choice.kept == "all" else "only the rows the method did not copy"
            moved_inputs += f"; {which} moved, chosen on the check lines ({losses})"
        kept = (f"; the move is in `{self.move_file}`, and `langswap train` takes the lowering of rows of rare tokens "
                "off before training (its `calibration` option)") if self.move_file else ""
        return (f"{rows} moved towards the token frequencies{text} (strength {value(self.strength)}{smoothed}"
                f"{through}){moved_inputs}; held-out figures are of the calibrated model{kept}")


@dataclass(kw_only=True)
class TextPair(Report):
    """A figure of the target-language text and of the source-language one."""

    target: float | None = None
    source: float | None = None


@dataclass(kw_only=True)
class CountFitReport(Report):
    """The moved rows fitted to their counts by their expected counts (`calibrate.count_fit`), or why not
    (`skipped`)."""

    rows: int | None = None
    lines: int | None = None  # counted lines read for the expected counts
    positions: int | None = None
    smoothing: float | None = None  # the pseudo-count fitted with (chosen among `smoothings` where they are given)
    smoothings: dict[str, TextPair] | None = field(default=None, metadata=nested(TextPair, mapping=True))  # check
    # losses after the fit with each pseudo-count tried
    with_source_rows: dict[str, TextPair] | None = field(default=None, metadata=nested(TextPair, mapping=True))  # the
    # same for the fits over the source rows too (count_fit_source_rows)
    source_rows: int | None = None  # source rows the chosen fit moves (0: the fit over them was not chosen)
    surplus: float | None = None  # the moved rows' expected count less their count, per position, before the move
    surplus_by_round: list | None = None  # the same before each round
    shift: Spread | None = field(default=None, metadata=nested(Spread))  # |logit added| over the moved rows
    direction: str | None = None  # what the rows moved along: with the source text's mean held, or the target mean
    losses: dict[str, TextPair] | None = field(default=None, metadata=nested(TextPair, mapping=True))  # before, after
    kept: bool | None = None
    input_rows: InputRows | None = field(default=None, metadata=nested(InputRows))
    skipped: str | None = None
    held_out_loss: float | None = field(default=None, metadata=NOT_WRITTEN)
    held_out_source_loss: float | None = field(default=None, metadata=NOT_WRITTEN)  # the source check loss as left

    def summary(self) -> str:
        if self.skipped:
            return f"none ({self.skipped})"
        losses = self.losses or {}

        def pair(which: str) -> str:
            loss = losses.get(which) or TextPair()
            return value(loss.target) + (f" / {value(loss.source)}" if loss.source is not None else "")

        texts = "target / source" if (losses.get("before") or TextPair()).source is not None else "target"
        check = f"check-line loss ({texts}) {pair('before')} -> {pair('after')}"
        if not self.kept:
            tried = f" with any of the pseudo-counts {', '.join(self.smoothings)}" if self.smoothings else ""
            return (f"the {count(self.rows or 0)} rows' counts read {value(self.surplus)} a position too many "
                    f"expected; fitting them{tried} did not read the check lines better ({check}), put back")
        chosen = (f", pseudo-count {self.smoothing:g} (chosen among {', '.join(self.smoothings)} on the check lines)"
                  if self.smoothings and self.smoothing is not None else "")
        if self.source_rows:
            chosen += (f"; {count(self.source_rows)} of the rows are the source model's own, fitted with the new ones "
                       "as the check lines chose")
        elif self.with_source_rows:
            chosen += "; the fit over the source model's own rows too was not chosen"
        return (f"{count(self.rows)} rows moved so that their expected count on {count(self.lines or 0)} counted lines "
                f"meets their count (they were {value(self.surplus)} a position too many before; median shift "
                f"{value((self.shift or Spread()).median)} logits, along the {self.direction}{chosen}); {check}")


@dataclass(kw_only=True)
class SeparationReport(Report):
    """An extension's new rows moved along the direction that tells target-language positions from source-language
    ones (`calibrate.separate`), or why not (`skipped`)."""

    rows: int | None = None
    amount: float | None = None
    chosen_by: str | None = None  # "calibration.separation" or "check lines"
    check_lines: TextPair | None = field(default=None, metadata=nested(TextPair))
    positions: TextPair | None = field(default=None, metadata=nested(TextPair))
    direction_accuracy_held_out: float | None = field(default=None, metadata=ALWAYS)
    losses: dict[str, TextPair] | None = field(default=None, metadata=nested(TextPair, mapping=True))  # by amount
    input_rows: InputRows | None = field(default=None, metadata=nested(InputRows))
    # the source model's loss on the source-language check lines, and how far above it the chosen amount may leave
    # the model's (a fraction; where no amount does, the one with the lowest loss there is chosen)
    source_model_loss: float | None = None
    source_bound: float | None = None
    skipped: str | None = None
    source_text: str | None = None
    held_out_loss: float | None = field(default=None, metadata=NOT_WRITTEN)
    held_out_source_loss: float | None = field(default=None, metadata=NOT_WRITTEN)  # the source check loss as left

    def summary(self) -> str:
        if self.skipped:
            return f"none ({self.skipped})"
        text = f" of `{name(self.source_text)}`" if self.source_text else ""
        accuracy = f"held-out accuracy {value(self.direction_accuracy_held_out)}"
        lines = self.check_lines or TextPair()
        how = ("set by calibration.separation" if self.chosen_by == "calibration.separation" else
               f"chosen on {count(lines.target or 0)} target and {count(lines.source or 0)} source-language check "
               "lines")
        if self.amount:
            line = (f"the new rows moved {value(self.amount)} along the direction that tells target-language "
                    f"positions from source-language ones{text} ({accuracy}), their mean logit on target text kept; "
                    f"the amount {how}")
        else:
            line = (f"no move along the direction that tells target-language positions from source-language "
                    f"ones{text} ({accuracy}): the amount 0, {how}")
        if self.losses:
            line += " (check losses target / source: " + ", ".join(
                f"{amount}: {value(loss.target)} / {value(loss.source)}" for amount, loss in self.losses.items()) + ")"
        left = (self.losses or {}).get(f"{self.amount:g}") if self.amount is not None else None
        if self.source_model_loss and left is not None and left.source is not None:
            above = left.source / self.source_model_loss - 1
            line += (f"; the source-language check loss {above:+.2%} against the source model's "
                     f"{value(self.source_model_loss)} (bound {self.source_bound:.1%}"
                     + ("" if above <= (self.source_bound or 0) else ", set above it" if self.chosen_by ==
                        "calibration.separation" else ", met by no amount") + ")")
        return line


# -- distillation ---------------------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class TeacherCheck(Report):
    """Whether the teacher reads held-out text better than the student: each one's nats per chunk of the same
    bytes."""

    measured: bool | None = None
    why: str | None = None  # where it was not measured
    chunks: int | None = None
    windows_left_out: int | None = None  # held-out windows with a chunk one side cannot spell
    teacher_nats_per_chunk: float | None = None
    student_nats_per_chunk: float | None = None
    teacher_worse: bool | None = None


@dataclass(kw_only=True)
class DistillationReport(Report):
    """Token distillation of new rows from the source model reading the same text (`transfer/distill.py`), or why
    it did not run (`skipped`)."""

    rows: int | None = None
    head: str | None = None
    layers: list | None = None
    distance: str | None = None
    teacher_check: TeacherCheck | None = field(default=None, metadata=nested(TeacherCheck))
    tokens: int | None = None
    updates: int | None = None
    lines: int | None = None
    order: str | None = None  # distill.order: how the training lines were ordered
    rows_read: int | None = None  # of the `rows`, those the lines read show at least once
    held_out_lines: int | None = None
    loss_start: float | None = None
    loss_end: float | None = None
    last_train_loss: float | None = None
    next_token_loss_start: float | None = None
    next_token_loss_end: float | None = None
    likelihood_loss_start: float | None = None  # head: likelihood, the chunk-likelihood match on held-out lines
    likelihood_loss_end: float | None = None
    kept: bool | None = None
    head_kept: bool | None = None  # an untied head learnt by likelihood: its rows kept (decided apart from `kept`)
    untied: bool | None = None
    put_back: str | None = None
    chunks_matched: int | None = None
    chunks_skipped: int | None = None
    chunks_too_long: int | None = None
    held_out_chunks: int | None = None
    text_repeated: bool | None = None
    seconds: float | None = None
    skipped: str | None = None
    text: str | None = None

    def summary(self) -> str:
        if self.skipped:
            return f"none ({self.skipped})"
        text = f" of `{name(self.text)}`" if self.text else ""
        line = (f"{count(self.rows or 0)} rows learned from the source model reading {count(self.tokens)} target "
                f"tokens{text} ({count(self.updates)} updates)")
        if self.rows_read is not None:
            line += f", {count(self.rows_read)} of the rows read in context ({self.order} order)"
        if self.loss_start is not None:
            line += f"; held-out distillation loss {self.loss_start} -> {self.loss_end}"
        if self.likelihood_loss_start is not None:
            line += f", likelihood match {self.likelihood_loss_start} -> {self.likelihood_loss_end}"
        if self.put_back:
            line += f"; put back: {self.put_back}"
        return line


# -- evaluation, alignment, the method's choice, the vocabulary ----------------------------------------------------

@dataclass(kw_only=True)
class EvaluationMetrics(Report):
    """Held-out figures of a text read by a model (`evaluation.language_modeling.LMScore.report`)."""

    lines: int | None = None
    tokens: int | None = None  # tokens scored; for "masked-lm-loss", the masked positions
    bytes: int | None = None
    nll: float | None = None  # nats
    perplexity: float | None = None
    bits_per_byte: float | None = field(default=None, metadata=ALWAYS)  # None for "masked-lm-loss"
    kind: str | None = None  # perplexity, pseudo-perplexity or masked-lm-loss
    tokens_per_byte: float | None = None

    def figures(self, eval_text: str | None) -> list[str]:
        """The model card's lines of these figures (none where nothing was measured)."""
        kind = self.kind or "perplexity"
        measured = []
        if self.bits_per_byte is not None:
            label = "pseudo bits per byte" if kind == "pseudo-perplexity" else "bits per byte"
            measured.append(f"- {label}: {self.bits_per_byte:.4f}")
        if self.perplexity is not None:
            measured.append(f"- {kind}: {self.perplexity:,.2f} (per token of the new tokenizer)")
        if not measured:
            return []
        text = f" of `{name(eval_text)}`" if eval_text else ""
        size = [f"{count(number)} {what}" for what, number in (("bytes", self.bytes), ("tokens", self.tokens))
                if number is not None]
        lines = f"the first {count(self.lines)} non-empty lines{text}" if self.lines else f"text{text}"
        where = (f"Measured right after the transfer, before any training, on {lines}"
                 + (f" ({', '.join(size)})" if size else "") + ":")
        return [where, ""] + measured


@dataclass(kw_only=True)
class AlignmentReport(Report):
    """Word vectors of two languages in one space (`resources/alignment.py`): the pairs the rotation was fitted on
    and the precision of translation retrieval on held-out words."""

    pairs_used: int | None = None
    entries_covered: int | None = None
    dictionary_entries: int | None = None
    precision_at_1: float | None = field(default=None, metadata=ALWAYS)  # None: too few words to hold out
    precision_at_1_csls: float | None = field(default=None, metadata=ALWAYS)
    heldout_words: int | None = None
    precision_at_1_distinct: float | None = None  # over the words whose translations are spelled otherwise
    precision_at_1_csls_distinct: float | None = None
    distinct_queries: int | None = None
    pca: str | None = field(default=None, metadata=ALWAYS)  # what PCA did to one side, or None
    source_vectors: str | None = None
    target_vectors: str | None = None
    dimension: int | None = None
    pairs_train: int | None = None  # pairs the held-out measure's rotation was fitted on
    note: str | None = None  # why precision was not measured
    word_pairs: int | None = None  # `langswap align`'s: pairs of the dictionary both vector files hold
    queries: int | None = None  # held-out queries, case variants included
    alignment: str | None = None  # a rotation read from this file (resources.alignment)
    joint_vectors: str | None = None  # vectors trained in one space: no rotation
    lines: int | None = None  # joint vectors: lines of the code-switched corpus
    switched: TextPair | None = field(default=None, metadata=nested(TextPair))  # joint: words switched per side

    def distinct_precision(self) -> str | None:
        """The held-out precision@1 over the words whose translations are spelled otherwise, for people; None where
        the report predates that measure."""
        if self.precision_at_1_distinct is None:
            return None
        return (f"{self.precision_at_1_distinct:.3f} (CSLS {self.precision_at_1_csls_distinct or 0:.3f}) on the "
                f"{count(self.distinct_queries or 0)} whose translations are spelled otherwise")

    def summary(self) -> str:
        parts = []
        if self.pairs_used is not None:
            pairs = f"rotation fitted on {count(self.pairs_used)} word pairs"
            if self.entries_covered is not None and self.dictionary_entries is not None:
                pairs += (f" ({count(self.entries_covered)} of {count(self.dictionary_entries)} dictionary entries "
                          "covered)")
            parts.append(pairs)
        if self.precision_at_1 is not None:
            precision = f"precision@1 {self.precision_at_1:.3f}"
            if self.precision_at_1_csls is not None:
                precision += f" (CSLS {self.precision_at_1_csls:.3f})"
            if self.heldout_words:
                precision += f" on {count(self.heldout_words)} held-out source words"
            distinct = self.distinct_precision()
            parts.append(precision + (f"; {distinct}" if distinct else ""))
        if self.pca:
            parts.append(str(self.pca))
        return "; ".join(parts)

    def line(self) -> str | None:
        """The alignment as `langswap transfer` prints it: the rotation read from a file and its figures when it was
        fitted, or the pairs and precision of one fitted here, or the joint vectors' held-out precision."""
        distinct = self.distinct_precision()
        distinct = f"; {distinct}" if distinct else ""
        if self.alignment is not None:
            measured = (f": {self.pairs_used:,} pairs, precision@1 {self.precision_at_1} (CSLS "
                        f"{self.precision_at_1_csls}) when it was fitted" if self.pairs_used is not None else "")
            return f"alignment: read from {self.alignment}{measured}"
        if self.pairs_used is not None:
            return (f"alignment: {self.pairs_used:,} pairs, precision@1 {self.precision_at_1} (CSLS "
                    f"{self.precision_at_1_csls}){distinct}")
        if self.joint_vectors is not None:
            return (f"joint vectors {self.joint_vectors}: held-out precision@1 {self.precision_at_1} (CSLS "
                    f"{self.precision_at_1_csls}){distinct}")
        return None


@dataclass(kw_only=True)
class TokenVectorsReport(Report):
    """A token-level fastText model of the target tokenizer (`resources/token_vectors.py`)."""

    tokens: int | None = None  # tokens of text it was trained on
    covered_tokens: int | None = None  # tokens with a vector of their own
    vocabulary: int | None = None


@dataclass(kw_only=True)
class MethodChoice(Report):
    """Which of a method's candidate mappings a transfer kept, and on what grounds (`methods.base.run_method`)."""

    chosen: str | None = None
    by: str | None = None
    losses: dict | None = None  # candidate -> mean token loss on held-out lines (None: not finite)
    # candidate -> the same on the source-language check lines, where an extension was given source-language text
    # (calibration.source_text): the candidates are then ranked by the two losses summed, each relative to the first
    # candidate's
    source_losses: dict | None = None
    # candidate -> the same loss before calibration moved its rows (calibration's check, rounded to 4 places), where
    # calibration ran with check lines: the candidates' order before calibration
    losses_uncalibrated: dict | None = None
    candidates: list | None = None
    weights: dict | None = None  # candidate -> evidence -> its weight in that candidate (0: left out)
    # the candidate whose rows the transfer wrote for training's start (`start_rows.START_FILE`), and how many rows
    start: str | None = None
    start_rows: int | None = None
    start_file: str | None = None
    rows: object | None = field(default=None, compare=False, metadata=NOT_WRITTEN)  # start_rows.StartRows

    def kept_weights(self) -> str:
        """The kept candidate's evidence weights, `name weight, ...` (empty where the method gave none)."""
        kept = (self.weights or {}).get(self.chosen) or {}
        return ", ".join(f"{name} {weight:.3g}" for name, weight in kept.items())

    def summary(self) -> str:
        if self.losses is not None and all(loss is None for loss in self.losses.values()):
            return f"kept {self.chosen}, the first: no candidate's held-out loss was a finite number"
        if self.losses is not None:
            def listed(losses: dict) -> str:
                return ", ".join(f"{candidate} {'-' if loss is None else f'{loss:.4f}'}"
                                 for candidate, loss in losses.items())

            losses = listed(self.losses)
            weights = self.kept_weights()
            if self.source_losses:
                kept = (f"kept {self.chosen}, the lowest sum of the mean token losses on held-out target text "
                        f"({losses} nats) and source-language text ({listed(self.source_losses)} nats), each "
                        "relative to the first candidate's")
            else:
                kept = f"kept {self.chosen}, the lowest mean token loss on held-out target text ({losses} nats)"
            return (kept
                    + (f"; its evidence weights: {weights}" if weights else "")
                    + (f"; the {self.start_rows:,} rows {self.start} makes otherwise are written for training's "
                       f"start ({self.start_file})" if self.start and self.start_file else ""))
        return f"kept {self.chosen} of {', '.join(self.candidates or [])}: {self.by or ''}"


@dataclass(kw_only=True)
class PruningReport(Report):
    """New tokens of an extension taken out where they cost more than they save (`transfer/prune.py`)."""

    text: str | None = None
    source_text: str | None = None
    lines: dict | None = None  # lines read of each text (target, source)
    new_before: int | None = None
    kept: int | None = None
    dropped: int | None = None  # net below zero
    unread: int | None = None  # of those, never read in the judged lines (their net is what they take elsewhere)
    cascaded: int | None = None  # made by a merge that reads a token that went
    spelled: int | None = None  # net below zero, but characters the text needs
    held: int | None = None  # net below zero, but kept: tokens made from them save more than they cost
    rule: str | None = None  # which tokens went (transfer/prune.py's RULES, or none)
    held_out: dict | None = None  # per rule, nats saved on each half of the lines by its choice on the other
    nats: float | None = None  # the texts' whole difference before pruning (positive: the new tokens saved)
    bits_per_byte_change: dict | None = None  # per text, before pruning: what the new tokens changed
    why: str | None = None

    def summary(self) -> str:
        changes = ", ".join(f"{name} {value:+}" for name, value in (self.bits_per_byte_change or {}).items())
        lines = " and ".join(f"{count(number)} {name}" for name, number in (self.lines or {}).items())
        held_out = ", ".join(f"{name} {value:+,.1f}" for name, value in (self.held_out or {}).items())
        rule = f" (rule {self.rule}; nats each rule saves across the lines' halves: {held_out})" if self.rule else ""
        return (f"{count(self.new_before)} new tokens judged on {lines} lines{rule}: {count(self.dropped)} taken out "
                f"({self.why}; {count(self.unread)} of them never read there), {count(self.cascaded)} more with them "
                f"(made from one that went), {count(self.held)} kept though they cost (tokens made from them save "
                f"more), {count(self.spelled)} kept as characters the text needs; {count(self.kept)} kept. Before "
                f"pruning the new tokens changed bits per byte by {changes} (the transfer's held-out figures, of the "
                "model before pruning, are left out)")


@dataclass(kw_only=True)
class VocabularyReport(Report):
    """A replaced vocabulary, or an extended one: the source ids kept, the new ids, the padding rows."""

    mode: str | None = None  # replaced or extended
    kept: int | None = None
    new: list | None = None  # [first, last] new id
    padding: list | None = None  # [first, last] padding row, or None
    rows: int | None = None
    source_rows: int | None = None

    @property
    def extended(self) -> bool:
        return self.mode == "extended"

    def summary(self) -> str | None:
        """What an extended vocabulary kept and added (None for a replaced one)."""
        if not self.extended:
            return None
        if not self.new:
            return f"extended: the source's {count(self.kept)} tokens keep their ids and rows; no new token kept"
        first, last = self.new
        line = (f"extended: the source's {count(self.kept)} tokens keep their ids and rows (input, output and bias "
                f"copied bit for bit), {count(last - first + 1)} new tokens at ids {count(first)}-{count(last)}")
        if self.padding:
            start, stop = self.padding
            line += f", {count(stop - start + 1)} padding rows ({count(self.rows)} rows in all)"
        return line


@dataclass(kw_only=True)
class MatchingReport(Report):
    """The rows a transfer copied from a source token of the same form, against an independent count
    (`resources/conventions.py` `matching_report`), or why not counted (`skipped`)."""

    copied: int | None = None
    copied_whole: int | None = None
    copied_partial: int | None = None
    independent: int | None = None
    agree: int | None = None
    only_transfer: int | None = None
    only_independent: int | None = None
    share_copied: float | None = None
    target_tokens: int | None = None
    breaks_conventions: list | None = None  # what the target's pieces break of the source family's conventions
    warnings: list = field(default_factory=list)
    skipped: str | None = None

    def summary(self) -> str | None:
        if self.copied is None:
            return None
        return (f"{count(self.copied)} of {count(self.target_tokens)} ({self.share_copied:.1%}); of those with a "
                f"whole surface ({count(self.copied_whole)}) an independent count finds {count(self.independent)}"
                + "".join(f". Warning: {warning}" for warning in self.warnings))


@dataclass(kw_only=True)
class TokensPerByte(Report):
    source: float | None = None
    extended: float | None = None


@dataclass(kw_only=True)
class CheckedLines(Report):
    """Lines of a source-language text, and how many of them an extended tokenizer reads otherwise."""

    text: str | None = None
    lines: int | None = None
    changed: int | None = None


@dataclass(kw_only=True)
class ExtensionReport(Report):
    """A tokenizer extended by `langswap tokenizer --extend`: what was added, tokens per byte of the text's last lines
    read by the source and by the extended tokenizer, and with a check text the count of its lines the two read
    otherwise."""

    family: str | None = None  # BPE, Unigram or WordPiece
    source_tokens: int | None = None
    added: int | None = None
    ids: list | None = None  # [first, last] new id
    sample_lines: int | None = None
    keep_text: str | None = None
    tokens_per_byte: TokensPerByte | None = field(default=None, metadata=nested(TokensPerByte))
    check_text: CheckedLines | None = field(default=None, metadata=nested(CheckedLines))

    def summary(self, output, source) -> str:
        rate = self.tokens_per_byte
        lines = [f"wrote {output}: the {self.source_tokens:,} tokens of {source} at their ids and {self.added:,} new "
                 f"ones (ids {self.ids[0]:,}-{self.ids[1]:,}; {self.family})",
                 f"tokens per byte on the last {self.sample_lines:,} lines of the text it learnt from: "
                 f"{rate.source:.4f} (source) -> {rate.extended:.4f} (extended), {rate.extended / rate.source:.0%} of the "
                 "source's"]
        check = self.check_text
        if check is not None:
            lines.append(f"{check.changed:,} of the {check.lines:,} lines of {check.text} read otherwise than with "
                         f"the source tokenizer ({check.changed / max(1, check.lines):.1%})")
        if self.family == "BPE" and not self.keep_text:
            lines.append("source-language text reads as before except where two of its tokens form a new merge; "
                         "--keep-text with some of it keeps it exactly as before")
        return "\n".join(lines)


@dataclass(kw_only=True)
class TableReport(Report):
    """A translation table from word-aligned parallel text (`resources/parallel.py`): the pairs read and used, the
    links, and how much of the target vocabulary and of the target side's tokens have probabilities."""

    pairs_read: int | None = None
    pairs_used: int | None = None
    skipped_empty: int | None = None
    skipped_long: int | None = None
    links: int | None = None
    entries: int | None = None
    covered_tokens: int | None = None
    coverage: float | None = None  # share of the target vocabulary
    covered_occurrences: float | None = None  # share of the target side's tokens
    mean_entropy: float | None = field(default=None, metadata=ALWAYS)  # nats; None: no row covered
    options: dict | None = None
    aligner: str | None = None
    seconds: float | None = None
    text: list | None = None  # the parallel files

    def summary(self) -> str:
        """One line for people: coverage and entropy."""
        entropy = self.mean_entropy
        return (f"{self.covered_tokens:,} target tokens have translation probabilities ({self.coverage:.1%} of the "
                f"vocabulary, {self.covered_occurrences:.1%} of the target side's tokens), from {self.links:,} links "
                f"in {self.pairs_used:,} pairs"
                + (f"; mean entropy {entropy:.2f} nats" if entropy is not None and entropy == entropy else ""))


# -- enrichment (TEMA) ---------------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class EnrichSection(Report):
    """What `langswap enrich` did: the method, the two models, the anchors, the head, the words added and the rows
    changed."""

    method: str | None = None
    l1: str | None = None
    l2: str | None = None
    anchors: list = field(default_factory=list)
    output_head: str | None = None
    added_words: list = field(default_factory=list)
    changed_rows: list = field(default_factory=list)


@dataclass(kw_only=True)
class ChangeNorm(Report):
    """The L2 norm of each changed row's move: mean and largest, of the input rows and of a separate head's."""

    mean: float | None = None
    max: float | None = None
    head_mean: float | None = None
    head_max: float | None = None

    def summary(self) -> str:
        return ", ".join(f"{key} {value:.4g}" for key, value in self.as_dict().items()
                         if isinstance(value, (int, float)))


@dataclass(kw_only=True)
class NewWordTraining(Report):
    """The embeddings-only training of the rows of words `langswap enrich` added."""

    sentences: int | None = None
    tokens: int | None = None
    steps: int | None = None
    train_loss: float | None = None
    preset: str | None = None
    seconds: float | None = None


# -- training -------------------------------------------------------------------------------------------------------

@dataclass(kw_only=True)
class PhaseTeacher(Report):
    """Whether a phase was taught by the source model, and the teacher check's figures."""

    used: bool | None = None
    check: dict | None = None  # the teacher check: each side's nats per block, or why it was not measured
    weight: float | None = None
    layers: list | None = None
    distance: str | None = None
    likelihood_weight: float | None = None
    teacher_distance: float | None = None  # mean per micro-batch
    teacher_likelihood: float | None = None
    teacher_matched: float | None = None  # matched positions per micro-batch


@dataclass(kw_only=True)
class EvalPoint(Report):
    """A held-out evaluation of a training run: its update, its loss and the bits per byte estimated from it."""

    step: int | None = None
    loss: float | None = None
    bits_per_byte: float | None = None


@dataclass(kw_only=True)
class UnshownRecalibration(Report):
    """The rows of the tokens a run shows fewer than `recalibrate_below` times, moved onto the frequency line when the
    model is written (`TrainConfig.unshown_rows: recalibrate`, `langswap.training.recalibrated_rows`)."""

    rows: int | None = None
    shown_below: float | None = None  # the rows of tokens the run shows fewer times than this (recalibrate_below)
    frequency: float | None = None  # held-out frequency in new text of a token the counted lines never show
    mean_move: float | None = None  # mean distance (logits at the mean head input) the rows moved
    eval_loss_before: float | None = None  # on the evaluation text, the model as trained
    eval_loss_after: float | None = None  # and as written


@dataclass(kw_only=True)
class PhaseReport(Report):
    """A training phase: planned (name, what trains, steps) while the run goes, then its summary."""

    name: str | None = None
    trainable: str | None = None
    steps: int | None = None
    planned_steps: int | None = None
    learning_rate: float | None = None
    warmup_steps: int | None = None
    schedule: str | None = None
    stops_early: bool | None = None  # the recipe may end the phase before `steps` updates
    trainable_parameters: int | None = None
    total_parameters: int | None = None
    train_loss: float | None = None
    train_seconds: float | None = None
    loop_updates: int | None = None
    loop_seconds: float | None = None
    loop_tokens: int | None = None
    tokens_per_second: float | None = None
    data_wait: float | None = None  # share of the loop spent waiting for data
    teacher: PhaseTeacher | None = field(default=None, metadata=nested(PhaseTeacher))
    calibration_taken_off: int | None = None  # rows whose calibration move was taken off first (TrainConfig.calibration)
    rows_held: int | None = None  # tokens whose rows were held, never shown by the text (TrainConfig.unshown_rows)
    start_rows: int | None = None  # rows that started from the transfer's start rows (TrainConfig.start_rows)
    unshown_recalibrated: UnshownRecalibration | None = field(default=None, metadata=nested(UnshownRecalibration))

    def summary(self) -> str:
        """The phase in a line: what trained, the updates, the peak rate and the mean training loss."""
        parts = [f"{self.trainable or '?'} trained", f"{count(self.steps or 0)} updates"]
        if self.learning_rate is not None:
            parts.append(f"peak rate {self.learning_rate:g}")
        if self.train_loss is not None:
            parts.append(f"mean training loss {self.train_loss:.4f}")
        return f"Phase `{self.name or '?'}`: " + ", ".join(parts)
