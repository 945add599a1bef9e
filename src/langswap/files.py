"""Output that is never half-written: every file and folder langswap writes goes through these helpers. And where
langswap keeps what it builds once and reuses (`cache_dir`).

A result is written under a temporary name beside its final place and renamed there once complete, so a crash
leaves either the old result or the new one, never a mix; an existing result is replaced only when the caller
allows it, and only once its replacement is complete. Temporary folders get the modes the user's umask gives a
new folder (`tempfile.mkdtemp` makes them 0700).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from langswap.errors import OutputExistsError


def refuse_existing(output: str | Path, overwrite: bool, what: str = "output folder") -> None:
    """An OutputExistsError when `output` exists and may not be replaced: checked before slow work starts, and
    again by `atomic_directory` when the result is written."""
    if Path(output).exists() and not overwrite:
        raise OutputExistsError(f"{what} '{output}' already exists; choose another --output or pass --overwrite "
                                "to replace it.")


@contextmanager
def atomic_directory(final: Path, overwrite: bool):
    """Yield a temporary folder beside `final`; on success it replaces `final`, on failure it is removed.

    An existing `final` is kept unless `overwrite`, and even then only replaced once the new folder is complete."""
    final = Path(final)
    refuse_existing(final, overwrite)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    try:
        yield temporary
        give_usual_modes(temporary)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    replace_directory(temporary, final)


def replace_directory(complete: Path, final: Path) -> None:
    """Put the finished folder `complete` at `final`; an existing `final` is moved aside first and deleted only once
    the new one is in place, so at no moment is neither there."""
    final = Path(final)
    if final.exists():
        backup = final.with_name(f".{final.name}.old-{os.getpid()}")
        final.rename(backup)
        Path(complete).rename(final)
        shutil.rmtree(backup, ignore_errors=True)
    else:
        Path(complete).rename(final)


@contextmanager
def atomic_file(path: str | Path):
    """Yield a temporary path beside `path` (same suffix, so writers that look at it still work); once the block
    ends without error the file is renamed to `path`, replacing what was there. On error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    try:
        yield temporary
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    temporary.replace(path)


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_file(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def give_usual_modes(folder: Path) -> None:
    """The modes the umask gives new files and folders, for `folder` and everything in it."""
    umask = os.umask(0)
    os.umask(umask)
    Path(folder).chmod(0o777 & ~umask)
    for path in Path(folder).rglob("*"):
        if path.is_symlink():
            continue
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def cache_dir() -> Path:
    """The langswap cache root: `$LANGSWAP_CACHE`, else `$XDG_CACHE_HOME/langswap`, else `~/.cache/langswap`.

    Empty variables count as unset. The folder is not created.
    """
    explicit = os.environ.get("LANGSWAP_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "langswap"
    return Path.home() / ".cache" / "langswap"


def hash_file(digest, path: str | Path):
    """Feed the bytes of `path` to `digest` (a hashlib object) a block at a time; returns `digest`. What a cached
    resource is keyed by starts with the bytes of the files it is made from."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest
