"""Each correction of local/moto_corrections.py shows moto 5.2.5's bug, then AWS's behaviour with the correction.

Every scenario runs twice: against plain moto 5.2.5, in a fresh interpreter that never installs a patch (so
nothing this process installed leaks in), and against moto with the corrections, in this process.  The first
must answer what AWS never answers (the bug, which the upstream report in docs/offline-runtime.md describes);
the second must answer as AWS does.  When a moto release fixes a bug, its test here fails on the plain run:
the correction can go.

Not shown here: the serialised writes (``WRITE_LOCK``).  moto's conditional write checks, then writes, with no
lock; two threads pass ``attribute_not_exists`` together only when the interpreter switches threads between the
two steps, which no cheap scenario makes happen every time (hundreds of racing writers show it, sometimes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from local import moto_corrections
from local.moto_corrections import MOTO_VERSION, MotoVersionError, check_moto_version, installed_moto_version

REGION = "us-east-1"
ACCOUNT = "123456789012"
ROOT = Path(__file__).resolve().parents[2]
SCENARIOS: dict[str, Callable[[], Any]] = {}


def scenario(run: Callable[[], Any]) -> Callable[[], Any]:
    SCENARIOS[run.__name__] = run
    return run


def stream_table(ddb: Any, name: str, key_type: str = "S") -> str:
    arn: str = ddb.create_table(
        TableName=name, BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": key_type}],
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    )["TableDescription"]["LatestStreamArn"]
    return arn


def stream_iterator(arn: str) -> tuple[Any, str]:
    streams = boto3.client("dynamodbstreams", region_name=REGION)
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator: str = streams.get_shard_iterator(StreamArn=arn, ShardId=shard,
                                               ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    return streams, iterator


@scenario
def stream_after_a_cancelled_transaction() -> list[str]:
    """The keys a stream reader sees: a put, a cancelled transaction, another put."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        streams, iterator = stream_iterator(stream_table(ddb, "tasks"))
        ddb.put_item(TableName="tasks", Item={"PK": {"S": "taken"}})
        with pytest.raises(ClientError):
            ddb.transact_write_items(TransactItems=[{"Put": {
                "TableName": "tasks", "Item": {"PK": {"S": "taken"}}, "ConditionExpression": "attribute_not_exists(PK)"}}])
        ddb.put_item(TableName="tasks", Item={"PK": {"S": "later"}})
        return [r["dynamodb"]["Keys"]["PK"]["S"] for r in streams.get_records(ShardIterator=iterator)["Records"]]


@scenario
def binary_key_in_a_stream_record() -> dict[str, str]:
    """A stream record's binary key, in Keys and in NewImage (base64, as boto3 gets it on the wire)."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        streams, iterator = stream_iterator(stream_table(ddb, "binary", key_type="B"))
        ddb.put_item(TableName="binary", Item={"PK": {"B": b"\x01key"}})
        [record] = streams.get_records(ShardIterator=iterator)["Records"]
        return {"Keys": repr(record["dynamodb"]["Keys"]["PK"]["B"]),
                "NewImage": repr(record["dynamodb"]["NewImage"]["PK"]["B"])}


@scenario
def describe_backup_of_an_indexed_table() -> dict[str, Any] | None:
    """DescribeBackup's SourceTableFeatureDetails for a table with a global secondary index."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        ddb.create_table(
            TableName="indexed", BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"},
                                  {"AttributeName": "due", "AttributeType": "S"}],
            GlobalSecondaryIndexes=[{"IndexName": "by-due", "KeySchema": [{"AttributeName": "due", "KeyType": "HASH"}],
                                     "Projection": {"ProjectionType": "KEYS_ONLY"}}])
        arn = ddb.create_backup(TableName="indexed", BackupName="indexed-1")["BackupDetails"]["BackupArn"]
        description: Any = ddb.describe_backup(BackupArn=arn)["BackupDescription"]
        details: dict[str, Any] | None = description.get("SourceTableFeatureDetails")
        return details


