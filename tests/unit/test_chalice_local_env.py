"""`chalice local --stage local` lays `make run`'s environment over the shell's: every client of the app goes
to moto's endpoint with dummy credentials, whatever credentials, profile or endpoints the shell has."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalicelib.aws import Clients
from chalicelib.chalice_local import NotRunning, use_make_run, write_run_file
from chalicelib.settings import Settings
from local.aws import aws_environment

SHELL = {
    "STAGE": "local", "API_AUTH": "token",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2VjEXAMPLE", "AWS_DEFAULT_REGION": "eu-west-1", "AWS_PROFILE": "production",
    "AWS_ENDPOINT_URL": "https://example.amazonaws.com",
    "AWS_ENDPOINT_URL_DYNAMODB": "https://dynamodb.eu-west-1.amazonaws.com",
}


@pytest.fixture
def moto_port() -> Iterator[int]:
    """Something listening where make run's moto would be."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_with_make_run_up_every_client_goes_to_its_moto_with_dummy_credentials(
        tmp_path: Path, moto_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = f"http://127.0.0.1:{moto_port}"
    run_file = tmp_path / "make-run.json"
    write_run_file(run_file, {**aws_environment(endpoint, "us-east-1"), "API_TOKEN": "from-make-run",
                              "STAGE": "local", "API_AUTH": "token"}, "http://127.0.0.1:8000")
    environ = dict(SHELL)
    use_make_run(environ, run_file)
    assert "AWS_PROFILE" not in environ and "AWS_ENDPOINT_URL_DYNAMODB" not in environ
    assert environ["API_TOKEN"] == "from-make-run"
    for name in [*SHELL, "AWS_REGION"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    clients = Clients(Settings.from_env())
    for client in (clients.dynamodb, clients.sqs, clients.sns, clients.ses, clients.scheduler):
        assert client.meta.endpoint_url == endpoint, client.meta.service_model.service_name
    credentials = clients.session.get_credentials()
    assert credentials is not None and credentials.access_key == "local" and credentials.token == "local"


def test_the_shells_api_token_is_kept(tmp_path: Path, moto_port: int) -> None:
    run_file = tmp_path / "make-run.json"
    write_run_file(run_file, {**aws_environment(f"http://127.0.0.1:{moto_port}", "us-east-1"),
                              "API_TOKEN": "from-make-run"}, "http://127.0.0.1:8000")
    environ = {**SHELL, "API_TOKEN": "mine"}
    assert "the shell's API_TOKEN" in use_make_run(environ, run_file)
    assert environ["API_TOKEN"] == "mine"


def test_a_run_file_naming_an_endpoint_off_this_machine_is_refused(tmp_path: Path) -> None:
    run_file = tmp_path / "make-run.json"
    write_run_file(run_file, {"AWS_ENDPOINT_URL": "https://dynamodb.us-east-1.amazonaws.com"}, "")
    environ = dict(SHELL)
    with pytest.raises(NotRunning, match="not moto's on this machine"):
        use_make_run(environ, run_file)
    assert environ == SHELL  # nothing applied
