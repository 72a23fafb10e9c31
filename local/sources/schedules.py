"""EventBridge scheduled rules (``@app.schedule``): rate() and cron() fire on time, in UTC.

A rate() rule fires one period after the runtime started, then every period; a
cron() rule at each matching UTC minute.  The event is the one EventBridge
sends (``time`` is the scheduled time).  Invocations run in the runtime's
worker pool, so a slow handler never delays the next firing.

EventBridge never backfills: when the runtime wakes up late (a suspended
laptop, a clock jump) the firing it was waiting for happens once, the ones
missed after it are skipped (one line says how many), and the next firing is
the first one after now.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor
from datetime import datetime

from chalice.app import ScheduledEventConfig

from chalicelib import schedule_expr, schedule_fire
from deploy import lambda_events as events
from local.invoker import Clock, Invoker

MAX_COUNTED = 10_000  # skipped firings counted at most (a week of rate(1 minute) is 10 080)


def missed_between(following: Callable[[datetime], datetime | None], at: datetime,
                   now: datetime) -> tuple[int, datetime]:
    """How many firings came after ``at`` and at or before ``now`` (skipped), and the last of them."""
    count, last, moment = 0, at, following(at)
    while moment is not None and moment <= now and count < MAX_COUNTED:
        count, last = count + 1, moment
        moment = following(moment)
    return count, last


def expression_text(config: ScheduledEventConfig) -> str:
    expression = config.schedule_expression
    return expression if isinstance(expression, str) else expression.to_string()


class ScheduledRule:
    def __init__(self, config: ScheduledEventConfig, invoker: Invoker, executor: Executor, clock: Clock, *,
                 region: str, account: str) -> None:
        self.config = config
        self.invoker = invoker
        self.executor = executor
        self.clock = clock
        self.expression = schedule_expr.parse(expression_text(config))
        self.rule_arn = (f"arn:aws:events:{region}:{account}:rule/"
                         f"{invoker.app.app_name}-{invoker.stage}-{config.name}")
        self.region = region
        self.account = account
        self.started = clock()
        self.next_at: datetime | None = self.following(self.started)

    @property
    def name(self) -> str:
        return self.config.name

    def following(self, after: datetime) -> datetime | None:
        return schedule_fire.next_fire(self.expression, after, start=self.started)

    def describe(self) -> str:
        upcoming = f", next {self.next_at:%H:%M:%S}Z" if self.next_at else ""
        return f"schedule  {expression_text(self.config)}{upcoming}"

    def run(self, stop: threading.Event) -> None:
        while self.next_at is not None:
            if stop.wait(max(0.0, (self.next_at - self.clock()).total_seconds())):
                return
            self.fire_due(self.clock())

    def fire_due(self, now: datetime) -> bool:
        """Fire the awaited firing if its time has come (once, however late); True if it fired."""
        at = self.next_at
        if at is None or at > now:
            return False
        self.executor.submit(self.fire, at)
        skipped, last = missed_between(self.following, at, now)
        if skipped:
            self.invoker.reporter.line(
                f"{self.name}: woke up late: fired the {at:%H:%M:%S}Z firing once, skipped {skipped}"
                f"{'+' if skipped >= MAX_COUNTED else ''} missed firing{'s' if skipped != 1 else ''} up to "
                f"{last:%Y-%m-%d %H:%M:%S}Z (EventBridge never backfills)")
        self.next_at = self.following(max(at, now))
        return True

    def fire(self, at: datetime) -> None:
        event = events.scheduled_event(at, self.rule_arn, region=self.region, account=self.account)
        self.invoker.reporter.invocation(self.invoker.invoke(self.config.name, "schedule", event, 1))

