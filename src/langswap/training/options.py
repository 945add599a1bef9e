"""`TrainConfig`: the options of `langswap train`. `preset` names the recipe (`training/recipes/`); `recipe` holds
that recipe's own options, checked against its options dataclass when the config is made."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from langswap.config import from_dict
from langswap.errors import ConfigError, MissingResourceError
from langswap.training.recipes.base import RecipeOptions, describe_recipes, make_recipe, recipe_options
from langswap.training.sources import check_source, check_streams
from langswap.training.teacher import TeacherConfig

ATTENTION_CHOICES = ("auto", "sdpa", "eager", "flash_attention_2", "flex_attention")

# Fields that may change when a run is resumed: they do not change the weights a run ends with.
RESUMABLE_CHANGES = {"overwrite", "save_steps", "save_total_limit", "snapshot_steps", "eval_steps", "num_workers",
                     "data_dir", "keep_phase_models"}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Continued pretraining of a model folder on target-language text."""

    # options that belong to one recipe and are read from its `recipe:` mapping
    MOVED_KEYS = {name: f"recipe.{name}" for name in ("embedding_fraction", "settle_window", "settle_tolerance",
                                                      "full_lr_scale", "full_warmup_fraction")}

    model: str = field(default="", metadata={"cli": ("train", "prepare"),
        "help": "Model folder with its tokenizer, e.g. a `langswap transfer` "
                "output (required)."})
    train_text: str = field(default="", metadata={"cli": ("train", "prepare"),
        "help": "Training text (required): a .txt/.gz file (a document per line), .jsonl or .parquet (text_field), a "
                "folder or quoted glob of such files, or hf:NAME_OR_PATH?config=C&split=S&revision=R (a Hugging "
                "Face dataset)."})
    eval_text: str | None = field(default=None, metadata={"cli": ("train",),
        "help": "Held-out text for the evaluation curve (any "
                "source train_text takes)."})
    output: str = field(default="", metadata={"cli": ("train",), "help": "Output folder (required); rerun to resume."})
    overwrite: bool = field(default=False, metadata={"cli": ("train",),
        "help": "Delete an existing output folder and start again."})
    objective: str = field(default="auto", metadata={"cli": ("train", "prepare"),
        "help": "causal, masked, or auto (from the model's "
                "architecture).", "choices": ("auto", "causal", "masked")})
    preset: str = field(default="wechsel", metadata={"cli": ("train", "prepare"),
        "help": "The recipe (phases, what each trains, optimizer, "
                "schedule, data); `langswap recipes` lists them."})
    recipe: dict | RecipeOptions = field(default_factory=dict, metadata={
        "help": "Options of the recipe that preset names (recipe.<option>). " + describe_recipes()})
    steps: int = field(default=1000, metadata={"cli": ("train",), "help": "Optimizer updates over all phases."})
    learning_rate: float | None = field(default=None, metadata={"help": "Peak rate; default 5e-4 (causal) or 1e-4 "
                                                                        "(masked), as in WECHSEL; 1e-4 for the "
                                                                        "extension preset."})
    warmup_fraction: float = field(default=0.1, metadata={"help": "Share of a phase's updates spent warming up."})
    batch_size: int = field(default=8, metadata={"help": "Sequences per device per forward pass."})
    gradient_accumulation: int = field(default=1, metadata={"help": "Forward passes per update."})
    sequence_length: int = field(default=512, metadata={"help": "Tokens per packed sequence (capped at the "
                                                                "model's context)."})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (not on biases and norms)."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW beta2."})
    adam_epsilon: float = field(default=1e-6, metadata={"help": "AdamW epsilon."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm (0: no clipping)."})
    mlm_probability: float = field(default=0.15, metadata={"help": "Masked LM: share of tokens predicted."})
    precision: str = field(default="auto", metadata={"help": "auto (bf16 on GPUs that have it, else fp16 on GPUs, "
                                                             "fp32 on CPU), fp32, bf16 or fp16.",
                                                     "choices": ("auto", "fp32", "bf16", "fp16")})
    seed: int = field(default=0, metadata={"help": "Seed of data order, masking and dropout."})
    save_steps: int = field(default=100, metadata={"help": "Checkpoint every N updates (for resuming)."})
    save_total_limit: int = field(default=2, metadata={"help": "Checkpoints kept per phase."})
    eval_steps: int = field(default=100, metadata={"help": "Evaluate on eval_text every N updates."})
    eval_sequences: int = field(default=64, metadata={"help": "Packed sequences of eval_text evaluated."})
    logging_steps: int = field(default=10, metadata={"help": "Log the training loss every N updates (tiktotok: at "
                                                             "most recipe.settle_window)."})
    keep_phase_models: bool = field(default=False, metadata={
        "help": "Keep each phase's final weights in phase-NAME/final (one model's size each); by default they are "
                "dropped once the next phase, or the run's model/, no longer needs them."})
    snapshot_steps: list[int] = field(default_factory=list, metadata={"help": "Also save the model at these "
                                                                              "global steps (snapshots/step-N)."})
    text_field: str = field(default="text", metadata={"cli": ("prepare",),
        "help": "Key of the text in .jsonl files; its column in "
                ".parquet files and datasets."})
    max_lines: int | None = field(default=None, metadata={"cli": ("prepare",),
        "help": "Read at most this many training documents."})
    num_workers: int = field(default=0, metadata={"help": "Data-loader worker processes."})
    data_dir: str | None = field(default=None, metadata={"cli": ("prepare",),
        "help": "Folder of token stores (the training text tokenised once, reused by reruns, resumes and every "
                "process; `langswap prepare --list` shows them); default: token-stores/ in the langswap cache "
                "($LANGSWAP_CACHE, else $XDG_CACHE_HOME/langswap, else ~/.cache/langswap)."})
    calibration: str | None = field(default=None, metadata={
        "help": "Where the model folder is a calibrated `langswap transfer` output (it holds "
                "calibration-move.safetensors): spare-rare (take off the lowering of rows whose token calibration "
                "counted fewer than calibration_min_count times, which training on text that lacks them would keep on "
                "top of its own), keep (start from the rows as calibrated) or undo (take calibration's move off every "
                "row: the uncalibrated transfer's rows). Unset: keep for the extension recipe given "
                "recipe.source_text (every batch then shows the source-language tokens those rows mostly belong "
                "to), spare-rare otherwise.",
        "choices": ("spare-rare", "keep", "undo")})
    calibration_min_count: int = field(default=3, metadata={
        "help": "calibration: spare-rare's count: rows of tokens counted fewer times start with calibration's "
                "lowering taken off."})
    unshown_rows: str = field(default="recalibrate", metadata={
        "help": "The rows of the model's text tokens that the training text never shows (never a target, so "
                "training only lowers them): recalibrate (the default: they train like every row, and when the model "
                "is written, the run's and each snapshot, the rows of the tokens the run shows fewer than "
                "recalibrate_below times move along the mean head input onto the frequency line the other rows lie "
                "on; causal LMs), train (like every row, nothing moved) or hold (kept as the model folder has them, calibration's move "
                "included whatever `calibration` takes off the other rows). Neither moves a row under FSDP or "
                "DeepSpeed.",
        "choices": ("recalibrate", "train", "hold")})
    recalibrate_below: float = field(default=20.0, metadata={
        "help": "unshown_rows: recalibrate moves the rows of the text tokens the run shows fewer than this many times "
                "as targets (each stream's count of the token times the epochs the run reads of it): tokens the text "
                "never shows, and those it shows too rarely for training to place them."})
    start_rows: str = field(default="frequent", metadata={
        "help": "Where the model folder holds start-rows.safetensors (a `combined` transfer that kept `mix` writes "
                "there the rows the `choose` candidate makes otherwise, finished alike): frequent (the default: the "
                "rows of the tokens the run shows at least start_rows_shows times start from those rows) or "
                "transfer (every row starts as written). Not with calibration: undo.",
        "choices": ("frequent", "transfer")})
    start_rows_shows: float = field(default=150.0, metadata={
        "help": "start_rows: frequent's count: tokens the run shows at least this many times as targets (each "
                "stream's count of the token times the epochs the run reads of it)."})
    start_rows_own: str = field(default="take", metadata={
        "help": "start_rows: frequent for a token whose written row is made in part from the source model's own row "
                "of the same string (the transfer records which): take (it starts from the other candidate's row "
                "as the others do) or skip (it starts as written).", "choices": ("take", "skip")})
    teacher: TeacherConfig = field(default_factory=TeacherConfig, metadata={
        "help": "The source model as a teacher (langswap.training.teacher): the training loss adds teacher.weight "
                "times the distance between the model's hidden states and the teacher's reading the same text with "
                "its own tokenizer, at the chunk boundaries; causal LMs, one text stream; off unless teacher.weight "
                "is set."})
    # speed: what torch, transformers and accelerate provide (docs/design.md, "Training speed")
    attention: str = field(default="auto", metadata={
        "help": "Attention kernels: auto (transformers' default for the model, SDPA where it has it), sdpa, eager, "
                "flash_attention_2 (needs flash-attn) or flex_attention.", "choices": ATTENTION_CHOICES})
    compile: bool = field(default=False, metadata={"help": "torch.compile the model (faster updates on GPUs after "
                                                           "a compilation of a minute or more)."})
    fused_optimizer: str = field(default="auto", metadata={
        "help": "AdamW as one fused kernel: auto (on CUDA), on or off. A recipe with an optimizer of its own "
                "(ramen) keeps it.", "choices": ("auto", "on", "off")})
    document_mask: bool = field(default=False, metadata={
        "help": "Causal LM: a packed document attends only to itself, not to the documents packed before it in its "
                "sequence (position ids restart at each document; transformers >= 4.54, or flash_attention_2)."})
    liger_kernel: bool = field(default=False, metadata={
        "help": "Liger's Triton kernels for the model's norms, MLP and a chunked cross-entropy that never holds the "
                "whole logits (CUDA; needs the liger-kernel package)."})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "Keep only each layer's input in the forward pass and compute the rest again in the backward pass "
                "(transformers' non-reentrant checkpointing): activation memory of one layer instead of all, for "
                "about a third more compute. For large models and long sequences."})

    def __post_init__(self):
        # the recipe: mapping becomes the named recipe's options (an unknown preset or option is an error here)
        object.__setattr__(self, "recipe", recipe_options(self.preset, self.recipe))
        if self.calibration is None:
            object.__setattr__(self, "calibration", self.recipe.calibration_start())
        if isinstance(self.teacher, dict):  # TrainConfig(teacher={...}) as the YAML gives it
            object.__setattr__(self, "teacher", from_dict(TeacherConfig, self.teacher, "teacher"))

    def validate(self, training: bool = True) -> None:
        """Every option checked; `training=False` checks what preparing the run's token stores needs (no output)."""
        for name in ("model", "train_text", "output")[:3 if training else 2]:
            if not getattr(self, name):
                raise ConfigError(f"{name} is not set (--{name.replace('_', '-')} or `{name}:` in the config).")
        if not Path(self.model).is_dir():
            raise MissingResourceError(f"model folder '{self.model}' does not exist; give a folder written by "
                                       "`langswap transfer` or save_pretrained.")
        for name in ("train_text", "eval_text"):
            value = getattr(self, name)
            if value:
                check_source(value, name)
        positive = ("steps", "batch_size", "gradient_accumulation", "save_steps", "eval_steps", "eval_sequences",
                    "logging_steps", "save_total_limit")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; it must be at least 1.")
        if self.calibration not in ("keep", "undo", "spare-rare"):
            raise ConfigError(f"calibration is {self.calibration!r}; choose spare-rare, keep or undo.")
        if self.unshown_rows not in ("recalibrate", "train", "hold"):
            raise ConfigError(f"unshown_rows is {self.unshown_rows!r}; choose recalibrate, train or hold.")
        if self.start_rows not in ("frequent", "transfer"):
            raise ConfigError(f"start_rows is {self.start_rows!r}; choose frequent or transfer.")
        if self.start_rows_own not in ("take", "skip"):
            raise ConfigError(f"start_rows_own is {self.start_rows_own!r}; choose take or skip.")
        if not self.start_rows_shows > 0:
            raise ConfigError(f"start_rows_shows is {self.start_rows_shows}; give a number of showings above 0.")
        if not self.recalibrate_below > 0:
            raise ConfigError(f"recalibrate_below is {self.recalibrate_below}; give a number of showings above 0.")
        if self.calibration_min_count < 1:
            raise ConfigError(f"calibration_min_count is {self.calibration_min_count}; give a count of at least 1.")
        for name in ("warmup_fraction", "mlm_probability"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"{name} is {getattr(self, name)}; it must be between 0 and 1.")
        if not self.max_grad_norm >= 0:
            raise ConfigError(f"max_grad_norm is {self.max_grad_norm}; give a positive norm, or 0 for no clipping.")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ConfigError(f"learning_rate is {self.learning_rate}; give a positive rate or leave it unset.")
        bad = [step for step in self.snapshot_steps if not 0 <= step <= self.steps]
        if bad:
            raise ConfigError(f"snapshot_steps {bad} are outside 0..steps ({self.steps}).")
        if self.liger_kernel:
            _require_module("liger_kernel", "liger_kernel is set but the liger-kernel package is not installed; "
                            "`pip install liger-kernel` (CUDA machines), or leave liger_kernel off.")
        if self.document_mask and self.attention != "flash_attention_2":
            try:
                from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
            except ImportError:
                raise ConfigError("document_mask needs transformers 4.54 or later (which read packed documents from "
                                  "position ids), or attention: flash_attention_2; upgrade transformers or leave "
                                  "document_mask off.") from None
        if self.attention == "flash_attention_2":
            _require_module("flash_attn", "attention is flash_attention_2 but the flash-attn package is not "
                            "installed; `pip install flash-attn` (CUDA machines), or use attention: sdpa.")
        recipe = make_recipe(self)
        recipe.validate()
        check_streams(recipe.streams(), recipe.name, self.batch_size)
        if self.teacher.enabled:
            streams = recipe.streams()
            if len(streams) > 1 or any(stream.tokenizer for stream in streams):
                raise ConfigError(f"teacher.weight is set, but recipe '{recipe.name}' trains on several text streams "
                                  "or on one in another tokenizer; the teacher reads one target-language stream. Use "
                                  "a one-stream preset, or teacher.weight: 0.")
            if self.teacher.model and not Path(self.teacher.model).is_dir():
                raise MissingResourceError(f"teacher.model '{self.teacher.model}' is not a folder; give a model "
                                           "folder with its tokenizer, or leave it unset for the source model.")


def _require_module(name: str, message: str) -> None:
    """ConfigError(message) unless module `name` can be imported."""
    if importlib.util.find_spec(name) is None:
        raise ConfigError(message)
