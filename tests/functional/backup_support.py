"""Arrange helpers for the backup tests: tables, moto backups in states moto never produces.

moto's ListBackups pages and honours its time bounds as AWS's in every test (local/moto_corrections.py), and
the ``aws`` fixture has moto stamp backups at the test's clock (``moto_corrections.backups_stamped_by``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.aws import Deps
from chalicelib.backups.rules import backup_name
from tests.fixtures import ACCOUNT, Aws


def create_tables(deps: Deps, names: Iterable[str], tags: dict[str, dict[str, str]] | None = None) -> None:
    for name in names:
        kwargs: dict[str, Any] = {}
        if tags and name in tags:
            kwargs["Tags"] = [{"Key": k, "Value": v} for k, v in tags[name].items()]
        deps.clients.dynamodb.create_table(
            TableName=name, BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "PK", "AttributeType": "S"}], **kwargs)


def moto_backups(deps: Deps) -> dict[str, Any]:
    """moto's backups by ARN (its own objects: status, type, creation_date_time are writable)."""
    from moto.dynamodb.models import dynamodb_backends

    backups: dict[str, Any] = dynamodb_backends[ACCOUNT][deps.settings.region].backups
    return backups


def set_status(deps: Deps, arn: str, status: str) -> None:
    moto_backups(deps)[arn].status = status


def vanish(deps: Deps, arn: str) -> None:
    del moto_backups(deps)[arn]


def make_backup(deps: Deps, table: str, name: str, created: datetime, type_: str = "USER",
                status: str = "AVAILABLE") -> str:
    """A backup as if made at ``created`` (moto stamps the real time; this rewrites it)."""
    arn = deps.clients.dynamodb.create_backup(TableName=table, BackupName=name)["BackupDetails"]["BackupArn"]
    backup = moto_backups(deps)[arn]
    backup.creation_date_time = created.replace(tzinfo=None)
    backup.type = type_
    backup.status = status
    return arn


class CallCounter:
    """Counts AWS operations made through clients, via botocore's before-call event."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, model: Any, **_: Any) -> None:
        self.calls.append(f"{model.service_model.service_name}:{model.name}")

    def watch(self, *clients: Any) -> CallCounter:
        for client in clients:
            client.meta.events.register("before-call.*.*", self)
        return self

    def count(self, prefix: str = "") -> int:
        return sum(1 for c in self.calls if c.startswith(prefix))


class ThrottledHttp:
    """Throttles the HTTP attempts of one operation of ``client`` that ``throttle(n)`` picks (n counts
    the attempts from 1), before moto sees them: botocore's retry mode sees AWS's throttling answer
    and retries (use ``fake_backoff`` and retry mode standard so that it moves the test's clock)."""

    def __init__(self, client: Any, operation: str, throttle: Callable[[int], bool]) -> None:
        self.attempts = 0
        self.throttled = 0
        self._operation = operation
        self._throttle = throttle
        # On "before-send" itself, around moto's own handler there (as tests/faults.py does).
        client.meta.events.register_first("before-send", self._before_send)
        client.meta.events.register_last("before-send", self._after)

    def _before_send(self, request: Any, **_: Any) -> Any:
        from moto.core.models import botocore_stubber

        from tests.faults import _throttled

        target = request.headers.get("X-Amz-Target", b"")
        if not (target.decode() if isinstance(target, bytes) else str(target)).endswith("." + self._operation):
            return None
        self.attempts += 1
        if not self._throttle(self.attempts):
            return None
        self.throttled += 1
        botocore_stubber.enabled = False  # moto must not apply a request AWS refused
        return _throttled(request)

    def _after(self, **_: Any) -> None:
        from moto.core.models import botocore_stubber

        botocore_stubber.enabled = True


class Intercept:
    """A client whose ``method`` first calls ``before(**kwargs)`` (which may raise, to simulate a
    crash, or run a concurrent twin); every other call goes straight to the real client."""

    def __init__(self, client: Any, method: str, before: Callable[..., None]) -> None:
        self._client = client
        self._method = method
        self._before = before

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._client, name)
        if name != self._method:
            return real

        def wrapped(**kwargs: Any) -> Any:
            self._before(**kwargs)
            return real(**kwargs)
        return wrapped


def crash(code: str = "InternalServerError") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "simulated failure"}}, "Simulated")


@contextlib.contextmanager
def failing_calls(deps: Deps, client: str, method: str,
                  when: Callable[..., bool] = lambda **_: True) -> Iterator[None]:
    """Inside the block, ``deps.clients.<client>.<method>`` raises ``crash()`` instead of the calls ``when``
    picks (by their arguments); the real client is back after it, whatever the block raised."""
    real = getattr(deps.clients, client)

    def fail(**kwargs: Any) -> None:
        if when(**kwargs):
            raise crash()

    setattr(deps.clients, client, Intercept(real, method, fail))
    try:
        yield
    finally:
        setattr(deps.clients, client, real)


def monitor_messages(aws: Aws, deps: Deps, watches: bool = False) -> list[tuple[str, int]]:
    """(body, delay) of the poll messages now in the monitor queue (or, with ``watches``, the start
    watches only); empties the queue."""
    sent = aws.sent(deps.settings.backup_monitor_queue)
    return [(body, delay) for body, delay in sent if bool(json.loads(body).get("watch")) is watches]


def our_backup(deps: Deps, table: str, created: datetime, **kwargs: Any) -> str:
    """A backup named as this stage names its own (BACKUP_NAME_PREFIX, table, time), made at ``created``."""
    return make_backup(deps, table, backup_name(deps.settings.backup_name_prefix, table, created), created, **kwargs)
