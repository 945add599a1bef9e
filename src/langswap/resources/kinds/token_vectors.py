"""Resource kind `token_vectors`: fastText vectors of the target tokenizer's tokens, from target text (FOCUS).

Keys: `resources.token_vectors` (a model `langswap fasttext TEXT --tokenizer TARGET_TOKENIZER` wrote, with its
`.tokens.json` sidecar) or `resources.token_text` (target-language text the model is trained on and cached,
`langswap.resources.token_vectors`; default: the config's `target_text`), and `resources.token_min_count` (fastText's
minCount there). Methods read `inputs.resource("token_vectors")`, a `TokenVectors`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from langswap.errors import ConfigError, MissingResourceError
from langswap.resources.kinds import ResourceKind, register_resource
from langswap.resources.token_vectors import FOCUS_FASTTEXT, load_token_vectors, token_fasttext, token_words


@dataclass(kw_only=True)
class TokenVectorsFiles:
    token_vectors: str | None = field(default=None, metadata={
        "help": "Token-level fastText model (.bin) of the target tokenizer, from `langswap fasttext TEXT "
                "--tokenizer TARGET_TOKENIZER`; default: trained on resources.token_text and cached."})
    token_text: str | None = field(default=None, metadata={
        "help": "Target-language text the token-level vectors are trained on; default: target_text."})
    token_min_count: int = field(default=10, metadata={
        "help": "Occurrences a token needs in token_text to get a vector of its own (fastText's minCount; FOCUS: "
                "10). Rarer tokens are left to the fallback."})


@dataclass
class TokenVectors:
    """A `WordVectors` whose words are the target tokenizer's tokens (`token_words` spells them), and its record."""

    vectors: object
    words: list[str]
    report: dict | None = None


def _text(config) -> str | None:
    return config.resources.token_text or getattr(config, "target_text", None)


def check(config) -> None:
    resources = config.resources
    if resources.token_min_count < 1:
        raise ConfigError(f"resources.token_min_count is {resources.token_min_count}; it must be at least 1.")
    if resources.token_vectors:
        if not Path(resources.token_vectors).is_file():
            raise MissingResourceError(f"resources.token_vectors '{resources.token_vectors}' does not exist.")
        return
    text = _text(config)
    if not text:
        raise MissingResourceError(
            "this method needs token-level vectors of the target tokenizer: set resources.token_text (target-language "
            "text, a line per paragraph; target_text serves when set), or resources.token_vectors (from `langswap "
            "fasttext TEXT --tokenizer TARGET_TOKENIZER`).")
    if not Path(text).is_file():
        raise MissingResourceError(f"resources.token_text '{text}' does not exist.")


def load(config, target_tokenizer) -> tuple[TokenVectors, dict]:
    resources = config.resources
    path = resources.token_vectors
    if not path:
        options = dataclasses.replace(FOCUS_FASTTEXT, minCount=resources.token_min_count)
        path = token_fasttext(_text(config), target_tokenizer, options)
    vectors, record = load_token_vectors(path, target_tokenizer)
    report = {"token_vectors": str(path), "text": record.get("text"), "tokens": record.get("tokens"),
              "covered_tokens": record.get("covered_tokens")}
    return TokenVectors(vectors, token_words(target_tokenizer), report), report


def inputs(config) -> dict:
    resources = config.resources
    return {"token_vectors": resources.token_vectors,
            "token_text": None if resources.token_vectors else _text(config),
            "token_min_count": None if resources.token_vectors else resources.token_min_count}


register_resource(ResourceKind("token_vectors", TokenVectorsFiles, check, load,
                               "fastText vectors of the target tokenizer's tokens, trained on target text",
                               inputs=inputs, uses_target_tokenizer=True))
