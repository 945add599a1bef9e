"""`langswap bench`: compare methods the way the papers do, at step 0 and after short training.

A YAML file names the source model, the target data, the methods (each with its options, optionally a grid of
options to sweep) and the steps at which to measure. For each method variant the bench transfers the model, trains
it (by default embeddings only: `train.preset: embeddings`) up to the largest step, keeping a snapshot at every
listed step, and measures each snapshot on held-out text (bits per byte for causal LMs, pseudo-perplexity for masked
LMs) and, when `probe` names two .conllu files, with a part-of-speech probe. It writes:

    results.jsonl        one line per (variant, step): every metric; the record a resumed bench reads
    table.md             a markdown table: a row per variant, a column per metric and step
    <metric>.png         the metric against steps, one line per variant
    resources/<kind>/, tokenizer/   shared by all variants (e.g. the vectors aligned once; trained once)
    runs/<variant>/      transfer/ (the step-0 model), variant.json, and train-<N>steps-<key>/ (langswap train's
                         folder for a schedule of N steps with those train options)

Rerunning the same command resumes: finished measurements are read back, an unfinished training resumes from its
last checkpoint. A variant whose options changed under the same label is an error. Each measurement records what it
depends on (the held-out text and lines, the probe and, after step 0, the training options and schedule length), and
is reused only while those are unchanged: a new `steps` list or `train:` option trains in a new folder beside the
old one (step 50 of a 200-step schedule is not step 50 of a 50-step one), a new `eval_lines` measures again.

A grid sweeps options: `grid: {neighbors: [1, 10], temperature: [0.1, 1]}` is the product (4 variants); a list of
mappings is their union, each mapping itself a product, e.g. WECHSEL's Table 7:
`grid: [{neighbors: 1, temperature: 1}, {neighbors: 10, temperature: [0.1, 1]}, {neighbors: 50, temperature: [0.1, 1]}]`
with `subword_source: ...` added to each to sweep subword vectors too.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from langswap.config import dump_yaml, from_dict, merge_dicts, to_dict
from langswap.errors import ConfigError, MissingResourceError, NumericalError
from langswap.evaluation.language_modeling import evaluate_model
from langswap.evaluation.probes import ProbeConfig, pos_probe
from langswap.files import atomic_directory, atomic_write_text
from langswap.locking import OutputLock
from langswap.methods.base import get_method, make_config
from langswap.models import load_model, load_tokenizer, method_device, objective_of, pick_device, save_tokenizer
from langswap.plots import line_plot
from langswap.records import (BENCH_SHARED_INPUTS, BenchResult, BenchVariant, append_bench_result, has_model_record,
                              read_bench_results, read_bench_variant, read_model_record, write_bench_variant)
from langswap.reports import PhaseReport
from langswap.resources.kinds import get_resource
from langswap.resources.text import read_text_lines
from langswap.resources.tokenizer import train_tokenizer
from langswap.start_rows import START_FILE
from langswap.training.run import TrainConfig, comparable_config, train
from langswap.transfer import ModelPairConfig, TransferConfig, transfer
from langswap.transfer.calibrate import CalibrationConfig
from langswap.transfer.distill import DistillConfig

logger = logging.getLogger(__name__)

# the label of the untouched source model's row (`reference: true`)
REFERENCE = "source model, own tokenizer (reference)"
# TrainConfig keys the bench sets itself, per variant
RESERVED_TRAIN_KEYS = {"model", "train_text", "eval_text", "output", "steps", "snapshot_steps", "overwrite"}


def _default_methods() -> list:
    return [{"name": "random"}, {"name": "overlap"}, {"name": "wechsel"}]


@dataclass(kw_only=True)
class BenchConfig(ModelPairConfig):
    """Methods x steps on one source model and one target language."""

    train_text: str | None = field(default=None, metadata={"help": "Target text to train on (needed for steps > "
                                                                    "0)."})
    eval_text: str = field(default="", metadata={"help": "Held-out target text (required)."})
    eval_lines: int = field(default=300, metadata={"help": "Lines of eval_text scored."})
    source_text: str | None = field(default=None, metadata={
        "help": "Source-language text (e.g. English) also scored at every step, its first eval_lines lines read "
                "with each model's own tokenizer (source bits per byte): what the source language keeps."})
    output: str = field(default="", metadata={"cli": ("bench",), "help": "Output folder (required); rerun to resume."})
    steps: list[int] = field(default_factory=lambda: [0, 50, 200], metadata={"help": "Training steps at which "
                                                                                      "every variant is measured."})
    methods: list[dict] = field(default_factory=_default_methods, metadata={
        "help": "Methods to compare: each {name: ..., options..., label: optional, grid: optional, calibration: "
                "optional (frequency calibration options; on by default for causal LMs, {strength: 0} turns it "
                "off), distill: optional (token distillation options, e.g. {tokens: 20000}; off by default), train: "
                "optional (train options of this entry's runs over the bench's `train:`, e.g. {teacher: {weight: 1}})}."})
    train: dict = field(default_factory=lambda: {"preset": "embeddings"}, metadata={
        "help": "langswap train options for every variant (`langswap init-config --for train` lists them); "
                "preset is embeddings unless set here."})
    probe: dict | None = field(default=None, metadata={
        "help": "POS probe at every step: {train: dev.conllu, test: test.conllu, options of the probe}."})
    reference: bool = field(default=True, metadata={
        "help": "Also measure the untouched source model with its own tokenizer on the same text (and probe): a "
                "reference row in the table and a dashed line in the plots."})
    equal_time: bool = field(default=True, metadata={
        "help": "For each entry trained with a teacher, or transferred with token distillation, beside the same "
                "entry without it: also train the one without it for as many updates as fit in the other's time "
                "(their measured seconds per update, and the distillation's seconds from its transfer's record) and "
                "report it in the last step's column, labelled with its updates: the comparison at equal wall time "
                "beside the one at equal steps."})
    method_device: str = field(default="cpu", metadata={
        "help": "Where each transfer's method searches (the transfer's method_device: cpu, cuda, cuda:N or auto); "
                "not part of what a measurement is keyed by."})

    def validate(self) -> None:
        self.validate_pair()
        method_device(self.method_device)
        for name in ("eval_text", "output"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is not set (`{name}:` in the bench YAML).")
        for name in ("eval_text", "train_text", "source_text"):
            value = getattr(self, name)
            if value and not Path(value).is_file():
                raise MissingResourceError(f"{name} '{value}' does not exist.")
        if not self.steps or any(step < 0 for step in self.steps):
            raise ConfigError(f"steps is {self.steps}; give a list of steps >= 0, e.g. [0, 50, 200].")
        if max(self.steps) > 0 and not self.train_text:
            raise ConfigError(f"steps {self.steps} include training, so train_text must be set.")
        if not self.methods:
            raise ConfigError("methods is empty; name at least one (`langswap methods` lists them).")


@dataclass
class Variant:
    label: str
    method: dict  # {"name": ..., options}
    calibration: dict = field(default_factory=dict)  # the transfer's calibration: section, where the entry sets one
    distill: dict = field(default_factory=dict)  # the transfer's distill: section, where the entry sets one
    train: dict = field(default_factory=dict)  # train options over the bench's `train:`, where the entry sets some


def _expand_grid(grid, where: str) -> list[dict]:
    if grid is None:
        return [{}]
    entries = grid if isinstance(grid, list) else [grid]
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}.grid must be a mapping of option -> list of values, or a list of such "
                              f"mappings; got {entry!r}.")
        keys = list(entry)
        values = [value if isinstance(value, list) else [value] for value in entry.values()]
        out.extend(dict(zip(keys, combination)) for combination in itertools.product(*values))
    return out


def _format_value(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def expand_variants(methods: list) -> list[Variant]:
    """Method entries -> variants with unique labels; every name and option is checked against the registry."""
    variants: list[Variant] = []
    for index, entry in enumerate(methods):
        where = f"methods[{index}]"
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or "name" not in entry:
            raise ConfigError(f"{where} must be a method name or a mapping with 'name' (and options); got {entry!r}.")
        entry = dict(entry)
        label, grid = entry.pop("label", None), entry.pop("grid", None)
        calibration = entry.pop("calibration", None) or {}
        if not isinstance(calibration, dict):
            raise ConfigError(f"{where}.calibration must be a mapping of calibration options (e.g. strength: 0.5).")
        from_dict(CalibrationConfig, calibration, where=f"{where}.calibration.")  # unknown or bad options: an error
        distill = entry.pop("distill", None) or {}
        if not isinstance(distill, dict):
            raise ConfigError(f"{where}.distill must be a mapping of distillation options (e.g. tokens: 20000).")
        from_dict(DistillConfig, distill, where=f"{where}.distill.")
        train = entry.pop("train", None) or {}
        if not isinstance(train, dict):
            raise ConfigError(f"{where}.train must be a mapping of train options (e.g. teacher: {{weight: 1}}).")
        for point in _expand_grid(grid, where):
            method = {**entry, **point}
            TransferConfig.resolve_method(method, f"{where}.")  # unknown method or option: an error listing them
            name = label or method["name"]
            if point:
                name += " " + ",".join(f"{key}={_format_value(value)}" for key, value in point.items())
            variants.append(Variant(name, method, dict(calibration), dict(distill), dict(train)))
    labels = [variant.label for variant in variants]
    if REFERENCE in labels:
        raise ConfigError(f"the label '{REFERENCE}' is the reference row's; give that method another `label:`.")
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ConfigError(f"two method entries have the same label {duplicates}; give each a distinct `label:`.")
    return variants


def _folder_name(label: str) -> str:
    return "".join(char if char.isalnum() or char in "-_.=," else "_" for char in label)


def _train_config(config: BenchConfig, run: Path, entry: dict | None = None, updates: int | None = None,
                  calibration: dict | None = None):
    """The langswap train config of one variant (`entry`: its own train options, over the bench's; `calibration`:
    its calibration options), in a folder named by its schedule length and options: to the last listed step with a
    snapshot at each, or, given `updates`, a run of that many updates without snapshots."""
    overlap = RESERVED_TRAIN_KEYS & (set(config.train) | set(entry or {}))
    if overlap:
        raise ConfigError(f"train.{sorted(overlap)[0]} is set by the bench itself; remove it from `train:` (steps "
                          "come from the top-level `steps`).")
    final = updates or max(config.steps)
    # a `train:` mapping without a preset keeps the bench's embeddings-only default (it used to fall back to
    # langswap train's own default, the full-model wechsel recipe)
    options = {"save_steps": max(1, min(50, final)), "preset": "embeddings", **merge_dicts(config.train, entry or {}),
               "model": str(run / "transfer"),
               "train_text": config.train_text, "output": "", "steps": final,
               "snapshot_steps": [] if updates else sorted(step for step in set(config.steps) if 0 < step < final)}
    train_config = from_dict(TrainConfig, options, where="train.")
    transfer_folder = run / "transfer"
    starts = not has_model_record(transfer_folder) or (transfer_folder / START_FILE).is_file()
    key = _train_key(comparable_config(train_config), calibration, starts)
    return dataclasses.replace(train_config, output=str(run / f"train-{final}steps-{_digest(key)}")), key


def _train_key(comparable: dict, calibration: dict | None = None, starts: bool = True) -> dict:
    """What a trained measurement depends on besides the variant: the train options minus this variant's paths, and
    minus options that are off (a teacher of weight 0, a `calibration` start that takes nothing off the variant's
    transfer, `start_rows` where the transfer wrote none: `starts` False, `start_rows_own: take`, the `embeddings`
    recipe's source-language mix without a source text), so that measurements made before such an option existed
    are still those of runs without it."""
    keeps = _takes_nothing_off(comparable, calibration or {})
    key = {key: value for key, value in comparable.items()
           if key not in ("model", "output") and not (key == "teacher" and not _teaches(value))
           and not (keeps and key in ("calibration", "calibration_min_count"))
           and not (not starts and key in ("start_rows", "start_rows_shows", "start_rows_own"))
           and not (key == "start_rows_own" and value == "take")}
    recipe = key.get("recipe")
    if comparable.get("preset") == "embeddings" and isinstance(recipe, dict) and not recipe.get("source_text"):
        key["recipe"] = {}  # the options embeddings had before its source-language mix: none
    return key


def _takes_nothing_off(comparable: dict, calibration: dict) -> bool:
    """Whether train's `calibration` option leaves the variant's transfer as it is: `keep`; an uncalibrated variant;
    `spare-rare` where the transfer's `lower_min_count` spared those rows already."""
    start = comparable.get("calibration", "keep")
    if start == "keep" or calibration.get("strength") == 0:
        return True
    spared = calibration.get("lower_min_count", CalibrationConfig().lower_min_count)
    return start == "spare-rare" and spared >= comparable.get("calibration_min_count", 1)


def _teaches(teacher: dict | None) -> bool:
    """Whether train options' `teacher:` mapping turns the teacher on (a weight or a likelihood weight above 0)."""
    return bool((teacher or {}).get("weight") or (teacher or {}).get("likelihood_weight"))


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:8]


