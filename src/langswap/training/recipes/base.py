"""The recipe interface: a training regime as a registered unit with its own options.

A recipe says what `langswap train` does between reading the model and writing it back; the loop (`training/run.py`)
does the rest the same way for every recipe: packing, checkpoints, resume, snapshots, the curve, the failure record.
A recipe declares:

- its options: a frozen dataclass (`RecipeOptions` subclass), set under `recipe:` in a train config
  (`--set recipe.settle_window=20`), with defaults and help on the fields;
- its phases (`phases`): name, what each trains, length, peak rate, warm-up, schedule (a registered name,
  `phases.register_schedule`), and whether a hook may end it early; given the steps the finished phases took, so a
  phase after one that ended early can take the steps left over;
- what a phase trains (`trainable_parameters`): "embeddings" and "full" are built in; a recipe names its own sets;
- each phase's optimizer (`optimizer`): None is the Trainer's AdamW with the config's betas, eps and weight decay;
- whether a phase leaves the body frozen (`freezes_body`): then, under bf16 or fp16, the frozen weights stay in the
  model's own precision (no float32 copy) and the model folders the phase writes are in that precision;
- what a model folder holds (`saved_state`): a recipe that trains weights kept apart (adapters) merges them;
- its data (`streams`): one stream, `train_text`, by default; several are mixed within every micro-batch by their
  shares, each optionally packed by a tokenizer of its own (`data.Stream`); a model that must know which stream
  each sequence came from (one body, an embedding table per language) sets `model_reads_stream_ids` and gets a
  `stream_ids` tensor with every batch;
- hooks the loop calls: `on_phase_start` (the loaded model, before the phase's Trainer is built), `on_log` and
  `on_step_end` (the Trainer's state and control), and `stop_reason`, which ends a `stops_early` phase. A stop
  must come from `stop_reason`, a pure function of the logged history: the loop asks it again of a checkpoint when
  it resumes, so a run stopped right after the checkpoint where the phase ended does not train on.

Adding a recipe is one file in this package (or any module imported before `train` runs, such as a file given to
`langswap --plugin`) with one `@register_recipe("name", options=...)` class; `preset: name` selects it. The registry (`RECIPES`, a
`langswap.registry.Registry`) imports every module of this package on the first lookup.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from langswap.config import from_dict
from langswap.errors import ConfigError
from langswap.registry import Registry
from langswap.training.data import Stream
from langswap.training.phases import PEAK_LEARNING_RATE, Phase, embedding_parameters, warmup_for
from langswap.training.sources import check_source


class RunConfig(Protocol):
    """What a recipe reads of a run's config: `training.options.TrainConfig`, which imports this module (so this
    module names the fields it reads instead of importing it)."""

    model: str
    train_text: str
    text_field: str
    preset: str
    recipe: Any  # the preset's RecipeOptions
    steps: int
    learning_rate: float | None
    warmup_fraction: float
    adam_beta1: float
    adam_beta2: float
    adam_epsilon: float
    logging_steps: int
    seed: int


def check_source_stream(options) -> None:
    """A recipe's second stream of source-language text: `recipe.source_text` there to read (`sources.check_source`)
    and `recipe.source_share` a share of every micro-batch strictly between 0 and 1."""
    check_source(options.source_text, "recipe.source_text")
    if not 0 < options.source_share < 1:
        raise ConfigError(f"recipe.source_share is {options.source_share}; give a share between 0 and 1.")


@dataclass(frozen=True, kw_only=True)
class RecipeOptions:
    """Options of a recipe (none shared yet); a recipe's own options subclass this."""

    def calibration_start(self) -> str:
        """`train.calibration` where it is left unset: spare-rare, unless the recipe's options say otherwise."""
        return "spare-rare"


@dataclass(frozen=True, kw_only=True)
class SourceMixOptions(RecipeOptions):
    """A recipe that may mix source-language text into every micro-batch (`source_streams`)."""

    source_text: str | None = dataclasses.field(default=None, metadata={
        "help": "Source-language text (e.g. English, for an English model) mixed into every micro-batch, read by the "
                "model's tokenizer; it holds the rows to the source language where it is read, so that language "
                "keeps more of what it had (in an extension it trains the new tokens down there). Unset: target text "
                "only."})
    source_share: float = dataclasses.field(default=0.25, metadata={
        "help": "Share of every micro-batch that is source_text (when it is set)."})


