"""How the cost of one backup-monitor poll grows with the number of backups in a run.

Prints, for runs of 10 and 500 tables all still CREATING, the AWS calls one
poll makes (counted with a botocore event hook) and their ratio. The design
target is O(pages): the backup-status calls stay constant while the listing
fits in one page, instead of growing with the table count as a
DescribeBackup-per-table poll would (ratio 50 for 10 -> 500). moto returns one ListBackups page however many
backups there are; on AWS a page holds up to 100, so 500 backups cost 5 pages.

    .venv/bin/python -m bench.monitor_poll_cost
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

os.environ.update({"AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
                   "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled", "LOG_LEVEL": "ERROR"})
os.environ.pop("AWS_ENDPOINT_URL", None)

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from moto import mock_aws

from chalicelib.aws import Clients, Deps
from chalicelib.backups import monitor, trigger
from chalicelib.settings import Settings
from deploy.provision import provision


def poll_calls(tables: int) -> Counter[str]:
    with mock_aws():
        settings = Settings.from_env()
        clients = Clients(settings)
        env = provision(clients, settings).environment
        settings = replace(settings, alert_topic_arn=env["ALERT_TOPIC_ARN"],
                           backup_table_pattern=re.compile(r"bench-\d+"))
        now = [datetime(2026, 1, 1, tzinfo=UTC)]

        def sleep(seconds: float) -> None:
            now[0] += timedelta(seconds=seconds)

        deps = Deps(settings=settings, clients=clients, clock=lambda: now[0], sleep=sleep)
        for i in range(tables):
            clients.dynamodb.create_table(
                TableName=f"bench-{i:04d}", BillingMode="PAY_PER_REQUEST",
                KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}])
        run = trigger.start_run(deps, trigger="bench")
        from moto.dynamodb.models import dynamodb_backends

        for backup in dynamodb_backends["123456789012"]["us-east-1"].backups.values():
            backup.status = "CREATING"
        calls: Counter[str] = Counter()

        def count(model: Any, **_: Any) -> None:
            calls[f"{model.service_model.service_name}:{model.name}"] += 1

        for client in (clients.dynamodb, clients.sqs, clients.sns):
            client.meta.events.register("before-call.*.*", count)
        outcome = monitor.check_run(deps, f'{{"run_id": "{run.run_id}", "poll": 0}}')
        assert outcome == "requeued", outcome
        return calls


def main() -> None:
    small, large = poll_calls(10), poll_calls(500)
    status_small = sum(v for k, v in small.items() if "Backup" in k)
    status_large = sum(v for k, v in large.items() if "Backup" in k)
    print(f"{'tables':>8} {'all calls':>10} {'backup-status calls':>20}")
    print(f"{10:>8} {sum(small.values()):>10} {status_small:>20}")
    print(f"{500:>8} {sum(large.values()):>10} {status_large:>20}")
    print(f"ratio of backup-status calls, 500 vs 10 tables: {status_large / status_small:.2f} "
          f"(a DescribeBackup per table would be 50.00)")
    print(f"ratio of all calls: {sum(large.values()) / sum(small.values()):.2f}")


if __name__ == "__main__":
    main()
