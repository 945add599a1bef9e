"""Resource kind `bilingual_vectors`: a bilingual dictionary and one fastText model of both languages trained on it.

Keys: `resources.dictionary` (source<TAB>target pairs; the `vectors` kind declares the key, this kind reads it too),
`resources.bilingual_vectors` (a model `langswap fasttext --dictionary` wrote; default: built from the dictionary
and cached, `langswap.resources.dictionary_fasttext`, with `resources.bilingual_epochs`) and `resources.compounds`
(which side's words also appear as parts of compounds in the corpus: auto = the target side when the config's
`language` is German or Dutch). Methods read `inputs.resource("bilingual_vectors")`, a `BilingualVectors`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from langswap.errors import ConfigError, MissingResourceError
from langswap.resources.dictionary import Dictionary
from langswap.resources.dictionary_fasttext import BILINGUAL_FASTTEXT, bilingual_fasttext, compounds
from langswap.resources.kinds import ResourceKind, register_resource
from langswap.resources.vectors import WordVectors

COMPOUNDS = ("auto", "none", "source", "target", "both")


@dataclass(kw_only=True)
class BilingualFiles:
    bilingual_vectors: str | None = field(default=None, metadata={
        "help": "Bilingual fastText model (.bin) of the dictionary, from `langswap fasttext --dictionary`; default: "
                "built from resources.dictionary and cached."})
    bilingual_epochs: int = field(default=5, metadata={
        "help": "fastText epochs over the dictionary corpus when the model is built here (Tik-to-Tok: 5; a "
                "dictionary of a few thousand pairs is undertrained at 5)."})
    compounds: str = field(default="auto", metadata={
        "help": "Which side's words the dictionary corpus also writes as parts of compounds: auto (the target side "
                "when `language` is de or nl), none, source, target or both.", "choices": COMPOUNDS})


@dataclass
class BilingualVectors:
    """The dictionary, and a `WordVectors` of the bilingual model whose words carry their language's tags
    (`langswap.resources.dictionary_fasttext.SOURCE_TAGS`, `TARGET_TAGS`)."""

    dictionary: object
    vectors: object
    report: dict | None = None


def compound_sides(config) -> tuple[bool, bool]:
    """(source side compounds, target side compounds) for a transfer or bench config."""
    setting = config.resources.compounds
    if setting == "auto":
        return False, compounds(getattr(config, "language", None), None)
    return setting in ("source", "both"), setting in ("target", "both")


def check(config) -> None:
    resources = config.resources
    if resources.compounds not in COMPOUNDS:
        raise ConfigError(f"resources.compounds is {resources.compounds!r}; choose one of: {', '.join(COMPOUNDS)}.")
    if resources.bilingual_epochs < 1:
        raise ConfigError(f"resources.bilingual_epochs is {resources.bilingual_epochs}; it must be at least 1.")
    if not resources.dictionary:
        raise MissingResourceError("this method needs a bilingual dictionary: set resources.dictionary (a file of "
                                   "source<TAB>target lines, the source model's language first).")
    for name in ("dictionary", "bilingual_vectors"):
        value = getattr(resources, name)
        if value and not Path(value).is_file():
            raise MissingResourceError(f"resources.{name} '{value}' does not exist.")


def load(config) -> tuple[BilingualVectors, dict]:
    resources = config.resources
    dictionary = Dictionary.load(resources.dictionary)
    source_compounds, target_compounds = compound_sides(config)
    options = dataclasses.replace(BILINGUAL_FASTTEXT, epoch=resources.bilingual_epochs)
    path = resources.bilingual_vectors or bilingual_fasttext(resources.dictionary, source_compounds, target_compounds,
                                                             options)
    vectors = WordVectors.load(path)
    if not vectors.has_subwords:
        raise MissingResourceError(f"resources.bilingual_vectors '{path}' has no character n-grams: give the .bin "
                                   "model `langswap fasttext --dictionary` writes, not a .vec file.")
    report = {"dictionary": resources.dictionary, "dictionary_pairs": len(dictionary), "bilingual_vectors": str(path),
              "words": len(vectors), "source_compounds": source_compounds, "target_compounds": target_compounds}
    return BilingualVectors(dictionary, vectors, report), report


def inputs(config) -> dict:
    resources = config.resources
    return {"dictionary": resources.dictionary, "bilingual_vectors": resources.bilingual_vectors,
            "compounds": compound_sides(config),
            "bilingual_epochs": None if resources.bilingual_vectors else resources.bilingual_epochs}


register_resource(ResourceKind("bilingual_vectors", BilingualFiles, check, load,
                               "a bilingual dictionary and a fastText model of both languages trained on it",
                               inputs=inputs, reads=("dictionary",)))
