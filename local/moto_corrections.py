"""Corrections to moto's in-process backends: where moto 5.2.5 answers what AWS never answers, it answers as AWS.

moto is the local AWS of the functional tests (``mock_aws``), of the offline runtime and of the bench.  Every
patch here changes what a request observably does, toward AWS's behaviour, and nothing else: the functional
tests install this module alone (tests/fixtures.py), so the app is proven against moto plus these corrections.
What only makes moto faster or smaller (change feeds, memory bounds, caches) is local/moto_speed.py, which only
the offline runtime and the bench install.  Each correction has a test that runs its scenario against plain
moto and shows the bug (tests/unit/test_moto_corrections_bugs.py), and an upstream report text in
docs/offline-runtime.md.

The patches reach into moto's private internals, written against moto 5.2.5: ``install()`` refuses any other
version (``MotoVersionError`` names both), rather than patch code it was not written for.  ``install()`` is
idempotent and changes moto's classes in this process (``mock_aws`` and moto's server alike):

* **TransactWriteItems** deep-copied every table an operation named before
  applying the writes one by one, and after a cancelled transaction put the
  copies in place of the live tables.  The copies took the table's stream shard
  with them: a stream reader kept an iterator on the orphaned shard and never
  saw another record (no task ran again after one 409), and every transaction
  copied whole tables and their stream history (memory grew without bound).
  Here every condition is checked first, without writing; the writes are then
  applied with moto's own put/update/delete.  If one of them fails anyway (an
  update AWS would refuse), the items written so far and their stream records
  are undone: all or nothing, ``CancellationReasons`` per item as before.
  ``ClientRequestToken`` is not honoured (moto ignores it too).
* **Writes are serialised**: moto's conditional writes check and write in two
  steps, and a stream record's sequence number is the shard's length at the
  time, so concurrent requests (moto's server is threaded; the stream scheduler
  and the executor run threads under ``mock_aws``) could both pass
  ``attribute_not_exists`` or share a sequence number.  One lock per process
  (``WRITE_LOCK``) covers every DynamoDB write and every stream shard read and write.
* **Stream records' binary keys**: moto base64-encodes a binary key in a stream
  record's ``Keys`` twice (its images are right); the keys are taken from the image.
* **DescribeBackup** lacked ``SourceTableFeatureDetails`` (the backed-up table's
  indexes, which restore verification compares with the restored table's); it is
  added, from the table moto copied into the backup, in AWS's shape.
* **SQS long polls**: a ReceiveMessage with WaitTimeSeconds returns as soon as a
  delayed or in-flight message becomes visible, as on AWS: moto's waited for a new
  message or a whole second, so a message whose delay ended during a poll came up to
  a second late.
* **ListBackups** returned every backup in one page and ignored Limit,
  TimeRangeLowerBound/UpperBound and BackupType, and **CreateBackup** took any
  name.  Here ListBackups pages at 100 backups (or the ``Limit`` given) with
  ``LastEvaluatedBackupArn`` and honours TableName, the time bounds (lower
  inclusive, upper exclusive) and BackupType (default USER), oldest first;
  CreateBackup refuses a name AWS would refuse.  Backups are stamped at the real
  time, as moto and AWS stamp them; inside ``backups_stamped_by(clock)`` (not a
  correction: the hook the ``aws`` test fixture and the bench enter with their
  injected clock) at ``clock()``, so the time bounds mean against that clock
  what they mean against AWS.
* **Exports to S3**: moto wrote one gzipped DYNAMODB_JSON file under
  ``<prefix>/AWSDynamoDB/<random>/data/``, no manifest, named its export
  ``table/<the table's ARN>/import/<id>`` in the bucket owner's account, ignored
  ``ClientToken`` and ``ExportTime``, and answered DescribeExport of an unknown ARN
  with a server error.  Here an export is ``<table ARN>/export/<id>`` (AWS's id:
  14 digits of time, 8 characters), its objects are AWS's documented layout
  (``<prefix>/AWSDynamoDB/<id>/manifest-summary.json``, ``manifest-files.json``,
  ``data/<name>.json.gz``), its description carries ``ExportTime``, ``StartTime``,
  ``EndTime``, ``ClientToken`` and ``ExportManifest``, a repeated token answers the
  export it made (``ExportConflictException`` if the other parameters differ), and
  an unknown ARN is ``ExportNotFoundException``.
* **Incremental exports**: moto ignored ``IncrementalExportSpecification`` and
  exported the whole table as for a full export.  Here an ``INCREMENTAL_EXPORT``
  writes only the items changed in its window, one line each as AWS writes them
  (``{"Metadata": {"WriteTimeEpochMicros"}, "Keys", "NewImage", "OldImage"}``, no
  ``NewImage`` for a deleted item, no ``OldImage`` for a new one or with
  ``NEW_IMAGE``), its data under ``<prefix>/AWSDynamoDB/data/``, its manifests
  as a full export's, and a window outside 15 minutes to 24 hours is a
  ``ValidationException``.  What changed is known from images: every export
  (full or incremental) keeps an image of the table as it is when asked (moto
  keeps no history; the newest 20 a table), stamped with its ExportTime (an
  incremental's ExportToTime); an incremental compares the newest image at or
  before its ExportFromTime with the table now.  Its limits: the table is read
  when the request arrives, not at ExportTime or ExportToTime; a change undone
  within the window is not exported (AWS exports it); WriteTimeEpochMicros is
  the window's end, not the write's time; an incremental with no image at or
  before its ExportFromTime (none exported since moto started) FAILS.
"""

