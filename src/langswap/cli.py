"""The `langswap` command: parse arguments -> build a config -> call one library function -> exit code.

Bad input (a `LangswapError`) prints one paragraph that says what to fix and exits with code 2; anything else is a
bug and keeps its traceback. Help texts and defaults are read from the config dataclasses, never repeated here.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from langswap import __version__
from langswap.commands import describe_fields
from langswap.config import apply_overrides, as_number, field_help, from_dict, load_yaml
from langswap.errors import LangswapError

logger = logging.getLogger("langswap")


def count(text: str) -> int:
    """An argparse type for counts written as people write them: 2000, 2_000, 2e3."""
    number = as_number(text)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. 2000, 2_000 or 2e3)")
    return number


def add_flags(parser, config_cls, names: list[str]) -> None:
    """A flag for each of these fields of `config_cls`, with the field's help, type and choices: `--kebab-name` (or
    the field's "flag"), a switch for a bool field, a positional argument for a "positional" field, `nargs` values
    where the field says so. Every flag's default is None, so an absent flag leaves the field's own default;
    `config_flags` puts the given ones into the config mapping."""
    import typing

    fields = {field.name: field for field in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for name in names:
        field = fields[name]
        flag = field.metadata.get("flag", "--" + name.replace("_", "-"))
        hint = hints[name]
        if hint is bool:
            action = parser.add_argument(flag, dest=name, action="store_true", default=None, help=field_help(field))
            action.config_field = (config_cls, name)
            continue
        kind = count if hint in (int, int | None) else float if hint in (float, float | None) else None
        choices = field.metadata.get("choices")
        options = {"type": kind, "help": field_help(field) + (f" One of: {', '.join(choices)}." if choices else "")}
        for key in ("nargs", "metavar"):
            if key in field.metadata:
                options[key] = field.metadata[key]
        if field.metadata.get("positional"):
            required = field.default in ("", dataclasses.MISSING)
            action = parser.add_argument(name, **({} if required else {"nargs": "?", "default": None}), **options)
        else:
            action = parser.add_argument(flag, dest=name, **options)
        action.config_field = (config_cls, name)  # what the flag sets (tests/test_cli.py reads it)


def config_flags(args, data: dict, names: list[str]) -> dict:
    """`data` with the flags of `add_flags` that were given on the command line set."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            data[name] = value
    return data


TRANSFER_FLAGS = ["source_model", "target_tokenizer", "target_text", "output", "eval_text", "overwrite"]
ENRICH_FLAGS = ["l1", "l2", "dictionary", "output", "method", "target_text", "overwrite"]
TRAIN_FLAGS = ["model", "train_text", "eval_text", "output", "preset", "steps", "objective", "overwrite"]
PREPARE_FLAGS = ["model", "train_text", "preset", "objective", "text_field", "max_lines", "data_dir"]
BENCH_FLAGS = ["output"]
DEMO_FLAGS = ["full", "workdir"]
INIT_CONFIG_FLAGS = ["kind", "method", "output"]
TOKENIZER_FLAGS = ["source", "text", "output", "vocab_size", "extend", "keep_text", "check_text",
                   "keep_placeholders", "max_lines", "overwrite"]
FASTTEXT_FLAGS = ["text", "dictionary", "joint", "share", "passes", "heldout_words", "tokenizer", "language",
                  "segmenter", "compounds", "output", "overwrite"]
ALIGN_FLAGS = ["source_vectors", "target_vectors", "dictionary", "output", "max_words", "overwrite"]
ALIGN_PARALLEL_FLAGS = ["parallel", "target_text", "source_tokenizer", "target_tokenizer", "output", "overwrite"]
LEXICON_FLAGS = ["source_vectors", "target_vectors", "dictionary", "alignment"]
EVALUATE_FLAGS = ["model", "text", "lines", "source_text", "probe_pos", "finetune", "finetune_output", "zero_shot",
                  "overwrite", "correspondence"]


def _set_help(config_cls) -> str:
    return "keys for --set key=value:\n" + "\n".join("  " + line for line in describe_fields(config_cls))


def _overrides(args) -> list[str]:
    return list(getattr(args, "set", None) or [])


def _add_set(parser) -> None:
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                        help="Override a config value, e.g. --set method.neighbors=20 (repeatable).")


# -- commands ----------------------------------------------------------------------------------------------------------

