"""Invoke a Chalice app's handlers as Lambda does, and print one line per invocation.

A handler is the object Chalice registered in ``app.handler_map`` under the
event source's name: it takes the raw event dict and a Lambda context, exactly
as the Lambda runtime calls ``app.<handler>`` on AWS.

An event the app dead-letters (chalicelib.deadletter logs each as "dead-lettered" with its source and
reason) is named on its invocation's line with the reason, and a hint when the user can fix it (an
item without the due attribute: "set DUE_ATTRIBUTE?"), so it is seen without reading the JSON logs.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chalice.app import Chalice
from chalice.local import LambdaContext

Clock = Callable[[], datetime]
Out = Callable[[str], None]


def utc_now() -> datetime:
    return datetime.now(UTC)


def print_line(text: str) -> None:
    print(text, flush=True)


@dataclass(frozen=True)
class Invocation:
    """What one invocation did: for the printed line, and for the event source to act on."""

    handler: str
    source: str
    records: int
    seconds: float
    result: Any = None
    error: BaseException | None = None
    timed_out: bool = False
    dead_letters: tuple[str, ...] = ()  # the reasons of what it dead-lettered

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out


class Reporter:
    """Prints the runtime's lines (thread-safe): invocations, notes, problems."""

    def __init__(self, out: Out = print_line, clock: Clock = utc_now) -> None:
        self._out = out
        self._clock = clock
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        stamp = self._clock().strftime("%H:%M:%S.%f")[:-3]
        with self._lock:
            self._out(f"{stamp}  {text}")

    def invocation(self, call: Invocation, outcome: str = "") -> None:
        if not outcome:
            outcome = "ok" if call.ok else f"FAILED {describe_error(call)}"
        unit = "record" if call.records == 1 else "records"
        self.line(f"{call.handler:<24} {call.source:<9} {call.records:>3} {unit:<7} "
                  f"{call.seconds * 1000:>7.0f} ms  {outcome}{dead_letter_note(call.dead_letters)}")


# Reasons a user can fix, and what to try (the first that matches).
HINTS = (
    (re.compile(r"^task source '[^']+': .*has no (\S+) \(due time\)"),
     r"give the item its \1, or fix the source's due_attribute in TASK_SOURCES?"),
    (re.compile(r"has no (\S+) \(due time\)"), "set DUE_ATTRIBUTE?"),
    (re.compile(r"TASK_ACTION_TARGET_ARNS"), "add the queue or topic to TASK_ACTION_TARGET_ARNS?"),
    (re.compile(r"no action and no valid 'email'"), "give the item an action, or an email attribute?"),
    (re.compile(r"\(field strategy\)"), "strategy is exact, interval or lazy (or set DEFAULT_STRATEGY)?"),
)
REASON_CHARS = 200


def hint(reason: str) -> str:
    for pattern, text in HINTS:
        found = pattern.search(reason)
        if found:
            return found.expand(text)
    return ""


def dead_letter_note(reasons: tuple[str, ...]) -> str:
    """``; dead-lettered N: <first reason> (<hint>)``, or nothing."""
    if not reasons:
        return ""
    first = reasons[0] if len(reasons[0]) <= REASON_CHARS else reasons[0][:REASON_CHARS - 3] + "..."
    fix = hint(reasons[0])
    note = f"; dead-lettered {len(reasons)}: {first}" + (f" ({fix})" if fix else "")
    others = len(set(reasons)) - 1
    return note + (f" and {others} other reason{'s' if others > 1 else ''} (see the JSON log)" if others else "")


@dataclass
class _Collecting:
    handler: str
    thread: int
    reasons: list[str] = field(default_factory=list)


