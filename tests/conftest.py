"""Test configuration: the stage environment is set here, before app.py is imported."""

from __future__ import annotations

import json
import os
from pathlib import Path

TEST_ENV = {
    "STAGE": "test",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    # botocore 1.44 sends DynamoDB Streams calls to an account-ID endpoint moto does not serve.
    "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
    "ALERT_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:timekeeper-alerts",
    "TASKS_STREAM_ARN": "arn:aws:dynamodb:us-east-1:123456789012:table/timekeeper-tasks/stream/2026-01-01T00:00:00.000",
    "SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/timekeeper-scheduler",
    "SCHEDULER_DLQ_ARN": "arn:aws:sqs:us-east-1:123456789012:timekeeper-due-scheduler-dlq",
    "SENDER_EMAIL": "reminders@example.com",
    # The queues and topics the tests' task actions send to (moto's account); the app's own stay refused.
    "TASK_ACTION_TARGET_ARNS": "arn:aws:sqs:us-east-1:123456789012:*,arn:aws:sns:us-east-1:123456789012:*",
}
# The settings every stage ships (LOG_LEVEL=INFO among them) come first: tests run the app as it is configured.
STAGE_DEFAULTS: dict[str, str] = json.loads(
    (Path(__file__).resolve().parent.parent / ".chalice" / "config.json").read_text())["environment_variables"]
TEST_ENV = {**STAGE_DEFAULTS, **TEST_ENV}
for _name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
    os.environ.pop(_name, None)
os.environ.update(TEST_ENV)

pytest_plugins = ["tests.fixtures"]