def _resolved_method(method: dict) -> dict:
    """A variant's method entry with every option as it resolves, defaults included, so a measurement is not reused
    after a default changes."""
    options = {key: value for key, value in method.items() if key != "name"}
    return {"name": method["name"], **to_dict(make_config(method["name"], **options))}


def _probe_config(config: BenchConfig):
    if config.probe is None:
        return None

    options = dict(config.probe)
    paths = {key: options.pop(key, None) for key in ("train", "test")}
    for key, value in paths.items():
        if not value:
            raise ConfigError(f"probe.{key} is not set: give a .conllu file (train on one split, test on another).")
        if not Path(value).is_file():
            raise MissingResourceError(f"probe.{key} '{value}' does not exist.")
    return paths, from_dict(ProbeConfig, options, where="probe.")


def _variant_kinds(config: BenchConfig, variant: Variant) -> tuple[str, ...]:
    """The resource kinds a variant's method reads with its options (a weight of 0 leaves a kind unread)."""
    options = dict(variant.method)
    return get_method(options["name"]).kinds(config, make_config(options.pop("name"), **options))


def _prepare_shared(config: BenchConfig, variants: list[Variant], output: Path, progress: bool) -> dict:
    """Build each resource the variants need once (e.g. align the vectors) and train the target tokenizer once for
    all variants; returns transfer config keys."""
    shared: dict = {"resources": to_dict(config.resources), "align": to_dict(config.align)}
    needed = sorted({name for variant in variants for name in _variant_kinds(config, variant)})
    for name in needed:
        kind = get_resource(name)
        if kind.prepare_shared is None:
            continue
        kind.check(config)
        folder = output / "resources" / name
        inputs = kind.depends_on(config)
        keys = _shared_keys(folder, inputs)
        if keys is None:
            with atomic_directory(folder, overwrite=True) as temporary:
                keys = kind.prepare_shared(config, temporary)
                _record_inputs(temporary, {"inputs": inputs, "keys": keys})
        shared["resources"].update({key: str(folder / file) for key, file in keys.items()})
    if config.target_text and any(get_resource(name).uses_target_tokenizer for name in needed):
        shared["target_text"] = config.target_text  # what such a kind trains on by default (e.g. token_text)
    if config.target_tokenizer:
        shared["target_tokenizer"] = config.target_tokenizer
    else:
        folder = output / "tokenizer"
        inputs = {"source_tokenizer": config.source_tokenizer or config.source_model, "target_text": config.target_text,
                  "vocab_size": config.vocab_size}
        if not _built_from(folder, "tokenizer.json", inputs):
            source = load_tokenizer(config.source_tokenizer or config.source_model, "source tokenizer")
            with atomic_directory(folder, overwrite=True) as temporary:
                save_tokenizer(train_tokenizer(source, config.target_text, config.vocab_size, progress=progress),
                               temporary)
                _record_inputs(temporary, inputs)
        shared["target_tokenizer"] = str(folder)
    return shared


