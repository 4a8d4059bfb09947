"""How Paddle Serving's own cube clients read cube.conf, re-implemented from their code
(PaddlePaddle/Serving, core/cube/cube-api: `python-api/demo.py` and `src/meta.cpp`), so
that tests check our cube.conf against both readers. Their code is not copied; the logic
is restated here.

- The Python client (`Meta` of demo.py) iterates the JSON list (a single object makes it
  iterate the object's keys and fail with `TypeError: string indices must be integers`),
  keys the dicts by `dict_name`, routes a key to shard `key % shard` and posts
  `{"keys": [...]}` to `http://<nodes[shard].ip>:<nodes[shard].port>/DictService/seek`,
  reading `values` in key order.
- The C++ client (`Meta::create_meta` of meta.cpp, brpc) needs a JSON array whose dicts
  have `dict_name` (string), `shard`, `dup`, `timeout`, `retry`, `backup_request` (ints)
  and `type` (string), with `load_balancer` optional (default "rr"); for type
  "ipport_list" each node has `ipport_list`, a brpc naming-service URL
  `list://host:port,host:port` of the shard's replicas; for "ipport", `ip` and `port`.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any


class PythonMeta:
    """Paddle's Python cube client: routing and seek as demo.py does them."""

    def __init__(self, conf_text: str) -> None:
        self.server_meta: dict[str, dict[str, Any]] = {}
        for server in json.loads(conf_text):
            self.server_meta[server["dict_name"]] = server

    def seek(self, dict_name: str, keys: list[int]) -> list[dict[str, Any]]:
        meta = self.server_meta[dict_name]
        values: list[dict[str, Any]] = [{} for _ in keys]
        split: dict[int, list[int]] = {}
        offset: dict[int, list[int]] = {}
        for i, key in enumerate(keys):
            shard_id = key % meta["shard"]
            split.setdefault(shard_id, []).append(key)
            offset.setdefault(shard_id, []).append(i)
        for shard_id, shard_keys in split.items():
            node = meta["nodes"][shard_id]
            url = "http://%s:%s/DictService/seek" % (node["ip"], node["port"])  # noqa: UP031
            request = urllib.request.Request(url, json.dumps({"keys": shard_keys}).encode())
            with urllib.request.urlopen(request, timeout=10) as response:
                results = json.loads(response.read())
            for i, result in enumerate(results["values"]):
                values[offset[shard_id][i]] = result
        return values


def cpp_meta(conf_text: str) -> dict[str, dict[str, Any]]:
    """What Paddle's C++ client (brpc) makes of cube.conf: per dict, its options and, per
    shard, the (host, port) replicas of its channel. AssertionError where it refuses."""
    document = json.loads(conf_text)
    assert isinstance(document, list), "json schema error, please ensure that the json is an array"
    metas = {}
    for config in document:
        for name, kind in [("dict_name", str), ("shard", int), ("dup", int), ("timeout", int),
                           ("retry", int), ("backup_request", int), ("type", str)]:  # fmt: skip
            assert name in config, f"create meta failed, required field {name} missing"
            assert isinstance(config[name], kind) and not isinstance(config[name], bool), name
        balancer = config.get("load_balancer", "rr")
        assert balancer in ("rr", "wrr", "random", "la", "c_murmurhash", "c_md5"), balancer
        channels = []
        if config["type"] == "ipport":
            for node in config["nodes"]:
                channels.append([(str(node["ip"]), int(node["port"]))])
        elif config["type"] == "ipport_list":
            for node in config["nodes"]:
                naming = node["ipport_list"]
                assert naming.startswith("list://"), naming
                replicas = []
                for item in naming.removeprefix("list://").split(","):
                    host, _, port = item.rpartition(":")
                    replicas.append((host, int(port)))
                channels.append(replicas)
        else:
            raise AssertionError(f"type {config['type']} is not supported")
        assert len(channels) == config["shard"], "one channel per shard"
        metas[config["dict_name"]] = {**config, "channels": channels}
    assert metas, "no valid cube"
    return metas
