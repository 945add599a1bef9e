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
from langswap.records import (MODEL_RECORD, EnrichRecord, ModelRecord, TrainingSection, TrainRecord,
                              has_model_record, read_model_record, read_train_record)

logger = logging.getLogger(__name__)

CARD = "README.md"
# Marks a README.md as langswap's: one without it was written by someone else and is kept, never replaced.
MARKER = "<!-- langswap model card: written from the langswap record; langswap rewrites this file -->"
KEPT_STEM = "README.original"
LICENSE_KEYS = ("license", "license_name", "license_link")  # license_name/_link go with `license: other`
# A hub repository id: an optional owner and a name, each of letters, digits, '-', '_' and '.', neither starting
# nor ending with '-' or '.', without '--' or '..' (the hub's own rules).
HUB_PART = r"[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"(?:{HUB_PART}/)?{HUB_PART}")
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
    enriched = record.enrich if isinstance(record, EnrichRecord) else {}
    source = record.config.get("source_model") or enriched.get("l2") or trained_from
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


def is_hub_name(name: str) -> bool:
    """True when `name` has the form of a hub repository id ('gpt2', 'HuggingFaceTB/SmolLM2-135M')."""
    return bool(HUB_ID.fullmatch(name)) and "--" not in name and ".." not in name


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
        title += f" with token embeddings enriched from `{_name(enriched.get('l1'))}` (TEMA)"
    if trained is not None and trained.step is not None:
        title += f", after {_updates(trained.step)} of training" if trained.step else ", before training"
    elif trained is not None and trained.phases:
        title += f", trained for {_updates(sum(p.get('steps', 0) for p in trained.phases))}"
    lines = [MARKER, "", f"# {title}", ""]

    what = []
    if method:
        version = f" {record.langswap_version}" if record.langswap_version else ""
        what.append(f"The transformer body of `{source_label}` with a new tokenizer and new token embeddings, made "
                    f"by langswap{version} with the `{method}` method")
    elif enriched:
        version = f" {record.langswap_version}" if record.langswap_version else ""
        what.append(f"`{source_label}` with the token embeddings of its dictionary words moved by TEMA from those of "
                    f"`{_name(enriched.get('l1'))}` (`{enriched.get('method')}`), made by langswap{version}")
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
        extended = _extension_line(getattr(record, "vocabulary", None))
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
        alignment = _alignment_line(getattr(record, "alignment", None))
        if alignment:
            lines.append(f"- Alignment: {alignment}")
        if getattr(record, "method_choice", None):
            lines.append(f"- Candidates: {describe_choice(record.method_choice)}")
        counts = record.counts
        if counts:
            parts = " | ".join(f"{kind} {_count(number)}" for kind, number in counts.items())
            lines.append(f"- Embedding rows: {parts} (total {_count(sum(counts.values()))})"
                         + ("; `provenance.tsv` says how each row was made" if (folder / "provenance.tsv").is_file()
                            else ""))
        matching = getattr(record, "matching", None) or {}
        if "copied" in matching:
            lines.append(f"- Copied tokens: {_count(matching['copied'])} of {_count(matching['target_tokens'])} "
                         f"({matching['share_copied']:.1%}); of those with a whole surface "
                         f"({_count(matching['copied_whole'])}) an independent count finds "
                         f"{_count(matching['independent'])}"
                         + "".join(f". Warning: {warning}" for warning in matching.get("warnings", [])))
        if record.tied_embeddings is not None:
            lines.append(f"- Input and output embeddings: {'tied' if record.tied_embeddings else 'untied'}"
                         + (", with an output bias" if getattr(record, "output_bias", None) else ""))
        distillation = _distillation_line(getattr(record, "distillation", None))
        if distillation:
            lines.append(f"- Token distillation: {distillation}")
        calibration = _calibration_line(getattr(record, "calibration", None))
        if calibration:
            lines.append(f"- Frequency calibration: {calibration}")
        separation = _separation_line(getattr(record, "separation", None))
        if separation:
            lines.append(f"- Kept off the source language: {separation}")
    lines.append("")

    figures = _transfer_figures(getattr(record, "metrics", None), config)
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