from __future__ import annotations

import copy
import importlib.metadata
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

MOTO_VERSION = "5.2.5"  # the moto whose internals these patches (and local/moto_speed.py's) were written for
WRITE_LOCK = threading.RLock()   # every DynamoDB write and every stream shard access in this process
_installed = False
_install_lock = threading.Lock()


# --- the moto these patches were written for ----------------------------------------

class MotoVersionError(RuntimeError):
    """The installed moto is not the version the patches of private moto internals were written for."""


def check_moto_version(installed: str, expected: str = MOTO_VERSION) -> None:
    """Refuse to patch a moto other than ``expected``: its private internals may differ in ways no error shows."""
    if installed != expected:
        raise MotoVersionError(
            f"moto {installed} is installed, but local/moto_corrections.py and local/moto_speed.py patch the "
            f"private internals of moto {expected}: install moto=={expected} (requirements-dev.txt), or port the "
            f"patches to moto {installed} (run tests/unit/test_moto_corrections_bugs.py: a correction whose bug "
            f"moto {installed} no longer has can go) and change MOTO_VERSION")


def installed_moto_version() -> str:
    return importlib.metadata.version("moto")


# --- DynamoDB: serialised writes, transactions, streams -----------------------------

def _serialised(method: Callable[..., Any]) -> Callable[..., Any]:
    def locked(*args: Any, **kwargs: Any) -> Any:
        with WRITE_LOCK:
            return method(*args, **kwargs)
    locked.__name__ = method.__name__
    locked.__doc__ = method.__doc__
    locked.__wrapped__ = method  # type: ignore[attr-defined]
    return locked


def _key_values(table: Any, key: dict[str, Any]) -> tuple[Any, Any]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    hash_value = DynamoType(key[table.hash_key_attr])
    range_value = DynamoType(key[table.range_key_attr]) if table.range_key_attr is not None else None
    return hash_value, range_value


def _restore_item(table: Any, hash_value: Any, range_value: Any, item: Any) -> None:
    if range_value is not None:
        if item is None:
            table.items[hash_value].pop(range_value, None)
            if not table.items[hash_value]:
                table.items.pop(hash_value, None)
        else:
            table.items[hash_value][range_value] = item
    elif item is None:
        table.items.pop(hash_value, None)
    else:
        table.items[hash_value] = item


