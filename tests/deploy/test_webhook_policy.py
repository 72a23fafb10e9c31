"""task_executor may read exactly the webhook signing secrets TASK_WEBHOOK_SECRETS lists, by name."""

from __future__ import annotations

from chalicelib.settings import Settings
from deploy import iam
from tests.policy_recorder import Request, allowed

WHERE = iam.Account("aws", "eu-west-1", "123456789012")
SSM = "arn:aws:ssm:eu-west-1:123456789012:parameter/"
SM = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:"


def executor_policy(secrets: str) -> iam.Policy:
    return iam.function_policies(Settings.from_env({"TASK_WEBHOOK_SECRETS": secrets}), WHERE)["task_executor"]


def test_the_executor_reads_the_listed_webhook_secrets_and_no_other() -> None:
    policy = executor_policy("ssm:/tk/hook,secretsmanager:tk/partner")
    assert allowed(policy, Request("ssm:GetParameter", SSM + "tk/hook"))
    assert not allowed(policy, Request("ssm:GetParameter", SSM + "tk/hook2"))
    assert not allowed(policy, Request("ssm:GetParameter", SSM + "tk/other"))
    assert allowed(policy, Request("secretsmanager:GetSecretValue", SM + "tk/partner-AbC123"))
    assert not allowed(policy, Request("secretsmanager:GetSecretValue", SM + "tk/partner-extra-AbC123"))
    assert not allowed(policy, Request("secretsmanager:GetSecretValue", SM + "tk/other-AbC123"))


def test_without_webhook_secrets_the_executor_reads_none() -> None:
    actions = iam.actions_of(executor_policy(""))
    assert "ssm:GetParameter" not in actions and "secretsmanager:GetSecretValue" not in actions
