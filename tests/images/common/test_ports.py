"""Ports for servers of one host: bindable, never the same one twice in a process, and
outside the range the kernel hands out to outgoing connections by itself."""

from __future__ import annotations

import socket
from pathlib import Path

import elasticctr_common.ports as port_picker
import pytest
from elasticctr_common.ports import (
    EPHEMERAL_RANGE,
    MIN_POOL,
    free_port,
    free_ports,
    pool,
    port_was_taken,
)


def test_a_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_no_port_is_handed_out_twice():
    ports = [free_port() for _ in range(300)] + free_ports(50)
    assert len(set(ports)) == len(ports)


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="count must be 0 or more, got -1"):
        free_ports(-1)


@pytest.mark.skipif(not EPHEMERAL_RANGE.exists(), reason="no /proc port range (not Linux)")
def test_ports_are_above_the_range_outgoing_connections_take_ports_from():
    _low, high = (int(part) for part in EPHEMERAL_RANGE.read_text().split())
    if 65535 - high < MIN_POOL:
        pytest.skip(f"this host's ephemeral range ends at {high}: no room above it")
    ports = free_ports(20)
    assert all(high < port <= 65535 for port in ports), (high, ports)


def test_a_port_bound_elsewhere_is_not_handed_out(tmp_path: Path, monkeypatch):
    # A pool of 16 ports, all but one held by "another process": that one comes out.
    monkeypatch.setattr(port_picker, "MIN_POOL", 16)
    monkeypatch.setattr(port_picker, "_HANDED_OUT", set())  # earlier tests' picks may be in it
    range_file = tmp_path / "range"
    range_file.write_text("1024\t65519\n")
    candidates = pool(range_file)
    assert candidates is not None and len(candidates) == 16
    held, left = [], None
    try:
        for port in candidates:
            sock = socket.socket()
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # taken on this host already
                sock.close()
                continue
            if left is None:
                left = port
                sock.close()
                continue
            held.append(sock)
        assert left is not None
        assert free_ports(1, range_file) == [left]
        # Nothing left above the range: the kernel's choice, still a free port.
        (fallback,) = free_ports(1, range_file)
        assert fallback not in candidates
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", fallback))
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize(
    "text", ["", "garbage", "1024 65535", "32768 65000"], ids=["empty", "garbage", "all", "small"]
)
def test_no_usable_range_falls_back_to_the_kernel(tmp_path: Path, text: str):
    range_file = tmp_path / "range"
    range_file.write_text(text)
    assert pool(range_file) is None
    (port,) = free_ports(1, range_file)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_an_unreadable_range_falls_back_to_the_kernel(tmp_path: Path):
    assert pool(tmp_path / "absent") is None


def test_a_lost_port_is_told_from_other_failures():
    assert port_was_taken("listen tcp 127.0.0.1:2380: bind: address already in use")
    assert port_was_taken("java.net.BindException: Address already in use")
    assert not port_was_taken("etcd exited with code 1: no space left on device")
