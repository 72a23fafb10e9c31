"""Every AWS call the app made during this test run is allowed by the policy its functions run under.

It runs last (marker ``last``), after the recorder in tests/policy_recorder.py
has seen the whole suite, so a permission the code needs but the policy
template lacks fails here, not in a deployed Lambda.
"""

from __future__ import annotations

import pytest

from chalicelib.settings import Settings
from deploy import iam
from tests.fixtures import ACCOUNT
from tests.policy_recorder import RECORDER, Call, Request, denied

REGION = "us-east-1"
# In the tests, task actions send to queues and topics the tests create; on a stage, to TASK_ACTION_TARGET_ARNS.
TEST_ACTION_TARGETS = [f"arn:aws:sqs:{REGION}:{ACCOUNT}:*", f"arn:aws:sns:{REGION}:{ACCOUNT}:*"]


def _report(problems: list[tuple[Call, Request]]) -> str:
    lines = [f"{request} needed by {call.service}.{call.operation} from {call.origin} in {call.test}"
             for call, request in problems[:30]]
    return "the IAM policy (deploy/iam.py) does not allow:\n" + "\n".join(lines)


@pytest.mark.last
def test_every_aws_call_the_app_made_is_allowed_by_its_policy() -> None:
    where = iam.Account("aws", REGION, ACCOUNT)
    default = Settings.from_env()

    def policy(call: Call) -> iam.Policy:
        return iam.app_policy(call.settings or default, where)

    def action_policy(call: Call) -> iam.Policy:
        return iam.app_policy(call.settings or default, where, TEST_ACTION_TARGETS)

    problems = denied(policy, RECORDER.calls, "aws", REGION, ACCOUNT, action_policy)
    assert not problems, _report(problems)
