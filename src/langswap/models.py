"""Loading models and tokenizers from folders or hub names, with errors that say what to fix.

The objective (causal or masked LM) is read from the config's architectures; a checkpoint without the weights of
its language-model head (a bare encoder or decoder body) is refused.
"""

from __future__ import annotations

import logging
from pathlib import Path

from langswap.errors import ConfigError, MissingResourceError, ResourceFormatError, VocabularyError

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


def load_model(name_or_path: str | Path, objective: str | None = None, require_head: bool = True):
    """Load a causal- or masked-LM model in the dtype it was saved in.

    A checkpoint that lacks weights the model needs (a bare `BertModel` or `LlamaModel` has no language-model head)
    is refused: transformers would fill them with random values and say nothing at langswap's log level. With
    `require_head=False` (the probes, which read hidden states only) such a model is loaded, with a warning."""
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    name = str(name_or_path)
    config = load_config(name)  # fails with a clear message before the weights are looked for
    objective = objective or objective_of(config)
    loader = AutoModelForMaskedLM if objective == "masked" else AutoModelForCausalLM
    try:
        model, info = loader.from_pretrained(name, dtype="auto", output_loading_info=True)
    except ValueError as error:  # an architecture without a causal/masked LM class (T5, vision models, ...)
        raise ConfigError(f"cannot load '{name}' as a {objective} language model: {str(error).splitlines()[0]} "
                          "langswap handles *ForCausalLM (GPT-2, Llama, ...) and *ForMaskedLM (BERT, RoBERTa) "
                          "models.") from error
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        architectures = ", ".join(getattr(config, "architectures", None) or ["no architectures in config.json"])
        message = (f"'{name}' ({architectures}) has no weights for {', '.join(missing[:4])}"
                   f"{f' and {len(missing) - 4} more' if len(missing) > 4 else ''}: loaded as a {objective} LM "
                   "these would be random.")
        if require_head:
            raise ResourceFormatError(message + " Give a checkpoint with its language-model head (*ForCausalLM or "
                                      "*ForMaskedLM, e.g. saved from AutoModelForCausalLM), not a bare encoder or "
                                      "decoder body.")
        logger.warning("%s Hidden states are unaffected.", message)
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
