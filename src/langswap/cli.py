"""The `langswap` command: parse arguments -> build a config -> call one library function -> print its summary.

Every subcommand is an entry of `COMMANDS`: its runner, the config class whose fields marked for it become its flags
(`"cli"` in a field's metadata names the commands; a class that marks none gives every field), its YAML config
positional and the class whose keys `--set key=value` takes. A runner returns what the command made; the command prints
its `summary()` (or, with `--json`, its `as_dict()`). Bad input (a `LangswapError`) prints one paragraph that says what
to fix and exits with code 2; anything else is a bug and keeps its traceback. Help texts and defaults are read from
the config dataclasses, never repeated here.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap
from dataclasses import dataclass
from typing import Callable

from langswap import __version__
from langswap.bench import BenchConfig, run_bench
from langswap.commands import (AlignJob, AlignParallelJob, EvaluateJob, InitConfigJob, LexiconJob, TokenizerJob,
                               VectorsJob, align_parallel, align_vectors, describe_fields, evaluate, init_config,
                               lexicon, methods_listing, prepare_stores, recipes_listing, train_target_tokenizer,
                               train_vectors)
from langswap.config import add_flags, apply_overrides, config_flags, from_dict, load_yaml
from langswap.demo.run import DemoConfig, run_demo
from langswap.enrich import EnrichConfig, enrich
from langswap.errors import LangswapError
from langswap.evaluation.lexicon import LexiconConfig
from langswap.evaluation.options import EvaluateConfig
from langswap.methods.base import DEFAULT_METHOD
from langswap.registry import load_plugin
from langswap.resources.alignment import AlignConfig
from langswap.resources.fasttext_train import FastTextConfig
from langswap.resources.parallel import ParallelConfig
from langswap.training.run import TrainConfig, train
from langswap.transfer import TransferConfig, transfer
from langswap.transfer.prune import PruneJob, prune

logger = logging.getLogger("langswap")


def _overrides(args) -> list[str]:
    return list(getattr(args, "set", None) or [])


def _options(config_cls, args):
    """The `--set key=value` options of the algorithm under a command."""
    return from_dict(config_cls, apply_overrides({}, _overrides(args)))


# -- the commands ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """One subcommand: its runner `(config, args) -> what it made`, the config class whose fields become its flags,
    its YAML config positional and `--set` keys."""

    name: str
    help: str
    run: Callable
    fields: type | None = None  # the config built from the flags (and the YAML config, and --set)
    config: str | None = None  # help of its YAML config positional (None: it takes none)
    config_required: bool = False
    keys: type | None = None  # the class whose keys `--set key=value` takes, listed in the epilog (None: no --set)
    epilog: str = ""  # after the keys
    extra: Callable | None = None  # adds the command's own arguments, after the flags
    amend: Callable | None = None  # (config mapping, args) -> the mapping with what `extra`'s arguments set

    def build(self, args):
        """The command's config: its YAML file, then its flags, then `--set` where the keys are the config's."""
        if self.fields is None:
            return None
        data = config_flags(args, load_yaml(args.config) if self.config and args.config else {}, self.fields,
                            self.name)
        if self.amend is not None:
            data = self.amend(data, args)
        return from_dict(self.fields, apply_overrides(data, _overrides(args) if self.keys is self.fields else []))


def _progress(function: Callable) -> Callable:
    """A runner calling `function` on the config, with a progress bar unless -q."""
    return lambda config, args: function(config, progress=not args.quiet)


def _with_options(function: Callable, options_cls, progress: bool = False) -> Callable:
    """A runner calling `function` on the config and the `--set` options (an `options_cls`)."""
    return lambda config, args: function(config, _options(options_cls, args),
                                         **({"progress": not args.quiet} if progress else {}))


def _evaluate(job: EvaluateJob, args):
    job.check()  # before the options are read
    return evaluate(job, _options(EvaluateConfig, args), progress=not args.quiet)


def _train(config: TrainConfig, args):
    report = train(config, progress=not args.quiet)
    return report if int(os.environ.get("RANK", "0")) == 0 else None  # one summary per run, not per process


def _demo(config: DemoConfig, args) -> None:
    run_demo(config)  # prints its own table as it goes


def _method_flag(sub) -> None:
    sub.add_argument("--method", help=f"Method name (`langswap methods`; default {DEFAULT_METHOD}).")


def _method_name(data: dict, args) -> dict:
    """`--method NAME` sets the method section's name, the options the config gives kept."""
    if args.method:
        method = data.get("method")
        data["method"] = {**(method if isinstance(method, dict) else {}), "name": args.method}
    return data


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
    Command("methods", "List the methods and their options.", lambda config, args: methods_listing()),
    Command("recipes", "List the training recipes (train presets) and their options.",
            lambda config, args: recipes_listing()),
    Command("init-config", "Write a transfer config with every default.", lambda job, args: init_config(job),
            InitConfigJob),
    Command("transfer", "Transfer a model to a target tokenizer.", _progress(transfer), TransferConfig,
            config="YAML config (`langswap init-config` writes one).", keys=TransferConfig, extra=_method_flag,
            amend=_method_name),
    Command("train", "Continue pretraining a model folder (phases, presets, resume).", _train, TrainConfig,
            config="YAML config (`langswap init-config --for train` writes one).", keys=TrainConfig,
            epilog=TRAIN_EPILOG),
    Command("prepare", "Tokenise a run's training text once into token stores (`train` builds them when missing); "
            "--list or --remove stores.",
            lambda config, args: prepare_stores(config, args.list, args.remove, progress=not args.quiet),
            TrainConfig, config="The train YAML config of the run (or the flags below).", keys=TrainConfig,
            extra=_store_flags),
    Command("enrich", "TEMA: improve a poorly trained target-language model (L2) with the embeddings of a richly "
            "trained one (L1) of the same width, through a dictionary.", _progress(enrich), EnrichConfig,
            config="YAML config (`langswap init-config --for enrich` writes one).", keys=EnrichConfig),
    Command("bench", "Compare methods at step 0 and after short training: table + plots.", _progress(run_bench),
            BenchConfig, config="Bench YAML (`langswap init-config --for bench` writes one).", config_required=True,
            keys=BenchConfig),
    Command("tokenizer", "Train a target tokenizer of the source model's family.", _progress(train_target_tokenizer),
            TokenizerJob),
    Command("prune", "Take an extended model's new tokens out where they cost more than they save on held-out text "
            "(and source-language text): a smaller tokenizer and model.", _progress(prune), PruneJob),
    Command("fasttext", "Train fastText word vectors on a text file, or bilingual ones on a dictionary "
            "(--dictionary).", lambda job, args: train_vectors(job, _overrides(args), progress=not args.quiet),
            VectorsJob, keys=FastTextConfig),
    Command("align", "Align two word-vector spaces with a dictionary; report precision@1.",
            _with_options(align_vectors, AlignConfig), AlignJob, keys=AlignConfig),
    Command("align-parallel", "Word-align parallel text at the subword level (eflomal); save translation "
            "probabilities p(source token | target token) for `ramen`.",
            _with_options(align_parallel, ParallelConfig), AlignParallelJob, keys=ParallelConfig),
    Command("lexicon", "Bilingual lexicon induction: precision@1/@5 (nearest neighbour and CSLS) of aligned word "
            "vectors.", _with_options(lexicon, LexiconConfig), LexiconJob, keys=LexiconConfig,
            extra=_json_flag("report")),
    Command("evaluate", "Perplexity / bits per byte (pseudo-perplexity, masked-LM loss), POS probe, "
            "token-classification fine-tuning.", _evaluate, EvaluateJob, keys=EvaluateConfig,
            extra=_json_flag("results")),
    Command("demo", "Transfer SmolLM2-135M to German with bundled data; print a table.", _demo, DemoConfig,
            keys=DemoConfig),
]


