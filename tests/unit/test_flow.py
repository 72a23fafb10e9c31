"""Flow control's pure decisions (chalicelib/tasks/flow.py) and its settings: a clear error naming the field."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.settings import Settings, SettingsError, SourceSettingsError
from chalicelib.tasks import flow, flow_limits
from chalicelib.tasks.flow_limits import Limit
from chalicelib.tasks.model import DueMessage, TaskKey

NOW = 1_795_000_000_000  # epoch ms


@pytest.mark.parametrize(("next_ms", "start"), [
    (NOW - 400 + 100, NOW),            # idle within its burst: now
    (NOW + 100, NOW),                  # the next start was now
    (NOW + 5_000 + 100, NOW + 5_000),  # a backlog: the old next start, 5 s on
])
def test_a_reservation_starts_at_the_old_next_start_and_never_before_now(next_ms: int, start: int) -> None:
    assert flow.rate_start(next_ms, 100, NOW) == start


def test_starts_are_spaced_by_the_rate() -> None:
    assert (flow.interval_ms(14), flow.interval_ms(0.5), flow.interval_ms(flow_limits.MAX_RATE)) == (71, 2_000, 1)


def test_only_the_leases_that_ran_out_are_taken_back() -> None:
    leases = {"PK": "FLOW#email", "held": "3", "L_a": str(NOW - 1), "L_b": str(NOW), "L_c": str(NOW + 1)}
    assert flow.expired(leases, NOW) == [("L_a", NOW - 1), ("L_b", NOW)]


def test_a_task_finding_the_concurrency_full_comes_back_within_one_to_five_seconds() -> None:
    waits = [flow.concurrency_wait(d / 100) for d in range(100)]
    assert (min(waits), max(waits)) == (1, 5) and len(set(waits)) == 5


def test_a_start_stands_for_its_run_and_not_for_a_later_retry() -> None:
    due = datetime(2026, 11, 22, 12, tzinfo=UTC)
    message = DueMessage(TaskKey.for_id("t"), due, slot=due + timedelta(seconds=30))
    assert message.runs_at == due + timedelta(seconds=30)
    assert DueMessage.from_json(message.to_json()) == message
    assert flow.slot_valid(message.slot, replace(message, slot=None).runs_at)
    retried = replace(message, not_before=due + timedelta(minutes=5))  # its run failed; the retry is later
    assert retried.runs_at == due + timedelta(minutes=5)
    assert not flow.slot_valid(retried.slot, replace(retried, slot=None).runs_at)


REGION = "us-east-1"


@pytest.mark.parametrize(("action", "target"), [
    ({"type": "email", "to": "a@example.com", "subject": "s", "body": "b"}, "email"),
    ({"type": "webhook", "url": "https://Hooks.example.com:443/x?y=1"}, "https://hooks.example.com"),
    ({"type": "lambda", "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:f:live"},
     "arn:aws:lambda:us-east-1:123456789012:function:f"),
    ({"type": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/q"},
     "arn:aws:sqs:eu-west-1:123456789012:q"),
    ({"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t"}, "arn:aws:sns:us-east-1:123456789012:t"),
])
def test_a_task_is_limited_by_its_targets_name_as_the_stage_writes_it(action: dict[str, str], target: str) -> None:
    assert flow.target_of(action, REGION) == target


def test_a_task_passes_its_targets_limit_and_its_sources() -> None:
    sources = ('{"shop": {"table": "orders", "due_attribute": "at", "limit": {"concurrency": 2}}}')
    settings = Settings.from_env({"TASK_TARGET_LIMITS": '{"email": {"rate": 14}}', "TASK_SOURCES": sources})
    email = {"type": "email", "to": "a@example.com", "subject": "s", "body": "b"}
    assert flow.limits_of(email, "", settings) == [("email", Limit(rate=14.0))]
    assert flow.limits_of(email, "shop", settings) == [("email", Limit(rate=14.0)),
                                                        ("source:shop", Limit(concurrency=2))]
    sns = {"type": "sns", "topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "message": "m"}
    assert flow.limits_of(sns, "", settings) == []  # no limit: no write


@pytest.mark.parametrize(("value", "names"), [
    ('{"email": {"rate": 0}}', ("target 'email'", "field 'rate'")),
    ('{"email": {"concurrency": 201}}', ("target 'email'", "field 'concurrency'")),
    ('{"email": {"burst": 3}}', ("target 'email'", "field 'burst'")),
    ('{"ses": {"rate": 3}}', ("target 'ses'", "is not a target")),
    ('{"email": 14}', ("target 'email'", "field 'limit'")),
    ('["email"]', ("a JSON object of target -> limit",)),
    ("{email", ("not JSON",)),
])
def test_a_bad_target_limit_is_refused_at_start_naming_the_variable_the_target_and_the_field(
        value: str, names: tuple[str, ...]) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"TASK_TARGET_LIMITS": value})
    assert raised.value.name == "TASK_TARGET_LIMITS" and str(raised.value).startswith("TASK_TARGET_LIMITS=")
    for name in names:
        assert name in str(raised.value)


def test_a_bad_source_limit_names_the_source_and_the_field() -> None:
    sources = '{"shop": {"table": "orders", "due_attribute": "at", "limit": {"rate": "fast"}}}'
    with pytest.raises(SourceSettingsError) as raised:
        Settings.from_env({"TASK_SOURCES": sources})
    assert (raised.value.source, raised.value.field) == ("shop", "limit.rate")


@pytest.mark.parametrize("value", ["1", "1001", "-2", "many"])
def test_the_executors_maximum_concurrency_is_0_or_what_lambda_takes(value: str) -> None:
    with pytest.raises(SettingsError, match=r"EXECUTOR_MAX_CONCURRENCY='.*' is invalid: expected 0 or"):
        Settings.from_env({"EXECUTOR_MAX_CONCURRENCY": value})
    assert Settings.from_env({"EXECUTOR_MAX_CONCURRENCY": "250"}).executor_max_concurrency == 250
