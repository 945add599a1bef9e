"""The `langswap` command: parse arguments -> build a config -> call one library function -> exit code.

Bad input (a `LangswapError`) prints one paragraph that says what to fix and exits with code 2; anything else is a
bug and keeps its traceback. Help texts and defaults are read from the config dataclasses, never repeated here.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import textwrap
from pathlib import Path

from langswap import __version__
from langswap.config import apply_overrides, as_number, dump_yaml, field_help, from_dict, load_yaml, to_dict
from langswap.errors import LangswapError
from langswap.locking import OutputLock
from langswap.files import refuse_existing
from langswap.resources.segment import SEGMENTER_NAMES

logger = logging.getLogger("langswap")


def describe_fields(config_cls, prefix: str = "") -> list[str]:
    """'key (default): help' lines for every field of a config dataclass, nested ones dotted."""
    lines = []
    for field in dataclasses.fields(config_cls):
        if not field.init:
            continue
        default = field.default if field.default is not dataclasses.MISSING else None
        if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            nested = field.default_factory()  # type: ignore[misc]
            if dataclasses.is_dataclass(nested):
                lines.extend(describe_fields(type(nested), f"{prefix}{field.name}."))
                continue
            default = nested
        if field.metadata.get("method_section"):  # a registered method's name and its options
            from langswap.methods.base import DEFAULT_METHOD

            lines.append(f"{prefix}{field.name}.name ({DEFAULT_METHOD!r}): {field_help(field)} "
                         f"{prefix}{field.name}.<option> sets one of its options.")
            continue
        lines.append(f"{prefix}{field.name} ({default!r}): {field_help(field)}")
    return lines


def count(text: str) -> int:
    """An argparse type for counts written as people write them: 2000, 2_000, 2e3."""
    number = as_number(text)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. 2000, 2_000 or 2e3)")
    return number


def add_flags(parser, config_cls, names: list[str]) -> None:
    """`--kebab-name` flags for these fields of `config_cls`, with the field's help, type and choices (a bool field
    is a switch); `config_flags` puts the given ones into the config mapping."""
    import typing

    fields = {field.name: field for field in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    for name in names:
        field = fields[name]
        flag = "--" + name.replace("_", "-")
        hint = hints[name]
        if hint is bool:
            parser.add_argument(flag, dest=name, action="store_true", default=None, help=field_help(field))
            continue
        numeric = {int, int | None}
        kind = count if hint in numeric else None
        choices = field.metadata.get("choices")
        parser.add_argument(flag, dest=name, type=kind, help=field_help(field) + (
            f" One of: {', '.join(choices)}." if choices else ""))


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


def cmd_init_config(args) -> int:
    from langswap.methods.base import make_config
    from langswap.transfer import TransferConfig
    from langswap.training.run import TrainConfig

    if args.kind == "train":
        config_cls, config = TrainConfig, TrainConfig()
    elif args.kind == "bench":
        from langswap.bench import BenchConfig

        config_cls, config = BenchConfig, BenchConfig()
    elif args.kind == "enrich":
        from langswap.enrich import EnrichConfig

        config_cls, config = EnrichConfig, EnrichConfig()
    else:
        config_cls, config = TransferConfig, TransferConfig(method=make_config(args.method))
    text = dump_yaml(to_dict(config))
    header = (f"# langswap {args.kind} config: every key with its default. Run: langswap {args.kind} THIS_FILE\n")
    for line in describe_fields(config_cls):
        header += "#   " + line + "\n"
    if args.output:
        from langswap.files import atomic_write_text

        atomic_write_text(args.output, header + text)
        print(f"wrote {args.output}")
    else:
        print(header + text, end="")
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
    from langswap.models import load_tokenizer, save_tokenizer
    from langswap.files import atomic_directory
    from langswap.resources.tokenizer import train_tokenizer

    source = load_tokenizer(args.source, "source tokenizer")
    with OutputLock(args.output, "tokenizer output folder"), atomic_directory(Path(args.output),
                                                                              args.overwrite) as folder:
        tokenizer = train_tokenizer(source, args.text, args.vocab_size, max_lines=args.max_lines, progress=not args.quiet)
        save_tokenizer(tokenizer, folder)
    print(f"wrote {args.output}: {len(tokenizer):,} tokens, family of {args.source}")
    return 0


def cmd_fasttext(args) -> int:
    from langswap.errors import ConfigError
    from langswap.resources.fasttext_train import FastTextConfig, train_fasttext

    output = Path(args.output)
    if args.joint:
        from langswap.resources.joint import JOINT_FASTTEXT, JointConfig, train_joint_vectors

        if not (args.text and args.dictionary):
            raise ConfigError("--joint TARGET_TEXT needs the source text (the positional TEXT) and --dictionary DICT, "
                              "whose words are switched between the two texts.")
        config = from_dict(FastTextConfig, apply_overrides(dataclasses.asdict(JOINT_FASTTEXT), _overrides(args)))
        joint = JointConfig(share=args.share, heldout_words=args.heldout_words, passes=args.passes,
                            target_segmenter=args.segmenter,
                            target_language=args.language)
        report = train_joint_vectors(args.text, args.joint, args.dictionary, output, joint, config,
                                     progress=not args.quiet, overwrite=args.overwrite)
        print(f"wrote {output} and {output.name}.words.json: {report['lines']:,} lines, "
              f"{report['switched']['source']:,} source and {report['switched']['target']:,} target words switched")
        if report.get("precision_at_1") is not None:
            print(f"held-out precision@1 {report['precision_at_1']} (CSLS {report['precision_at_1_csls']}) on "
                  f"{report['queries']:,} words{_distinct(report)}")
        return 0
    if args.tokenizer:
        from langswap.models import load_tokenizer
        from langswap.resources.token_vectors import FOCUS_FASTTEXT, train_token_fasttext

        if not args.text or args.dictionary:
            raise ConfigError("--tokenizer TOKENIZER trains token-level vectors on the positional TEXT (target-language "
                              "text); give TEXT and leave out --dictionary.")
        config = from_dict(FastTextConfig, apply_overrides(dataclasses.asdict(FOCUS_FASTTEXT), _overrides(args)))
        record = train_token_fasttext(args.text, load_tokenizer(args.tokenizer, "target tokenizer"), output, config,
                                      progress=not args.quiet, overwrite=args.overwrite)
        print(f"wrote {output} and {output.name}.tokens.json: {record['tokens']:,} tokens of text; "
              f"{record['covered_tokens']:,} of {record['vocabulary']:,} tokens have a vector of their own")
        return 0
    if bool(args.text) == bool(args.dictionary):
        raise ConfigError("give a text file to train word vectors on, or --dictionary DICT for bilingual vectors "
                          "of a dictionary (Tik-to-Tok), not both.")
    if args.dictionary:
        from langswap.resources.dictionary_fasttext import BILINGUAL_FASTTEXT, compounds, train_bilingual_fasttext

        config = from_dict(FastTextConfig, apply_overrides(dataclasses.asdict(BILINGUAL_FASTTEXT), _overrides(args)))
        sides = args.compounds or ("target" if compounds(args.language, None) else "none")
        train_bilingual_fasttext(args.dictionary, output, sides in ("source", "both"), sides in ("target", "both"),
                                 config, progress=not args.quiet, overwrite=args.overwrite)
    else:
        from langswap.resources.segment import segmenter

        config = from_dict(FastTextConfig, apply_overrides({}, _overrides(args)))
        train_fasttext(args.text, output, config, progress=not args.quiet, overwrite=args.overwrite,
                       segment=segmenter(args.segmenter, args.language))
    print(f"wrote {output}")
    return 0


def cmd_align(args) -> int:
    from langswap.resources.alignment import AlignConfig, align, write_alignment
    from langswap.resources.dictionary import Dictionary
    from langswap.files import atomic_directory
    from langswap.resources.vectors import WordVectors

    config = from_dict(AlignConfig, apply_overrides({}, _overrides(args)))
    with OutputLock(args.output, "alignment output folder"):
        refuse_existing(args.output, args.overwrite)  # before the alignment, not after it
        source = WordVectors.load(args.source_vectors)
        target = WordVectors.load(args.target_vectors)
        alignment = align(source, target, Dictionary.load(args.dictionary), config)
        with atomic_directory(Path(args.output), args.overwrite) as folder:
            write_alignment(folder, alignment.source, alignment.target, alignment.report)
            alignment.source.save_vec(folder / "source.aligned.vec", max_words=args.max_words)
    report = alignment.report
    print(f"wrote {args.output}: {report['word_pairs']:,} word pairs from {report['entries_covered']:,} of "
          f"{report['dictionary_entries']:,} entries; precision@1 {report['precision_at_1']} "
          f"(CSLS {report['precision_at_1_csls']}) on {report.get('heldout_words', 0)} held-out words "
          f"({report['queries']} queries, case variants included){_distinct(report)}")
    if report.get("pca"):
        print(report["pca"])
    return 0


def cmd_align_parallel(args) -> int:
    from langswap.models import load_tokenizer
    from langswap.resources.parallel import ParallelConfig, describe, table_from_files

    config = from_dict(ParallelConfig, apply_overrides({}, _overrides(args)))
    with OutputLock(args.output, "translation table folder"):
        refuse_existing(args.output, args.overwrite)  # before the alignment, not after it
        source_tokenizer = load_tokenizer(args.source_tokenizer, "source tokenizer")
        target_tokenizer = load_tokenizer(args.target_tokenizer, "target tokenizer")
        table = table_from_files(args.parallel, args.target_text, source_tokenizer, target_tokenizer, config)
        table.save(args.output, args.overwrite)
    print(f"wrote {args.output}: {describe(table.report)}")
    if table.report["skipped_empty"] or table.report["skipped_long"]:
        print(f"skipped {table.report['skipped_empty']:,} pairs with an empty side and "
              f"{table.report['skipped_long']:,} with a side over {config.max_tokens} tokens")
    return 0


def cmd_lexicon(args) -> int:
    from dataclasses import asdict

    from langswap.evaluation.lexicon import LexiconConfig, lexicon_induction
    from langswap.resources.alignment import load_alignment
    from langswap.resources.dictionary import Dictionary
    from langswap.resources.vectors import WordVectors

    config = from_dict(LexiconConfig, apply_overrides({}, _overrides(args)))
    source, target = WordVectors.load(args.source_vectors), WordVectors.load(args.target_vectors)
    if args.alignment:  # raw vectors + the rotation `langswap align` wrote
        source, target = load_alignment(args.alignment, source, target)
    report = lexicon_induction(source, target, Dictionary.load(args.dictionary), **asdict(config))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    ks = sorted(set(config.ks))
    print(f"{report['queries']:,} source words of {report['dictionary_entries']:,} dictionary entries, "
          f"{report['retrieval_candidates']:,} candidate translations")
    for k in ks:
        print(f"precision@{k}: nearest neighbour {report[f'precision_at_{k}']:.4f} | CSLS "
              f"{report[f'precision_at_{k}_csls']:.4f}")
    return 0


def _evaluate_config(args):
    from langswap.evaluation.options import EvaluateConfig

    return from_dict(EvaluateConfig, apply_overrides({}, _overrides(args)))


def cmd_evaluate(args) -> int:
    from langswap.errors import ConfigError
    from langswap.models import load_model, load_tokenizer, objective_of, pick_device

    if not (args.text or args.probe_pos or args.finetune or args.correspondence):
        raise ConfigError("nothing to evaluate: give --text (perplexity / bits per byte), --probe-pos TRAIN TEST, "
                          "--finetune TASK TRAIN TEST or --correspondence.")
    config = _evaluate_config(args)
    result: dict = {"model": args.model}
    if args.text or args.probe_pos:  # loaded once for both
        tokenizer = load_tokenizer(args.model)
        # a probe alone reads hidden states
        model = load_model(args.model, require_head=bool(args.text)).to(pick_device(config.device))
    if args.text:
        from langswap.evaluation.language_modeling import evaluate_model
        from langswap.resources.text import read_text_lines

        lines = read_text_lines(args.text, "evaluation text", max_lines=args.lines)
        options = {key: value for key, value in (("stride", config.stride), ("max_length", config.max_length),
                                                 ("probability", config.mlm_probability), ("seed", config.seed))
                   if value is not None}
        score = evaluate_model(model, tokenizer, lines, objective_of(model.config), progress=not args.quiet,
                               metric=config.metric, **options)
        result["language_modeling"] = {"text": args.text, **score.as_dict()}
        if not args.json:
            per_byte = "" if score.kind == "masked-lm-loss" else f" | bits per byte {score.bits_per_byte:.4f}"
            print(f"{score.kind} {score.perplexity:.3f}{per_byte} | {score.tokens:,} tokens, {score.bytes:,} "
                  f"bytes, {score.lines} lines")
    if args.probe_pos:
        from langswap.evaluation.probes import pos_probe

        probe = pos_probe(model, args.probe_pos[0], args.probe_pos[1], config.probe, progress=not args.quiet,
                          tokenizer=tokenizer)
        result["pos_probe"] = probe.as_dict()
        if not args.json:
            print(f"POS probe (layer {probe.layer}): accuracy {probe.accuracy:.4f} on {probe.test_words:,} words "
                  f"(majority baseline {probe.majority_baseline:.4f}; trained on {probe.train_words:,} words)")
    if args.zero_shot and not args.finetune:
        raise ConfigError("--zero-shot reads the test split of --finetune TASK TRAIN TEST through another model's "
                          "embeddings; give --finetune too.")
    if args.finetune:
        from langswap.evaluation.token_classification import finetune_token_classification

        task, train_path, test_path = args.finetune
        if task not in ("pos", "ner"):
            raise ConfigError(f"--finetune task is '{task}'; choose pos (.conllu files) or ner (CoNLL columns).")
        tuned = finetune_token_classification(args.model, train_path, test_path, task, config.finetune,
                                              progress=not args.quiet, output=args.finetune_output,
                                              zero_shot=args.zero_shot,
                                              overwrite=args.overwrite)
        result["finetune"] = tuned.as_dict()
        if not args.json:
            scores = f"accuracy {tuned.accuracy:.4f}" + (f", entity F1 {tuned.f1:.4f} (precision {tuned.precision:.4f}"
                                                         f", recall {tuned.recall:.4f})" if task == "ner" else "")
            print(f"fine-tuned {task}: {scores} on {tuned.test_words:,} words (majority baseline "
                  f"{tuned.majority_baseline:.4f})" + (f", read zero-shot through {tuned.zero_shot}"
                                                        if tuned.zero_shot else ""))
    if args.correspondence:
        from langswap.evaluation.correspondence import format_correspondence

        record = Path(args.model) / "langswap.json"
        rows = json.loads(record.read_text(encoding="utf-8")).get("correspondence") if record.exists() else None
        result["correspondence"] = rows or []
        if not args.json:
            print(format_correspondence(rows) if rows else "no langswap.json with correspondences in this folder")
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
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

    data = load_yaml(args.config)
    if args.output:
        data["output"] = args.output
    config = from_dict(BenchConfig, apply_overrides(data, _overrides(args)))
    result = run_bench(config, progress=not args.quiet)
    print((result["output"] / "table.md").read_text(encoding="utf-8"), end="")
    print(f"wrote {result['output']}: table.md, results.jsonl and a plot per metric")
    return 0


def cmd_demo(args) -> int:
    from langswap.demo.run import DemoConfig, run_demo

    config = from_dict(DemoConfig, apply_overrides({}, _overrides(args)))
    run_demo(config, workdir=Path(args.workdir) if args.workdir else None)
    return 0


# -- parser -------------------------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    from langswap.demo.run import DemoConfig
    from langswap.methods.base import DEFAULT_METHOD
    from langswap.transfer import TransferConfig
    from langswap.resources.alignment import AlignConfig
    from langswap.resources.parallel import ParallelConfig
    from langswap.resources.fasttext_train import FastTextConfig
    from langswap.bench import BenchConfig
    from langswap.enrich import EnrichConfig
    from langswap.evaluation.lexicon import LexiconConfig
    from langswap.evaluation.options import EvaluateConfig
    from langswap.training.run import TrainConfig

    parser = argparse.ArgumentParser(prog="langswap", description="Move a pretrained language model to a new "
                                     "language: new tokenizer, embeddings initialised from the old ones.")
    parser.add_argument("--version", action="version", version=f"langswap {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="Only warnings and results.")
    parser.add_argument("--plugin", action="append", default=[], metavar="FILE.py",
                        help="Import this Python file first, so the methods, resource kinds and recipes it registers "
                             "can be named (repeatable; give it to every process of a multi-GPU run).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    sub = commands.add_parser("methods", help="List the methods and their options.")
    sub.set_defaults(run=cmd_methods)

    sub = commands.add_parser("recipes", help="List the training recipes (train presets) and their options.")
    sub.set_defaults(run=cmd_recipes)

    sub = commands.add_parser("init-config", help="Write a transfer config with every default.")
    sub.add_argument("--for", dest="kind", choices=("transfer", "train", "bench", "enrich"), default="transfer",
                     help="Which command the config is for.")
    sub.add_argument("--method", default=DEFAULT_METHOD, help="Method whose options to include (transfer).")
    sub.add_argument("--output", help="File to write (default: print).")
    sub.set_defaults(run=cmd_init_config)

    sub = commands.add_parser("transfer", help="Transfer a model to a target tokenizer.", formatter_class=raw,
                              epilog=_set_help(TransferConfig))
    sub.add_argument("config", nargs="?", help="YAML config (`langswap init-config` writes one).")
    add_flags(sub, TransferConfig, TRANSFER_FLAGS)
    sub.add_argument("--method", help=f"Method name (`langswap methods`; default {DEFAULT_METHOD}).")
    _add_set(sub)
    sub.set_defaults(run=cmd_transfer)

    sub = commands.add_parser("train", help="Continue pretraining a model folder (phases, presets, resume).",
                              formatter_class=raw, epilog=_set_help(TrainConfig) + textwrap.dedent("""

        many GPUs: the Hugging Face Trainer is the engine, so launch as usual, e.g.
          accelerate launch -m langswap.cli train CONFIG.yaml
          torchrun --nproc_per_node 8 -m langswap.cli train CONFIG.yaml
        Rerun the same command to resume an interrupted run."""))
    sub.add_argument("config", nargs="?", help="YAML config (`langswap init-config --for train` writes one).")
    add_flags(sub, TrainConfig, TRAIN_FLAGS)
    _add_set(sub)
    sub.set_defaults(run=cmd_train)

    sub = commands.add_parser("prepare", help="Tokenise a run's training text once into token stores (`train` "
                              "builds them when missing); --list or --remove stores.", formatter_class=raw,
                              epilog=_set_help(TrainConfig))
    sub.add_argument("config", nargs="?", help="The train YAML config of the run (or the flags below).")
    add_flags(sub, TrainConfig, PREPARE_FLAGS)
    sub.add_argument("--list", action="store_true", help="List the token stores in the data folder: size, state "
                     "(ready, stale, damaged, unfinished), counts and files.")
    sub.add_argument("--remove", nargs="+", metavar="NAME", help="Remove these stores (names as --list shows them; "
                     "`all`: every store and unfinished build in the data folder).")
    _add_set(sub)
    sub.set_defaults(run=cmd_prepare)

    sub = commands.add_parser("enrich", help="TEMA: improve a poorly trained target-language model (L2) with the "
                              "embeddings of a richly trained one (L1) of the same width, through a dictionary.",
                              formatter_class=raw, epilog=_set_help(EnrichConfig))
    sub.add_argument("config", nargs="?", help="YAML config (`langswap init-config --for enrich` writes one).")
    add_flags(sub, EnrichConfig, ENRICH_FLAGS)
    _add_set(sub)
    sub.set_defaults(run=cmd_enrich)

    sub = commands.add_parser("bench", help="Compare methods at step 0 and after short training: table + plots.",
                              formatter_class=raw, epilog=_set_help(BenchConfig))
    sub.add_argument("config", help="Bench YAML (`langswap init-config --for bench` writes one).")
    sub.add_argument("--output", help="Output folder (overrides the YAML's).")
    _add_set(sub)
    sub.set_defaults(run=cmd_bench)

    sub = commands.add_parser("tokenizer", help="Train a target tokenizer of the source model's family.")
    sub.add_argument("--source", required=True, help="Source model or tokenizer folder.")
    sub.add_argument("--text", required=True, help="Target-language text, one line per paragraph (.txt/.gz).")
    sub.add_argument("--output", required=True)
    sub.add_argument("--vocab-size", type=count, default=None, help="Default: the source's vocabulary size.")
    sub.add_argument("--max-lines", type=count, default=None)
    sub.add_argument("--overwrite", action="store_true")
    sub.set_defaults(run=cmd_tokenizer)

    sub = commands.add_parser("fasttext", help="Train fastText word vectors on a text file, or bilingual ones on a "
                              "dictionary (--dictionary).", formatter_class=raw,
                              epilog=_set_help(FastTextConfig))
    sub.add_argument("text", nargs="?", help="Text to train word vectors on (or --dictionary).")
    sub.add_argument("--dictionary", help="Train bilingual vectors on the symmetrised corpus of this source<TAB>target "
                                          "dictionary instead (Tik-to-Tok: skip-gram, dim 64, n-grams 4-7, 5 epochs "
                                          "unless --set says otherwise); `tiktotok` reads it as "
                                          "resources.bilingual_vectors.")
    sub.add_argument("--joint", metavar="TARGET_TEXT", help="Train one model of two languages: TEXT (source) and "
                                                            "TARGET_TEXT, with --dictionary's words switched between "
                                                            "them (resources.joint_vectors for wechsel and others).")
    sub.add_argument("--share", type=float, default=0.5, help="With --joint: probability that a dictionary word is "
                                                               "switched (default 0.5).")
    sub.add_argument("--passes", type=int, default=1, help="With --joint: times each text is written into the "
                     "corpus, each time with its own random switches.")
    sub.add_argument("--heldout-words", type=int, default=1500, help="With --joint: dictionary source words never "
                                                                      "switched, to measure precision@1.")
    sub.add_argument("--tokenizer", help="Train token-level vectors instead: TEXT split by this (target) tokenizer, "
                                          "a fastText word per token (FOCUS: CBOW, dim 100, 3 epochs, minCount 10 "
                                          "unless --set says otherwise); `focus` reads it as resources.token_vectors.")
    sub.add_argument("--language", help="The language's ISO 639 code: of TEXT (of TARGET_TEXT with --joint), whose "
                                        "words zh, ja and th split with a segmenter; with --dictionary, de and nl "
                                        "compound.")
    sub.add_argument("--segmenter", choices=SEGMENTER_NAMES, default="auto",
                     help="How TEXT (TARGET_TEXT with --joint) is split into words: auto (by --language: jieba for "
                          "zh, fugashi for ja, pythainlp for th, else words), words (runs of letters), or a named "
                          "segmenter.")
    sub.add_argument("--compounds", choices=("none", "source", "target", "both"),
                     help="With --dictionary: whose words also appear as parts of compounds (default: target for "
                          "de and nl, else none).")
    sub.add_argument("--output", required=True, help="Model file, .bin.")
    sub.add_argument("--overwrite", action="store_true")
    _add_set(sub)
    sub.set_defaults(run=cmd_fasttext)

    sub = commands.add_parser("align", help="Align two word-vector spaces with a dictionary; report precision@1.",
                              formatter_class=raw, epilog=_set_help(AlignConfig))
    sub.add_argument("--source-vectors", required=True)
    sub.add_argument("--target-vectors", required=True)
    sub.add_argument("--dictionary", required=True, help="source<TAB>target lines.")
    sub.add_argument("--output", required=True, help="Folder: alignment.npy, source.aligned.vec, report.json.")
    sub.add_argument("--max-words", type=count, default=200_000, help="Words written to source.aligned.vec.")
    sub.add_argument("--overwrite", action="store_true")
    _add_set(sub)
    sub.set_defaults(run=cmd_align)

    sub = commands.add_parser("align-parallel", help="Word-align parallel text at the subword level (eflomal); save "
                              "translation probabilities p(source token | target token) for `ramen`.",
                              formatter_class=raw, epilog=_set_help(ParallelConfig))
    sub.add_argument("parallel", help="source<TAB>target lines, or the source side with --target-text.")
    sub.add_argument("--target-text", help="The target side, line i translating line i of the source side.")
    sub.add_argument("--source-tokenizer", required=True, help="The source model or its tokenizer.")
    sub.add_argument("--target-tokenizer", required=True)
    sub.add_argument("--output", required=True, help="Folder: translations.npz, report.json.")
    sub.add_argument("--overwrite", action="store_true")
    _add_set(sub)
    sub.set_defaults(run=cmd_align_parallel)

    sub = commands.add_parser("lexicon", help="Bilingual lexicon induction: precision@1/@5 (nearest neighbour and "
                              "CSLS) of aligned word vectors.", formatter_class=raw, epilog=_set_help(LexiconConfig))
    sub.add_argument("--source-vectors", required=True, help="Source vectors (.bin/.vec), aligned or raw.")
    sub.add_argument("--target-vectors", required=True)
    sub.add_argument("--dictionary", required=True, help="source<TAB>target test pairs (held out from the "
                     "alignment's pairs for a fair figure).")
    sub.add_argument("--alignment", help="alignment.npy from `langswap align`, applied to raw source vectors.")
    sub.add_argument("--json", action="store_true")
    _add_set(sub)
    sub.set_defaults(run=cmd_lexicon)

    sub = commands.add_parser("evaluate", help="Perplexity / bits per byte (pseudo-perplexity, masked-LM loss), POS "
                              "probe, token-classification fine-tuning.", formatter_class=raw,
                              epilog=_set_help(EvaluateConfig))
    sub.add_argument("model", help="Model folder with its tokenizer (transferred or not).")
    sub.add_argument("--text", help="Held-out text: perplexity and bits per byte (causal), pseudo-perplexity "
                     "(masked).")
    sub.add_argument("--lines", type=count, default=300, help="First N non-empty lines of --text are scored.")
    sub.add_argument("--probe-pos", nargs=2, metavar=("TRAIN.conllu", "TEST.conllu"),
                     help="Linear POS probe on frozen hidden states: trained on one split, accuracy on the other.")
    sub.add_argument("--finetune", nargs=3, metavar=("TASK", "TRAIN", "TEST"),
                     help="Fine-tune for token classification: pos (.conllu) or ner (CoNLL columns, BIO tags).")
    sub.add_argument("--finetune-output", help="Save the fine-tuned model here.")
    sub.add_argument("--zero-shot", metavar="TARGET_MODEL", help="With --finetune: fine-tune on TRAIN (source "
                     "language) with frozen embeddings, then tag TEST (target language) through TARGET_MODEL's "
                     "embeddings and tokenizer (RAMEN's zero-shot transfer).")
    sub.add_argument("--overwrite", action="store_true", help="Replace an existing --finetune-output.")
    sub.add_argument("--correspondence", action="store_true", help="Also show the transfer's token table.")
    sub.add_argument("--json", action="store_true")
    _add_set(sub)
    sub.set_defaults(run=cmd_evaluate)

    sub = commands.add_parser("demo", help="Transfer SmolLM2-135M to German with bundled data; print a table.",
                              formatter_class=raw, epilog=_set_help(DemoConfig))
    sub.add_argument("--workdir", help="Where vectors, tokenizer and the model go (default: the user cache).")
    _add_set(sub)
    sub.set_defaults(run=cmd_demo)
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
