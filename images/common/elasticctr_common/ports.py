"""Free TCP ports on 127.0.0.1 for servers started on one host: the trainer's local mode,
the demo, the local control plane, benchmarks and tests.

Ports are picked before the servers bind them, so a port must stay free from the pick to
the bind (seconds, for a JVM or etcd). The kernel hands ports out by itself from its
ephemeral range (`net.ipv4.ip_local_port_range`): to every outgoing connection and every
bind to port 0, of every process on the host. A port picked there can be taken in between
by any of them, and on a busy host one was (etcd's peer port, by a connection of another
test session). So ports come from above that range, where only explicit binds land, in a
random order (two processes picking at once rarely meet); where nothing is left above it,
from the kernel as before. The ports of one call are held open together, and a port is
never handed out twice in a process.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_HANDED_OUT: set[int] = set()
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Fewer ports than this above the ephemeral range: too few to pick at random from.
MIN_POOL = 1024
_random = random.SystemRandom()


def pool(range_file: Path = EPHEMERAL_RANGE) -> range | None:
    """The ports above the kernel's ephemeral range, or None if it cannot be read or
    leaves fewer than MIN_POOL."""
    try:
        _low, high = (int(part) for part in range_file.read_text().split())
    except (OSError, ValueError):
        return None
    ports = range(max(high + 1, 1024), 65536)
    return ports if len(ports) >= MIN_POOL else None


def _bound(port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    return sock


def free_ports(count: int, range_file: Path = EPHEMERAL_RANGE) -> list[int]:
    """`count` different ports, free a moment ago, none handed out before in this process,
    above the kernel's ephemeral range where it leaves room (module doc)."""
    if count < 0:
        raise ValueError(f"free_ports: count must be 0 or more, got {count}")
    held: list[socket.socket] = []  # kept bound until the end: no port twice in one call
    ports: list[int] = []
    try:
        candidates = pool(range_file)
        if candidates is not None:
            for port in _random.sample(candidates, len(candidates)):
                if len(ports) == count:
                    break
                if port in _HANDED_OUT or (sock := _bound(port)) is None:
                    continue
                held.append(sock)
                ports.append(port)
        while len(ports) < count:  # no pool, or all of it taken: the kernel's choice
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port not in _HANDED_OUT:
                ports.append(port)
        _HANDED_OUT.update(ports)
    finally:
        for sock in held:
            sock.close()
    return ports


def free_port() -> int:
    """One port, as free_ports(1)."""
    return free_ports(1)[0]


def port_was_taken(error_or_log: str) -> bool:
    """Whether a server's error or log says it could not bind its port: picked free, taken
    by another process before the server bound it (a start worth trying on new ports)."""
    return "address already in use" in error_or_log.lower()
