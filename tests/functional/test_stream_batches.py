"""The stream scheduler's batches: due messages go out in SendMessageBatch calls, an entry SQS fails is sent
again or reported with its record (and only its record and the later ones of its key), one it refuses as the
sender's fault is dead-lettered once, one key's records keep their order, and a cold container looks its queue
URL and ARN up once however many threads start together."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError
from chalice.test import Client

from chalicelib.aws import Deps
from chalicelib.tasks import stream as stream_scheduler
from chalicelib.tasks.model import DueMessage, TaskKey
from chalicelib.tasks.schedules import schedule_name
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.stream_support import Calls, InFlight, Table, schedule_of, stream
from tests.functional.task_support import use_client

ADA = TaskKey("USER#ada", "REMINDER#standup")

#: What SendMessageBatch reports for an entry it failed: None (send it), or the entry's Failed fields.
Verdict = Callable[[DueMessage], dict[str, Any] | None]


class FailingEntries:
    """An SQS client whose SendMessageBatch to the due queue reports the entries ``verdict`` picks as Failed, as
    SQS does, and sends the others (SendMessage fails the same way, as a whole); the whole call fails when
    ``refuse_call`` says so.  ``batches`` holds each call's messages (one for SendMessage)."""

    def __init__(self, deps: Deps, verdict: Verdict,
                 refuse_call: Callable[[list[DueMessage]], bool] = lambda messages: False) -> None:
        self._real = deps.clients.sqs
        self._due_queue = deps.queue_url(deps.settings.due_queue)
        self._verdict = verdict
        self._refuse_call = refuse_call
        self.batches: list[list[DueMessage]] = []
        use_client(deps, "sqs", self)

    def send_message(self, **kwargs: Any) -> Any:
        if kwargs["QueueUrl"] != self._due_queue:
            return self._real.send_message(**kwargs)
        message = DueMessage.from_json(kwargs["MessageBody"])
        self.batches.append([message])
        verdict = self._verdict(message)
        if verdict or self._refuse_call([message]):
            code = verdict["Code"] if verdict else "InternalError"
            raise ClientError({"Error": {"Code": code, "Message": "refused"}}, "SendMessage")
        return self._real.send_message(**kwargs)

    def send_message_batch(self, **kwargs: Any) -> Any:
        entries = kwargs["Entries"]
        messages = [DueMessage.from_json(e["MessageBody"]) for e in entries]
        self.batches.append(messages)
        if self._refuse_call(messages):
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try later"}}, "SendMessageBatch")
        failed: list[dict[str, Any]] = []
        sent: list[dict[str, Any]] = []
        for entry, message in zip(entries, messages, strict=True):
            verdict = self._verdict(message)
            (failed.append({"Id": entry["Id"], **verdict}) if verdict else sent.append(entry))
        response: Any = self._real.send_message_batch(**{**kwargs, "Entries": sent}) if sent else {}
        return {"Successful": response.get("Successful", []), "Failed": [*response.get("Failed", []), *failed]}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def unavailable(times: int, *keys: TaskKey) -> Verdict:
    """Entries of ``keys`` fail on SQS's side (not the sender's fault) ``times`` times each."""
    left = Counter({key: times for key in keys})

    def verdict(message: DueMessage) -> dict[str, Any] | None:
        if left[message.key] <= 0:
            return None
        left[message.key] -= 1
        return {"SenderFault": False, "Code": "InternalError", "Message": "try again"}
    return verdict


@pytest.fixture
def table(deps: Deps) -> Table:
    use_settings(deps, due_attribute="REMINDER_TIMESTAMP")
    return Table(deps)


def key(n: int) -> TaskKey:
    return TaskKey(f"USER#{n:03d}", "REMINDER#x")


def seed(key: TaskKey, clock: FakeClock, **ahead: float) -> dict[str, Any]:
    """The reminder seed's item, due ``ahead`` from now (within 15 minutes: the SQS-delay path)."""
    due = clock.now + timedelta(**ahead)
    return {"PK": key.pk, "SK": key.sk, "REMINDER_TIMESTAMP": int(due.timestamp()), "email": "ada@example.com"}


def sent_keys(aws: Aws, deps: Deps) -> list[TaskKey]:
    return [DueMessage.from_json(body).key for body, _ in aws.sent(deps.settings.due_queue)]


