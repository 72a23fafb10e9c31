"""How the stream scheduler packs due messages into SendMessageBatch calls (10 entries, 256 KiB in all)."""

from __future__ import annotations

import pytest

from chalicelib.tasks.stream import BATCH_BYTES, OutgoingDue, pack_batches


def sized(*sizes: int) -> list[OutgoingDue]:
    return [OutgoingDue("x" * size, 0) for size in sizes]


@pytest.mark.parametrize(("sizes", "batches"), [
    ((), []),
    ((100,), [[0]]),
    ((100,) * 10, [list(range(10))]),
    ((100,) * 25, [list(range(10)), list(range(10, 20)), list(range(20, 25))]),
    # two messages of 150 KB cannot share a call: the second starts the next one, small ones join it
    ((150_000, 100, 150_000, 100), [[0, 1], [2, 3]]),
    # exactly the limit fits; one byte more goes to the next call
    ((BATCH_BYTES - 100, 100, 1), [[0, 1], [2]]),
    # larger than SQS allows: sent alone, to be refused on its own
    ((100, BATCH_BYTES + 1, 100), [[0], [1], [2]]),
])
def test_messages_are_packed_in_order_within_the_entry_and_byte_limits(
        sizes: tuple[int, ...], batches: list[list[int]]) -> None:
    assert pack_batches(sized(*sizes)) == batches