def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto's DynamoDBBackend.transact_write_items, checking everything before writing anything and
    never copying a table (see the module's docstring)."""
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    with WRITE_LOCK:
        targets: set[tuple[str, str]] = set()
        errors: list[tuple[str | None, str | None, dict[str, Any] | None]] = []
        writes: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = []
        for item in transact_items:
            if len(item) > 1:
                raise TransactWriteSingleOpException
            original: dict[str, Any] | None = None
            try:
                op_type, op = next(iter(item.items()))
                if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                    raise ValueError("Unsupported transaction operation")
                table_name = op["TableName"]
                if op_type == "Put":
                    table = self.get_table(table_name)
                    attrs = op["Item"]
                    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = attrs[table.range_key_attr]
                else:
                    key = op["Key"]
                target = (str(table_name), str(dict(sorted(key.items()))))
                if target in targets:
                    raise MultipleTransactionsException()
                targets.add(target)
                current = self.get_item(table_name, key)
                condition = op.get("ConditionExpression")
                if condition is not None:
                    check = get_filter_expression(condition, op.get("ExpressionAttributeNames"),
                                        op.get("ExpressionAttributeValues"))
                    if not check.expr(current):
                        if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                            original = current.to_json()["Attributes"]
                        raise ConditionalCheckFailed(item=original)
                if op_type != "ConditionCheck":
                    writes.append((op_type, op, table_name, key))
                errors.append((None, None, None))
            except (MultipleTransactionsException, MockValidationException):
                raise
            except ConditionalCheckFailed as exc:
                errors.append(("ConditionalCheckFailed", str(exc.message), original))
            except Exception as exc:  # as moto: any other problem is this item's cancellation reason
                errors.append((type(exc).__name__, str(exc), original))
        if any(code is not None for code, _, _ in errors):
            raise TransactionCanceledException(errors)
        _apply(self, writes, len(transact_items))


def _apply(backend: Any, writes: list[tuple[str, dict[str, Any], str, dict[str, Any]]], count: int) -> None:
    """Apply checked writes with moto's own operations; undo them all if one fails (under WRITE_LOCK)."""
    from moto.dynamodb.exceptions import MockValidationException, TransactionCanceledException

    undo: list[tuple[Any, Any, Any, Any]] = []        # (table, hash, range, item before)
    stream_lengths: dict[int, tuple[Any, int]] = {}   # id(shard) -> (shard, records before)
    for position, (op_type, op, table_name, key) in enumerate(writes):
        try:
            table = backend.get_table(table_name)
            hash_value, range_value = _key_values(table, key)
            before = table.get_item(hash_value, range_value)
            undo.append((table, hash_value, range_value, copy.deepcopy(before) if op_type == "Update" else before))
            shard = table.stream_shard
            if shard is not None and id(shard) not in stream_lengths:
                stream_lengths[id(shard)] = (shard, len(shard.items))
            names, values = op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")
            if op_type == "Put":
                backend.put_item(table_name, op["Item"], expression_attribute_names=names,
                                 expression_attribute_values=values)
            elif op_type == "Delete":
                backend.delete_item(table_name, key, expression_attribute_names=names,
                                    expression_attribute_values=values)
            else:
                backend.update_item(table_name, key, update_expression=op["UpdateExpression"],
                                    expression_attribute_names=names, expression_attribute_values=values)
        except Exception as exc:
            for table, hash_value, range_value, item in reversed(undo):
                _restore_item(table, hash_value, range_value, item)
            for shard, length in stream_lengths.values():
                del shard.items[length:]
            if isinstance(exc, MockValidationException):
                raise
            reasons: list[tuple[str | None, str | None, Any]] = [(None, None, None)] * count
            reasons[min(position, count - 1)] = (type(exc).__name__, str(exc), None)
            raise TransactionCanceledException(reasons) from exc


def _shard_add(original: Callable[..., None]) -> Callable[..., None]:
    def add(self: Any, old: Any, new: Any) -> None:
        with WRITE_LOCK:
            original(self, old, new)
    return add


def _shard_get(original: Callable[..., list[dict[str, Any]]]) -> Callable[..., list[dict[str, Any]]]:
    """moto's StreamShard.get under the write lock, binary keys as AWS sends them."""
    def get(self: Any, start: int, quantity: int) -> list[dict[str, Any]]:
        with WRITE_LOCK:
            return [_binary_keys_fixed(record) for record in original(self, start, quantity)]
    get.__wrapped__ = original  # type: ignore[attr-defined]
    return get


def _binary_keys_fixed(record: dict[str, Any]) -> dict[str, Any]:
    """moto 5 base64-encodes a binary key in a stream record's Keys twice (its images are right): the key
    values are taken from the record's image, as AWS sends them."""
    data = record.get("dynamodb", {})
    image = data.get("NewImage") or data.get("OldImage") or {}
    keys = data.get("Keys", {})
    if any("B" in value for value in keys.values()) and all(name in image for name in keys):
        data["Keys"] = {name: image[name] for name in keys}
    return record


# --- SQS: long polls ------------------------------------------------------------------

def _long_polls_wake_on_time() -> None:
    """A long poll returns as soon as a delayed or in-flight message becomes visible (see the docstring)."""
    from moto.sqs.models import Queue

    def wait_for_messages(self: Any, timeout: int) -> None:
        now = time.time() * 1000.0
        upcoming = [moment for m in self._messages for moment in (m.delayed_until, m.visible_at) if moment > now]
        wait = min(float(timeout), (min(upcoming) - now) / 1000.0 + 0.001) if upcoming else float(timeout)
        with self._messages_lock:
            self._messages_lock.wait_for(lambda: self.messages, timeout=wait)

    Queue.wait_for_messages = wait_for_messages  # type: ignore[method-assign]


# --- DynamoDB backups as AWS pages and stamps them ----------------------------------

LIST_BACKUPS_PAGE = 100  # AWS's ListBackups answers at most 100 backups a page
BACKUP_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")


def _epoch(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value)).timestamp()


