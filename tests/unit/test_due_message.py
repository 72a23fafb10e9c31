"""A due message is read or refused as content (InvalidTask: dead-lettered once), whatever its body holds."""

from __future__ import annotations

import pytest

from chalicelib.tasks.model import DueMessage, InvalidTask


@pytest.mark.parametrize("body", [
    '{"pk": "P", "sk": "S", "due": ' + "9" * 5000 + "}",            # a number Python will not read
    '{"pk": "P", "sk": "S", "due": "2026-11-22T12:00:00Z", "x": ' + "[" * 30000 + "]" * 30000 + "}",
    '{"pk": "P", "sk": "S", "due": "9999-12-31T23:59:59-01:00"}',    # year 10000 in UTC
    '{"pk": "P", "sk": "S", "due": 1e400}',
    '{"pk": "P", "sk": "S", "due": "2026-11-22T12:00:00Z", "image": {"a": {"L": ' + '[{"L": ' * 2000
    + "[]" + "}]" * 2000 + "}}}",
    # an image with a number DynamoDB cannot hold, or of no type it has: no item the executor could run
    '{"pk": "P", "sk": "S", "due": "2026-11-22T12:00:00Z", "image": {"PK": {"S": "P"}, "n": {"N": "Infinity"}}}',
    '{"pk": "P", "sk": "S", "due": "2026-11-22T12:00:00Z", "image": {"PK": {"S": "P"}, "n": {"N": "NaN"}}}',
    '{"pk": "P", "sk": "S", "due": "2026-11-22T12:00:00Z", "image": {"PK": {"S": "P"}, "n": {"Q": "1"}}}',
    '{"pk": "{\\"id\\": {\\"N\\": \\"1\\"}}", "sk": "", "source": "s", "due": "2026-11-22T12:00:00Z", '
    '"image": {"id": {"N": "1"}, "n": {"N": "1e400"}}}',
])
def test_a_due_message_that_cannot_be_read_is_invalid_content_not_a_crash(body: str) -> None:
    with pytest.raises(InvalidTask):
        DueMessage.from_json(body)
