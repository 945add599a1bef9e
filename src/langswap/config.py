"""Dataclass configs: build from dicts and YAML, dump every default, apply `--set key=value` overrides.

A default lives on its dataclass field and nowhere else; the CLI help, `init-config` and the docs read it from there.
Unknown keys are errors that list the valid ones. Nested dataclass fields are nested mappings; a field `key` whose
class is known only at run time is built by the config's `resolve_<key>` (a transfer's `method`, whose class depends
on `method.name`; `resources`, made of the registered resource kinds' keys).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from langswap.errors import ConfigError


def field_help(field: dataclasses.Field) -> str:
    return field.metadata.get("help", "")


def _choices(field: dataclasses.Field) -> tuple | None:
    return field.metadata.get("choices")


def _unknown_key_message(key: str, valid: list[str], where: str) -> str:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    return f"unknown key '{where}{key}'.{hint} Valid keys here: {', '.join(valid)}."


def _coerce(value: Any, annotation: Any, name: str) -> Any:
    """Check `value` against a field annotation (str, int, float, bool, Optional[...], Literal) and convert ints to
    floats where a float is wanted; raise ConfigError naming the field otherwise."""
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(typing) | {"Path": Path})  # annotations are postponed strings
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, name)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"'{name}' cannot be {value!r}.")
    if origin in (list, tuple):  # tuple[X, ...]: a list read as a tuple
        item = (typing.get_args(annotation) or (Any,))[0]
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            value = [value]  # `--set snapshot_steps=50` means [50]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"'{name}' must be a list, not {value!r}.")
        return origin(_coerce(element, item, f"{name}[{i}]") for i, element in enumerate(value))
    if origin is typing.Literal:
        allowed = typing.get_args(annotation)
        if value not in allowed:
            raise ConfigError(f"'{name}' is {value!r}; choose one of: {', '.join(map(str, allowed))}.")
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"'{name}' must be true or false, not {value!r}.")
    if annotation is int:
        number = as_number(value)
        if isinstance(number, float) and number.is_integer():
            number = int(number)  # 1e3 steps
        if isinstance(number, int):
            return number
        raise ConfigError(f"'{name}' must be an integer, not {value!r}.")
    if annotation is float:
        number = as_number(value)
        if number is not None:
            return float(number)
        raise ConfigError(f"'{name}' must be a number, not {value!r}.")
    if annotation is str:
        if isinstance(value, (str, Path)):
            return str(value)
        raise ConfigError(f"'{name}' must be a string, not {value!r}.")
    return value


# A decimal number as people write it: 5e-4, 1E-3, .5, 1_000, -2.5e+3 (no nan, no inf, no hex).
_NUMBER = re.compile(r"[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d+)?")


def as_number(value: Any) -> int | float | None:
    """`value` as an int or float when it is one or is a string that spells one, else None.

    YAML 1.1 (PyYAML) reads `5e-4` and `1E-3` as strings, since its floats need a dot, so a number from a YAML file or
    a `--set` override may arrive as text. An integer stays an int (`1_000` -> 1000); a string with a dot or an
    exponent becomes a float."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        text = value.strip()
        number = float(text) if any(char in text for char in ".eE") else int(text)
        return number if math.isfinite(number) else None
    return None


