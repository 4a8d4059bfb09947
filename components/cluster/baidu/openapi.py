"""Baidu Cloud's OpenAPI over HTTP(S), every request signed with BCE auth v1 by
bce-python-sdk's signer (bce-python-sdk has no CCE client; its signer is the part we need).

Credentials come from the environment at call time, never from the program: the same
variables as Baidu's Terraform provider, BAIDUCLOUD_ACCESS_KEY and BAIDUCLOUD_SECRET_KEY.
Nothing here is pickled into the Pulumi state.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from baidubce import utils as bce_utils
from baidubce.auth import bce_v1_signer
from baidubce.auth.bce_credentials import BceCredentials

ACCESS_KEY_ENV = "BAIDUCLOUD_ACCESS_KEY"
SECRET_KEY_ENV = "BAIDUCLOUD_SECRET_KEY"
# Headers the signature covers (besides every x-bce-* header, which BCE always signs).
SIGNED_HEADERS = (b"content-type", b"host", b"x-bce-date")
SIGNATURE_SECONDS = 1800
REQUEST_SECONDS = 60
NOT_FOUND = 404

T = TypeVar("T")


class ApiError(Exception):
    """A request the API refused, with the API's own code and message."""

    def __init__(self, status: int, code: str, message: str, request_id: str, what: str) -> None:
        super().__init__(f"{what}: HTTP {status} {code}: {message} (requestId {request_id})")
        self.status = status
        self.code = code
        self.message = message


class TimeoutExpired(Exception):
    pass


def credentials_from_env() -> tuple[str, str]:
    access_key = os.environ.get(ACCESS_KEY_ENV, "")
    secret_key = os.environ.get(SECRET_KEY_ENV, "")
    if not access_key or not secret_key:
        raise RuntimeError(
            f"Baidu Cloud credentials missing: set {ACCESS_KEY_ENV} and {SECRET_KEY_ENV}"
        )
    return access_key, secret_key


@dataclass(frozen=True)
class OpenApi:
    """One service endpoint, e.g. https://cce.bj.baidubce.com."""

    endpoint: str

    def call(
        self,
        method: str,
        path: str,
        query: dict[str, str] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        """Send one signed request; return the JSON reply, or raise ApiError."""
        url = urllib.parse.urlsplit(self.endpoint)
        data = json.dumps(body).encode() if body is not None else b""
        headers = {
            b"host": url.netloc.encode(),
            b"content-type": b"application/json; charset=utf-8",
            b"x-bce-date": bce_utils.get_canonical_time(),
        }
        access_key, secret_key = credentials_from_env()
        params = {k.encode(): v.encode() for k, v in (query or {}).items()}
        canonical_path = bce_utils.normalize_string(path, False)
        headers[b"authorization"] = bce_v1_signer.sign(
            BceCredentials(access_key, secret_key),
            method.encode(),
            canonical_path,
            headers,
            params,
            expiration_in_seconds=SIGNATURE_SECONDS,
            headers_to_sign=list(SIGNED_HEADERS),
        )
        target = f"{url.scheme}://{url.netloc}{canonical_path.decode()}"
        if params:
            target += "?" + bce_utils.get_canonical_querystring(params, False).decode()
        request = urllib.request.Request(
            target,
            data=data if method in ("POST", "PUT") else None,
            method=method,
            headers={k.decode(): v.decode() for k, v in headers.items() if k != b"host"},
        )
        what = f"{method} {path}"
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as reply:
                text = reply.read().decode() or "{}"
        except urllib.error.HTTPError as err:
            raise _api_error(err, what) from None
        return dict(json.loads(text))

    def find(
        self, method: str, path: str, query: dict[str, str] | None = None
    ) -> dict[str, Any] | None:
        """`call`, but None when the API answers 404: the resource does not exist."""
        try:
            return self.call(method, path, query)
        except ApiError as err:
            if err.status == NOT_FOUND:
                return None
            raise


def _api_error(err: urllib.error.HTTPError, what: str) -> ApiError:
    text = err.read().decode(errors="replace")
    try:
        reply = json.loads(text)
    except ValueError:
        reply = {"message": text.strip() or err.reason}
    return ApiError(
        err.code,
        str(reply.get("code", "")),
        str(reply.get("message", "")),
        str(reply.get("requestId", reply.get("requestID", ""))),
        what,
    )


def wait_until(probe: Callable[[], T | None], timeout: float, interval: float, what: str) -> T:
    """Call `probe` until it returns a value (not None); raise TimeoutExpired after `timeout`
    seconds. `probe` raises to stop early (a failed state, an API error)."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutExpired(f"{what}: still not done after {timeout:g}s")
        time.sleep(interval)
