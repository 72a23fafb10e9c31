"""A recurring task's occurrences run once each, however often SQS delivers their due messages.

Every due message is delivered twice at once and once more 90 s later, after the next occurrence (a minute
on) was claimed: an SQS duplicate, or the redelivery of a message whose worker died having finished.  A lazy
task's message carries its own item image, so only the record's claimed due time can tell that an occurrence
is older than the one claimed since (docs/executor.md, step 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.aws import Deps
from tests.fixtures import Aws, FakeClock
from tests.functional.lambda_sim import LambdaSim
from tests.functional.source_support import SourceSim, create_table, load_app
from tests.functional.task_support import EMAIL_ACTION, emails_sent, get_task, post_task

DUPLICATES = (timedelta(0), timedelta(seconds=90))  # a copy at once, and a late one after the next occurrence
OCCURRENCES = 5


@pytest.mark.parametrize("strategy", ["lazy", "exact"])  # exact and interval read their item: one stands for both
def test_every_occurrence_of_a_recurring_task_runs_once_when_every_due_message_comes_three_times(
        aws: Aws, deps: Deps, clock: FakeClock, client: Client, strategy: str) -> None:
    start = clock.now
    created = post_task(client, {"id": "tick", "strategy": strategy, "recurrence": "rate(1 minute)",
                                 "run_at": (start + timedelta(minutes=1)).isoformat(), "action": EMAIL_ACTION})
    assert created.status_code == 201, created.body
    sim = LambdaSim(deps, client, clock, due_duplicates=DUPLICATES)
    # The last occurrence counted is due at +5 min; its late copy comes at +6.5 min, after the next was claimed.
    sim.run(until=lambda: False, limit=timedelta(minutes=OCCURRENCES + 1, seconds=50))
    due_in_window = OCCURRENCES + 1  # +1 .. +6 min
    assert len(emails_sent()) == due_in_window
    shown = get_task(client, "tick")
    assert (shown["status"], shown["attempts"]) == ("PENDING", 1)
    assert sim.queue(deps.settings.due_queue).dead == []


@pytest.fixture
def minutely_source(aws: Aws, deps: Deps, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> Iterator[SourceSim]:
    streams = {"minutely": create_table(deps, "minutely", [("email", "S")], ttl="expires_at")}
    sources = {"minutely": {"table": "minutely", "strategy": "lazy", "ttl_attribute": "expires_at",
                            "recurrence": "rate(1 minute)", "key": ["email"]}}
    module = load_app(monkeypatch, deps, sources, streams)
    with Client(module.app) as client:
        yield SourceSim(deps, client, clock, due_duplicates=DUPLICATES)
    module.container.use(None)


def test_every_occurrence_of_a_recurring_lazy_source_item_runs_once_when_every_due_message_comes_three_times(
        deps: Deps, clock: FakeClock, minutely_source: SourceSim) -> None:
    item: dict[str, Any] = {"email": {"S": "minutely@example.com"},
                            "expires_at": {"N": str(int((clock.now + timedelta(minutes=1)).timestamp()))}}
    deps.clients.dynamodb.put_item(TableName="minutely", Item=item)
    minutely_source.run(until=lambda: False, limit=timedelta(minutes=OCCURRENCES, seconds=50))
    assert len(emails_sent()) == OCCURRENCES
