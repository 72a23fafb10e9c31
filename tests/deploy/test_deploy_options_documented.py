"""docs/configuration.md documents every deploy-time setting (read from the environment of ``make deploy``)
with its default, as tests/unit/test_settings.py checks for the app's settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deploy import event_sources, iam
from deploy.event_sources import Option

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
OPTIONS = (*event_sources.OPTIONS, *iam.OPTIONS)
# An empty default is shown as "(none)", or as what it falls back to.
FALLBACKS = {"STREAM_ON_FAILURE_QUEUE": "`TASK_DLQ`"}


def page_rows() -> dict[str, str]:
    """The default column of the page's "| `NAME` | default | meaning |" rows, by name."""
    rows = re.findall(r"^\| `([A-Z_]+)` \| ([^|]*) \|", PAGE.read_text(), flags=re.MULTILINE)
    return {name: default.strip() for name, default in rows}


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_the_configuration_page_documents_the_deploy_time_setting_with_its_default(option: Option) -> None:
    rows = page_rows()
    assert option.name in rows, f"docs/configuration.md has no row | `{option.name}` | default | meaning |"
    expected = f"`{option.default}`" if option.default else FALLBACKS.get(option.name, "(none)")
    assert rows[option.name].startswith(expected), (option.name, rows[option.name], expected)
