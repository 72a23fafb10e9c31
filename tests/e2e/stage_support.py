"""The e2e tests' `local` stage as `make demo` runs it, started in-process on free ports."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from local.demo import DEMO_ENVIRONMENT, QUICK_ENVIRONMENT
from local.stage import LocalSettings, LocalStage, start_local_stage


@contextmanager
def demo_stage(**overrides: str) -> Iterator[LocalStage]:
    """The stage with make demo's settings, at the level every stage ships (make demo itself prints WARNING and up),
    a backup run monitored at once (QUICK_ENVIRONMENT), and ``overrides`` (environment variables) over them."""
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    environment = {**DEMO_ENVIRONMENT, **QUICK_ENVIRONMENT, "LOG_LEVEL": "INFO", **overrides}
    started = start_local_stage(local, overrides=environment, out=lambda line: None)
    try:
        yield started
    finally:
        started.stop()
