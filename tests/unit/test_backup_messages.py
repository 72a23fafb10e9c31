"""The backup monitor queue's messages: a poll message may carry what an unclaimed poll needs (pure parsing)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from chalicelib.backups.messages import BadMessage, Creating, MonitorMessage, parse_message

STARTED = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)


def test_a_poll_message_carries_the_runs_start_and_its_backups_for_an_unclaimed_poll() -> None:
    body = json.dumps({"run_id": "r", "poll": 2, "started_at": STARTED.isoformat(), "backups": 150})
    assert parse_message(body) == MonitorMessage("r", 2, creating=Creating(STARTED, 150))
    assert parse_message(json.dumps({"run_id": "r", "poll": 2})) == MonitorMessage("r", 2)  # claimed as before


@pytest.mark.parametrize(("extra", "field"), [
    ({"started_at": STARTED.isoformat()}, "backups"),
    ({"started_at": STARTED.isoformat(), "backups": 0}, "backups"),
    ({"started_at": STARTED.isoformat(), "backups": True}, "backups"),
    ({"started_at": "yesterday", "backups": 1}, "started_at"),
    ({"started_at": "2026-11-22T03:00:00", "backups": 1}, "started_at"),  # no offset
    ({"backups": 1}, "started_at"),
])
def test_a_poll_message_with_half_or_bad_facts_is_refused_naming_the_field(extra: dict[str, object], field: str) -> None:
    with pytest.raises(BadMessage, match=field):
        parse_message(json.dumps({"run_id": "r", "poll": 1, **extra}))
