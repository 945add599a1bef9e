"""The records langswap writes beside what it makes, typed: their file names, their fields, reading and writing.

    langswap.json        in a model folder: what made it. A `TransferRecord` (`langswap transfer`, and the model
                         `langswap demo` saves, with its table under `demo`) or an `EnrichRecord` (`langswap
                         enrich`); a trained model's (`langswap train`'s output/model) is the record of the folder it
                         was trained from with a `TrainingSection` under `training`.
    langswap-train.json  in a training run's output folder: a `TrainRecord` (config, plan, status, phases).
    langswap-tokenizer.json  in a tokenizer folder `langswap tokenizer` wrote: a `TokenizerRecord` (the job, what
                         the vocabulary holds by kind and the conventions its pieces follow, or what an extension
                         added).
    variant.json         in a bench variant's folder: a `BenchVariant` (everything its transfer depends on).
    results.jsonl        in a bench folder: a `BenchResult` per line (a variant measured at a step).
    bench-inputs.json    in a bench's shared resource folder: the inputs it was built from (`langswap.bench`).

Every record has a `version` (RECORD_VERSION when written; 0 for a record written before records had one) and keeps
the keys it does not know in `extra`, written back unchanged, so a record from a newer langswap survives a rewrite.
Nested reports (a calibration's, an alignment's, held-out metrics, a training phase) are the typed reports of
`langswap.reports`, built by the step that does the work; a record of any earlier version reads into them. This
module is the only one that names a record file.

Not records in this sense, and named where they are kept: a token store's own `store.json` (what the store was
built from, read only by `training/store.py` to decide whether the store is current), a training run's working
files (`phase.json`, `eval-step0.json`, `curve.json`, inside the run's folder, read back only by `langswap train`
when it resumes or reports), a fine-tuning run's `finetune.json` and the demo's row cache `demo-rows.json`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langswap.errors import MissingResourceError, ResourceFormatError
from langswap.files import atomic_write_text
from langswap.reports import (AlignmentReport, CalibrationReport, ChangeNorm, CountFitReport, DistillationReport,
                              EnrichSection, EvalPoint, EvaluationMetrics, ExtensionReport, MatchingReport,
                              MethodChoice, NewWordTraining, PhaseReport, PruningReport, Report, SeparationReport,
                              VocabularyReport, nested)

logger = logging.getLogger(__name__)

RECORD_VERSION = 2  # 2: reports typed (langswap.reports); the JSON of 1 reads as it is
MODEL_RECORD = "langswap.json"
TRAIN_RECORD = "langswap-train.json"
TOKENIZER_RECORD = "langswap-tokenizer.json"
BENCH_VARIANT = "variant.json"
BENCH_RESULTS = "results.jsonl"
BENCH_SHARED_INPUTS = "bench-inputs.json"  # in a bench's shared resource folder: what it was built from


@dataclass(kw_only=True)
class Record(Report):
    """Fields every record has; `extra` holds the keys this version of langswap does not know. Every field is
    written, None included; a nested report (`langswap.reports`) as its own object."""

    version: int = RECORD_VERSION
    WRITE_NONE = True

    @classmethod
    def from_dict(cls, data: dict, where: str = "record"):
        """The record of a JSON object (`Report.from_dict`); a record without a version is version 0."""
        if data is None or isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ResourceFormatError(f"{where} is not a langswap record: it holds no JSON object.")
        return super().from_dict({"version": 0, **data}, where)


@dataclass(kw_only=True)
class TrainingSection(Record):
    """`training` in a trained model's langswap.json: the run that trained it (or, for a snapshot's card, the run
    and the update it was saved at)."""

    langswap_version: str | None = None
    config: dict = field(default_factory=dict)  # the TrainConfig, as written
    objective: str | None = None
    phases: list[PhaseReport] = field(default_factory=list, metadata=nested(PhaseReport))
    final_eval: list[EvalPoint] = field(default_factory=list, metadata=nested(EvalPoint))
    step: int | None = None  # a snapshot's update; None for the finished model

    def as_dict(self) -> dict:
        data = super().as_dict()
        if self.step is None:
            del data["step"]
        return data


@dataclass(kw_only=True)
class ModelRecord(Record):
    """What langswap.json holds in every model folder."""

    kind: str = "trained"  # transfer, enrich, or trained (a model langswap trained but did not make)
    langswap_version: str | None = None
    config: dict = field(default_factory=dict)  # the command's config, as written
    seed: int | None = None
    counts: dict = field(default_factory=dict)  # rows by how they were made
    tied_embeddings: bool | None = None
    seconds: dict = field(default_factory=dict)
    training: TrainingSection | None = field(default=None, metadata=nested(TrainingSection))
    pruning: PruningReport | None = field(default=None, metadata=nested(PruningReport))  # `langswap prune`

    @property
    def trained(self) -> bool:
        return self.training is not None


@dataclass(kw_only=True)
class TransferRecord(ModelRecord):
    """langswap.json of a transfer's output (and of the demo's model, whose table is under `demo`)."""

    kind: str = "transfer"
    method: str | None = None
    head_counts: dict | None = None
    source_vocabulary: str | None = None
    target_vocabulary: str | None = None
    output_bias: bool | None = None
    source_padded_rows: int | None = None
    streamed: dict | None = None
    alignment: AlignmentReport | None = field(default=None, metadata=nested(AlignmentReport))
    resources: dict | None = None  # each resource kind's report, as the kind wrote it
    resource_keys: dict | None = None  # the resources.* keys the method's kinds read; None in older records
    metrics: EvaluationMetrics | None = field(default=None, metadata=nested(EvaluationMetrics))
    method_choice: MethodChoice | None = field(default=None, metadata=nested(MethodChoice))
    calibration: CalibrationReport | None = field(default=None, metadata=nested(CalibrationReport))
    # where the transfer distilled; None otherwise
    distillation: DistillationReport | None = field(default=None, metadata=nested(DistillationReport))
    # where calibration.source_text moved an extension's new rows; None otherwise
    separation: SeparationReport | None = field(default=None, metadata=nested(SeparationReport))
    # where calibration.count_fit fitted the moved rows to their counts; None otherwise
    count_fit: CountFitReport | None = field(default=None, metadata=nested(CountFitReport))
    vocabulary: VocabularyReport | None = field(default=None, metadata=nested(VocabularyReport))  # None: older
    correspondence: list | None = None
    # the copies against an independent count and the share copied; None in older records
    matching: MatchingReport | None = field(default=None, metadata=nested(MatchingReport))
    demo: list | None = None  # the demo's table rows
    demo_key: str | None = None  # the demo's digest of the transfer that made this model


@dataclass(kw_only=True)
class EnrichRecord(ModelRecord):
    """langswap.json of `langswap enrich`'s output (TEMA)."""

    kind: str = "enrich"
    enrich: EnrichSection = field(default_factory=EnrichSection, metadata=nested(EnrichSection))
    change_norm: ChangeNorm = field(default_factory=ChangeNorm, metadata=nested(ChangeNorm))
    dictionary_direction: str | None = None
    l1_vocabulary: str | None = None
    l2_vocabulary: str | None = None
    new_word_training: NewWordTraining | None = field(default=None, metadata=nested(NewWordTraining))