def _shared_for(shared: dict, requires: tuple[str, ...]) -> dict:
    """The shared transfer keys a method's measurements depend on: resources only of the kinds it reads."""
    out = {key: value for key, value in shared.items() if key not in ("resources", "align")}
    if requires:
        keys = {key for name in requires for key in get_resource(name).keys() + list(get_resource(name).reads)}
        out["resources"] = {key: value for key, value in shared["resources"].items() if key in keys}
        out["align"] = shared["align"]
    return out


def _shared_keys(folder: Path, inputs: dict) -> dict | None:
    """The resource keys a shared resource folder gives, when it was built from `inputs` and holds its files."""
    record = folder / BENCH_SHARED_INPUTS
    if not record.is_file():
        return None
    built = json.loads(record.read_text(encoding="utf-8"))
    if built.get("inputs") != inputs or not all((folder / file).is_file() for file in built.get("keys", {}).values()):
        logger.info("%s was made from other inputs; making it again", folder)
        return None
    return built["keys"]


def _built_from(folder: Path, product: str, inputs: dict) -> bool:
    """Whether `folder` holds `product`, made from `inputs` (a folder made from other inputs is made again)."""
    record = folder / BENCH_SHARED_INPUTS
    if not (folder / product).is_file() or not record.is_file():
        return False
    if json.loads(record.read_text(encoding="utf-8")) == inputs:
        return True
    logger.info("%s was made from other inputs; making it again", folder)
    return False


