"""The one place that builds boto3 clients, and the bundle injected into domain code.

Every client gets botocore's retry mode (adaptive or standard) with a bounded
number of attempts (one for ``dynamodb_unretried``, whose calls are not idempotent), the region from the settings and, when set,
AWS_ENDPOINT_URL (moto's server on the local stage).  Domain functions take a
``Deps`` argument; tests build one from moto-backed clients, a fixed clock and
a sleep that only moves that clock.
"""

from __future__ import annotations

import platform
import random as _random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import boto3
import botocore
from botocore.config import Config

from chalicelib.metrics import Metrics
from chalicelib.settings import Settings

if TYPE_CHECKING:
    from botocore.config import _RetryDict
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_scheduler import EventBridgeSchedulerClient
    from mypy_boto3_sesv2 import SESV2Client
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

Clock = Callable[[], datetime]
Sleep = Callable[[float], None]
Draw = Callable[[], float]  # a uniform draw in [0, 1): the jitter of retry backoff


def utc_now() -> datetime:
    return datetime.now(UTC)


#: The User-Agent of every request, built once: botocore otherwise builds it from some 16 parts twice a request
#: (a tenth of its CPU a call in a stream batch: docs/benchmarks.md, P2); AWS reads it for its own statistics only.
USER_AGENT = f"timekeeper botocore/{botocore.__version__} Python/{platform.python_version()}"


def client_config(settings: Settings, attempts: int | None = None, validate: bool = True) -> Config:
    """botocore's settings of every client: ``attempts`` in all (AWS_MAX_ATTEMPTS unless given); ``validate``
    False skips botocore's check of the parameters against the service model before each call (for a client
    whose every parameter the app builds itself: AWS still checks them, and says ValidationException)."""
    return Config(
        region_name=settings.region,
        retries=cast("_RetryDict", {"mode": settings.aws_retry_mode,
                                    "total_max_attempts": attempts or settings.aws_max_attempts}),
        connect_timeout=5,
        read_timeout=30,
        # One connection per thread of a stream batch (botocore keeps 10 by default, and discards the rest).
        max_pool_connections=max(10, settings.stream_concurrency, settings.executor_concurrency),
        parameter_validation=validate,
        user_agent=USER_AGENT,
    )


@dataclass
class Clients:
    """Lazily built boto3 clients, one per service, shared by a container's invocations."""

    settings: Settings
    session: boto3.session.Session = field(default_factory=boto3.session.Session)
    _making: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def _make(self, service: str, attempts: int | None = None, validate: bool = True) -> Any:
        """A client (thread-safe once made); made under a lock, as a boto3 session is not thread-safe and the
        executor's and stream scheduler's threads may ask for the same client at once on a cold start."""
        kwargs: dict[str, Any] = {"config": client_config(self.settings, attempts, validate)}
        if self.settings.endpoint_url:
            kwargs["endpoint_url"] = self.settings.endpoint_url
        with self._making:
            return self.session.client(service, **kwargs)  # type: ignore[call-overload]

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        client: DynamoDBClient = self._make("dynamodb")
        return client

    @cached_property
    def dynamodb_unretried(self) -> DynamoDBClient:
        """DynamoDB for a call that is not idempotent (CreateBackup: a second call makes a second backup of the
        same name): botocore makes each call once, so an error whose request may have been applied (a 5xx, a
        lost answer) reaches the caller, which looks before it calls again (backups/trigger.py)."""
        client: DynamoDBClient = self._make("dynamodb", attempts=1)
        return client

    @cached_property
    def s3(self) -> Any:
        """S3: exports' objects (their Object Lock retention, their deletion by retention) and manifests."""
        return self._make("s3")

    @cached_property
    def sqs(self) -> SQSClient:
        client: SQSClient = self._make("sqs")
        return client

    @cached_property
    def sns(self) -> SNSClient:
        client: SNSClient = self._make("sns")
        return client

    @cached_property
    def ses(self) -> SESV2Client:
        client: SESV2Client = self._make("sesv2")
        return client

    @cached_property
    def scheduler(self) -> EventBridgeSchedulerClient:
        """Unvalidated by botocore: every request is ``schedules.schedule_request``'s (or a name and group), built
        from a task already read and checked, and a stream batch makes up to 100 of them in a row (botocore's
        check was a tenth of its CPU a call: docs/benchmarks.md, P2)."""
        client: EventBridgeSchedulerClient = self._make("scheduler", validate=False)
        return client

    # The task actions' targets (chalicelib/tasks/actions/): lambda, eventbridge and stepfunctions.
    @cached_property
    def lambda_(self) -> LambdaClient:
        client: LambdaClient = self._make("lambda")
        return client

    @cached_property
    def events(self) -> EventBridgeClient:
        client: EventBridgeClient = self._make("events")
        return client

    @cached_property
    def stepfunctions(self) -> SFNClient:
        client: SFNClient = self._make("stepfunctions")
        return client

    @cached_property
    def ssm(self) -> Any:
        """SSM Parameter Store: webhook signing secrets (SecureString)."""
        return self._make("ssm")

    @cached_property
    def secretsmanager(self) -> Any:
        """Secrets Manager: webhook signing secrets."""
        return self._make("secretsmanager")


@dataclass
class Deps:
    """What a domain function needs from the outside world: settings, clients, time, and where metrics go
    (recorded in memory, flushed once per invocation: chalicelib/metrics.py)."""

    settings: Settings
    clients: Clients
    clock: Clock = utc_now
    sleep: Sleep = time.sleep
    random: Draw = _random.random
    _queue_urls: dict[str, str] = field(default_factory=dict)
    _lookup: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    metrics: Metrics = field(default_factory=Metrics)
    # What domain code keeps for the container's life (a webhook's signing secret, with when it was read).
    memo: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.metrics.stage = self.metrics.stage or self.settings.stage

    def queue_url(self, name: str) -> str:
        """The URL of a queue by name, looked up once per container (threads that start together wait for
        the first one's answer)."""
        if name == self.settings.due_queue and self.settings.due_queue_url:
            return self.settings.due_queue_url  # provisioning named it: no call at all
        url = self._queue_urls.get(name)
        if url is None:
            with self._lookup:
                url = self._queue_urls.get(name)
                if url is None:
                    url = self.clients.sqs.get_queue_url(QueueName=name)["QueueUrl"]
                    self._queue_urls[name] = url
        return url

    @classmethod
    def from_settings(cls, settings: Settings) -> Deps:
        return cls(settings=settings, clients=Clients(settings))
