"""P4k of the bench (bench/hot_keys.py) at tiny N: the keys each write touched, per table and index."""

from __future__ import annotations

from collections import Counter

from bench import hot_keys
from bench.core import Scale
from chalicelib.tasks import items


def test_a_key_shared_by_tasks_scales_with_the_rate_and_a_tasks_own_key_does_not() -> None:
    units = {"state": Counter({"TASK#a": 3, "TASK#b": 3}), "state/index": Counter({"PENDING#01": 4, "DONE#02": 2})}
    touched = {("state", "TASK#a"): {"a"}, ("state", "TASK#b"): {"b"},
               ("state/index", "PENDING#01"): {"a", "b"}, ("state/index", "DONE#02"): {"a", "b"}}
    table, index = hot_keys.hottest(units, touched, tasks=2)
    assert (table.key, table.at_rate(2)) in {("TASK#a", 3.0), ("TASK#b", 3.0)}
    assert (index.key, index.share, index.at_rate(2)) == ("PENDING#01", 4 / 6, 2 * hot_keys.RATE)
    assert hot_keys.unsharded(Counter({"PENDING#01": 4, "PENDING#07": 2, "DONE#02": 1})) == Counter(
        {"PENDING": 6, "DONE": 1})


def test_the_ordinary_path_writes_no_status_index_entry_and_failures_spread_over_the_failed_shards(
        tmp_path: object) -> None:
    [section] = hot_keys.run(Scale("tiny"), tmp_path)  # type: ignore[arg-type]
    figures = section.figures
    assert figures["status_index_units"] == 0  # created or claimed PENDING, settled DONE: not indexed
    assert f"timekeeper-state/{items.STATUS_INDEX}" not in figures["hottest"]
    index = figures["hottest"][f"timekeeper-state/{items.STATUS_INDEX}{hot_keys.FAILING}"]
    status, _, shard = index["key"].partition("#")
    assert status == "FAILED" and shard.isdigit()
    assert index["share"] < 0.5  # one key for FAILED would take every entry
    assert figures["status_index_unsharded"] == {"key": "FAILED", "units_per_second_at_rate": hot_keys.RATE}
    assert figures["hottest"]["timekeeper-state"]["units_per_second_at_rate"] <= 4  # a task's own record
