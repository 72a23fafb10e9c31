"""A seeded soak under faults: tasks of every strategy and a backup run, while 30 % of AWS requests
are throttled (botocore retries them), 5 % fail hard and 5 % are applied with their response lost.

Every handler runs as Lambda would run it (tests/functional/lambda_sim.py: redeliveries, visibility timeouts,
stream retries, TTL, Scheduler, the processor's schedule) on the injected clock.  No task may run its action
twice; every task runs it once, or -- when SQS gave up on its due message after MAX_RECEIVE_COUNT failed
deliveries, which at 10 % of calls failing happens to about one task in a hundred -- is dead-lettered
where a user sees it (``GET /tasks/{id}`` shows ``dead_letter``, one alert went out).  Every table must be
backed up.  The counts are printed (``pytest -s`` shows them).

The suite runs 80 tasks and 20 tables (about a minute); ``make soak`` runs 200 and 50 (SEEDED_SOAK_TASKS, SEEDED_SOAK_TABLES).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Clients, Deps
from chalicelib.tasks.model import DueMessage
from tests import events
from tests.aws_limits import AwsLimits
from tests.faults import Faults
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.backup_support import create_tables
from tests.functional.lambda_sim import LambdaSim
from tests.functional.task_support import emails_sent, get_task, post_task

SEED = 20261123
TASKS = int(os.environ.get("SEEDED_SOAK_TASKS", "80"))
TABLES = int(os.environ.get("SEEDED_SOAK_TABLES", "20"))
#: Tasks SQS may give up on under this chaos (each then dead-lettered where a user sees it), at most.
DEAD_LETTERED_AT_MOST = max(2, TASKS // 20)
STRATEGIES = ("exact", "exact", "interval", "lazy")  # exact twice: due soon (SQS delay) and later (Scheduler)


def _create(client: Client, body: dict[str, Any]) -> None:
    """POST a task as a client would: retried on a 5xx (the API is idempotent for the same id and body)."""
    for _ in range(20):
        response = post_task(client, body)
        if response.status_code in (200, 201):
            return
        assert response.status_code >= 500, response.body
    pytest.fail(f"task {body['id']} could not be created")


def test_every_task_runs_once_or_is_dead_lettered_and_every_table_is_backed_up_under_throttling_errors_and_lost_responses(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client,
        capsys: pytest.CaptureFixture[str], fake_backoff: FakeClock) -> None:
    # One stream thread keeps the seeded faults in one order.  Retry mode standard: adaptive mode's client-side
    # rate limiter waits in real time once throttled, and only moves when the faults happen, not whether.
    # One thread per handler: the chaos faults' throttling switches moto off for the whole process while it
    # answers (tests/faults.py), which a concurrent call would see.
    use_settings(deps, stream_concurrency=1, executor_concurrency=1, backup_table_pattern=re.compile(r"soak-\d+"),
                 aws_retry_mode="standard", past_horizon="scheduler")  # its exact tasks 30 min on: Scheduler's
    deps.clients = Clients(deps.settings)
    faults = Faults(deps.clients)
    limits = AwsLimits(deps.clients)
    create_tables(deps, [f"soak-{i:03d}" for i in range(TABLES)])
    sim = LambdaSim(deps, client, clock)
    # Lost responses everywhere but the action itself: an email whose answer is lost was sent, and sending it
    # again is the one window docs/executor.md documents; here every other call may lose its answer.
    faults.chaos(seed=SEED, throttle=0.30, error=0.05, lost=0.05, no_loss=("sesv2.SendEmail",))

    start = clock.now
    for i in range(TASKS):
        strategy = STRATEGIES[i % len(STRATEGIES)]
        minutes = 2 + (i % 10) if i % len(STRATEGIES) != 1 else 20 + (i % 40)
        _create(client, {
            "id": f"soak-{i:03d}", "strategy": strategy, "run_at": (start + timedelta(minutes=minutes)).isoformat(),
            "action": {"type": "email", "to": "ops@example.com", "subject": f"soak-{i:03d}", "body": "tick"}})
    for _ in range(3):  # EventBridge invokes asynchronously: Lambda retries a failed trigger twice
        if sim.invoke_ok("backup_trigger", events.scheduled_event(start)):
            break

    def settled() -> bool:
        return len(set(_subjects())) == TASKS and _run_complete(sim)

    sim.run(until=settled, limit=timedelta(hours=3))
    faults.calm()
    sim.run(until=lambda: False, limit=timedelta(minutes=20))  # let every retry and redelivery play out

    sent = Counter(_subjects())
    twice = sorted(subject for subject, count in sent.items() if count > 1)
    missing = [f"soak-{i:03d}" for i in range(TASKS) if f"soak-{i:03d}" not in sent]
    backed_up = _tables_backed_up(deps)
    with capsys.disabled():
        print(f"\nseeded soak (seed {SEED}): {TASKS} tasks, {len(sent)} executed, {len(twice)} twice, "
              f"{len(missing)} missing; {len(backed_up)}/{TABLES} tables backed up; faults injected "
              f"{dict(faults.injected)}; {sum(faults.calls.values())} AWS calls; {sim.failed_invocations} failed "
              f"invocations; dead-lettered {sim.dead_letters()}; {clock.now - start} of simulated time; "
              f"runs {_runs(sim)}")
    dead_lettered = {task_id for task_id in missing if "dead_letter" in get_task(client, task_id)}
    assert set(missing) == dead_lettered, f"tasks neither run nor dead-lettered: {sorted(set(missing) - dead_lettered)}"
    assert len(missing) <= DEAD_LETTERED_AT_MOST, missing
    alerted = {a["message"].get("task_id") for a in aws.alerts() if "dead-lettered" in a["subject"]}
    assert alerted == set(missing)
    assert twice == [], [(s, int(s[5:]) % len(STRATEGIES)) for s in twice]
    assert backed_up == {f"soak-{i:03d}" for i in range(TABLES)}
    assert _run_complete(sim)
    # SQS gave up on a message of every missing task; any other message it gave up on is a second one of a
    # task that ran (a replayed stream record's, which the claim turns into a no-op): only forwarded, no alert.
    died = {DueMessage.from_json(m.body).key.task_id for m in sim.queue(deps.settings.due_queue).dead}
    assert set(missing) <= died and died - set(missing) <= set(sent), (died, missing)
    assert sim.dead_letters()[deps.settings.due_dlq] == 0  # no redrive: SQS keeps what its handler fails on
    assert sim.dead_letters()[deps.settings.backup_monitor_queue] == 0
    assert limits.violations == []


def _subjects() -> list[str]:
    return [m.subject for m in emails_sent() if str(m.subject).startswith("soak-")]


def _tables_backed_up(deps: Deps) -> set[str]:
    from tests.functional.backup_support import moto_backups

    return {b.table.name for b in moto_backups(deps).values() if b.table.name.startswith("soak-")
            and b.status == "AVAILABLE"}


def _runs(sim: LambdaSim) -> dict[str, str]:
    """Backup runs and their status (read through the emulation's own client: no faults)."""
    runs = sim.ddb.query(TableName=sim.deps.settings.state_table, KeyConditionExpression="PK = :pk",
                         ExpressionAttributeValues={":pk": {"S": "BACKUP_RUN"}})["Items"]
    return {run["SK"]["S"]: run["status"]["S"] for run in runs}


def _run_complete(sim: LambdaSim) -> bool:
    runs = _runs(sim)
    return bool(runs) and set(runs.values()) == {"COMPLETE"}