class DeadLetterNotes(logging.Handler):
    """Collects the "dead-lettered" log records of the invocations running now, by handler: a record
    whose ``source`` names a handler (``backup-monitor`` is ``backup_monitor``, a task source's
    ``task_stream:<name>`` its own stream function ``source_<name>``) goes to that handler's
    invocation on the same thread, else to its latest one (a handler's own worker threads, such as the
    stream handler's, log from threads of their own)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self._running: list[_Collecting] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() != "dead-lettered":
            return
        handler = handler_of(str(getattr(record, "source", "")))
        with self._guard:
            candidates = [c for c in self._running if c.handler == handler]
            same_thread = [c for c in candidates if c.thread == threading.get_ident()]
            if candidates:
                (same_thread or candidates)[-1].reasons.append(str(getattr(record, "reason", "")))

    @contextmanager
    def collecting(self, handler: str) -> Iterator[list[str]]:
        running = _Collecting(handler, threading.get_ident())
        with self._guard:
            self._running.append(running)
        try:
            yield running.reasons
        finally:
            with self._guard:
                self._running.remove(running)


def handler_of(source: str) -> str:
    """The handler that logs dead letters of ``source`` (chalicelib's names): a task source's stream
    (chalicelib.tasks.stream: ``task_stream:<name>``) is its function ``source_<name>``
    (chalicelib.sources.TaskSource.function_name)."""
    stream, _, name = source.partition(":")
    if stream == "task_stream" and name:
        return f"source_{name}"
    return source.replace("-", "_")


NOTES = DeadLetterNotes()


def listen_for_dead_letters(logger_name: str) -> None:
    """Let NOTES see the named logger's records (the app's logger is named after the app); once."""
    logger = logging.getLogger(logger_name)
    if NOTES not in logger.handlers:
        logger.addHandler(NOTES)


def describe_error(call: Invocation) -> str:
    if call.timed_out:
        return "timed out"
    error = call.error
    return f"{type(error).__name__}: {error}" if error is not None else ""


class Invoker:
    """Calls the app's handlers by event-source name with a Lambda context; never raises."""

    def __init__(self, app: Chalice, reporter: Reporter, *, stage: str = "local",
                 timeout_seconds: int | Callable[[str], int] = 60, memory_size: int = 128) -> None:
        self.app = app
        self.reporter = reporter
        self.stage = stage
        self._timeout = timeout_seconds
        self.memory_size = memory_size
        listen_for_dead_letters(app.app_name)

    def timeout_seconds(self, handler: str) -> int:
        """The handler's Lambda timeout (config.json's lambda_timeout for it, else the default)."""
        return self._timeout(handler) if callable(self._timeout) else self._timeout

    def function_name(self, handler: str) -> str:
        """The Lambda function Chalice deploys for ``handler``: <app>-<stage>-<handler>."""
        return f"{self.app.app_name}-{self.stage}-{handler}"

    def handler_for_function(self, function: str) -> str | None:
        """The handler behind a Lambda function name or ARN (arn:aws:lambda:...:function:<name>[:alias])."""
        name = function.split(":function:", 1)[1].split(":", 1)[0] if ":function:" in function else function
        for handler in self.app.handler_map:
            if name in (handler, self.function_name(handler)):
                return handler
        return None

    def invoke(self, handler: str, source: str, event: Any, records: int = 1) -> Invocation:
        """Run one invocation; the caller reports it (it knows what the outcome meant)."""
        func = self.app.handler_map[handler]
        timeout = self.timeout_seconds(handler)
        context = LambdaContext(function_name=self.function_name(handler), memory_size=self.memory_size,
                                max_runtime_ms=timeout * 1000)
        started = time.monotonic()
        with NOTES.collecting(handler) as reasons:
            try:
                result = func(event, context)
            except Exception as exc:  # a Lambda invocation error: reported, never propagated
                seconds = time.monotonic() - started
                traceback.print_exception(exc, file=sys.stderr)
                return Invocation(handler, source, records, seconds, error=exc, dead_letters=tuple(reasons))
        seconds = time.monotonic() - started
        return Invocation(handler, source, records, seconds, result=result,
                          timed_out=seconds > timeout, dead_letters=tuple(reasons))