def cmd_methods(args) -> int:
    from langswap.methods.base import config_fields, get_method, method_names
    from langswap.resources.kinds import get_resource

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
        print(f"{name}: {spec.description}{needs}")
        for field in config_fields(spec.config_cls):
            print(f"    {field.name} = {field.default!r}: {field_help(field)}")
    return 0


def cmd_recipes(args) -> int:
    from langswap.training.recipes import get_recipe, recipe_names

    for name in recipe_names():
        recipe = get_recipe(name)
        print(f"{name}: {recipe.description}")
        for field in dataclasses.fields(recipe.options_class):
            if field.init:
                default = (field.default_factory() if field.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                           else field.default)
                print(f"    recipe.{field.name} = {default!r}: {field_help(field)}")
    return 0


def _job(job_cls, args, names: list[str]):
    """The command's job from its flags (`add_flags`)."""
    return from_dict(job_cls, config_flags(args, {}, names))


def _options(config_cls, args):
    """The `--set key=value` options of the algorithm under a command."""
    return from_dict(config_cls, apply_overrides({}, _overrides(args)))


def cmd_init_config(args) -> int:
    from langswap.commands import InitConfigJob, config_template

    job = _job(InitConfigJob, args, INIT_CONFIG_FLAGS)
    text = config_template(job)
    if job.output:
        from langswap.files import atomic_write_text

        atomic_write_text(job.output, text)
        print(f"wrote {job.output}")
    else:
        print(text, end="")
    return 0


def _transfer_config(args):
    from langswap.transfer import TransferConfig

    data = config_flags(args, load_yaml(args.config) if args.config else {}, TRANSFER_FLAGS)
    if args.method:
        method = data.get("method")
        data["method"] = {**(method if isinstance(method, dict) else {}), "name": args.method}
    return from_dict(TransferConfig, apply_overrides(data, _overrides(args)))


def _distinct(report: dict) -> str:
    from langswap.modelcard import distinct_precision

    text = distinct_precision(report)
    return f"; {text}" if text else ""


def cmd_transfer(args) -> int:
    from langswap.evaluation.correspondence import format_correspondence
    from langswap.transfer import transfer

    config = _transfer_config(args)
    report = transfer(config, progress=not args.quiet)
    counts = " | ".join(f"{key} {value:,}" for key, value in report.counts.items())
    print(f"wrote {report.output}: {counts}")
    matching = report.matching or {}
    if "copied" in matching:  # its warnings are logged, and show with -q too
        print(f"copied {matching['copied']:,} of {matching['target_tokens']:,} target tokens "
              f"({matching['share_copied']:.1%}): {matching['copied_whole']:,} with a whole surface, of which an "
              f"independent count finds {matching['independent']:,} ({matching['agree']:,} agree), and "
              f"{matching['copied_partial']:,} byte or partial-character tokens")
    if report.alignment and "alignment" in report.alignment:  # a rotation given with resources.alignment
        measured = (f": {report.alignment['pairs_used']:,} pairs, precision@1 {report.alignment['precision_at_1']} "
                    f"(CSLS {report.alignment.get('precision_at_1_csls')}) when it was fitted"
                    if "pairs_used" in report.alignment else "")
        print(f"alignment: read from {report.alignment['alignment']}{measured}")
    elif report.alignment and "pairs_used" in report.alignment:
        print(f"alignment: {report.alignment['pairs_used']:,} pairs, precision@1 {report.alignment['precision_at_1']}"
              f" (CSLS {report.alignment['precision_at_1_csls']}){_distinct(report.alignment)}")
    elif report.alignment and "joint_vectors" in report.alignment:  # one space from the start: no rotation
        print(f"joint vectors {report.alignment['joint_vectors']}: held-out precision@1 "
              f"{report.alignment.get('precision_at_1')} (CSLS {report.alignment.get('precision_at_1_csls')})"
              f"{_distinct(report.alignment)}")
    if report.choice:
        from langswap.modelcard import describe_choice

        print(f"method {config.method.method_name}: {describe_choice(report.choice)}")
    if report.calibration and report.calibration.get("rows"):
        print(f"calibrated {report.calibration['rows']:,} output rows to the token frequencies of "
              f"{report.calibration.get('text')} (strength {report.calibration['strength']:g})")
    elif report.calibration and report.calibration.get("skipped"):
        print(f"no frequency calibration: {report.calibration['skipped']}")
    if report.metrics:
        print(f"{report.metrics['kind']} {report.metrics['perplexity']:.2f}, bits per byte "
              f"{report.metrics['bits_per_byte']:.4f} on {report.metrics['lines']} lines")
    if report.correspondence:
        print(format_correspondence(report.correspondence))
    return 0


