"""The lambda action: an asynchronous invocation of a Lambda function."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from chalicelib.tasks.actions.checks import Check, JsonObject, json_text, lambda_function_arn
from chalicelib.tasks.actions.registry import REFUSED, Action, Attempt, permanent_on

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


class LambdaAction(Action):
    """An asynchronous invocation (``InvocationType=Event``) of a Lambda function, version or alias.  Lambda
    queues the event and answers 202; the function receives the envelope ``{"task_id", "due", "attempt",
    "payload"}``.  At least once: a redelivery or a lost answer may invoke it again with the same task_id and
    due (docs/tasks.md)."""

    type = "lambda"
    fields: ClassVar[Mapping[str, Check]] = {"function_arn": lambda_function_arn, "payload": JsonObject()}
    refused: ClassVar[frozenset[str]] = REFUSED | {
        "ResourceNotFoundException", "RequestTooLargeException", "InvalidRequestContentException",
        "KMSAccessDeniedException", "KMSDisabledException", "KMSNotFoundException", "EFSMountFailureException"}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        envelope = {"task_id": attempt.task_id, "due": attempt.due_text, "attempt": attempt.number,
                    "payload": spec["payload"]}
        with permanent_on(self.refused):
            response = deps.clients.lambda_.invoke(FunctionName=spec["function_arn"], InvocationType="Event",
                                                   Payload=json_text(envelope).encode())
        if response.get("StatusCode") != 202:
            raise RuntimeError(f"Lambda answered {response.get('StatusCode')} to an asynchronous invocation, not 202")
        return {"type": self.type, "request_id": response.get("ResponseMetadata", {}).get("RequestId", "")}
