"""Role and peers from the environment (docs/architecture.md, "Training").

In the cluster Volcano gives each pod its index within its task (`VC_TASK_INDEX`);
by hand, `PADDLE_TRAINER_ID` / `PADDLE_PSERVER_ID` say the same. Pserver endpoints are
host names (`<job>-pserver-<i>.<job>:30240`), so a pserver finds itself by index, never
by matching `POD_IP:PADDLE_PORT` against the list as Paddle's own role maker does.
Anything missing or inconsistent is an error naming the variable: Paddle would
otherwise fall back to a silent single-process run.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass

from elasticctr_common.contract import TrainerEnv


class RoleError(ValueError):
    """The training environment is missing or inconsistent; the message names the variable."""


@dataclass(frozen=True)
class Role:
    is_server: bool
    index: int  # trainer id or pserver index
    pserver_endpoints: list[str]
    trainers: int
    bind_host: str | None = None  # pserver: the address to listen on

    @property
    def name(self) -> str:
        return f"{'pserver' if self.is_server else 'trainer'}-{self.index}"

    @property
    def port(self) -> int:
        return int(self.pserver_endpoints[self.index].rsplit(":", 1)[1])


def _require(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise RoleError(f"{name} is not set")
    return value


def _int(name: str, text: str, minimum: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise RoleError(f"{name}={text!r} is not an integer") from None
    if value < minimum:
        raise RoleError(f"{name}={value} must be >= {minimum}")
    return value


def _index(env: Mapping[str, str], explicit: str, count: int, what: str) -> int:
    given = {n: env[n].strip() for n in (explicit, TrainerEnv.TASK_INDEX) if env.get(n, "").strip()}
    if not given:
        raise RoleError(f"neither {explicit} nor VC_TASK_INDEX is set: which {what} is this?")
    values = {n: _int(n, v) for n, v in given.items()}
    if len(set(values.values())) > 1:
        raise RoleError(f"{explicit} and VC_TASK_INDEX disagree: {values}")
    name, index = next(iter(values.items()))
    if index >= count:
        raise RoleError(f"{name}={index} but there are only {count} {what}s")
    return index


def parse_endpoints(text: str) -> list[str]:
    endpoints = [e.strip() for e in text.split(",") if e.strip()]
    if not endpoints:
        raise RoleError("PADDLE_PSERVERS_IP_PORT_LIST is empty")
    for endpoint in endpoints:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RoleError(f"PADDLE_PSERVERS_IP_PORT_LIST: {endpoint!r} is not host:port")
    if len(set(endpoints)) != len(endpoints):
        raise RoleError(f"PADDLE_PSERVERS_IP_PORT_LIST repeats an endpoint: {text}")
    return endpoints


def role_from_env(env: Mapping[str, str] | None = None) -> Role:
    env = os.environ if env is None else env
    training_role = _require(env, TrainerEnv.ROLE)
    if training_role not in ("PSERVER", "TRAINER"):
        raise RoleError(f"TRAINING_ROLE={training_role!r}: expected PSERVER or TRAINER")
    endpoints = parse_endpoints(_require(env, TrainerEnv.PSERVERS))
    trainers = _int(TrainerEnv.TRAINERS_NUM, _require(env, TrainerEnv.TRAINERS_NUM), minimum=1)
    if training_role == "TRAINER":
        index = _index(env, TrainerEnv.TRAINER_ID, trainers, "trainer")
        return Role(False, index, endpoints, trainers)
    index = _index(env, TrainerEnv.PSERVER_ID, len(endpoints), "pserver")
    own_port = endpoints[index].rsplit(":", 1)[1]
    port = env.get(TrainerEnv.PSERVER_PORT, "").strip()
    if port and port != own_port:
        raise RoleError(
            f"PADDLE_PORT={port} but this pserver's entry in PADDLE_PSERVERS_IP_PORT_LIST "
            f"is {endpoints[index]}"
        )
    bind_host = env.get(TrainerEnv.POD_IP, "").strip() or None
    return Role(True, index, endpoints, trainers, bind_host=bind_host)


def wait_for_pservers(endpoints: list[str], timeout: float, poll_seconds: float = 1.0) -> None:
    """Until every pserver `host:port` accepts a connection. A trainer's client connects
    once, at `init_worker`: a pserver still starting (its host name not yet in DNS, its
    port not yet open) would fail the trainer, and Volcano restart the whole Job."""
    deadline = time.monotonic() + timeout
    waiting = list(endpoints)
    while waiting:
        host, port = waiting[0].rsplit(":", 1)
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            waiting.pop(0)
            continue
        except OSError as err:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"pservers {', '.join(waiting)} not reachable after {timeout:.0f}s ({err})"
                ) from None
        time.sleep(poll_seconds)