def cmd_enrich(args) -> int:
    from langswap.enrich import EnrichConfig, enrich

    data = config_flags(args, load_yaml(args.config) if args.config else {}, ENRICH_FLAGS)
    config = from_dict(EnrichConfig, apply_overrides(data, _overrides(args)))
    report = enrich(config, progress=not args.quiet)
    counts = " | ".join(f"{key} {value:,}" for key, value in report.counts.items())
    print(f"wrote {report.output}: {counts}")
    if report.change_norm:
        print("row change (L2 norm): " + ", ".join(f"{key} {value:.4g}" for key, value in report.change_norm.items()
                                                   if isinstance(value, (int, float))))
    if report.added_words:
        shown = ", ".join(report.added_words[:10]) + (", ..." if len(report.added_words) > 10 else "")
        print(f"added {len(report.added_words):,} dictionary words to L2's vocabulary: {shown}")
    return 0


def cmd_tokenizer(args) -> int:
    from langswap.commands import TokenizerJob, train_target_tokenizer

    job = _job(TokenizerJob, args, TOKENIZER_FLAGS)
    result = train_target_tokenizer(job, progress=not args.quiet)
    extension = result.extension
    if extension is None:
        print(f"wrote {job.output}: {result.trained.summary()}")
        for warning in result.trained.warnings:
            print(f"warning: {warning}")
        return 0
    rate = extension["tokens_per_byte"]
    print(f"wrote {job.output}: the {extension['source_tokens']:,} tokens of {job.source} at their ids and "
          f"{extension['added']:,} new ones (ids {extension['ids'][0]:,}-{extension['ids'][1]:,}; {extension['family']})")
    print(f"tokens per byte on the last {extension['sample_lines']:,} lines of the text it learnt from: "
          f"{rate['source']:.4f} (source) -> "
          f"{rate['extended']:.4f} (extended), {rate['extended'] / rate['source']:.0%} of the source's")
    check = extension.get("check_text")
    if check:
        print(f"{check['changed']:,} of the {check['lines']:,} lines of {check['text']} read otherwise than with the "
              f"source tokenizer ({check['changed'] / max(1, check['lines']):.1%})")
    if extension["family"] == "BPE" and not extension["keep_text"]:
        print("source-language text reads as before except where two of its tokens form a new merge; --keep-text "
              "with some of it keeps it exactly as before")
    return 0


def cmd_fasttext(args) -> int:
    from langswap.commands import VectorsJob, train_vectors

    job = _job(VectorsJob, args, FASTTEXT_FLAGS)
    report = train_vectors(job, _overrides(args), progress=not args.quiet)
    output = Path(job.output)
    if job.mode == "joint":
        print(f"wrote {output} and {output.name}.words.json: {report['lines']:,} lines, "
              f"{report['switched']['source']:,} source and {report['switched']['target']:,} target words switched")
        if report.get("precision_at_1") is not None:
            print(f"held-out precision@1 {report['precision_at_1']} (CSLS {report['precision_at_1_csls']}) on "
                  f"{report['queries']:,} words{_distinct(report)}")
    elif job.mode == "tokens":
        print(f"wrote {output} and {output.name}.tokens.json: {report['tokens']:,} tokens of text; "
              f"{report['covered_tokens']:,} of {report['vocabulary']:,} tokens have a vector of their own")
    else:
        print(f"wrote {output}")
    return 0


def cmd_align(args) -> int:
    from langswap.commands import AlignJob, align_vectors
    from langswap.resources.alignment import AlignConfig

    job = _job(AlignJob, args, ALIGN_FLAGS)
    report = align_vectors(job, _options(AlignConfig, args))
    print(f"wrote {job.output}: {report['word_pairs']:,} word pairs from {report['entries_covered']:,} of "
          f"{report['dictionary_entries']:,} entries; precision@1 {report['precision_at_1']} "
          f"(CSLS {report['precision_at_1_csls']}) on {report.get('heldout_words', 0)} held-out words "
          f"({report['queries']} queries, case variants included){_distinct(report)}")
    if report.get("pca"):
        print(report["pca"])
    return 0


