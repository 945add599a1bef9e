"""The transfer's config (`TransferConfig`: `langswap transfer`'s YAML and flags) and the plan of what it does with
target-language text (`TextSteps`), decided once from the config and the model's kind."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from langswap.config import check_choices, from_dict
from langswap.errors import ConfigError, MissingResourceError
from langswap.files import refuse_existing
from langswap.methods.base import DEFAULT_METHOD, MethodConfig, check_resources, get_method, make_config
from langswap.models import method_device
from langswap.resources.alignment import AlignConfig
from langswap.resources.kinds import resources_config_class
from langswap.resources.text import read_text_lines
from langswap.transfer.calibrate import CalibrationConfig
from langswap.transfer.distill import DistillConfig

logger = logging.getLogger(__name__)

HELD_OUT_LINES = 100  # default held_out_lines
HELD_OUT_TOKENS = 128  # window (in tokens) each held-out line is scored in when a method's candidates are compared


# the `resources:` section: the keys of every registered resource kind (`langswap.resources.kinds`)
ResourcesConfig = resources_config_class()


@dataclass(kw_only=True)
class ModelPairConfig:
    """The source model and the target tokenizer (a folder, or trained on target text); shared by transfer and
    bench configs."""

    source_model: str = field(default="", metadata={"cli": ("transfer",),
        "help": "Source model folder or hub name (required)."})
    source_tokenizer: str | None = field(default=None, metadata={"help": "Source tokenizer; default: the model's."})
    target_tokenizer: str | None = field(default=None, metadata={"cli": ("transfer",),
        "help": "Target tokenizer folder or hub name."})
    target_text: str | None = field(default=None, metadata={"cli": ("transfer",),
        "help": "Train the target tokenizer on this text when "
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

    output: str = field(default="", metadata={"cli": ("transfer",), "help": "Output model folder (required)."})
    overwrite: bool = field(default=False, metadata={"cli": ("transfer",),
        "help": "Replace an existing output folder."})
    method: MethodConfig = field(default=None, metadata={"help": "Method name and options (`langswap methods`).",
                                                         "method_section": True})
    eval_text: str | None = field(default=None, metadata={"cli": ("transfer",),
        "help": "Held-out target text to score the new model on."})
    eval_lines: int = field(default=300, metadata={"help": "Lines of eval_text scored."})
    correspondence: int = field(default=12, metadata={"help": "Target tokens shown with their source tokens."})
    held_out_lines: int = field(default=HELD_OUT_LINES, metadata={
        "help": "Lines at the end of the target text (calibration.text, target_text or resources.token_text; read "
                "up to calibration.lines) on which a method's candidates are compared (combined, mode auto); the "
                "one whose model predicts them best is kept (calibrated first, where the transfer calibrates; they "
                "are then its check lines). Needs a text of at least twice as many lines. 0: the method's first "
                "candidate."})
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig, metadata={
        "help": "Move output rows so each token's mean logit fits its frequency in target text "
                "(langswap.transfer.calibrate)."})
    distill: DistillConfig = field(default_factory=DistillConfig, metadata={
        "help": "Token distillation (langswap.transfer.distill): after the method, before calibration, the new input "
                "rows (and an untied head's) learn so that the body's hidden states reading the target tokenization match "
                "those of the source model reading the same target text (calibration.text, target_text or "
                "resources.token_text) with its own tokenizer; causal LMs; off unless distill.tokens is set, "
                "except in an extension kept off the source language (calibration.source_text), where it runs with "
                "the options measured there unless distill.tokens=0."})
    stream: str = field(default="auto", metadata={
        "help": "Read only the token matrices of a safetensors source checkpoint and copy its other tensors to the "
                "output file by file, so a model larger than memory transfers (langswap.checkpoint). auto: when the "
                "transfer runs the model on no text (no calibration, no eval_text, no choice among a method's "
                "candidates) and the source is a local safetensors folder; on: always (an error says what needs "
                "the whole model); off: load the whole model.", "choices": ("auto", "on", "off")})
    vocabulary: str = field(default="auto", metadata={
        "help": "auto: a target tokenizer that keeps every source token at its id, with tokens added after them "
                "(`langswap tokenizer --extend`), extends the vocabulary: every source row (input, output, bias) is "
                "copied bitwise at its id, the method makes only the new rows and calibration moves only those; "
                "extend: the same, and a target tokenizer that is no extension is refused; replace: every row is "
                "made by the method as for a new vocabulary.", "choices": ("auto", "extend", "replace")})
    pad_to_multiple: int = field(default=64, metadata={
        "help": "An extended model's token matrices get a multiple of this many rows (never fewer than the "
                "source's); the rows beyond the tokenizer are padding (GPUs prefer 64; 1: no padding)."})
    method_device: str = field(default="cpu", metadata={
        "help": "Where the method's similarity searches (wechsel, focus, clp, combined, tiktotok, ramen) and omp's "
                "pursuit run: cpu, cuda, cuda:1, ..., or auto (cuda where there is one). At 128k tokens omp on a "
                "CPU takes hours. The model's passes over text run on a GPU wherever there is one."})

    def __post_init__(self):
        if self.method is None:
            self.method = make_config(DEFAULT_METHOD)
        # only an extension takes calibration.source_text (`validate`), so it tells the defaults apart here
        self.distill = self.distill.resolved(extension=bool(self.calibration.source_text))

    @staticmethod
    def resolve_method(value, where: str) -> MethodConfig:
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
        if self.distill.tokens and not text:
            raise ConfigError("distillation needs target-language text: set calibration.text (or target_text), or "
                              "distill.tokens=0.")
        if self.distill.tokens and not Path(text).is_file():
            raise MissingResourceError(f"target text '{text}' for distillation does not exist.")
        if self.calibration.source_text:
            if self.vocabulary == "replace" or not self.target_tokenizer:
                raise separation_needs_extension("vocabulary: replace" if self.vocabulary == "replace" else
                                                 "target_text trains a new tokenizer")
            if not text:
                raise ConfigError("calibration.source_text keeps the new rows' mean logit on target-language text: "
                                  "set calibration.text (or target_text) too.")
            if not Path(self.calibration.source_text).is_file():
                raise MissingResourceError(f"calibration.source_text '{self.calibration.source_text}' does not exist "
                                           "or is not a file.")
        if self.held_out_lines < 0:
            raise ConfigError(f"held_out_lines is {self.held_out_lines}; give 0 or more lines.")
        check_choices(self)
        if isinstance(self.pad_to_multiple, bool) or not isinstance(self.pad_to_multiple, int) \
                or self.pad_to_multiple < 1:
            raise ConfigError(f"pad_to_multiple is {self.pad_to_multiple!r}; give a whole number of rows, at least 1 "
                              "(1: no padding).")
        self.compute_device()
        refuse_existing(self.output, self.overwrite)

    def compute_device(self):
        """The torch device of `method_device` (a ConfigError naming the fix where there is no such device)."""
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
    distills: bool = False
    source_lines: list[str] = field(default_factory=list)  # source-language text (calibration.source_text)

    def model_runs(self) -> list[str]:
        """The steps that run the model on text (so need the whole model in memory), each with the setting that
        turns it off."""
        steps = []
        if self.distills:
            steps.append("token distillation (distill.tokens=0 turns it off)")
        if self.strength > 0:
            steps.append("frequency calibration (calibration.strength=0 turns it off)")
        if self.source_lines:
            steps.append("moving the new rows off the source language (leave calibration.source_text unset)")
        if self.eval_text:
            steps.append("scoring eval_text (leave eval_text unset; `langswap evaluate` scores the output)")
        if self.judges_candidates:
            steps.append(f"choosing among {self.method_name}'s candidates on held-out lines (held_out_lines=0 "
                         "keeps the first)")
        return steps


def separation_needs_extension(why: str) -> ConfigError:
    """The error for calibration.source_text in a transfer that replaces the vocabulary (`why`: how it does)."""
    return ConfigError(f"calibration.source_text keeps an extension's new rows off the source language, and this "
                       f"transfer replaces the vocabulary ({why}); leave it unset, or give a tokenizer made with "
                       "`langswap tokenizer --extend N` as target_tokenizer.")


def check_line_count(config: TransferConfig, held_out: list[str] | None) -> int:
    """The check lines calibration and the separation keep out of each text: the held-out lines candidates are
    judged on, where there are any and calibration.check_lines is not 0; otherwise calibration.check_lines."""
    return len(held_out) if held_out and config.calibration.check_lines else config.calibration.check_lines


def read_separation_lines(config: TransferConfig, lines: list[str], held_out: list[str] | None) -> list[str]:
    """The source-language lines the separation reads (`calibration.source_text`): `hidden_lines` to fit on and the
    check lines; refused before any slow work where the amount is to be chosen and either text has too few lines
    to keep check lines out."""
    calibration = config.calibration
    check = check_line_count(config, held_out)
    source = read_text_lines(calibration.source_text, "source-language text (calibration.source_text)",
                             max_lines=max(calibration.hidden_lines + check, 2 * check))
    if calibration.separation is None and not (check and len(lines) >= 2 * check and len(source) >= 2 * check):
        raise ConfigError(
            f"calibration.separation is chosen on check lines of both texts ({check} of each, kept out of texts of "
            f"at least {2 * check} lines), and the target text has {len(lines)} lines, the source-language text "
            f"{len(source)}: give longer texts, or set calibration.separation (an amount, 1 for instance; 0: no "
            "move).")
    return source


def plan_text_steps(config: TransferConfig, causal: bool) -> TextSteps:
    text = config.calibration_text()
    strength, skipped = config.calibration.plan(bool(text), causal)
    distills = bool(config.distill.tokens) and bool(text)
    if distills and not causal:
        raise ConfigError("token distillation is for causal LMs (a masked LM's hidden state at a token describes "
                          "the whole window, not the text read up to it); set distill.tokens=0 for this model.")
    separates = bool(config.calibration.source_text)
    if separates and not causal:
        raise ConfigError("calibration.source_text moves an extension's new rows off the source language by their "
                          "logits, which is for causal LMs; leave it unset for this model.")
    lines = read_text_lines(text, "target text", max_lines=config.calibration.lines) \
        if text and (strength > 0 or distills or separates or (config.held_out_lines and Path(text).is_file())) \
        else []
    held_out = lines[-config.held_out_lines:] if config.held_out_lines and len(lines) >= 2 * config.held_out_lines \
        else None
    source_lines = read_separation_lines(config, lines, held_out) if separates else []
    judges = bool(held_out) and causal and config.method.offers_candidates()
    return TextSteps(strength, skipped, text, lines, held_out, judges, config.eval_text, config.method.method_name,
                     distills, source_lines)


def transfer_config(data: dict) -> TransferConfig:
    return from_dict(TransferConfig, data)

