"""Chalice's test Lambda client with each function's configured time in its context (Chalice's gives 3 s)."""

from __future__ import annotations

from typing import Any

from chalice.local import LambdaContext
from chalice.test import Client, InvokeResponse, TestLambdaClient


class ConfiguredLambdaClient(TestLambdaClient):
    """Chalice's test Lambda client, but an invocation's context has the time the function is configured with
    (``lambda_timeout``: the executor's 90 s) where Chalice's gives every function 3 s: the executor bounds a
    webhook's call by it (chalicelib/tasks/webhook.py ``call_budget``)."""

    @classmethod
    def of(cls, client: Client) -> ConfiguredLambdaClient:
        return cls(client._app, client._chalice_config)

    def invoke(self, function_name: str, payload: Any | None = None) -> InvokeResponse:
        scoped = self._config.scope(self._config.chalice_stage, function_name)
        context = LambdaContext(function_name, memory_size=scoped.lambda_memory_size,
                                max_runtime_ms=scoped.lambda_timeout * 1000)
        with self._patched_env_vars(scoped.environment_variables):
            return InvokeResponse(payload=self._app.handler_map[function_name](payload or {}, context))
