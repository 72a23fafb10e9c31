"""P1 of the bench (bench/backups.py) at tiny N: the code paths `make bench` runs, with figures checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from bench import backups, retention_scale
from bench.core import TINY, Section
from tests.aws_limits import ITEM_LIMIT, item_size


@pytest.fixture(scope="module")
def p1(tmp_path_factory: pytest.TempPathFactory) -> tuple[Section, Path]:
    plots = tmp_path_factory.mktemp("plots")
    sections = backups.run(TINY, plots)
    # the daily run's calls; retention by calendar; exports against backups (a GB-month, a run and its monitoring)
    assert [s.key for s in sections] == ["P1", "P1", "P1", "P1"]
    assert [s.title.split(":")[0] for s in sections[2:]] == ["exports to S3 against backups", "an export run and its monitoring"]
    p1_sections.extend(sections)
    return sections[0], plots


p1_sections: list[Section] = []


def by_tables(section: Section) -> dict[int, dict[str, Any]]:
    return {int(n): figures for n, figures in section.figures["by_tables"].items()}


def test_seed_000_describes_every_backup_on_every_poll(p1: tuple[Section, Path]) -> None:
    for n, figures in by_tables(p1[0]).items():
        seed = figures["seed_000"]
        assert seed["polls"] == backups.POLLS
        assert seed["calls"]["dynamodb:DescribeBackup"] == n * backups.POLLS
        assert seed["calls"]["dynamodb:CreateBackup"] == n
        assert seed["pending_poll"] == {"dynamodb:DescribeBackup": n, "sqs:SendMessage": 1}


def test_the_floor_is_creates_deletes_and_one_send_plus_the_listing_pages_per_poll() -> None:
    # 150 tables, 150 expired, 152 old backups, 3 polls: 150 + 150 + 3 x (2 pages + 1) + 2 pages
    assert backups.issue_floor_calls(150, 150, 152, 3) == 311
    assert backups.issue_floor_calls(3, 3, 5, 3) == 3 + 3 + 3 * 2 + 1
    assert backups.floor_calls(150, 150, 152, 3) == 311 + 22  # DescribeContinuousBackups: ceil(150 / 7)
    assert backups.floor_poll(500) == 6


def test_the_app_backs_up_every_table_deletes_the_expired_backups_and_spares_the_others(
        p1: tuple[Section, Path]) -> None:
    for n, figures in by_tables(p1[0]).items():
        ours = figures["ours"]
        assert not ours["failed"]
        assert ours["calls"]["dynamodb:CreateBackup"] == n
        assert ours["calls"]["dynamodb:DeleteBackup"] == n == ours["deleted"]
        assert ours["non_app_deleted"] == 0
        assert ours["polls"] == backups.POLLS
        assert ours["state_writes"] > 0 and ours["write_units"] >= ours["state_writes"]
        assert ours["largest_item_bytes"] > 0


def test_listing_pages_at_100_backups_as_aws_does(p1: tuple[Section, Path]) -> None:
    """Each poll lists the run's backups; retention lists the backups older than the retention (n of the
    app's, 2 not) and, to keep BACKUP_MIN_KEEP good ones, the n between the retention and the run."""
    figures = by_tables(p1[0])
    listed = {n: f["ours"]["calls"]["dynamodb:ListBackups"] for n, f in figures.items()}
    for n, calls in listed.items():
        assert calls == backups.POLLS * backups.pages(n) + backups.pages(n + 2) + backups.pages(n)
    small, large = min(listed), max(listed)
    assert backups.pages(large + 2) > 1, "the tiny scale must reach a second page"
    assert listed[large] > listed[small]


def test_the_section_reports_every_target_and_its_plot(p1: tuple[Section, Path]) -> None:
    section, plots = p1
    names = [t.name for t in section.targets]
    assert [name.split(" at ")[0].split(",")[0] for name in names] == [
        "pending poll", "whole run", "PITR report", "state write units per table", "largest state item"]
    largest = max(section.figures["sizes"])
    ours = by_tables(section)[largest]["ours"]
    pending = sum(ours["pending_poll"].values())
    assert section.targets[0].figure == pending and section.targets[0].limit == backups.floor_poll(largest)
    assert section.targets[1].figure == pytest.approx(sum(ours["calls"].values()) / section.rows[-1][6])
    assert section.targets[2].figure == ours["calls"].get("dynamodb:DescribeContinuousBackups", 0)
    assert section.targets[2].met and section.targets[2].limit == backups.pitr_reads(largest)
    png = plots / "p1_backup_calls.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert section.plots == [str(png)]
    assert [row[0] for row in section.rows] == section.figures["sizes"]