def _backup_created(backup: Any) -> float:
    return float(backup.creation_date_time.replace(tzinfo=UTC).timestamp())


def aws_list_backups(backend: Any, body: dict[str, Any]) -> dict[str, Any]:
    """ListBackups as AWS answers it, from moto's backups and the request's body."""
    lower, upper = _epoch(body.get("TimeRangeLowerBound")), _epoch(body.get("TimeRangeUpperBound"))
    kind = body.get("BackupType") or "USER"
    limit = int(body.get("Limit") or LIST_BACKUPS_PAGE)
    if not 1 <= limit <= LIST_BACKUPS_PAGE:
        raise ValueError(f"ListBackups Limit must be 1-{LIST_BACKUPS_PAGE}, got {limit}")
    backups = [b for b in backend.list_backups(body.get("TableName"))
               if (kind == "ALL" or b.type == kind)
               and (lower is None or _backup_created(b) >= lower) and (upper is None or _backup_created(b) < upper)]
    backups.sort(key=lambda b: (_backup_created(b), b.arn))
    start = body.get("ExclusiveStartBackupArn")
    if start:
        arns = [b.arn for b in backups]
        backups = backups[arns.index(start) + 1:] if start in arns else backups
    page, rest = backups[:limit], backups[limit:]
    response: dict[str, Any] = {"BackupSummaries": [b.summary for b in page]}
    if rest:
        response["LastEvaluatedBackupArn"] = page[-1].arn
    return response


_backup_clock: Callable[[], datetime] | None = None  # None: CreateBackup stamps the real time (moto's, as AWS)


@contextmanager
def backups_stamped_by(clock: Callable[[], datetime]) -> Iterator[None]:
    """Inside: CreateBackup stamps ``clock()`` as the backup's creation time, not the real time.

    Not a correction (moto stamps the real time, as AWS does): the hook by which a test's or the bench's
    injected clock is the time moto's backups are made at, so that ListBackups' time bounds mean against
    that clock what they mean against AWS's.  The ``aws`` test fixture and ``bench/backups.py`` enter it."""
    global _backup_clock
    previous, _backup_clock = _backup_clock, clock
    try:
        yield
    finally:
        _backup_clock = previous


def _aws_like_backups() -> None:
    """ListBackups and CreateBackup as AWS's (see the module's docstring)."""
    from moto.dynamodb.exceptions import MockValidationException
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.responses import DynamoHandler, DynamoResult

    real_create = DynamoDBBackend.create_backup

    def create_backup(self: Any, table_name: str, backup_name: str) -> Any:
        if not BACKUP_NAME.fullmatch(backup_name or ""):
            raise MockValidationException(
                f"BackupName {backup_name!r}: AWS takes 3-255 characters of [A-Za-z0-9_.-]")
        backup = real_create(self, table_name, backup_name)
        clock = _backup_clock
        if clock is not None:
            backup.creation_date_time = clock().astimezone(UTC).replace(tzinfo=None)
        return backup

    def list_backups(self: Any) -> Any:
        return DynamoResult(aws_list_backups(self.dynamodb_backend, self.body))

    DynamoDBBackend.create_backup = create_backup  # type: ignore[method-assign]
    DynamoHandler.list_backups = list_backups  # type: ignore[method-assign]


# --- DynamoDB exports to S3 as AWS writes and answers them ----------------------------

def _moment(value: Any) -> datetime | None:
    """A request's timestamp (epoch seconds, ISO text, or what moto parsed it into), in UTC."""
    if value is None or isinstance(value, datetime):
        return value.astimezone(UTC) if isinstance(value, datetime) and value.tzinfo else \
            (value.replace(tzinfo=UTC) if isinstance(value, datetime) else None)
    seconds = _epoch(value)
    return datetime.fromtimestamp(seconds, UTC) if seconds is not None else None


