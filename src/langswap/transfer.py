"""transfer -> evaluate, as a config describes it.

`transfer(config)` loads the source model and tokenizers, prepares the resources the method declares (aligned word
vectors), runs the method, installs the new embeddings, and writes the output folder: model, tokenizer,
`langswap.json` (resolved config, version, seed, counts, alignment report, metrics) and `provenance.tsv` (how each
target token was made). The folder is written under a temporary name and renamed when complete; an existing folder is
kept unless `overwrite`. Everything is checked before the slow steps start.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from langswap import __version__
from langswap.config import from_dict, to_dict
from langswap.errors import ConfigError, MissingResourceError, OutputSpaceError
from langswap.files import refuse_existing
from langswap.records import TransferRecord, write_model_record
from langswap.methods.base import (DEFAULT_METHOD, MethodConfig, TransferInputs, check_resources, get_method,
                                   load_resources, run_method)
from langswap.methods.provenance import refuse_non_finite_rows, write_provenance
from langswap.calibrate import CalibrationConfig
from langswap.resources.alignment import AlignConfig
from langswap.resources.kinds import keys_in_use, resources_config_class

logger = logging.getLogger(__name__)

HELD_OUT_LINES = 100  # default held_out_lines
HELD_OUT_TOKENS = 128  # window (in tokens) each held-out line is scored in when a method's candidates are compared


# the `resources:` section: the keys of every registered resource kind (`langswap.resources.kinds`)
ResourcesConfig = resources_config_class()


@dataclass(kw_only=True)
class ModelPairConfig:
    """The source model and the target tokenizer (a folder, or trained on target text); shared by transfer and
    bench configs."""

    source_model: str = field(default="", metadata={"help": "Source model folder or hub name (required)."})
    source_tokenizer: str | None = field(default=None, metadata={"help": "Source tokenizer; default: the model's."})
    target_tokenizer: str | None = field(default=None, metadata={"help": "Target tokenizer folder or hub name."})
    target_text: str | None = field(default=None, metadata={"help": "Train the target tokenizer on this text when "
                                                                     "target_tokenizer is not given."})
    vocab_size: int | None = field(default=None, metadata={"help": "Size of a trained target tokenizer; default: "
                                                                    "the source's."})
    language: str | None = field(default=None, metadata={"help": "The target language's ISO 639 code (e.g. de), "
                                                                  "written to the model card."})
    resources: object = field(default_factory=lambda: resources_config_class()(), metadata={
        "help": "Files the methods consume (`langswap methods` says which method needs which)."})
    align: AlignConfig = field(default_factory=AlignConfig)

    @staticmethod
    def resolve_resources(value, where: str):
        return from_dict(resources_config_class(), value, where)

    def validate_pair(self) -> None:
        if not self.source_model:
            raise ConfigError("source_model is not set: give the English model folder or hub name "
                              "(--set source_model=PATH, or `source_model:` in the YAML).")
        if not self.target_tokenizer and not self.target_text:
            raise ConfigError("give target_tokenizer (a tokenizer folder), or target_text to train one on.")
        if self.target_text and not Path(self.target_text).is_file():
            raise MissingResourceError(f"target_text '{self.target_text}' does not exist or is not a file.")


@dataclass(kw_only=True)
class TransferConfig(ModelPairConfig):
    """A whole transfer: source model, target tokenizer, method, resources, output."""

    output: str = field(default="", metadata={"help": "Output model folder (required)."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing output folder."})
    method: MethodConfig = field(default=None, metadata={"help": "Method name and options (`langswap methods`).",
                                                         "method_section": True})
    eval_text: str | None = field(default=None, metadata={"help": "Held-out target text to score the new model on."})
    eval_lines: int = field(default=300, metadata={"help": "Lines of eval_text scored."})
    correspondence: int = field(default=12, metadata={"help": "Target tokens shown with their source tokens."})
    held_out_lines: int = field(default=HELD_OUT_LINES, metadata={
        "help": "Lines at the end of the target text (calibration.text, target_text or resources.token_text; read "
                "up to calibration.lines) on which a method's candidates are compared (combined, mode auto); the "
                "one whose model predicts them best is kept (calibrated first, where the transfer calibrates; they "
                "are then its check lines). Needs a text of at least twice as many lines. 0: the method's first "
                "candidate."})
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig, metadata={
        "help": "Move output rows so each token's mean logit fits its frequency in target text (langswap.calibrate)."})
    stream: str = field(default="auto", metadata={
        "help": "Read only the token matrices of a safetensors source checkpoint and copy its other tensors to the "
                "output file by file, so a model larger than memory transfers (langswap.checkpoint). auto: when the "
                "transfer runs the model on no text (no calibration, no eval_text, no choice among a method's "
                "candidates) and the source is a local safetensors folder; on: always (an error says what needs "
                "the whole model); off: load the whole model.", "choices": ("auto", "on", "off")})
    method_device: str = field(default="cpu", metadata={
        "help": "Where the method's similarity searches (wechsel, focus, clp, combined, tiktotok, ramen) and omp's "
                "pursuit run: cpu, cuda, cuda:1, ..., or auto (cuda where there is one). At 128k tokens omp on a "
                "CPU takes hours. The model's passes over text run on a GPU wherever there is one."})

    def __post_init__(self):
        if self.method is None:
            from langswap.methods.base import make_config

            self.method = make_config(DEFAULT_METHOD)

    @staticmethod
    def resolve_method(value, where: str) -> MethodConfig:
        from langswap.methods.base import make_config

        if isinstance(value, str):
            value = {"name": value}
        if not isinstance(value, dict):
            raise ConfigError(f"'{where.rstrip('.')}' must be a method name or a mapping with 'name' and options.")
        options = dict(value)
        return make_config(options.pop("name", DEFAULT_METHOD), **options)  # options alone: the default method

    def validate(self) -> None:
        self.validate_pair()
        if not self.output:
            raise ConfigError("output is not set: give the folder to write the new model to (--output PATH).")
        check_resources(get_method(self.method.method_name), self)
        if self.eval_text and not Path(self.eval_text).exists():
            raise MissingResourceError(f"eval_text '{self.eval_text}' does not exist.")
        text = self.calibration_text()
        if self.calibration.enabled and not text:
            raise ConfigError("calibration needs target-language text: set calibration.text (or target_text).")
        if self.calibration.strength != 0 and text and not Path(text).is_file():
            raise MissingResourceError(f"calibration text '{text}' does not exist (set calibration.strength=0 to "
                                       "transfer without calibration).")
        if self.held_out_lines < 0:
            raise ConfigError(f"held_out_lines is {self.held_out_lines}; give 0 or more lines.")
        self.compute_device()
        refuse_existing(self.output, self.overwrite)

    def compute_device(self):
        """The torch device of `method_device` (a ConfigError naming the fix where there is no such device)."""
        from langswap.models import method_device

        return method_device(self.method_device)

    def calibration_text(self) -> str | None:
        return self.calibration.text or self.target_text or getattr(self.resources, "token_text", None)


@dataclass
class TextSteps:
    """What a transfer does with target-language text, decided once from its config and whether the model is a
    causal LM (`plan_text_steps`): whether it calibrates (`strength`, or why not: `skipped`), the lines it reads
    (`lines`), the held-out lines it judges candidates on (`held_out`), and whether it scores `eval_text`."""

    strength: float
    skipped: str | None
    text: str | None
    lines: list[str]
    held_out: list[str] | None
    judges_candidates: bool
    eval_text: str | None
    method_name: str

    def model_runs(self) -> list[str]:
        """The steps that run the model on text (so need the whole model in memory), each with the setting that
        turns it off."""
        steps = []
        if self.strength > 0:
            steps.append("frequency calibration (calibration.strength=0 turns it off)")
        if self.eval_text:
            steps.append("scoring eval_text (leave eval_text unset; `langswap evaluate` scores the output)")
        if self.judges_candidates:
            steps.append(f"choosing among {self.method_name}'s candidates on held-out lines (held_out_lines=0 "
                         "keeps the first)")
        return steps


def plan_text_steps(config: TransferConfig, causal: bool) -> TextSteps:
    from langswap.resources.text import read_text_lines

    text = config.calibration_text()
    strength, skipped = config.calibration.plan(bool(text), causal)
    lines = read_text_lines(text, "target text", max_lines=config.calibration.lines) \
        if text and (strength > 0 or (config.held_out_lines and Path(text).is_file())) else []
    held_out = lines[-config.held_out_lines:] if config.held_out_lines and len(lines) >= 2 * config.held_out_lines \
        else None
    judges = bool(held_out) and causal and config.method.offers_candidates()
    return TextSteps(strength, skipped, text, lines, held_out, judges, config.eval_text, config.method.method_name)


def transfer_config(data: dict) -> TransferConfig:
    return from_dict(TransferConfig, data)


@dataclass
class TransferReport:
    output: Path
    counts: dict
    alignment: dict | None
    metrics: dict | None
    correspondence: list[dict]
    seconds: dict
    calibration: dict | None = None  # what langswap.calibrate did, or {"skipped": why}
    choice: dict | None = None  # where the method offered candidates: which was kept, and why


def output_size(source_bytes: int, matrices, target_rows: int, dtype, untie: bool = False) -> dict[str, int]:
    """About how many bytes a transfer's output folder takes: the source's weights less its token matrices, plus
    the new token matrices in `dtype` ({"body", "tokens", "total"}, the total with 16 MiB for configs and the
    tokenizer); `untie`: a tied head gets a matrix of its own (calibration.tied_head: untie)."""
    import torch

    rows, dim = matrices.embeddings.shape
    matrices_count = 1 if matrices.tied or matrices.output_embeddings is None else 2
    itemsize = torch.empty(0, dtype=dtype).element_size()
    old = (rows + matrices.padded_rows) * dim * itemsize * matrices_count
    body = max(0, source_bytes - old)
    bias = 4 * target_rows if matrices.output_bias is not None else 0
    tokens = target_rows * dim * itemsize * (matrices_count + int(untie)) + bias
    return {"body": body, "tokens": tokens, "total": body + tokens + 16 * 2**20}


def check_output_space(output: Path, size: dict[str, int]) -> None:
    """Refuse, before the resources load and the method runs, an output whose disk has less free space than
    `size["total"]`."""
    import shutil

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


def apply_method(model, inputs: TransferInputs, matrices, method_config: MethodConfig, copy: bool = False,
                 progress: bool = False, held_out: list[str] | None = None, finish=None, dtype=None):
    """Run the method and install its matrices into `model` (or a deep copy of it): (model, MethodResult). Where the
    method offers candidates (`combined`, mode auto) and `held_out` target-language lines are given, each candidate
    is installed in turn, finished with `finish(model, result)` where given (the transfer's calibration, which may
    return the held-out loss it measured on the same lines), and the one whose model then has the lowest mean token
    loss on the lines is kept (causal LMs; other models keep the method's
    first candidate). The kept candidate is installed as the method made it: `finish` is the caller's to apply.
    `dtype`: that of the new matrices (`run_method`; default: the source matrices' own)."""
    import copy as copying

    from langswap.models import is_tied
    from langswap.surgery import install_embeddings, update_special_token_ids

    if copy:
        model = copying.deepcopy(model)

    def install(result):
        if matrices.tied and not is_tied(model):  # a candidate's calibration untied it (calibration.tied_head)
            from langswap.calibrate import tie_head

            tie_head(model)
        install_embeddings(model, result.embeddings, result.output_embeddings, result.output_bias)
        update_special_token_ids(model, inputs.target.tokenizer)

    judge = None
    if held_out:
        from langswap.calibrate import calibratable

        if calibratable(model):
            from langswap.calibrate import mean_token_loss

            def judge(result) -> float:
                install(result)
                loss = finish(model, result) if finish is not None else None  # the loss it measured, if any
                return mean_token_loss(model, inputs.target.tokenizer, held_out, HELD_OUT_TOKENS) \
                    if loss is None else loss

    result = run_method(method_config, inputs, matrices.as_dict(), progress=progress, judge=judge, dtype=dtype)
    if result.choice and finish is not None and "losses" in result.choice:
        result.choice["by"] = "held-out loss after calibration"
    refuse_non_finite_rows(result, inputs)
    install(result)
    return model, result


def calibrate_rows(model, tokenizer, mapping, config: CalibrationConfig, strength: float, lines: list[str],
                   line: tuple[np.ndarray, dict, np.ndarray] | None = None) -> dict:
    """Frequency calibration (`langswap.calibrate`) of a transferred model's output rows at `strength`: every
    non-special row, or with `rows: new` those the method did not copy. Returns calibrate's report."""
    from langswap.calibrate import calibrate
    from langswap.methods.mapping import Kind

    kinds = mapping.kinds
    moved = kinds != Kind.SPECIAL if config.rows == "all" else ~np.isin(kinds, [Kind.SPECIAL, Kind.COPIED])
    return calibrate(model, tokenizer, lines, dataclasses.replace(config, strength=strength), moved, line)


def transfer(config: TransferConfig, progress: bool = False) -> TransferReport:
    """Run one transfer as `config` says and write the output folder; returns what happened. One process at a time
    writes an output folder: another gets `OutputLockedError` (`langswap.locking`)."""
    from langswap.locking import OutputLock
    from langswap.models import transformers_bars

    config.validate()
    with OutputLock(config.output, "transfer output folder"), transformers_bars(progress):
        return _transfer(config, progress)


def streamed_checkpoint(config: TransferConfig, steps: TextSteps, model_config=None):
    """The source checkpoint to stream (`langswap.checkpoint.Checkpoint`), or None to load the whole model, as
    `config.stream` says: auto streams a local safetensors folder when no step (`steps`) runs the model on text; on
    refuses what cannot be streamed, naming what to change."""
    from langswap.checkpoint import Checkpoint, MissingWeightsError, why_not_streamed

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


def _transfer(config: TransferConfig, progress: bool) -> TransferReport:
    from langswap.models import is_tied, load_config, load_model, load_tokenizer, objective_of, save_tokenizer
    from langswap.numerics import SOURCE_FIX, refuse_non_finite
    from langswap.files import atomic_directory
    from langswap.modelcard import write_model_card
    from langswap.surgery import check_position_offset, read_source_matrices
    from langswap.tokens import Vocabulary

    config.validate()
    spec = get_method(config.method.method_name)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()
    source_tokenizer = load_tokenizer(config.source_tokenizer or config.source_model, "source tokenizer")
    model_config = load_config(config.source_model)
    steps = plan_text_steps(config, objective_of(model_config) == "causal")
    checkpoint = streamed_checkpoint(config, steps, model_config)
    model = checkpoint.model if checkpoint is not None else load_model(config.source_model)
    if checkpoint is None:
        refuse_non_finite(model, f"source model '{config.source_model}'", SOURCE_FIX)
    if config.target_tokenizer:
        target_tokenizer = load_tokenizer(config.target_tokenizer, "target tokenizer")
    else:
        from langswap.resources.tokenizer import train_tokenizer

        target_tokenizer = train_tokenizer(source_tokenizer, config.target_text, config.vocab_size, progress=progress)
    source, target = Vocabulary(source_tokenizer), Vocabulary(target_tokenizer)
    check_position_offset(model, target.roles)
    matrices = checkpoint.read_matrices(len(source)) if checkpoint is not None \
        else read_source_matrices(model, len(source), stored_dtype=True)
    dtype = checkpoint.dtype if checkpoint is not None else model.get_input_embeddings().weight.dtype
    source_bytes = checkpoint.stored_bytes() if checkpoint is not None \
        else sum(p.numel() * p.element_size() for p in model.parameters())
    untie = matrices.tied and steps.strength > 0 and config.calibration.tied_head == "untie"
    check_output_space(Path(config.output), output_size(source_bytes, matrices, len(target), dtype, untie))
    if checkpoint is None and steps.model_runs():  # its forward passes run on the GPU where there is one
        from langswap.models import pick_device

        model.to(pick_device())
    seconds["load"] = time.perf_counter() - clock

    clock = time.perf_counter()
    resources, reports = load_resources(spec, config, target_tokenizer, source_tokenizer)
    alignment_report = reports.get("vectors")
    if resources:
        seconds["resources"] = time.perf_counter() - clock

    strength, skipped, text, lines, held_out = steps.strength, steps.skipped, steps.text, steps.lines, steps.held_out

    clock = time.perf_counter()
    import torch

    device = config.compute_device()
    if device.type == "cpu" and torch.cuda.is_available():
        logger.info("the method runs on the CPU; --set method_device=cuda runs its searches on the GPU")
    inputs = TransferInputs(source, target, matrices.embeddings, resources=resources, device=device)
    # the judged lines are the calibration's check lines, kept out of its counts; the counts are made once
    calibration_config = config.calibration
    if held_out and calibration_config.check_lines:
        calibration_config = dataclasses.replace(calibration_config, check_lines=len(held_out))
    line = None  # the frequencies and their smoothing, made once for every candidate
    if strength > 0 and not (matrices.tied and config.calibration.tied_head == "skip"):
        from langswap.calibrate import frequency_line

        line = frequency_line(target_tokenizer, lines, len(target), calibration_config)
        seconds["frequencies"] = time.perf_counter() - clock
        clock = time.perf_counter()

    def finish(candidate_model, candidate) -> float | None:  # each candidate judged as it would be saved: calibrated
        report = calibrate_rows(candidate_model, target_tokenizer, candidate.mapping, calibration_config, strength,
                                lines, line)
        return report.get("held_out_loss")

    if checkpoint is not None:  # nothing runs the model (streamed_checkpoint): the method's matrices are written
        result = run_method(config.method, inputs, matrices.as_dict(), progress=progress, dtype=dtype)
        refuse_non_finite_rows(result, inputs)
    else:
        model, result = apply_method(model, inputs, matrices, config.method, progress=progress, held_out=held_out,
                                     finish=finish if strength > 0 else None, dtype=dtype)
    seconds["method"] = time.perf_counter() - clock

    calibration = {"skipped": skipped, "strength": 0.0}
    if strength > 0:
        clock = time.perf_counter()
        calibration = calibrate_rows(model, target_tokenizer, result.mapping, calibration_config, strength, lines,
                                     line)
        calibration.pop("held_out_loss", None)
        calibration["text"] = str(text)
        seconds["calibrate"] = time.perf_counter() - clock
    elif config.calibration.strength is None:
        logger.info("no frequency calibration: %s", skipped)

    clock = time.perf_counter()
    from langswap.evaluation.correspondence import correspondence_rows

    rows = correspondence_rows(result.mapping, source, target, count=config.correspondence, seed=config.method.seed)
    metrics = None
    if config.eval_text:
        from langswap.evaluation.language_modeling import evaluate_model
        from langswap.resources.text import read_text_lines

        eval_lines = read_text_lines(config.eval_text, "evaluation text", max_lines=config.eval_lines)
        metrics = evaluate_model(model, target_tokenizer, eval_lines, objective_of(model.config),
                                 progress).as_dict()
        seconds["evaluate"] = time.perf_counter() - clock
    written = None
    with atomic_directory(Path(config.output), config.overwrite) as folder:
        if checkpoint is not None:
            written = checkpoint.write(folder, target_tokenizer, result.embeddings, result.output_embeddings,
                                       result.output_bias, progress=progress)
        else:
            model.save_pretrained(folder)
        save_tokenizer(target_tokenizer, folder)
        write_provenance(folder / "provenance.tsv", result.mapping, source, target)
        if result.mapping.head is not None and matrices.output_embeddings is not None:
            write_provenance(folder / "provenance-head.tsv", result.mapping.head, source, target)
        record = TransferRecord(
            langswap_version=__version__,
            config=to_dict(config),
            seed=config.method.seed,
            method=spec.name,
            counts=result.mapping.counts(),
            head_counts=result.mapping.head.counts() if result.mapping.head is not None
            and matrices.output_embeddings is not None else None,
            source_vocabulary=source.summary(),
            target_vocabulary=target.summary(),
            tied_embeddings=matrices.tied if checkpoint is not None else is_tied(model),
            output_bias=matrices.output_bias is not None,
            source_padded_rows=matrices.padded_rows,
            streamed=written,
            alignment=alignment_report,
            resources=reports,
            resource_keys=keys_in_use(spec.kinds(config), config.resources),
            metrics=metrics,
            method_choice=result.choice,
            calibration=calibration,
            correspondence=rows,
            seconds={key: round(value, 2) for key, value in seconds.items()},
        )
        write_model_record(folder, record)
        write_model_card(folder)
    seconds["total_write"] = time.perf_counter() - clock
    return TransferReport(Path(config.output), result.mapping.counts(), alignment_report, metrics, rows, seconds,
                          calibration, result.choice)
