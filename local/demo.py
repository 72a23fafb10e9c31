"""`make demo`: a scripted scenario on the offline runtime; exits 0 only if every step worked.

1. backups: two runs over the sample tables, each monitored to COMPLETE (the first
   restores one table's backup and verifies it: BACKUP_VERIFY=1 on the local stage); the
   second applies retention (the demo keeps 0 days, at least 1 backup per
   table), so the first run's backups are deleted and one per table remains; then one table is
   restored from its latest backup (POST /backups/restores) and watched to ACTIVE;
2. one task of each strategy (exact, interval, lazy) created with POST /tasks,
   due in about 15 s: each sends its email once;
3. the seed's sample write: ten items (PK, SK, REMINDER_TIMESTAMP a little ahead,
   email) put with plain boto3 into the tasks table: ten emails;
4. one task cancelled with DELETE /tasks/{id}: it never sends its email;
5. one webhook task POSTing to the local receiver (local/webhook_receiver.py): one signed request, DONE.
6. one task of each downstream action (lambda, eventbridge, stepfunctions) on the sample
   targets make run provisions (local/sample_targets.py), due with the tasks of 2: each
   DONE, the event read back from the bus's queue, the execution found by its name.

Emails are read back from moto's SES (/moto-api/data.json).  Everything is
driven from outside: HTTP to the API, boto3 to moto's endpoint.

It prints one line to say what it runs, then the summary table.  The runtime's own output (its
invocation lines, the API's access log, handler tracebacks) is kept, and printed only when a flow
failed, to show what happened.

``python -m local.demo --quick`` runs the same flows with the tests' timing (QUICK_TIMING: tasks due in
a few seconds, a backup run monitored at once): about 10 s instead of 30.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from chalicelib.tasks.webhook import IDEMPOTENCY_HEADER, idempotency_key
from local.client import ApiClient, TimedOut, emails_to, wait_until
from local.run import end_process
from local.stage import LOCAL_WEBHOOK_SECRET, SAMPLE_TABLES, LocalSettings, LocalSettingsError, LocalStage, start_local_stage

# The local stage as config.json has it, made quick for a two-minute demo.
DEMO_ENVIRONMENT = {
    "DUE_ATTRIBUTE": "REMINDER_TIMESTAMP",   # the seed's items say when they are due here
    "BACKUP_RETENTION_DAYS": "0",            # so the second run's retention has something to delete
    "BACKUP_MIN_KEEP": "1",
    "PROCESSOR_SCHEDULE": "rate(1 minute)",
    "LOG_LEVEL": "WARNING",
    "POWERTOOLS_METRICS_DISABLED": "true",   # make run prints the EMF lines; the demo shows its table only
}
TASK_LEAD = timedelta(seconds=15)
SEED_LEAD = timedelta(seconds=10)
SEED_ITEMS = 10
DEADLINE_SECONDS = 110.0
SHOWN_ON_FAILURE = 60  # the last lines of the runtime's output printed when a flow failed


@dataclass(frozen=True)
class DemoTiming:
    """How far ahead the demo's tasks are due (the tests use shorter leads)."""

    task_lead: timedelta = TASK_LEAD
    seed_lead: timedelta = SEED_LEAD
    cancel_lead: timedelta = TASK_LEAD
    cancel_margin: float = 10.0


# `--quick` (the tests' timing): leads of a few seconds, and a backup run monitored at once (moto makes backups at once).
QUICK_TIMING = DemoTiming(task_lead=timedelta(seconds=4), seed_lead=timedelta(seconds=2),
                          cancel_lead=timedelta(seconds=3), cancel_margin=4.0)
QUICK_ENVIRONMENT = {"BACKUP_MONITOR_DELAY_SECONDS": "0"}

Flow = tuple[str, Callable[["Demo"], str]]


def webhook_detail(origin: str, key: str) -> str:
    """The webhook flow's line: the receiver's POST, verified, and the key it came with (a run's and the sample's)."""
    return f"POST {origin}/demo: signature verified, {IDEMPOTENCY_HEADER} {key}, status DONE"


