"""EventBridge Scheduler, which moto stores but never fires: schedules fire at their time.

The poller lists the schedules of every group (ListSchedules) when it starts and
reads each one (GetSchedule).  After that it learns what changed from moto's
change feed (``moto_speed.watch_schedules``: moto runs in this process and
announces every CreateSchedule, UpdateSchedule and DeleteSchedule), and reads only
those schedules, a few times a second; its plans sit in a heap by firing time, so
finding what is due costs nothing per schedule.  Without a feed (moto elsewhere),
it lists every group again, at most every FALLBACK_LIST_FACTOR times as long as a
listing takes (at least every second), and reads a schedule again just before it
fires, in case it was deleted meanwhile.  A schedule fires at its at(), rate()
or cron() time in its ScheduleExpressionTimezone (chalicelib.schedule_fire.next_fire,
which the app uses too: a cron time skipped by a daylight saving change does not
fire, a repeated one fires once), within StartDate/EndDate, plus a random delay,
as on AWS:

* FlexibleTimeWindow OFF: up to LOCAL_SCHEDULER_JITTER_SECONDS (default 60: AWS
  invokes somewhere in the minute);
* FLEXIBLE: anywhere in its MaximumWindowInMinutes;
* LOCAL_SCHEDULER_JITTER_SECONDS=0: every schedule fires exactly on time.

Target.Input is delivered to an SQS queue (SendMessage), an SNS topic (Publish)
or a Lambda function of the app (its handler is invoked with the parsed Input,
asynchronously as Scheduler does: a handler error is retried twice, as Lambda
retries async events, and never counts against the schedule).  A delivery
that fails is retried with growing pauses (1 s, 2 s, 4 s ... at most 60 s:
AWS's backoff, scaled down) while the RetryPolicy allows (MaximumRetryAttempts,
MaximumEventAgeInSeconds), then sent to DeadLetterConfig's queue with the
attributes AWS sets (ERROR_CODE, ERROR_MESSAGE, EXHAUSTED_RETRY_CONDITION, ...).
After its last invocation a schedule with ActionAfterCompletion DELETE is deleted.
Any error while delivering (not only AWS's) counts as a failed delivery.

Like EventBridge, the poller never backfills: when it wakes up late (a
suspended laptop, a clock jump) past a schedule's window, the awaited
invocation happens once, the ones missed after it are skipped (one line says
how many) and the next is the first one still ahead.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import schedule_expr, schedule_fire
from local.invoker import Clock, Invoker, describe_error
from local.sources.schedules import missed_between

if TYPE_CHECKING:
    from mypy_boto3_scheduler import EventBridgeSchedulerClient
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

LIST_EVERY_SECONDS = 1.0
CHANGES_EVERY_SECONDS = 0.2   # with a change feed: how often the changed schedules are read
FALLBACK_LIST_FACTOR = 10.0   # without one: list again after 10 times the last listing's time
OFF_WINDOW_SECONDS = 60.0
DEFAULT_RETRY = {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}
LAMBDA_ASYNC_RETRIES = 2
RETRY_MAX_SECONDS = 60.0
LATE_GRACE_SECONDS = 5.0  # past its window by more than this, an invocation counts as missed


# subscribe(listener(group, name)) -> unsubscribe: moto's schedule changes (local.moto_speed)
ScheduleFeed = Callable[[Callable[[str, str], None]], Callable[[], None]]


class DeliveryError(Exception):
    """A target could not be reached: counts against the schedule's retry policy."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _utc(moment: Any) -> datetime | None:
    if moment is None or moment == "":
        return None
    if isinstance(moment, datetime):
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(moment), UTC)


def next_due(schedule: dict[str, Any], after: datetime) -> datetime | None:
    """The schedule's next nominal invocation strictly after ``after`` (None: it has completed).

    A one-time at() schedule whose time has passed when first seen is due at once:
    pass ``after`` just before its time (the poller passes its creation time).
    """
    expression = schedule_expr.parse(schedule["ScheduleExpression"], allow_at=True)
    tz = schedule.get("ScheduleExpressionTimezone") or "UTC"
    if isinstance(expression, schedule_expr.At):
        return schedule_fire.next_fire(expression, after, tz)
    start, end = _utc(schedule.get("StartDate")), _utc(schedule.get("EndDate"))
    if start is not None and after < start:
        after = start - timedelta(microseconds=1)
    anchor = start or _utc(schedule.get("CreationDate")) or after
    due = schedule_fire.next_fire(expression, after, tz, start=anchor)
    if due is None or (end is not None and due > end):
        return None
    return due


