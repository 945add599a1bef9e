"""Resource kind `vectors`: word vectors of both languages in one shared space (what WECHSEL mixes by).

Keys: `resources.source_vectors` and `resources.target_vectors` (fastText .bin or .vec; `langswap fasttext` trains
them), and either `resources.dictionary` (source<TAB>target pairs; the source space is rotated onto the target's by
orthogonal Procrustes, options in the config's `align:` section) or `resources.alignment` (the rotation `langswap
align` wrote, used instead of fitting one). Or `resources.joint_vectors` alone: one fastText model of both languages
trained on code-switched text (`langswap fasttext SOURCE_TEXT --joint TARGET_TEXT --dictionary DICT`,
`resources.joint`), already one space. Methods read `inputs.resource("vectors")`, an `AlignedVectors`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from langswap.config import to_dict
from langswap.errors import ConfigError, MissingResourceError
from langswap.reports import AlignmentReport
from langswap.resources.alignment import align, load_alignment, write_alignment
from langswap.resources.dictionary import Dictionary
from langswap.resources.joint import load_joint_vectors
from langswap.resources.kinds import ResourceKind, register_resource
from langswap.resources.vectors import WordVectors

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class VectorsFiles:
    source_vectors: str | None = field(default=None, metadata={"help": "Source-language word vectors (.bin/.vec)."})
    target_vectors: str | None = field(default=None, metadata={"help": "Target-language word vectors (.bin/.vec)."})
    dictionary: str | None = field(default=None, metadata={"help": "Bilingual dictionary, source<TAB>target lines."})
    alignment: str | None = field(default=None, metadata={"help": "Rotation (.npy) written by `langswap align`; "
                                                                   "used instead of fitting one on the dictionary."})
    joint_vectors: str | None = field(default=None, metadata={
        "help": "One fastText model of both languages from code-switched text (`langswap fasttext SOURCE_TEXT "
                "--joint TARGET_TEXT --dictionary DICT`), instead of source_vectors, target_vectors and an "
                "alignment."})


@dataclass
class AlignedVectors:
    """Both languages' word vectors (`resources.vectors.WordVectors`) in one space, and how they got there."""

    source: object
    target: object
    report: AlignmentReport | None = None  # a JSON object (report.json, a joint model's words.json) is read into it

    def __post_init__(self):
        self.report = AlignmentReport.from_dict(self.report, "the aligned vectors' report")


def check(config) -> None:
    resources = config.resources
    if resources.joint_vectors:
        if not Path(resources.joint_vectors).is_file():
            raise MissingResourceError(f"resources.joint_vectors '{resources.joint_vectors}' does not exist.")
        given = [name for name in ("source_vectors", "target_vectors", "alignment") if getattr(resources, name)]
        if given:
            raise ConfigError(f"resources.joint_vectors holds both languages in one space; remove "
                              f"{', '.join('resources.' + name for name in given)}.")
        return
    if not resources.source_vectors or not resources.target_vectors:
        raise MissingResourceError(
            "this method needs word vectors for both languages: set resources.source_vectors and "
            "resources.target_vectors (fastText .bin or .vec; `langswap fasttext TEXT --output FILE.bin` trains "
            "them), and resources.dictionary or resources.alignment to align them.")
    if not resources.dictionary and not resources.alignment:
        raise MissingResourceError("word vectors of two languages need aligning: set resources.dictionary (a "
                                   "source<TAB>target file) or resources.alignment (from `langswap align`).")
    for name in ("source_vectors", "target_vectors", "dictionary", "alignment"):
        value = getattr(resources, name)
        if value and not Path(value).exists():
            raise MissingResourceError(f"resources.{name} '{value}' does not exist.")


def load_aligned(resources, align_config) -> AlignedVectors:
    """Load both vector files and bring them into one space, with the saved rotation or by fitting one."""
    if resources.joint_vectors:
        source, target, report = load_joint_vectors(resources.joint_vectors)
        return AlignedVectors(source, target, report)
    source = WordVectors.load(resources.source_vectors)
    target = WordVectors.load(resources.target_vectors)
    if resources.alignment:
        source, target = load_alignment(resources.alignment, source, target)
        report = {"alignment": resources.alignment}
        written = Path(resources.alignment).with_name("report.json")  # what `langswap align` measured, if beside it
        if written.is_file():
            try:
                report = {**json.loads(written.read_text(encoding="utf-8")), **report}
            except (ValueError, UnicodeDecodeError):
                logger.warning("'%s' is not a JSON report; the alignment's precision is unknown", written)
        return AlignedVectors(source, target, report)
    alignment = align(source, target, Dictionary.load(resources.dictionary), align_config)
    logger.debug("aligned vectors: %s pairs, precision@1 %s (CSLS %s)", alignment.report.pairs_used,
                 alignment.report.precision_at_1, alignment.report.precision_at_1_csls)
    return AlignedVectors(alignment.source, alignment.target, alignment.report)


def load(config) -> tuple[AlignedVectors, dict | None]:
    vectors = load_aligned(config.resources, config.align)
    return vectors, vectors.report


def prepare_shared(config, folder: Path) -> dict:
    """Align once into `folder` (alignment.npy and report.json) for every variant of a bench."""
    if config.resources.alignment or config.resources.joint_vectors:
        return {}
    vectors = load_aligned(config.resources, config.align)
    report = vectors.report
    logger.info("aligned vectors: %s pairs; held-out precision@1 %s (CSLS %s) on %s words",
                f"{report.pairs_used:,}", report.precision_at_1, report.precision_at_1_csls, report.heldout_words)
    write_alignment(folder, vectors.source, vectors.target, report)
    return {"alignment": "alignment.npy"}


def inputs(config) -> dict:
    return {**{key: getattr(config.resources, key) for key in VectorsFiles.__dataclass_fields__},
            "align": to_dict(config.align)}


def gives(config) -> bool:
    """Word vectors are given (a dictionary alone is not: other kinds read it too)."""
    resources = config.resources
    return bool(resources.joint_vectors or resources.source_vectors or resources.target_vectors)


register_resource(ResourceKind("vectors", VectorsFiles, check, load,
                               "word vectors of both languages, aligned into one space", prepare_shared, inputs,
                               gives=gives))