@scenario
def long_poll_while_a_delay_ends() -> float:
    """Seconds a ReceiveMessage with WaitTimeSeconds=2 takes when the queue's message becomes visible 0.2 s in."""
    from moto.sqs.models import sqs_backends

    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="soon")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="soon", DelaySeconds=1)
        [message] = sqs_backends[ACCOUNT][REGION].queues["soon"]._messages
        message.delayed_until = time.time() * 1000 + 200  # its delay ends 0.2 s from now (moto counts in ms)
        began = time.monotonic()
        received = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2).get("Messages", [])
        assert len(received) == 1
        return time.monotonic() - began


@scenario
def list_and_create_backups() -> dict[str, Any]:
    """ListBackups of 3 backups with Limit 2 (the first page, whether it says more follow, those made before
    2000) and CreateBackup's answer to a name with a space."""
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name=REGION)
        ddb.create_table(TableName="many", BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
        for n in range(3):
            ddb.create_backup(TableName="many", BackupName=f"many-{n:03}")
        first = ddb.list_backups(TableName="many", Limit=2)
        before_2000 = ddb.list_backups(TableName="many", TimeRangeUpperBound=datetime(2000, 1, 1, tzinfo=UTC))
        try:
            ddb.create_backup(TableName="many", BackupName="two words")
            refused = None
        except ClientError as error:
            refused = error.response["Error"]["Code"]
        return {"first_page": len(first["BackupSummaries"]), "more": "LastEvaluatedBackupArn" in first,
                "before_2000": len(before_2000["BackupSummaries"]), "space_in_name": refused}


@scenario
def export_to_s3() -> dict[str, Any]:
    """A full export's ARN, its objects under the prefix, its description's manifest, a second call with its
    ClientToken, and DescribeExport of an ARN that never existed."""
    with mock_aws():
        ddb, s3 = boto3.client("dynamodb", region_name=REGION), boto3.client("s3", region_name=REGION)
        table_arn = ddb.create_table(
            TableName="kept", BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])["TableDescription"]["TableArn"]
        ddb.update_continuous_backups(TableName="kept",
                                      PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
        ddb.put_item(TableName="kept", Item={"PK": {"S": "a"}})
        s3.create_bucket(Bucket="vault")
        ask: dict[str, Any] = {"TableArn": table_arn, "S3Bucket": "vault", "S3Prefix": "stage/kept", "ClientToken": "token-1"}
        arn = ddb.export_table_to_point_in_time(**ask)["ExportDescription"]["ExportArn"]
        again = ddb.export_table_to_point_in_time(**ask)["ExportDescription"]["ExportArn"]
        from moto.dynamodb.models import dynamodb_backends
        for export in dynamodb_backends[ACCOUNT][REGION].table_exports.values():
            export.join(timeout=10)
        keys = [o["Key"].split("/AWSDynamoDB/", 1)[-1].split("/", 1)[-1]
                for o in s3.list_objects_v2(Bucket="vault", Prefix="stage/kept/").get("Contents", [])]
        try:
            ddb.describe_export(ExportArn=f"{table_arn}/export/01700000000000-00000000")
            missing = None
        except ClientError as error:
            missing = error.response["Error"]["Code"]
        except KeyError as error:  # moto's own lookup, raised through mock_aws (a server error on its server)
            missing = type(error).__name__
        return {"arn": arn.replace(table_arn, "<table>").split("/")[1], "same_export_again": again == arn,
                "objects": sorted("data/*" if k.startswith("data/") else k for k in keys), "unknown": missing,
                "manifest": "ExportManifest" in ddb.describe_export(ExportArn=arn)["ExportDescription"]}


@scenario
def incremental_export() -> dict[str, Any]:
    """A full export, then changes (c put, a deleted; b kept), then an incremental export of the hour after the full
    one: the incremental's data lines (key and fields), and whether it wrote a manifest."""
    import gzip
    from datetime import timedelta

    with mock_aws():
        ddb, s3 = boto3.client("dynamodb", region_name=REGION), boto3.client("s3", region_name=REGION)
        table_arn = ddb.create_table(
            TableName="changed", BillingMode="PAY_PER_REQUEST", KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])["TableDescription"]["TableArn"]
        ddb.update_continuous_backups(TableName="changed",
                                      PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
        for key in ("a", "b"):
            ddb.put_item(TableName="changed", Item={"PK": {"S": key}})
        s3.create_bucket(Bucket="vault")
        at = datetime(2026, 11, 22, 12, tzinfo=UTC)
        ddb.export_table_to_point_in_time(TableArn=table_arn, S3Bucket="vault", S3Prefix="full", ExportTime=at)
        from moto.dynamodb.models import dynamodb_backends
        for export in dynamodb_backends[ACCOUNT][REGION].table_exports.values():
            export.join(timeout=10)
        ddb.put_item(TableName="changed", Item={"PK": {"S": "c"}})
        ddb.delete_item(TableName="changed", Key={"PK": {"S": "a"}})
        ddb.export_table_to_point_in_time(
            TableArn=table_arn, S3Bucket="vault", S3Prefix="incremental", ExportType="INCREMENTAL_EXPORT",
            IncrementalExportSpecification={"ExportFromTime": at, "ExportToTime": at + timedelta(hours=1),
                                            "ExportViewType": "NEW_AND_OLD_IMAGES"})
        for export in dynamodb_backends[ACCOUNT][REGION].table_exports.values():
            export.join(timeout=10)
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="vault", Prefix="incremental/").get("Contents", [])]
        lines = []
        for key in keys:
            if "/data/" in key:
                text = gzip.decompress(s3.get_object(Bucket="vault", Key=key)["Body"].read()).decode()
                lines += [json.loads(line) for line in text.splitlines() if line.strip()]
        shown = sorted([(line.get("Keys") or line.get("Item"))["PK"]["S"], sorted(line)] for line in lines)
        return {"lines": shown, "manifest": any(k.endswith("manifest-summary.json") for k in keys)}


