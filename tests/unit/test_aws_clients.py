"""The one place that builds clients: retry mode, attempts, region and endpoint come from the settings."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ParamValidationError

from chalicelib.aws import USER_AGENT, Clients
from chalicelib.settings import Settings


def test_clients_take_retry_mode_attempts_and_region_from_settings() -> None:
    settings = Settings.from_env({"AWS_REGION": "eu-west-1", "AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "5"})
    clients = Clients(settings)
    for client in (clients.dynamodb, clients.sqs, clients.sns, clients.ses, clients.scheduler):
        config = client.meta.config
        assert config.retries == {"mode": "standard", "total_max_attempts": 5}  # type: ignore[attr-defined]
        assert client.meta.region_name == "eu-west-1"
        assert "eu-west-1" in client.meta.endpoint_url


def test_the_dynamodb_client_for_calls_that_are_not_idempotent_makes_one_attempt() -> None:
    settings = Settings.from_env({"AWS_REGION": "eu-west-1", "AWS_RETRY_MODE": "standard", "AWS_MAX_ATTEMPTS": "5"})
    client = Clients(settings).dynamodb_unretried
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}  # type: ignore[attr-defined]
    assert client.meta.region_name == "eu-west-1"


def test_aws_endpoint_url_points_every_client_at_it() -> None:
    settings = Settings.from_env({"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "http://127.0.0.1:4566"})
    clients = Clients(settings)
    for client in (clients.dynamodb, clients.sqs, clients.sns, clients.ses, clients.scheduler):
        assert client.meta.endpoint_url == "http://127.0.0.1:4566"


def test_the_default_retry_mode_is_adaptive_with_bounded_attempts() -> None:
    config = Clients(Settings.from_env({})).dynamodb.meta.config
    assert config.retries == {"mode": "adaptive", "total_max_attempts": 8}  # type: ignore[attr-defined]


def test_every_client_keeps_a_connection_for_each_stream_thread() -> None:
    clients = Clients(Settings.from_env({"STREAM_CONCURRENCY": "32"}))
    for client in (clients.dynamodb, clients.sqs, clients.sns, clients.ses, clients.scheduler):
        assert client.meta.config.max_pool_connections == 32  # type: ignore[attr-defined]
    assert Clients(Settings.from_env({"STREAM_CONCURRENCY": "4"})).sqs.meta.config.max_pool_connections == 10  # type: ignore[attr-defined]


class _Sent(Exception):
    """Raised at ``before-send``: the request went past botocore's checks, signed, and is not sent."""


def _stop_at_send(client: Any, seen: list[Any]) -> None:
    def stop(request: Any, **_: Any) -> None:
        seen.append(request)
        raise _Sent

    client.meta.events.register("before-send", stop)


def test_only_the_scheduler_client_whose_requests_the_app_builds_skips_botocores_parameter_check() -> None:
    clients = Clients(Settings.from_env({"AWS_REGION": "us-east-1"}))
    seen: list[Any] = []
    for checked in (clients.sqs, clients.dynamodb, clients.ses, clients.lambda_, clients.events,
                    clients.stepfunctions):  # the actions' clients take what a user wrote
        assert checked.meta.config.parameter_validation is True  # type: ignore[attr-defined]
    with pytest.raises(ParamValidationError):
        clients.sqs.list_queues(MaxResults="10")  # type: ignore[arg-type]
    _stop_at_send(clients.scheduler, seen)
    with pytest.raises(_Sent):  # AWS would answer ValidationException: the stream dead-letters the record
        clients.scheduler.list_schedules(MaxResults="10")  # type: ignore[arg-type]
    assert len(seen) == 1


def test_every_request_carries_the_user_agent_built_once_not_botocores_per_request_one() -> None:
    clients = Clients(Settings.from_env({"AWS_REGION": "us-east-1"}))
    seen: list[Any] = []
    for client in (clients.sqs, clients.scheduler):
        _stop_at_send(client, seen)
    with pytest.raises(_Sent):
        clients.sqs.list_queues()
    with pytest.raises(_Sent):
        clients.scheduler.list_schedules()
    agents = [request.headers["User-Agent"] for request in seen]
    # botocore appends the session's extra (Powertools' own mark) to the fixed string, and nothing per request
    assert len(agents) == 2 and agents[0] == agents[1]
    assert (agents[0].decode() if isinstance(agents[0], bytes) else agents[0]).startswith(USER_AGENT)