def _record_inputs(folder: Path, inputs: dict) -> None:
    (folder / BENCH_SHARED_INPUTS).write_text(json.dumps(inputs, indent=2, ensure_ascii=False), encoding="utf-8")


def _resolved_calibration(calibration: dict, extension: bool = False) -> dict:
    """Every calibration option as it resolves; the separation's options only where it runs (calibration.source_text
    set) and the expected-count fit's only where it runs (`count_fit: auto` runs it into an extension only), so a
    variant without them keeps the measurements it had."""
    resolved = to_dict(from_dict(CalibrationConfig, calibration, where="calibration."))
    if not resolved.get("source_text"):
        resolved.pop("source_text", None)
        resolved.pop("separation", None)
    if resolved.get("count_fit") == "auto" and not extension:
        for key in ("count_fit", "count_fit_lines", "count_fit_smoothing", "count_fit_rounds"):
            resolved.pop(key, None)
    return resolved


@functools.lru_cache(maxsize=8)
def _extends(source: str, target: str) -> bool:
    from langswap.resources.extension import first_differing_id

    source_tokenizer, target_tokenizer = load_tokenizer(source), load_tokenizer(target)
    return len(target_tokenizer) > len(source_tokenizer) and first_differing_id(source_tokenizer,
                                                                                 target_tokenizer) is None


def _extends_source(config: BenchConfig) -> bool:
    """Whether the bench's target tokenizer extends the source's (so the transfer is an extension)."""
    if not config.target_tokenizer:
        return False  # the bench trains a replacement tokenizer on the target text
    return _extends(config.source_tokenizer or config.source_model, config.target_tokenizer)


def _result_key(label: str, step: int, setting: dict) -> tuple[str, int, str]:
    return label, step, json.dumps(setting, sort_keys=True)


def _read_results(output: Path) -> dict[tuple[str, int, str], dict]:
    """Measurements of earlier runs, keyed by variant, step and what they were measured with."""
    rows = (result.as_dict() for result in read_bench_results(output))
    return {_result_key(row["variant"], row["step"], row.get("setting", {})): row for row in rows}


def _append_result(output: Path, row: dict) -> None:
    append_bench_result(output, BenchResult.from_dict(row))


