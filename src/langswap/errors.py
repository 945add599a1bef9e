"""Errors that reach the user.

Every error raised for bad input is a `LangswapError`; its message names what was wrong and what to do about it.
The CLI prints the message as one paragraph and exits with code 2. Anything else is a bug and keeps its traceback.
"""


class LangswapError(Exception):
    """Bad input or a missing resource; the message says how to fix it."""


class ConfigError(LangswapError):
    """A config value, a `--set` override or a YAML key is unknown or out of range."""


class MissingResourceError(LangswapError):
    """A file, a package or a resource a method needs is not there."""


class VocabularyError(LangswapError):
    """Tokenizer and embedding matrix disagree, or a tokenizer lacks something a method needs."""


class ResourceFormatError(LangswapError):
    """A file exists but its contents are not in the expected format."""


class OutputExistsError(LangswapError):
    """The output folder exists and `overwrite` was not asked for."""


class NumericalError(LangswapError):
    """A model's weights or outputs hold NaN or infinite values, or a run produced them."""


class TrainingDivergedError(NumericalError):
    """Training produced a non-finite loss or gradient norm and stopped; the last good checkpoint is kept.
    `details` (phase, step, learning_rate, precision, reason) go into the run's record."""

    def __init__(self, message: str, **details):
        super().__init__(message)
        self.details = details


class OutputSpaceError(LangswapError):
    """The disk that would hold an output has too little free space for it."""


class OutputLockedError(LangswapError):
    """Another process is writing the same output folder (or file) now."""
