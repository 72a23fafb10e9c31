"""SNS subjects: what SNS accepts, whatever a table name or task id holds."""

from __future__ import annotations

import re

import pytest

from chalicelib.alerts import sns_subject

VALID = re.compile(r"^[\x20-\x7e]{1,99}$")


@pytest.mark.parametrize("text", [
    "timekeeper: backup of " + "t" * 80 + " failed",   # a 255-char table name would be longer still
    "Task PK|line\nbreak failed after 3 attempts",
    "Task caf\u00e9-\u65e5\u672c failed",
    "\t\r\n",
    "x" * 99,
])
def test_every_subject_is_valid_for_sns(text: str) -> None:
    subject = sns_subject(text)
    assert VALID.match(subject), subject
    assert len(subject) < 100


def test_a_short_ascii_subject_is_unchanged() -> None:
    assert sns_subject("timekeeper: backup of orders failed") == "timekeeper: backup of orders failed"
