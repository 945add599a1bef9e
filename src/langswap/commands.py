"""The smaller commands as library calls: what `langswap tokenizer`, `fasttext`, `align`, `align-parallel`, `lexicon`,
`evaluate` and `init-config` do, each a config dataclass (the command's flags, with their help and defaults) and a
function that runs it and returns what the command prints from.

The command line (`cli.py`) builds each command's flags from these fields and prints the result; options of the
algorithms underneath (`AlignConfig`, `ParallelConfig`, `LexiconConfig`, `FastTextConfig`, `EvaluateConfig`) stay
`--set key=value` settings of their own classes. A required path is an empty string by default, refused by the
command's `check` with the flag to give.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from langswap import __version__
from langswap.bench import BenchConfig
from langswap.config import apply_overrides, dump_yaml, field_help, from_dict, to_dict
from langswap.enrich import EnrichConfig
from langswap.errors import ConfigError
from langswap.evaluation.correspondence import format_correspondence
from langswap.evaluation.language_modeling import evaluate_model
from langswap.evaluation.lexicon import LexiconConfig, lexicon_induction
from langswap.evaluation.options import EvaluateConfig
from langswap.evaluation.probes import pos_probe
from langswap.evaluation.token_classification import finetune_token_classification
from langswap.files import atomic_directory, atomic_write_text, refuse_existing
from langswap.locking import OutputLock
from langswap.methods.base import DEFAULT_METHOD, config_fields, get_method, make_config, method_names
from langswap.models import load_model, load_tokenizer, objective_of, pick_device, save_tokenizer
from langswap.records import TokenizerRecord, has_model_record, read_model_record, write_tokenizer_record
from langswap.reports import AlignmentReport, CheckedLines, ExtensionReport, TokensPerByte, TokenVectorsReport
from langswap.resources.alignment import AlignConfig, align, load_alignment, write_alignment
from langswap.resources.dictionary import Dictionary
from langswap.resources.dictionary_fasttext import BILINGUAL_FASTTEXT, compounds, train_bilingual_fasttext
from langswap.resources.extension import changed_lines, extend_tokenizer, tokens_per_byte
from langswap.resources.fasttext_train import FastTextConfig, train_fasttext
from langswap.resources.joint import JOINT_FASTTEXT, JointConfig, train_joint_vectors
from langswap.resources.kinds import get_resource
from langswap.resources.parallel import ParallelConfig, table_from_files
from langswap.resources.segment import segmenter
from langswap.resources.text import read_text_lines
from langswap.resources.token_vectors import FOCUS_FASTTEXT, train_token_fasttext
from langswap.resources.tokenizer import train_tokenizer_report
from langswap.resources.vectors import WordVectors
from langswap.training.recipes import get_recipe, recipe_names
from langswap.training.run import TrainConfig, prepare
from langswap.training.store import format_size, list_stores, remove_stores, store_root
from langswap.transfer import TransferConfig


def _required(job, names: list[str], command: str) -> None:
    missing = [name for name in names if not getattr(job, name)]
    if missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise ConfigError(f"langswap {command} needs {flags}.")


def _joint_field(name: str, help: str | None = None) -> dataclasses.Field:
    """A field with the default and choices of `JointConfig.<name>`, for a flag that sets it; its help is `help` or,
    unset, JointConfig's after "With --joint: "."""
    source = {item.name: item for item in dataclasses.fields(JointConfig)}[name]
    return field(default=source.default, metadata={**source.metadata,
                                                   "help": help or "With --joint: " + source.metadata.get("help", "")})


