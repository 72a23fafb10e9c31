"""The webhook action: a signed HTTPS request to an allow-listed origin (chalicelib/tasks/webhook.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from chalicelib.tasks import webhook
from chalicelib.tasks.actions.checks import Check, Choice, Flag, HeaderMap, json_body_text
from chalicelib.tasks.actions.registry import TARGET_DEDUPLICATES, Action, ActionRetryHint, Attempt, PermanentActionError

if TYPE_CHECKING:  # below the settings and the clients, which the settings' task sources would loop back to
    from chalicelib.tasks.action_deps import ActionDeps as Deps


class WebhookAction(Action):
    """A signed HTTPS request (POST by default; ``method``, extra ``headers``) of a JSON body to an allow-listed
    origin (chalicelib/tasks/webhook.py).  ``target_deduplicates``: true says the receiver drops a repeat of a
    ``webhook-id`` it has seen."""

    type = "webhook"
    fields: ClassVar[Mapping[str, Check]] = {"url": webhook.url_problem, "secret": webhook.secret_problem,
                                             "body": json_body_text, "method": Choice(webhook.METHODS),
                                             "headers": HeaderMap(), TARGET_DEDUPLICATES: Flag()}
    optional: ClassVar[frozenset[str]] = frozenset({"body"})

    def spec_problem(self, spec: Mapping[str, Any]) -> tuple[str, str] | None:
        """``body`` is required but for a GET, which sends none and refuses one."""
        method = str(spec.get("method", webhook.METHODS[0]))
        if method in webhook.BODILESS and "body" in spec:
            return "body", f"must be left out: a {method} sends no body"
        if method not in webhook.BODILESS and "body" not in spec:
            return "body", f"is required for a {method}: the JSON text to send"
        return None

    def run(self, deps: Deps, spec: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
        try:
            return webhook.post(deps, spec, attempt.key_id, attempt.due, attempt.seconds_left)
        except webhook.WebhookRefused as exc:
            raise PermanentActionError(str(exc)) from exc
        except webhook.WebhookFailed as exc:
            raise ActionRetryHint(str(exc), exc.retry_after) from exc
