"""A minimal Kubernetes API client (standard library only) for the node's own processes:
one user's client certificate from the cluster's PKI, JSON in and out."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


class Api:
    def __init__(self, server: str, pki: Path, user: str, timeout: float = 30.0) -> None:
        self.server = server
        self.timeout = timeout
        self._context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self._context.load_cert_chain(str(pki / f"{user}.crt"), str(pki / f"{user}.key"))

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One call; returns (HTTP status, JSON body). Connection errors raise OSError."""
        data = json.dumps(body).encode() if body is not None else None
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        req = urllib.request.Request(
            f"{self.server}{path}",
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._context) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw or b"{}")
            except ValueError:
                return e.code, {"message": raw.decode(errors="replace")}

    def get(self, path: str) -> dict[str, Any]:
        status, body = self.request("GET", path)
        if status != 200:
            raise RuntimeError(f"GET {path}: HTTP {status}: {body.get('message')}")
        return body