def source_streams(config, options: SourceMixOptions) -> list[Stream]:
    """The run's streams: `train_text` alone, or with `options.source_text` at `options.source_share` of every
    micro-batch."""
    if not options.source_text:
        return [Stream("train", config.train_text)]
    return [Stream("train", config.train_text, 1 - options.source_share),
            Stream("source", options.source_text, options.source_share)]


class Recipe:
    """A training regime. Subclass it, override what differs, and register it with `register_recipe`.

    An instance serves one run: `self.config` is the whole `TrainConfig`, `self.options` its `recipe:` options.
    Every method may be called in every process of a multi-process run, and again when the run resumes, so each
    must give the same answer for the same inputs."""

    name: str = ""  # set by register_recipe
    options_class: type = RecipeOptions
    description: str = ""
    model_reads_stream_ids: bool = False  # hand the model each sequence's stream index (`stream_ids`)

    def __init__(self, config: RunConfig):
        self.config, self.options = config, config.recipe

    # -- what to train ------------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Check the options against the config before anything is read; raise ConfigError naming the fix."""

    def phases(self, objective: str, done: list[int] = ()) -> list[Phase]:
        """The run's phases for `objective` ("causal" or "masked"), given how many updates each of the first
        len(done) phases took. The number of phases may not depend on `done`."""
        raise NotImplementedError

    def streams(self) -> list[Stream]:
        """The texts the run trains on and their shares of every micro-batch; `train_text` alone by default."""
        return [Stream("train", self.config.train_text)]

    def trainable_parameters(self, phase: Phase, model) -> list:
        """The parameters `phase` trains; every other parameter of `model` is frozen."""
        if phase.trainable == "embeddings":
            return embedding_parameters(model)
        if phase.trainable == "full":
            return list(model.parameters())
        raise ConfigError(f"phase {phase.name} of recipe '{self.name}' trains '{phase.trainable}': a phase trains "
                          "'embeddings' or 'full', or a set the recipe's trainable_parameters names.")

    def freezes_body(self, phase: Phase) -> bool:
        """Whether `phase` trains nothing of the body (position embeddings, norms and layers stay frozen)."""
        return phase.trainable == "embeddings"

    def recalibrated_rows(self) -> tuple[int, int] | None:
        """The ids (first, after the last) among which `unshown_rows: recalibrate` may move rows (an empty span: none);
        None: every row."""
        return None

    def saved_state(self, phase: Phase, state_dict: dict) -> dict:
        """The state dict a model folder written during `phase` holds (a phase's `final/`, a snapshot), given the
        model's; checkpoints for resuming hold the model's own. Unchanged by default."""
        return state_dict

    def optimizer(self, phase: Phase, parameter_groups: list[dict]):
        """The optimizer of `phase`, or None for the Trainer's AdamW (betas adam_beta1/adam_beta2, eps adam_epsilon,
        weight decay on matrices only). `parameter_groups` are the Trainer's: the trainable parameters with weight
        decay, then those without (biases and norms), each group with its "weight_decay". The scheduler multiplies
        each group's rate by the phase's schedule, so give every group lr=phase.learning_rate."""
        return None

    # -- hooks --------------------------------------------------------------------------------------------------

    def prepare_model(self, phase: Phase, model, start) -> None:
        """Called with each phase's freshly loaded model and the folder it was loaded from (the run's model, or the
        previous phase's end), before the trainable set is applied and before a checkpoint's weights are restored:
        a recipe whose model has parts the folder's config does not describe (RAMEN's source tables) adds them."""

    def finish_outputs(self, output) -> None:
        """Called once the run's `model/` folder is written (main process only): a recipe that ends with more than
        one model writes the others beside it."""

    def on_phase_start(self, phase: Phase, model) -> None:
        """Called with the phase's model, its trainable parameters set, before the phase's Trainer is built (also
        when the phase resumes). A hook that changes the model sets requires_grad on what it adds."""

    def on_log(self, phase: Phase, state, control) -> None:
        """Called whenever the Trainer logs (training loss, evaluation), with its `TrainerState` and
        `TrainerControl`. To end the phase, use `stop_reason`, which a resumed run can ask again."""

    def on_step_end(self, phase: Phase, state, control) -> None:
        """Called after every update of the phase."""

    def stop_reason(self, phase: Phase, log_history: list[dict], step: int) -> str | None:
        """For a `stops_early` phase: why it ends at `step` (a short text for the log), or None to go on. Asked at
        every log, and of the last checkpoint when the phase resumes; a pure function of the arguments."""
        return None

    # -- helpers for recipes ------------------------------------------------------------------------------------

    def peak(self, objective: str) -> float:
        """The peak rate: `learning_rate`, or the papers' rate for the objective."""
        return self.config.learning_rate or PEAK_LEARNING_RATE[objective]

    def warmup(self, steps: int, fraction: float | None = None) -> int:
        """Warm-up updates of a phase of `steps` updates: `warmup_fraction` of them unless `fraction` is given."""
        return warmup_for(steps, self.config.warmup_fraction if fraction is None else fraction)


