"""Free TCP ports on 127.0.0.1 for servers started on one host: the trainer's local mode,
the demo, the local control plane, benchmarks and tests.

Ports are picked before the servers bind them, and Linux offers a just-released port again
at once; two servers of one run would then be given the same port. So the ports of one
call are held open together, and a port is never handed out twice in a process.
"""

from __future__ import annotations

import socket

_HANDED_OUT: set[int] = set()


def free_ports(count: int) -> list[int]:
    """`count` different ports, free a moment ago, none handed out before in this process."""
    if count < 0:
        raise ValueError(f"free_ports: count must be 0 or more, got {count}")
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)  # kept bound until the end, so the OS cannot offer it again
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def free_port() -> int:
    """One port, as free_ports(1)."""
    return free_ports(1)[0]
