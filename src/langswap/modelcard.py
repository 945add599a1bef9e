"""Model cards: the README.md that a model hub reads, written from the record of a folder langswap wrote.

`write_model_card(folder)` is the one call each writer makes once the folder's `langswap.json` is written (a
transfer's output, a trained `model/`), or with `training=` and `step=` for a training snapshot, which has no
`langswap.json` of its own. The card's YAML front matter holds the metadata hubs read; its body says what the
record says and nothing more: the source model, the method and its options, the resources by file name, the
vocabularies, how the embedding rows were made, the held-out figures that were measured, the training, and how to
load the model. Where each field comes from is in docs/design.md ("Model cards").

A README.md that langswap did not write (it has no `MARKER` line) is never replaced: it is kept beside the card as
README.original.md (or README.original-2.md, ...), with a warning, and the card names it.

Not handled: a source model given by hub name gets no license (langswap downloads no README; the hub's own copy of
the source README is read only when the source is a local folder, a hub-cache snapshot included); the language is
written only when it is given or recorded, never guessed from text; results of `langswap bench` are not written
into the cards of the snapshots it measures.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import yaml

from langswap.errors import ConfigError, MissingResourceError, ResourceFormatError
from langswap.files import atomic_write_text
from langswap.records import (MODEL_RECORD, EnrichRecord, ModelRecord, TrainingSection, TrainRecord, has_model_record,
                              read_model_record, read_train_record)
from langswap.reports import EnrichSection, is_hub_name
from langswap.reports import count as _count, name as _name, value as _value

logger = logging.getLogger(__name__)

CARD = "README.md"
# Marks a README.md as langswap's: one without it was written by someone else and is kept, never replaced.
MARKER = "<!-- langswap model card: written from the langswap record; langswap rewrites this file -->"
KEPT_STEM = "README.original"
LICENSE_KEYS = ("license", "license_name", "license_link")  # license_name/_link go with `license: other`
# A snapshot in a Hugging Face hub cache: .../models--OWNER--NAME/snapshots/REVISION
HUB_CACHE_FOLDER = re.compile(r"models--(.+)")
RESOURCE_NAMES = {"source_vectors": "source word vectors", "target_vectors": "target word vectors",
                  "dictionary": "dictionary", "alignment": "alignment", "bilingual_vectors": "bilingual word vectors",
                  "joint_vectors": "joint word vectors of both languages"}


def write_model_card(folder: str | Path, source_model: str | None = None, language: str | list[str] | None = None,
                     *, training: str | Path | dict | None = None, step: int | None = None) -> Path:
    """Write `folder/README.md` (atomically) from `folder/langswap.json`; returns its path.

    source_model: the source model's hub name, for a source that was given as a local folder (the record keeps the
        folder); without it the name is taken from the record, a hub-cache path or the source's config.json.
    language: the target language (an ISO 639 code, or a list of them); without it, the language the record or the
        trained-from folder's card names, else none.
    training, step: for a training snapshot, which has no langswap.json: the training run's output folder (whose
        langswap-train.json gives the config and objective) or that record as a dict, and the update the snapshot
        was saved at. The record is then the trained-from model's langswap.json (`config["model"]`), when there is
        one, with this training in it.

    Call it on the main process only; where a writer builds the folder under a temporary name, on that folder,
    so the card is there when the folder appears."""
    folder = Path(folder)
    snapshot = None
    if training is not None:
        if step is None:
            raise ValueError("write_model_card(training=...) describes a snapshot: give the update it was saved at "
                             "(step=)")
        snapshot = _snapshot_section(training, step)
    record = _read_record(folder, snapshot)
    trained = record.training
    trained_from = trained.config.get("model") if trained is not None else None
    parent_card = _langswap_card(Path(trained_from)) if trained_from else {}
    # `langswap.enrich`: the source is L2, the model it enriched
    enriched = record.enrich if isinstance(record, EnrichRecord) else None
    source = record.config.get("source_model") or (enriched.l2 if enriched else None) or trained_from
    source_folder = Path(source).expanduser() if source and Path(source).expanduser().is_dir() else None
    base_model, named_by = _base_model(source, source_folder, source_model, parent_card)

    front: dict = {}
    if base_model:
        front["base_model"] = base_model
    languages = _languages(language, record, parent_card)
    if languages:
        front["language"] = languages
    front["library_name"] = "transformers"
    front.update(_license(source_folder, parent_card))
    objective = _objective(folder, trained)
    front["pipeline_tag"] = "fill-mask" if objective == "masked" else "text-generation"
    tags = ["langswap"]
    if getattr(record, "method", None):
        tags += ["language-transfer", str(record.method)]
    if enriched:
        tags += ["embedding-enrichment", "tema"]
    if _has_trained(trained):
        tags.append("continued-pretraining")
    front["tags"] = list(dict.fromkeys(tags))

    kept = _keep_foreign_readme(folder)
    body = _body(folder, record, source, source_folder, base_model, named_by, languages, objective, kept)
    text = "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True, width=1000) + "---\n\n" + body
    path = folder / CARD
    atomic_write_text(path, text)
    logger.debug("model card written: %s", path)
    return path


def read_front_matter(path: str | Path) -> dict:
    """The YAML front matter of a README.md as a dict ({} when it has none or it is not a mapping). Raises
    ResourceFormatError when the front matter is not YAML."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return {}
    try:
        end = next(index for index in range(1, len(lines)) if lines[index].strip() in ("---", "..."))
    except StopIteration:
        return {}
    try:
        data = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError as error:
        raise ResourceFormatError(f"the front matter of '{path}' is not YAML: {error}") from None
    return data if isinstance(data, dict) else {}


