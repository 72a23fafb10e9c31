"""Due buckets of interval tasks: which GSI partition a task is filed under. Pure, no I/O.

An interval task carries ``BUCKET_ATTRIBUTE`` = ``YYYY-MM-DD#HH:MM#<shard>``
(the start of its ``BUCKET_MINUTES``-wide bucket in UTC, then a shard) and
``due_epoch``; the GSI ``BUCKET_INDEX`` has the bucket as partition key and
``due_epoch`` as sort key.  The date/time part reads like the seed's
``taskDateTime`` (``2021-12-31#12:00``); the shard spreads one busy minute
over ``BUCKET_SHARDS`` partitions.  The shard comes from a hash of the item
key, so the same task always lands in the same shard (whoever computes it).

Buckets are aligned on the epoch: with a width that divides a day (1, 5, 15,
60 ... minutes) they start on the hour and at midnight.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from chalicelib.tasks.model import TaskKey

_LABEL = "%Y-%m-%d#%H:%M"


def shard_of(key: TaskKey, shards: int) -> int:
    """The task's shard, 0 <= shard < shards: stable across processes (not Python's hash())."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    digest = hashlib.sha256(f"{key.pk}\x00{key.sk}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % shards


def bucket_start(at: datetime, minutes: int) -> datetime:
    """The start (UTC) of the ``minutes``-wide bucket that contains ``at``."""
    if minutes < 1:
        raise ValueError(f"minutes must be at least 1, got {minutes}")
    width = minutes * 60
    epoch = int(at.timestamp())
    return datetime.fromtimestamp(epoch - epoch % width, UTC)


def bucket_label(start: datetime) -> str:
    """``YYYY-MM-DD#HH:MM`` of a bucket start, in UTC."""
    return start.astimezone(UTC).strftime(_LABEL)


def due_bucket(due: datetime, minutes: int, shards: int, key: TaskKey) -> str:
    """The GSI partition value of a task due at ``due``: ``YYYY-MM-DD#HH:MM#<shard>``."""
    return f"{bucket_label(bucket_start(due, minutes))}#{shard_of(key, shards)}"


def bucket_starts(start: datetime, end: datetime, minutes: int) -> list[datetime]:
    """Starts of every bucket from the one containing ``start`` to the one containing ``end``."""
    first, last = bucket_start(start, minutes), bucket_start(end, minutes)
    step = timedelta(minutes=minutes)
    out: list[datetime] = []
    at = first
    while at <= last:
        out.append(at)
        at += step
    return out


def buckets_between(start: datetime, end: datetime, minutes: int, shards: int) -> list[str]:
    """Every partition value (all shards) of the buckets from ``start``'s to ``end``'s, oldest first."""
    return [f"{bucket_label(at)}#{shard}"
            for at in bucket_starts(start, end, minutes) for shard in range(shards)]


def parse_bucket(value: str) -> tuple[datetime, int | None]:
    """(bucket start, shard) of a partition value; the shard is None for an unsharded seed value."""
    label, _, shard = value.rpartition("#") if value.count("#") >= 2 else (value, "", "")
    try:
        start = datetime.strptime(label, _LABEL).replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a bucket like '2021-12-31#12:00#3'") from exc
    if shard and not shard.isdigit():
        raise ValueError(f"{value!r} has a shard that is not a number")
    return start, int(shard) if shard else None
