"""The transfer's steps, each a function with typed inputs, computed once (`pipeline.py` runs them in order).

    plan_text        what the transfer does with target-language text (`TextSteps`)
    load_source      the source model (or its checkpoint, streamed), tokenizer and token matrices (`Source`)
    load_target      the target tokenizer, given or trained (`Target`), and the output's room on disk
    load_inputs      the resources the method declares, and the method's inputs (`Inputs`)
    make_embeddings  the method, its candidates each finished and judged, the kept one installed (`Made`)
    score            the held-out figures of eval_text, and the correspondence sample
    write_output     the folder: model, tokenizer, provenance, record (`TransferRecord`) and card

Finishing steps (`FINISHING`) run on the model after the method has installed a candidate's matrices and before the
candidate is judged: what the candidate choice compares is each candidate as it would be saved. Frequency
calibration is one; a refinement is another entry, a function `(context, model, result, earlier) -> report`
(`earlier`: the reports of the steps before it on this candidate) and when it runs. The best finished candidate's
matrices are kept (on the CPU) while the others are judged, and restored rather than finished again.
"""

from __future__ import annotations

import copy as copying
import dataclasses
import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from langswap import __version__
from langswap.calibration_move import MOVE_FILE
from langswap.checkpoint import Checkpoint, MissingWeightsError, why_not_streamed
from langswap.config import to_dict
from langswap.errors import ConfigError, OutputSpaceError
from langswap.evaluation.correspondence import correspondence_rows
from langswap.evaluation.language_modeling import evaluate_model
from langswap.files import atomic_directory
from langswap.methods.base import (MethodConfig, MethodResult, TransferInputs, differing_rows, get_method,
                                   load_resources, run_method)
from langswap.methods.mapping import Kind
from langswap.methods.provenance import refuse_non_finite_rows, write_provenance
from langswap.modelcard import write_model_card
from langswap.models import is_tied, load_config, load_model, load_tokenizer, objective_of, pick_device, save_tokenizer
from langswap.numerics import SOURCE_FIX, refuse_non_finite
from langswap.records import ModelRecord, TransferRecord, write_model_record
from langswap.reports import (AlignmentReport, CalibrationReport, CountFitReport, DistillationReport, EvaluationMetrics,
                              MatchingReport, Report, RowChoice, SeparationReport, VocabularyReport)
from langswap.resources.conventions import independent_matches, matching_report, matching_warnings
from langswap.resources.extension import first_differing_id
from langswap.resources.kinds import keys_in_use
from langswap.resources.text import read_text_lines
from langswap.resources.tokenizer import train_tokenizer
from langswap.start_rows import START_FILE, finished_rows, own_source_rows
from langswap.surgery import (SourceMatrices, check_position_offset, install_embeddings, read_source_matrices,
                              remap_named_token_ids, update_special_token_ids)
from langswap.tokens import Vocabulary
from langswap.transfer.calibrate import (CalibrationConfig, calibratable, calibrate, count_fit, frequency_line,
                                         mean_token_loss, separate, split_check_lines, tie_head, untie_head)
from langswap.transfer.config import (HELD_OUT_TOKENS, TextSteps, TransferConfig, check_line_count, plan_text_steps,
                                      separation_needs_extension)
from langswap.transfer.distill import distill

logger = logging.getLogger(__name__)


@dataclass
class Source:
    """The source side: its tokenizer and vocabulary, its model (loaded, or a streamed checkpoint's skeleton), and
    its token matrices."""

    tokenizer: object
    vocabulary: object  # tokens.Vocabulary
    model: object
    checkpoint: object | None  # checkpoint.Checkpoint where the model is streamed
    matrices: object  # surgery.SourceMatrices
    dtype: torch.dtype
    stored_bytes: int


@dataclass(frozen=True)
class Growth:
    """An extended vocabulary: target ids below `kept` are the source's tokens at their own ids, ids `kept` to
    `tokens` - 1 are new (taking over any rows the source has beyond its tokenizer there), and the new matrices have
    `rows` rows (the larger of `tokens` and the source's `source_rows`, rounded up to `pad_to_multiple`); rows from
    `tokens` on are padding: the source's own rows beyond its tokenizer where it has them at those ids, the rest
    their mean (or, where the source has none, the mean of its token rows)."""

    kept: int
    tokens: int
    rows: int
    source_rows: int

    def report(self) -> VocabularyReport:
        return VocabularyReport(mode="extended", kept=self.kept, new=[self.kept, self.tokens - 1],
                                padding=[self.tokens, self.rows - 1] if self.rows > self.tokens else None,
                                rows=self.rows, source_rows=self.source_rows)


@dataclass
class Target:
    tokenizer: object
    vocabulary: object  # tokens.Vocabulary
    growth: Growth | None = None  # an extended vocabulary; None: a replaced one
    independent: dict | None = None  # `check_matching`'s independent count, made once for the pair

    def vocabulary_report(self) -> VocabularyReport:
        return self.growth.report() if self.growth else VocabularyReport(mode="replaced")

    @property
    def rows(self) -> int:
        """Rows of the new token matrices."""
        return self.growth.rows if self.growth else len(self.vocabulary)

    @property
    def kept(self) -> int:
        """Leading ids whose rows are the source's own (an extended vocabulary's source tokens; 0 otherwise)."""
        return self.growth.kept if self.growth else 0


