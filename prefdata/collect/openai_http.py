"""The one place prefdata talks to OpenAI-compatible servers (vLLM, TGI, `transformers serve`,
hosted APIs): building the client, and retrying the failures that are worth retrying.

Retries are done here, explicitly, and the openai client's own retry is switched off
(`max_retries=0`), so the attempt count and the delays are ours to test and to report:

    retried     timeouts and connection errors, 429 (rate limit) and every 5xx
    not retried any other 4xx (bad request, auth, unknown model): retrying cannot fix them
    delay       backoff_base * 2**attempt, at least the server's Retry-After when it sends one,
                capped at backoff_max

The API key is read from an environment variable whose *name* is given; the key itself is never
stored on our objects, never put in a repr, and never logged.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, TypeVar

from prefdata.base.errors import UnusableInput

T = TypeVar("T")
NO_KEY = "no-key"  # local servers need no key, but the openai client refuses an empty one


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 4       # attempts after the first; 0 = a single attempt
    backoff_base: float = 0.5  # seconds before the first retry; doubles each retry
    backoff_max: float = 8.0   # no single wait is longer than this

    def __post_init__(self):
        if self.max_retries < 0 or self.backoff_base < 0 or self.backoff_max < self.backoff_base:
            raise ValueError(f"RetryPolicy: max_retries={self.max_retries} and backoff_base={self.backoff_base} must be "
                             f">= 0 and backoff_max={self.backoff_max} >= backoff_base")

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        wait = self.backoff_base * 2 ** attempt
        if retry_after is not None:
            wait = max(wait, retry_after)
        return min(wait, self.backoff_max)


class RetriesExhausted(Exception):
    """The last error of a call that failed on every attempt; `attempts` says how many were made."""

    def __init__(self, error: Exception, attempts: int):
        super().__init__(f"{describe(error)} (after {attempts} attempts)")
        self.error, self.attempts = error, attempts


def make_client(base_url: str, api_key_env: str | None = None, timeout: float = 60.0):
    import openai

    api_key = NO_KEY
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env, "")
        if not api_key:
            raise UnusableInput(f"the API key variable {api_key_env} is not set in the environment")
    return openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0)


def is_retryable(error: Exception) -> bool:
    import openai

    if isinstance(error, openai.APIConnectionError):  # APITimeoutError is a subclass
        return True
    if isinstance(error, openai.APIStatusError):
        return error.status_code == 429 or error.status_code >= 500
    return False


def describe(error: Exception) -> str:
    """A short, key-free description: the error type and HTTP status when there is one."""
    status = getattr(error, "status_code", None)
    return f"{type(error).__name__}" + (f" (HTTP {status})" if status is not None else "")


def _retry_after(error: Exception) -> float | None:
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:  # an HTTP date: fall back to our own backoff
        return None


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy, sleep: Callable[[float], None] = time.sleep) -> tuple[T, int]:
    """Run `fn` until it succeeds or fails in a way not worth retrying; return (result, attempts).

    Raises RetriesExhausted (wrapping the last error) when every attempt failed, and re-raises a
    non-retryable error at once as RetriesExhausted too, so callers handle one exception type.
    """
    for attempt in range(policy.max_retries + 1):
        try:
            return fn(), attempt + 1
        except Exception as error:  # noqa: BLE001 - classified just below
            if not is_retryable(error) or attempt == policy.max_retries:
                raise RetriesExhausted(error, attempt + 1) from error
            sleep(policy.delay(attempt, _retry_after(error)))
    raise AssertionError("unreachable")
