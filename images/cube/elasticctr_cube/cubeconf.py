"""cube.conf: where the shards are (docs/architecture.md).

    {"dict_name": "ctr_embedding", "shard": 3,
     "nodes": [{"ip": "...", "port": 8027, "agent_port": 8001}, ...]}

Paddle Serving's own form, a JSON list of such objects, is accepted too (pick one by
`dict_name`). Shard i of a key k is k % shard and lives on nodes[i].
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SERVER_PORT = 8027
DEFAULT_AGENT_PORT = 8001


class CubeConfError(ValueError):
    """cube.conf is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class CubeNode:
    ip: str
    port: int = DEFAULT_SERVER_PORT
    agent_port: int = DEFAULT_AGENT_PORT

    @property
    def server_url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    @property
    def agent_url(self) -> str:
        return f"http://{self.ip}:{self.agent_port}"


@dataclass(frozen=True)
class CubeConf:
    dict_name: str
    shard: int
    nodes: tuple[CubeNode, ...]

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
            raise CubeConfError(f"{source}: expected a JSON object")
        try:
            shard = int(raw["shard"])
            nodes = tuple(
                CubeNode(
                    str(n["ip"]),
                    int(n.get("port", DEFAULT_SERVER_PORT)),
                    int(n.get("agent_port", DEFAULT_AGENT_PORT)),
                )
                for n in raw["nodes"]
            )
        except (KeyError, TypeError, ValueError) as err:
            raise CubeConfError(f"{source}: bad or missing field ({err!r})") from err
        if shard < 1 or len(nodes) != shard:
            raise CubeConfError(f"{source}: shard is {shard} but {len(nodes)} nodes are listed")
        return cls(str(raw.get("dict_name", "ctr_embedding")), shard, nodes)

    @classmethod
    def load(cls, path: str | Path, dict_name: str | None = None) -> CubeConf:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise CubeConfError(f"{path}: cannot read cube.conf ({err})") from err
        return cls.parse(raw, str(path), dict_name)

    def to_json(self) -> str:
        nodes = [{"ip": n.ip, "port": n.port, "agent_port": n.agent_port} for n in self.nodes]
        return json.dumps({"dict_name": self.dict_name, "shard": self.shard, "nodes": nodes})