def _set_help(config_cls) -> str:
    return "keys for --set key=value:\n" + "\n".join("  " + line for line in describe_fields(config_cls))


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
                       "epilog": _set_help(command.keys) + command.epilog}
        sub = commands.add_parser(command.name, help=command.help, **options)
        if command.config:
            sub.add_argument("config", **({} if command.config_required else {"nargs": "?"}), help=command.config)
        if command.fields:
            add_flags(sub, command.fields, command.name)
        if command.extra:
            command.extra(sub)
        if command.keys:
            sub.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                             help="Override a config value, e.g. --set method.neighbors=20 (repeatable).")
        sub.set_defaults(command_entry=command)
    return parser


def _print(made, as_json: bool) -> None:
    """What a command made: its JSON (`--json`), its summary, or the text it is."""
    if made is None:
        return
    if as_json:
        print(json.dumps(made.as_dict(), indent=2, ensure_ascii=False))
    else:
        text = made if isinstance(made, str) else made.summary()
        if text:
            print(text)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    command = args.command_entry
    try:
        for plugin in args.plugin:
            load_plugin(plugin)
        _print(command.run(command.build(args), args), getattr(args, "json", False))
        return 0
    except LangswapError as error:
        message = textwrap.fill(str(error), width=110, break_long_words=False, break_on_hyphens=False)
        print(f"langswap {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
