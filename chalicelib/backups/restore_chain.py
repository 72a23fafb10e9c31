"""A restore through incremental exports: once ImportTable has made the target from the full export, each
incremental of the chain (oldest first) is read by its manifests and applied to the target: each line's NewImage
put, its key deleted where it has none (export_rules.change). Puts of whole images and deletes by key give the
same table however often they are applied in the same order: a retried poll applies them all again. One poll
applies the whole chain, 25 changes a BatchWriteItem: a chain of more changes than the monitor's Lambda can write
in its time fails that poll, and the next one starts again (until BACKUP_DEADLINE_MINUTES fails the restore)."""

from __future__ import annotations

import gzip
import json
from typing import Any

from chalicelib.aws import Deps
from chalicelib.backups import export_rules as er
from chalicelib.backups.retry import retry_transient
from chalicelib.log import logger

BATCH = 25          # BatchWriteItem's items a call (keys within one incremental are distinct: any order)
BATCH_ATTEMPTS = 8  # a batch's unprocessed items sent again, with backoff


def apply_incrementals(deps: Deps, target: str, incrementals: list[dict[str, Any]]) -> int:
    """Apply ``incrementals`` (the restore source's: bucket, bucket_owner, manifest) to ``target`` in order; what
    they change in its item count. A manifest or line that is not what DynamoDB writes is a ValueError."""
    counted = 0
    for incremental in incrementals:
        changes = [er.change(line) for line in _lines(deps, incremental)]
        requests = [{"PutRequest": {"Item": c.put}} if c.put is not None else {"DeleteRequest": {"Key": c.delete}}
                    for c in changes]
        for start in range(0, len(requests), BATCH):
            _batch_write(deps, target, requests[start:start + BATCH])
        counted += sum(c.count for c in changes)
        logger.info("incremental export applied", extra={"target": target, "export": incremental["export"],
                                                          "changes": len(changes)})
    return counted


def _batch_write(deps: Deps, target: str, requests: list[dict[str, Any]]) -> None:
    pending: Any = {target: requests}
    for attempt in range(BATCH_ATTEMPTS):
        answer = retry_transient(lambda items=pending: deps.clients.dynamodb.batch_write_item(  # type: ignore[misc]
            RequestItems=items), deps.sleep)
        pending = answer.get("UnprocessedItems") or {}
        if not pending:
            return
        deps.sleep(min(5.0, 0.05 * 2 ** attempt))
    raise RuntimeError(f"BatchWriteItem left {sum(len(v) for v in pending.values())} changes unprocessed")


def _lines(deps: Deps, incremental: dict[str, Any]) -> list[dict[str, Any]]:
    """The incremental's lines, every data file its manifests list; their count checked against the manifests'."""
    summary = json.loads(_get(deps, incremental, incremental["manifest"]))
    files = [json.loads(f) for f in _get(deps, incremental, str(summary["manifestFilesS3Key"])).decode().splitlines()
             if f.strip()]
    lines: list[dict[str, Any]] = []
    for entry in files:
        data = _get(deps, incremental, str(entry["dataFileS3Key"]))
        text = gzip.decompress(data).decode() if data[:2] == b"\x1f\x8b" else data.decode()
        found = [json.loads(line) for line in text.splitlines() if line.strip()]
        if len(found) != int(entry.get("itemCount", len(found))):
            raise ValueError(f"{entry['dataFileS3Key']} has {len(found)} lines, its manifest says {entry['itemCount']}")
        lines += found
    return lines


def _get(deps: Deps, incremental: dict[str, Any], key: str) -> bytes:
    owner = {"ExpectedBucketOwner": incremental["bucket_owner"]} if incremental.get("bucket_owner") else {}
    body = retry_transient(lambda: deps.clients.s3.get_object(Bucket=incremental["bucket"], Key=key, **owner),
                           deps.sleep)["Body"]
    return bytes(body.read())
