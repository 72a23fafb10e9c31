"""The stepfunctions action: a StartExecution of a state machine, named once per execution."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from botocore.exceptions import ClientError

from chalicelib.tasks.actions.checks import Check, Flag, JsonObject, json_text, state_machine_arn
from chalicelib.tasks.actions.registry import REFUSED, TARGET_DEDUPLICATES, Action, Attempt, permanent_on

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


# Step Functions' execution names: 1-80 characters, and only these keep CloudWatch Logs happy.
EXECUTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")


def execution_name(task_id: str, due: datetime) -> str:
    """The one name of the execution of ``task_id`` due at ``due``: ``<task id>-<due, UTC, compact>`` when that
    is a valid name of at most 80 characters, else ``<task id made safe, cut>-<due>-<hash of both>``.  Two
    executions never share a name (the readable form ends in the due time, the hashed one in 32 hex digits), so
    Step Functions refuses a second start of the same one. Pure."""
    at = due.astimezone(UTC)
    stamp = at.strftime("%Y%m%dT%H%M%S") + (f"{at.microsecond // 1000:03d}" if at.microsecond else "") + "Z"
    readable = f"{task_id}-{stamp}"
    if EXECUTION_NAME.fullmatch(readable):
        return readable
    digest = hashlib.sha256(f"{task_id}\n{stamp}".encode()).hexdigest()[:32]
    prefix = re.sub(r"[^A-Za-z0-9_-]", "_", task_id)[:80 - len(stamp) - len(digest) - 2]
    return f"{prefix}-{stamp}-{digest}" if prefix else f"{stamp}-{digest}"


class StepFunctionsAction(Action):
    """A StartExecution of a state machine with the JSON object ``input``, named by ``execution_name`` from the
    task and its due time: a second start of the same execution (a redelivery, a lost answer) is refused by
    Step Functions with ExecutionAlreadyExists, which means done.  (Express state machines do not check names:
    for them it is at least once.)  ``target_deduplicates``: true says the state machine is a Standard workflow,
    which starts a name once (an open execution started again with the same input answers success, a closed one
    ExecutionAlreadyExists), so the executor may run it with one write; never set it for an Express one."""

    type = "stepfunctions"
    fields: ClassVar[Mapping[str, Check]] = {"state_machine_arn": state_machine_arn, "input": JsonObject(),
                                             TARGET_DEDUPLICATES: Flag()}
    refused: ClassVar[frozenset[str]] = REFUSED | {
        "StateMachineDoesNotExist", "StateMachineDeleting", "InvalidArn", "InvalidName", "InvalidExecutionInput",
        "KmsAccessDeniedException", "KmsInvalidStateException"}

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        name = execution_name(attempt.key_id, attempt.due)
        arn = spec["state_machine_arn"]
        try:
            with permanent_on(self.refused):
                response = deps.clients.stepfunctions.start_execution(
                    stateMachineArn=arn, name=name, input=json_text(spec["input"]))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ExecutionAlreadyExists":
                raise
            execution = arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"
            return {"type": self.type, "execution_arn": execution, "already_started": True}
        return {"type": self.type, "execution_arn": response["executionArn"]}
