"""Pure decisions of restore verification: which tables, the temporary tables' names, the verdict. No I/O.

A verification restores a table's backup into a temporary table named after the run
(``restore_table_name``), compares it with what the backup recorded (``compare``) and
deletes it. Which tables a run verifies is ``tables_to_verify``: BACKUP_VERIFY's list, or
a sample of N that starts after the last table the previous run verified, in name order,
so that every table is verified in turn.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from chalicelib.backups.rules import NAME_MAX
from chalicelib.settings import BackupVerify

MARK = ".verify."      # between the stage's prefix and the run id: run ids hold no "."
HASH_LENGTH = 10
_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9_.-]")
_RUN_ID = r"[0-9]{8}T[0-9]{6}Z-[a-z0-9-]{1,40}"


def tables_to_verify(spec: BackupVerify, run_tables: Sequence[str], after: str | None) -> list[str]:
    """The tables of the run to verify: the listed ones it backs up (in the list's order), or ``spec.sample``
    of them in name order starting after ``after`` (the last table the previous run verified), wrapping."""
    if spec.tables:
        chosen = set(run_tables)
        return [t for t in spec.tables if t in chosen]
    if not spec.sample:
        return []
    ordered = sorted(set(run_tables))
    start = sum(1 for t in ordered if after is not None and t <= after) % max(len(ordered), 1)
    rotated = ordered[start:] + ordered[:start]
    return rotated[:spec.sample]


def rotation_after(plans: Sequence[Sequence[str]]) -> str | None:
    """Where the next sample starts: the last table of the newest plan that chose any (``plans`` newest first)."""
    for plan in plans:
        if plan:
            return plan[-1]
    return None


def restore_prefix(prefix: str) -> str:
    """The start of every temporary table name of the stage with backup name prefix ``prefix``."""
    return _NOT_ALLOWED.sub("_", prefix) + MARK


def restore_table_name(prefix: str, run_id: str, table: str) -> str:
    """``<prefix>.verify.<run id>.<table>``: a table name (3-255 of [A-Za-z0-9_.-]) unique per run and table;
    a table name too long for the whole to fit is cut and followed by a hash of it."""
    head = f"{restore_prefix(prefix)}{run_id}."
    clean = _NOT_ALLOWED.sub("_", table)
    room = NAME_MAX - len(head)
    if len(clean) <= room and clean == table:
        return head + clean
    digest = hashlib.sha256(table.encode()).hexdigest()[:HASH_LENGTH]
    return f"{head}{clean[:max(room - HASH_LENGTH - 1, 0)]}.{digest}"


def run_of_restore_table(prefix: str, name: str) -> str | None:
    """The run id in a temporary table's ``name`` made by ``restore_table_name`` for ``prefix``, else None."""
    match = re.fullmatch(re.escape(restore_prefix(prefix)) + f"({_RUN_ID})\\..+", name)
    return match[1] if match else None


@dataclass(frozen=True)
class TableShape:
    """What verification compares: the key schema, the indexes (kind/name -> key schema and projection)
    and the item count (``complete``: every item was counted; else at least ``items``)."""

    key_schema: tuple[tuple[str, str], ...]
    indexes: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    items: int = 0
    complete: bool = True
    size_bytes: int = 0


def _keys(schema: Sequence[Mapping[str, Any]] | None) -> tuple[tuple[str, str], ...]:
    return tuple((str(k["AttributeName"]), str(k["KeyType"])) for k in schema or [])


def _indexes(gsis: Sequence[Mapping[str, Any]] | None, lsis: Sequence[Mapping[str, Any]] | None) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for kind, indexes in (("global", gsis), ("local", lsis)):
        for index in indexes or []:
            projection = index.get("Projection", {})
            out[f"{kind} {index['IndexName']}"] = (
                _keys(index.get("KeySchema")), projection.get("ProjectionType", ""),
                tuple(sorted(projection.get("NonKeyAttributes", []))))
    return out


def recorded_shape(description: Mapping[str, Any]) -> TableShape:
    """What DescribeBackup's BackupDescription says the table was: SourceTableDetails (key schema, item
    count, size) and SourceTableFeatureDetails (indexes)."""
    source = description.get("SourceTableDetails", {})
    features = description.get("SourceTableFeatureDetails", {})
    return TableShape(_keys(source.get("KeySchema")),
                      _indexes(features.get("GlobalSecondaryIndexes"), features.get("LocalSecondaryIndexes")),
                      int(source.get("ItemCount", 0)), True, int(source.get("TableSizeBytes", 0)))


def restored_shape(table: Mapping[str, Any], items: int, complete: bool) -> TableShape:
    """The restored table as DescribeTable describes it, with the items its bounded scan counted."""
    return TableShape(_keys(table.get("KeySchema")),
                      _indexes(table.get("GlobalSecondaryIndexes"), table.get("LocalSecondaryIndexes")),
                      items, complete, int(table.get("TableSizeBytes", 0)))


def compare(recorded: TableShape, restored: TableShape) -> list[str]:
    """Every way the restored table differs from what its backup recorded (empty: it matches).

    The backup's ItemCount is DynamoDB's count as of its last refresh (about every six hours), so a
    table that gained items since then restores more than it says: more is accepted, fewer is not.
    A scan that stopped at its bound only shows a lower bound: it fails when even that is short
    only if the whole table was counted, and when nothing at all came back from a non-empty backup.
    """
    problems: list[str] = []
    if restored.key_schema != recorded.key_schema:
        problems.append(f"key schema {list(restored.key_schema)} differs from the backup's {list(recorded.key_schema)}")
    missing = sorted(recorded.indexes.keys() - restored.indexes.keys())
    extra = sorted(restored.indexes.keys() - recorded.indexes.keys())
    changed = sorted(n for n in recorded.indexes.keys() & restored.indexes.keys()
                     if recorded.indexes[n] != restored.indexes[n])
    if missing:
        problems.append(f"indexes missing: {', '.join(missing)}")
    if extra:
        problems.append(f"indexes the backup did not have: {', '.join(extra)}")
    if changed:
        problems.append(f"indexes with another key schema or projection: {', '.join(changed)}")
    if restored.complete and restored.items < recorded.items:
        problems.append(f"restored {restored.items} items, the backup recorded {recorded.items}")
    elif not restored.complete and restored.items == 0 and recorded.items > 0:
        problems.append(f"restored table returned no items, the backup recorded {recorded.items}")
    return problems
