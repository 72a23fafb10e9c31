"""docs/backups.md's picture of retention by calendar is what the code draws (bench/retention_picture.py)."""

from __future__ import annotations

from bench import retention_picture


def test_the_committed_picture_is_what_the_retention_code_draws() -> None:
    assert retention_picture.PICTURE.read_text() == retention_picture.draw(), (
        "docs/retention-calendar.svg is stale: run .venv/bin/python -m bench.retention_picture")


def test_the_picture_keeps_what_the_policy_keeps_and_greys_the_rest() -> None:
    text = retention_picture.draw()
    assert text.count("<rect") == 365 + len(retention_picture.COLOURS)
    assert ": 2 of 365 kept" not in text and ": deleted</title>" in text and ": last_good" in text
    assert ": yearly" in text and ": monthly" in text and ": weekly" in text and ": daily" in text