@dataclass(frozen=True)
class FlowDeclaration:
    """One flow of `make demo`: its step name, what must happen (docs/offline.md's table of flows) and the
    line a run that worked prints for it (the page's sample output: sample_output())."""

    name: str
    must: str
    sample_seconds: float
    sample_detail: str


# The flows of `make demo`, in the order they are numbered; demo_flows() binds each to its body.
FLOWS = (
    FlowDeclaration(
        "1 backups + retention",
        "Two `POST /backups` runs over the sample tables, each monitored (`GET /backups/runs/{id}`) to `COMPLETE`; "
        "the first run verifies one table's backup (`BACKUP_VERIFY=1`); the second run's retention deletes the "
        "first run's three backups and leaves one per table; then `POST /backups/restores` restores "
        "`sample-orders`' latest backup into a new table, watched (`GET /backups/restores/{id}`) to `ACTIVE`, and "
        "the summary prints it (the restored table is deleted after).",
        15.3, "2 runs COMPLETE over 3 tables; sample-customers's backup restored and verified; retention deleted 3, "
              "1 backup left per table; restore ACTIVE (sample-orders -> sample-orders-restored-3f9c1a, 25 items, "
              "settings applied: none to copy)"),
    FlowDeclaration(
        "2 tasks: one per strategy",
        "`POST /tasks` with strategy `exact`, `interval` and `lazy`, each due in 15 s: each sends exactly one "
        "email (read back from moto's SES) and shows `DONE`.",
        24.0, "exact, interval, lazy: one email each, status DONE"),
    FlowDeclaration(
        "3 seed write (boto3)",
        "Ten items (`PK`, `SK`, `REMINDER_TIMESTAMP` 10 s ahead, `email`) put with plain `put_item` into the tasks "
        "table: ten emails.",
        14.2, f"{SEED_ITEMS} items put with boto3: {SEED_ITEMS} emails"),
    FlowDeclaration(
        "4 cancelled task",
        "A task created then cancelled with `DELETE /tasks/{id}`: no email 10 s after its time; it shows "
        "`CANCELLED`.",
        25.0, "DELETE /tasks/{id}: no email 10 s after its time, status CANCELLED"),
    FlowDeclaration(
        "5 webhook task",
        "`POST /tasks` with a `webhook` action to `make run`'s receiver, due in 15 s: the receiver gets one POST "
        "whose signature it verifies; the task shows `DONE`.",
        16.1, webhook_detail("http://127.0.0.1:41853", idempotency_key("8c0e7d5a4f1b2c3d4e5f60718293a4b5",
                                                                      datetime(2026, 11, 26, 11, 43, 41, tzinfo=UTC)))),
    FlowDeclaration(
        "6 downstream actions",
        "`POST /tasks` with a `lambda`, an `eventbridge` and a `stepfunctions` action on the sample targets, due "
        "in 15 s (alongside the strategies' tasks: no time added): each shows `DONE`, the event is read back from "
        "`sample-bus-events` once, the execution (named by the task and its due time) was started once. moto "
        "runs no Lambda code: the invocation shows as the task's `last_result` (its request id).",
        15.1, "lambda invoked (request YqbXHFaO...), eventbridge 1 event on sample-bus, stepfunctions execution "
              "stepfunctions-1bee0b-20261126T114341Z: all DONE"),
)


@dataclass
class Step:
    name: str
    ok: bool = False
    detail: str = ""
    seconds: float = 0.0