# -- what the front matter says ----------------------------------------------------------------------------------------

def _snapshot_section(training, step: int) -> TrainingSection:
    """The `training` section of a snapshot's card, from its run's output folder, record or a mapping of it."""
    if isinstance(training, dict):
        training = TrainRecord.from_dict(training, "training")
    elif not isinstance(training, TrainRecord):
        training = read_train_record(training)
    return TrainingSection(langswap_version=training.langswap_version, config=training.config,
                           objective=training.objective, phases=training.phases, step=step)


def _read_record(folder: Path, snapshot: TrainingSection | None) -> ModelRecord:
    """The folder's record; a snapshot's, which has none, is that of the folder its training started from (or an
    empty one), with the snapshot's training in it."""
    if has_model_record(folder):
        record = read_model_record(folder)
    elif snapshot is not None:
        start = snapshot.config.get("model")
        record = read_model_record(start) if start and has_model_record(start) else ModelRecord()
    else:
        raise MissingResourceError(f"'{folder}' has no {MODEL_RECORD}: a model card is written from the record of a "
                                   "folder that `langswap transfer` or `langswap train` wrote (a training snapshot "
                                   "passes training= and step=).")
    if snapshot is not None:
        record.training = snapshot
    return record


def _langswap_card(folder: Path) -> dict:
    """The front matter of a card langswap wrote in `folder` (a trained model's starting point), else {}."""
    path = folder / CARD
    if not path.is_file() or MARKER not in path.read_text(encoding="utf-8", errors="replace"):
        return {}
    return _front_matter_or_nothing(path)


def _front_matter_or_nothing(path: Path) -> dict:
    try:
        return read_front_matter(path)
    except ResourceFormatError as error:
        logger.warning("%s; its metadata is not used in the model card", error)
        return {}


def _base_model(source: str | None, source_folder: Path | None, given: str | None,
                parent_card: dict) -> tuple[str | None, str]:
    """(the source's hub name or None, where that name comes from: a phrase for the card)."""
    if given:
        if not is_hub_name(given):
            raise ConfigError(f"source_model '{given}' is not a hub name (OWNER/NAME); give the source model's name "
                              "on the hub, or leave it out.")
        return given, "given when the card was written"
    if parent_card:  # the trained-from folder's card named it when the source was at hand
        return parent_card.get("base_model"), "from the card of the model the training started from"
    if source_folder is not None:
        resolved = source_folder.resolve()
        match = HUB_CACHE_FOLDER.fullmatch(resolved.parent.parent.name)
        if resolved.parent.name == "snapshots" and match and is_hub_name(match.group(1).replace("--", "/")):
            return match.group(1).replace("--", "/"), "from its hub-cache path"
        recorded = _config_name(source_folder)
        if recorded:
            return recorded, "as its config.json names it"
        return None, ""
    if source and is_hub_name(source):
        return source, "hub name"
    return None, ""