def cmd_align_parallel(args) -> int:
    from langswap.commands import AlignParallelJob, align_parallel
    from langswap.resources.parallel import ParallelConfig, describe

    job = _job(AlignParallelJob, args, ALIGN_PARALLEL_FLAGS)
    config = _options(ParallelConfig, args)
    table = align_parallel(job, config)
    print(f"wrote {job.output}: {describe(table.report)}")
    if table.report["skipped_empty"] or table.report["skipped_long"]:
        print(f"skipped {table.report['skipped_empty']:,} pairs with an empty side and "
              f"{table.report['skipped_long']:,} with a side over {config.max_tokens} tokens")
    return 0


def cmd_lexicon(args) -> int:
    from langswap.commands import LexiconJob, lexicon
    from langswap.evaluation.lexicon import LexiconConfig

    config = _options(LexiconConfig, args)
    report = lexicon(_job(LexiconJob, args, LEXICON_FLAGS), config)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['queries']:,} source words of {report['dictionary_entries']:,} dictionary entries, "
          f"{report['retrieval_candidates']:,} candidate translations")
    for k in sorted(set(config.ks)):
        print(f"precision@{k}: nearest neighbour {report[f'precision_at_{k}']:.4f} | CSLS "
              f"{report[f'precision_at_{k}_csls']:.4f}")
    return 0


def _evaluate_config(args):
    from langswap.evaluation.options import EvaluateConfig

    return _options(EvaluateConfig, args)


def cmd_evaluate(args) -> int:
    from langswap.commands import EvaluateJob, evaluate

    job = _job(EvaluateJob, args, EVALUATE_FLAGS)
    job.check()  # before the options are read
    result = evaluate(job, _evaluate_config(args), progress=not args.quiet)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
        return 0
    for score, label in ((result.language_modeling, ""), (result.source_language_modeling, "source text: ")):
        if score is None:
            continue
        per_byte = "" if score.kind == "masked-lm-loss" else (f" | bits per byte {score.bits_per_byte:.4f} | tokens "
                                                             f"per byte {score.tokens_per_byte:.4f}")
        print(f"{label}{score.kind} {score.perplexity:.3f}{per_byte} | {score.tokens:,} tokens, {score.bytes:,} "
              f"bytes, {score.lines} lines")
    probe = result.pos_probe
    if probe is not None:
        print(f"POS probe (layer {probe.layer}): accuracy {probe.accuracy:.4f} on {probe.test_words:,} words "
              f"(majority baseline {probe.majority_baseline:.4f}; trained on {probe.train_words:,} words)")
    tuned = result.finetune
    if tuned is not None:
        task = job.finetune[0]
        scores = f"accuracy {tuned.accuracy:.4f}" + (f", entity F1 {tuned.f1:.4f} (precision {tuned.precision:.4f}"
                                                     f", recall {tuned.recall:.4f})" if task == "ner" else "")
        print(f"fine-tuned {task}: {scores} on {tuned.test_words:,} words (majority baseline "
              f"{tuned.majority_baseline:.4f})" + (f", read zero-shot through {tuned.zero_shot}"
                                                    if tuned.zero_shot else ""))
    if result.correspondence is not None:
        from langswap.evaluation.correspondence import format_correspondence

        print(format_correspondence(result.correspondence) if result.correspondence
              else "no transfer record with correspondences in this folder")
    return 0


def _train_config(args):
    from langswap.training.run import TrainConfig

    data = config_flags(args, load_yaml(args.config) if args.config else {}, TRAIN_FLAGS)
    return from_dict(TrainConfig, apply_overrides(data, _overrides(args)))


def cmd_train(args) -> int:
    from langswap.training.run import train

    config = _train_config(args)
    report = train(config, progress=not args.quiet)
    if int(os.environ.get("RANK", "0")) != 0:  # one summary per run, not per process
        return 0
    for phase in report.phases:
        speed = f", {phase['tokens_per_second']:,.0f} tokens/s" if phase.get("tokens_per_second") else ""
        if speed and phase.get("data_wait") is not None:
            speed += f" ({100 * phase['data_wait']:.1f}% of it waiting for data)"
        print(f"phase {phase['name']}: {phase['steps']} updates, {phase['trainable_parameters']:,} trainable "
              f"parameters, final training loss {phase['train_loss']:.4f}{speed}")
    if report.curve.get("eval"):
        first, last = report.curve["eval"][0], report.curve["eval"][-1]
        key = "bits_per_byte" if "bits_per_byte" in last else "loss"
        print(f"held-out {key.replace('_', ' ')}: {first[key]:.4f} at step {first['step']} -> {last[key]:.4f} at "
              f"step {last['step']}")
    print(f"wrote {report.model} (curve: {report.output / 'curve.png'})")
    return 0