@dataclass
class Demo:
    stage: LocalStage
    api: ApiClient
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        return self.stage.aws_endpoint

    def left(self) -> float:
        return max(1.0, DEADLINE_SECONDS - (time.monotonic() - self.started))

    def run_step(self, name: str, body: Callable[[], str]) -> Step:
        step = Step(name)
        began = time.monotonic()
        try:
            step.detail, step.ok = body(), True
        except (AssertionError, TimedOut) as exc:
            step.detail = str(exc) or type(exc).__name__
        except Exception as exc:
            step.detail = f"{type(exc).__name__}: {exc}"
        step.seconds = time.monotonic() - began
        with self._lock:
            self.steps.append(step)
        return step


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def backups(demo: Demo) -> str:
    ddb = boto3.client("dynamodb", endpoint_url=demo.endpoint)

    def run_to_completion() -> dict[str, Any]:
        started = demo.api.post("/backups")
        assert started.status == 202, f"POST /backups: {started.status} {started.body}"
        run_id = started.body["run_id"]

        def complete() -> dict[str, Any] | None:
            shown = demo.api.get(f"/backups/runs/{run_id}")
            return shown.body if shown.status == 200 and shown.body.get("status") == "COMPLETE" else None
        return wait_until(complete, min(45.0, demo.left()), f"backup run {run_id} to complete", 0.5)

    first = run_to_completion()
    assert first["summary"]["backed_up"] == len(SAMPLE_TABLES), f"first run: {first['summary']}"
    # BACKUP_VERIFY=1 on the local stage: one table's backup restored, compared and its restore deleted
    verified = [(v["table"], v["status"], v["restore_table_deleted"]) for v in first["verifications"]]
    assert len(verified) == 1 and verified[0][1:] == ("PASSED", True), f"first run's verification: {verified}"
    time.sleep(1.1)  # backup names carry the second they were taken
    second = run_to_completion()
    summary = second["summary"]
    assert summary["backed_up"] == len(SAMPLE_TABLES), f"second run: {summary}"
    assert summary["deleted"] == len(SAMPLE_TABLES), f"retention should delete the first run's backups: {summary}"
    left = {t: len(ddb.list_backups(TableName=t, BackupType="USER")["BackupSummaries"]) for t in SAMPLE_TABLES}
    assert all(n == 1 for n in left.values()), f"one backup per table should remain: {left}"
    restored = restore(demo, ddb)
    return (f"2 runs COMPLETE over {len(SAMPLE_TABLES)} tables; {verified[0][0]}'s backup restored and verified; "
            f"retention deleted {summary['deleted']}, 1 backup left per table; {restored}")


def restore(demo: Demo, ddb: Any) -> str:
    """POST /backups/restores of a sample table's latest backup into a new table, watched to ACTIVE by the
    monitor's polls; the restored table is deleted after (the demo leaves no copy behind)."""
    table = SAMPLE_TABLES[0]
    target = f"{table}-restored-{uuid.uuid4().hex[:6]}"
    asked = demo.api.post("/backups/restores", {"table": table, "latest": True, "target": target})
    assert asked.status == 202, f"POST /backups/restores: {asked.status} {asked.body}"
    href = asked.body["href"]

    def settled() -> dict[str, Any] | None:
        shown = demo.api.get(href)
        return shown.body if shown.status == 200 and shown.body.get("status") != "RESTORING" else None
    done = wait_until(settled, min(30.0, demo.left()), f"restore {asked.body['restore_id']} to settle", 0.5)
    assert done["status"] == "ACTIVE", f"restore: {done}"
    ddb.delete_table(TableName=target)
    return (f"restore {done['status']} ({table} -> {target}, {done['comparison']['restored_items']} items, "
            f"settings applied: {', '.join(done['settings_applied']) or 'none to copy'})")


def _create_task(demo: Demo, strategy: str, to: str, due: datetime) -> str:
    created = demo.api.post("/tasks", {
        "run_at": _iso(due), "strategy": strategy,
        "action": {"type": "email", "to": to, "subject": f"demo {strategy}", "body": "from make demo"}})
    assert created.status == 201, f"POST /tasks ({strategy}): {created.status} {created.body}"
    return str(created.body["id"])


