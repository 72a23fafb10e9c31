"""The functional tests' API client checks every exchange against the OpenAPI document (openapi_support); the
webhook tests' receiver and stage."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from chalice.test import Client

import app as app_module
from chalicelib.aws import Deps
from tests import moto_fast
from tests.functional.openapi_support import CheckedClient
from tests.functional.task_support import hooks, receiver

__all__ = ["hooks", "receiver"]  # the webhook tests' receiver and stage (task_support), fixtures of every module here


@pytest.fixture
def client(deps: Deps) -> Iterator[Client]:
    with CheckedClient(app_module.app) as test_client:
        yield test_client


class _ErrorLines(logging.Handler):
    """The app's log lines at ERROR or above, as they are emitted."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def error_lines() -> Iterator[list[str]]:
    """The app's log lines at ERROR or above while the test runs (a bad input must not log one)."""
    handler = _ErrorLines()
    app_logger = logging.getLogger("timekeeper")
    app_logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        app_logger.removeHandler(handler)


@pytest.fixture(scope="module")
def attribute_values_fast() -> Iterator[None]:
    """tests/moto_fast.py's speed-only shortcuts for a whole module (``pytestmark = pytest.mark.usefixtures(...)``):
    DynamoDB attribute values serialized by moto and validated by botocore with the same results, in less time."""
    with moto_fast.attribute_values_fast():
        yield