def cmd_prepare(args) -> int:
    from langswap.training.run import TrainConfig, prepare
    from langswap.training.store import format_size, list_stores, remove_stores, store_root

    data = config_flags(args, load_yaml(args.config) if args.config else {}, PREPARE_FLAGS)
    config = from_dict(TrainConfig, apply_overrides(data, _overrides(args)))
    if not (args.list or args.remove):
        for store in prepare(config, progress=not args.quiet):
            print(f"{store.folder}: {store.summary()}")
        return 0
    for folder in remove_stores(args.remove, config.data_dir) if args.remove else []:
        print(f"removed {folder}")
    if args.list:
        rows = list_stores(config.data_dir)
        total = f"{len(rows)}, {format_size(sum(row['bytes'] for row in rows))}" if rows else "none"
        print(f"token stores in {store_root(config.data_dir)}: {total}")
        for row in rows:
            counts = (f"{row['tokens']:,} tokens, {row['documents']:,} documents, {row['objective']}, tokenizer "
                      f"{row['tokenizer']}, " if "tokens" in row else "")
            files = ", ".join(row.get("files", []))
            print(f"  {row['name']}  {format_size(row['bytes'])}  {row['status']}" + (f"\n    {counts}{files}"
                                                                                      if counts or files else ""))
    return 0


def cmd_bench(args) -> int:
    from langswap.bench import BenchConfig, run_bench

    data = config_flags(args, load_yaml(args.config), BENCH_FLAGS)
    config = from_dict(BenchConfig, apply_overrides(data, _overrides(args)))
    result = run_bench(config, progress=not args.quiet)
    print((result["output"] / "table.md").read_text(encoding="utf-8"), end="")
    print(f"wrote {result['output']}: table.md, results.jsonl and a plot per metric")
    return 0


def cmd_demo(args) -> int:
    from langswap.demo.run import DemoConfig, run_demo

    config = from_dict(DemoConfig, apply_overrides(config_flags(args, {}, DEMO_FLAGS), _overrides(args)))
    run_demo(config)
    return 0


# -- parser -------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """One subcommand: its runner, the config fields its flags set, its YAML config positional and `--set` keys."""

    name: str
    help: str
    run: Callable
    fields: str | None = None  # "module:Class" whose fields `flags` become flags
    flags: tuple[str, ...] = ()
    config: str | None = None  # help of its YAML config positional (None: it takes none)
    config_required: bool = False
    keys: str | None = None  # "module:Class" whose keys `--set key=value` takes, listed in the epilog (None: no --set)
    epilog: str = ""  # after the keys
    extra: Callable | None = None  # adds the command's own arguments, after the flags


def _method_flag(sub) -> None:
    from langswap.methods.base import DEFAULT_METHOD

    sub.add_argument("--method", help=f"Method name (`langswap methods`; default {DEFAULT_METHOD}).")


def _store_flags(sub) -> None:
    sub.add_argument("--list", action="store_true", help="List the token stores in the data folder: size, state "
                     "(ready, stale, damaged, unfinished), counts and files.")
    sub.add_argument("--remove", nargs="+", metavar="NAME", help="Remove these stores (names as --list shows them; "
                     "`all`: every store and unfinished build in the data folder).")


def _json_flag(what: str) -> Callable:
    return lambda sub: sub.add_argument("--json", action="store_true", help=f"Print the {what} as JSON.")


TRAIN_EPILOG = textwrap.dedent("""

    many GPUs: the Hugging Face Trainer is the engine, so launch as usual, e.g.
      accelerate launch -m langswap.cli train CONFIG.yaml
      torchrun --nproc_per_node 8 -m langswap.cli train CONFIG.yaml
    Rerun the same command to resume an interrupted run.""")