def test_a_state_write_over_400_kb_is_measured_then_refused_as_aws_refuses_it() -> None:
    with backups.world(1) as w:
        writes = backups.StateWrites(w.backend, w.deps.settings.state_table).attach(w.deps.clients.dynamodb)
        item = {"PK": {"S": "BACKUP_RUN"}, "SK": {"S": "big"}, "blob": {"S": "x" * ITEM_LIMIT}}
        with pytest.raises(ClientError, match="maximum allowed size"):
            w.deps.clients.dynamodb.put_item(TableName=w.deps.settings.state_table, Item=item)
    assert writes.refused == [("PutItem", item_size(item))]
    assert writes.largest == item_size(item) and writes.units == -(-item_size(item) // 1024)


def test_sizes_read_from_moto_follow_dynamodbs_rules() -> None:
    from moto.dynamodb.models.dynamo_type import DynamoType

    value = {"M": {"a": {"L": [{"S": "é"}, {"N": "12.50"}, {"BOOL": True}, {"NULL": True}]},
                   "b": {"SS": ["x", "yz"]}, "c": {"M": {}}}}
    assert backups.moto_value_size(DynamoType(value)) == item_size({"": value})


def test_a_run_that_fails_at_the_largest_n_is_reported_and_the_ratio_comes_from_the_largest_that_finished() -> None:
    from collections import Counter

    def ours(n: int, calls: int, units: int, failed: str = "") -> backups.RunFigures:
        return backups.RunFigures("ours", n, Counter({"dynamodb:CreateBackup": calls}),
                                  Counter({"dynamodb:ListBackups": 5, "sqs:SendMessage": 1}), 3, n, 0,
                                  state_writes=units, write_units=units, largest_item=500_000 if failed else 1_000,
                                  failed=failed)

    seed = backups.RunFigures("seed 000", 0, Counter(), Counter(), 3, 0, 0)
    targets = backups.targets({10: (ours(10, 20, 57), seed, 10), 500: (ours(500, 1500, 49_359), seed, 1000),
                               2000: (ours(2000, 6000, 60_000, failed="refused"), seed, 4000)})
    assert [(t.name, t.figure, t.met) for t in targets] == [
        ("pending poll at 500 tables, calls (floor: 5 ListBackups pages + 1)", 6, True),
        ("whole run at 500 tables / floor (the largest N whose run finishes; at 2000 the run fails)", 1.5, False),
        ("PITR report at 500 tables, DescribeContinuousBackups calls (a seventh: once a week each)", 0, True),
        ("state write units per table, 500 tables / 10 tables", (49_359 / 500) / (57 / 10), False),
        ("largest state item at 2000 tables, bytes", 500_000, False),
    ]


def test_calendar_retention_lists_and_deletes_only_and_deletes_what_the_policy_does(
        p1: tuple[Section, Path]) -> None:
    """The calendar row (bench/retention_scale.py): every scenario measured to its end at tiny N deletes
    exactly the policy's doomed backups with ListBackups and DeleteBackup alone, within the timeout."""
    retention = p1_sections[1]
    chains = retention.figures["chains"]
    assert [c["scenario"].split(" (")[0] for c in chains] == ["daily run", "first run", "first run"]
    for c in chains:
        assert c["estimated_invocations"] is None and c["left"] == 0
        assert c["delete_backup"] == c["doomed"] > 0 and c["list_backups"] >= c["floor"] - c["doomed"]
        assert max(c["seconds"]) <= retention_scale.INVOCATION_SECONDS
    assert chains[0]["backups"] < chains[1]["backups"]  # a year under the policy keeps a few a table
    assert len(retention.targets) == 1 and retention.targets[0].met


def test_the_count_only_stand_in_pages_oldest_first_within_the_time_bounds_as_aws_does() -> None:
    from datetime import timedelta

    client = retention_scale.CountedBackups()
    start = retention_scale.START
    for i in range(250):
        client.add("t", f"b-{i:03d}", start + timedelta(minutes=i))
    client.sort()
    first = client.list_backups(BackupType="USER", TimeRangeLowerBound=start + timedelta(minutes=10))
    assert len(first["BackupSummaries"]) == 100 and first["BackupSummaries"][0]["BackupName"] == "b-010"
    second = client.list_backups(BackupType="USER", TimeRangeLowerBound=start + timedelta(minutes=10),
                                 ExclusiveStartBackupArn=first["LastEvaluatedBackupArn"])
    assert second["BackupSummaries"][0]["BackupName"] == "b-110"
    bounded = client.list_backups(BackupType="USER", TimeRangeUpperBound=start + timedelta(minutes=5))
    assert [b["BackupName"] for b in bounded["BackupSummaries"]] == [f"b-{i:03d}" for i in range(5)]
    assert "LastEvaluatedBackupArn" not in bounded
    client.delete_backup(BackupArn=bounded["BackupSummaries"][0]["BackupArn"])
    with pytest.raises(ClientError, match="BackupNotFoundException"):
        client.delete_backup(BackupArn=bounded["BackupSummaries"][0]["BackupArn"])
    with pytest.raises(AssertionError, match="describe_backup"):
        client.describe_backup(BackupArn="x")