EXPORT_IMAGES = 20  # images of a table kept for incremental exports (see the module's docstring)


def incremental_window(body: dict[str, Any]) -> dict[str, Any] | None:
    """An INCREMENTAL_EXPORT request's window and view type, checked as AWS checks them (15 minutes to 24 hours);
    None for a full export."""
    from moto.dynamodb.exceptions import MockValidationException

    spec = body.get("IncrementalExportSpecification")
    if body.get("ExportType") != "INCREMENTAL_EXPORT" or spec is None:
        return None
    start, end = _moment(spec.get("ExportFromTime")), _moment(spec.get("ExportToTime")) or datetime.now(UTC)
    if start is None:
        raise MockValidationException("IncrementalExportSpecification.ExportFromTime is required")
    if not 15 * 60 <= (end - start).total_seconds() <= 24 * 3600:
        raise MockValidationException("An incremental export's period must be between 15 minutes and 24 hours")
    return {"from": start, "to": end, "view": spec.get("ExportViewType") or "NEW_AND_OLD_IMAGES"}


def table_image(table: Any) -> dict[str, Any]:
    """The table's items as DynamoDB JSON, by their key (moto's table, read under WRITE_LOCK)."""
    import json

    from moto.dynamodb.models.utilities import dynamo_json_dump

    image: dict[str, Any] = {}
    for item in table.all_items():
        attrs = json.loads(dynamo_json_dump(item.to_json(root_attr_name="Item")))["Item"]
        names = [n for n in (table.hash_key_attr, table.range_key_attr) if n]
        image[json.dumps([attrs[n] for n in names], sort_keys=True)] = attrs
    return image


def changes(table: Any, base: dict[str, Any] | None, image: dict[str, Any], window: dict[str, Any]
            ) -> list[dict[str, Any]]:
    """An incremental export's lines: each item that differs between ``base`` (the table at ExportFromTime) and
    ``image`` (now), as AWS writes it."""
    if base is None:
        raise RuntimeError("no image of the table at or before ExportFromTime: the offline correction knows no "
                           "changes before its first export of the table")
    names = [n for n in (table.hash_key_attr, table.range_key_attr) if n]
    micros = str(int(window["to"].timestamp() * 1_000_000))
    lines = []
    for key in sorted(set(base) | set(image)):
        old, new = base.get(key), image.get(key)
        if old == new:
            continue
        either: dict[str, Any] = new if new is not None else old or {}
        line: dict[str, Any] = {"Metadata": {"WriteTimeEpochMicros": micros}, "Keys": {n: either[n] for n in names}}
        if new is not None:
            line["NewImage"] = new
        if old is not None and window["view"] == "NEW_AND_OLD_IMAGES":
            line["OldImage"] = old
        lines.append(line)
    return lines


def export_id(at: datetime, token: str) -> str:
    """An export's id as AWS makes one: 14 digits of the request's time (ms) and 8 characters."""
    return f"{int(at.timestamp() * 1000):014d}-{token[:8]}"