def _measure(folder: Path | str, lines: list[str], probe, progress: bool, tokenizer_folder=None,
             source_lines: list[str] | None = None) -> dict:
    tokenizer = load_tokenizer(tokenizer_folder or folder)
    model = load_model(folder).to(pick_device())  # the GPU where there is one
    try:
        score = evaluate_model(model, tokenizer, lines, objective_of(model.config), progress=progress)
    except NumericalError as error:
        raise NumericalError(f"bench measurement of '{folder}': {error} The measurements before it are kept in "
                             "results.jsonl; a rerun measures this one again.") from error
    # per-token figures do not compare across tokenizers; per-byte ones do (for a masked LM, from the pseudo-
    # log-likelihood: not a code length, but the same sum pseudo-perplexity is made of, over bytes)
    per_byte = "bits_per_byte" if score.kind == "perplexity" else "pseudo_bits_per_byte"
    metrics = {per_byte: score.bits_per_byte, score.kind.replace("-", "_"): score.perplexity,
               "tokens_per_byte": score.tokens_per_byte}
    if source_lines:
        source = evaluate_model(model, tokenizer, source_lines, objective_of(model.config), progress=progress)
        metrics["source_" + per_byte] = source.bits_per_byte
    if probe is not None:
        paths, probe_config = probe
        result = pos_probe(model, paths["train"], paths["test"], probe_config, tokenizer=tokenizer)
        metrics["pos_accuracy"] = result.accuracy
    return {key: round(value, 5) for key, value in metrics.items()}


@dataclass
class BenchReport:
    output: Path
    rows: list[dict]  # every measurement, as results.jsonl holds it

    def summary(self) -> str:
        """The table, and what was written."""
        table = (self.output / "table.md").read_text(encoding="utf-8")
        return f"{table}wrote {self.output}: table.md, results.jsonl and a plot per metric"


def run_bench(config: BenchConfig, progress: bool = False) -> BenchReport:
    """Run every variant at every step (resuming), then write table.md and the plots; returns the results. One
    process at a time writes a bench folder (`langswap.locking`): a second bench of the same folder, which would run
    the same variants into the same run folders, gets `OutputLockedError`."""
    with OutputLock(config.output, "bench output folder"):
        return _run_bench(config, progress)


@dataclass
class _Measuring:
    """What every measurement of one bench reads: the evaluation lines (and source-language lines), the probe, and
    the `measured_with` part of each result's setting."""

    lines: list[str]
    source_lines: list[str] | None
    probe: object
    measured_with: dict
    progress: bool

    def measure(self, folder, tokenizer_folder=None) -> dict:
        return _measure(folder, self.lines, self.probe, self.progress, tokenizer_folder, self.source_lines)


def _run_bench(config: BenchConfig, progress: bool) -> BenchReport:
    config.validate()
    variants = expand_variants(config.methods)
    probe = _probe_config(config)
    output = Path(config.output)
    if max(config.steps) > 0:  # check the train options before anything slow starts
        for variant in variants:
            _train_config(config, output, variant.train, calibration=variant.calibration)
    output.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output / "bench.yaml", dump_yaml(to_dict(config)))
    measuring = _measuring(config, probe, progress)
    results = _read_results(output)
    shared = _prepare_shared(config, variants, output, progress)
    steps = sorted(set(config.steps))
    rows, digests = [], {}
    if config.reference:
        rows.append(_reference_row(config, output, results, measuring))
    for variant in variants:
        digests[variant.label], variant_rows = _run_variant(config, variant, output, shared, steps, results,
                                                            measuring, progress)
        rows.extend(variant_rows)
    labels = [REFERENCE] * config.reference + [v.label for v in variants]
    extra = _equal_time_rows(config, output, variants, steps, rows, results, digests, measuring, progress)
    rows.extend(extra)
    write_report(output, rows, labels + [row["variant"] for row in extra], steps, plotted=labels)
    return BenchReport(output, rows)


def _measuring(config: BenchConfig, probe, progress: bool) -> _Measuring:
    lines = read_text_lines(config.eval_text, "evaluation text", max_lines=config.eval_lines)
    source_lines = (read_text_lines(config.source_text, "source-language text", max_lines=config.eval_lines)
                    if config.source_text else None)
    measured_with = {"eval_text": config.eval_text, "eval_lines": config.eval_lines, "probe": config.probe,
                     **({"source_text": config.source_text} if config.source_text else {})}
    return _Measuring(lines, source_lines, probe, measured_with, progress)


def _reference_row(config: BenchConfig, output: Path, results: dict, measuring: _Measuring) -> dict:
    """The source model with its own tokenizer, measured once."""
    setting = {"measured_with": measuring.measured_with, "model": config.source_model,
               "tokenizer": config.source_tokenizer}
    key = _result_key(REFERENCE, 0, setting)
    if key not in results:
        logger.info("reference: the source model with its own tokenizer")
        metrics = measuring.measure(config.source_model, config.source_tokenizer)
        results[key] = {"variant": REFERENCE, "method": "reference", "step": 0, **metrics, "setting": setting}
        _append_result(output, results[key])
    return results[key]


