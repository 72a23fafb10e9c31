"""Bounded retries of the backup pipeline's AWS calls on transient errors, with backoff on the injected sleep.

botocore's retry mode already retries throttling and 5xx answers a few times;
what reaches the app after that (an outage of seconds, a lost response) is
retried here a few more times before the error is raised, except a rate limit:
botocore's retries are the only ones a throttled call gets (quotas.py paces
the calls so that it is rare), so it is made at most AWS_MAX_ATTEMPTS times. A retried write may
have been applied already: conditional writes recognise their own earlier
attempt (store.py), and CreateBackup, which botocore does not retry,
looks for its backup by name first (trigger.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.aws import Sleep
from chalicelib.throttle import error_code, is_rate_limit, retry

T = TypeVar("T")

ATTEMPTS = 5          # in all, the first one included
BASE_SECONDS = 0.5    # backoff between attempts: from 0.25 s up to 0.5, 1, 2, 4 s
CAP_SECONDS = 5.0

_TRANSIENT_CODES = frozenset({
    "InternalServerError", "InternalFailure", "InternalError", "ServiceUnavailable", "ServiceUnavailableException",
    "RequestTimeout", "RequestTimeoutException", "TransactionInProgressException",
})


def is_transient(exc: Exception) -> bool:
    """An error worth trying again: a 5xx, a connection or read failure; not a rate limit, which
    botocore's retry mode has retried already."""
    if isinstance(exc, BotoCoreError):
        return True
    if not isinstance(exc, ClientError) or is_rate_limit(exc):
        return False
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return error_code(exc) in _TRANSIENT_CODES or status >= 500


def retry_transient(call: Callable[[], T], sleep: Sleep, attempts: int = ATTEMPTS,
                    rng: random.Random | None = None) -> T:
    """``call()``, tried up to ``attempts`` times while it fails with a transient error."""
    return retry(call, sleep, retryable=is_transient, attempts=attempts, base=BASE_SECONDS, cap=CAP_SECONDS,
                 floor=BASE_SECONDS / 2, rng=rng)
