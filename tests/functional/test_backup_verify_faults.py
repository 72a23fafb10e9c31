"""Every AWS write of a restore verification, under every fault, with redeliveries as AWS makes them.

The world of test_backup_faults.py (SQS and Lambda's retries around the app, on the
fake clock), with BACKUP_VERIFY=1: the run's one good table ("orders", with items) is
restored, compared and its temporary table deleted after the backups settle. Each
write the verification makes in a clean run (RestoreTableFromBackup, DeleteTable, the
state table's UpdateItem and BatchWriteItem from the run's VERIFYING on, the polls'
SendMessage, and the alert of a failed verification), at each occurrence, gets each
fault of tests/faults.py. Then:

- the run is COMPLETE within three hours, no monitor message dead-lettered;
- the verification has its verdict (PASSED; FAILED when the restore was corrupted),
  counted in the run's summary, and no temporary table is left;
- a failed verification's alert was sent at most once (twice only when Publish's own
  answer was lost), and at least once unless the worker died holding it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from chalicelib.aws import Deps
from chalicelib.backups.store import COMPLETE, RunStore
from chalicelib.settings import BackupVerify
from tests.faults import Faults, Kind
from tests.fixtures import Aws, FakeClock, use_settings
from tests.functional.test_backup_faults import KINDS, MISSING, TABLES, World, aws, provisioned, unhooked_faults  # noqa: F401

pytestmark = pytest.mark.usefixtures("attribute_values_fast")  # speed only: tests/moto_fast.py

ITEMS = 3
HOURS = 3
# The verification's writes in a clean run, and the first occurrence of each that is the verification's
# (the UpdateItems before are the backups': tables recorded, started, poll 0 queued, gone's alert, poll 0 claimed,
# orders settled, finish claimed; the BatchWriteItems the run's page twice; the SendMessages the watch and poll 0).
VERIFY_WRITES = {
    "dynamodb.UpdateItem": (8, 13),     # VERIFYING, polls 1 and 2 claimed, verdict, table deleted, COMPLETE
    "dynamodb.BatchWriteItem": (3, 3),  # the verification's item
    "sqs.SendMessage": (3, 4),          # polls 1 and 2
    "dynamodb.RestoreTableFromBackup": (1, 1),
    "dynamodb.DeleteTable": (1, 1),
}
CASES = [(op, n, kind) for op, (first, last) in VERIFY_WRITES.items() for n in range(first, last + 1)
         for kind in KINDS]
ALERT_CASES = [("sns.Publish", 3, kind) for kind in KINDS]  # gone's alert, the summary, then the verification's


@pytest.fixture
def world(aws: Aws, deps: Deps, clock: FakeClock) -> World:  # noqa: F811 (the imported fixture)
    client = deps.clients.dynamodb
    for name in TABLES:
        client.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
        for i in range(ITEMS):
            client.put_item(TableName=name, Item={"PK": {"S": f"p{i}"}})
    use_settings(deps, backup_tables=(*TABLES, MISSING), backup_retention_days=3, backup_min_keep=2,
                 backup_run_lease_seconds=900, backup_monitor_delay_seconds=300,
                 backup_verify=BackupVerify(tables=TABLES))
    return World(aws, deps, clock)


@pytest.fixture
def corrupt_restores(deps: Deps) -> Iterator[None]:
    """Each restore comes back with an item fewer: deleted from the restored table right after
    RestoreTableFromBackup answers, through a client of the test's own (not the app's)."""
    own = boto3.client("dynamodb", region_name=deps.settings.region)

    def delete_an_item(parsed: Any = None, **_: Any) -> None:
        if parsed and "TableDescription" in parsed:
            own.delete_item(TableName=parsed["TableDescription"]["TableName"], Key={"PK": {"S": "p0"}})

    events = deps.clients.dynamodb.meta.events
    events.register("after-call.dynamodb.RestoreTableFromBackup", delete_an_item)
    yield
    events.unregister("after-call.dynamodb.RestoreTableFromBackup", delete_an_item)  # the module's clients


def _restores(deps: Deps) -> list[str]:
    names = deps.clients.dynamodb.list_tables()["TableNames"]
    return [t for t in names if t.startswith(f"{deps.settings.backup_name_prefix}.verify.")]


def _run_day(world: World) -> None:
    start = world.clock.now
    world.scheduled_trigger(start)
    world.deliver_until(start + timedelta(hours=HOURS))


def test_the_enumerated_writes_are_those_of_a_clean_verified_run(world: World, faults: Faults) -> None:
    _run_day(world)

    for operation, (_, last) in VERIFY_WRITES.items():
        assert faults.calls[operation] == last, operation
    _assert_outcome(world, "PASSED", ("", "error"))


@pytest.mark.parametrize(("operation", "occurrence", "kind"), CASES,
                         ids=[f"{op.split('.')[1]}#{n}-{kind}" for op, n, kind in CASES])
def test_a_verification_survives_a_fault_at_each_write(
        world: World, faults: Faults, operation: str, occurrence: int, kind: Kind) -> None:
    fault = faults.inject(operation, kind, occurrence=occurrence)

    _run_day(world)

    assert fault.hits == 1
    _assert_outcome(world, "PASSED", (operation, kind))


@pytest.mark.parametrize(("operation", "occurrence", "kind"), ALERT_CASES,
                         ids=[f"{op.split('.')[1]}#{n}-{kind}" for op, n, kind in ALERT_CASES])
@pytest.mark.usefixtures("corrupt_restores")
def test_a_failed_verification_alerts_once_under_a_fault_at_its_alert(
        world: World, faults: Faults, operation: str, occurrence: int, kind: Kind) -> None:
    fault = faults.inject(operation, kind, occurrence=occurrence)

    _run_day(world)

    assert fault.hits == 1
    _assert_outcome(world, "FAILED", (operation, kind))


def _assert_outcome(world: World, verdict: str, case: tuple[str, Kind]) -> None:
    operation, kind = case
    deps = world.deps
    [run] = RunStore(deps).recent(5)
    assert run.status == COMPLETE, run
    assert run.finished_at is not None and run.finished_at - run.started_at < timedelta(hours=HOURS)
    assert world.dead_lettered == []
    [verification] = run.verifications.values()
    assert verification.table == "orders" and verification.status == verdict, verification
    assert verification.table_deleted and _restores(deps) == []
    assert run.summary["verified" if verdict == "PASSED" else "verify_failed"] == 1
    subjects = Counter(a["message"]["subject"] for a in world.aws.alerts())
    failed = subjects["timekeeper: restore verification of orders failed"]
    if verdict == "PASSED":
        assert failed == 0
        return
    assert failed <= (2 if (operation, kind) in (("sns.Publish", "lost"), ("sns.Publish", "retried")) else 1)
    if kind not in ("crash", "crash_after"):
        assert failed >= 1, subjects