def _variant_record(config: BenchConfig, variant: Variant, shared: dict) -> tuple[BenchVariant, dict]:
    """The variant's record (everything its transfer depends on) and its calibration options."""
    pair = {key: getattr(config, key) for key in ("source_model", "source_tokenizer", "target_tokenizer",
                                                  "target_text", "vocab_size")}
    # a measurement is reused only for the same record (the digest in its setting); of the resources, only the keys
    # of the kinds the method reads, so another method's resource (or a kind added to langswap) leaves it alone
    record = BenchVariant(label=variant.label, method=variant.method, pair=pair,
                          shared=_shared_for(shared, _variant_kinds(config, variant)))
    # frequency calibration as a transfer does it (langswap.transfer.calibrate: on by default for causal LMs), on the
    # bench's target text unless the entry names a text; `calibration: {strength: 0}` turns it off
    text = variant.calibration.get("text") or config.train_text or config.target_text or config.resources.token_text
    calibration = {**variant.calibration, "text": text}
    # an uncalibrated variant's record is as it always was
    if variant.calibration.get("strength") != 0 or variant.calibration.get("source_text"):
        record.calibration = calibration
    record.resolved = {"method": _resolved_method(variant.method),
                       "calibration": _resolved_calibration(calibration, _extends_source(config))
                       if record.calibration is not None else None}
    distill = resolved_distill(variant)
    if distill.tokens:  # a variant without distillation (none asked for, or tokens 0) keeps the record it had
        record.distill = dict(variant.distill)
        record.resolved["distill"] = to_dict(distill)
    return record, calibration


def _check_run_folder(run: Path, record: BenchVariant, variant: Variant, output: Path) -> None:
    """Refuse a variant folder run with other inputs; clear one whose options now resolve otherwise."""
    before = read_bench_variant(run)
    if before is not None and before.inputs() != record.inputs():
        now, then = record.inputs(), before.inputs()
        changed = [f"{key}: was {then.get(key)!r}, now {now.get(key)!r}" for key in sorted(set(now) | set(then))
                   if then.get(key) != now.get(key)]
        raise ConfigError(f"variant '{variant.label}' in '{output}' was run with other inputs ("
                          + "; ".join(changed) + "); give it another label, another output folder, or "
                          f"delete '{run}'.")
    if before is not None and before.resolved != record.resolved:
        # the same inputs under other defaults (a langswap whose defaults changed): measured again from scratch
        logger.info("variant %s: its options resolve otherwise than when it ran; transferring and training it "
                    "again", variant.label)
        for product in [run / "transfer", *run.glob("train-*")]:
            shutil.rmtree(product, ignore_errors=True)


def _run_variant(config: BenchConfig, variant: Variant, output: Path, shared: dict, steps: list[int], results: dict,
                 measuring: _Measuring, progress: bool) -> tuple[str, list[dict]]:
    """(the variant's digest, its rows at every step): transferred, trained and measured where no result is kept."""
    run = output / "runs" / _folder_name(variant.label)
    train_config, train_key = (_train_config(config, run, variant.train, calibration=variant.calibration)
                               if steps[-1] > 0 else (None, None))
    record, calibration = _variant_record(config, variant, shared)
    digest = _digest(record.digest_inputs())
    settings = {step: {"measured_with": measuring.measured_with, "variant": digest,
                       **({"trained_with": train_key} if step else {})} for step in steps}
    keys = {step: _result_key(variant.label, step, settings[step]) for step in steps}
    _check_run_folder(run, record, variant, output)
    run.mkdir(parents=True, exist_ok=True)
    write_bench_variant(run, record)
    if all(keys[step] in results for step in steps):
        return digest, [results[keys[step]] for step in steps]
    logger.info("variant %s", variant.label)
    if not has_model_record(run / "transfer"):
        transfer(from_dict(TransferConfig, {
            "source_model": config.source_model, "source_tokenizer": config.source_tokenizer,
            "language": config.language, "output": str(run / "transfer"), "overwrite": True,
            "method": variant.method, "calibration": calibration, "distill": variant.distill,
            "method_device": config.method_device, **shared}), progress=progress)
        if train_config is not None:  # whether it wrote start rows decides what the runs depend on
            train_config, train_key = _train_config(config, run, variant.train, calibration=variant.calibration)
            for step in steps:
                if step:
                    settings[step]["trained_with"] = train_key
                    keys[step] = _result_key(variant.label, step, settings[step])
    folders = {0: run / "transfer"}
    timing = {}
    if any(step > 0 and keys[step] not in results for step in steps):
        report = train(train_config, progress=progress)
        timing = _loop_timing(report.phases)
        snapshots = Path(train_config.output) / "snapshots"
        folders.update({step: snapshots / f"step-{step}" for step in steps if 0 < step})
        folders[steps[-1]] = report.model
        missing = [step for step in steps if keys[step] not in results and not folders[step].is_dir()]
        if missing:
            raise ConfigError(f"variant '{variant.label}': no model was saved at step(s) {missing}, because the "
                              f"training in '{train_config.output}' had passed them before they were listed in "
                              "`steps`. Delete that folder to train again with snapshots at every listed step, "
                              "or drop those steps.")
    rows = []
    for step in steps:
        if keys[step] not in results:
            metrics = measuring.measure(folders[step])
            row = {"variant": variant.label, "method": variant.method["name"], "step": step, **metrics,
                   **(timing if step > 0 else {}), "setting": settings[step]}
            _append_result(output, row)
            results[keys[step]] = row
            logger.info("%s step %d: %s", variant.label, step, metrics)
        rows.append(results[keys[step]])
    return digest, rows