COMMANDS = [
    Command("methods", "List the methods and their options.", cmd_methods),
    Command("recipes", "List the training recipes (train presets) and their options.", cmd_recipes),
    Command("init-config", "Write a transfer config with every default.", cmd_init_config,
            "langswap.commands:InitConfigJob", INIT_CONFIG_FLAGS),
    Command("transfer", "Transfer a model to a target tokenizer.", cmd_transfer, "langswap.transfer:TransferConfig",
            TRANSFER_FLAGS, config="YAML config (`langswap init-config` writes one).",
            keys="langswap.transfer:TransferConfig", extra=_method_flag),
    Command("train", "Continue pretraining a model folder (phases, presets, resume).", cmd_train,
            "langswap.training.run:TrainConfig", TRAIN_FLAGS,
            config="YAML config (`langswap init-config --for train` writes one).",
            keys="langswap.training.run:TrainConfig", epilog=TRAIN_EPILOG),
    Command("prepare", "Tokenise a run's training text once into token stores (`train` builds them when missing); "
            "--list or --remove stores.", cmd_prepare, "langswap.training.run:TrainConfig", PREPARE_FLAGS,
            config="The train YAML config of the run (or the flags below).",
            keys="langswap.training.run:TrainConfig", extra=_store_flags),
    Command("enrich", "TEMA: improve a poorly trained target-language model (L2) with the embeddings of a richly "
            "trained one (L1) of the same width, through a dictionary.", cmd_enrich, "langswap.enrich:EnrichConfig",
            ENRICH_FLAGS, config="YAML config (`langswap init-config --for enrich` writes one).",
            keys="langswap.enrich:EnrichConfig"),
    Command("bench", "Compare methods at step 0 and after short training: table + plots.", cmd_bench,
            "langswap.bench:BenchConfig", BENCH_FLAGS, config="Bench YAML (`langswap init-config --for bench` writes "
            "one).", config_required=True, keys="langswap.bench:BenchConfig"),
    Command("tokenizer", "Train a target tokenizer of the source model's family.", cmd_tokenizer,
            "langswap.commands:TokenizerJob", TOKENIZER_FLAGS),
    Command("fasttext", "Train fastText word vectors on a text file, or bilingual ones on a dictionary "
            "(--dictionary).", cmd_fasttext, "langswap.commands:VectorsJob", FASTTEXT_FLAGS,
            keys="langswap.resources.fasttext_train:FastTextConfig"),
    Command("align", "Align two word-vector spaces with a dictionary; report precision@1.", cmd_align,
            "langswap.commands:AlignJob", ALIGN_FLAGS, keys="langswap.resources.alignment:AlignConfig"),
    Command("align-parallel", "Word-align parallel text at the subword level (eflomal); save translation "
            "probabilities p(source token | target token) for `ramen`.", cmd_align_parallel,
            "langswap.commands:AlignParallelJob", ALIGN_PARALLEL_FLAGS,
            keys="langswap.resources.parallel:ParallelConfig"),
    Command("lexicon", "Bilingual lexicon induction: precision@1/@5 (nearest neighbour and CSLS) of aligned word "
            "vectors.", cmd_lexicon, "langswap.commands:LexiconJob", LEXICON_FLAGS,
            keys="langswap.evaluation.lexicon:LexiconConfig", extra=_json_flag("report")),
    Command("evaluate", "Perplexity / bits per byte (pseudo-perplexity, masked-LM loss), POS probe, "
            "token-classification fine-tuning.", cmd_evaluate, "langswap.commands:EvaluateJob", EVALUATE_FLAGS,
            keys="langswap.evaluation.options:EvaluateConfig", extra=_json_flag("results")),
    Command("demo", "Transfer SmolLM2-135M to German with bundled data; print a table.", cmd_demo,
            "langswap.demo.run:DemoConfig", DEMO_FLAGS, keys="langswap.demo.run:DemoConfig"),
]


def _class(path: str):
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def build_parser() -> argparse.ArgumentParser:
    """The parser: the program's own flags, then one subcommand per entry of COMMANDS."""
    parser = argparse.ArgumentParser(prog="langswap", description="Move a pretrained language model to a new "
                                     "language: new tokenizer, embeddings initialised from the old ones.")
    parser.add_argument("--version", action="version", version=f"langswap {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="Only warnings and results.")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="Import this Python file first, so the methods, resource kinds and recipes it registers "
                             "can be named (repeatable; give it to every process of a multi-GPU run).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        options = {}
        if command.keys:
            options = {"formatter_class": argparse.RawDescriptionHelpFormatter,
                       "epilog": _set_help(_class(command.keys)) + command.epilog}
        sub = commands.add_parser(command.name, help=command.help, **options)
        if command.config:
            sub.add_argument("config", **({} if command.config_required else {"nargs": "?"}), help=command.config)
        if command.fields:
            add_flags(sub, _class(command.fields), list(command.flags))
        if command.extra:
            command.extra(sub)
        if command.keys:
            _add_set(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    try:
        from langswap.registry import load_plugin

        for plugin in args.plugin:
            load_plugin(plugin)
        return args.run(args)
    except LangswapError as error:
        message = textwrap.fill(str(error), width=110, break_long_words=False, break_on_hyphens=False)
        print(f"langswap {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
