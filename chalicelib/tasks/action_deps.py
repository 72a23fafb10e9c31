"""What an action and a webhook use of the stage, as protocols: its settings, its clients, its clock and memo.

The actions and webhooks lie below the settings (which check task sources' actions at import), so they name
``chalicelib.aws.Deps`` and ``chalicelib.settings.Settings`` by these protocols, which both satisfy (mypy checks
it at every call that passes them).  Types only: nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_sesv2 import SESV2Client
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient


class ActionSettings(Protocol):
    """The settings an action reads (chalicelib.settings.Settings)."""

    @property
    def region(self) -> str: ...
    @property
    def sender_email(self) -> str: ...
    @property
    def task_action_target_arns(self) -> tuple[str, ...]: ...
    @property
    def task_webhook_origins(self) -> tuple[str, ...]: ...
    @property
    def task_webhook_secrets(self) -> tuple[str, ...]: ...
    @property
    def task_webhook_timeout_seconds(self) -> float: ...
    @property
    def task_webhook_allow_loopback(self) -> bool: ...
    def own_queues(self) -> tuple[str, ...]: ...
    def own_topics(self) -> tuple[str, ...]: ...
    def own_functions(self) -> tuple[str, ...]: ...
    def own_buses(self) -> tuple[str, ...]: ...


class ActionClients(Protocol):
    """The clients the actions call (chalicelib.aws.Clients)."""

    @property
    def ses(self) -> SESV2Client: ...
    @property
    def sqs(self) -> SQSClient: ...
    @property
    def sns(self) -> SNSClient: ...
    @property
    def lambda_(self) -> LambdaClient: ...
    @property
    def events(self) -> EventBridgeClient: ...
    @property
    def stepfunctions(self) -> SFNClient: ...
    @property
    def ssm(self) -> Any: ...
    @property
    def secretsmanager(self) -> Any: ...


class ActionDeps(Protocol):
    """What an action runs with (chalicelib.aws.Deps)."""

    @property
    def settings(self) -> ActionSettings: ...
    @property
    def clients(self) -> ActionClients: ...
    @property
    def clock(self) -> Callable[[], datetime]: ...
    @property
    def memo(self) -> dict[Any, Any]: ...
