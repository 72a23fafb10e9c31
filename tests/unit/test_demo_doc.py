"""docs/offline.md's `make demo` section shows what the demo prints and the flows it runs, both from the
demo's one declaration of its flows (local/demo.py's FLOWS)."""

from __future__ import annotations

import re
from pathlib import Path

from local.demo import FLOWS, Step, demo_flows, sample_output, summary_lines

OFFLINE = Path(__file__).resolve().parents[2] / "docs" / "offline.md"


def demo_section() -> str:
    match = re.search(r"^## `make demo`.*?(?=^## |\Z)", OFFLINE.read_text(), flags=re.MULTILINE | re.DOTALL)
    assert match, "docs/offline.md has no `make demo` section"
    return match.group(0)


def test_the_demo_runs_the_declared_flows() -> None:
    assert [name for name, _ in demo_flows()] == [flow.name for flow in FLOWS]


def test_the_pages_sample_output_is_what_the_demo_prints_for_its_flows() -> None:
    blocks = re.findall(r"^```\n(make demo: .*?)\n```$", demo_section(), flags=re.MULTILINE | re.DOTALL)
    assert blocks == [sample_output()]
    assert f"make demo: {len(FLOWS)} flows at once" in sample_output()


def test_the_pages_table_of_flows_lists_every_flow_and_what_must_happen() -> None:
    table = re.findall(r"^\| (?!Flow \||---)(.+?) \| (.+) \|$", demo_section(), flags=re.MULTILINE)
    assert table == [(flow.name.split(" ", 1)[1], flow.must) for flow in FLOWS]


def test_the_summary_table_has_a_row_per_step_and_the_verdict() -> None:
    lines = summary_lines([Step("b", True, "fine", 1.0), Step("a", False, "broke", 2.0)], 3.0)
    assert lines[3].startswith("a  FAILED") and lines[4].startswith("b  ok    ")
    assert lines[-1] == "\nSOME STEPS FAILED in 3.0 s"
