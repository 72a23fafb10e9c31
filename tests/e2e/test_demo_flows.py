"""The demo's flows on the whole `local` stage, started in-process on free ports, driven from outside."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from chalicelib.aws import Clients
from chalicelib.settings import Settings
from deploy.provision import provision
from local.client import ApiClient
from local.demo import DEMO_ENVIRONMENT, Demo, backups, cancelled, demo_for, seed, tasks
from local.stage import LocalSettings, LocalStage, start_local_stage

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stage() -> Iterator[LocalStage]:
    local = LocalSettings(aws_port=0, api_port=0, scheduler_jitter_seconds=0, ttl_lag_seconds=1)
    overrides = {**DEMO_ENVIRONMENT, "BACKUP_MONITOR_DELAY_SECONDS": "1"}
    started = start_local_stage(local, overrides=overrides, out=lambda line: None)
    yield started
    started.stop()


@pytest.fixture
def demo(stage: LocalStage) -> Demo:
    return demo_for(stage)


def tag() -> str:
    return uuid.uuid4().hex[:6]


def test_the_api_answers_on_its_port_and_every_handler_is_running(stage: LocalStage, demo: Demo) -> None:
    health = demo.api.get("/health")
    assert health.status == 200 and health.body["stage"] == "local"
    names = {s.name for s in stage.runtime.sources}
    assert {c.name for c in stage.app.event_sources} <= names


def test_provisioning_the_running_stage_again_changes_nothing(stage: LocalStage) -> None:
    settings = Settings.from_env(stage.environment)
    assert provision(Clients(settings), settings).changes == []


def test_backup_runs_complete_and_the_second_applies_retention(demo: Demo) -> None:
    assert "retention deleted 3" in backups(demo)


def test_one_task_of_each_strategy_sends_one_email_and_is_done(demo: Demo) -> None:
    tasks(demo, tag(), lead=timedelta(seconds=4))


def test_the_seeds_ten_plain_boto3_items_send_ten_emails(demo: Demo) -> None:
    seed(demo, tag(), lead=timedelta(seconds=2))


def test_a_cancelled_task_never_sends_its_email(demo: Demo) -> None:
    cancelled(demo, tag(), lead=timedelta(seconds=3), margin=4.0)


def test_the_local_api_needs_the_bearer_token_on_every_route_but_health(stage: LocalStage) -> None:
    anonymous = ApiClient(stage.api_url)
    wrong = ApiClient(stage.api_url, "not-the-token")
    assert stage.environment["API_AUTH"] == "token" and len(stage.environment["API_TOKEN"]) >= 20
    assert anonymous.get("/health").status == 200
    for path in ("/backups/runs", "/tasks"):
        assert anonymous.get(path).status == 401
        assert wrong.get(path).status == 403
        assert ApiClient(stage.api_url, stage.environment["API_TOKEN"]).get(path).status == 200
