"""The per-container bundle of dependencies, built once on first use.

Lambda reuses a container across invocations, so clients are built once.
Tests and the offline runtime hand in their own bundle with ``use()``.
"""

from __future__ import annotations

from collections.abc import Callable

from chalicelib.aws import Deps


class Container:
    def __init__(self, factory: Callable[[], Deps]) -> None:
        self._factory = factory
        self._deps: Deps | None = None

    def get(self) -> Deps:
        if self._deps is None:
            self._deps = self._factory()
        return self._deps

    def use(self, deps: Deps | None) -> None:
        """Replace the bundle (None: build a fresh one from the factory on next use)."""
        self._deps = deps