@dataclass
class Inputs:
    """What the method reads, and the reports of the resources it was given."""

    method: TransferInputs
    reports: dict

    @property
    def alignment(self) -> AlignmentReport | None:
        """The aligned word vectors' report, where the method read them."""
        return AlignmentReport.from_dict(self.reports["vectors"]) if "vectors" in self.reports else None


@dataclass
class Made:
    """The model with the kept candidate installed and finished, the method's result, and each finishing step's
    report (by name)."""

    model: object
    result: MethodResult
    finished: dict[str, Report] = field(default_factory=dict)  # by step: the reports of `FINISHING`
    seconds: dict = field(default_factory=dict)  # of the finishing steps (all candidates) and what they share


@dataclass
class FinishContext:
    """What finishing steps read: the config, the target tokenizer, the text plan, and what is computed once for
    every candidate (the calibration's frequency line)."""

    config: TransferConfig
    target: Target
    text: TextSteps
    calibration: CalibrationConfig  # its check lines the held-out lines candidates are judged on
    line: tuple | None  # calibrate.frequency_line's result, where calibration runs
    source: Source | None = None  # the teacher's tokenizer and input rows, for distillation
    progress: bool = False  # a bar on each step's passes over the text


def plan_text(config: TransferConfig) -> TextSteps:
    """What the transfer does with target-language text, from the config and the source model's kind."""
    return plan_text_steps(config, objective_of(load_config(config.source_model)) == "causal")


def streamed_checkpoint(config: TransferConfig, steps: TextSteps, model_config=None):
    """The source checkpoint to stream (`langswap.checkpoint.Checkpoint`), or None to load the whole model, as
    `config.stream` says: auto streams a local safetensors folder when no step (`steps`) runs the model on text; on
    refuses what cannot be streamed, naming what to change."""
    if config.stream == "off":
        return None
    folder = Path(config.source_model)
    reason = why_not_streamed(folder)
    runs = steps.model_runs()
    if not reason and not runs:
        try:
            return Checkpoint(folder, model_config)
        except MissingWeightsError:
            if config.stream == "on":
                raise
            # transformers' loading renames some legacy weight names; it refuses what is really missing
            logger.info("loading the whole source model: some weights are not stored under their names")
            return None
    if config.stream == "on":
        why = reason or f"this transfer runs the model on text: {'; '.join(runs)}"
        raise ConfigError(f"stream: on cannot stream the source model: {why}. Change that, or set stream=auto to "
                          "load the whole model.")
    logger.info("loading the whole source model (not streamed: %s)", reason or "; ".join(runs))
    return None


def load_vocabulary(name: str | Path, what: str) -> tuple[object, Vocabulary]:
    """(tokenizer, its canonical vocabulary) of a folder or hub name; `what` names the tokenizer in the error a missing
    one gets. The first half of loading a model folder: what is checked against the vocabularies is checked before
    the model loads (`load_checked_model`)."""
    tokenizer = load_tokenizer(name, what)
    return tokenizer, Vocabulary(tokenizer)


def load_checked_model(name: str | Path, vocabulary: Vocabulary, where: str, fix: str = SOURCE_FIX,
                       stored_dtype: bool = False) -> tuple[object, SourceMatrices]:
    """(model, its token matrices): the model of a folder or hub name in the dtype it was saved in, refused where a
    weight is NaN or infinite (`where` names the model in the error, `fix` says what to do), and the first
    len(vocabulary) rows of its input matrix, untied head and output bias (`surgery.read_source_matrices`: float32
    copies, or copies in the model's dtype with `stored_dtype`)."""
    model = load_model(name)
    refuse_non_finite(model, where, fix)
    return model, read_source_matrices(model, len(vocabulary), stored_dtype=stored_dtype)


def load_source(config: TransferConfig, text: TextSteps) -> Source:
    """The source model (streamed where nothing runs it on text), its tokenizer and token matrices; a model with
    non-finite weights is refused."""
    tokenizer, vocabulary = load_vocabulary(config.source_tokenizer or config.source_model, "source tokenizer")
    model_config = load_config(config.source_model)
    checkpoint = streamed_checkpoint(config, text, model_config)
    if checkpoint is not None:
        return Source(tokenizer, vocabulary, checkpoint.model, checkpoint, checkpoint.read_matrices(len(vocabulary)),
                      checkpoint.dtype, checkpoint.stored_bytes())
    check_memory(memory_needed(config, text, model_config), text)
    model, matrices = load_checked_model(config.source_model, vocabulary, f"source model '{config.source_model}'",
                                         stored_dtype=True)
    if text.model_runs():  # its forward passes run on the GPU where there is one
        model.to(pick_device())
    return Source(tokenizer, vocabulary, model, None, matrices, model.get_input_embeddings().weight.dtype,
                  sum(p.numel() * p.element_size() for p in model.parameters()))


def load_target(config: TransferConfig, source: Source, text: TextSteps, progress: bool = False) -> Target:
    """The target tokenizer (trained on target_text where none is given); refused where the model's positions do not
    fit it or the output's disk lacks room for the new folder."""
    if config.target_tokenizer:
        tokenizer = load_tokenizer(config.target_tokenizer, "target tokenizer")
    else:
        tokenizer = train_tokenizer(source.tokenizer, config.target_text, config.vocab_size, progress=progress)
    target = Target(tokenizer, Vocabulary(tokenizer))
    target.growth = plan_growth(config, source, target)
    if config.calibration.source_text and target.growth is None:
        raise separation_needs_extension("the target tokenizer does not keep every source id")
    check_position_offset(source.model, target.vocabulary.roles)
    untie = source.matrices.tied and (((text.strength > 0 or text.source_lines)
                                       and config.calibration.tied_head == "untie")
                                      or (text.distills and config.distill.tied_head == "untie"))
    check_output_space(Path(config.output), output_size(source.stored_bytes, source.matrices, target.rows,
                                                        source.dtype, untie))
    return target