def _aws_like_exports() -> None:
    """ExportTableToPointInTime, DescribeExport and their S3 objects as AWS's (see the module's docstring)."""
    import gzip
    import hashlib
    import json
    import uuid

    from moto.dynamodb.exceptions import ERROR_TYPE_PREFIX, DynamodbException
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table_export import TableExport

    class ExportNotFound(DynamodbException):
        def __init__(self, arn: str) -> None:
            super().__init__(ERROR_TYPE_PREFIX + "ExportNotFoundException", message=f"Export not found: {arn}")

    class ExportConflict(DynamodbException):
        def __init__(self) -> None:
            super().__init__(ERROR_TYPE_PREFIX + "ExportConflictException",
                             message="The ClientToken was used with different parameters")

    from moto.dynamodb.exceptions import MockValidationException

    real_init, real_export = TableExport.__init__, DynamoDBBackend.export_table
    asked_now = threading.local()  # (image, base image, incremental spec) of the export being made in this thread

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self.started_at = datetime.now(UTC)
        self.ended_at = None
        self.export_time = self.started_at
        self.client_token = ""
        table_arn = self.table.table_arn  # the table's account and region, whoever owns the bucket
        self.arn = f"{table_arn}/export/{export_id(self.started_at, uuid.uuid4().hex)}"
        self.image, self.base, self.incremental = getattr(asked_now, "export", None) or ({}, None, None)

    def write_files(self: Any, s3_backend: Any) -> None:
        if self.incremental is None:
            lines = [json.dumps({"Item": item}) for _, item in sorted(self.image.items())]
        else:
            lines = [json.dumps(line) for line in changes(self.table, self.base, self.image, self.incremental)]
        self.processed_bytes = sum(len(line) for line in lines)
        self.item_count = len(lines)
        root = f"{self.s3_prefix}/AWSDynamoDB" if self.s3_prefix else "AWSDynamoDB"
        base = f"{root}/{self.arn.rsplit('/', 1)[-1]}"
        data = gzip.compress(("\n".join(lines) + "\n").encode() if lines else b"")
        data_key = f"{root if self.incremental else base}/data/{uuid.uuid4().hex[:26]}.json.gz"
        s3_backend.put_object(bucket_name=self.s3_bucket, key_name=data_key, value=data)
        md5 = hashlib.md5(data).hexdigest()  # S3's ETag, not security
        files = json.dumps({"itemCount": self.item_count, "md5Checksum": md5, "etag": md5,
                            "dataFileS3Key": data_key}) + "\n"
        s3_backend.put_object(bucket_name=self.s3_bucket, key_name=f"{base}/manifest-files.json",
                              value=files.encode())
        self.ended_at = datetime.now(UTC)
        summary = {"version": "2020-06-30", "exportArn": self.arn, "startTime": self.started_at.isoformat(),
                   "endTime": self.ended_at.isoformat(), "tableArn": self.table.table_arn,
                   "tableId": getattr(self.table, "table_id", ""), "exportTime": self.export_time.isoformat(),
                   "s3Bucket": self.s3_bucket, "s3Prefix": self.s3_prefix, "s3SseAlgorithm": "AES256",
                   "s3SseKmsKeyId": None, "manifestFilesS3Key": f"{base}/manifest-files.json",
                   "billedSizeBytes": self.processed_bytes, "itemCount": self.item_count,
                   "outputFormat": "DYNAMODB_JSON", "exportType": self.export_type}
        if self.incremental is not None:
            summary.update(exportFromTime=self.incremental["from"].isoformat(),
                           exportToTime=self.incremental["to"].isoformat(), exportViewType=self.incremental["view"])
        s3_backend.put_object(bucket_name=self.s3_bucket, key_name=f"{base}/manifest-summary.json",
                              value=json.dumps(summary).encode())
        self.manifest = f"{base}/manifest-summary.json"
        self.status = "COMPLETED"

    real_response = TableExport.response

    def response(self: Any) -> dict[str, Any]:
        out: dict[str, Any] = real_response(self)
        out.update(ExportTime=self.export_time.timestamp(), StartTime=self.started_at.timestamp(),
                   ClientToken=self.client_token)
        if self.ended_at is not None:
            out["EndTime"] = self.ended_at.timestamp()
        if getattr(self, "manifest", None):
            out["ExportManifest"] = self.manifest
        if self.incremental is not None:
            out["IncrementalExportSpecification"] = {
                "ExportFromTime": self.incremental["from"].timestamp(),
                "ExportToTime": self.incremental["to"].timestamp(), "ExportViewType": self.incremental["view"]}
        return {k: v for k, v in out.items() if v is not None}

    def export_table(self: Any, s3_bucket: str, s3_prefix: str, table_arn: str, export_format: str,
                     export_type: str, s3_bucket_owner: str, client_token: str = "",
                     export_time: datetime | None = None, incremental: dict[str, Any] | None = None) -> Any:
        tokens: dict[str, tuple[tuple[Any, ...], str]] = self.__dict__.setdefault("_export_tokens", {})
        asked = (s3_bucket, s3_prefix, table_arn, export_format, export_type, s3_bucket_owner,
                 export_time.timestamp() if export_time else None,
                 tuple(sorted((k, str(v)) for k, v in incremental.items())) if incremental else None)
        if client_token and client_token in tokens:
            if tokens[client_token][0] != asked:
                raise ExportConflict()
            return self.table_exports[tokens[client_token][1]]
        if export_type == "INCREMENTAL_EXPORT" and incremental is None:
            raise MockValidationException("IncrementalExportSpecification is required for an INCREMENTAL_EXPORT")
        at = incremental["to"] if incremental else export_time or datetime.now(UTC)
        images: dict[str, list[tuple[datetime, dict[str, Any]]]] = self.__dict__.setdefault("_export_images", {})
        table = next((t for t in self.tables.values() if t.table_arn == table_arn), None)
        with WRITE_LOCK:  # the table's image, and the images kept, as of this request
            image = table_image(table) if table is not None else {}
            base = None
            if incremental:
                older = [kept for when, kept in images.get(table_arn, []) if when <= incremental["from"]]
                base = older[-1] if older else None
            asked_now.export = (image, base, incremental)
            try:
                made: Any = real_export(self, s3_bucket, s3_prefix, table_arn, export_format, export_type,
                                        s3_bucket_owner)
            finally:
                asked_now.export = None
            made.client_token = client_token
            if export_time is not None:
                made.export_time = export_time
            elif incremental:
                made.export_time = incremental["to"]
            if client_token:
                tokens[client_token] = (asked, made.arn)
            kept = images.setdefault(table_arn, [])
            kept.append((at, image))
            kept.sort(key=lambda pair: pair[0])
            del kept[:-EXPORT_IMAGES]
        return made

    def describe_export(self: Any, export_arn: str) -> Any:
        if export_arn not in self.table_exports:
            raise ExportNotFound(export_arn)
        return self.table_exports[export_arn]

    def handler_export(self: Any) -> Any:
        from moto.core.responses import ActionResult

        body = self.body
        at = body.get("ExportTime")
        made = self.dynamodb_backend.export_table(
            s3_bucket=body["S3Bucket"], s3_prefix=body.get("S3Prefix", ""), table_arn=body["TableArn"],
            export_type=body.get("ExportType", "FULL_EXPORT"), export_format=body.get("ExportFormat", "DYNAMODB_JSON"),
            s3_bucket_owner=body.get("S3BucketOwner"), client_token=body.get("ClientToken", ""),
            export_time=_moment(at), incremental=incremental_window(body))
        return ActionResult({"ExportDescription": made.response()})

    TableExport.__init__ = init  # type: ignore[method-assign]
    TableExport._backup_to_s3_file = write_files  # type: ignore[method-assign]
    TableExport.response = response  # type: ignore[method-assign]
    DynamoDBBackend.export_table = export_table  # type: ignore[method-assign]
    DynamoDBBackend.describe_export = describe_export  # type: ignore[method-assign]
    from moto.dynamodb.responses import DynamoHandler
    DynamoHandler.export_table_to_point_in_time = handler_export  # type: ignore[method-assign]


