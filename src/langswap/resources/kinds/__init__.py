"""Resource kinds: what a method may need besides the two vocabularies and the source embeddings, by name.

Each kind is one file in this package that registers itself with `register_resource`: its name (what a method lists
in `requires`), its own config (a dataclass whose fields are the `resources.*` keys of transfer and bench configs),
an early check (run before anything slow, naming the key to set), a loader (returning the typed resource that
methods read from `TransferInputs.resource(name)`), and optionally how `langswap bench` builds it once for all
variants. The `resources:` section of a config is made of every kind's fields (`resources_config_class`), so adding a
kind is adding its file; a method that names a kind nobody registered fails when it is registered.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from langswap.registry import Registry


@dataclass(frozen=True)
class ResourceKind:
    """A resource kind.

    - `config_cls`: a dataclass of the kind's `resources.*` keys (kw_only, every field with a default and a help).
    - `check(config)`: raise `MissingResourceError`/`ConfigError` saying what to set when `config` (a transfer or
      bench config, whose `resources` holds these keys) cannot give the resource; runs before anything slow.
    - `load(config) -> (resource, report)`: the typed resource methods read, and a JSON-able report for
      langswap.json (or None).
    - `prepare_shared(config, folder) -> dict`: optional; builds the resource once into `folder` for every variant
      of a bench, returning the `resources.*` keys that make later loads read it, with file names in `folder` as
      values (e.g. {"alignment": "alignment.npy"}).
    - `inputs(config) -> dict`: what a loaded resource depends on (a bench reuses a measurement only while these are
      unchanged); default: the kind's `resources.*` keys.
    - `reads`: keys of other kinds this kind also reads (a dictionary serves several kinds; one kind declares it).
    - `uses_target_tokenizer`: `load` is called as `load(config, target_tokenizer)`, for a resource made with the
      target tokenizer (which a transfer may train from `target_text` only after the config is checked).
    - `uses_source_tokenizer`: with `uses_target_tokenizer`, `load` is called as `load(config, target_tokenizer,
      source_tokenizer)`, for a resource made with both tokenizers.
    - `gives(config) -> bool`: whether `config` gives this resource at all, for methods that use it when given
      (`register_method(optional=...)`); default: any of the kind's own keys is set to other than its default."""

    name: str
    config_cls: type
    check: Callable
    load: Callable
    description: str
    prepare_shared: Callable | None = None
    inputs: Callable | None = None
    reads: tuple[str, ...] = ()
    uses_target_tokenizer: bool = False
    uses_source_tokenizer: bool = False
    gives: Callable | None = None

    def given(self, config) -> bool:
        if self.gives is not None:
            return bool(self.gives(config))
        defaults = {field.name: field.default for field in dataclasses.fields(self.config_cls) if field.init}
        return any(getattr(config.resources, key) not in (None, defaults[key]) for key in defaults)

    def keys(self) -> list[str]:
        return [field.name for field in dataclasses.fields(self.config_cls) if field.init]

    def depends_on(self, config) -> dict:
        if self.inputs is not None:
            return self.inputs(config)
        return {key: getattr(config.resources, key) for key in self.keys()}


_KINDS = Registry("resource kind", __name__, "`langswap methods` says which method needs which")


def register_resource(kind: ResourceKind) -> ResourceKind:
    """Register a resource kind; its config's keys may not clash with another kind's."""
    for other in _KINDS.values():
        clash = set(kind.keys()) & set(other.keys())
        if clash:
            raise ValueError(f"resource kind {kind.name!r} declares key(s) {sorted(clash)} that kind "
                             f"{other.name!r} already has")
    _KINDS.add(kind.name, kind)
    return kind


def keys_in_use(names, resources) -> dict:
    """The `resources.*` keys the kinds `names` declare or read, where `resources` sets them to other than the
    default: what a model card lists as the resources a model was made with."""
    defaults = {field.name: field.default for field in dataclasses.fields(resources)}
    used = {}
    for name in names:
        kind = get_resource(name)
        for key in kind.keys() + list(kind.reads):
            value = getattr(resources, key)
            if value is not None and value != defaults.get(key):
                used[key] = value
    return used


def resource_names() -> list[str]:
    return _KINDS.names()


def get_resource(name: str) -> ResourceKind:
    return _KINDS.get_entry(name)


_config_classes: dict[tuple[str, ...], type] = {}


def resources_config_class() -> type:
    """The `resources:` config: every registered kind's keys, the kinds of this package in the order of their files
    (whichever module happened to import one first), then those of plugins in registration order (one class per set
    of kinds)."""
    _KINDS.load()
    names = tuple(_KINDS)
    if names not in _config_classes:
        kinds = sorted(_KINDS.values(), key=lambda kind: (0, kind.config_cls.__module__)
                       if kind.config_cls.__module__.startswith(__name__ + ".") else (1, ""))
        fields = [(field.name, field.type, field) for kind in kinds
                  for field in dataclasses.fields(kind.config_cls) if field.init]
        cls = dataclasses.make_dataclass("ResourcesConfig", fields, kw_only=True)
        cls.__doc__ = "Files the methods consume: " + "; ".join(
            f"{kind.name} ({', '.join(kind.keys() or kind.reads)})" for kind in kinds) + "."
        cls.__module__ = __name__
        _config_classes[names] = cls
    return _config_classes[names]


def resources_config(**values):
    """A `resources:` config with `values` set and every other key at its default."""
    return resources_config_class()(**values)