def from_dict(cls: type, data: dict | None, where: str = "") -> Any:
    """Build dataclass `cls` from a mapping, recursing into nested dataclass fields; unknown keys are errors."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"'{where.rstrip('.') or 'config'}' must be a mapping of keys to values, not {data!r}.")
    data = dict(data)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            moved = getattr(cls, "MOVED_KEYS", {}).get(key)
            if moved:
                raise ConfigError(f"'{where}{key}' is now '{where}{moved}': write `{moved.split('.')[0]}: "
                                  f"{{{moved.split('.', 1)[1]}: ...}}` in the YAML, or --set {where}{moved}=...")
            raise ConfigError(_unknown_key_message(key, sorted(fields), where))
        hint = hints[key]
        if hasattr(cls, f"resolve_{key}"):  # a section whose class is chosen at run time (a registry's)
            kwargs[key] = getattr(cls, f"resolve_{key}")(value, f"{where}{key}.")
        elif dataclasses.is_dataclass(hint):
            kwargs[key] = from_dict(hint, value, f"{where}{key}.")
        else:
            choices = _choices(fields[key]) or ()
            if isinstance(value, bool) and {"on", "off"} <= set(choices):
                value = "on" if value else "off"  # YAML reads a bare `on` / `off` as true / false
            kwargs[key] = _coerce(value, hint, f"{where}{key}")
    try:
        instance = cls(**kwargs)
    except TypeError as error:  # a required field is missing
        missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        raise ConfigError(f"missing required key(s) {', '.join(where + m for m in missing)}.") from error
    check_choices(instance, where)
    return instance


def check_choices(instance, where: str = "") -> None:
    """A ConfigError for the first field of `instance` whose value is not among its `choices` (None passes where
    the field's default is None)."""
    for field in dataclasses.fields(instance):
        if not field.init:
            continue
        choices = _choices(field)
        value = getattr(instance, field.name)
        if choices is not None and value not in choices and not (value is None and field.default is None):
            raise ConfigError(f"'{where}{field.name}' is {value!r}; choose one of: {', '.join(choices)}.")


def layer_indices(value, option: str) -> tuple[int, ...]:
    """The hidden-state layers an option (`distill.layers`, `teacher.layers`) names, as a tuple without repeats: one
    index or a list of them, 1 the first block's output, negative ones counted from the last (-1); a ConfigError
    naming `option` for anything else, 0 (the input embeddings) included."""
    layers = (value,) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(layers, (list, tuple)) or not layers or not all(
            isinstance(layer, int) and not isinstance(layer, bool) for layer in layers):
        raise ConfigError(f"{option} is {value!r}; give a list of layer indices, e.g. [-1] for the last layer or "
                          "[4, -1].")
    if 0 in layers:
        raise ConfigError(f"{option} holds 0, the input embeddings themselves (the student's and the teacher's are "
                          "different tokens there); choose layers from 1 (the first block's output) on, or negative "
                          "ones counted from the last (-1).")
    return tuple(dict.fromkeys(layers))


def to_dict(instance: Any) -> dict:
    """Every field of a (nested) dataclass config, defaults included, as plain YAML-able values."""
    out = {}
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
            if hasattr(getattr(instance, field.name), "method_name"):
                value = {"name": getattr(instance, field.name).method_name, **value}
        elif isinstance(value, Path):
            value = str(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """'method.neighbors=20' -> (['method', 'neighbors'], 20); the value is read as YAML (numbers, true, null)."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like key=value, e.g. --set method.neighbors=20.")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override '{text}' has no key before '='.")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply dotted `key=value` overrides to a nested mapping (a copy); keys are checked later by `from_dict`."""
    data = _deep_copy(data)
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override '{text}': '{part}' is a value, not a section.")
            node = child
        node[path[-1]] = value
    return data


def merge_dicts(base: dict, over: dict) -> dict:
    """`base` with `over` laid on it, nested mappings merged key by key (a copy; neither is changed)."""
    out = _deep_copy(base)
    for key, value in over.items():
        out[key] = (merge_dicts(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict)
                    else _deep_copy(value) if isinstance(value, dict) else value)
    return out


def _deep_copy(data: dict) -> dict:
    return {k: _deep_copy(v) if isinstance(v, dict) else v for k, v in data.items()}


def load_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file '{path}' does not exist; write one with `langswap init-config`.")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise ConfigError(f"config file '{path}' is not valid YAML: {error}") from error
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file '{path}' must hold a mapping of keys to values at the top level.")
    return data


def dump_yaml(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


# -- command-line flags from config fields ---------------------------------------------------------------------------

def count(text: str) -> int:
    """An argparse type for counts written as people write them: 2000, 2_000, 2e3."""
    number = as_number(text)
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. 2000, 2_000 or 2e3)")
    return number


def flag_fields(config_cls, command: str) -> list[dataclasses.Field]:
    """The fields of `config_cls` that are flags of `command`: those whose metadata's "cli" names it, or, where no
    field is marked, every field."""
    fields = [field for field in dataclasses.fields(config_cls) if field.init]
    if not any("cli" in field.metadata for field in fields):
        return fields
    return [field for field in fields if command in field.metadata.get("cli", ())]


def add_flags(parser, config_cls, command: str) -> None:
    """A flag for each of `command`'s fields of `config_cls` (`flag_fields`), with the field's help, type and
    choices: `--kebab-name` (or the field's "flag"), a switch for a bool field, a positional argument for a
    "positional" field, `nargs` values where the field says so. Every flag's default is None, so an absent flag leaves
    the field's own default; `config_flags` puts the given ones into the config mapping."""
    hints = typing.get_type_hints(config_cls)
    for field in flag_fields(config_cls, command):
        flag, hint = field.metadata.get("flag", "--" + field.name.replace("_", "-")), hints[field.name]
        if hint is bool:
            action = parser.add_argument(flag, dest=field.name, action="store_true", default=None,
                                         help=field_help(field))
            action.config_field = (config_cls, field.name)
            continue
        kind = count if hint in (int, int | None) else float if hint in (float, float | None) else None
        choices = field.metadata.get("choices")
        options = {"type": kind, "help": field_help(field) + (f" One of: {', '.join(choices)}." if choices else "")}
        options.update({key: field.metadata[key] for key in ("nargs", "metavar") if key in field.metadata})
        if field.metadata.get("positional"):
            required = field.default in ("", dataclasses.MISSING)
            action = parser.add_argument(field.name, **({} if required else {"nargs": "?", "default": None}),
                                         **options)
        else:
            action = parser.add_argument(flag, dest=field.name, **options)
        action.config_field = (config_cls, field.name)  # what the flag sets (tests/test_cli.py reads it)


def config_flags(args, data: dict, config_cls, command: str) -> dict:
    """`data` with the flags of `add_flags` that were given on the command line set."""
    for field in flag_fields(config_cls, command):
        value = getattr(args, field.name, None)
        if value is not None:
            data[field.name] = value
    return data
