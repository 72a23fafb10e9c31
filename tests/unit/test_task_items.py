"""What the API writes: request validation, fingerprints, due attributes, list tokens."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from chalicelib.settings import Settings
from chalicelib.tasks import api, items, lifecycle
from chalicelib.tasks.lifecycle import State
from chalicelib.tasks.model import InvalidTask, Strategy, Task, TaskKey, iso, task_from_item

SETTINGS = Settings.from_env({})
NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
ACTION = {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:people", "message": "hi"}


def request(**body: Any) -> items.TaskRequest:
    return items.parse_request({"run_at": "2026-11-22T12:10:00Z", "action": ACTION, **body}, SETTINGS)



def status_of(task: Task, record: dict[str, Any] | None, now: datetime | None = None, lease: int = 0) -> str:
    """The status the API shows of ``task`` (``lifecycle.state_of`` at its item's due time)."""
    return lifecycle.state_of(record, iso(task.due), now, lease).value


def test_the_strategy_defaults_to_the_stage_default() -> None:
    assert request().strategy is Strategy.EXACT
    lazy = Settings.from_env({"DEFAULT_STRATEGY": "lazy"})
    assert items.parse_request({"run_at": 1795000000, "action": ACTION}, lazy).strategy is Strategy.LAZY


def test_the_fingerprint_ignores_how_the_time_was_spelled_but_not_what_it_is() -> None:
    assert request().fingerprint() == request(run_at="2026-11-22T13:10:00+01:00").fingerprint()
    assert request().fingerprint() == request(run_at=1795349400).fingerprint()
    assert request().fingerprint() != request(run_at="2026-11-22T12:10:01Z").fingerprint()
    assert request().fingerprint() != request(recurrence="rate(1 day)").fingerprint()


@pytest.mark.parametrize(("body", "field"), [
    ({"run_at": "soon"}, "run_at"), ({"strategy": "eventually"}, "strategy"),
    ({"action": {"type": "sms"}}, "action.type"), ({"id": ""}, "id"), ({"id": "a/b"}, "id"),
    ({"recurrence": "rate(0 minutes)"}, "recurrence"), ({"timezone": 5}, "timezone"),
])
def test_an_invalid_request_names_its_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidTask) as caught:
        request(**body)
    assert caught.value.field == field


def test_a_time_within_the_grace_is_accepted_and_one_before_it_is_not() -> None:
    items.check_not_past(datetime(2026, 11, 22, 11, 59, 0, tzinfo=UTC), NOW, 60)
    with pytest.raises(InvalidTask, match="in the past"):
        items.check_not_past(datetime(2026, 11, 22, 11, 58, 59, tzinfo=UTC), NOW, 60)


@pytest.mark.parametrize(("previous", "expected"), [
    (1795349400, 1795349400), ("1795349400", "1795349400"), ("2026-11-22T12:10:00", "2026-11-22T12:10:00Z"),
    (None, "2026-11-22T12:10:00Z"),
])
def test_a_new_due_time_keeps_the_form_the_item_used(previous: Any, expected: Any) -> None:
    assert items.format_due(previous, datetime(2026, 11, 22, 12, 10, tzinfo=UTC)) == expected


def test_each_strategy_writes_its_own_due_attributes() -> None:
    due, key = datetime(2026, 11, 22, 12, 10, tzinfo=UTC), TaskKey("TASK#x", "TASK")
    assert set(items.due_attributes(key, Strategy.EXACT, due, SETTINGS)) == {"run_at", "due_epoch"}
    assert set(items.due_attributes(key, Strategy.INTERVAL, due, SETTINGS)) == {"run_at", "due_epoch", "due_bucket"}
    lazy = items.due_attributes(key, Strategy.LAZY, due, SETTINGS)
    assert lazy["expires_at"] == lazy["due_epoch"] == int(due.timestamp())


def test_a_list_token_round_trips_and_a_forged_one_is_rejected() -> None:
    listed = "2026-11-22T12:00:00Z#x"
    assert items.decode_token(items.encode_token(1, "DONE", listed), 4) == (1, "DONE", listed)
    assert items.decode_token(items.encode_token(2, "FAILED", None), 4) == (2, "FAILED", None)
    long = "\u00e9" * 512  # 1,024 bytes of UTF-8: the longest sort key, within the token's bound
    assert items.decode_token(items.encode_token(0, "DONE", long), 1) == (0, "DONE", long)
    for forged in ("garbage", items.encode_token(9, "DONE", None), items.encode_token(0, "DONE", long + "x"),
                   items.encode_token(True, "DONE", None)):
        with pytest.raises(InvalidTask):
            items.decode_token(forged, 4)


