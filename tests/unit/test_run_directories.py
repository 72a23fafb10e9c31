"""local/run_directories.py: a directory whose process is gone (its lock free) is removed by the next run; a live
one (its lock held, by this process or another) is never touched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from local.run_directories import OWNER_FILE, UNOWNED_AFTER_SECONDS, remove_stale, run_directory

PREFIX = "timekeeper-handlers-"


def test_only_the_directories_whose_process_is_gone_are_removed(tmp_path: Path) -> None:
    root = str(tmp_path)
    killed = run_directory(PREFIX, root)
    os.close(killed.lock)  # as a SIGKILL does: the lock released, the directory left behind
    (killed.path / "socket").write_text("")
    live_here = run_directory(PREFIX, root)
    held_elsewhere = run_directory(PREFIX, root)
    holder = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                              pass_fds=[held_elsewhere.lock])
    os.close(held_elsewhere.lock)  # only the other process holds it now
    other = tmp_path / "console-chromium-x"
    other.mkdir()
    try:
        created = run_directory(PREFIX, root)
        assert not killed.path.exists()
        assert {p.name for p in tmp_path.iterdir()} == {
            live_here.path.name, held_elsewhere.path.name, created.path.name, other.name}
        assert (created.path / OWNER_FILE).read_text() == f"{os.getpid()}\n"
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    assert remove_stale(PREFIX, root) == [held_elsewhere.path]  # its process ended
    live_here.remove()
    created.remove()
    assert [p.name for p in tmp_path.iterdir()] == [other.name]


def test_a_directory_without_an_owner_file_is_removed_only_once_a_day_old(tmp_path: Path) -> None:
    unowned = tmp_path / f"{PREFIX}made-before-locks"
    unowned.mkdir()
    made = unowned.stat().st_mtime
    assert remove_stale(PREFIX, str(tmp_path), now=lambda: made + UNOWNED_AFTER_SECONDS - 1) == []
    assert remove_stale(PREFIX, str(tmp_path), now=lambda: made + UNOWNED_AFTER_SECONDS) == [unowned]
    assert not unowned.exists()
