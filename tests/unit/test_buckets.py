from __future__ import annotations

from datetime import UTC, datetime

import pytest

from chalicelib.tasks.buckets import (
    bucket_start,
    buckets_between,
    due_bucket,
    parse_bucket,
    shard_of,
)
from chalicelib.tasks.model import TaskKey

KEY = TaskKey("USER#42", "REMINDER#2021-12-31T12:00:00")


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("due", "minutes", "label"), [
    ("2021-12-31T12:00:00", 1, "2021-12-31#12:00"),
    ("2021-12-31T12:00:59", 1, "2021-12-31#12:00"),
    ("2021-12-31T12:07:30", 5, "2021-12-31#12:05"),
    ("2021-12-31T12:59:59", 15, "2021-12-31#12:45"),
    ("2021-12-31T23:59:59", 60, "2021-12-31#23:00"),
    ("2022-01-01T00:00:00", 1440, "2022-01-01#00:00"),
])
def test_the_bucket_reads_like_the_seeds_task_date_time_then_a_shard(due: str, minutes: int, label: str) -> None:
    bucket = due_bucket(at(due), minutes, 4, KEY)
    assert bucket.startswith(label + "#")
    assert 0 <= int(bucket.rsplit("#", 1)[1]) < 4


def test_the_shard_depends_only_on_the_key_and_is_stable() -> None:
    assert shard_of(KEY, 1) == 0
    assert due_bucket(at("2021-12-31T12:00:01"), 1, 8, KEY).rsplit("#", 1)[1] == \
        due_bucket(at("2030-06-01T00:00:00"), 1, 8, KEY).rsplit("#", 1)[1]
    # Items already in the table keep their bucket across deploys and processes, so the value
    # is pinned: the first 8 bytes of sha256(pk NUL sk), big-endian, modulo the shard count
    # (Python's hash() would give another value in every process).
    assert shard_of(TaskKey("TASK#a", "TASK"), 1000) == 11
    assert shard_of(KEY, 1000) == 798
    assert shard_of(KEY, 4) == 2


def test_keys_spread_over_every_shard() -> None:
    shards = {shard_of(TaskKey(f"TASK#{i}", "TASK"), 4) for i in range(200)}
    assert shards == {0, 1, 2, 3}


def test_buckets_between_lists_every_bucket_and_shard_from_start_to_end_inclusive() -> None:
    values = buckets_between(at("2021-12-31T11:58:30"), at("2022-01-01T00:00:10"), 1, 2)
    assert values[:2] == ["2021-12-31#11:58#0", "2021-12-31#11:58#1"]
    assert values[-2:] == ["2022-01-01#00:00#0", "2022-01-01#00:00#1"]
    assert len(values) == 2 * 723  # 11:58 .. 00:00 is 723 one-minute buckets


def test_buckets_between_the_same_bucket_is_that_bucket() -> None:
    assert buckets_between(at("2021-12-31T12:00:10"), at("2021-12-31T12:00:50"), 1, 1) == ["2021-12-31#12:00#0"]
    assert buckets_between(at("2021-12-31T12:01:00"), at("2021-12-31T12:00:00"), 1, 1) == []


def test_bucket_start_aligns_on_the_hour_for_widths_that_divide_it() -> None:
    assert bucket_start(at("2021-12-31T12:14:59"), 15) == at("2021-12-31T12:00:00")


@pytest.mark.parametrize(("value", "expected"), [
    ("2021-12-31#12:00#3", (at("2021-12-31T12:00:00"), 3)),
    ("2021-12-31#12:00", (at("2021-12-31T12:00:00"), None)),
])
def test_parse_bucket_reads_sharded_and_seed_values(value: str, expected: tuple[datetime, int | None]) -> None:
    assert parse_bucket(value) == expected


@pytest.mark.parametrize("value", ["tomorrow", "2021-12-31#12:00#x", "2021-13-01#12:00#1"])
def test_parse_bucket_rejects_other_values(value: str) -> None:
    with pytest.raises(ValueError, match=r"bucket|shard"):
        parse_bucket(value)