@dataclass(kw_only=True)
class TokenizerRecord(Record):
    """langswap-tokenizer.json of a tokenizer folder `langswap tokenizer` wrote."""

    kind: str = "tokenizer"
    langswap_version: str | None = None
    job: dict = field(default_factory=dict)
    vocabulary: dict | None = None  # a replacement's: sizes, learnt pieces, added tokens kept by kind, conventions
    extension: ExtensionReport | None = field(default=None, metadata=nested(ExtensionReport))  # an extension's


@dataclass(kw_only=True)
class TrainRecord(Record):
    """langswap-train.json of a training run's output folder."""

    langswap_version: str | None = None
    config: dict = field(default_factory=dict)
    comparable_config: dict | None = None  # what a resume must match
    objective: str | None = None
    sequence_length: int | None = None
    training_sequences: int | None = None
    training_tokens: int | None = None
    token_stores: Any = None
    training_data: Any = None
    processes: int | None = None
    status: str = "running"  # running, complete or failed
    # planned while running, then each phase's summary
    phases: list[PhaseReport] = field(default_factory=list, metadata=nested(PhaseReport))
    steps: int | None = None  # updates over all phases, once complete
    failure: dict | None = None


@dataclass(kw_only=True)
class BenchVariant(Record):
    """variant.json of a bench variant: everything its transfer depends on, compared before a measurement is
    reused."""

    label: str = ""
    method: dict = field(default_factory=dict)  # as the bench config gives it
    pair: dict = field(default_factory=dict)
    shared: dict = field(default_factory=dict)
    calibration: dict | None = None  # as the bench config gives it, with the text; None: uncalibrated
    distill: dict | None = None  # as the bench config gives it; None: no distillation
    resolved: dict | None = None  # method and calibration (and distill) with every option as it resolves

    def inputs(self) -> dict:
        """What the user gave the variant: a label whose inputs changed is refused."""
        data = {key: value for key, value in self.as_dict().items() if key not in ("version", "resolved")}
        for optional in ("calibration", "distill"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data

    def digest_inputs(self) -> dict:
        """What a measurement is reused for: the inputs and their resolved options (a default that changed makes a
        new measurement)."""
        return {**self.inputs(), "resolved": self.resolved}


@dataclass(kw_only=True)
class BenchResult(Record):
    """A line of a bench's results.jsonl: one variant (or the reference) measured at one step."""

    variant: str = ""
    method: str = ""
    step: int = 0
    setting: dict = field(default_factory=dict)  # what the measurement depends on
    metrics: dict = field(default_factory=dict)  # bits_per_byte, perplexity, probe accuracy, ...

    def as_dict(self) -> dict:  # the metrics inline, as the table and plots read them
        return {"version": self.version, "variant": self.variant, "method": self.method, "step": self.step,
                **self.metrics, "setting": self.setting, **self.extra}

    @classmethod
    def from_dict(cls, data: dict, where: str = "result"):
        if not isinstance(data, dict):
            raise ResourceFormatError(f"{where} is not a bench result: it holds no JSON object.")
        known = {"version", "variant", "method", "step", "setting"}
        return cls(version=data.get("version", 0), variant=data.get("variant", ""), method=data.get("method", ""),
                   step=data.get("step", 0), setting=data.get("setting", {}),
                   metrics={key: value for key, value in data.items() if key not in known})


# -- reading and writing --------------------------------------------------------------------------------------------

def _read_json(path: Path, what: str) -> dict:
    if not path.is_file():
        raise MissingResourceError(f"'{path}' does not exist: {what}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResourceFormatError(f"'{path}' is not a langswap record (JSON): {error}. Write the folder again with "
                                  "the langswap command that made it.") from None
    if not isinstance(data, dict):
        raise ResourceFormatError(f"'{path}' is not a langswap record: it holds no JSON object.")
    return data


def _dumps(record: Record) -> str:
    """The record as written now: at this version, or at its own where a newer langswap wrote it (its unknown keys
    are kept)."""
    return json.dumps({**record.as_dict(), "version": max(record.version, RECORD_VERSION)}, indent=2,
                      ensure_ascii=False)


def has_model_record(folder: str | Path) -> bool:
    return (Path(folder) / MODEL_RECORD).is_file()


def model_record_from_dict(data: dict, where: str = MODEL_RECORD) -> ModelRecord:
    """The typed record of a langswap.json object, by its `kind`; a record without one (written before records had
    kinds) is an enrich record where it has an `enrich` section, a transfer record where it names a method or
    counts rows (the demo's included), else the record of a model langswap only trained."""
    kind = data.get("kind") or ("enrich" if "enrich" in data else "transfer" if "method" in data or "counts" in data
                                else "trained")
    cls = {"enrich": EnrichRecord, "transfer": TransferRecord}.get(kind, ModelRecord)
    return cls.from_dict({**data, "kind": kind}, where)


def read_model_record(folder: str | Path) -> ModelRecord:
    """langswap.json of a model folder."""
    path = Path(folder) / MODEL_RECORD
    return model_record_from_dict(_read_json(path, "a model folder langswap wrote holds its record there"),
                                  str(path))


def write_model_record(folder: str | Path, record: ModelRecord) -> Path:
    """Write langswap.json into `folder` (atomically)."""
    path = Path(folder) / MODEL_RECORD
    atomic_write_text(path, _dumps(record))
    return path


def write_tokenizer_record(folder: str | Path, record: TokenizerRecord) -> Path:
    """Write langswap-tokenizer.json into a tokenizer folder (atomically)."""
    path = Path(folder) / TOKENIZER_RECORD
    atomic_write_text(path, _dumps(record))
    return path


def read_tokenizer_record(folder: str | Path) -> TokenizerRecord:
    path = Path(folder) / TOKENIZER_RECORD
    return TokenizerRecord.from_dict(_read_json(path, "a tokenizer folder langswap wrote holds its record there"),
                                     str(path))


def read_train_record(output: str | Path) -> TrainRecord:
    """langswap-train.json of a training run's output folder."""
    path = Path(output) / TRAIN_RECORD
    return TrainRecord.from_dict(_read_json(path, "a training run's output folder holds its record there"),
                                 str(path))


def has_train_record(output: str | Path) -> bool:
    return (Path(output) / TRAIN_RECORD).is_file()


def write_train_record(output: str | Path, record: TrainRecord) -> Path:
    path = Path(output) / TRAIN_RECORD
    atomic_write_text(path, _dumps(record))
    return path


def read_bench_variant(run: str | Path) -> BenchVariant | None:
    """variant.json of a bench variant's folder, or None where there is none yet."""
    path = Path(run) / BENCH_VARIANT
    return BenchVariant.from_dict(_read_json(path, "a bench variant"), str(path)) if path.is_file() else None


def write_bench_variant(run: str | Path, variant: BenchVariant) -> Path:
    path = Path(run) / BENCH_VARIANT
    atomic_write_text(path, _dumps(variant))
    return path


def bench_results_path(output: str | Path) -> Path:
    return Path(output) / BENCH_RESULTS


def read_bench_results(output: str | Path) -> list[BenchResult]:
    """Every result line of a bench folder (none where it has none yet). A last line cut by a bench killed while
    appending it is dropped from the file (that measurement is made again); a line before it that is not JSON is an
    error naming the line."""
    path = bench_results_path(output)
    if not path.is_file():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    results = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            if number < len(lines):
                raise ResourceFormatError(f"'{path}' line {number} is not JSON ({error.msg}); fix or delete that "
                                          "line (its measurement is then made again).") from error
            logger.warning("%s: dropping an incomplete last line; that measurement is made again", path)
            atomic_write_text(path, "".join(kept + "\n" for kept in lines[:-1]))
            break
        results.append(BenchResult.from_dict(row, f"'{path}' line {number}"))
    return results


def append_bench_result(output: str | Path, result: BenchResult) -> None:
    """Add a line to the bench folder's results (one complete line per measurement)."""
    row = {**result.as_dict(), "version": RECORD_VERSION}
    with open(bench_results_path(output), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        handle.flush()