def observe() -> dict[str, Any]:
    """What every scenario observes in this process."""
    return {name: run() for name, run in SCENARIOS.items()}


PLAIN = """
import json
from tests.unit.test_moto_corrections_bugs import observe
from local import moto_corrections
observations = observe()
assert not moto_corrections._installed
print(json.dumps(observations))
"""


@pytest.fixture(scope="module")
def moto_observed() -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(plain moto's observations, corrected moto's); plain moto runs in a fresh interpreter meanwhile."""
    plain = subprocess.Popen([sys.executable, "-c", PLAIN], cwd=ROOT, env=dict(os.environ),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    moto_corrections.install()
    corrected = observe()
    out, err = plain.communicate(timeout=120)
    assert plain.returncode == 0, err
    yield json.loads(out.splitlines()[-1]), corrected


def test_moto_5_2_5_replaces_a_table_cancelling_a_transaction_and_its_stream_reader_misses_every_later_write(
        moto_observed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    plain, corrected = (observed["stream_after_a_cancelled_transaction"] for observed in moto_observed)
    assert plain == ["taken"]                       # the orphaned shard: "later" never reaches the reader
    assert corrected == ["taken", "later"]          # AWS: a cancelled transaction writes nothing, replaces nothing


def test_moto_5_2_5_base64_encodes_a_stream_records_binary_key_twice(
        moto_observed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    plain, corrected = (observed["binary_key_in_a_stream_record"] for observed in moto_observed)
    assert plain["Keys"] != plain["NewImage"] == repr(b"\x01key")
    assert corrected["Keys"] == corrected["NewImage"] == repr(b"\x01key")  # AWS: the key's bytes, once


def test_moto_5_2_5_describes_a_backup_without_its_tables_indexes(
        moto_observed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    plain, corrected = (observed["describe_backup_of_an_indexed_table"] for observed in moto_observed)
    assert plain is None
    assert corrected == {"GlobalSecondaryIndexes": [{
        "IndexName": "by-due", "KeySchema": [{"AttributeName": "due", "KeyType": "HASH"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"}}]}


def test_moto_5_2_5_answers_a_long_poll_a_second_late_when_a_delay_ends_during_it(
        moto_observed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    plain, corrected = (observed["long_poll_while_a_delay_ends"] for observed in moto_observed)
    assert plain >= 0.9, plain               # moto re-checks the queue once a second
    assert 0.15 <= corrected < 0.6, corrected  # AWS: as soon as the message is visible


def test_moto_5_2_5_lists_every_backup_in_one_page_ignores_time_bounds_and_takes_any_backup_name(
        moto_observed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    plain, corrected = (observed["list_and_create_backups"] for observed in moto_observed)
    assert plain == {"first_page": 3, "more": False, "before_2000": 3, "space_in_name": None}
    assert corrected == {"first_page": 2, "more": True, "before_2000": 0, "space_in_name": "ValidationException"}


def test_moto_5_2_5_writes_an_export_without_manifests_under_an_import_arn_and_ignores_its_client_token(
        moto_observed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    plain, corrected = (observed["export_to_s3"] for observed in moto_observed)
    assert installed_moto_version() == MOTO_VERSION == "5.2.5"
    assert plain == {"arn": "<table>", "same_export_again": False,  # table/<the table ARN>/import/<id>
                     "objects": ["data/*", "data/*"], "unknown": "KeyError", "manifest": False}
    # AWS: <table ARN>/export/<id>; one export a token; AWSDynamoDB/<id>/manifest-summary.json, manifest-files.json,
    # data/*.json.gz; ExportNotFoundException for an unknown ARN.
    assert corrected == {"arn": "export", "same_export_again": True,
                         "objects": ["data/*", "manifest-files.json", "manifest-summary.json"],
                         "unknown": "ExportNotFoundException", "manifest": True}


def test_moto_5_2_5_exports_the_whole_table_for_an_incremental_export(
        moto_observed: tuple[dict[str, Any], dict[str, Any]]) -> None:
    plain, corrected = (observed["incremental_export"] for observed in moto_observed)
    assert installed_moto_version() == MOTO_VERSION == "5.2.5"
    assert plain == {"lines": [["b", ["Item"]], ["c", ["Item"]]], "manifest": False}  # the table now, as a full one
    # AWS: only the window's changes, each with its keys, NewImage (none: deleted) and OldImage (none: new)
    assert corrected == {"lines": [["a", ["Keys", "Metadata", "OldImage"]], ["c", ["Keys", "Metadata", "NewImage"]]],
                         "manifest": True}


# --- the moto the patches were written for ---------------------------------------------------------------

def test_the_patches_refuse_a_moto_other_than_the_one_they_were_written_for() -> None:
    with pytest.raises(MotoVersionError) as raised:
        check_moto_version("5.3.0")
    message = str(raised.value)
    assert "moto 5.3.0 is installed" in message and "moto 5.2.5" in message
    check_moto_version("5.2.5")  # the version they were written for: no error


def test_the_pinned_moto_is_the_one_the_patches_were_written_for() -> None:
    pins = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert f"moto[server]=={MOTO_VERSION}" in pins
    assert installed_moto_version() == MOTO_VERSION


# --- the offline runtime's speed-ups come off again (the functional tests run without them) ------------------

def test_the_speed_ups_come_off_leaving_moto_as_the_corrections_left_it() -> None:
    from moto.core.base_backend import InstanceTrackerMeta
    from moto.dynamodb.models import DynamoDBBackend
    from moto.sqs.models import Queue

    from local import moto_speed

    moto_corrections.install()
    moto_speed.uninstall()  # whatever an earlier test of this process left
    corrected_put, queue_messages = DynamoDBBackend.put_item, vars(Queue)["messages"]
    moto_speed.install()
    patched = [(owner, name) for owner, name, _, _ in moto_speed._patched]
    assert DynamoDBBackend.put_item is not corrected_put and "instances_tracked" in vars(InstanceTrackerMeta)
    moto_speed.uninstall()
    assert DynamoDBBackend.put_item is corrected_put and vars(Queue)["messages"] is queue_messages
    assert "instances_tracked" not in vars(InstanceTrackerMeta)
    assert isinstance(vars(Queue)["instances_tracked"], list)
    moto_speed.install()  # and on again, as the next e2e test's runtime does
    assert [(owner, name) for owner, name, _, _ in moto_speed._patched] == patched
    moto_speed.uninstall()