def tasks(demo: Demo, tag: str, lead: timedelta = TASK_LEAD) -> str:
    due = datetime.now(UTC) + lead
    ids = {s: _create_task(demo, s, f"{s}-{tag}@example.com", due) for s in ("exact", "interval", "lazy")}

    def all_sent() -> bool:
        return all(emails_to(demo.endpoint, f"{s}-{tag}@example.com") for s in ids)
    wait_until(all_sent, demo.left(), "an email from each strategy's task", 0.5)
    time.sleep(3)  # a duplicate would come now
    counts = {s: len(emails_to(demo.endpoint, f"{s}-{tag}@example.com")) for s in ids}
    assert all(n == 1 for n in counts.values()), f"each task should send exactly one email: {counts}"

    def all_done() -> bool:
        return all(demo.api.get(f"/tasks/{i}").body.get("status") == "DONE" for i in ids.values())
    wait_until(all_done, 10, "the tasks to show DONE", 0.5)
    return "exact, interval, lazy: one email each, status DONE"


def seed(demo: Demo, tag: str, lead: timedelta = SEED_LEAD) -> str:
    ddb = boto3.client("dynamodb", endpoint_url=demo.endpoint)
    table = demo.stage.environment["TASKS_TABLE"]
    due = int((datetime.now(UTC) + lead).timestamp())
    for i in range(SEED_ITEMS):
        ddb.put_item(TableName=table, Item={
            "PK": {"S": f"USER#{tag}-{i}"}, "SK": {"S": f"REMINDER#{i}"},
            "REMINDER_TIMESTAMP": {"N": str(due)}, "email": {"S": f"seed{i}-{tag}@example.com"}})

    def delivered() -> int:
        return sum(1 for i in range(SEED_ITEMS) if emails_to(demo.endpoint, f"seed{i}-{tag}@example.com"))
    wait_until(lambda: delivered() == SEED_ITEMS, demo.left(), f"{SEED_ITEMS} seed emails", 0.5)
    time.sleep(2)
    total = sum(len(emails_to(demo.endpoint, f"seed{i}-{tag}@example.com")) for i in range(SEED_ITEMS))
    assert total == SEED_ITEMS, f"expected {SEED_ITEMS} seed emails, got {total}"
    return f"{SEED_ITEMS} items put with boto3: {SEED_ITEMS} emails"


def cancelled(demo: Demo, tag: str, lead: timedelta = TASK_LEAD, margin: float = 10.0) -> str:
    due = datetime.now(UTC) + lead
    to = f"cancelled-{tag}@example.com"
    task_id = _create_task(demo, "exact", to, due)
    gone = demo.api.delete(f"/tasks/{task_id}")
    assert gone.status in (200, 202, 204), f"DELETE /tasks/{task_id}: {gone.status} {gone.body}"
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + margin)  # well past its time
    assert not emails_to(demo.endpoint, to), "the cancelled task sent its email"
    status = demo.api.get(f"/tasks/{task_id}").body.get("status")
    assert status == "CANCELLED", f"GET /tasks/{task_id} says {status}"
    return f"DELETE /tasks/{{id}}: no email {margin:g} s after its time, status CANCELLED"


def webhook_task(demo: Demo, tag: str, lead: timedelta = TASK_LEAD) -> str:
    receiver = demo.stage.webhook
    assert receiver is not None, "the local stage has no webhook receiver"
    body = f'{{"demo": "{tag}"}}'
    created = demo.api.post("/tasks", {"run_at": _iso(datetime.now(UTC) + lead), "action": {
        "type": "webhook", "url": f"{receiver.origin}/demo", "secret": LOCAL_WEBHOOK_SECRET, "body": body}})
    assert created.status == 201, f"POST /tasks (webhook): {created.status} {created.body}"
    task_id = created.body["id"]

    def done() -> bool:
        return bool(demo.api.get(f"/tasks/{task_id}").body.get("status") == "DONE")
    wait_until(done, demo.left(), "the webhook task to show DONE", 0.5)
    got = [r for r in receiver.received if r.body == body]
    assert len(got) == 1 and got[0].verified, f"the receiver should get one signed POST: {got}"
    return webhook_detail(receiver.origin, got[0].key)


