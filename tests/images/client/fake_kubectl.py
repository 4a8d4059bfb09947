"""A stand-in for `kubectl port-forward ... <local>:<remote>` that behaves as kubectl does
when its pod goes away: it forwards a few connections to $FAKE_BACKEND_PORT, then exits
("lost connection to pod"). Each run appends its local-port argument and PID to
$FAKE_RUNS; a run asking for a fixed local port fails at once while $FAKE_REFUSALS holds
a positive count (kubectl's "unable to listen"), one refusal per run."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from pathlib import Path


def pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for side in (source, sink):
            with contextlib.suppress(OSError):
                side.shutdown(socket.SHUT_RDWR)


def main() -> int:
    local, _, remote = sys.argv[-1].partition(":")
    runs = Path(os.environ["FAKE_RUNS"])
    with runs.open("a") as record:
        record.write(f"{sys.argv[-1]} {os.getpid()}\n")
    refusals = Path(os.environ["FAKE_REFUSALS"])
    left = int(refusals.read_text() or 0) if refusals.exists() else 0
    if local and left > 0:
        refusals.write_text(str(left - 1))
        print(f"unable to listen on port {local}: address already in use", file=sys.stderr)
        return 1
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", int(local or 0)))
    listener.listen()
    port = listener.getsockname()[1]
    print(f"Forwarding from 127.0.0.1:{port} -> {remote}", flush=True)
    backend = int(os.environ["FAKE_BACKEND_PORT"])
    handled = []
    for _ in range(int(os.environ["FAKE_CONNECTIONS_PER_RUN"])):
        conn, _ = listener.accept()
        print(f"Handling connection for {port}", flush=True)
        upstream = socket.create_connection(("127.0.0.1", backend))
        for a, b in ((conn, upstream), (upstream, conn)):
            thread = threading.Thread(target=pipe, args=(a, b))
            thread.start()
            handled.append(thread)
    listener.close()
    for thread in handled:
        thread.join()
    print("error: lost connection to pod", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