def _config_name(folder: Path) -> str | None:
    """The OWNER/NAME that transformers 4.x records as `_name_or_path` in a config saved from a hub model; a path
    or a bare name (which could be a folder name) is not taken as a hub name."""
    path = folder / "config.json"
    try:
        name = json.loads(path.read_text(encoding="utf-8")).get("_name_or_path") if path.is_file() else None
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(name, str) or "/" not in name or not is_hub_name(name):
        return None
    if (folder / name).exists() or Path(name).exists():
        return None
    return name


def _languages(given, record: ModelRecord, parent_card: dict) -> list[str]:
    value = given
    if value is None:
        configs = [record.extra, record.config, record.training.config if record.training is not None else {}]
        value = next((c[key] for c in configs for key in ("language", "target_language") if c.get(key)), None)
    if value is None:
        value = parent_card.get("language")
    if value is None:
        return []
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in values):
        raise ConfigError(f"language {value!r} is not a language code or a list of them (e.g. 'de' or ['de', "
                          "'en']).")
    return [v.strip() for v in values]


def _license(source_folder: Path | None, parent_card: dict) -> dict:
    """license (and license_name/license_link) from the source folder's README.md front matter, else from the
    trained-from folder's card."""
    if source_folder is not None and (source_folder / CARD).is_file():
        front = _front_matter_or_nothing(source_folder / CARD)
        if front.get("license"):
            return {key: front[key] for key in LICENSE_KEYS if front.get(key)}
    if parent_card.get("license"):
        return {key: parent_card[key] for key in LICENSE_KEYS if parent_card.get(key)}
    return {}


