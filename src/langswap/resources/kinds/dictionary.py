"""Resource kind `dictionary`: a bilingual dictionary on its own, for methods that read its pairs directly.

Key: `resources.dictionary` (source<TAB>target pairs, the source model's language first; the `vectors` kind declares
the key, this kind reads it). Methods read `inputs.resource("dictionary")`, a `resources.dictionary.Dictionary`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from langswap.errors import MissingResourceError
from langswap.resources.dictionary import Dictionary
from langswap.resources.kinds import ResourceKind, register_resource


@dataclass(kw_only=True)
class DictionaryFiles:
    """No keys of its own: `resources.dictionary` is declared by the `vectors` kind."""


def check(config) -> None:
    path = config.resources.dictionary
    if not path:
        raise MissingResourceError("this method needs a bilingual dictionary: set resources.dictionary (a file of "
                                   "source<TAB>target lines, the source model's language first).")
    if not Path(path).is_file():
        raise MissingResourceError(f"resources.dictionary '{path}' does not exist.")


def load(config):
    dictionary = Dictionary.load(config.resources.dictionary)
    return dictionary, {"dictionary": config.resources.dictionary, "pairs": len(dictionary)}


def gives(config) -> bool:
    return bool(config.resources.dictionary)


def inputs(config) -> dict:
    return {"dictionary": config.resources.dictionary}


register_resource(ResourceKind("dictionary", DictionaryFiles, check, load, "a bilingual dictionary",
                               inputs=inputs, reads=("dictionary",), gives=gives))
