"""JSON over HTTP for the client's commands, each failure a CliError of one line that names
the service, its URL and what to do."""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from .endpoints import TOKEN_ENV, unreachable_hint
from .errors import (
    CliError,
    CredentialsError,
    RefusedError,
    UnreachableError,
    UsageError,
    one_line,
)

DETAIL_CHARS = 300  # of an error body quoted back
# What to do when a service refuses the request's credentials, by service.
AUTH_HINTS = {
    "serving": "pass serving's token with --token or $" + TOKEN_ENV
    + " (the stack output serving_token)",
}  # fmt: skip


@dataclass(frozen=True)
class Retry:
    """Bounded retries with exponential backoff, for what a moment later may answer: a
    connection refused or reset (a pod being replaced, a port-forward reconnecting) and 502,
    503, 504 (a gateway, or serving without cube for a moment). Never a 4xx, nor a request
    that timed out (the service is slow: asking again adds load)."""

    retries: int = 3
    first_delay: float = 0.5  # seconds; doubled each time, up to max_delay
    max_delay: float = 8.0

    def delay(self, attempt: int) -> float:
        """Seconds before attempt `attempt + 1` (attempt counts from 0); jittered so many
        clients do not come back at once."""
        return min(self.max_delay, self.first_delay * 2.0**attempt) * random.uniform(0.5, 1.0)


DEFAULT_RETRY = Retry()
RETRY_STATUS = (502, 503, 504)


class _Retryable(Exception):
    def __init__(self, error: CliError) -> None:
        self.error = error


def request_json(
    method: str,
    url: str,
    body: Any = None,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
    service: str = "serving",
    retry: Retry = DEFAULT_RETRY,
) -> Any:
    """The JSON answer of `method url` (with `body` as JSON), retried as `retry` says;
    a CliError otherwise."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{service} URL {url!r} is not an http:// or https:// URL")
    data = None if body is None else json.dumps(body).encode()
    attempts = retry.retries + 1
    for attempt in range(attempts):
        note = f"; {attempt + 1} attempts" if attempt else ""
        try:
            return _once(method, url, data, timeout, headers, service, note)
        except _Retryable as failed:
            if attempt + 1 == attempts:
                raise failed.error from None
            time.sleep(retry.delay(attempt))
    raise AssertionError("unreachable")  # the loop returns or raises


def _once(method: str, url: str, data: bytes | None, timeout: float,
          headers: dict[str, str] | None, service: str, note: str) -> Any:  # fmt: skip
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
    except urllib.error.HTTPError as err:
        error = _http_error(service, url, err.code, err.read(), note)
        if err.code in RETRY_STATUS:
            raise _Retryable(error) from None
        raise error from None
    except OSError as err:  # URLError too: refused, reset, no such host, no route, timeout
        reason = getattr(err, "reason", err)
        if isinstance(reason, TimeoutError):
            raise UnreachableError(
                f"{service} at {url}: no answer within {timeout:g} s; pass a larger --timeout, "
                f"or see whether it is overloaded{unreachable_hint(url)}"
            ) from None
        error = UnreachableError(
            f"{service} at {url}: cannot connect ({_reason(err)}{note}); is it running and the "
            f"URL right?{unreachable_hint(url)}"
        )
        if isinstance(reason, ConnectionError):  # refused, reset, aborted; not a bad host name
            raise _Retryable(error) from None
        raise error from None
    except http.client.HTTPException as err:  # a connection closed mid-answer, a bad status line
        raise _Retryable(
            UnreachableError(f"{service} at {url}: the answer broke off ({err!r}{note})")
        ) from None
    try:
        return json.loads(text)
    except ValueError:
        raise RefusedError(
            f"{service} at {url} answered with something that is not JSON: "
            f"{_quoted(text)}; is the URL {service}'s?"
        ) from None


def _http_error(service: str, url: str, code: int, body: bytes, note: str = "") -> CliError:
    detail = body.decode(errors="replace")
    with contextlib.suppress(ValueError, AttributeError):
        answer = json.loads(detail)
        detail = str(
            answer.get("err_msg") or answer.get("error") or answer.get("message") or detail
        )
    detail = _quoted(detail.encode())
    if code in (401, 403):
        hint = AUTH_HINTS.get(service, "check the credentials")
        return CredentialsError(f"{service} answered {code} at {url} ({detail}): {hint}")
    attempts = f" ({note.removeprefix('; ')})" if note else ""
    return RefusedError(f"{service} answered {code} at {url}{attempts}: {detail}")


def _reason(err: OSError) -> str:
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return f"no such host: {reason.strerror}"
    return one_line(getattr(reason, "strerror", None) or str(reason))


def _quoted(body: bytes) -> str:
    text = one_line(body.decode(errors="replace"))
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS] + "..."