def _equal_time_rows(config: BenchConfig, output: Path, variants: list[Variant], steps: list[int], rows: list[dict],
                     results: dict, digests: dict, measuring: _Measuring, progress: bool) -> list[dict]:
    """The plain entry of each taught or distilled one trained for as long as that one took (`equal_time`)."""
    if not config.equal_time or steps[-1] == 0:
        return []
    final = {row["variant"]: row for row in rows if row["step"] == steps[-1]}
    # a teacher its check dropped taught nothing: that run is the plain one, and its time says nothing more
    twins = [(taught, plain, 0.0) for taught, plain in teacher_twins(config, variants)
             if final.get(taught.label, {}).get("teacher_used", True)]
    # a distillation its teacher check skipped (or whose record is gone) spent nothing to compare
    twins += [(distilled, plain, spent) for distilled, plain in distillation_twins(config, variants)
              if (spent := _distillation_seconds(output, distilled))]
    extra = []
    for taught, plain, spent in twins:
        row = _at_equal_time(config, output, taught, plain, rows + extra, results, digests[plain.label],
                             measuring.measure, {"measured_with": measuring.measured_with}, progress, spent)
        if row is not None:
            extra.append(row)
    return extra


def _train_keys(config: BenchConfig, variants: list[Variant]) -> dict[str, dict]:
    """Each variant's train options as they resolve (the bench's `train:` under the entry's), by label."""
    return {variant.label: _train_config(config, Path("runs"), variant.train, calibration=variant.calibration)[1]
            for variant in variants}


def teacher_twins(config: BenchConfig, variants: list[Variant]) -> list[tuple[Variant, Variant]]:
    """(taught, plain) pairs: an entry trained with a teacher and an entry that is the same without it (the same
    method, calibration and distillation, and train options that resolve, the bench's `train:` under the entry's, to
    the same but for the teacher)."""
    keys = _train_keys(config, variants)
    pairs = []
    for taught in variants:
        if "teacher" not in keys[taught.label]:
            continue
        rest = {key: value for key, value in keys[taught.label].items() if key != "teacher"}
        pairs += [(taught, plain) for plain in variants
                  if plain is not taught and keys[plain.label] == rest and plain.method == taught.method
                  and plain.calibration == taught.calibration and plain.distill == taught.distill]
    return pairs


def resolved_distill(variant: Variant) -> DistillConfig:
    """The variant's distillation options as its transfer resolves them (`DistillConfig.resolved`: an extension kept
    off the source language distils unless told not to)."""
    return from_dict(DistillConfig, variant.distill or {}, where="distill.").resolved(
        extension=bool(variant.calibration.get("source_text")))


def distillation_twins(config: BenchConfig, variants: list[Variant]) -> list[tuple[Variant, Variant]]:
    """(distilled, plain) pairs: an entry whose transfer distils and an entry that is the same without distillation
    (the same method, calibration and resolved train options)."""
    keys = _train_keys(config, variants)
    return [(distilled, plain) for distilled in variants if resolved_distill(distilled).tokens
            for plain in variants if plain is not distilled and not resolved_distill(plain).tokens
            and plain.method == distilled.method and plain.calibration == distilled.calibration
            and keys[plain.label] == keys[distilled.label]]


def _distillation_seconds(output: Path, variant: Variant) -> float:
    """Seconds the variant's transfer spent distilling, every candidate of the method together (its record's
    `seconds["method: distillation"]`, or the kept candidate's own report where that is missing); 0 where it did not
    distil (a teacher check that skipped it) or its transfer folder is gone."""
    folder = output / "runs" / _folder_name(variant.label) / "transfer"
    if not has_model_record(folder):
        return 0.0
    record = read_model_record(folder)
    report = record.distillation
    if report is None or not report.updates:
        return 0.0
    return float((record.seconds or {}).get("method: distillation") or report.seconds or 0.0)


def _at_equal_time(config: BenchConfig, output: Path, taught: Variant, plain: Variant, rows: list[dict],
                   results: dict, digest: str, measure, setting: dict, progress: bool,
                   extra_seconds: float = 0.0) -> dict | None:
    """The row of `plain` trained for as many updates as `taught` took time to reach the last step (by their loop's
    seconds per update, plus `extra_seconds` `taught` spent before training: its distillation), measured after them;
    None where either run has no loop time on record."""
    final = max(config.steps)
    by_key = {(row["variant"], row["step"]): row for row in rows}
    times = [by_key.get((variant.label, final), {}).get("seconds_per_update") for variant in (taught, plain)]
    if not all(times):
        logger.info("%s / %s: no loop time on record for both runs (measured by an older langswap); delete their "
                    "train-* folders and rows to compare them at equal time", taught.label, plain.label)
        return None
    updates = max(1, round((extra_seconds + final * times[0]) / times[1]))
    if updates == final:
        logger.info("%s: %d updates in the time %s took for %d; its row at step %d is the one at equal time",
                    plain.label, updates, taught.label, final, final)
        return None
    label = f"{plain.label}, {updates} updates (the time of {taught.label})"
    train_config, train_key = _train_config(config, output / "runs" / _folder_name(plain.label), plain.train,
                                            updates=updates, calibration=plain.calibration)
    setting = {**setting, "variant": digest, "trained_with": train_key}
    key = _result_key(label, final, setting)
    if key not in results:
        if not has_model_record(output / "runs" / _folder_name(plain.label) / "transfer"):
            logger.info("%s: its transfer folder is gone, so it is not trained again for the time of %s; delete "
                        "its rows from results.jsonl to transfer it again", plain.label, taught.label)
            return None
        logger.info("%s: %d updates, the time %s took for %d (%.3f against %.3f s an update)", plain.label, updates,
                    taught.label, final, *times)
        report = train(train_config, progress=progress)
        row = {"variant": label, "method": plain.method["name"], "step": final, "updates": updates,
               "equal_time_of": taught.label, **measure(report.model), **_loop_timing(report.phases),
               "setting": setting}
        _append_result(output, row)
        results[key] = row
    return results[key]


