"""The functional tests' API client checks every exchange against the OpenAPI document (openapi_support)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chalice.test import Client

import app as app_module
from chalicelib.aws import Deps
from tests.functional.openapi_support import CheckedClient


@pytest.fixture
def client(deps: Deps) -> Iterator[Client]:
    with CheckedClient(app_module.app) as test_client:
        yield test_client
