"""Full or incremental, the chains a restore follows, and retention of chained exports (export_rules, pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.backups import rules
from chalicelib.backups.export_rules import (
    COMPLETED,
    FAILED,
    FULL,
    IN_PROGRESS,
    INCREMENTAL,
    STUCK,
    VANISHED,
    Link,
    chain_verdicts,
    change,
    next_export,
    restore_chain,
    settle,
)
from chalicelib.settings import Settings

T0 = datetime(2026, 11, 22, 12, tzinfo=UTC)
DAY = timedelta(hours=24)


def full(hours: float, status: str = COMPLETED, deleted: bool = False) -> Link:
    at = T0 + timedelta(hours=hours)
    return Link(f"{at:%Y%m%dT%H%M%SZ}", at, FULL, None, status, deleted)


def incremental(start: float, end: float, status: str = COMPLETED) -> Link:
    at = T0 + timedelta(hours=end)
    return Link(f"{at:%Y%m%dT%H%M%SZ}", at, INCREMENTAL, T0 + timedelta(hours=start), status)


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def test_the_next_export_is_incremental_from_the_previous_one_while_the_chain_since_a_recent_full_one_holds() -> None:
    plan = next_export([full(0), incremental(0, 6)], at(12), DAY)
    assert (plan.kind, plan.from_time) == (INCREMENTAL, at(6))
    in_progress = next_export([full(0), incremental(0, 6, IN_PROGRESS)], at(12), DAY)  # its window is fixed
    assert (in_progress.kind, in_progress.from_time) == (INCREMENTAL, at(6))


@pytest.mark.parametrize(("previous", "now", "full_every", "why"), [
    ([full(0)], at(6), None, "EXPORT_FULL_HOURS is 0"),
    ([], at(6), DAY, "no full export"),
    ([full(0, FAILED)], at(6), DAY, "no full export"),
    ([full(0, deleted=True)], at(6), DAY, "no full export"),
    ([full(0), incremental(0, 6)], at(24), DAY, "is 1 day, 0:00:00 old"),
    ([full(0), incremental(0, 6, FAILED)], at(12), DAY, "is FAILED"),
    ([full(0), incremental(0, 6), incremental(7, 12)], at(18), DAY, "does not start where"),  # one missing
    ([full(0)], at(0.2), DAY, "under AWS's 0:15:00"),
    ([full(0)], at(25), timedelta(hours=48), "over AWS's 1 day"),
])
def test_the_next_export_is_full_when_incrementals_are_off_or_no_good_full_or_the_chain_or_window_is_wrong(
        previous: list[Link], now: datetime, full_every: timedelta | None, why: str) -> None:
    plan = next_export(previous, now, full_every)
    assert (plan.kind, plan.from_time) == (FULL, None) and why in plan.reason, plan.reason


@pytest.mark.parametrize(("hours", "kind"), [(0.25, INCREMENTAL), (0.25 - 1 / 3600, FULL), (24, INCREMENTAL),
                                             (24 + 1 / 3600, FULL)])
def test_an_incremental_window_is_15_minutes_to_24_hours_as_aws_takes_them(hours: float, kind: str) -> None:
    assert next_export([full(0)], at(hours), timedelta(hours=48)).kind == kind


def test_a_restore_chains_an_incremental_back_to_its_full_export_and_names_what_breaks_the_chain() -> None:
    exports = [full(0), incremental(0, 1), incremental(1, 2), incremental(2, 3)]
    chain, problem = restore_chain(exports, exports[2].run_id)
    assert problem == "" and chain == exports[:3]
    assert restore_chain(exports, exports[0].run_id) == ([exports[0]], "")
    assert "is VANISHED" in restore_chain([exports[0], incremental(0, 1, VANISHED), exports[2]],
                                          exports[2].run_id)[1]
    assert "is deleted" in restore_chain([full(0, deleted=True), *exports[1:]], exports[3].run_id)[1]
    assert "not recorded" in restore_chain([exports[0], exports[2]], exports[2].run_id)[1]  # a link missing
    assert restore_chain(exports, "20200101T000000Z")[1] == "no export 20200101T000000Z"


def test_an_incremental_is_kept_and_deleted_with_its_full_export_or_by_age_when_its_chain_is_broken() -> None:
    policy = rules.Policy(age=timedelta(days=2), min_keep=1)
    old, new = full(0), full(72)
    exports = [(old, ""), (incremental(0, 6), ""), (new, ""), (incremental(72, 78), ""),
               (incremental(78, 84, IN_PROGRESS), ""), (incremental(84, 90), "")]
    verdicts = {v.run_id: v for v in chain_verdicts(exports, at(96), policy)}
    assert verdicts[old.run_id].delete and verdicts[exports[1][0].run_id].delete  # with its full export
    assert not verdicts[new.run_id].delete and not verdicts[exports[3][0].run_id].delete
    assert verdicts[exports[3][0].run_id].kept == verdicts[new.run_id].kept
    assert exports[5][0].run_id not in verdicts  # a link before it is still under way: judged when it settles
    broken = [(old, ""), (incremental(0, 6, FAILED), ""), (incremental(6, 12), "")]
    (_, orphan) = chain_verdicts(broken, at(30), policy)
    assert (orphan.kept, orphan.delete) == (("age",), False)
    assert {v.run_id: v.delete for v in chain_verdicts(broken, at(61), policy)}[broken[2][0].run_id]


def test_a_line_of_an_incremental_export_puts_its_new_image_or_deletes_its_key_and_counts_the_change() -> None:
    keys, item = {"PK": {"S": "a"}}, {"PK": {"S": "a"}, "n": {"N": "1"}}
    assert (change({"Keys": keys, "NewImage": item}).put, change({"Keys": keys, "NewImage": item}).count) == (item, 1)
    assert change({"Keys": keys, "NewImage": item, "OldImage": item}).count == 0
    deleted = change({"Keys": keys, "OldImage": item})
    assert (deleted.put, deleted.delete, deleted.count) == (None, keys, -1)
    with pytest.raises(ValueError, match="without Keys"):
        change({"NewImage": item})


def test_a_chain_is_kept_as_long_as_the_rules_keep_its_newest_restore_point() -> None:
    policy = rules.Policy(age=timedelta(days=2), min_keep=1)
    chain = [(full(0), ""), (incremental(0, 24), ""), (incremental(24, 40), ""), (full(60), "")]
    kept = {v.run_id: v for v in chain_verdicts(chain, at(70), policy)}  # the full is 70 h old, its chain's end 30 h
    assert not any(v.delete for v in kept.values())
    assert kept[chain[0][0].run_id].expires == kept[chain[2][0].run_id].expires == at(40 + 48)
    assert all(v.delete for v in chain_verdicts(chain, at(89), policy) if v.run_id != chain[3][0].run_id)


def test_an_export_in_progress_is_stuck_only_once_its_deadline_in_minutes_has_passed() -> None:
    deadline = Settings.from_env().export_deadline_minutes  # EXPORT_DEADLINE_MINUTES, the stage's
    late = [settle(IN_PROGRESS, T0, T0 + timedelta(minutes=deadline, seconds=s), deadline) for s in (-60, 0, 1)]
    assert late == [IN_PROGRESS, IN_PROGRESS, STUCK]
    assert [settle(s, T0, at(1000), deadline) for s in (COMPLETED, FAILED, "")] == [COMPLETED, FAILED, VANISHED]
