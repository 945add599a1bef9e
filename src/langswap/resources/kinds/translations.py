"""Resource kind `translations`: p(source token | target token) from word-aligned parallel text (RAMEN).

Keys: `resources.parallel_text` (source<TAB>target lines, or the source side with `resources.parallel_target`, the
target side line for line), aligned at the subword level with both tokenizers and cached
(`langswap.resources.parallel`), with `resources.parallel_min_count` and `resources.parallel_symmetrize`; or
`resources.translation_table`, a folder `langswap align-parallel` wrote, checked to belong to both tokenizers.
Methods read `inputs.resource("translations")`, a `TranslationTable`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from langswap.errors import ConfigError, MissingResourceError
from langswap.reports import TableReport
from langswap.resources.kinds import ResourceKind, register_resource
from langswap.resources.parallel import ParallelConfig, TranslationTable, cached_translation_table


@dataclass(kw_only=True)
class TranslationsFiles:
    parallel_text: str | None = field(default=None, metadata={
        "help": "Parallel text: source<TAB>target lines, or the source side with resources.parallel_target."})
    parallel_target: str | None = field(default=None, metadata={
        "help": "The target side of resources.parallel_text, line i translating its line i."})
    translation_table: str | None = field(default=None, metadata={
        "help": "A folder `langswap align-parallel` wrote, instead of aligning resources.parallel_text."})
    parallel_min_count: int = field(default=2, metadata={
        "help": "Links a token pair needs in the aligned parallel text to keep its probability."})
    parallel_symmetrize: str = field(default="grow-diag-final-and", metadata={
        "help": "How the aligner's two directions are combined: grow-diag-final-and or intersection."})


def parallel_config(resources):
    return ParallelConfig(min_count=resources.parallel_min_count, symmetrize=resources.parallel_symmetrize)


def check(config) -> None:
    resources = config.resources
    parallel_config(resources)  # bad options: an error naming them
    if resources.translation_table:
        if resources.parallel_text or resources.parallel_target:
            raise ConfigError("resources.translation_table is already aligned parallel text; remove "
                              "resources.parallel_text and resources.parallel_target, or the table.")
        if not Path(resources.translation_table).exists():
            raise MissingResourceError(f"resources.translation_table '{resources.translation_table}' does not "
                                       "exist.")
        return
    if not resources.parallel_text:
        raise MissingResourceError(
            "this method needs translation probabilities: set resources.parallel_text (source<TAB>target lines, or "
            "the source side with resources.parallel_target) or resources.translation_table (from `langswap "
            "align-parallel`).")
    for name in ("parallel_text", "parallel_target"):
        value = getattr(resources, name)
        if value and not Path(value).is_file():
            raise MissingResourceError(f"resources.{name} '{value}' does not exist.")


# what a transfer's record keeps of the table's report
KEPT = ("pairs_used", "skipped_empty", "skipped_long", "links", "covered_tokens", "coverage", "covered_occurrences",
        "mean_entropy", "options", "text")


def load(config, target_tokenizer, source_tokenizer):
    resources = config.resources
    if resources.translation_table:
        table = TranslationTable.load_for(resources.translation_table, source_tokenizer, target_tokenizer,
                                          f"resources.translation_table '{resources.translation_table}'")
    else:
        table = cached_translation_table(resources.parallel_text, resources.parallel_target, source_tokenizer,
                                         target_tokenizer, parallel_config(resources))
    report = TableReport(**{item.name: getattr(table.report, item.name) for item in dataclasses.fields(TableReport)
                            if item.name in KEPT},
                         extra={"translation_table": resources.translation_table})
    return table, report


register_resource(ResourceKind("translations", TranslationsFiles, check, load,
                               "translation probabilities between the two tokenizers' tokens, from parallel text",
                               uses_target_tokenizer=True, uses_source_tokenizer=True))
