"""The coverage check attributes each recorded call to the Lambda function that made it
(tests/policy_recorder.py ``attribute``) and checks it against that function's policy only."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from chalicelib.settings import Settings
from deploy import iam
from tests.policy_recorder import ROOT, Call, _app_function, attribute, denied, policy_for, report

APP = str(ROOT / "app.py")


def lib(path: str) -> str:
    return str(ROOT / "chalicelib" / path)


@pytest.mark.parametrize("stack, expected", [
    # A route, through respond()'s lambda in app.py: the API function.
    ([(lib("tasks/store.py"), "transact"), (lib("tasks/api.py"), "create"), (APP, "<lambda>"),
      (lib("web.py"), "respond"), (APP, "create_task")], ("api_handler", "app.py:create_task")),
    ([(lib("backups/trigger.py"), "start_run"), (APP, "backup_trigger")], ("backup_trigger", "app.py:backup_trigger")),
    ([(lib("aws.py"), "queue_url"), (APP, "task_executor")], ("task_executor", "app.py:task_executor")),
    # No handler on the stack: the outermost chalicelib module, the entry the caller went through.
    ([(lib("backups/monitor.py"), "send_poll_message"), (lib("backups/trigger.py"), "start_run"),
      (lib("backups/api.py"), "start")], ("api_handler", "chalicelib/backups/api.py")),
    ([(lib("tasks/store.py"), "put_image"), (lib("tasks/stream.py"), "run_group")],
     ("task_stream", "chalicelib/tasks/stream.py")),
    # Any module of the actions package (an action's own, the package's run_action) is the executor's.
    ([(lib("tasks/actions/sqs.py"), "run")], ("task_executor", "chalicelib/tasks/actions/sqs.py")),
    ([(lib("tasks/actions/lambda_.py"), "run"), (lib("tasks/actions/__init__.py"), "run_action")],
     ("task_executor", "chalicelib/tasks/actions/__init__.py")),
    # A shared module called directly: no single function (checked against the union).
    ([(lib("backups/store.py"), "get")], ("", "chalicelib/backups/store.py")),
])
def test_calls_are_attributed_to_the_function_that_runs_them(stack: list[tuple[str, str]],
                                                           expected: tuple[str, str]) -> None:
    assert attribute(stack) == expected


def test_a_call_is_checked_against_its_own_functions_policy_not_the_union() -> None:
    where, settings = iam.Account("aws", "us-east-1", "123456789012"), Settings.from_env()
    send = (("FromEmailAddress", settings.sender_email),)
    from_stream = Call("ses", "SendEmail", send, lib("tasks/stream.py"), "tests/x.py::test_y",
                       function="task_stream", via="app.py:task_stream")
    from_executor = Call("ses", "SendEmail", send, lib("tasks/actions/email.py"), "tests/x.py::test_y",
                         function="task_executor", via="app.py:task_executor")
    shared = Call("ses", "SendEmail", send, lib("alerts.py"), "tests/x.py::test_y", via="chalicelib/alerts.py")
    problems = denied(lambda call: policy_for(call, where, settings), [from_stream, from_executor, shared],
                      "aws", "us-east-1", "123456789012")
    assert [call for call, _ in problems] == [from_stream]
    text = report(problems)
    assert "ses:SendEmail" in text and "in function task_stream (attributed by app.py:task_stream)" in text
    assert "tests/x.py::test_y" in text


def test_a_task_sources_stream_function_is_named_by_the_source_its_closure_holds() -> None:
    # app.py's one ``def stream_of_source`` serves every source: its frame is named by the source it closes over.
    source = Settings.from_env({"TASK_SOURCES": '{"appointments": {"table": "appointments", "strategy": "exact", '
                                                '"due_attribute": "due"}}'}).task_sources[0]
    code = compile("def bind(source):\n    def stream_of_source(event):\n        source\n"
                   "        return _app_function(sys._getframe())\n    return stream_of_source\n", APP, "exec")
    scope: dict[str, Any] = {"_app_function": _app_function, "sys": sys}
    exec(code, scope)
    assert scope["bind"](source)(None) == "source_appointments"
