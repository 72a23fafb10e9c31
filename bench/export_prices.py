"""P1, exports to S3 priced: a GB-month of protection both ways, and an export run with its monitoring at 2,000 tables.

Protection: what keeping copies of 1 GB of table costs a month under one schedule (copies made a month, copies
kept), each way: DynamoDB's on-demand backups (in the table's account and region); AWS Backup with a copy to
another account or region (the source backup, its copy, the transfer); exports to S3 (the export, then the
objects' storage) in S3 Standard or Glacier Instant Retrieval, alone or replicated to another region (transfer
and a second copy's storage). An export's DynamoDB JSON is taken as large as the table (gzip left out: a bound
from above). Prices: bench/prices.py.

An export run at N tables, as chalicelib/backups/exports.py makes and follows it: per table the record's create
and start, its settle and its retention's plan (2 write units each: a record with the table's keys and indexes
is under 2 KB), a consistent read a poll; the run item's claim a poll (its table names: 30 bytes a table);
ExportTableToPointInTime, DescribeTable, DescribeContinuousBackups and DescribeExport are not charged (control
plane); S3: the manifests' 2 GETs and the lock configuration's GET, one ListObjectVersions, and (with Object Lock)
a PutObjectRetention per object (3: the manifests and one data file at small tables); the monitor's messages
(send, receive, delete each). Lambda time is left out (a few seconds a run at these counts).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench import prices
from bench.core import Scale, Section, Target

GB = 1.0
SCHEDULES = (("weekly, 4 kept", 52 / 12, 4), ("monthly, 12 kept", 1.0, 12), ("daily, 7 kept", 365 / 12, 7))
POLLS = 12          # an export of a small table takes minutes to an hour: 12 polls at 300 s
OBJECTS = 3         # a small table's export: manifest-summary.json, manifest-files.json, one data file
RUN_ITEM_BYTES_A_TABLE = 30


@dataclass(frozen=True)
class Protection:
    way: str
    usd: float          # a month, per GB of table


def protection(made: float, kept: int) -> list[Protection]:
    """Monthly dollars per GB of table: ``made`` copies a month, ``kept`` at a time, each way."""
    backup = kept * prices.BACKUP_STORAGE.usd
    aws_backup = kept * prices.AWS_BACKUP_WARM.usd * 2 + made * prices.INTER_REGION_TRANSFER.usd
    exported = made * prices.EXPORT_FULL.usd
    replicate = made * prices.INTER_REGION_TRANSFER.usd
    return [
        Protection("on-demand backups (same account and region)", backup),
        Protection("AWS Backup, copied to another account/region", aws_backup),
        Protection("exports, S3 Standard", exported + kept * prices.S3_STANDARD.usd),
        Protection("exports, S3 Standard, replicated to another region",
                   exported + replicate + 2 * kept * prices.S3_STANDARD.usd),
        Protection("exports, S3 Glacier Instant Retrieval", exported + kept * prices.S3_GLACIER_IR.usd),
        Protection("exports, Glacier IR, replicated to another region",
                   exported + replicate + 2 * kept * prices.S3_GLACIER_IR.usd),
    ]


def export_cost(table_gb: float, changed_gb: float | None = None) -> float:
    """Dollars of one export: full (``changed_gb`` None) by the table's size; incremental (EXPORT_FULL_HOURS) by
    the data changed in its window, 10 MB at least."""
    if changed_gb is None:
        return table_gb * prices.EXPORT_FULL.usd
    return max(changed_gb, prices.INCREMENTAL_MIN_GB) * prices.EXPORT_INCREMENTAL.usd


def run_cost(tables: int, polls: int = POLLS, locked: bool = True) -> dict[str, float]:
    """Dollars of one export run at ``tables`` tables, followed to its end and pruned (see the docstring)."""
    run_item_units = max(1, -(-tables * RUN_ITEM_BYTES_A_TABLE // 1024))
    write_units = tables * 4 * 2 + (polls + 1) * run_item_units
    read_units = tables * polls  # a consistent read of a record under 4 KB: 1 unit
    s3_gets = tables * 3
    s3_puts = tables * (1 + (OBJECTS if locked else 0))
    sqs = (polls + 1) * 3
    return {
        "state writes": write_units * prices.DYNAMODB_WRITE_UNIT.usd,
        "state reads": read_units * prices.DYNAMODB_READ_UNIT.usd,
        "S3 requests": s3_gets * prices.S3_GET.usd + s3_puts * prices.S3_PUT.usd,
        "SQS": sqs * prices.SQS_REQUEST.usd,
    }


def section(scale: Scale) -> list[Section]:
    table = Section(key="P1", title="exports to S3 against backups: dollars a month per GB of table protected",
                    columns=["schedule", *[p.way for p in protection(1, 1)]])
    for name, made, kept in SCHEDULES:
        table.rows.append([name, *[round(p.usd, 3) for p in protection(made, kept)]])
    weekly = {p.way: p.usd for p in protection(SCHEDULES[0][1], SCHEDULES[0][2])}
    table.targets = [Target("weekly exports in Glacier IR, replicated, against AWS Backup copies ($/GB-month)",
                            round(weekly["exports, Glacier IR, replicated to another region"], 3),
                            round(weekly["AWS Backup, copied to another account/region"], 3))]
    table.notes = [
        "per GB of table a month: backups and AWS Backup copies are billed a GB-month each kept copy; an export "
        f"${prices.EXPORT_FULL.usd:.2f} a GB each time, then S3 storage; replication adds the transfer "
        f"(${prices.INTER_REGION_TRANSFER.usd:.2f}/GB) and a second copy's storage",
        f"a restore from an export imports it: ${prices.IMPORT_FROM_S3.usd:.2f} a GB (plus "
        f"${prices.S3_GLACIER_IR_RETRIEVAL.usd:.2f} a GB read from Glacier IR), which is why restore verification "
        "checks an export's manifest counts (3 S3 GETs) rather than importing it",
        "Glacier IR bills 90 days at least: a copy deleted sooner is billed to 90 days (the daily row keeps 7 days)",
    ]
    sizes = scale.pick([10, 100, 2000], [10, 2000], [10, 2000])
    runs = Section(key="P1", title=f"an export run and its monitoring: dollars a run ({POLLS} polls, Object Lock on)",
                   columns=["tables", "state writes", "state reads", "S3 requests", "SQS", "total",
                            "per table"])
    for n in sizes:
        cost = run_cost(n)
        total = sum(cost.values())
        runs.rows.append([n, *[round(v, 5) for v in cost.values()], round(total, 4), round(total / n, 6)])
    largest = max(sizes)
    runs.targets = [Target(f"an export run's own cost at {largest} tables, dollars (the exports' $0.10/GB aside)",
                           round(sum(run_cost(largest).values()), 4), 1.0)]
    runs.notes = [
        "the exports themselves ($0.10 a GB of table) and S3 storage are the protection rows above; this is what "
        "making, following, locking and pruning them adds; the DynamoDB control-plane calls (ExportTableToPointInTime, "
        "DescribeExport, DescribeTable, DescribeContinuousBackups, ListExports) are not charged",
        "AWS runs at most 300 exports of an account at once: at 2,000 tables the rest are deferred and started by "
        "the monitor's later polls (docs/scale.md)",
    ]
    return [table, runs]
