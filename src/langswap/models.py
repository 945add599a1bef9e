"""Loading models and tokenizers from folders or hub names, with errors that say what to fix.

The objective (causal or masked LM) is read from the config's architectures; a model with neither head is refused.
"""

from __future__ import annotations

import logging
from pathlib import Path

from langswap.errors import MissingResourceError, VocabularyError

logger = logging.getLogger(__name__)

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "vocab.txt", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")


def objective_of(config) -> str:
    """'masked' for *ForMaskedLM architectures, 'causal' otherwise."""
    architectures = getattr(config, "architectures", None) or []
    if any(name.endswith("ForMaskedLM") for name in architectures):
        return "masked"
    return "causal"


def _quiet_transformers() -> None:
    import transformers

    transformers.logging.set_verbosity_error()


def load_config(name_or_path: str | Path):
    """A model's config (config.json) from a folder or hub name."""
    _quiet_transformers()
    from transformers import AutoConfig

    name = str(name_or_path)
    try:
        return AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as error:
        raise MissingResourceError(
            f"cannot load a model config from '{name}': {str(error).splitlines()[0]} Give a folder written by "
            "save_pretrained (with config.json), or a hub name while online.") from error


def load_model(name_or_path: str | Path, objective: str | None = None):
    """Load a causal- or masked-LM model in the dtype it was saved in."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    name = str(name_or_path)
    config = load_config(name)  # fails with a clear message before the weights are looked for
    objective = objective or objective_of(config)
    loader = AutoModelForMaskedLM if objective == "masked" else AutoModelForCausalLM
    model = loader.from_pretrained(name, dtype="auto")
    model.eval()
    return model


def load_tokenizer(name_or_path: str | Path, what: str = "tokenizer"):
    """A fast tokenizer from a folder or hub name."""
    _quiet_transformers()
    from transformers import AutoTokenizer

    name = str(name_or_path)
    if Path(name).is_dir() and not any((Path(name) / file).is_file() for file in TOKENIZER_FILES):
        # transformers 5 builds an empty tokenizer from config.json alone instead of failing
        raise MissingResourceError(
            f"cannot load the {what} from '{name}': the folder has no tokenizer files ({', '.join(TOKENIZER_FILES)}). "
            "Save the tokenizer into it (tokenizer.save_pretrained(folder)) or give the folder that has it.")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, use_fast=True)
    except (OSError, ValueError, TypeError) as error:
        raise MissingResourceError(
            f"cannot load the {what} from '{name}': {str(error).splitlines()[0]} Give a folder with tokenizer.json "
            "(a Hugging Face fast tokenizer; `langswap tokenizer` trains one), or a hub name while online.") from error
    if not getattr(tokenizer, "is_fast", False):
        raise VocabularyError(f"the {what} at '{name}' is a slow tokenizer; save it as a fast one (tokenizer.json).")
    return tokenizer
