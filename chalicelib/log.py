"""Structured JSON logs (aws-lambda-powertools Logger), one logger for the app.

Python's logging raises ``KeyError`` when an ``extra`` key names an attribute
of ``logging.LogRecord`` (``created``, ``name``, ``msg``, ``module``, ...), and
only at a level that emits the line -- so a bad key hides until production's
INFO.  This logger renames such keys (``created`` -> ``created_``) instead, so
no log line can ever take a handler down; tests/unit/test_log.py also checks
every logging call in the code for them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from aws_lambda_powertools import Logger

RESERVED = frozenset(vars(logging.LogRecord("n", 0, "p", 0, "m", None, None))) | {"message", "asctime"}


def safe_extra(extra: Mapping[str, object] | None, kwargs: Mapping[str, object]) -> dict[str, object]:
    """``extra`` and keyword fields merged, with every key that would overwrite a LogRecord attribute renamed."""
    merged = {**(extra or {}), **kwargs}
    return {(f"{key}_" if key in RESERVED else key): value for key, value in merged.items()}


class SafeLogger(Logger):
    """Powertools' Logger whose ``extra`` keys can never collide with LogRecord's own attributes."""

    def debug(self, msg: object, *args: object, exc_info: logging._ExcInfoType | None = None, stack_info: bool = False,
              stacklevel: int = 2, extra: Mapping[str, object] | None = None, **kwargs: object) -> None:
        super().debug(msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel + 1,
                      extra=safe_extra(extra, kwargs))

    def info(self, msg: object, *args: object, exc_info: logging._ExcInfoType | None = None, stack_info: bool = False,
             stacklevel: int = 2, extra: Mapping[str, object] | None = None, **kwargs: object) -> None:
        super().info(msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel + 1,
                     extra=safe_extra(extra, kwargs))

    def warning(self, msg: object, *args: object, exc_info: logging._ExcInfoType | None = None, stack_info: bool = False,
                stacklevel: int = 2, extra: Mapping[str, object] | None = None, **kwargs: object) -> None:
        super().warning(msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel + 1,
                        extra=safe_extra(extra, kwargs))

    def error(self, msg: object, *args: object, exc_info: logging._ExcInfoType | None = None, stack_info: bool = False,
              stacklevel: int = 2, extra: Mapping[str, object] | None = None, **kwargs: object) -> None:
        super().error(msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel + 1,
                      extra=safe_extra(extra, kwargs))

    def exception(self, msg: object, *args: object, exc_info: logging._ExcInfoType = True, stack_info: bool = False,
                  stacklevel: int = 2, extra: Mapping[str, object] | None = None, **kwargs: object) -> None:
        super().exception(msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel + 1,
                          extra=safe_extra(extra, kwargs))

    def critical(self, msg: object, *args: object, exc_info: logging._ExcInfoType | None = None, stack_info: bool = False,
                 stacklevel: int = 2, extra: Mapping[str, object] | None = None, **kwargs: object) -> None:
        super().critical(msg, *args, exc_info=exc_info, stack_info=stack_info, stacklevel=stacklevel + 1,
                         extra=safe_extra(extra, kwargs))


logger = SafeLogger(service="timekeeper", level=os.environ.get("LOG_LEVEL", "INFO"))
# Every line is ingested and billed (CloudWatch Logs, per byte): a line carries what locates it in the app's life
# (the invocation, the function, the task or run, the outcome) and not Powertools' ``location`` (a source line:
# the message names it), ``service`` (one service; the log group names the function) nor ``timestamp`` (CloudWatch
# Logs stamps every event it ingests, ``@timestamp``; Lambda's log agent when the line is written).
logger.remove_keys(["location", "service", "timestamp"])


def line_fields(level: int, message: str, **fields: object) -> dict[str, object] | None:
    """The JSON fields the logger would write now for a line at ``level`` (the invocation's keys, this thread's,
    ``fields``), for a line another writer writes: the executor's line rides on an EMF document
    (chalicelib/metrics.py ``Metrics.carry``).  None when ``level`` is not logged."""
    if not logging.getLogger(logger.name).isEnabledFor(level):
        return None
    invocation = {k: v for k, v in logger.get_current_keys().items()
                  if v is not None and not (isinstance(v, str) and "%(" in v) and k not in ("level", "message")}
    return {"level": logging.getLevelName(level), "message": message, **invocation,
            **logger.thread_safe_get_current_keys(), **safe_extra(None, fields)}


@contextmanager
def about(**keys: str) -> Iterator[None]:
    """Every line this thread logs inside the block carries ``keys`` (the task or backup run it concerns), so
    one task's life can be followed across functions; empty values are left out."""
    present = {k: v for k, v in keys.items() if v}
    logger.thread_safe_append_keys(**present)
    try:
        yield
    finally:
        logger.thread_safe_remove_keys(present)


def worker_pool(max_workers: int, thread_name_prefix: str) -> ThreadPoolExecutor:
    """A pool of a handler's threads whose lines carry the keys of the thread that makes it (the invocation's
    request id and function name: chalicelib/invocation.py).  This thread's keys live in a ContextVar, which a
    new thread does not inherit; the process-wide keys are not enough where invocations run side by side in
    one process (the offline runtime), since the last invocation to start set them."""
    return ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix,
                              initializer=_take_keys, initargs=(logger.thread_safe_get_current_keys(),))


def _take_keys(keys: dict[str, object]) -> None:
    logger.thread_safe_append_keys(**keys)
