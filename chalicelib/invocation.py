"""What every invocation of every function shares (one Chalice middleware for all event types).

While the handler runs, every log line carries the Lambda request id (Powertools'
``inject_lambda_context`` key ``function_request_id``; Chalice's handlers take one
event argument, so the key is appended here rather than by that decorator); not the
function's name, which its log group gives (ingested logs are billed by the byte).  When it returns or raises, the
metrics it recorded are flushed: once per invocation, a log line per EMF
document, never raising (chalicelib/metrics.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.aws import Clock, Deps
from chalicelib.log import logger

REQUEST_ID = "function_request_id"

Middleware = Callable[[Any, Callable[[Any], Any]], Any]


def lambda_context_keys(event: Any) -> dict[str, str]:
    """The log keys of the invocation ``event`` (a Chalice event, or a Request for a route) came with."""
    context = getattr(event, "context", None)
    if context is None or isinstance(context, dict):  # a Request's ``context`` is API Gateway's request context
        context = getattr(event, "lambda_context", None)
    keys = {REQUEST_ID: getattr(context, "aws_request_id", None)}
    return {k: str(v) for k, v in keys.items() if v}


def seconds_left(event: Any, clock: Clock) -> Callable[[], float] | None:
    """The seconds left in the invocation ``event`` came with: Lambda's ``context.get_remaining_time_in_millis``
    when the handler starts, less the time ``clock`` (the injected one) has moved since; None when the event
    has no Lambda context."""
    remaining = getattr(getattr(event, "context", None), "get_remaining_time_in_millis", None)
    if not callable(remaining):
        return None
    allowance, started = float(remaining()) / 1000.0, clock()
    return lambda: allowance - (clock() - started).total_seconds()


def observed(deps: Callable[[], Deps]) -> Middleware:
    """The middleware: request-id log keys around the handler, the metrics flushed after it."""

    def observe(event: Any, get_response: Callable[[Any], Any]) -> Any:
        keys = lambda_context_keys(event)
        # For the whole process (a handler's worker threads log too: one invocation at a time in Lambda), and
        # for this thread, where they win: the offline runtime runs invocations side by side in threads.
        logger.append_keys(**keys)
        logger.thread_safe_append_keys(**keys)
        try:
            return get_response(event)
        finally:
            try:
                deps().metrics.flush({"request_id": keys[REQUEST_ID]} if REQUEST_ID in keys else None)
            except Exception:  # the bundle could not be built: the handler has said why already
                logger.warning("metrics not flushed", exc_info=True)
            logger.thread_safe_remove_keys(keys)
            logger.remove_keys(keys)

    return observe
