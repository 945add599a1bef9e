"""One writer per output: a lock that every command writing a folder (or a file) takes before it writes anything.

The lock is a file beside the output, `.<name>.langswap-lock`, locked with `flock` (an exclusive, non-blocking
kernel lock) and holding its holder's host, pid, start time and command as JSON. A second process finds the lock
taken and gets `OutputLockedError` naming the holder; it exits without touching the output.

- A holder that dies (SIGKILL, a crash, power loss, a preempted node) loses its lock with it: the kernel releases a
  `flock` when the last descriptor closes, whatever ended the process. The rerun that resumes takes the lock and
  says whose it took over (the file still holds the dead holder's record, since only a clean release clears it).
- The file stays beside the output only while a run holds it: a clean release deletes it. A lock is only trusted
  after checking that the path still names the locked file (a holder may delete it between another process's open
  and lock), so deleting never lets two writers in.
- Multi-process runs (torchrun, accelerate) take one lock for the run in the main process (`OutputLock` is created
  there only); other ranks never open, and never delete, the lock file.
- Network file systems: on Linux NFS `flock` is carried out as a POSIX byte-range lock by the server (NFSv4, or NLM
  for NFSv3), so it holds across nodes. A node that dies holding it releases it when the server's lease expires
  (90 s by default on NFSv4), so a rerun on another node within that time is refused, naming the dead holder; rerun
  after the lease. A mount with `nolock` (or `local_lock=flock`) keeps locks local to each node: there two nodes can
  both write, and langswap cannot tell. Not handled: systems without `fcntl` (Windows), where the lock is skipped
  with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from pathlib import Path

from langswap.errors import OutputLockedError

logger = logging.getLogger(__name__)


def lock_path(output: str | Path) -> Path:
    """The lock file of `output` (a folder or a file): beside it, so it is there before the output is."""
    output = Path(os.path.abspath(output))
    return output.parent / f".{output.name}.langswap-lock"


def _holder_record() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": " ".join(sys.argv)}


def describe_holder(record: dict | None) -> str:
    if not record:
        return "a process that left no record"
    return (f"pid {record.get('pid')} on host {record.get('host')}, started {record.get('started')}, running "
            f"`{record.get('command')}`")


def _read_record(descriptor: int) -> dict | None:
    os.lseek(descriptor, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(descriptor, 65536):
        data += chunk
    try:
        record = json.loads(data.decode("utf-8")) if data.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"command": "(unreadable lock record)"}
    return record if isinstance(record, dict) else None


class OutputLock:
    """An exclusive lock on one output, held from `acquire` to `release` (or the end of a `with` block)."""

    def __init__(self, output: str | Path, what: str = "output"):
        self.output, self.what = Path(output), what
        self.path = lock_path(output)
        self.descriptor: int | None = None
        self.took_over: dict | None = None  # the record of a dead holder whose lock this one took over

    def acquire(self) -> "OutputLock":
        try:
            import fcntl
        except ImportError:  # not POSIX
            logger.warning("no file locking on this system: nothing stops a second process from writing %s",
                           self.output)
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _read_record(descriptor)
                os.close(descriptor)
                raise OutputLockedError(
                    f"{self.what} '{self.output}' is being written by another langswap process: "
                    f"{describe_holder(holder)}. Two writers would mix their checkpoints and records, so this one "
                    f"stops without touching it. Wait for that process to finish (rerun this command then to resume "
                    f"or reuse its result), stop it, or choose another output. The lock is {self.path}.") from None
            try:
                same_file = os.fstat(descriptor).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                break
            os.close(descriptor)  # the holder released and deleted it between our open and lock: try again
        self.descriptor = descriptor
        self.took_over = _read_record(descriptor)
        if self.took_over:
            logger.warning("took over the lock of %s '%s' from %s, which is no longer running (killed or crashed); "
                           "carrying on from what it left", self.what, self.output, describe_holder(self.took_over))
        os.ftruncate(descriptor, 0)
        os.lseek(descriptor, 0, os.SEEK_SET)
        os.write(descriptor, json.dumps(_holder_record()).encode("utf-8"))
        os.fsync(descriptor)
        return self

    def release(self) -> None:
        if self.descriptor is None:
            return
        try:
            os.unlink(self.path)  # while still locked, so no one else can hold this path's file
        except FileNotFoundError:
            pass
        os.close(self.descriptor)  # closing releases the flock
        self.descriptor = None

    def __enter__(self) -> "OutputLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