def _loop_timing(phases: list[PhaseReport]) -> dict:
    """The training loop's seconds per update and tokens per second over the run's phases (updates only:
    evaluations and checkpoints left out), so rows trained with and without extra work per update (a teacher) can be
    compared at equal time as well as at equal steps, and, where a phase had a teacher, whether it was used (its
    check can drop it); {} where the record has no loop timing."""
    updates = sum(phase.loop_updates or 0 for phase in phases)
    seconds = sum(phase.loop_seconds or 0.0 for phase in phases)
    tokens = sum(phase.loop_tokens or 0 for phase in phases)
    if not updates or not seconds:
        return {}
    teachers = [phase.teacher for phase in phases if phase.teacher is not None]
    return {"seconds_per_update": round(seconds / updates, 4), "train_tokens_per_second": round(tokens / seconds, 1),
            **({"teacher_used": any(teacher.used for teacher in teachers)} if teachers else {})}


METRIC_NAMES = {"bits_per_byte": "bits per byte", "pseudo_bits_per_byte": "pseudo bits per byte",
                "pseudo_perplexity": "pseudo-perplexity", "pos_accuracy": "POS probe accuracy",
                "perplexity": "perplexity", "source_bits_per_byte": "source-language bits per byte",
                "source_pseudo_bits_per_byte": "source-language pseudo bits per byte",
                "tokens_per_byte": "tokens per byte", "seconds_per_update": "seconds per update"}
LOWER_IS_BETTER = {"bits_per_byte", "pseudo_bits_per_byte", "pseudo_perplexity", "perplexity",
                   "source_bits_per_byte", "source_pseudo_bits_per_byte", "tokens_per_byte", "seconds_per_update"}
ONCE = {"tokens_per_byte"}  # the same at every step (the tokenizer's): one column, no plot
LAST = {"seconds_per_update"}  # of the training run: one column, at the last step, no plot


def format_table(rows: list[dict], labels: list[str], steps: list[int]) -> str:
    """Markdown: a row per variant, a column per (metric, step); the best value of each column in bold. The
    reference row (the untouched source model) has the same value in every column and is not a contender."""
    metrics = [m for m in METRIC_NAMES if any(m in row for row in rows)]
    by_key = {(row["variant"], row["step"]): row for row in rows}
    for row in rows:  # the untouched reference is the same at every step
        if row["variant"] == REFERENCE:
            by_key.update({(REFERENCE, step): row for step in steps})
    columns = [(m, step) for m in metrics for step in (steps[:1] if m in ONCE else steps[-1:] if m in LAST
                                                       else steps)]
    header = ["method"] + [METRIC_NAMES[m] if m in ONCE | LAST else f"{METRIC_NAMES[m]} @ {step}"
                           for m, step in columns]
    best = {}
    for metric, step in columns:
        values = [by_key[(label, step)].get(metric) for label in labels
                  if (label, step) in by_key and label != REFERENCE]
        values = [v for v in values if v is not None and not math.isnan(v)]
        if values:
            best[(metric, step)] = min(values) if metric in LOWER_IS_BETTER else max(values)
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label in labels:
        cells = [label]
        for metric, step in columns:
            value = by_key.get((label, step), {}).get(metric)
            text = "" if value is None else f"{value:.4f}"
            cells.append(f"**{text}**" if value is not None and value == best.get((metric, step)) else text)
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def write_report(output: Path, rows: list[dict], labels: list[str], steps: list[int],
                 plotted: list[str] | None = None) -> list[Path]:
    """table.md of `labels`' rows, and a plot per metric of `plotted`'s (default: every label)."""
    atomic_write_text(output / "table.md", format_table(rows, labels, steps))
    written = [output / "table.md"]
    metrics = [m for m in METRIC_NAMES if any(m in row for row in rows) and m not in ONCE | LAST]
    for metric in metrics:
        series, hlines = {}, []
        for label in labels if plotted is None else plotted:
            points = [(row["step"], row[metric]) for row in rows if row["variant"] == label and metric in row]
            if points and label == REFERENCE:
                hlines.append((points[0][1], label))
            elif points:
                series[label] = ([s for s, _ in points], [v for _, v in points])
        written.append(line_plot(output / f"{metric}.png", series, "training steps (embeddings only unless "
                                 "train.preset says otherwise)", METRIC_NAMES[metric],
                                 title=f"{METRIC_NAMES[metric]} against steps ({output.name})", hlines=hlines))
    return written