def test_a_batch_of_a_hundred_new_tasks_due_soon_sends_its_messages_in_ten_calls(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    records = [table.put(seed(key(n), clock, minutes=10, seconds=n)) for n in range(100)]
    calls = Calls(deps, ("sqs",))
    assert stream(client, *records) == []
    assert calls.counts["sqs.SendMessageBatch"] == 10 and calls.counts["sqs.SendMessage"] == 0
    sent = {DueMessage.from_json(body).key: delay for body, delay in aws.sent(deps.settings.due_queue)}
    assert sent == {key(n): 600 + n for n in range(100)}


def test_messages_too_large_to_share_a_batch_go_alone(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    # A lazy item's TTL REMOVE carries its image: two of 150 KB cannot share one 256 KiB batch.
    big = [TaskKey(f"USER#big{n}", "x") for n in range(2)]
    for k in big:
        table.put({"PK": k.pk, "SK": k.sk, "strategy": "lazy", "expires_at": int(clock.now.timestamp()) - 60,
                   "email": "ada@example.com", "notes": "x" * 150_000})
    removed = [table.delete(k, by_ttl=True) for k in big]
    small = [table.put(seed(key(n), clock, minutes=5)) for n in range(4)]
    calls = Calls(deps, ("sqs",))
    assert stream(client, removed[0], *small, removed[1]) == []
    assert calls.counts["sqs.SendMessageBatch"] == 1 and calls.counts["sqs.SendMessage"] == 1
    assert sorted(sent_keys(aws, deps)) == sorted([*big, *(key(n) for n in range(4))])
    assert aws.sent(deps.settings.task_dlq) == []


def test_an_entry_sqs_failed_on_its_side_is_sent_again_and_the_batch_succeeds(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    records = [table.put(seed(key(n), clock, minutes=10)) for n in range(10)]
    sqs = FailingEntries(deps, unavailable(2, key(4)))
    assert stream(client, *records) == []
    assert [len(batch) for batch in sqs.batches] == [10, 1, 1]
    assert sorted(sent_keys(aws, deps)) == [key(n) for n in range(10)]
    assert clock.slept > 0


def test_an_entry_that_keeps_failing_reports_its_record_and_the_later_ones_of_its_key_only(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    records = [table.put(seed(key(n), clock, minutes=10)) for n in range(15)]
    later = table.put(seed(key(5), clock, minutes=12))  # the same key again, moved
    sqs = FailingEntries(deps, unavailable(1_000, key(5)))
    failed = stream(client, *records[:8], later, *records[8:])
    assert failed == [records[5]["dynamodb"]["SequenceNumber"], later["dynamodb"]["SequenceNumber"]]
    assert sorted(sent_keys(aws, deps)) == [key(n) for n in range(15) if n != 5]
    assert sum(1 for batch in sqs.batches for m in batch if m.key == key(5)) == stream_scheduler.ENTRY_SEND_ATTEMPTS
    assert aws.sent(deps.settings.task_dlq) == []


def test_a_batch_call_that_fails_reports_the_records_of_its_messages(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    records = [table.put(seed(key(n), clock, minutes=10)) for n in range(12)]
    sqs = FailingEntries(deps, lambda message: None,
                         refuse_call=lambda messages: any(m.key == key(3) for m in messages))
    failed = stream(client, *records)
    assert sorted(len(batch) for batch in sqs.batches) == [2, 10]  # the two calls run concurrently
    assert failed == [r["dynamodb"]["SequenceNumber"] for r in records[:10]]
    assert sorted(sent_keys(aws, deps)) == [key(10), key(11)]


def test_an_entry_sqs_refuses_as_the_senders_fault_is_dead_lettered_once_and_the_others_are_sent(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    records = [table.put(seed(key(n), clock, minutes=10)) for n in range(6)]

    def refused(message: DueMessage) -> dict[str, Any] | None:
        return ({"SenderFault": True, "Code": "InvalidParameterValue", "Message": "invalid characters"}
                if message.key == key(2) else None)

    sqs = FailingEntries(deps, refused)
    assert stream(client, *records) == []
    assert sorted(sent_keys(aws, deps)) == [key(n) for n in range(6) if n != 2]
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    letter = json.loads(body)
    assert "InvalidParameterValue" in letter["reason"] and "invalid characters" in letter["reason"]
    assert letter["payload"]["dynamodb"]["SequenceNumber"] == records[2]["dynamodb"]["SequenceNumber"]
    assert [len(batch) for batch in sqs.batches] == [6]  # not sent again


def test_one_keys_records_keep_stream_order_across_the_batches_of_other_keys(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    first = table.put(seed(ADA, clock, minutes=10))
    others = [table.put(seed(key(n), clock, minutes=10)) for n in range(12)]
    second = table.put(seed(ADA, clock, minutes=5))
    use_settings(deps, past_horizon="scheduler")
    third = table.put(seed(ADA, clock, hours=3))  # to Scheduler, once both messages are out
    calls: list[str] = []
    sqs = FailingEntries(deps, lambda message: calls.append(f"send {message.due:%H:%M}")
                         if message.key == ADA else None)
    deps.clients.scheduler.meta.events.register(
        "provide-client-params.scheduler", lambda params, model, **_: calls.append(model.name)
        if params.get("Name") == schedule_name(ADA) else None)
    assert stream(client, first, *others[:6], second, *others[6:], third) == []
    assert calls == ["send 12:10", "DeleteSchedule", "send 12:05", "UpdateSchedule", "CreateSchedule"]
    assert [sorted(len(b) for b in sqs.batches[:2]), len(sqs.batches[2])] == [[3, 10], 1]  # round 1 (two calls at once), round 2
    sent = [DueMessage.from_json(body) for body, _ in aws.sent(deps.settings.due_queue)]
    assert [m.due for m in sent if m.key == ADA] == [clock.now + timedelta(minutes=10), clock.now + timedelta(minutes=5)]
    assert schedule_of(deps, ADA) is not None


def test_a_cold_container_looks_its_queue_url_and_arn_up_once_when_its_threads_start_together(
        deps: Deps, clock: FakeClock, table: Table) -> None:
    # A stage whose settings do not name the due queue's URL and ARN (provisioning sets them: no look-up then).
    use_settings(deps, stream_concurrency=20, due_queue_url="", due_queue_arn="", past_horizon="scheduler")
    records = [table.put({**seed(key(n), clock, hours=3)}) for n in range(20)]
    urls = InFlight(deps.clients.sqs, "get_queue_url", expected=2, timeout=0.5, grace=0.0)
    sqs = InFlight(urls, "get_queue_attributes", expected=2, timeout=0.5, grace=0.0)
    cold = Deps(settings=deps.settings, clients=deps.clients, clock=clock, sleep=clock.sleep)  # no URL known yet
    use_client(cold, "sqs", sqs)
    stream_scheduler._queue_arns.clear()  # nor the ARN: a new container's module state
    assert stream_scheduler.process_records(cold, records) == {"batchItemFailures": []}
    assert (urls.calls, sqs.calls) == (1, 1)
    assert all(schedule_of(deps, key(n)) is not None for n in range(20))


def test_a_container_whose_settings_name_the_due_queue_looks_nothing_up(
        deps: Deps, clock: FakeClock, table: Table) -> None:
    use_settings(deps, past_horizon="scheduler")  # a schedule's target: the queue's ARN
    records = [table.put({**seed(key(n), clock, hours=3)}) for n in range(3)]
    urls = InFlight(deps.clients.sqs, "get_queue_url", expected=1, timeout=0.0, grace=0.0)
    sqs = InFlight(urls, "get_queue_attributes", expected=1, timeout=0.0, grace=0.0)
    cold = Deps(settings=deps.settings, clients=deps.clients, clock=clock, sleep=clock.sleep)
    use_client(cold, "sqs", sqs)
    stream_scheduler._queue_arns.clear()
    assert deps.settings.due_queue_url and deps.settings.due_queue_arn  # as provisioning sets them
    assert stream_scheduler.process_records(cold, records) == {"batchItemFailures": []}
    assert (urls.calls, sqs.calls) == (0, 0)


def test_a_poison_record_seen_again_when_lambda_retries_its_batch_is_dead_lettered_once(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, table: Table) -> None:
    failing = table.put(seed(key(1), clock, minutes=10))
    poison = table.put({**seed(key(2), clock, minutes=10), "email": "not an address"})  # after it: seen again
    down = [True]  # SQS fails the failing record's message on its side while down, and takes it after
    FailingEntries(deps, lambda message: {"SenderFault": False, "Code": "InternalError", "Message": "try again"}
                   if message.key == key(1) and down[0] else None)
    assert stream(client, failing, poison) == [failing["dynamodb"]["SequenceNumber"]]
    down[0] = False
    assert stream(client, failing, poison) == []  # Lambda's retry, from the lowest failed record
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    assert json.loads(body)["event_id"] == poison["eventID"]
    assert sent_keys(aws, deps) == [key(1)]


def test_a_record_without_a_key_seen_again_is_dead_lettered_once(aws: Aws, deps: Deps, client: Client) -> None:
    keyless = {"eventID": "e-keyless", "eventName": "INSERT", "dynamodb": {"SequenceNumber": "400000000000000000000"}}
    assert stream(client, keyless) == []
    assert stream(client, keyless) == []
    [(body, _)] = aws.sent(deps.settings.task_dlq)
    assert json.loads(body)["event_id"] == "e-keyless"
