"""Each SQS consumer's Lambda timeout fits inside its queue's visibility timeout.

Otherwise SQS hands a message that is still being processed to a second worker.
"""

from __future__ import annotations

import json
from pathlib import Path

from moto import mock_aws

import app as app_module
from chalicelib.aws import Clients
from chalicelib.settings import Settings
from deploy.provision import provision

CONFIG = json.loads((Path(__file__).parents[2] / ".chalice" / "config.json").read_text())
DEFAULT_TIMEOUT = 60  # Chalice's default lambda_timeout


def test_every_sqs_handler_finishes_within_its_queues_visibility_timeout() -> None:
    functions = CONFIG.get("lambda_functions", {})
    with mock_aws():
        settings = Settings.from_env({"AWS_REGION": "us-east-1"})
        clients = Clients(settings)
        provision(clients, settings)
        checked = []
        for source in app_module.app.event_sources:
            queue = getattr(source, "queue", None)
            if queue is None:
                continue
            queue_name = {app_module.settings.backup_monitor_queue: settings.backup_monitor_queue,
                          app_module.settings.due_queue: settings.due_queue,
                          app_module.settings.due_dlq: settings.due_dlq}[queue]
            url = clients.sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
            visibility = int(clients.sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]["VisibilityTimeout"])
            timeout = functions.get(source.name, {}).get("lambda_timeout", DEFAULT_TIMEOUT)
            assert timeout <= visibility, (source.name, timeout, visibility)
            checked.append(source.name)
        assert sorted(checked) == ["backup_monitor", "due_dead_letter", "task_executor"]
