"""Each stage names its backups with its own prefix, and make deploy refuses stages whose names could overlap."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from chalicelib.settings import Settings, SettingsError
from deploy import cli, stage

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("a", "b", "overlap"), [
    ("timekeeper-prod", "timekeeper-prod", True),       # the same prefix: the same names
    ("timekeeper", "timekeeper-prod", True),            # "timekeeper-prod-orders-..." is also timekeeper's "prod-orders"
    ("timekeeper-prod", "timekeeper", True),
    ("timekeeper-dev", "timekeeper-dev-eu", True),
    ("timekeeper-prod", "timekeeper-prod2", False),     # "timekeeper-prod2-..." never starts "timekeeper-prod-"
    ("timekeeper-prod", "timekeeper-dev", False),
    ("timekeeper-prod", "timekeeper_prod", False),
    ("tk.prod", "tk", False),
    ("a", "a-", True),
])
def test_prefixes_overlap_when_equal_or_one_is_the_other_and_a_dash(a: str, b: str, overlap: bool) -> None:
    assert stage.prefixes_overlap(a, b) is overlap


@pytest.mark.parametrize(("prefixes", "conflicts"), [
    ({"local": "timekeeper-local", "dev": "timekeeper-dev", "prod": "timekeeper-prod"}, []),
    ({"dev": "timekeeper", "prod": "timekeeper"}, [("dev", "prod")]),
    ({"dev": "timekeeper", "prod": "timekeeper-prod", "local": "timekeeper-local"},
     [("dev", "local"), ("dev", "prod")]),
    ({"prod": "timekeeper-prod", "prod-eu": "timekeeper-prod-eu"}, [("prod", "prod-eu")]),
])
def test_every_pair_of_stages_is_compared(prefixes: dict[str, str], conflicts: list[tuple[str, str]]) -> None:
    messages = stage.backup_prefix_conflicts(prefixes)
    assert len(messages) == len(conflicts)
    for (a, b), message in zip(conflicts, messages, strict=True):
        assert f"stages {a} and {b}" in message


@pytest.mark.parametrize(("environment", "prefix"), [
    ({"STAGE": "prod"}, "timekeeper-prod"),
    ({"STAGE": "dev", "BACKUP_NAME_PREFIX": ""}, "timekeeper-dev"),
    ({"STAGE": "prod", "BACKUP_NAME_PREFIX": "nightly-prod"}, "nightly-prod"),
    ({"STAGE": "my stage"}, "timekeeper-my_stage"),
])
def test_the_default_prefix_names_the_stage(environment: dict[str, str], prefix: str) -> None:
    assert Settings.from_env({**environment, "SENDER_EMAIL": "a@example.com"}).backup_name_prefix == prefix


@pytest.mark.parametrize("bad", ["has space", "x" * 101, "tk/prod", "ünï"])
def test_a_prefix_a_backup_name_cannot_hold_stops_the_import(bad: str) -> None:
    with pytest.raises(SettingsError, match="BACKUP_NAME_PREFIX"):
        Settings.from_env({"STAGE": "prod", "BACKUP_NAME_PREFIX": bad})


def test_the_committed_stages_have_prefixes_that_never_overlap() -> None:
    prefixes = stage.backup_prefixes(stage.load_config(ROOT))
    assert prefixes == {"local": "timekeeper-local", "dev": "timekeeper-dev", "prod": "timekeeper-prod"}
    assert stage.backup_prefix_conflicts(prefixes) == []


@pytest.fixture
def session() -> Iterator[boto3.session.Session]:
    with mock_aws():
        yield boto3.session.Session(region_name="us-east-1")


def test_deploy_refuses_two_stages_whose_backup_names_could_overlap_before_touching_the_account(
        tmp_path: Path, session: boto3.session.Session) -> None:
    config = stage.load_config(ROOT)
    config["stages"]["dev"]["environment_variables"]["BACKUP_NAME_PREFIX"] = "timekeeper"
    (tmp_path / ".chalice").mkdir()
    (tmp_path / ".chalice" / "config.json").write_text(json.dumps(config))
    ran: list[object] = []

    with pytest.raises(cli.DeployError, match=r"stages dev and prod .*'timekeeper' and 'timekeeper-prod'"):
        cli.deploy("prod", session, {}, tmp_path, lambda args, project: ran.append(args))

    assert ran == []
    assert session.client("dynamodb").list_tables()["TableNames"] == []
