"""Temporary directories a running process owns, which a SIGKILL or a crash cannot leave behind for ever.

A clean stop removes its directory; a process killed with SIGKILL cannot.  So each directory is held by its
process: an exclusive ``flock`` on the directory itself, taken when it is made and released by the kernel when
the process ends, however it ends.  Before making one, ``run_directory`` removes the stale directories of the
same prefix: those whose lock can be taken (their process is gone).  A live one (another ``make run`` on other
ports) holds its lock and is never touched.  A directory without an ``owner`` file (the pid that made it) is
one being made at this moment, or one made before directories were locked: it is removed only once it is a day
old.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

OWNER_FILE = "owner"
UNOWNED_AFTER_SECONDS = 86_400.0  # a directory without an owner file is stale once this old (and unlocked)


class RunDirectory:
    """A fresh private directory, locked by this process until ``remove`` (or until the process ends)."""

    def __init__(self, path: Path, lock: int) -> None:
        self.path = path
        self.lock = lock  # a descriptor; a process started with it (pass_fds) holds the lock too
        self._removed = False

    def remove(self) -> None:
        """The directory removed and its lock released (again: nothing)."""
        if self._removed:
            return
        self._removed = True
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self.lock)


def run_directory(prefix: str, root: str | None = None) -> RunDirectory:
    """A new directory ``<root>/<prefix>…`` (root: the temporary directory), the stale ones of ``prefix`` removed."""
    base = root if root is not None else tempfile.gettempdir()
    remove_stale(prefix, base)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # not inherited by the processes this one starts
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no sweep takes it first: it has no owner file yet
    (path / OWNER_FILE).write_text(f"{os.getpid()}\n")
    return RunDirectory(path, lock)


def remove_stale(prefix: str, root: str, now: Callable[[], float] = time.time) -> list[Path]:
    """Removes this user's ``<root>/<prefix>*`` directories whose lock can be taken; returns them."""
    removed = []
    for path in sorted(Path(root).glob(prefix + "*")):
        try:
            lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:  # not a directory, a link, gone, or not ours to read
            continue
        try:
            info = os.fstat(lock)
            if info.st_uid != os.getuid():
                continue
            if not (path / OWNER_FILE).exists() and now() - info.st_mtime < UNOWNED_AFTER_SECONDS:
                continue
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # its process is alive
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            with contextlib.suppress(OSError):
                os.close(lock)
    return removed
