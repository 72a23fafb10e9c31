"""The offline event sources: each polls moto's server (or a clock) and invokes handlers as Lambda would.

Every source runs in its own thread until the runtime's shared stop Event is
set; blocking calls are short (a second at most) so Ctrl-C stops everything
within a few seconds.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Source(Protocol):
    """One event source: a name for the banner and a loop that runs until ``stop`` is set."""

    @property
    def name(self) -> str: ...

    def describe(self) -> str: ...

    def run(self, stop: threading.Event) -> None: ...
