"""The demo's flows on the whole `local` stage, started in-process on free ports, driven from outside."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalicelib.aws import Clients
from chalicelib.settings import Settings
from deploy import observability
from deploy.provision import cloudwatch_client, provision
from local.client import ApiClient
from local.demo import QUICK_TIMING, Demo, demo_flows, demo_for, run_demo
from local.stage import LocalStage
from tests.e2e.stage_support import demo_stage

pytestmark = pytest.mark.e2e
REGION = "us-east-1"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def stage() -> Iterator[LocalStage]:
    with demo_stage() as started:
        yield started


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


def test_the_local_stage_has_the_alarms_and_the_dashboard_a_deployed_stage_has(stage: LocalStage) -> None:
    settings = Settings.from_env(stage.environment)
    cloudwatch = cloudwatch_client(Clients(settings))
    alarms = {a["AlarmName"]: a for a in cloudwatch.describe_alarms()["MetricAlarms"]}
    wanted = [a["AlarmName"] for a in observability.metric_alarms(settings, settings.alert_topic_arn)]
    assert set(wanted) <= set(alarms) and len(wanted) == 4
    assert all(alarms[name]["AlarmActions"] == [settings.alert_topic_arn] for name in wanted)
    assert cloudwatch.get_dashboard(DashboardName=observability.dashboard_name(settings))["DashboardBody"]


def test_make_demos_five_flows_pass_and_print_the_summary_table(stage: LocalStage) -> None:
    """backups + retention, one task per strategy, the seed's boto3 items, a cancelled task, a webhook task."""
    lines: list[str] = []
    started = time.monotonic()
    ok = run_demo(stage, lines.append, flows=demo_flows(QUICK_TIMING, tag()))
    assert time.monotonic() - started < 120
    table = "\n".join(lines)
    assert ok, table
    assert "step" in lines[1] and "result" in lines[1] and "seconds" in lines[1]
    for name in ("1 backups + retention", "2 tasks: one per strategy", "3 seed write (boto3)", "4 cancelled task",
                 "5 webhook task"):
        assert any(line.startswith(name) and "  ok  " in line for line in lines), table
    assert "retention deleted 3" in table and "10 emails" in table and "status CANCELLED" in table
    assert "signature verified, webhook-id " in table
    assert "restore ACTIVE (sample-orders -> sample-orders-restored-" in table
    assert lines[-1].startswith("\nall steps passed in ")


def test_make_demo_fails_when_a_flow_fails(stage: LocalStage) -> None:
    def broken(demo: Demo) -> str:
        raise AssertionError("the email never came")

    lines: list[str] = []
    assert not run_demo(stage, lines.append, flows=[("health", lambda demo: str(demo.api.get("/health").status)),
                                                    ("broken", broken)])
    assert any(line.startswith("broken") and "FAILED" in line and "the email never came" in line for line in lines)
    assert lines[-1].startswith("\nSOME STEPS FAILED in ")


def test_the_local_api_needs_the_bearer_token_on_every_route_but_health(stage: LocalStage) -> None:
    anonymous = ApiClient(stage.api_url)
    wrong = ApiClient(stage.api_url, "not-the-token")
    assert stage.environment["API_AUTH"] == "token" and len(stage.environment["API_TOKEN"]) >= 20
    assert anonymous.get("/health").status == 200
    for path in ("/backups/runs", "/tasks"):
        assert anonymous.get(path).status == 401
        assert wrong.get(path).status == 403
        assert ApiClient(stage.api_url, stage.environment["API_TOKEN"]).get(path).status == 200
