"""cube.conf: where the shards and their replicas are, in Paddle Serving's own form
(docs/cube.md): a JSON list of one dictionary per dict.

    [{"dict_name": "ctr_embedding", "shard": 3, "dup": 2, "timeout": 1000, "retry": 2,
      "backup_request": 100, "type": "ipport_list", "load_balancer": "rr",
      "max_keys": 100000,
      "nodes": [{"ip": "cube-0.ns.svc.cluster.local", "port": 8027, "agent_port": 8001,
                 "ipport_list": "list://cube-0-0.cube-headless...:8027,cube-0-1...:8027"},
                ...]}]

Shard i of a key k is k % shard and lives on nodes[i]. Paddle's C++ client (brpc) reads
`type` "ipport_list": one channel per shard over the replicas of `ipport_list`, balanced
by `load_balancer`, with `timeout` (ms), `retry` and `backup_request` (ms; 0: none).
Paddle's Python client reads `nodes[i].ip` / `port` only: the shard's one address (a
Service over its replicas). Type "ipport" has one replica per shard, at ip/port. Our
own fields (`agent_port`, `max_keys`) are ignored by Paddle's readers. The single-object
form of earlier releases is still read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

from ..contract import CUBE_AGENT_PORT, CUBE_SERVER_PORT

DEFAULT_SERVER_PORT = CUBE_SERVER_PORT
DEFAULT_AGENT_PORT = CUBE_AGENT_PORT
# Keys per request a cube-server takes (its --max-keys, set by the program from cube.conf's).
DEFAULT_MAX_KEYS = 100_000
DICT_NAME = "ctr_embedding"  # the one dict: the sparse embeddings
# brpc's names: round robin, random, locality-aware (the lowest recent latency).
LoadBalancer = Literal["rr", "random", "la"]
LOAD_BALANCERS: tuple[str, ...] = get_args(LoadBalancer)
TYPES = ("ipport", "ipport_list")


class CubeConfError(ValueError):
    """cube.conf is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class CubeNode:
    """One cube-server (and the cube-agent beside it)."""

    ip: str
    port: int = DEFAULT_SERVER_PORT
    agent_port: int = DEFAULT_AGENT_PORT

    @property
    def server_url(self) -> str:
        return f"http://{_host(self.ip)}:{self.port}"

    @property
    def agent_url(self) -> str:
        return f"http://{_host(self.ip)}:{self.agent_port}"


