"""BACKUP_TIMEZONE and a task's time zone resolve from the pinned ``tzdata`` package, not only from the machine.

``zoneinfo`` looks in the system's zone files first (its TZPATH: /usr/share/zoneinfo ...) and then in the
``tzdata`` package. A Lambda runtime built on a minimal image may have no system zone files, so
requirements.txt pins ``tzdata`` (packaged with the functions): with TZPATH empty, as on such a runtime,
a stage's non-UTC zone still resolves and still has its summer time.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chalicelib.schedule_expr import zone_problem
from chalicelib.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_system_zone_files() -> Iterator[None]:
    """zoneinfo as on a runtime without /usr/share/zoneinfo: no TZPATH, no zone already loaded."""
    saved = zoneinfo.TZPATH
    zoneinfo.reset_tzpath(to=[])
    zoneinfo.ZoneInfo.clear_cache()
    try:
        yield
    finally:
        zoneinfo.reset_tzpath(to=saved)
        zoneinfo.ZoneInfo.clear_cache()


def test_tzdata_is_pinned_with_what_the_lambda_runtime_needs() -> None:
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert "tzdata" in pins


def test_a_stage_zone_resolves_from_the_tzdata_package_without_system_zone_files(no_system_zone_files: None) -> None:
    assert zoneinfo.TZPATH == ()
    zone = Settings.from_env({"BACKUP_TIMEZONE": "Europe/Paris"}).backup_timezone
    summer, winter = datetime(2026, 7, 1, 12, tzinfo=UTC), datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert summer.astimezone(zone).utcoffset() == timedelta(hours=2)
    assert winter.astimezone(zone).utcoffset() == timedelta(hours=1)
    assert zone_problem("America/New_York") is None  # a task's time zone: the same database
