"""Every command's arguments as the parser builds them, against tests/golden/cli.json: the flags, their help, defaults
and kinds, each command's help, description and epilog. A change to the command line shows here as a change to the
golden file, made on purpose (`LANGSWAP_WRITE_GOLDEN=1 pytest tests/test_cli_table.py` writes it)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "cli.json"


def _describe(parser: argparse.ArgumentParser) -> dict:
    actions = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        actions.append({"options": list(action.option_strings), "dest": action.dest, "help": action.help,
                        "default": repr(action.default), "nargs": repr(action.nargs),
                        "metavar": repr(action.metavar), "kind": type(action).__name__,
                        "required": action.required, "type": getattr(action.type, "__name__", repr(action.type))})
    return {"description": parser.description, "epilog": parser.epilog, "actions": actions}


def described() -> dict:
    from langswap.cli import build_parser

    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in commands._choices_actions}
    return {"langswap": _describe(parser),
            **{name: {"help": helps.get(name), **_describe(sub)} for name, sub in commands.choices.items()}}


def test_every_command_keeps_its_arguments_and_help():
    now = described()
    if os.environ.get("LANGSWAP_WRITE_GOLDEN"):
        GOLDEN.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert sorted(now) == sorted(golden)
    for name in golden:
        assert now[name] == golden[name], name
