"""JSON over HTTP for the client's commands, each failure a CliError of one line that names
the service, its URL and what to do."""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.error
import urllib.request
from typing import Any

from .endpoints import TOKEN_ENV, unreachable_hint
from .errors import CredentialsError, RefusedError, UnreachableError, UsageError, one_line

DETAIL_CHARS = 300  # of an error body quoted back
# What to do when a service refuses the request's credentials, by service.
AUTH_HINTS = {
    "serving": "pass serving's token with --token or $" + TOKEN_ENV
    + " (the stack output serving_token)",
}  # fmt: skip


def request_json(
    method: str,
    url: str,
    body: Any = None,
    timeout: float = 30.0,
    headers: dict[str, str] | None = None,
    service: str = "serving",
) -> Any:
    """The JSON answer of `method url` (with `body` as JSON); a CliError otherwise."""
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{service} URL {url!r} is not an http:// or https:// URL")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read()
    except urllib.error.HTTPError as err:
        raise _http_error(service, url, err.code, err.read()) from None
    except OSError as err:  # URLError too: refused, reset, no such host, no route, timeout
        if isinstance(getattr(err, "reason", err), TimeoutError):
            raise UnreachableError(
                f"{service} at {url}: no answer within {timeout:g} s; pass a larger --timeout, "
                f"or see whether it is overloaded{unreachable_hint(url)}"
            ) from None
        raise UnreachableError(
            f"{service} at {url}: cannot connect ({_reason(err)}); is it running and the URL "
            f"right?{unreachable_hint(url)}"
        ) from None
    try:
        return json.loads(text)
    except ValueError:
        raise RefusedError(
            f"{service} at {url} answered with something that is not JSON: "
            f"{_quoted(text)}; is the URL {service}'s?"
        ) from None


def _http_error(service: str, url: str, code: int, body: bytes) -> Exception:
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
    return RefusedError(f"{service} answered {code} at {url}: {detail}")


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