def _objective(folder: Path, trained: TrainingSection | None) -> str:
    """'masked' or 'causal': the training's, else from the architectures in config.json (as models.objective_of)."""
    objective = trained and (trained.objective or trained.config.get("objective"))
    if objective in ("causal", "masked"):
        return objective
    path = folder / "config.json"
    try:
        architectures = json.loads(path.read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        architectures = []
    return "masked" if any(str(name).endswith("ForMaskedLM") for name in architectures) else "causal"


def _keep_foreign_readme(folder: Path) -> str | None:
    """A README.md that langswap did not write is renamed to a free README.original*.md; returns its name (or the
    name of one kept earlier)."""
    path = folder / CARD
    if path.is_file() and MARKER not in path.read_text(encoding="utf-8", errors="replace"):
        number, kept = 1, folder / f"{KEPT_STEM}.md"
        while kept.exists():
            number += 1
            kept = folder / f"{KEPT_STEM}-{number}.md"
        path.rename(kept)
        logger.warning("%s was not written by langswap; it is kept as %s and the model card replaces it", path,
                       kept.name)
    earlier = sorted(folder.glob(f"{KEPT_STEM}*.md"))
    return ", ".join(f"`{p.name}`" for p in earlier) or None


# -- the body ---------------------------------------------------------------------------------------------------------

def _body(folder: Path, record: ModelRecord, source: str | None, source_folder: Path | None,
          base_model: str | None, named_by: str, languages: list[str], objective: str, kept: str | None) -> str:
    config = record.config
    trained = record.training
    method = getattr(record, "method", None)  # a transfer's
    source_label = base_model or _name(source) or "the source model"
    title = f"`{source_label}`"
    if method:
        title += f" with new token embeddings ({method})"
    enriched = record.enrich if isinstance(record, EnrichRecord) else None
    if enriched:
        title += f" with token embeddings enriched from `{_name(enriched.l1)}` (TEMA)"
    if trained is not None and trained.step is not None:
        title += f", after {_updates(trained.step)} of training" if trained.step else ", before training"
    elif trained is not None and trained.phases:
        title += f", trained for {_updates(sum(phase.steps or 0 for phase in trained.phases))}"
    lines = [MARKER, "", f"# {title}", ""]

    what = []
    if method:
        version = f" {record.langswap_version}" if record.langswap_version else ""
        what.append(f"The transformer body of `{source_label}` with a new tokenizer and new token embeddings, made "
                    f"by langswap{version} with the `{method}` method")
    elif enriched:
        version = f" {record.langswap_version}" if record.langswap_version else ""
        what.append(f"`{source_label}` with the token embeddings of its dictionary words moved by TEMA from those of "
                    f"`{_name(enriched.l1)}` (`{enriched.method}`), made by langswap{version}")
    else:
        what.append(f"`{source_label}`")
    if _has_trained(trained):
        what.append("then trained further with `langswap train`" if method else
                    "trained further with `langswap train`")
    elif trained is not None:
        what.append("saved by `langswap train` at update 0, before any training")
    intro = ", ".join(what) + "."
    if languages:
        intro += f" Language: {', '.join(f'`{code}`' for code in languages)}."
    lines += [intro, ""]

    lines += ["## How it was made", ""]
    label = ("Enriched model (L2)" if enriched else "Starting model" if trained is not None and not method
             else "Source model")
    lines.append(f"- {label}: {_source_line(source, source_folder, base_model, named_by)}")
    if enriched:
        lines += _enrichment_lines(folder, record, enriched)
    elif config:
        if config.get("target_tokenizer"):
            lines.append(f"- Target tokenizer: `{_name(config['target_tokenizer'])}`")
        elif config.get("target_text"):
            size = f"{_count(config['vocab_size'])} tokens" if config.get("vocab_size") else "the source's size"
            lines.append(f"- Target tokenizer: trained on `{_name(config['target_text'])}` ({size})")
        for key, label in (("source_vocabulary", "Source vocabulary"), ("target_vocabulary", "Target vocabulary")):
            if getattr(record, key, None):
                lines.append(f"- {label}: {getattr(record, key)}")
        extended = record.vocabulary.summary() if getattr(record, "vocabulary", None) is not None else None
        if extended:
            lines.append(f"- Vocabulary: {extended}")
        options = {key: value for key, value in (config.get("method") or {}).items() if key != "name"}
        if method:
            described = ", ".join(f"`{key}={_value(value)}`" for key, value in options.items())
            lines.append(f"- Method: `{method}`" + (f" with {described}" if described else ""))
        # the keys the method's resource kinds use (older records: every key set)
        used = getattr(record, "resource_keys", None)
        used = used if used is not None else (config.get("resources") or {})
        resources = [f"{RESOURCE_NAMES.get(key, key)} `{_name(value)}`" for key, value in used.items() if value]
        if resources:
            lines.append(f"- Resources: {', '.join(resources)}")
        alignment = record.alignment.summary() if getattr(record, "alignment", None) is not None else ""
        if alignment:
            lines.append(f"- Alignment: {alignment}")
        if getattr(record, "method_choice", None):
            lines.append(f"- Candidates: {record.method_choice.summary()}")
        counts = record.counts
        if counts:
            parts = " | ".join(f"{kind} {_count(number)}" for kind, number in counts.items())
            lines.append(f"- Embedding rows: {parts} (total {_count(sum(counts.values()))})"
                         + ("; `provenance.tsv` says how each row was made" if (folder / "provenance.tsv").is_file()
                            else ""))
        matching = record.matching.summary() if getattr(record, "matching", None) is not None else None
        if matching:
            lines.append(f"- Copied tokens: {matching}")
        if record.tied_embeddings is not None:
            lines.append(f"- Input and output embeddings: {'tied' if record.tied_embeddings else 'untied'}"
                         + (", with an output bias" if getattr(record, "output_bias", None) else ""))
        for key, label in (("distillation", "Token distillation"), ("calibration", "Frequency calibration"),
                           ("separation", "Kept off the source language"),
                           ("count_fit", "Fitted to the counts"), ("pruning", "Pruned")):
            report = getattr(record, key, None)
            if report is not None:
                lines.append(f"- {label}: {report.summary()}")
    lines.append("")

    metrics = getattr(record, "metrics", None)
    figures = metrics.figures(config.get("eval_text")) if metrics is not None else []
    if figures:
        lines += ["## Held-out figures after the transfer", ""] + figures + [""]
    if trained is not None:
        lines += ["## Training", ""] + _training_lines(trained) + [""]

    auto = "AutoModelForMaskedLM" if objective == "masked" else "AutoModelForCausalLM"
    lines += ["## Use", "", "```python", f"from transformers import {auto}, AutoTokenizer", "",
              'name = "path/to/this/folder"  # or its repository name on the hub',
              "tokenizer = AutoTokenizer.from_pretrained(name)", f"model = {auto}.from_pretrained(name)", "```", ""]
    if kept:
        lines += [f"This folder's earlier README is kept as {kept}.", ""]
    return "\n".join(lines)


def _enrichment_lines(folder: Path, record: EnrichRecord, enriched: EnrichSection) -> list[str]:
    """What `langswap.enrich` did, from its record."""
    config, counts, norms = record.config, record.counts, record.change_norm
    method = enriched.method
    anchors = " ".join(enriched.anchors)
    how = (f"`blend={_value(config.get('blend'))}`" if method in ("lstsq", "procrustes")
           else f"u + proj(v_x - w); anchors: `` {anchors} ``")
    lines = [f"- Richly trained model (L1): `{_name(enriched.l1)}`",
             f"- Dictionary: `{_name(config.get('dictionary'))}` ({_count(counts.get('translation_pairs'))} token "
             "pairs)",
             f"- Method: `{method}` ({how})",
             f"- Embedding rows changed: {_count(counts.get('rows_changed'))} of {_count(counts.get('l2_vocabulary'))}"
             + (f" (change norm mean {norms.mean:.4f}, max {norms.max:.4f})" if norms.mean is not None else "")
             + ("; `provenance.tsv` lists them" if (folder / "provenance.tsv").is_file() else ""),
             f"- Output head: {enriched.output_head}"]
    if enriched.added_words:
        training = record.new_word_training
        trained = (f", then trained embeddings-only for {_updates(training.steps)} on "
                   f"{_count(training.sentences)} sentences of `{_name(config.get('target_text'))}`"
                   if training else "")
        lines.append(f"- Words added to the tokenizer: {_count(len(enriched.added_words))} (rows started as the "
                     f"mean of their old subword rows{trained})")
    return lines


def _source_line(source, source_folder, base_model, named_by) -> str:
    if source is None:
        return f"`{base_model}` ({named_by})" if base_model else "not recorded"
    if source_folder is None and base_model == source:
        return f"`{source}` (hub)"
    line = f"`{_name(source)}`" + (" (a local folder" if source_folder is not None else " (a folder")
    if base_model:
        return line + f"; hub name `{base_model}`, {named_by})"
    return line + "; no hub name recorded)"


def _training_lines(trained: TrainingSection) -> list[str]:
    config = trained.config
    objective = trained.objective or config.get("objective")
    lines = []
    settings = [f"preset `{config['preset']}`" if config.get("preset") else None,
                f"{_count(config['steps'])} updates planned" if config.get("steps") is not None else None,
                f"training text `{_name(config['train_text'])}`" if config.get("train_text") else None,
                f"objective {objective}" if objective and objective != "auto" else None,
                f"sequences of {_count(config['sequence_length'])} tokens" if config.get("sequence_length") else None,
                (f"batch size {config['batch_size']} per device x {config.get('gradient_accumulation', 1)} "
                 "accumulated") if config.get("batch_size") else None,
                f"seed {config['seed']}" if config.get("seed") is not None else None]
    version = f" (langswap {trained.langswap_version})" if trained.langswap_version else ""
    lines.append(f"- `langswap train`{version}: " + ", ".join(s for s in settings if s))
    if trained.step is not None:  # a snapshot: the run's phases are its plan, its final figures are not there yet
        lines.append(f"- This is the run's snapshot at update {_count(trained.step)}.")
        return lines
    lines += [f"- {phase.summary()}" for phase in trained.phases]
    final = trained.final_eval[-1:]
    if final:
        entry = final[0]
        what = "masked-LM loss (fixed masks)" if objective == "masked" else "loss"
        text = f" of `{_name(config['eval_text'])}`" if config.get("eval_text") else ""
        sequences = (f" on up to {_count(config['eval_sequences'])} packed sequences{text}"
                     if config.get("eval_sequences") else "")
        line = f"- Held-out {what} at the end (update {_count(entry.step)}): {entry.loss:.4f}{sequences}"
        if entry.bits_per_byte is not None:
            line += (f"; bits per byte estimated from it: {entry.bits_per_byte:.4f} (the loss over the held-out "
                     "text's bytes per token; `langswap evaluate` scores whole lines exactly)")
        lines.append(line)
    return lines


def _has_trained(trained: TrainingSection | None) -> bool:
    """A finished training, or a snapshot after at least one update (a snapshot at update 0 is the start model)."""
    if trained is None:
        return False
    return bool(trained.step) if trained.step is not None else bool(trained.phases)


def _updates(number) -> str:
    return f"{_count(number)} update" + ("" if number == 1 else "s")
