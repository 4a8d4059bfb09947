"""Ports for servers of one host: bindable, and never the same one twice in a process."""

from __future__ import annotations

import socket

import pytest
from elasticctr_common.ports import free_port, free_ports


def test_a_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_no_port_is_handed_out_twice():
    # Picked before anything binds them: the OS offers a released port again at once.
    ports = [free_port() for _ in range(300)] + free_ports(50)
    assert len(set(ports)) == len(ports)


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="count must be 0 or more, got -1"):
        free_ports(-1)
