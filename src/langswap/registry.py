"""Registries by name: methods, resource kinds and training recipes each keep one, filled by the files of a package.

Nothing lists the entries: the first lookup imports every module of the registry's package once, and each module
registers what it defines. An entry registered twice is a programming error (ValueError); an unknown name is the
user's (ConfigError, listing the names there are).
"""

from __future__ import annotations

import importlib
import pkgutil

from langswap.errors import ConfigError


class Registry(dict):
    """name -> entry, filled by the modules of `package` (a dotted package name)."""

    def __init__(self, what: str, package: str, hint: str = ""):
        super().__init__()
        self.what, self.package, self.hint = what, package, hint
        self._loaded = False

    def add(self, name: str, entry) -> None:
        if name in self:
            raise ValueError(f"{self.what} {name!r} registered twice")
        self[name] = entry

    def load(self) -> None:
        """Import every module of the package once, so each file registers itself."""
        if self._loaded:
            return
        self._loaded = True
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{self.package}.{module.name}")

    def names(self) -> list[str]:
        self.load()
        return sorted(self)

    def get_entry(self, name: str):
        self.load()
        if name not in self:
            listed = ", ".join(sorted(self)) or "none"
            raise ConfigError(f"unknown {self.what} '{name}'. Available {self.what}s: {listed}"
                              + (f" ({self.hint})" if self.hint else "") + ".")
        return self[name]