def downstream(demo: Demo, tag: str, lead: timedelta = TASK_LEAD) -> str:
    targets = demo.stage.targets
    assert targets is not None, "make run provisioned no sample targets"
    due = datetime.now(UTC) + lead
    actions = {
        "lambda": {"type": "lambda", "function_arn": targets.function_arn, "payload": {"demo": tag}},
        "eventbridge": {"type": "eventbridge", "event_bus_arn": targets.bus_arn, "source": "timekeeper.demo",
                        "detail_type": "Demo task due", "detail": {"demo": tag}},
        "stepfunctions": {"type": "stepfunctions", "state_machine_arn": targets.machine_arn, "input": {"demo": tag}},
    }
    ids = {}
    for kind, action in actions.items():
        created = demo.api.post("/tasks", {"id": f"{kind}-{tag}", "run_at": _iso(due), "action": action})
        assert created.status == 201, f"POST /tasks ({kind}): {created.status} {created.body}"
        ids[kind] = str(created.body["id"])

    def shown() -> dict[str, dict[str, Any]] | None:
        tasks = {kind: demo.api.get(f"/tasks/{i}").body for kind, i in ids.items()}
        return tasks if all(t.get("status") == "DONE" for t in tasks.values()) else None
    done = wait_until(shown, demo.left(), "the downstream tasks to show DONE", 0.5)
    sqs = boto3.client("sqs", endpoint_url=demo.endpoint)
    bodies = [json.loads(m["Body"]) for m in sqs.receive_message(
        QueueUrl=targets.events_queue_url, MaxNumberOfMessages=10).get("Messages", [])]
    events = [e for e in bodies if e.get("detail") == {"demo": tag}]
    assert len(events) == 1, f"one event on {targets.bus_arn} for this demo, got {len(events)}"
    execution = done["stepfunctions"]["last_result"]["execution_arn"]
    sfn = boto3.client("stepfunctions", endpoint_url=demo.endpoint)
    started = sfn.list_executions(stateMachineArn=targets.machine_arn)["executions"]
    assert [e["executionArn"] for e in started].count(execution) == 1, f"execution {execution} not started once"
    return (f"lambda invoked (request {done['lambda']['last_result']['request_id'][:8]}...), "
            f"eventbridge 1 event on {targets.bus_arn.rsplit('/', 1)[-1]}, "
            f"stepfunctions execution {execution.rsplit(':', 1)[-1]}: all DONE")


def intro_line(flows: int, api_url: str, aws_endpoint: str) -> str:
    """The line `make demo` prints first."""
    return (f"make demo: {flows} flows at once on the offline runtime (API {api_url}, AWS {aws_endpoint}): "
            f"about 30 s, {DEADLINE_SECONDS:.0f} s at most")


def summary_lines(steps: Sequence[Step], total: float) -> list[str]:
    """The summary table of the steps, then the verdict."""
    width = max(len(s.name) for s in steps)
    lines = ["", f"{'step':<{width}}  result  seconds  detail", f"{'-' * width}  ------  -------  {'-' * 40}"]
    for step in sorted(steps, key=lambda s: s.name):
        lines.append(f"{step.name:<{width}}  {'ok' if step.ok else 'FAILED':<6}  {step.seconds:>7.1f}  {step.detail}")
    verdict = "all steps passed" if all(s.ok for s in steps) else "SOME STEPS FAILED"
    return [*lines, f"\n{verdict} in {total:.1f} s"]


def sample_output() -> str:
    """What a run of `make demo` that worked prints, from FLOWS' sample lines (docs/offline.md shows it)."""
    steps = [Step(flow.name, True, flow.sample_detail, flow.sample_seconds) for flow in FLOWS]
    lines = [intro_line(len(FLOWS), "http://127.0.0.1:34799", "http://127.0.0.1:35903"),
             *summary_lines(steps, max(flow.sample_seconds for flow in FLOWS) + 1.1)]
    return "\n".join(lines)