def plan_growth(config: TransferConfig, source: Source, target: Target) -> Growth | None:
    """Whether the target tokenizer extends the source's (keeps every source id's token and adds tokens after them)
    and, where the transfer treats it so (`config.vocabulary`), the rows of the new matrices. `vocabulary: extend`
    refuses a target that is no extension, naming the first source id it moves."""
    kept, tokens = len(source.vocabulary), len(target.vocabulary)
    moved = first_differing_id(source.tokenizer, target.tokenizer)
    extends = moved is None and tokens > kept
    if config.vocabulary == "extend" and not extends:
        why = (f"it has no token after the source's {kept:,}" if moved is None else
               f"source id {moved} is {source.tokenizer.convert_ids_to_tokens(moved)!r} in the source tokenizer but "
               f"{target.tokenizer.convert_ids_to_tokens(moved) if moved < tokens else 'missing'!r} in the target")
        raise ConfigError(f"vocabulary: extend needs a target tokenizer that keeps every source token at its id and "
                          f"adds tokens after them, and this one does not: {why}. Make one with `langswap tokenizer "
                          "--extend N`, or set vocabulary: replace (or auto).")
    if not extends or config.vocabulary == "replace":
        return None
    source_rows = kept + source.matrices.padded_rows
    multiple = config.pad_to_multiple
    growth = Growth(kept, tokens, -(-max(source_rows, tokens) // multiple) * multiple, source_rows)
    logger.info("the target tokenizer extends the source's: %d source tokens kept at their ids, %d new (ids %d-%d), "
                "%d rows", kept, tokens - kept, kept, tokens - 1, growth.rows)
    return growth


def padding_rows(growth: Growth, matrices) -> dict[str, torch.Tensor | None]:
    """The rows an extended model's matrices get after the target's tokens (`Growth`), by matrix name."""
    beyond = matrices.beyond
    made = {}
    for which, matrix in (("embeddings", matrices.embeddings), ("output_embeddings", matrices.output_embeddings),
                          ("output_bias", matrices.output_bias)):
        if matrix is None:
            made[which] = None
            continue
        own = beyond.get(which)
        fill = (own if own is not None and len(own) else matrix).to(torch.float32).mean(dim=0).to(matrix.dtype)
        rows = fill.expand(growth.rows - growth.tokens, *matrix.shape[1:]).clone()
        if own is not None:  # the source's own rows beyond its tokenizer stay where no new token took their id
            start = growth.tokens - growth.kept  # index into `own` of row id `tokens`
            count = max(0, min(len(own) - start, len(rows)))
            if count:
                rows[:count] = own[start:start + count].to(matrix.dtype)
        made[which] = rows
    return made


def load_inputs(config: TransferConfig, source: Source, target: Target) -> Inputs:
    """The resources the method declares (loaded, with their reports) and the method's inputs."""
    spec = get_method(config.method.method_name)
    resources, reports = load_resources(spec, config, target.tokenizer, source.tokenizer)
    device = config.compute_device()
    if device.type == "cpu" and torch.cuda.is_available():
        logger.info("the method runs on the CPU; --set method_device=cuda runs its searches on the GPU")
    return Inputs(TransferInputs(source.vocabulary, target.vocabulary, source.matrices.embeddings,
                                 resources=resources, device=device, kept=target.kept,
                                 padding=padding_rows(target.growth, source.matrices) if target.growth else None),
                  reports)


def finish_context(config: TransferConfig, source: Source, target: Target, text: TextSteps,
                   progress: bool = False) -> FinishContext:
    """What the finishing steps share across candidates, computed once: the calibration's frequency line (its
    check lines are the held-out lines candidates are judged on, kept out of its counts)."""
    calibration = dataclasses.replace(config.calibration, check_lines=check_line_count(config, text.held_out))
    line = None
    if text.strength > 0 and not (source.matrices.tied and config.calibration.tied_head == "skip"):
        line = frequency_line(target.tokenizer, text.lines, target.rows, calibration)
    return FinishContext(config, target, text, calibration, line, source, progress)


def movable_rows(mapping, kept: int = 0, copied: bool = False) -> np.ndarray:
    """Rows a finishing step may change: never a special token's, never one of the first `kept` rows (an extended
    vocabulary's source rows), and a row copied from a source token of the same form only with `copied`; without
    it, the rows the method made."""
    kinds = mapping.kinds
    fixed = [Kind.SPECIAL] if copied else [Kind.SPECIAL, Kind.COPIED]
    return ~np.isin(kinds, fixed) & (np.arange(len(kinds)) >= kept)


def calibrate_rows(model, tokenizer, mapping, config: CalibrationConfig, strength: float, lines: list[str],
                   line: tuple | None = None, kept: int = 0, progress: bool = False) -> CalibrationReport:
    """Frequency calibration (`langswap.transfer.calibrate`) of a transferred model's output rows at `strength`: every
    non-special row, or with `rows: new` those the method did not copy; never the first `kept` rows (an extended
    vocabulary's source rows). `rows: auto` calibrates both ways from the same start where the method copied rows
    and there are check lines, and keeps the one with the lower loss on them (ties: all), the report's `row_choice`
    saying so. Returns calibrate's report."""
    config = dataclasses.replace(config, strength=strength)
    every, new = movable_rows(mapping, kept, copied=True), movable_rows(mapping, kept, copied=False)
    held = split_check_lines(lines, config)[1]
    if config.rows != "auto" or not held or not new.any() or np.array_equal(every, new):
        moved = new if config.rows == "new" else every
        return calibrate(model, tokenizer, lines, config, moved, line, progress)
    start = token_matrices(model)
    loss_before = mean_token_loss(model, tokenizer, held, config.max_length, progress)
    reports = {"all": calibrate(model, tokenizer, lines, config, every, line, progress, loss_before)}
    finished = token_matrices(model)
    restore_token_matrices(model, start)
    reports["new"] = calibrate(model, tokenizer, lines, config, new, line, progress, loss_before)
    losses = {rows: report.held_out_loss for rows, report in reports.items()}
    if None in losses.values():  # skipped (a tied head with tied_head: skip): nothing was chosen
        restore_token_matrices(model, finished)
        return reports["all"]
    chosen = "new" if losses["new"] < losses["all"] else "all"
    if chosen == "all":
        restore_token_matrices(model, finished)
    logger.info("calibration kept %s rows (check-line loss: all %.4f, new %.4f)", chosen, losses["all"],
                losses["new"])
    return dataclasses.replace(reports[chosen], row_choice=RowChoice(
        kept=chosen, losses={rows: round(loss, 4) for rows, loss in losses.items()}))


def calibrated_rows(config: CalibrationConfig, report: CalibrationReport | None) -> str:
    """The rows (all or new) calibration moved: `rows`, or under auto the kept one (all where nothing was chosen)."""
    if config.rows != "auto":
        return config.rows
    return report.row_choice.kept if report is not None and report.row_choice is not None else "all"


def calibrate_step(context: FinishContext, model, result: MethodResult, earlier: dict) -> CalibrationReport:
    """Frequency calibration as the text plan says."""
    text = context.text
    report = calibrate_rows(model, context.target.tokenizer, result.mapping, context.calibration, text.strength,
                            text.lines, context.line, context.target.kept, context.progress)
    return dataclasses.replace(report, text=str(text.text))


def calibrates(context: FinishContext) -> bool:
    return context.text.strength > 0


def distill_step(context: FinishContext, model, result: MethodResult, earlier: dict) -> DistillationReport:
    """Token distillation (`langswap.transfer.distill`) of the rows the method made: every non-special row the method did not
    copy from a source token of the same form, never an extended vocabulary's source rows; on the target text
    without the held-out lines candidates are judged on."""
    text = context.text
    trainable = movable_rows(result.mapping, context.target.kept)
    lines = text.lines[:len(text.lines) - len(text.held_out)] if text.held_out else text.lines
    matrices = context.source.matrices
    head = matrices.embeddings if matrices.output_embeddings is None else matrices.output_embeddings
    report = distill(model, matrices.embeddings, context.source.tokenizer, context.target.tokenizer, lines,
                     trainable, context.config.distill, progress=context.progress,
                     source_head=(head, matrices.output_bias))
    return dataclasses.replace(report, text=str(text.text))


def distills(context: FinishContext) -> bool:
    return context.text.distills


def separate_step(context: FinishContext, model, result: MethodResult, earlier: dict) -> SeparationReport:
    """An extension's new rows moved off the source language (`langswap.transfer.calibrate.separate`), the rows calibration
    moves; the target check loss calibration left is not measured again (the same check lines)."""
    config = context.calibration
    rows = calibrated_rows(config, earlier.get("calibration"))
    moved = movable_rows(result.mapping, context.target.kept, copied=rows == "all")
    report = separate(model, context.target.tokenizer, context.text.lines, context.text.source_lines, config, moved,
                      context.progress, target_loss=earlier["calibration"].held_out_loss if "calibration" in earlier
                      else None)
    return dataclasses.replace(report, source_text=str(config.source_text))


def separates(context: FinishContext) -> bool:
    return bool(context.text.source_lines)


def count_fit_step(context: FinishContext, model, result: MethodResult, earlier: dict) -> CountFitReport:
    """The rows calibration moved, fitted to their counts by their expected counts (`calibrate.count_fit`); the
    target check loss the steps before left is not measured again (the same check lines)."""
    config = context.calibration
    calibration = earlier.get("calibration")
    rows = calibrated_rows(config, calibration)
    moved = movable_rows(result.mapping, context.target.kept, copied=rows == "all")
    losses = last_losses(earlier)
    kept = context.target.kept
    source_rows = None
    setting = config.count_fit_source_rows
    if kept and (setting == "on" or (setting == "auto" and context.text.source_lines)):
        source_rows = movable_rows(result.mapping, 0, copied=True) & (np.arange(len(result.mapping.kinds)) < kept)
    return count_fit(model, context.target.tokenizer, context.text.lines, context.text.source_lines, config, moved,
                     context.progress, target_loss=losses[0], source_loss=losses[1],
                     move=calibration.move if calibration is not None else None, source_rows=source_rows)


def last_losses(reports: dict) -> tuple[float | None, float | None]:
    """(target, source) check losses the last of `reports` to measure each left (`held_out_loss`,
    `held_out_source_loss`; None where none did)."""
    def last(name: str) -> float | None:
        losses = [getattr(report, name) for report in reports.values() if getattr(report, name, None) is not None]
        return losses[-1] if losses else None

    return last("held_out_loss"), last("held_out_source_loss")


def fits_counts(context: FinishContext) -> bool:
    setting = context.calibration.count_fit
    return context.text.strength > 0 and (setting == "on" or (setting == "auto" and context.target.kept > 0))


# name -> (step, whether it runs for a transfer), in the order they run on each candidate, each step given the reports
# of the steps before it (`earlier`); a report may carry `held_out_loss`, the candidate's loss measured on the
# held-out lines as it leaves it (never written), which spares measuring it again (the last one given counts)
FINISHING = {"distillation": (distill_step, distills), "calibration": (calibrate_step, calibrates),
             "separation": (separate_step, separates), "count_fit": (count_fit_step, fits_counts)}


def token_matrices(model, device=None) -> dict:
    """Copies of the model's token matrices (input, a separate output layer, its bias), on `device` (default: where
    they are), and whether they are tied."""
    def copy(tensor):
        return tensor.detach().to(device, copy=True) if device is not None else tensor.detach().clone()

    head = model.get_output_embeddings()
    saved = {"tied": is_tied(model), "input": copy(model.get_input_embeddings().weight)}
    if head is not None and not saved["tied"]:
        saved["output"] = copy(head.weight)
    if head is not None and getattr(head, "bias", None) is not None:
        saved["bias"] = copy(head.bias)
    return saved


def restore_token_matrices(model, saved: dict) -> None:
    if saved["tied"] and not is_tied(model):
        tie_head(model)
    elif not saved["tied"] and is_tied(model):
        untie_head(model)
    with torch.no_grad():  # copy_ moves each to the model's device
        model.get_input_embeddings().weight.copy_(saved["input"])
        head = model.get_output_embeddings()
        if "output" in saved:
            head.weight.copy_(saved["output"])
        if "bias" in saved:
            head.bias.copy_(saved["bias"])


def apply_method(model, inputs: TransferInputs, matrices, method_config: MethodConfig, copy: bool = False,
                 progress: bool = False, held_out: list[str] | None = None, finish=None, dtype=None,
                 held_out_source: list[str] | None = None):
    """Run the method and install its matrices into `model` (or a deep copy of it), finished by `finish(model,
    result) -> dict` (the finishing steps' reports; None: none): (model, result, reports). Where the method offers
    candidates (`combined`, mode auto) and `held_out` target-language lines are given, each candidate is installed
    and finished in turn, and the one whose model then has the lowest mean token loss on the lines is kept (causal
    LMs; other models keep the method's first candidate), its finished matrices restored rather than finished again.
    With `held_out_source` (an extension's source-language check lines) too, the one with the lowest sum of the two
    losses, each relative to the first candidate's: a candidate that reads the target language a little better by
    costing the source language more is not kept. `dtype`: that of the new matrices (`run_method`; default: the
    source matrices' own)."""
    if copy:
        model = copying.deepcopy(model)

    def install(result):
        if matrices.tied and not is_tied(model):  # a candidate's calibration untied it (calibration.tied_head)
            tie_head(model)
        install_embeddings(model, result.embeddings, result.output_embeddings, result.output_bias)
        update_special_token_ids(model, inputs.target.tokenizer)

    # the best finished candidate so far, as run_method keeps it (lowest loss, ties to the earlier; a non-finite
    # loss counts as infinite): its loss, the result, its finished token matrices (on the CPU) and its reports
    best: dict = {}
    uncalibrated: list[float | None] = []  # each candidate's check-line loss before calibration moved it, in order
    measured: list[tuple[float, float | None]] = []  # each candidate's (target, source) check losses, in order
    judged_rows: dict = {}  # by name: a candidate's finished rows where it is unlike its sibling judged before it

    def judge(result) -> float:
        install(result)
        reports = finish(model, result) if finish is not None else {}
        check = getattr(reports.get("calibration"), "check", None)
        uncalibrated.append(None if check is None else check.loss_before)
        target, source = last_losses(reports)
        if target is None:
            target = mean_token_loss(model, inputs.target.tokenizer, held_out, HELD_OUT_TOKENS, progress)
        if held_out_source and source is None:
            source = mean_token_loss(model, inputs.target.tokenizer, held_out_source, HELD_OUT_TOKENS, progress)
        measured.append((target, source if held_out_source else None))
        if held_out_source:
            logger.info("check-line loss: target %.4f, source language %.4f", target, source)
        loss = target if not held_out_source else target / measured[0][0] + source / measured[0][1]
        ranked = loss if math.isfinite(loss) else math.inf
        if finish is not None and (not best or ranked < best["loss"]):
            best.update(loss=ranked, result=result, matrices=token_matrices(model, "cpu"), reports=reports)
        if finish is not None and result.unlike is not None and len(result.unlike[1]):
            judged_rows[result.candidate] = finished_rows(model, result.candidate, result.unlike[1])
        return loss

    if held_out_source:
        judge.what = "held-out loss of the two texts, each relative to the first candidate's, summed"
    judged = bool(held_out) and calibratable(model)
    result = run_method(method_config, inputs, matrices.as_dict(), progress=progress, judge=judge if judged else None,
                        dtype=dtype)
    if result.choice and result.choice.losses is not None and held_out_source:
        names = list(result.choice.losses)

        def rounded(value: float) -> float | None:
            return round(value, 5) if math.isfinite(value) else None

        result.choice.losses = {name: rounded(target) for name, (target, _) in zip(names, measured)}
        result.choice.source_losses = {name: rounded(source) for name, (_, source) in zip(names, measured)}
    if result.choice and finish is not None and result.choice.losses is not None:
        result.choice.by = (("held-out loss of both texts after " if held_out_source else "held-out loss after ")
                            + ", ".join(getattr(finish, "steps", ["finishing"])))
        if any(loss is not None for loss in uncalibrated):
            result.choice.losses_uncalibrated = dict(zip(result.choice.losses, uncalibrated))
    refuse_non_finite_rows(result, inputs)
    if best and best["result"] is result and result.sibling is not None:
        result.choice.rows = sibling_start_rows(model, result, install, finish, judged_rows)
        if result.choice.rows is not None:
            result.choice.rows.own = own_source_rows(result.mapping, inputs.source, inputs.target,
                                                     result.choice.rows.ids)
            result.choice.start, result.choice.start_rows = result.choice.rows.candidate, len(result.choice.rows.ids)
    result.sibling = None  # its matrices are as large as the kept ones'; what training needs of them is taken
    if best and best["result"] is result:  # judged: installed and finished then
        install(result)
        restore_token_matrices(model, best["matrices"])
        reports = best["reports"]
    else:
        install(result)
        reports = finish(model, result) if finish is not None else {}
    return model, result, reports


def sibling_start_rows(model, result, install, finish, judged: dict):
    """The kept candidate's sibling (`MethodResult.sibling`: its evidence chosen rather than mixed) as the candidates
    were finished: its finished rows where its matrices differ from the kept one's (`start_rows.StartRows`; None
    where none differ). `judged`: the rows each candidate judged after its sibling left, by name, taken where they
    are those rows; otherwise the sibling is installed and finished again here, and left in `model` (the caller
    installs the kept one again)."""
    name, other = result.sibling
    ids = differing_rows(result, other)
    if len(ids) == 0:
        return None
    kept = judged.get(name)
    if kept is not None and np.array_equal(kept.ids, ids.numpy()):
        logger.info("the %s candidate's rows of %s tokens it makes otherwise, as its judging finished them, are kept "
                    "for training's start (%s)", name, f"{len(ids):,}", START_FILE)
        return kept
    install(other)
    finish(model, other)
    start = finished_rows(model, name, ids)
    logger.info("the %s candidate's rows of %s tokens it makes otherwise are kept for training's start (%s)", name,
                f"{len(ids):,}", START_FILE)
    return start


def make_embeddings(config: TransferConfig, source: Source, target: Target, text: TextSteps, inputs: Inputs,
                    progress: bool = False, copy: bool = False) -> Made:
    """The method's matrices installed into the source model (or a copy of it) and finished (`FINISHING`), the kept
    candidate chosen on held-out lines where the method offers several; a streamed transfer only runs the method
    (nothing runs the model)."""
    if source.checkpoint is not None:
        result = run_method(config.method, inputs.method, source.matrices.as_dict(), progress=progress,
                            dtype=source.dtype)
        refuse_non_finite_rows(result, inputs.method)
        if config.calibration.strength is None:
            logger.info("no frequency calibration: %s", text.skipped)
        return Made(source.model, result, {"calibration": CalibrationReport(skipped=text.skipped, strength=0.0)})
    seconds = {}
    start = time.perf_counter()
    context = finish_context(config, source, target, text, progress)
    if context.line is not None:
        seconds["frequencies"] = time.perf_counter() - start
    steps = {name: step for name, (step, runs) in FINISHING.items() if runs(context)}

    def finish(model, result) -> dict:
        reports = {}
        for name, step in steps.items():
            start = time.perf_counter()
            reports[name] = step(context, model, result, reports)
            seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - start
        return reports

    finish.steps = list(steps)
    source_check = split_check_lines(text.source_lines, context.calibration)[1] if text.held_out else []
    model, result, finished = apply_method(source.model, inputs.method, source.matrices, config.method,
                                           copy=copy, progress=progress, held_out=text.held_out,
                                           finish=finish if steps else None, dtype=source.dtype,
                                           held_out_source=source_check or None)
    if "calibration" not in finished:
        finished["calibration"] = CalibrationReport(skipped=text.skipped, strength=0.0)
        if config.calibration.strength is None:
            logger.info("no frequency calibration: %s", text.skipped)
    return Made(model, result, finished, seconds)


def check_matching(source: Source, target: Target, made: Made) -> MatchingReport:
    """The rows the method copied from a source token of the same form, counted against an independent count
    (resources/conventions.py `matching_report`); logs the share copied, and warns where the target's pieces break the
    source family's conventions or the two counts part. An extended vocabulary keeps the source's ids by construction
    and is not counted."""
    if target.growth is not None:
        return MatchingReport(skipped="an extended vocabulary keeps every source token at its id")
    mapping = made.result.mapping
    rows = mapping.rows_of(Kind.COPIED)
    copied = {int(row): int(mapping.row(int(row))[0][0]) for row in rows}
    if target.independent is None:
        target.independent = independent_matches(source.tokenizer, target.tokenizer)
    report = matching_report(copied, target.independent)
    logger.info("copied %s of %s target tokens (%.1f%%): %s with a whole surface, where an independent count finds "
                "%s the source reads as one token (%s agree)", f"{report.copied:,}", f"{report.target_tokens:,}",
                100 * report.share_copied, f"{report.copied_whole:,}", f"{report.independent:,}", f"{report.agree:,}")
    report.warnings = matching_warnings(report)
    for warning in report.warnings:
        logger.warning(warning)
    return report


def score(config: TransferConfig, made: Made, source: Source, target: Target, progress: bool = False) \
        -> tuple[EvaluationMetrics | None, list[dict]]:
    """(eval_text's held-out figures or None, the correspondence sample)."""
    rows = correspondence_rows(made.result.mapping, source.vocabulary, target.vocabulary, count=config.correspondence,
                               seed=config.method.seed)
    if not config.eval_text:
        return None, rows
    lines = read_text_lines(config.eval_text, "evaluation text", max_lines=config.eval_lines)
    metrics = evaluate_model(made.model, target.tokenizer, lines, objective_of(made.model.config), progress)
    return metrics.report(), rows


def write_output(config: TransferConfig, source: Source, target: Target, inputs: Inputs, made: Made,
                 metrics: EvaluationMetrics | None, rows: list[dict], seconds: dict, progress: bool = False,
                 demo: list | None = None, source_name: str | None = None,
                 demo_key: str | None = None, matching: MatchingReport | None = None) -> TransferRecord:
    """The output folder, written under a temporary name and renamed when complete: model (or the streamed
    checkpoint's files with the new matrices), tokenizer, provenance, record and model card (`source_name`: the
    source's hub name, for a source given as a local folder). `demo`, `demo_key`: the demo's table and its digest of
    this transfer, kept in the record."""
    result, matrices = made.result, source.matrices
    spec = get_method(config.method.method_name)
    head = result.mapping.head is not None and matrices.output_embeddings is not None
    record = TransferRecord(
        langswap_version=__version__, config=to_dict(config), seed=config.method.seed, method=spec.name,
        counts=result.mapping.counts(), head_counts=result.mapping.head.counts() if head else None,
        source_vocabulary=source.vocabulary.summary(), target_vocabulary=target.vocabulary.summary(),
        tied_embeddings=matrices.tied if source.checkpoint is not None else is_tied(made.model),
        output_bias=matrices.output_bias is not None, source_padded_rows=matrices.padded_rows,
        streamed=None, alignment=inputs.alignment, resources=inputs.reports,
        resource_keys=keys_in_use(spec.kinds(config), config.resources), metrics=metrics,
        method_choice=result.choice, calibration=made.finished.get("calibration"),
        distillation=made.finished.get("distillation"), separation=made.finished.get("separation"),
        count_fit=made.finished.get("count_fit"),
        correspondence=rows,
        vocabulary=target.vocabulary_report(),
        seconds={key: round(value, 2) for key, value in seconds.items()}, demo=demo, demo_key=demo_key,
        matching=matching)

    def save_model(folder: Path) -> None:
        if source.checkpoint is not None:  # what the streamed write copied is known once it is done
            record.streamed = source.checkpoint.write(folder, target.tokenizer, result.embeddings,
                                                      result.output_embeddings, result.output_bias,
                                                      progress=progress)
        else:
            made.model.save_pretrained(folder)
            calibration = record.calibration
            if calibration is not None and calibration.move is not None and calibration.rows:
                calibration.move.save(folder / MOVE_FILE)  # what `langswap train` may take off again
                calibration.move_file = MOVE_FILE
            choice = record.method_choice
            if choice is not None and choice.rows is not None:
                choice.rows.save(folder / START_FILE)  # what `langswap train` may start from
                choice.start_file = START_FILE
        remap_config_ids(folder / "config.json", source.tokenizer, target.tokenizer)

    def write_provenances(folder: Path) -> None:
        write_provenance(folder / "provenance.tsv", result.mapping, source.vocabulary, target.vocabulary)
        if head:
            write_provenance(folder / "provenance-head.tsv", result.mapping.head, source.vocabulary,
                             target.vocabulary)

    write_model_folder(Path(config.output), config.overwrite, save_model, target.tokenizer, write_provenances,
                       record, source_model=source_name)
    return record


def write_model_folder(output: Path, overwrite: bool, save_model: Callable[[Path], None], tokenizer,
                       write_provenances: Callable[[Path], None], record: ModelRecord, *,
                       source_model: str | None = None, language: str | None = None) -> None:
    """A model folder, written under a temporary name and renamed when complete (`files.atomic_directory`; an
    existing `output` is replaced only with `overwrite`), in this order: the model (`save_model(folder)`), the
    tokenizer, the provenance files (`write_provenances(folder)`, through `methods.provenance.write_table`), the
    record (langswap.json, written last of the data, so `save_model` may complete it) and the model card made from
    it (`source_model`, `language`: as `modelcard.write_model_card` takes them)."""
    with atomic_directory(output, overwrite) as folder:
        save_model(folder)
        save_tokenizer(tokenizer, folder)
        write_provenances(folder)
        write_model_record(folder, record)
        write_model_card(folder, source_model=source_model, language=language)


def remap_config_ids(path: Path, source_tokenizer, target_tokenizer) -> None:
    """config.json's token ids beside the roles (image, tool tokens) moved to the target tokenizer's ids
    (`surgery.remap_named_token_ids`), with a warning for each the target lacks."""
    config = json.loads(path.read_text(encoding="utf-8"))
    before = json.dumps(config, sort_keys=True)
    warnings = remap_named_token_ids(config, source_tokenizer, target_tokenizer)
    if json.dumps(config, sort_keys=True) != before:
        path.write_text(json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    for warning in warnings:
        logger.warning(warning)


def output_size(source_bytes: int, matrices, target_rows: int, dtype, untie: bool = False) -> dict[str, int]:
    """About how many bytes a transfer's output folder takes: the source's weights less its token matrices, plus
    the new token matrices in `dtype` ({"body", "tokens", "total"}, the total with 16 MiB for configs and the
    tokenizer); `untie`: a tied head gets a matrix of its own (calibration.tied_head: untie)."""
    rows, dim = matrices.embeddings.shape
    matrices_count = 1 if matrices.tied or matrices.output_embeddings is None else 2
    itemsize = torch.empty(0, dtype=dtype).element_size()
    old = (rows + matrices.padded_rows) * dim * itemsize * matrices_count
    body = max(0, source_bytes - old)
    bias = 4 * target_rows if matrices.output_bias is not None else 0
    tokens = target_rows * dim * itemsize * (matrices_count + int(untie)) + bias
    return {"body": body, "tokens": tokens, "total": body + tokens + 16 * 2**20}


WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
LIBRARIES = 2**30  # torch, transformers and the tokenizers once imported


def memory_needed(config: TransferConfig, text: TextSteps, model_config) -> dict[str, int] | None:
    """About how many bytes of memory a transfer that loads the whole source model needs at its peak: the weights
    as stored (the model loads in the dtype it was saved in), the token matrices twice more (the source's copied out,
    the method's) and, where candidates are judged, a third time (the best one's, kept while the others are judged),
    and for token distillation its rows in float32 with their gradient and AdamW's two moments, plus the activations
    of one batch through the body ({"weights", "tokens", "distillation", "total"}, the total with `LIBRARIES`). None
    where the source is not a local folder of weight files (nothing to measure before downloading it)."""
    folder = Path(config.source_model)
    if not folder.is_dir():
        return None
    files = next((found for pattern in WEIGHT_FILES if (found := list(folder.glob(pattern)))), [])
    if not files:
        return None
    weights = sum(path.stat().st_size for path in files)
    # transformers' attribute_map gives every config these names (GPT-2's n_embd and n_layer among them)
    hidden = getattr(model_config, "hidden_size", None)
    vocab = getattr(model_config, "vocab_size", None)
    if not hidden or not vocab:
        return None
    layers = getattr(model_config, "num_hidden_layers", None) or 1
    inner = getattr(model_config, "intermediate_size", None) or getattr(model_config, "n_inner", None) or 4 * hidden
    itemsize = 2 if str(getattr(model_config, "torch_dtype", "")).endswith(("float16", "bfloat16")) else 4
    heads = 1 if getattr(model_config, "tie_word_embeddings", True) else 2
    tokens = (2 + int(text.judges_candidates)) * vocab * hidden * itemsize * heads
    distillation = 0
    if text.distills:
        distill = config.distill
        positions = distill.batch_lines * distill.max_length
        # per position and block: the saved inputs of the attention and MLP products (about 12 hidden-wide and 4
        # inner-wide values) for the backward pass to the input rows; the teacher's pass keeps nothing
        activations = positions * layers * (12 * hidden + 4 * inner) * itemsize
        head_logits = positions * vocab * 4 * 3 if heads == 2 and distill.head == "lm" else 0
        distillation = 4 * vocab * hidden * 4 + activations + head_logits
    return {"weights": weights, "tokens": tokens, "distillation": distillation,
            "total": weights + tokens + distillation + LIBRARIES}


def available_memory() -> int | None:
    """Bytes of memory a new allocation can have without swapping anything out (Linux's MemAvailable, plus free
    swap); None where the system does not say."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        return (int(fields["MemAvailable"].split()[0]) + int(fields.get("SwapFree", "0 kB").split()[0])) * 1024
    except (OSError, KeyError, ValueError):
        return None


def check_memory(needed: dict[str, int] | None, text: TextSteps) -> None:
    """Refuse, before the model loads, a transfer whose whole source model and working copies need more memory than
    the machine has free, with the estimate and what to turn off so that it streams instead."""
    free = available_memory()
    if needed is None or free is None or needed["total"] <= free:
        return
    gb = 2**30
    parts = f"the weights {needed['weights'] / gb:.2f} GiB, token matrices {needed['tokens'] / gb:.2f} GiB"
    if needed["distillation"]:
        parts += f", token distillation {needed['distillation'] / gb:.2f} GiB"
    raise ConfigError(
        f"this transfer loads the whole source model, because it runs it on text ({'; '.join(text.model_runs())}), "
        f"and needs about {needed['total'] / gb:.2f} GiB of memory ({parts}, libraries {LIBRARIES / gb:.0f} GiB), "
        f"but {free / gb:.2f} GiB is free. Turn those steps off so that the checkpoint streams (a method that needs "
        "no text then runs in little more than the new token matrices), lower distill.batch_lines or "
        "distill.max_length, or run it on a machine with more memory.")


def check_output_space(output: Path, size: dict[str, int]) -> None:
    """Refuse, before the resources load and the method runs, an output whose disk has less free space than
    `size["total"]`."""
    place = output.absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    free = shutil.disk_usage(place).free
    if free < size["total"]:
        gb = 2**30
        raise OutputSpaceError(
            f"the output '{output}' needs about {size['total'] / gb:.2f} GiB (the model's body, "
            f"{size['body'] / gb:.2f} GiB, and the new token matrices, {size['tokens'] / gb:.2f} GiB), but the disk "
            f"holding '{place}' has {free / gb:.2f} GiB free. Free {(size['total'] - free) / gb:.2f} GiB there, or "
            "give an --output on a disk with room.")