def spread_seconds(schedule: dict[str, Any], jitter_seconds: float) -> float:
    """How late after its nominal time an invocation may come (0: exact)."""
    if jitter_seconds <= 0:
        return 0.0
    window = schedule.get("FlexibleTimeWindow") or {}
    if window.get("Mode") == "FLEXIBLE":
        return float(window.get("MaximumWindowInMinutes", 1)) * 60.0
    return min(float(jitter_seconds), OFF_WINDOW_SECONDS)


@dataclass
class Plan:
    schedule: dict[str, Any]
    modified: Any
    due: datetime | None
    fire_at: datetime | None


@dataclass(order=True)
class Delivery:
    when: datetime
    seq: int
    schedule: dict[str, Any] = field(compare=False)
    due: datetime = field(compare=False)
    attempt: int = field(default=0, compare=False)
    final: bool = field(default=False, compare=False)  # the schedule's last invocation


class SchedulerPoller:
    def __init__(self, scheduler: EventBridgeSchedulerClient, sqs: SQSClient, sns: SNSClient, invoker: Invoker,
                 executor: Executor, clock: Clock, *, jitter_seconds: float,
                 rng: random.Random | None = None, changes: ScheduleFeed | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.scheduler = scheduler
        self.sqs = sqs
        self.sns = sns
        self.invoker = invoker
        self.reporter = invoker.reporter
        self.executor = executor
        self.clock = clock
        self.jitter_seconds = jitter_seconds
        self.rng = rng or random.Random()
        self.monotonic = monotonic
        self.plans: dict[str, Plan] = {}
        self.deliveries: list[Delivery] = []
        self.listings = 0                                         # full listings of every group made
        self._firing: list[tuple[datetime, int, str]] = []        # (fire_at, seq, ARN): a heap of the plans
        self._arns: dict[tuple[str, str], str] = {}               # (group, name) -> ARN
        self._changes = changes
        self._changed: dict[tuple[str, str], int] = {}            # announced, not read yet: how many times
        self._generation = 0                                      # how many times _changed was taken
        self._completed_keys: set[tuple[str, str]] = set()        # deleted here after their last invocation
        self._changed_lock = threading.Lock()
        self._unsubscribe: Callable[[], None] | None = None
        self._listed_at = -math.inf
        self._list_seconds = 0.0
        self._queue_urls: dict[str, str] = {}
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.started = clock()

    @property
    def name(self) -> str:
        return "scheduler"

    def describe(self) -> str:
        jitter = "exact" if self.jitter_seconds <= 0 else f"up to {self.jitter_seconds:g}s late (OFF window)"
        return f"EventBridge Scheduler: every group, fired {jitter}"

    def listen(self) -> None:
        """Follow the change feed (before the first listing: a change is either announced or listed)."""
        if self._changes is not None and self._unsubscribe is None:
            self._unsubscribe = self._changes(self._changed_schedule)

    def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _changed_schedule(self, group: str, name: str) -> None:
        """The feed's listener (called in moto's request thread: cheap, never an AWS call)."""
        with self._changed_lock:
            self._changed[(group, name)] = self._changed.get((group, name), 0) + 1

    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        self.listen()
        try:
            while not stop.is_set():
                try:
                    self.update()
                except (ClientError, BotoCoreError) as exc:
                    self.reporter.line(f"scheduler: listing schedules failed: {exc}")
                self.dispatch()
                wake = CHANGES_EVERY_SECONDS if self._changes is not None else LIST_EVERY_SECONDS
                upcoming = self._next_wake()
                if upcoming is not None:
                    wake = min(wake, (upcoming - self.clock()).total_seconds())
                stop.wait(max(0.01, wake))
        finally:
            self.close()

    def update(self) -> None:
        """Learn what changed: the first time (and, without a feed, now and then) by listing every group,
        else by reading the schedules the feed announced."""
        since = self.monotonic() - self._listed_at
        if since == math.inf or (self._changes is None and since >= max(
                LIST_EVERY_SECONDS, FALLBACK_LIST_FACTOR * self._list_seconds)):
            began = self.monotonic()
            self.refresh()
            self._listed_at = self.monotonic()
            self._list_seconds = self._listed_at - began
        if self._changes is not None:
            self.refresh_changed()

    def _next_wake(self) -> datetime | None:
        times = [self._firing[0][0]] if self._firing else []
        with self._lock:
            if self.deliveries:
                times.append(self.deliveries[0].when)
        return min(times) if times else None

    def _set_plan(self, arn: str, plan: Plan) -> None:
        self.plans[arn] = plan
        schedule = plan.schedule
        self._arns[(schedule.get("GroupName") or "default", schedule.get("Name", ""))] = arn
        if plan.fire_at is not None:
            heapq.heappush(self._firing, (plan.fire_at, next(self._seq), arn))

    def _drop_plan(self, arn: str) -> None:
        plan = self.plans.pop(arn, None)
        if plan is not None:
            self._arns.pop((plan.schedule.get("GroupName") or "default", plan.schedule.get("Name", "")), None)

    # --- which schedules exist, and when they fire ------------------------------

    def _list(self) -> dict[str, dict[str, Any]]:
        self.listings += 1
        groups: list[str] = []
        for group_page in self.scheduler.get_paginator("list_schedule_groups").paginate():
            groups += [g["Name"] for g in group_page.get("ScheduleGroups", [])]
        found: dict[str, dict[str, Any]] = {}
        for group in groups:
            for page in self.scheduler.get_paginator("list_schedules").paginate(GroupName=group):
                for summary in page.get("Schedules", []):
                    found[summary["Arn"]] = dict(summary)
        return found

    def refresh(self) -> None:
        listed = self._list()
        for arn in list(self.plans):
            if arn not in listed:
                self._drop_plan(arn)  # deleted (by the app, or after completion)
        for arn, summary in listed.items():
            plan = self.plans.get(arn)
            if plan is not None and plan.modified == summary.get("LastModificationDate"):
                continue
            try:
                schedule = dict(self.scheduler.get_schedule(
                    Name=summary["Name"], GroupName=summary.get("GroupName") or "default"))
            except ClientError:
                continue  # deleted between the listing and now
            self._set_plan(arn, self._plan(schedule, summary.get("LastModificationDate")))

    def refresh_changed(self) -> None:
        """Read each schedule the feed announced since the last call: planned again, or gone."""
        with self._changed_lock:
            changed, self._changed = self._changed, {}
            completed, self._completed_keys = self._completed_keys, set()
            self._generation += 1
        for key in completed:  # deleted by _completed: gone, no need to read it
            arn = self._arns.get(key)
            if arn is not None:
                self._drop_plan(arn)
        pending = sorted(changed)
        while pending:
            group, name = pending.pop()
            try:
                schedule = dict(self.scheduler.get_schedule(Name=name, GroupName=group))
            except ClientError:
                arn = self._arns.get((group, name))
                if arn is not None:
                    self._drop_plan(arn)  # deleted (by the app, or after completion)
                continue
            except BotoCoreError:
                with self._changed_lock:  # read again next time
                    for key in [*pending, (group, name)]:
                        self._changed[key] = self._changed.get(key, 0) + 1
                raise
            self._set_plan(str(schedule["Arn"]), self._plan(schedule, schedule.get("LastModificationDate")))

    def _plan(self, schedule: dict[str, Any], modified: Any) -> Plan:
        if schedule.get("State", "ENABLED") != "ENABLED":
            return Plan(schedule, modified, None, None)
        created = _utc(schedule.get("LastModificationDate")) or self.clock()
        # at(): due even if its time passed before we saw it; recurring: from now on
        after = created - timedelta(microseconds=1) if schedule["ScheduleExpression"].startswith("at(") \
            else self.clock()
        try:
            due = next_due(schedule, min(after, self.clock()))
        except ValueError as exc:  # moto stores any expression; AWS would have refused it
            self.reporter.line(f"schedule {schedule.get('GroupName')}/{schedule.get('Name')}: never fires: {exc}")
            due = None
        return self._with_jitter(Plan(schedule, modified, due, None))

    def _with_jitter(self, plan: Plan) -> Plan:
        if plan.due is not None:
            late = self.rng.uniform(0.0, spread_seconds(plan.schedule, self.jitter_seconds))
            plan.fire_at = plan.due + timedelta(seconds=late)
        else:
            plan.fire_at = None
        return plan

    # --- firing and delivering --------------------------------------------------

    def dispatch(self) -> None:
        now = self.clock()
        while self._firing and self._firing[0][0] <= now:
            fire_at, _, arn = heapq.heappop(self._firing)
            plan = self.plans.get(arn)
            if plan is None or plan.fire_at != fire_at or plan.due is None:
                continue  # planned again, or gone, since this entry was made
            if not self._unchanged(plan):
                self._drop_plan(arn)  # deleted or updated since it was read: read again, then planned
                continue
            following = self._following(plan, now)
            is_last = following is None
            self._enqueue(Delivery(now, next(self._seq), plan.schedule, plan.due, final=is_last))
            plan.due = following
            self._with_jitter(plan)
            if plan.fire_at is not None:
                heapq.heappush(self._firing, (plan.fire_at, next(self._seq), arn))
        while True:
            with self._lock:
                if not self.deliveries or self.deliveries[0].when > now:
                    return
                delivery = heapq.heappop(self.deliveries)
            self.executor.submit(self.attempt, delivery)

    def _following(self, plan: Plan, now: datetime) -> datetime | None:
        """The invocation after ``plan.due``; never one whose window closed before ``now`` (no backfill)."""
        assert plan.due is not None
        schedule = plan.schedule
        window = timedelta(seconds=spread_seconds(schedule, self.jitter_seconds) + LATE_GRACE_SECONDS)
        behind = now - window  # an invocation due before this would only be fired late
        following = next_due(schedule, plan.due)
        if following is None or following >= behind:
            return following
        skipped, last = missed_between(lambda moment: next_due(schedule, moment), plan.due, behind)
        self.reporter.line(
            f"schedule {schedule.get('GroupName', 'default')}/{schedule['Name']}: woke up late: skipped "
            f"{skipped} missed invocation{'s' if skipped != 1 else ''} up to {last:%Y-%m-%d %H:%M:%S}Z "
            "(Scheduler never backfills)")
        return next_due(schedule, max(plan.due, behind))

    def _unchanged(self, plan: Plan) -> bool:
        """Whether the schedule still exists as planned (the app may have deleted it since the listing).
        With a change feed, unless a change was announced since it was read; else read it again."""
        schedule = plan.schedule
        if self._changes is not None:
            with self._changed_lock:
                return (schedule.get("GroupName") or "default", schedule.get("Name", "")) not in self._changed
        try:
            current = self.scheduler.get_schedule(Name=schedule["Name"],
                                                  GroupName=schedule.get("GroupName") or "default")
        except ClientError:
            return False
        except BotoCoreError:
            return True  # cannot tell: fire as planned
        return current.get("LastModificationDate") == schedule.get("LastModificationDate")

    def _enqueue(self, delivery: Delivery) -> None:
        with self._lock:
            heapq.heappush(self.deliveries, delivery)

    def attempt(self, delivery: Delivery) -> None:
        schedule = delivery.schedule
        target = schedule["Target"]
        label = f"schedule {schedule.get('GroupName', 'default')}/{schedule['Name']}"
        try:
            outcome = self.send(target)
        except DeliveryError as exc:
            self._failed(delivery, exc, label)
            return
        except Exception as exc:  # not AWS's error, still a failed delivery: retried, then dead-lettered
            self._failed(delivery, DeliveryError(type(exc).__name__, str(exc)), label)
            return
        self.reporter.line(f"{label} -> {target['Arn']}: {outcome}")
        self._completed(delivery)

    def _failed(self, delivery: Delivery, error: DeliveryError, label: str) -> None:
        policy = {**DEFAULT_RETRY, **(delivery.schedule["Target"].get("RetryPolicy") or {})}
        now = self.clock()
        delivery.attempt += 1
        age = (now - delivery.due).total_seconds()
        exhausted = ("MaximumRetryAttempts" if delivery.attempt > int(policy["MaximumRetryAttempts"])
                     else "MaximumEventAgeInSeconds" if age >= int(policy["MaximumEventAgeInSeconds"]) else "")
        if not exhausted:
            pause = min(RETRY_MAX_SECONDS, 2.0 ** (delivery.attempt - 1))
            self.reporter.line(f"{label}: delivery failed ({error}); retry {delivery.attempt} in {pause:g}s")
            delivery.when = now + timedelta(seconds=pause)
            self._enqueue(delivery)
            return
        self.reporter.line(f"{label}: delivery failed ({error}); retries exhausted ({exhausted})")
        self._dead_letter(delivery, error, exhausted)
        self._completed(delivery)

    def _dead_letter(self, delivery: Delivery, error: DeliveryError, exhausted: str) -> None:
        target = delivery.schedule["Target"]
        dlq = (target.get("DeadLetterConfig") or {}).get("Arn")
        if not dlq:
            return
        attributes = {
            "ERROR_CODE": error.code, "ERROR_MESSAGE": error.message[:256],
            "EXHAUSTED_RETRY_CONDITION": exhausted, "RETRY_ATTEMPTS": str(delivery.attempt - 1),
            "SCHEDULE_ARN": delivery.schedule["Arn"], "TARGET_ARN": target["Arn"],
        }
        try:
            self.sqs.send_message(
                QueueUrl=self._queue_url(dlq), MessageBody=target.get("Input") or "{}",
                MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()})
        except (ClientError, BotoCoreError) as exc:
            self.reporter.line(f"scheduler: dead-letter queue {dlq} unreachable: {exc}")

    def _completed(self, delivery: Delivery) -> None:
        schedule = delivery.schedule
        if not delivery.final or schedule.get("ActionAfterCompletion") != "DELETE":
            return
        key = (schedule.get("GroupName") or "default", str(schedule["Name"]))
        with self._changed_lock:
            before, generation = self._changed.get(key, 0), self._generation
        try:
            self.scheduler.delete_schedule(Name=key[1], GroupName=key[0])
            with self._changed_lock:
                # moto announced the delete during the call: when that is the only announcement since, it is
                # ours and the schedule is gone (nothing to read); anything else is read as usual
                if self._changes is not None and generation == self._generation \
                        and self._changed.get(key, 0) == before + 1:
                    if before:
                        self._changed[key] = before
                    else:
                        del self._changed[key]
                    self._completed_keys.add(key)
            self.reporter.line(f"schedule {schedule.get('GroupName')}/{schedule['Name']}: completed, deleted")
        except ClientError:
            pass  # deleted already

    def _queue_url(self, arn: str) -> str:
        """The queue's URL, looked up once per queue."""
        url = self._queue_urls.get(arn)
        if url is None:
            parts = arn.split(":")
            url = self.sqs.get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])["QueueUrl"]
            self._queue_urls[arn] = url
        return url

    def send(self, target: dict[str, Any]) -> str:
        """Deliver Target.Input; raises DeliveryError when the target cannot be reached."""
        arn: str = target["Arn"]
        payload = target.get("Input") or "{}"
        service = arn.split(":")[2] if arn.count(":") >= 5 else ""
        try:
            if service == "sqs":
                kwargs: dict[str, Any] = {"QueueUrl": self._queue_url(arn), "MessageBody": payload}
                group = (target.get("SqsParameters") or {}).get("MessageGroupId")
                if group:
                    kwargs["MessageGroupId"] = group
                message_id = self.sqs.send_message(**kwargs)["MessageId"]
                return f"sent message {message_id}"
            if service == "sns":
                message_id = self.sns.publish(TopicArn=arn, Message=payload)["MessageId"]
                return f"published {message_id}"
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise DeliveryError(str(error.get("Code", "ClientError")), str(error.get("Message", exc))) from exc
        except BotoCoreError as exc:
            raise DeliveryError(type(exc).__name__, str(exc)) from exc
        if service == "lambda":
            return self._invoke_lambda(arn, payload)
        return "target type not emulated offline: nothing delivered"

    def _invoke_lambda(self, arn: str, payload: str) -> str:
        handler = self.invoker.handler_for_function(arn)
        if handler is None:
            raise DeliveryError("ResourceNotFoundException", f"no handler of the app behind {arn}")
        try:
            event: Any = json.loads(payload)
        except json.JSONDecodeError:
            event = payload
        self.executor.submit(self._lambda_async, handler, event, 0)
        return f"invoking {handler} (async)"

    def _lambda_async(self, handler: str, event: Any, retry: int) -> None:
        call = self.invoker.invoke(handler, "scheduler", event, 1)
        if call.ok or retry >= LAMBDA_ASYNC_RETRIES:
            self.reporter.invocation(call, "" if call.ok else f"FAILED {describe_error(call)}; async retries exhausted")
            return
        self.reporter.invocation(call, f"FAILED {describe_error(call)}; async retry {retry + 1} in {retry + 1}s")
        if not self._stop.wait(retry + 1.0):
            self._lambda_async(handler, event, retry + 1)
