"""The app's task path in-process under moto, as the P2 and P4 benches run it.

Importing this module sets the stage environment app.py and ``Settings`` read
at import (the shared ``environment_variables`` of .chalice/config.json, dummy
credentials, the test stage's ARNs), keeping any value already set -- the
suite's conftest.py sets its own first.  ``stage()`` starts moto, provisions
every resource with the same ``deploy.provision`` that ``make deploy`` runs
(once a process: a later stage starts from a copy of moto's backends as provisioned),
and hands back the settings that name them and a client bundle the bench uses
for its own set-up, whose calls are never counted as the app's.  moto runs with
the offline runtime's corrections and speed-ups (``local.moto_corrections`` and
``local.moto_speed``, as in ``make run``): without them every TransactWriteItems deep-copies the tables it names,
so the bench would time moto's copies, growing with the table.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from bench.core import BENCH_ENV, PROJECT

ACCOUNT = "123456789012"  # moto's default account

_STAGE_ENV = {
    **BENCH_ENV,
    "STAGE": "bench",
    "LOG_LEVEL": "WARNING",  # the bench's stdout is its tables; the app's INFO lines would bury them
    "TASKS_STREAM_ARN": "arn:aws:dynamodb:us-east-1:123456789012:table/timekeeper-tasks/stream/2026-01-01T00:00:00.000",
    "SCHEDULER_ROLE_ARN": "arn:aws:iam::123456789012:role/timekeeper-scheduler",
    "SENDER_EMAIL": "reminders@example.com",
}


def _prepare_environment() -> None:
    shared: dict[str, Any] = json.loads((PROJECT / ".chalice" / "config.json").read_text())["environment_variables"]
    for name, value in {**{k: str(v) for k, v in shared.items()}, **_STAGE_ENV}.items():
        os.environ.setdefault(name, value)
    os.environ.pop("AWS_ENDPOINT_URL", None)  # moto's mock_aws answers in-process


_prepare_environment()

from moto import mock_aws  # noqa: E402  (after the environment: botocore reads it)

from chalicelib.aws import Clients  # noqa: E402
from chalicelib.settings import Settings  # noqa: E402
from deploy.provision import provision  # noqa: E402
from local import moto_corrections, moto_speed  # noqa: E402


@dataclass
class Stage:
    """A provisioned moto account: the settings naming its resources and the bench's own (uncounted) clients."""

    settings: Settings
    setup: Clients


#: The provisioned world of each stage's settings and what provisioning answered, made once a process: ``provision``
#: is some 125 requests to moto; each later stage starts from a deep copy of moto's backends as provisioned (the
#: functional tests' pattern, tests/fixtures.py), the same world in a fraction of the time.
_PROVISIONED: dict[str, tuple[Any, dict[str, str]]] = {}


@contextmanager
def stage(**changes: Any) -> Iterator[Stage]:
    """moto, provisioned as ``make deploy`` provisions AWS; ``changes`` override settings."""
    from tests.fixtures import _freeze, _thaw  # after the environment: it imports app.py

    moto_corrections.install()
    moto_speed.install()
    with mock_aws(config={"lambda": {"use_docker": False}}):  # the lambda action's functions: invoked, never run
        settings = Settings.from_env()
        key = repr(settings)
        if key in _PROVISIONED:
            world, environment = _PROVISIONED[key]
            _thaw(world)
        else:
            environment = provision(Clients(settings), settings).environment
            _PROVISIONED[key] = (_freeze(settings, ""), environment)
        settings = replace(settings, alert_topic_arn=environment["ALERT_TOPIC_ARN"],
                           tasks_stream_arn=environment["TASKS_STREAM_ARN"],
                           scheduler_dlq_arn=environment["SCHEDULER_DLQ_ARN"],
                           scheduler_role_arn=environment["SCHEDULER_ROLE_ARN"],
                           due_queue_url=environment["DUE_QUEUE_URL"], due_queue_arn=environment["DUE_QUEUE_ARN"],
                           **changes)
        yield Stage(settings=settings, setup=Clients(settings))


def new_container() -> None:
    """Forget what a Lambda container keeps between invocations at module level (the stream handler's queue
    ARNs): the next deps built are a new container's."""
    from chalicelib.tasks import stream

    stream._queue_arns.clear()


def build_all(clients: Clients) -> list[Any]:
    """Every client the app builds (lazily, on first use), built now: the bench hooks each one."""
    return [clients.dynamodb, clients.sqs, clients.sns, clients.ses, clients.scheduler, clients.lambda_,
            clients.events, clients.stepfunctions, clients.ssm]


def empty_queue(settings: Settings, name: str) -> None:
    """Drop every message of a queue in moto's backend (PurgeQueue is allowed once a minute)."""
    from moto.sqs.models import sqs_backends

    sqs_backends[ACCOUNT][settings.region].queues[name]._messages.clear()