@dataclass(frozen=True)
class CubeConf:
    """One dict of cube.conf. The Pulumi program writes it (components/cube.py: `to_json`),
    cube-transfer and serving read it (`load`); its defaults are the stack's (infra/config.py
    takes them from here)."""

    dict_name: str
    shard: int
    nodes: tuple[CubeNode, ...]  # per shard: its one address (Paddle's Python client)
    replicas: tuple[tuple[CubeNode, ...], ...] = ()  # per shard: its servers; () = nodes
    timeout_ms: int = 1000  # one seek, retries and hedged requests included
    retry: int = 2  # further attempts per shard after a failure, on another replica
    backup_request_ms: int = 100  # ask another replica when one has not answered; 0: never
    load_balancer: LoadBalancer = "rr"
    max_keys: int = DEFAULT_MAX_KEYS

    def __post_init__(self) -> None:
        if not self.replicas:
            object.__setattr__(self, "replicas", tuple((n,) for n in self.nodes))

    @property
    def dup(self) -> int:
        return len(self.replicas[0]) if self.replicas else 1

    def servers(self) -> list[tuple[int, int, CubeNode]]:
        """(shard, replica, node) of every cube-server."""
        return [(s, r, n) for s, group in enumerate(self.replicas) for r, n in enumerate(group)]

    @classmethod
    def parse(
        cls, raw: object, source: str = "cube.conf", dict_name: str | None = None
    ) -> CubeConf:
        if isinstance(raw, list):
            matches = [d for d in raw if isinstance(d, dict) and d.get("dict_name") == dict_name]
            if dict_name is None and len(raw) == 1:
                matches = raw
            if len(matches) != 1:
                names = [d.get("dict_name") for d in raw if isinstance(d, dict)]
                raise CubeConfError(f"{source}: pick one dict_name of {names}, got {dict_name!r}")
            raw = matches[0]
        if not isinstance(raw, dict):
            raise CubeConfError(f"{source}: expected a JSON list of objects")
        try:
            return cls._parse(raw)
        except (KeyError, TypeError, ValueError) as err:
            raise CubeConfError(f"{source}: bad or missing field ({err!r})") from err

    @classmethod
    def _parse(cls, raw: dict[str, Any]) -> CubeConf:
        shard = int(raw["shard"])
        kind = str(raw.get("type", "ipport"))
        if kind not in TYPES:
            raise ValueError(f"type {kind!r} is not one of {TYPES}")
        balancer = str(raw.get("load_balancer", cls.load_balancer))
        if balancer not in LOAD_BALANCERS:
            raise ValueError(f"load_balancer {balancer!r} is not one of {LOAD_BALANCERS}")
        nodes, replicas = [], []
        for n in raw["nodes"]:
            agent_port = int(n.get("agent_port", DEFAULT_AGENT_PORT))
            own = None
            if "ip" in n or kind == "ipport":
                own = CubeNode(str(n["ip"]), int(n.get("port", DEFAULT_SERVER_PORT)), agent_port)
            if kind == "ipport_list":
                group = _ipport_list(str(n["ipport_list"]), agent_port)
            else:
                assert own is not None  # type ipport: "ip" was read above
                group = (own,)
            nodes.append(own or group[0])
            replicas.append(group)
        if shard < 1 or len(nodes) != shard:
            raise ValueError(f"shard is {shard} but {len(nodes)} nodes are listed")
        dup = int(raw.get("dup", len(replicas[0])))
        if any(len(group) != dup for group in replicas):
            counts = [len(group) for group in replicas]
            raise ValueError(f"dup is {dup} but the shards list {counts} replicas")
        conf = cls(
            str(raw.get("dict_name", DICT_NAME)),
            shard,
            tuple(nodes),
            tuple(replicas),
            timeout_ms=int(raw.get("timeout", cls.timeout_ms)),
            retry=int(raw.get("retry", cls.retry)),
            backup_request_ms=int(raw.get("backup_request", cls.backup_request_ms)),
            load_balancer=cast(LoadBalancer, balancer),  # one of LOAD_BALANCERS: checked
            max_keys=int(raw.get("max_keys", DEFAULT_MAX_KEYS)),
        )
        if conf.timeout_ms < 1 or conf.retry < 0 or conf.backup_request_ms < 0 or conf.max_keys < 1:
            raise ValueError("timeout and max_keys must be >= 1, retry and backup_request >= 0")
        return conf

    @classmethod
    def load(cls, path: str | Path, dict_name: str | None = None) -> CubeConf:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CubeConfError(f"{path}: cannot read cube.conf ({err})") from err
        return cls.parse(raw, str(path), dict_name)

    def to_dict(self) -> dict[str, Any]:
        """This dict's entry of cube.conf, in Paddle Serving's form."""
        nodes = []
        for node, group in zip(self.nodes, self.replicas, strict=True):
            listed = ",".join(f"{_host(n.ip)}:{n.port}" for n in group)
            nodes.append(
                {
                    "ip": node.ip,
                    "port": node.port,
                    "agent_port": node.agent_port,
                    "ipport_list": f"list://{listed}",
                }
            )
        return {
            "dict_name": self.dict_name,
            "shard": self.shard,
            "dup": self.dup,
            "timeout": self.timeout_ms,
            "retry": self.retry,
            "backup_request": self.backup_request_ms,
            "type": "ipport_list",
            "load_balancer": self.load_balancer,
            "max_keys": self.max_keys,
            "nodes": nodes,
        }

    def to_json(self) -> str:
        return json.dumps([self.to_dict()], indent=1)


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def _ipport_list(text: str, agent_port: int) -> tuple[CubeNode, ...]:
    """brpc's "list://host:port,host:port" naming service."""
    if not text.startswith("list://"):
        raise ValueError(f"ipport_list {text!r} does not start with list://")
    group = []
    for item in text.removeprefix("list://").split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host:
            raise ValueError(f"ipport_list entry {item!r} is not host:port")
        group.append(CubeNode(host.strip("[]"), int(port), agent_port))
    return tuple(group)
