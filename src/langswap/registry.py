"""Registries by name: methods, resource kinds and training recipes each keep one, filled by the files of a package.

Nothing lists the entries: the first lookup imports every module of the registry's package once, and each module
registers what it defines. An entry registered twice is a programming error (ValueError); an unknown name is the
user's (ConfigError, listing the names there are).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

from langswap.errors import ConfigError, MissingResourceError


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


def load_plugin(path: str) -> None:
    """Import the Python file at `path` once, so the methods, resource kinds and recipes it defines register
    themselves (`langswap --plugin FILE`). An error inside the file is the file's, and keeps its traceback."""
    file = Path(path).expanduser().resolve()
    if not file.is_file() or file.suffix != ".py":
        raise MissingResourceError(f"plugin '{path}' is not a Python file; give the .py file that registers your "
                                   "method, resource kind or recipe.")
    name = f"langswap_plugin_{file.stem}_{hashlib.sha1(str(file).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