def _enrichment_lines(folder: Path, record: EnrichRecord, enriched: dict) -> list[str]:
    """What `langswap.enrich` did, from its record."""
    config, counts, norms = record.config, record.counts, record.change_norm
    method = enriched.get("method")
    anchors = " ".join(enriched.get("anchors") or [])
    how = (f"`blend={_value(config.get('blend'))}`" if method in ("lstsq", "procrustes")
           else f"u + proj(v_x - w); anchors: `` {anchors} ``")
    lines = [f"- Richly trained model (L1): `{_name(enriched.get('l1'))}`",
             f"- Dictionary: `{_name(config.get('dictionary'))}` ({_count(counts.get('translation_pairs'))} token "
             "pairs)",
             f"- Method: `{method}` ({how})",
             f"- Embedding rows changed: {_count(counts.get('rows_changed'))} of {_count(counts.get('l2_vocabulary'))}"
             + (f" (change norm mean {norms['mean']:.4f}, max {norms['max']:.4f})" if "mean" in norms else "")
             + ("; `provenance.tsv` lists them" if (folder / "provenance.tsv").is_file() else ""),
             f"- Output head: {enriched.get('output_head')}"]
    if enriched.get("added_words"):
        training = record.new_word_training
        trained = (f", then trained embeddings-only for {_updates(training.get('steps'))} on "
                   f"{_count(training.get('sentences'))} sentences of `{_name(config.get('target_text'))}`"
                   if training else "")
        lines.append(f"- Words added to the tokenizer: {_count(len(enriched['added_words']))} (rows started as the "
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


def distinct_precision(report: dict) -> str | None:
    """The held-out precision@1 over the words whose translations are spelled otherwise, for people; None where the
    report predates that measure."""
    if report.get("precision_at_1_distinct") is None:
        return None
    return (f"{report['precision_at_1_distinct']:.3f} (CSLS {report.get('precision_at_1_csls_distinct', 0):.3f}) on "
            f"the {_count(report.get('distinct_queries', 0))} whose translations are spelled otherwise")


def describe_choice(choice: dict) -> str:
    """Which of a method's candidate mappings a transfer kept, and on what grounds (`MethodResult.choice`)."""
    if "losses" in choice and all(loss is None for loss in choice["losses"].values()):
        return f"kept {choice['chosen']}, the first: no candidate's held-out loss was a finite number"
    if "losses" in choice:
        losses = ", ".join(f"{name} {'-' if loss is None else f'{loss:.4f}'}"
                           for name, loss in choice["losses"].items())
        return f"kept {choice['chosen']}, the lowest mean token loss on held-out target text ({losses} nats)"
    return f"kept {choice['chosen']} of {', '.join(choice.get('candidates', []))}: {choice.get('by', '')}"


def _extension_line(vocabulary: dict | None) -> str | None:
    """What an extended vocabulary kept and added (None for a replaced one, or a record without the field)."""
    if not vocabulary or vocabulary.get("mode") != "extended":
        return None
    first, last = vocabulary["new"]
    line = (f"extended: the source's {_count(vocabulary['kept'])} tokens keep their ids and rows (input, output and "
            f"bias copied bit for bit), {_count(last - first + 1)} new tokens at ids {_count(first)}-{_count(last)}")
    if vocabulary.get("padding"):
        start, stop = vocabulary["padding"]
        line += f", {_count(stop - start + 1)} padding rows ({_count(vocabulary['rows'])} rows in all)"
    return line


def _distillation_line(report: dict | None) -> str | None:
    """The transfer's token distillation (`langswap.transfer.distill`'s report), in one line."""
    if not report:
        return None
    if report.get("skipped"):
        return f"none ({report['skipped']})"
    text = f" of `{_name(report['text'])}`" if report.get("text") else ""
    line = (f"{_count(report.get('rows', 0))} rows learned from the source model reading {_count(report['tokens'])} "
            f"target tokens{text} ({_count(report['updates'])} updates)")
    if report.get("loss_start") is not None:
        line += f"; held-out distillation loss {report['loss_start']} -> {report['loss_end']}"
    if report.get("put_back"):
        line += f"; put back: {report['put_back']}"
    return line


def _separation_line(report: dict | None) -> str | None:
    """What `langswap.transfer.calibrate.separate` did to an extension's new rows, in one line."""
    if not report:
        return None
    if report.get("skipped"):
        return f"none ({report['skipped']})"
    text = f" of `{_name(report['source_text'])}`" if report.get("source_text") else ""
    accuracy = f"held-out accuracy {_value(report.get('direction_accuracy_held_out'))}"
    lines = report.get("check_lines") or {}
    how = ("set by calibration.separation" if report.get("chosen_by") == "calibration.separation" else
           f"chosen on {_count(lines.get('target', 0))} target and {_count(lines.get('source', 0))} source-language "
           "check lines")
    if report.get("amount"):
        line = (f"the new rows moved {_value(report['amount'])} along the direction that tells target-language "
                f"positions from source-language ones{text} ({accuracy}), their mean logit on target text kept; "
                f"the amount {how}")
    else:
        line = (f"no move along the direction that tells target-language positions from source-language "
                f"ones{text} ({accuracy}): the amount 0, {how}")
    losses = report.get("losses") or {}
    if losses:
        line += " (check losses target / source: " + ", ".join(
            f"{amount}: {_value(loss['target'])} / {_value(loss['source'])}" for amount, loss in losses.items()) + ")"
    return line


def _calibration_line(calibration: dict | None) -> str | None:
    """What `langswap.transfer.calibrate` did to the output rows (the held-out figures are measured after it)."""
    if not calibration:
        return None
    if calibration.get("skipped"):
        return f"none ({calibration['skipped']})"
    rows = f"{_count(calibration['rows'])} output rows" if calibration.get("rows") else "the output rows"
    text = f" of `{_name(calibration['text'])}`" if calibration.get("text") else ""
    through = f", through the {calibration['through']}" if calibration.get("through") else ""
    frequencies = calibration.get("frequencies") or calibration.get("smoothing") or {}
    if frequencies.get("estimate") == "held-out":
        smoothed = ", frequencies of rare tokens held out"
    else:
        smoothed = f", counts smoothed by {_value(frequencies['smoothing'])}" if "smoothing" in frequencies else ""
    up_only = calibration.get("up_only_rows") or {}
    if up_only.get("rows"):
        rare = ("never counted" if up_only["below_count"] == 1
                else f"counted fewer than {_count(up_only['below_count'])} times")
        smoothed += f", {_count(up_only['rows'])} rows of tokens {rare} moved up only"
    inputs = calibration.get("input_rows") or {}
    if inputs.get("moved"):
        shift = inputs.get("relative_shift", {})
        moved_inputs = (f"; the tied input rows moved with them ({_count(inputs['moved'])} rows; each move's size "
                        f"against its row's norm: median {_value(shift.get('median'))}, largest "
                        f"{_value(shift.get('max'))})")
    elif "input_rows" in calibration:
        moved_inputs = "; no input row moved"
    else:
        moved_inputs = ""
    return (f"{rows} moved towards the token frequencies{text} (strength {_value(calibration.get('strength'))}"
            f"{smoothed}{through}){moved_inputs}; held-out figures are of the calibrated model")


def _alignment_line(report: dict | None) -> str:
    if not report:
        return ""
    parts = []
    if report.get("pairs_used") is not None:
        pairs = f"rotation fitted on {_count(report['pairs_used'])} word pairs"
        if report.get("entries_covered") is not None and report.get("dictionary_entries") is not None:
            pairs += (f" ({_count(report['entries_covered'])} of {_count(report['dictionary_entries'])} dictionary "
                      "entries covered)")
        parts.append(pairs)
    if report.get("precision_at_1") is not None:
        precision = f"precision@1 {report['precision_at_1']:.3f}"
        if report.get("precision_at_1_csls") is not None:
            precision += f" (CSLS {report['precision_at_1_csls']:.3f})"
        if report.get("heldout_words"):
            precision += f" on {_count(report['heldout_words'])} held-out source words"
        distinct = distinct_precision(report)
        parts.append(precision + (f"; {distinct}" if distinct else ""))
    if report.get("pca"):
        parts.append(str(report["pca"]))
    return "; ".join(parts)


def _transfer_figures(metrics: dict | None, config: dict) -> list[str]:
    if not metrics:
        return []
    kind = metrics.get("kind") or "perplexity"
    measured = []
    if metrics.get("bits_per_byte") is not None:
        label = "pseudo bits per byte" if kind == "pseudo-perplexity" else "bits per byte"
        measured.append(f"- {label}: {metrics['bits_per_byte']:.4f}")
    if metrics.get("perplexity") is not None:
        measured.append(f"- {kind}: {metrics['perplexity']:,.2f} (per token of the new tokenizer)")
    if not measured:
        return []
    text = f" of `{_name(config['eval_text'])}`" if config.get("eval_text") else ""
    size = [f"{_count(metrics[key])} {key}" for key in ("bytes", "tokens") if metrics.get(key) is not None]
    lines = f"the first {_count(metrics['lines'])} non-empty lines{text}" if metrics.get("lines") else f"text{text}"
    where = (f"Measured right after the transfer, before any training, on {lines}"
             + (f" ({', '.join(size)})" if size else "") + ":")
    return [where, ""] + measured


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
    for phase in trained.phases:
        parts = [f"{phase.get('trainable', '?')} trained", f"{_count(phase.get('steps', 0))} updates"]
        if phase.get("learning_rate") is not None:
            parts.append(f"peak rate {phase['learning_rate']:g}")
        if phase.get("train_loss") is not None:
            parts.append(f"mean training loss {phase['train_loss']:.4f}")
        lines.append(f"- Phase `{phase.get('name', '?')}`: " + ", ".join(parts))
    final = trained.final_eval[-1:]
    if final:
        entry = final[0]
        what = "masked-LM loss (fixed masks)" if objective == "masked" else "loss"
        text = f" of `{_name(config['eval_text'])}`" if config.get("eval_text") else ""
        sequences = (f" on up to {_count(config['eval_sequences'])} packed sequences{text}"
                     if config.get("eval_sequences") else "")
        line = f"- Held-out {what} at the end (update {_count(entry.get('step'))}): {entry['loss']:.4f}{sequences}"
        if entry.get("bits_per_byte") is not None:
            line += (f"; bits per byte estimated from it: {entry['bits_per_byte']:.4f} (the loss over the held-out "
                     "text's bytes per token; `langswap evaluate` scores whole lines exactly)")
        lines.append(line)
    return lines


def _name(value) -> str:
    """A path's base name (the whole value when that is all there is); hub names stay whole."""
    if value is None:
        return ""
    text = str(value)
    if is_hub_name(text) and not Path(text).expanduser().exists():
        return text
    return Path(text).name or text


def _has_trained(trained: TrainingSection | None) -> bool:
    """A finished training, or a snapshot after at least one update (a snapshot at update 0 is the start model)."""
    if trained is None:
        return False
    return bool(trained.step) if trained.step is not None else bool(trained.phases)


def _updates(number) -> str:
    return f"{_count(number)} update" + ("" if number == 1 else "s")


def _count(number) -> str:
    return f"{number:,}" if isinstance(number, int) else str(number)


def _value(value) -> str:
    return json.dumps(value) if isinstance(value, (bool, type(None), list, dict)) else str(value)
