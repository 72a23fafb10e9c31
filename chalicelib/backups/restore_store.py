"""Restores on demand in the state table, next to the backup runs: one record each, and a listing entry.

Record: PK="BACKUP_RESTORE", SK=<restore id> (the client's ``restore_id`` or one the app makes): what was
asked (``request``), what it restores from (``source``), ``status`` (RESTORING, then ACTIVE or FAILED,
settled once), the comparison and the settings applied. Listing entry: PK="BACKUP_RESTORES",
SK="<requested at>#<restore id>", so a reverse Query lists the newest first whatever the ids are. Both are
written by one TransactWriteItems whose condition is that the record does not exist: the restore id is
the idempotency key, and a retried create finds its own earlier write (by ``write_id``, as RunStore does).
The same transaction claims the target's name: PK="BACKUP_RESTORE_TARGET", SK=<target>, ``restore_id``
(conditional: no claim yet, or the one the request found, of a settled restore whose table is gone), so
one target name belongs to one restore, and a TableAlreadyExistsException for it is the claimant's own.

The monitor's polls claim their number on the record (``claim_poll``), so a duplicate message never
starts a second chain, and the one write that settles the status decides who alerts (``settle``). Each
write of the record is a transition of lifecycle.py's ``RESTORE``, its expressions built from it (``_write``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from chalicelib import ddb
from chalicelib.backups.conditional import StateStore, conditional_failed
from chalicelib.backups.lifecycle import RESTORE
from chalicelib.backups.restore_rules import RESTORE_ID, RESTORING
from chalicelib.backups.retry import retry_transient

PARTITION = "BACKUP_RESTORE"
LISTING = "BACKUP_RESTORES"
TARGETS = "BACKUP_RESTORE_TARGET"


@dataclass
class Restore:
    restore_id: str
    request: dict[str, Any]             # RestoreRequest.as_record()
    source: dict[str, Any]              # what it restores from: backup (arn, name, created) or the point
    requested_at: datetime
    status: str = RESTORING
    poll: int = 0                       # the monitor message number it expects next
    poll_message: str = ""              # the SQS message id that claimed the last poll
    finished_at: datetime | None = None
    error: str = ""
    comparison: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # the source's, as read when re-applied
    settings_applied: list[str] = field(default_factory=list)
    settings_skipped: str = ""          # why a requested copy of the settings could not be made

    @property
    def table(self) -> str:
        return str(self.request["table"])

    @property
    def target(self) -> str:
        return str(self.request["target"])

    def to_item(self) -> dict[str, Any]:
        return {"PK": PARTITION, "SK": self.restore_id, "restore_id": self.restore_id, "request": self.request,
                "source": self.source, "requested_at": self.requested_at.isoformat(), "status": self.status,
                "poll": self.poll}

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> Restore:
        return cls(restore_id=item["restore_id"], request=dict(item["request"]), source=dict(item.get("source", {})),
                   requested_at=datetime.fromisoformat(item["requested_at"]), status=item["status"],
                   poll=int(item.get("poll", 0)), poll_message=str(item.get("poll_message", "")),
                   finished_at=datetime.fromisoformat(item["finished_at"]) if item.get("finished_at") else None,
                   error=str(item.get("error", "")), comparison=dict(item.get("comparison", {})),
                   settings=dict(item.get("settings", {})), settings_applied=list(item.get("settings_applied", [])),
                   settings_skipped=str(item.get("settings_skipped", "")))

    def view(self) -> dict[str, Any]:
        """What the API shows of a restore."""
        r = self.request
        return {
            "restore_id": self.restore_id, "status": self.status, "table": r["table"], "target": r["target"],
            "requested_at": self.requested_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "restored_from": dict(self.source), "copy_settings": r["copy_settings"], "billing_mode": r["billing_mode"],
            "comparison": dict(self.comparison) or None, "source_settings": dict(self.settings) or None,
            "settings_applied": list(self.settings_applied), "settings_skipped": self.settings_skipped or None,
            "error": self.error or None,
            "href": f"/backups/restores/{self.restore_id}",
        }


class RestoreStore(StateStore):
    """Restores on demand in the state table (see the module's docstring)."""

    @staticmethod
    def _key(restore_id: str) -> dict[str, Any]:
        return {"PK": {"S": PARTITION}, "SK": {"S": restore_id}}

    def get(self, restore_id: str) -> Restore | None:
        if not RESTORE_ID.fullmatch(restore_id):
            return None
        item = self._items.read(self._key(restore_id))
        return Restore.from_item(item) if item else None

    def target_owner(self, target: str) -> str | None:
        """The restore id that claims the target name ``target`` (None: no restore has)."""
        item = self._items.read({"PK": {"S": TARGETS}, "SK": {"S": target}})
        return str(item["restore_id"]) if item else None

    def create(self, restore: Restore, previous_owner: str = "") -> bool:
        """Record a new restore, its listing entry and its claim of the target's name in one transaction (the
        claim: none yet, or ``previous_owner``'s); False when a restore with this id exists already, or another
        restore claims the target (not this call's own earlier attempt)."""
        write_id = uuid.uuid4().hex
        listed = {"PK": LISTING, "SK": f"{restore.requested_at.isoformat()}#{restore.restore_id}",
                  "restore_id": restore.restore_id}
        claim = {"PK": TARGETS, "SK": restore.target, "restore_id": restore.restore_id}
        taken: Any = {"TableName": self._table, "Item": ddb.serialize(claim),
                      "ConditionExpression": "attribute_not_exists(PK)"}
        if previous_owner:  # that restore is settled and its table gone: the name is free again
            taken.update(ConditionExpression="attribute_not_exists(PK) OR restore_id = :previous",
                         ExpressionAttributeValues={":previous": {"S": previous_owner}})
        record: Any = {"TableName": self._table, "Item": ddb.serialize({**restore.to_item(), "write_id": write_id}),
                       **RESTORE.condition("create", {}).arguments()}
        try:
            retry_transient(lambda: self._ddb.transact_write_items(TransactItems=[
                {"Put": record},
                {"Put": {"TableName": self._table, "Item": ddb.serialize(listed)}},
                {"Put": taken},
            ]), self._sleep)
            return True
        except ClientError as exc:
            if not conditional_failed(exc):
                raise
        return self._items.holds(self._key(restore.restore_id), write_id)

    def recent(self, limit: int) -> list[Restore]:
        """The newest ``limit`` restores: a reverse Query of the listing, then their records (BatchGetItem)."""
        response = retry_transient(lambda: self._ddb.query(
            TableName=self._table, KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": LISTING}}, ScanIndexForward=False, Limit=limit), self._sleep)
        ids = [ddb.deserialize(i)["restore_id"] for i in response.get("Items", [])]
        found: dict[str, Restore] = {}
        keys: list[Any] = [self._key(i) for i in dict.fromkeys(ids)]
        while keys:
            request: dict[str, Any] = {self._table: {"Keys": keys, "ConsistentRead": True}}
            page = retry_transient(lambda: self._ddb.batch_get_item(RequestItems=request), self._sleep)  # noqa: B023
            for item in page.get("Responses", {}).get(self._table, []):
                restore = Restore.from_item(ddb.deserialize(item))
                found[restore.restore_id] = restore
            unprocessed: dict[str, Any] = dict(page.get("UnprocessedKeys", {}).get(self._table) or {})
            keys = list(unprocessed.get("Keys", []))
            if keys:
                self._sleep(0.05)
        return [found[i] for i in ids if i in found]

    def _write(self, transitions: tuple[str, ...], restore_id: str, params: dict[str, Any], source: str = "",
               target: str = "", returning: bool = False) -> tuple[bool, dict[str, Any]]:
        """Every conditional update of the record: one of RESTORE's ``transitions`` (lifecycle.py; an undeclared one
        is refused) with ``params`` (conditional.py: this call's own earlier attempt counts as done); with
        ``returning``, the record as written."""
        write = RESTORE.write(transitions, params, source, target)
        return self._items.apply(self._key(restore_id), write.update, write.condition, write.params, returning)

    def claim_poll(self, restore_id: str, poll: int, now: datetime, message_id: str) -> Restore | None:
        """Claim poll ``poll`` of a RESTORING restore for SQS message ``message_id``, reading the record in
        the same write; a redelivery of the very message that claimed it (the worker died before the next
        message was claimed) claims it again. None when another message has it or the restore is settled."""
        if not RESTORE_ID.fullmatch(restore_id):
            return None
        done, item = self._write(("claim_poll", "claim_poll_again") if message_id else ("claim_poll",), restore_id,
                                 {"next": poll + 1, "poll": poll, "message": message_id, "now": now.isoformat()},
                                 returning=True)
        return Restore.from_item(item) if done and item else None

    def settle(self, restore: Restore, now: datetime) -> bool:
        """RESTORING -> ACTIVE or FAILED with the outcome; False when another delivery settled it first."""
        restore.finished_at = now
        done, _ = self._write(("settle",), restore.restore_id, {
            "now": now.isoformat(), "error": restore.error, "comparison": restore.comparison,
            "settings": restore.settings, "applied": restore.settings_applied, "skipped": restore.settings_skipped},
            target=restore.status)
        return done

    def unsettle(self, restore: Restore) -> None:
        """Undo ``settle`` when its alert could not be sent, so a redelivery retries both."""
        self._write(("unsettle",), restore.restore_id, {}, source=restore.status)