RECIPES = Registry("recipe", "langswap.training.recipes")


def register_recipe(name: str, options: type = RecipeOptions):
    """Class decorator: register a `Recipe` subclass under `name` (the config's `preset:`), with its options
    dataclass (a `RecipeOptions` subclass)."""

    def decorator(cls):
        if not (isinstance(cls, type) and issubclass(cls, Recipe)):
            raise TypeError(f"recipe {name!r} must be a Recipe subclass")
        if not (dataclasses.is_dataclass(options) and issubclass(options, RecipeOptions)):
            raise TypeError(f"the options of recipe {name!r} must be a RecipeOptions dataclass")
        RECIPES.add(name, cls)
        doc = (cls.__doc__ or "").strip().splitlines()
        cls.name, cls.options_class, cls.description = name, options, doc[0] if doc else ""
        return cls

    return decorator


def recipe_names() -> list[str]:
    return RECIPES.names()


def get_recipe(name: str) -> type[Recipe]:
    RECIPES.load()
    if name not in RECIPES:
        raise ConfigError(f"preset is '{name}'; choose one of: {', '.join(sorted(RECIPES))}.")
    return RECIPES[name]


def recipe_options(name: str, value: Any) -> RecipeOptions:
    """The options of recipe `name` from a `recipe:` mapping (unknown keys are errors), or checked as given."""
    cls = get_recipe(name).options_class
    if isinstance(value, cls):
        return value
    if isinstance(value, RecipeOptions):
        raise ConfigError(f"recipe options {type(value).__name__} are not the options of recipe '{name}' "
                          f"({cls.__name__}).")
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"'recipe' must be a mapping of the options of recipe '{name}', not {value!r}.")
    if value and not [field for field in dataclasses.fields(cls) if field.init]:
        raise ConfigError(f"recipe '{name}' has no options; remove recipe: ({', '.join(value)}).")
    return from_dict(cls, value, where="recipe.")


def make_recipe(config: RunConfig) -> Recipe:
    return get_recipe(config.preset)(config)


def plan_phases(config: RunConfig, objective: str, done: list[int] = ()) -> list[Phase]:
    """The phases `config` trains for `objective`, given how many updates each of the first len(done) took."""
    return make_recipe(config).phases(objective, list(done))


def describe_recipes() -> str:
    """The options of every recipe that has some, with defaults and help: 'name: option (default): help ... | ...'."""
    lines = []
    for name in recipe_names():
        fields = [field for field in dataclasses.fields(RECIPES[name].options_class) if field.init]
        if fields:
            lines.append(f"{name}: " + " ".join(f"{field.name} ({_default(field)!r}): {field.metadata.get('help', '')}"
                                                for field in fields))
    return " | ".join(lines)


def _default(field: dataclasses.Field) -> Any:
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return field.default