# --- installing -----------------------------------------------------------------------

def install() -> None:
    """Apply the corrections to moto in this process (once); MotoVersionError under another moto than 5.2.5."""
    global _installed
    with _install_lock:
        if _installed:
            return
        check_moto_version(installed_moto_version())
        from moto.dynamodb.models import DynamoDBBackend
        from moto.dynamodb.models.table import StreamShard

        for name in ("put_item", "update_item", "delete_item"):  # BatchWriteItem calls these
            setattr(DynamoDBBackend, name, _serialised(getattr(DynamoDBBackend, name)))
        DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
        StreamShard.add = _shard_add(StreamShard.add)  # type: ignore[method-assign]
        StreamShard.get = _shard_get(StreamShard.get)  # type: ignore[method-assign]
        _backup_feature_details()
        _aws_like_backups()
        _aws_like_exports()
        _long_polls_wake_on_time()
        _installed = True


def _backup_feature_details() -> None:
    """DescribeBackup as AWS answers it: SourceTableFeatureDetails with the backed-up table's indexes."""
    from moto.dynamodb.models.table import Backup

    described = Backup.description

    def description(self: Any) -> dict[str, Any]:
        out: dict[str, Any] = described.fget(self)  # type: ignore[attr-defined]
        table = out["SourceTableDetails"]
        features: dict[str, Any] = {}
        for kind, fields in (("GlobalSecondaryIndexes", ("IndexName", "KeySchema", "Projection")),
                             ("LocalSecondaryIndexes", ("IndexName", "KeySchema", "Projection"))):
            indexes = [{k: index[k] for k in fields if k in index} for index in table.pop(kind, None) or []]
            if indexes:
                features[kind] = indexes
        out["SourceTableFeatureDetails"] = features
        return out

    Backup.description = property(description)  # type: ignore[method-assign,assignment]


