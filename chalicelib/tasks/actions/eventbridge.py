"""The eventbridge action: an event put on an EventBridge bus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from chalicelib.tasks.actions.checks import Check, JsonObject, event_bus_arn, event_source, event_text, json_text
from chalicelib.tasks.actions.registry import REFUSED, Action, Attempt, PermanentActionError, permanent_on

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


class EventRefused(PermanentActionError):
    """PutEvents took the call but refused the entry with an error code no retry can change."""


class EventBridgeAction(Action):
    """An event put on an EventBridge bus: ``source``, ``detail_type`` and the JSON object ``detail``.  The
    call succeeds even when its entry fails: an entry with an ErrorCode is a failure, retried when the code is
    transient (throttling, an internal failure), else permanent."""

    type = "eventbridge"
    fields: ClassVar[Mapping[str, Check]] = {"event_bus_arn": event_bus_arn, "source": event_source,
                                             "detail_type": event_text, "detail": JsonObject()}
    refused: ClassVar[frozenset[str]] = REFUSED | {"ResourceNotFoundException"}
    transient_entry_errors: ClassVar[frozenset[str]] = frozenset({
        "InternalFailure", "InternalException", "ThrottlingException", "ServiceUnavailable"})

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        entry = {"EventBusName": spec["event_bus_arn"], "Source": spec["source"], "DetailType": spec["detail_type"],
                 "Detail": json_text(spec["detail"])}
        with permanent_on(self.refused):
            response = deps.clients.events.put_events(Entries=[entry])  # type: ignore[list-item]
        [result] = response.get("Entries") or [{}]
        code = result.get("ErrorCode")
        if response.get("FailedEntryCount", 0) or code or not result.get("EventId"):
            problem = f"PutEvents refused the entry: {code or 'no EventId'}: {result.get('ErrorMessage', '')}"
            if code in self.transient_entry_errors:
                raise RuntimeError(problem)
            raise EventRefused(problem)
        return {"type": self.type, "event_id": result["EventId"]}