def print_summary(demo: Demo, out: Callable[[str], None]) -> None:
    for line in summary_lines(demo.steps, time.monotonic() - demo.started):
        out(line)


def demo_for(stage: LocalStage) -> Demo:
    """A demo driving ``stage`` (with the API token when the stage's API_AUTH is token)."""
    token = stage.environment.get("API_TOKEN", "") if stage.environment.get("API_AUTH") == "token" else ""
    return Demo(stage, ApiClient(stage.api_url, token))


def demo_flows(timing: DemoTiming = DemoTiming(), tag: str | None = None) -> list[Flow]:
    """The flows of `make demo` (FLOWS), each tagged so that it reads back only its own emails and events."""
    mark = tag or uuid.uuid4().hex[:6]
    bodies: list[Callable[[Demo], str]] = [
        backups,
        lambda demo: tasks(demo, mark, timing.task_lead),
        lambda demo: seed(demo, mark, timing.seed_lead),
        lambda demo: cancelled(demo, mark, timing.cancel_lead, timing.cancel_margin),
        lambda demo: webhook_task(demo, mark, timing.task_lead),
        lambda demo: downstream(demo, mark, timing.task_lead),
    ]
    return [(flow.name, body) for flow, body in zip(FLOWS, bodies, strict=True)]


def run_demo(stage: LocalStage, out: Callable[[str], None] = print, *,
             flows: Sequence[Flow] | None = None) -> bool:
    """Run ``flows`` (the demo's by default) at once on ``stage``, print the summary table;
    True only if every flow worked."""
    demo = demo_for(stage)
    chosen = list(flows) if flows is not None else demo_flows()
    threads = [threading.Thread(target=demo.run_step, args=(name, lambda body=body: body(demo)), name=name)
               for name, body in chosen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print_summary(demo, out)
    return len(demo.steps) == len(chosen) and all(s.ok for s in demo.steps)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the same flows with tasks due in a few seconds")
    quick = parser.parse_args(list(argv) if argv is not None else None).quick
    environ = os.environ
    try:
        settings = LocalSettings.from_env(environ)
    except LocalSettingsError as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 2
    # Free ports unless asked for: the demo may run next to `make run`.
    settings = LocalSettings(
        aws_port=settings.aws_port if environ.get("LOCAL_AWS_PORT") else 0,
        api_port=settings.api_port if environ.get("LOCAL_API_PORT") else 0,
        scheduler_jitter_seconds=settings.scheduler_jitter_seconds, ttl_lag_seconds=settings.ttl_lag_seconds,
        sqs_max_concurrency=settings.sqs_max_concurrency,
        webhook_port=settings.webhook_port if environ.get("LOCAL_WEBHOOK_PORT") else 0)
    runtime_lines: list[str] = []  # invocation lines
    errors = io.StringIO()         # the API's access log and handler tracebacks (stderr)
    try:
        with contextlib.redirect_stderr(errors):
            stage = start_local_stage(settings, overrides={**DEMO_ENVIRONMENT, **(QUICK_ENVIRONMENT if quick else {})},
                                      out=runtime_lines.append)
    except LocalSettingsError as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 2
    print(intro_line(len(FLOWS), stage.api_url, stage.aws_endpoint), flush=True)
    try:
        with contextlib.redirect_stderr(errors):
            ok = run_demo(stage, lambda line: print(line, flush=True),
                          flows=demo_flows(QUICK_TIMING) if quick else None)
    finally:
        stage.stop()
    if not ok:
        shown = [*runtime_lines, *errors.getvalue().splitlines()][-SHOWN_ON_FAILURE:]
        print("\nthe runtime's last lines (invocations, then the access log and tracebacks):", *shown, sep="\n")
    return 0 if ok else 1


if __name__ == "__main__":
    # Ended as make run ends (local/run.py): once stdout and stderr are flushed, without the interpreter's
    # teardown of moto's state (seconds of it after a demo, for nothing: the stage is stopped already).
    end_process(main())
