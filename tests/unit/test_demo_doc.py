"""docs/offline.md's `make demo` section shows what the demo prints and the flows it runs, both from the
demo's one declaration of its flows (local/demo.py's FLOWS)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chalicelib.tasks.webhook import IDEMPOTENCY_HEADER, idempotency_key
from local.client import Response
from local.demo import FLOWS, Demo, Step, demo_flows, sample_output, summary_lines, webhook_task
from local.webhook_receiver import Received

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


class OneVerifiedPost:
    """The demo's stage and API client, as the webhook flow sees them: the task is DONE at once and the
    receiver got one verified POST with the body the flow sent, under the key the executor sends."""

    def __init__(self, key: str) -> None:
        self.origin, self.key, self.received = "http://127.0.0.1:41853", key, list[Received]()
        self.webhook = self

    def post(self, path: str, body: dict[str, Any]) -> Response:
        self.received.append(Received("/demo", self.key, "1764157421", "v1,x", body["action"]["body"], True, False,
                                      200, "127.0.0.1", 0.0))
        return Response(201, {"id": "t"})

    def get(self, path: str) -> Response:
        return Response(200, {"status": "DONE"})


def test_the_webhook_flows_sample_line_is_the_line_the_flow_prints_with_the_key_the_executor_sends() -> None:
    [flow] = [f for f in FLOWS if f.name.endswith("webhook task")]
    key = idempotency_key("8c0e7d5a4f1b2c3d4e5f60718293a4b5", datetime(2026, 11, 26, 11, 43, 41, tzinfo=UTC))
    fake: Any = OneVerifiedPost(key)
    assert webhook_task(Demo(fake, fake), "tag") == flow.sample_detail
    assert f"{IDEMPOTENCY_HEADER} {key}" in flow.sample_detail
