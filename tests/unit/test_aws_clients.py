"""The one place that builds clients: retry mode, attempts, region and endpoint come from the settings."""

from __future__ import annotations

from chalicelib.aws import Clients
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