# -- langswap tokenizer --------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class TokenizerJob:
    """`langswap tokenizer`: a target tokenizer of the source model's family, trained on target-language text; or,
    with `extend`, the source tokenizer itself with tokens of the target language added after its own."""

    source: str = field(default="", metadata={"help": "Source model or tokenizer folder (required)."})
    text: str = field(default="", metadata={"help": "Target-language text, one line per paragraph (.txt/.gz) "
                                                    "(required)."})
    output: str = field(default="", metadata={"help": "Folder the tokenizer is written to (required)."})
    vocab_size: int | None = field(default=None, metadata={"help": "Tokens in the new vocabulary; default: the "
                                                                   "source's vocabulary size. Not with --extend."})
    extend: int = field(default=0, metadata={
        "help": "Keep every source token at its id (special tokens, chat template and all) and add this many "
                "tokens learnt from the text after them, instead of training a replacement vocabulary (0)."})
    keep_text: str | None = field(default=None, metadata={
        "help": "With --extend, source-language text (.txt/.gz) that must tokenise exactly as before: a BPE "
                "tokenizer then never merges a pair of tokens that occurs in its words, and no new Unigram or "
                "WordPiece token is one that text would use (without it, source text changes wherever a new token "
                "applies)."})
    check_text: str | None = field(default=None, metadata={
        "help": "With --extend, held-out source-language text (.txt/.gz; not the --keep-text) read by the source "
                "and by the extended tokenizer: the lines they read otherwise are counted and reported."})
    keep_placeholders: bool = field(default=False, metadata={
        "help": "Carry the source's placeholder tokens (<unusedN>, [unusedN], <|reserved_special_token_N|>) into a "
                "replacement vocabulary; without it only added tokens with a role, those the chat template uses, "
                "those a config names and other non-placeholder ones are kept."})
    max_lines: int | None = field(default=None, metadata={"help": "Lines of the text read; default: all."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing output folder."})


@dataclass
class TokenizerResult:
    """The tokenizer written, and for an extension what was added and what it changes: tokens per byte of the text's
    last lines (up to 1,000, or a tenth of the text; lines it learnt from) read by the source and by the extended
    tokenizer, and with a check text the count of its lines the two read otherwise."""

    tokenizer: object
    extension: ExtensionReport | None = None
    trained: object = None  # resources.tokenizer.TrainedTokenizer of a replacement vocabulary
    output: str = ""
    source: str = ""

    def summary(self) -> str:
        if self.extension is not None:
            return self.extension.summary(self.output, self.source)
        return "\n".join([f"wrote {self.output}: {self.trained.summary()}"]
                         + [f"warning: {warning}" for warning in self.trained.warnings])


def train_target_tokenizer(job: TokenizerJob, progress: bool = False) -> TokenizerResult:
    """Train (or extend) the tokenizer `job` describes and write it to `job.output` (atomically)."""
    _required(job, ["source", "text", "output"], "tokenizer")
    if job.extend and job.vocab_size:
        raise ConfigError("give --vocab-size (a replacement vocabulary) or --extend (tokens added to the source's), "
                          "not both.")
    if job.keep_placeholders and job.extend:
        raise ConfigError("--keep-placeholders is for a replacement vocabulary; an extension keeps every source "
                          "token already.")
    for name in ("keep_text", "check_text"):
        if getattr(job, name) and not job.extend:
            raise ConfigError(f"--{name.replace('_', '-')} is for an extension; add --extend N (the tokens to add).")
    if job.extend < 0:
        raise ConfigError(f"--extend is {job.extend}; give the number of tokens to add (at least 1), or 0 for a "
                          "replacement vocabulary.")
    source = load_tokenizer(job.source, "source tokenizer")
    with OutputLock(job.output, "tokenizer output folder"), atomic_directory(Path(job.output),
                                                                             job.overwrite) as folder:
        if not job.extend:
            trained = train_tokenizer_report(source, job.text, job.vocab_size, max_lines=job.max_lines,
                                             progress=progress, keep_placeholders=job.keep_placeholders)
            save_tokenizer(trained.tokenizer, folder)
            write_tokenizer_record(folder, TokenizerRecord(langswap_version=__version__, job=dataclasses.asdict(job),
                                                           vocabulary=trained.report()))
            return TokenizerResult(trained.tokenizer, trained=trained, output=job.output, source=job.source)

        lines = read_text_lines(job.text, what="tokenizer training text", max_lines=job.max_lines)
        keep = read_text_lines(job.keep_text, what="source-language text to keep") if job.keep_text else None
        check = read_text_lines(job.check_text, what="source-language text to check") if job.check_text else None
        extension = extend_tokenizer(source, lines, job.extend, progress=progress, keep_lines=keep)
        save_tokenizer(extension.tokenizer, folder)
        sample = lines[-min(1000, max(1, len(lines) // 10)):]
        report = ExtensionReport.from_dict({
            **extension.report(), "sample_lines": len(sample), "keep_text": job.keep_text,
            "tokens_per_byte": TokensPerByte(source=round(tokens_per_byte(source, sample), 4),
                                             extended=round(tokens_per_byte(extension.tokenizer, sample), 4))})
        if check is not None:
            report.check_text = CheckedLines(text=job.check_text, lines=len(check),
                                             changed=changed_lines(source, extension.tokenizer, check))
        write_tokenizer_record(folder, TokenizerRecord(langswap_version=__version__, job=dataclasses.asdict(job),
                                                       extension=report))
        return TokenizerResult(extension.tokenizer, report, output=job.output, source=job.source)


# -- langswap fasttext ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class VectorsJob:
    """`langswap fasttext`: fastText vectors in one of four modes. Word vectors of TEXT (the default); bilingual
    vectors of a dictionary alone (`dictionary` without TEXT; Tik-to-Tok); one model of two languages on
    code-switched text (`joint`: TEXT is the source side); or token-level vectors of TEXT split by a target
    tokenizer (`tokenizer`; FOCUS)."""

    text: str | None = field(default=None, metadata={
        "help": "Text to train word vectors on (the source side with --joint); not with --dictionary alone.",
        "positional": True})
    output: str = field(default="", metadata={"help": "Model file, .bin (required)."})
    dictionary: str | None = field(default=None, metadata={
        "help": "Alone: train bilingual vectors on the symmetrised corpus of this source<TAB>target dictionary "
                "(Tik-to-Tok: skip-gram, dim 64, n-grams 4-7, 5 epochs unless --set says otherwise; `tiktotok` "
                "reads it as resources.bilingual_vectors). With --joint: the words switched between the texts."})
    joint: str | None = field(default=None, metadata={
        "help": "Train one model of two languages: TEXT (source) and this target text, with --dictionary's words "
                "switched between them (resources.joint_vectors for wechsel and others).",
        "metavar": "TARGET_TEXT"})
    share: float = _joint_field("share")
    passes: int = _joint_field("passes")
    heldout_words: int = _joint_field("heldout_words")
    tokenizer: str | None = field(default=None, metadata={
        "help": "Train token-level vectors instead: TEXT split by this (target) tokenizer, a fastText word per "
                "token (FOCUS: CBOW, dim 100, 3 epochs, minCount 10 unless --set says otherwise); `focus` reads "
                "it as resources.token_vectors."})
    language: str | None = field(default=None, metadata={
        "help": "The language's ISO 639 code: of TEXT (of TARGET_TEXT with --joint), whose words zh, ja and th "
                "split with a segmenter; with --dictionary alone, de and nl compound."})
    segmenter: str = _joint_field("target_segmenter", help=(
        "How TEXT (TARGET_TEXT with --joint) is split into words: auto (by --language: jieba for zh, fugashi for "
        "ja, pythainlp for th, else words), words (runs of letters), or a named segmenter."))
    compounds: str | None = field(default=None, metadata={
        "help": "With --dictionary alone: whose words also appear as parts of compounds (default: target for de "
                "and nl, else none).", "choices": ("none", "source", "target", "both")})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing model file."})

    @property
    def mode(self) -> str:
        """joint, tokens, dictionary or words."""
        if self.joint:
            return "joint"
        if self.tokenizer:
            return "tokens"
        return "dictionary" if self.dictionary and not self.text else "words"

    def check(self) -> None:
        _required(self, ["output"], "fasttext")
        if self.mode == "joint" and not (self.text and self.dictionary):
            raise ConfigError("--joint TARGET_TEXT needs the source text (the positional TEXT) and --dictionary DICT, "
                              "whose words are switched between the two texts.")
        if self.mode == "tokens" and (not self.text or self.dictionary):
            raise ConfigError("--tokenizer TOKENIZER trains token-level vectors on the positional TEXT "
                              "(target-language text); give TEXT and leave out --dictionary.")
        if self.mode == "words" and (not self.text or self.dictionary):
            raise ConfigError("give a text file to train word vectors on, or --dictionary DICT for bilingual vectors "
                              "of a dictionary (Tik-to-Tok), not both.")


@dataclass
class VectorsResult:
    """What `train_vectors` wrote: the mode, the output file and the mode's report."""

    mode: str
    output: str
    report: dict = field(default_factory=dict)

    def summary(self) -> str:
        output = Path(self.output)
        if self.mode == "joint":
            report = AlignmentReport.from_dict(self.report)
            line = (f"wrote {output} and {output.name}.words.json: {report.lines:,} lines, "
                    f"{report.switched.source:,} source and {report.switched.target:,} target words switched")
            if report.precision_at_1 is not None:
                distinct = report.distinct_precision()
                line += (f"\nheld-out precision@1 {report.precision_at_1} (CSLS {report.precision_at_1_csls}) on "
                         f"{report.queries:,} words" + (f"; {distinct}" if distinct else ""))
            return line
        if self.mode == "tokens":
            tokens = TokenVectorsReport.from_dict(self.report)
            return (f"wrote {output} and {output.name}.tokens.json: {tokens.tokens:,} tokens of text; "
                    f"{tokens.covered_tokens:,} of {tokens.vocabulary:,} tokens have a vector of their own")
        return f"wrote {output}"


def train_vectors(job: VectorsJob, overrides: list[str] = (), progress: bool = False) -> VectorsResult:
    """Train the vectors `job` describes into `job.output`, the fastText options of its mode's defaults with
    `overrides` (`key=value`, `FastTextConfig` fields) applied."""
    job.check()
    output = Path(job.output)

    def options(defaults) -> FastTextConfig:
        return from_dict(FastTextConfig, apply_overrides(dataclasses.asdict(defaults) if defaults else {},
                                                          list(overrides)))

    result = VectorsResult(job.mode, str(output))
    if job.mode == "joint":
        joint = JointConfig(share=job.share, heldout_words=job.heldout_words, passes=job.passes,
                            target_segmenter=job.segmenter, target_language=job.language)
        result.report = train_joint_vectors(job.text, job.joint, job.dictionary, output, joint,
                                            options(JOINT_FASTTEXT), progress=progress, overwrite=job.overwrite)
        return result
    if job.mode == "tokens":
        result.report = train_token_fasttext(job.text, load_tokenizer(job.tokenizer, "target tokenizer"), output,
                                             options(FOCUS_FASTTEXT), progress=progress, overwrite=job.overwrite)
        return result
    if job.mode == "dictionary":
        sides = job.compounds or ("target" if compounds(job.language, None) else "none")
        train_bilingual_fasttext(job.dictionary, output, sides in ("source", "both"), sides in ("target", "both"),
                                 options(BILINGUAL_FASTTEXT), progress=progress, overwrite=job.overwrite)
        result.report = {"compounds": sides}
        return result

    train_fasttext(job.text, output, options(None), progress=progress, overwrite=job.overwrite,
                   segment=segmenter(job.segmenter, job.language))
    return result


# -- langswap align, align-parallel, lexicon -----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class AlignJob:
    """`langswap align`: rotate source word vectors onto target ones with a dictionary (Procrustes)."""

    source_vectors: str = field(default="", metadata={"help": "Source word vectors, .bin or .vec (required)."})
    target_vectors: str = field(default="", metadata={"help": "Target word vectors, .bin or .vec (required)."})
    dictionary: str = field(default="", metadata={"help": "source<TAB>target lines (required)."})
    output: str = field(default="", metadata={"help": "Folder: alignment.npy, source.aligned.vec, report.json "
                                                      "(required)."})
    max_words: int = field(default=200_000, metadata={"help": "Words written to source.aligned.vec."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing output folder."})


@dataclass
class AlignResult:
    output: str
    report: AlignmentReport

    def summary(self) -> str:
        report = self.report
        distinct = report.distinct_precision()
        line = (f"wrote {self.output}: {report.word_pairs:,} word pairs from {report.entries_covered:,} of "
                f"{report.dictionary_entries:,} entries; precision@1 {report.precision_at_1} (CSLS "
                f"{report.precision_at_1_csls}) on {report.heldout_words or 0} held-out words ({report.queries} "
                "queries, case variants included)" + (f"; {distinct}" if distinct else ""))
        return line + (f"\n{report.pca}" if report.pca else "")


def align_vectors(job: AlignJob, config=None) -> AlignResult:
    """Align as `job` says (options: an `AlignConfig`), write the folder; returns the alignment's report."""
    _required(job, ["source_vectors", "target_vectors", "dictionary", "output"], "align")
    with OutputLock(job.output, "alignment output folder"):
        refuse_existing(job.output, job.overwrite)  # before the alignment, not after it
        source = WordVectors.load(job.source_vectors)
        target = WordVectors.load(job.target_vectors)
        alignment = align(source, target, Dictionary.load(job.dictionary), config or AlignConfig())
        with atomic_directory(Path(job.output), job.overwrite) as folder:
            write_alignment(folder, alignment.source, alignment.target, alignment.report)
            alignment.source.save_vec(folder / "source.aligned.vec", max_words=job.max_words)
    return AlignResult(job.output, alignment.report)


@dataclass(frozen=True, kw_only=True)
class AlignParallelJob:
    """`langswap align-parallel`: subword translation probabilities from word-aligned parallel text (eflomal)."""

    parallel: str = field(default="", metadata={
        "help": "source<TAB>target lines, or the source side with --target-text.", "positional": True})
    target_text: str | None = field(default=None, metadata={
        "help": "The target side, line i translating line i of the source side."})
    source_tokenizer: str = field(default="", metadata={"help": "The source model or its tokenizer (required)."})
    target_tokenizer: str = field(default="", metadata={"help": "The target tokenizer (required)."})
    output: str = field(default="", metadata={"help": "Folder: translations.npz, report.json (required)."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing output folder."})


@dataclass
class ParallelResult:
    output: str
    table: object  # resources.parallel.TranslationTable
    max_tokens: int

    def summary(self) -> str:
        report = self.table.report
        line = f"wrote {self.output}: {report.summary()}"
        if report.skipped_empty or report.skipped_long:
            line += (f"\nskipped {report.skipped_empty:,} pairs with an empty side and {report.skipped_long:,} "
                     f"with a side over {self.max_tokens} tokens")
        return line


def align_parallel(job: AlignParallelJob, config=None) -> ParallelResult:
    """Word-align the parallel text, save the translation table to `job.output`."""
    _required(job, ["parallel", "source_tokenizer", "target_tokenizer", "output"], "align-parallel")
    with OutputLock(job.output, "translation table folder"):
        refuse_existing(job.output, job.overwrite)  # before the alignment, not after it
        source_tokenizer = load_tokenizer(job.source_tokenizer, "source tokenizer")
        target_tokenizer = load_tokenizer(job.target_tokenizer, "target tokenizer")
        config = config or ParallelConfig()
        table = table_from_files(job.parallel, job.target_text, source_tokenizer, target_tokenizer, config)
        table.save(job.output, job.overwrite)
    return ParallelResult(job.output, table, config.max_tokens)


@dataclass(frozen=True, kw_only=True)
class LexiconJob:
    """`langswap lexicon`: bilingual lexicon induction with word vectors."""

    source_vectors: str = field(default="", metadata={"help": "Source vectors (.bin/.vec), aligned or raw "
                                                              "(required)."})
    target_vectors: str = field(default="", metadata={"help": "Target vectors (.bin/.vec) (required)."})
    dictionary: str = field(default="", metadata={
        "help": "source<TAB>target test pairs, held out from the alignment's pairs for a fair figure (required)."})
    alignment: str | None = field(default=None, metadata={
        "help": "alignment.npy from `langswap align`, applied to raw source vectors."})


@dataclass
class LexiconResult:
    report: dict
    ks: tuple

    def as_dict(self) -> dict:
        return self.report

    def summary(self) -> str:
        report = self.report
        return "\n".join([f"{report['queries']:,} source words of {report['dictionary_entries']:,} dictionary "
                          f"entries, {report['retrieval_candidates']:,} candidate translations"]
                         + [f"precision@{k}: nearest neighbour {report[f'precision_at_{k}']:.4f} | CSLS "
                            f"{report[f'precision_at_{k}_csls']:.4f}" for k in sorted(set(self.ks))])


def lexicon(job: LexiconJob, config=None) -> LexiconResult:
    """Precision@k of `job`'s vectors on its dictionary (options: a `LexiconConfig`)."""
    _required(job, ["source_vectors", "target_vectors", "dictionary"], "lexicon")
    config = config or LexiconConfig()
    source, target = WordVectors.load(job.source_vectors), WordVectors.load(job.target_vectors)
    if job.alignment:  # raw vectors + the rotation `langswap align` wrote
        source, target = load_alignment(job.alignment, source, target)
    return LexiconResult(lexicon_induction(source, target, Dictionary.load(job.dictionary),
                                           **dataclasses.asdict(config)), tuple(config.ks))


# -- langswap evaluate ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class EvaluateJob:
    """`langswap evaluate`: what to measure of a model folder; how is `EvaluateConfig` (`--set`)."""

    model: str = field(default="", metadata={"help": "Model folder with its tokenizer (transferred or not).",
                                             "positional": True})
    text: str | None = field(default=None, metadata={
        "help": "Held-out text: perplexity and bits per byte (causal), pseudo-perplexity (masked)."})
    lines: int = field(default=300, metadata={"help": "First N non-empty lines of --text are scored."})
    source_text: str | None = field(default=None, metadata={
        "help": "Source-language text (e.g. English) scored the same way, its first --lines lines read with the "
                "model's own tokenizer: what the source language keeps after a transfer."})
    probe_pos: tuple[str, ...] | None = field(default=None, metadata={
        "help": "Linear POS probe on frozen hidden states: trained on one split, accuracy on the other.",
        "nargs": 2, "metavar": ("TRAIN.conllu", "TEST.conllu")})
    finetune: tuple[str, ...] | None = field(default=None, metadata={
        "help": "Fine-tune for token classification: pos (.conllu) or ner (CoNLL columns, BIO tags).",
        "nargs": 3, "metavar": ("TASK", "TRAIN", "TEST")})
    finetune_output: str | None = field(default=None, metadata={"help": "Save the fine-tuned model here."})
    zero_shot: str | None = field(default=None, metadata={
        "help": "With --finetune: fine-tune on TRAIN (source language) with frozen embeddings, then tag TEST "
                "(target language) through TARGET_MODEL's embeddings and tokenizer (RAMEN's zero-shot transfer).",
        "metavar": "TARGET_MODEL"})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing --finetune-output."})
    correspondence: bool = field(default=False, metadata={"help": "Also show the transfer's token table."})

    def check(self) -> None:
        _required(self, ["model"], "evaluate")
        if not (self.text or self.source_text or self.probe_pos or self.finetune or self.correspondence):
            raise ConfigError("nothing to evaluate: give --text (perplexity / bits per byte), --source-text, "
                              "--probe-pos TRAIN TEST, --finetune TASK TRAIN TEST or --correspondence.")
        if self.zero_shot and not self.finetune:
            raise ConfigError("--zero-shot reads the test split of --finetune TASK TRAIN TEST through another model's "
                              "embeddings; give --finetune too.")
        if self.finetune and self.finetune[0] not in ("pos", "ner"):
            raise ConfigError(f"--finetune task is '{self.finetune[0]}'; choose pos (.conllu files) or ner (CoNLL "
                              "columns).")


@dataclass
class Evaluation:
    """What `evaluate` measured: each part None where it was not asked for."""

    model: str
    language_modeling: object = None  # evaluation.language_modeling.Score, with `text`
    text: str | None = None
    source_language_modeling: object = None  # the same of `source_text`
    source_text: str | None = None
    pos_probe: object = None  # evaluation.probes.ProbeResult
    finetune: object = None  # evaluation.token_classification.FinetuneResult
    correspondence: list | None = None  # rows of the transfer record's correspondence, [] where there are none
    task: str | None = None  # the fine-tuning task

    def summary(self) -> str:
        lines = []
        for score, label in ((self.language_modeling, ""), (self.source_language_modeling, "source text: ")):
            if score is None:
                continue
            per_byte = "" if score.kind == "masked-lm-loss" else (f" | bits per byte {score.bits_per_byte:.4f} | "
                                                                 f"tokens per byte {score.tokens_per_byte:.4f}")
            lines.append(f"{label}{score.kind} {score.perplexity:.3f}{per_byte} | {score.tokens:,} tokens, "
                         f"{score.bytes:,} bytes, {score.lines} lines")
        probe = self.pos_probe
        if probe is not None:
            lines.append(f"POS probe (layer {probe.layer}): accuracy {probe.accuracy:.4f} on {probe.test_words:,} "
                         f"words (majority baseline {probe.majority_baseline:.4f}; trained on {probe.train_words:,} "
                         "words)")
        tuned = self.finetune
        if tuned is not None:
            scores = f"accuracy {tuned.accuracy:.4f}" + (f", entity F1 {tuned.f1:.4f} (precision "
                                                         f"{tuned.precision:.4f}, recall {tuned.recall:.4f})"
                                                         if self.task == "ner" else "")
            lines.append(f"fine-tuned {self.task}: {scores} on {tuned.test_words:,} words (majority baseline "
                         f"{tuned.majority_baseline:.4f})" + (f", read zero-shot through {tuned.zero_shot}"
                                                               if tuned.zero_shot else ""))
        if self.correspondence is not None:
            lines.append(format_correspondence(self.correspondence) if self.correspondence
                         else "no transfer record with correspondences in this folder")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        result: dict = {"model": self.model}
        if self.language_modeling is not None:
            result["language_modeling"] = {"text": self.text, **self.language_modeling.as_dict()}
        if self.source_language_modeling is not None:
            result["source_language_modeling"] = {"text": self.source_text,
                                                  **self.source_language_modeling.as_dict()}
        if self.pos_probe is not None:
            result["pos_probe"] = self.pos_probe.as_dict()
        if self.finetune is not None:
            result["finetune"] = self.finetune.as_dict()
        if self.correspondence is not None:
            result["correspondence"] = self.correspondence
        return result


def evaluate(job: EvaluateJob, config=None, progress: bool = False) -> Evaluation:
    """Measure what `job` asks for (options: an `EvaluateConfig`)."""
    job.check()
    config = config or EvaluateConfig()
    result = Evaluation(model=job.model)
    scored = [path for path in (job.text, job.source_text) if path]
    if scored or job.probe_pos:  # loaded once for all
        tokenizer = load_tokenizer(job.model)
        # a probe alone reads hidden states
        model = load_model(job.model, require_head=bool(scored)).to(pick_device(config.device))
    if scored:
        options = {key: value for key, value in (("stride", config.stride), ("max_length", config.max_length),
                                                 ("probability", config.mlm_probability), ("seed", config.seed))
                   if value is not None}

        def score(path: str, what: str):
            lines = read_text_lines(path, what, max_lines=job.lines)
            return evaluate_model(model, tokenizer, lines, objective_of(model.config), progress=progress,
                                  metric=config.metric, **options)

        if job.text:
            result.language_modeling, result.text = score(job.text, "evaluation text"), job.text
        if job.source_text:
            result.source_language_modeling = score(job.source_text, "source-language text")
            result.source_text = job.source_text
    if job.probe_pos:
        result.pos_probe = pos_probe(model, job.probe_pos[0], job.probe_pos[1], config.probe, progress=progress,
                                     tokenizer=tokenizer)
    if job.finetune:
        task, train_path, test_path = job.finetune
        result.task = task
        result.finetune = finetune_token_classification(job.model, train_path, test_path, task, config.finetune,
                                                        progress=progress, output=job.finetune_output,
                                                        zero_shot=job.zero_shot, overwrite=job.overwrite)
    if job.correspondence:
        rows = getattr(read_model_record(job.model), "correspondence", None) if has_model_record(job.model) else None
        result.correspondence = rows or []
    return result


# -- langswap init-config ------------------------------------------------------------------------------------------

CONFIG_KINDS = ("transfer", "train", "bench", "enrich")


@dataclass(frozen=True, kw_only=True)
class InitConfigJob:
    """`langswap init-config`: a YAML config with every key at its default, each key's help in a comment."""

    kind: str = field(default="transfer", metadata={"help": "Which command the config is for.",
                                                    "choices": CONFIG_KINDS, "flag": "--for"})
    method: str | None = field(default=None, metadata={
        "help": "Method whose options to include (transfer); default: the default method."})
    output: str | None = field(default=None, metadata={"help": "File to write (default: print)."})


def init_config(job: InitConfigJob) -> str:
    """`langswap init-config`: the template written to `job.output` (then what to print says so), or printed."""
    text = config_template(job)
    if not job.output:
        return text.rstrip("\n")
    atomic_write_text(job.output, text)
    return f"wrote {job.output}"


def config_template(job: InitConfigJob) -> str:
    """The commented YAML `langswap init-config` writes."""
    if job.kind not in CONFIG_KINDS:
        raise ConfigError(f"init-config --for {job.kind!r}: choose one of {', '.join(CONFIG_KINDS)}.")
    if job.kind == "train":
        config = TrainConfig()
    elif job.kind == "bench":
        config = BenchConfig()
    elif job.kind == "enrich":
        config = EnrichConfig()
    else:
        config = TransferConfig(method=make_config(job.method or DEFAULT_METHOD))
    header = f"# langswap {job.kind} config: every key with its default. Run: langswap {job.kind} THIS_FILE\n"
    for line in describe_fields(type(config)):
        header += "#   " + line + "\n"
    return header + dump_yaml(to_dict(config))


def describe_fields(config_cls, prefix: str = "") -> list[str]:
    """'key (default): help' lines for every field of a config dataclass, nested ones dotted."""
    lines = []
    for item in dataclasses.fields(config_cls):
        if not item.init:
            continue
        default = item.default if item.default is not dataclasses.MISSING else None
        if item.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            nested = item.default_factory()  # type: ignore[misc]
            if dataclasses.is_dataclass(nested):
                lines.extend(describe_fields(type(nested), f"{prefix}{item.name}."))
                continue
            default = nested
        if item.metadata.get("method_section"):  # a registered method's name and its options

            lines.append(f"{prefix}{item.name}.name ({DEFAULT_METHOD!r}): {field_help(item)} "
                         f"{prefix}{item.name}.<option> sets one of its options.")
            continue
        lines.append(f"{prefix}{item.name} ({default!r}): {field_help(item)}")
    return lines


# -- langswap methods, recipes, prepare ------------------------------------------------------------------------------

def methods_listing() -> str:
    """`langswap methods`: every method, the resource kinds it needs or uses, and its options."""
    lines = []
    for name in method_names():
        spec = get_method(name)
        needed = spec.config_cls().needed_kinds()  # what the default options make an optional kind
        optional = tuple(kind for kind in spec.optional if kind not in needed)
        needs = "".join(
            f" ({label}: " + "; ".join(f"{kind}: {get_resource(kind).description}, resources."
                                       + ", resources.".join(get_resource(kind).keys() or get_resource(kind).reads)
                                       for kind in kinds) + ")"
            for label, kinds in (("needs", spec.requires), ("needs with its default options", needed),
                                 ("uses when given, or as its options say", optional)) if kinds)
        lines.append(f"{name}: {spec.description}{needs}")
        lines += [f"    {item.name} = {item.default!r}: {field_help(item)}" for item in config_fields(spec.config_cls)]
    return "\n".join(lines)


def recipes_listing() -> str:
    """`langswap recipes`: every training recipe and its options."""
    lines = []
    for name in recipe_names():
        recipe = get_recipe(name)
        lines.append(f"{name}: {recipe.description}")
        for item in dataclasses.fields(recipe.options_class):
            if item.init:
                default = (item.default_factory() if item.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                           else item.default)
                lines.append(f"    recipe.{item.name} = {default!r}: {field_help(item)}")
    return "\n".join(lines)


def prepare_stores(config, listing: bool = False, remove: list[str] | None = None, progress: bool = False) -> str:
    """`langswap prepare`: the token stores of a training config built (`training.run.prepare`), or the stores of
    its data folder removed and listed; what to print."""
    if not (listing or remove):
        return "\n".join(f"{store.folder}: {store.summary()}" for store in prepare(config, progress=progress))
    lines = [f"removed {folder}" for folder in (remove_stores(remove, config.data_dir) if remove else [])]
    if listing:
        rows = list_stores(config.data_dir)
        total = f"{len(rows)}, {format_size(sum(row['bytes'] for row in rows))}" if rows else "none"
        lines.append(f"token stores in {store_root(config.data_dir)}: {total}")
        for row in rows:
            counts = (f"{row['tokens']:,} tokens, {row['documents']:,} documents, {row['objective']}, tokenizer "
                      f"{row['tokenizer']}, " if "tokens" in row else "")
            files = ", ".join(row.get("files", []))
            lines.append(f"  {row['name']}  {format_size(row['bytes'])}  {row['status']}"
                         + (f"\n    {counts}{files}" if counts or files else ""))
    return "\n".join(lines)
