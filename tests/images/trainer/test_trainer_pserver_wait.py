"""Trainers wait for every pserver to listen before connecting (a pserver still starting
would fail the trainer, and Volcano restart the whole Job)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from elasticctr_trainer.roles import wait_for_pservers


def test_waits_until_a_late_pserver_listens():
    late = socket.socket()
    late.bind(("127.0.0.1", 0))
    port = late.getsockname()[1]
    threading.Timer(0.5, late.listen).start()  # bound, not listening: refused until then
    started = time.monotonic()
    try:
        wait_for_pservers([f"127.0.0.1:{port}"], timeout=30, poll_seconds=0.1)
    finally:
        late.close()
    assert time.monotonic() - started >= 0.4


def test_names_the_pservers_it_gave_up_on():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        with pytest.raises(TimeoutError, match=rf"pservers 127.0.0.1:{port} not reachable"):
            wait_for_pservers([f"127.0.0.1:{port}"], timeout=0.3, poll_seconds=0.1)


def test_a_host_name_not_yet_in_dns_is_waited_for_too():
    with pytest.raises(TimeoutError, match=r"no-such-pserver\.invalid:30240"):
        wait_for_pservers(["no-such-pserver.invalid:30240"], timeout=0.2, poll_seconds=0.1)
