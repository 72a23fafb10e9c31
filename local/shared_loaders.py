"""One botocore loader per data path in each offline process (``make run``, ``make demo``, a handler process).

botocore gives each session a loader of its own, which reads and parses its data files (the endpoints file,
each service's model) again: the stage's clients, the runtime's, the app's per-container clients and moto's
own sessions (its backends ask botocore for each service's regions) each paid for it, about a quarter of a
start's CPU.  Sharing one loader per data path parses each file once per process.  Nothing else changes: a
loader only caches what it read, and one session already shares its loader between all its clients (the
test process does the same: tests/fixtures.py).
"""

from __future__ import annotations

import functools

import botocore.loaders
import botocore.session


def install() -> None:
    """Every botocore session created from now on in this process reads through the shared loaders."""
    botocore.session.create_loader = shared_loader


@functools.cache
def shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    return botocore.loaders.create_loader(search_path_string)
