"""Small JSON-over-HTTP helpers (standard library only) for the agent and the transfer; a
handler may also answer `Text` (the metrics exposition)."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

# (code, JSON-able body) from a handler given the request's JSON body (or {} for GET).
Handler = Callable[[dict[str, Any]], tuple[int, Any]]


@dataclass(frozen=True)
class Text:
    """An answer that is not JSON: its bytes and their Content-Type."""

    content_type: str
    data: bytes


class HttpCallError(Exception):
    """The peer did not answer (connection refused, timeout, not JSON)."""


class ApiError(Exception):
    """Raised by a handler to answer `code` with {"error": message}."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def call(method: str, url: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
    """(HTTP status, decoded JSON) of one request; HttpCallError if there is no answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            code, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        code, raw = err.code, err.read()
    except (OSError, ValueError) as err:
        raise HttpCallError(f"{method} {url}: {err}") from err
    try:
        return code, json.loads(raw) if raw else None
    except ValueError as err:
        raise HttpCallError(f"{method} {url}: answer is not JSON ({raw[:200]!r})") from err


class JsonServer(ThreadingHTTPServer):
    """A threaded server that counts the requests in flight, so that a stopping process
    can let them finish (`drain`)."""

    daemon_threads = True  # idle keep-alive connections must not hold the process

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self.in_flight = 0
        self.draining = False
        self._idle = threading.Condition()

    def request_started(self) -> None:
        with self._idle:
            self.in_flight += 1

    def request_done(self) -> None:
        with self._idle:
            self.in_flight -= 1
            self._idle.notify_all()

    def drain(self, timeout: float) -> bool:
        """Stop accepting (the port refuses from now on), close keep-alive connections
        after their next answer, and wait up to `timeout` s for the requests in flight;
        True if none is left."""
        self.draining = True
        self.shutdown()
        self.server_close()
        with self._idle:
            return self._idle.wait_for(lambda: self.in_flight == 0, timeout)


def drain_all(servers: list[JsonServer], timeout: float) -> bool:
    """`drain` every server, all within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    return all([s.drain(max(0.0, deadline - time.monotonic())) for s in servers])


def serve(host: str, port: int, routes: dict[tuple[str, str], Handler]) -> JsonServer:
    """Start a threaded JSON server in a daemon thread; `routes` maps (method, path)."""

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server: JsonServer

        def _dispatch(self, method: str) -> None:
            self.server.request_started()
            try:
                self._answer(method)
            finally:
                self.server.request_done()

        def _answer(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            handler = routes.get((method, path))
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if handler is None:
                if any(p == path for _, p in routes):
                    return self._send(405, {"error": f"{method} is not allowed on {path}"})
                return self._send(404, {"error": f"no such endpoint {method} {path}"})
            try:
                request = json.loads(raw) if raw else {}
                if not isinstance(request, dict):
                    raise ApiError(400, "body must be a JSON object")
                code, body = handler(request)
            except ValueError as err:
                code, body = 400, {"error": f"bad request: {err}"}
            except ApiError as err:
                code, body = err.code, {"error": str(err)}
            except Exception as err:  # a handler bug must not kill the server
                log.exception("%s %s failed", method, path)
                code, body = 500, {"error": f"{type(err).__name__}: {err}"}
            self._send(code, body)

        def _send(self, code: int, body: Any) -> None:
            if isinstance(body, Text):
                data, kind = body.data, body.content_type
            else:
                data, kind = json.dumps(body).encode(), "application/json"
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            if self.server.draining:  # the client reconnects, to a server that is staying
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._dispatch("GET")

        def do_POST(self) -> None:
            self._dispatch("POST")

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.client_address[0], *args)

    server = JsonServer((host, port), _Handler)
    threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
    return server