@pytest.mark.parametrize(("record", "status"), [
    ({"status": "CANCELLED", "run_at": "2026-11-22T13:00:00Z"}, "CANCELLED"),  # the API's cancel
    ({"status": "CANCELLED", "run_at": "2026-11-22T13:00:00Z", "cancelled_by": "item"}, "PENDING"),  # written again
    ({"status": "PENDING"}, "PENDING"),
])
def test_a_cancel_seen_by_the_stream_is_of_the_item_then_and_an_item_written_again_is_pending(
        record: dict[str, Any], status: str) -> None:
    task = task_from_item({"PK": "USER#a", "SK": "R", "run_at": "2026-11-22T13:00:00Z", "email": "a@example.com"},
                          SETTINGS)
    assert status_of(task, record) == status
    assert api.shown_status(record, None) == lifecycle.state_of(record).value  # the item gone: the record tells


LEASE = 300


@pytest.mark.parametrize("claimed_seconds_ago, shown", [
    (0, "RUNNING"), (LEASE - 1, "RUNNING"), (LEASE, "RUNNING"),  # the executor's test: a claim at the lease is live
    (LEASE + 1, "PENDING"), (10 * LEASE, "PENDING"),  # its worker stopped: the next delivery takes it over
])
def test_get_shows_running_only_while_a_live_claim_of_the_current_due_time_is_held(
        claimed_seconds_ago: int, shown: str) -> None:
    task = task_from_item(items.new_item("standup", request(), SETTINGS, NOW), SETTINGS)
    record = {"status": "PENDING", "exec_due": "2026-11-22T12:10:00Z", "exec_state": "RUNNING", "exec_owner": "w",
              "claimed_at": NOW.timestamp() - claimed_seconds_ago}
    assert status_of(task, record, NOW, LEASE) == shown
    assert items.view_of_task(task, record, now=NOW, lease_seconds=LEASE)["status"] == shown
    assert lifecycle.claim_is_live(record, NOW, LEASE) is (shown == "RUNNING")
    assert status_of(task, {**record, "exec_due": "2026-11-22T12:09:00Z"}, NOW, LEASE) == "PENDING"


@pytest.mark.parametrize("own", [{}, {"status": "PENDING"}, {"status": "DONE", "attempts": 3}])
def test_an_api_task_and_its_record_start_pending_whatever_its_items_own_status_says(own: dict[str, Any]) -> None:
    item = {"PK": "TASK#x", "SK": "TASK", "run_at": "2026-11-22T12:10:00Z", "action": ACTION,
            "created_at": "2026-11-22T12:00:00Z", **own}
    record = items.record_of(task_from_item(item, SETTINGS), item["created_at"])
    assert (record["status"], record["attempts"]) == ("PENDING", 0)
    # its record gone (expired after the task finished): the item's own status does not say otherwise
    assert items.expired_record(TaskKey.for_id("x"), item, None, NOW) is not None


def test_a_page_of_a_status_merges_its_shards_by_listed_and_never_passes_a_shard_that_has_more() -> None:
    full = [("2026-01-01#a", "a"), ("2026-01-03#c", "c")]  # a shard with more rows after these
    done = [("2026-01-02#b", "b"), ("2026-01-04#d", "d"), ("2026-01-05#e", "e")]  # a shard read to its end
    assert items.merge_shards([(full, True), (done, False)], 10) == (["a", "b", "c"], "2026-01-03#c")
    assert items.merge_shards([(full, False), (done, False)], 3) == (["a", "b", "c"], "2026-01-03#c")
    assert items.merge_shards([(full, False), (done, False)], 5) == (["a", "b", "c", "d", "e"], None)
    assert items.merge_shards([([], False)] * items.STATUS_SHARDS, 5) == ([], None)
    assert len(set(items.status_keys("FAILED"))) == items.STATUS_SHARDS
    assert items.status_key("a", "FAILED") in items.status_keys("FAILED")


def test_only_the_statuses_an_operator_lists_at_once_are_filed_in_the_status_index() -> None:
    assert {s.value for s in State if items.status_key("a", s.value) is not None} \
        == {"CANCELLED", "FAILED", "DEAD_LETTERED", "PAUSED"}
    assert items.status_fields("a", "DONE") == {"status": "DONE", "status_key": items.ABSENT}  # removed by the write
    assert items.present(items.status_fields("a", "PENDING")) == {"status": "PENDING"}
