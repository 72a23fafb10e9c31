"""The suite's order (tests/fixtures.py ``suite_order``): the longest files first, the policy check last."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures import LONGEST_FIRST, pytest_collection_modifyitems

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_started_first_exists_once() -> None:
    missing = [path for path in LONGEST_FIRST if not (ROOT / path).is_file()]
    assert missing == [], f"LONGEST_FIRST names test files that do not exist: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


def test_the_longest_files_come_first_and_the_tests_marked_last_after_everything() -> None:
    class Item:
        def __init__(self, nodeid: str, last: bool = False) -> None:
            self.nodeid, self._last = nodeid, last

        def get_closest_marker(self, name: str) -> object | None:
            return object() if name == "last" and self._last else None

    collected = [Item("tests/bench/test_bench_harness.py::test_a"), Item("tests/deploy/test_zz_policy_coverage.py::t", last=True),
                 Item(f"{LONGEST_FIRST[1]}::test_b"), Item("tests/unit/test_log.py::test_c"),
                 Item(f"{LONGEST_FIRST[0]}::test_d"), Item(f"{LONGEST_FIRST[0]}::test_e")]
    pytest_collection_modifyitems(collected)  # type: ignore[arg-type]
    assert [i.nodeid.rsplit("::", 1)[1] for i in collected] == ["test_d", "test_e", "test_b", "test_a", "test_c", "t"]
