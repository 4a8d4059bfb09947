"""Helpers of the cube and serving tests and the serving benchmarks: test data, child
processes by PID, a 3-shard cube cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from elasticctr_common.cube.client import CubeClient
from elasticctr_common.cube.conf import CubeConf, CubeNode
from elasticctr_common.ports import free_port
from elasticctr_common.seqfile import write_sequence_file
from elasticctr_common.storage import open_store
from elasticctr_common.versions import DELETED, Version, append_version, deleted_keys_bytes
from elasticctr_cube.httpjson import HttpCallError, call
from elasticctr_cube.manifest import layout_dir

REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(str(REPO / "images" / p) for p in ("cube", "common"))


def wait_until(predicate, timeout: float = 20.0, what: str = "condition", interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        return call("GET", url, timeout=1.0)[0] == 200
    except HttpCallError:
        return False


def model_table(version: int, n: int = 3000, dim: int = 8, seed: int = 7):
    """The same key set for every version (large uint64 keys included); values differ per
    version, and column 0 holds the version so a mixed answer is visible."""
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
    values = np.random.default_rng(seed * 1000 + version).standard_normal((len(keys), dim))
    values = values.astype(np.float32)
    values[:, 0] = version
    return keys, values


def write_model_version(model_dir: Path, version: int, keys, values, parts: int = 2) -> str:
    """What the trainer exports: <model>/<V>/sparse/part-* SequenceFiles, then the donefile."""
    sparse = model_dir / str(version) / "sparse"
    sparse.mkdir(parents=True, exist_ok=True)
    for p, idx in enumerate(np.array_split(np.arange(len(keys)), parts)):
        write_sequence_file(sparse / f"part-{p:05d}", (keys[idx], values[idx]))
    (sparse / "_SUCCESS").write_bytes(b"")
    return f"file://{sparse}"


class Procs:
    """Child processes of one test, by name; all are stopped by PID at the end."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PYTHONUNBUFFERED": "1"}
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (owned by the child)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def terminate(self, name: str, within: float = 15.0) -> int:
        """SIGTERM, as Kubernetes stops a pod; the exit code (-9: it had to be killed after
        `within` seconds, as the grace period would)."""
        proc = self.procs.pop(name)
        proc.terminate()
        try:
            return proc.wait(within)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for name, proc in list(self.procs.items()):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            del self.procs[name]

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")


# The control port (loads, switches, unloads) of each server started here, by data port.
CONTROL_PORTS: dict[int, int] = {}


def start_server(procs: Procs, name: str, port: int, shard: int, shard_num: int, *extra: str,
                 host: str = "127.0.0.1", control_port: int | None = None) -> int:  # fmt: skip
    """A cube-server with its control port on the same loopback address; returns that port."""
    control = control_port or CONTROL_PORTS.get(port) or free_port()
    CONTROL_PORTS[port] = control
    procs.start(name, [sys.executable, "-m", "elasticctr_cube", "server", "--host", host,
                       "--port", str(port), "--control-host", host, "--control-port", str(control),
                       "--shard", str(shard), "--shard-num", str(shard_num), *extra])  # fmt: skip
    wait_until(lambda: http_ok(f"http://{host}:{port}/healthz"), 10, f"{name} to listen")
    return control


class CubeCluster:
    """S shards x R replicas (servers + agents) and one transfer on loopback, over file://
    storage. Server and agent of shard s are `server{s}`, `agent{s}` (with replicas,
    `server{s}-{r}`, `agent{s}-{r}`); those of another layout (`reshape`) carry its prefix."""

    def __init__(self, procs: Procs, root: Path, shards: int, transfer_args: list[str],
                 replicas: int = 1, server_args: tuple[str, ...] = (), layout: str = "",
                 **conf) -> None:  # fmt: skip
        self.procs, self.root, self.shards, self.replicas = procs, root, shards, replicas
        self.server_args, self.layout, self.conf_fields = server_args, layout, conf
        self.model_dir, self.cube_dir = root / "models", root / "cube"
        self.model_dir.mkdir(exist_ok=True)
        self.cube_uri = f"file://{self.cube_dir}"
        # Where the transfer publishes versions for this shard count (manifest.layout_dir).
        self.versions_dir = self.cube_dir / layout_dir(shards)
        self.versions_uri = f"file://{self.versions_dir}"
        # cube.conf has one server port and one agent port per shard (as in a cluster):
        # replica r listens on its own loopback address, 127.0.0.<r+1>.
        ports = [(free_port(), free_port()) for _ in range(shards)]
        groups = tuple(
            tuple(CubeNode(f"127.0.0.{r + 1}", port, agent) for r in range(replicas))
            for port, agent in ports
        )
        nodes = tuple(group[0] for group in groups)
        self.conf = CubeConf("ctr_embedding", shards, nodes, groups, **conf)
        self.conf_path = root / f"{layout}cube.conf"
        self.conf_path.write_text(self.conf.to_json())
        self.transfer_port, self.transfer_control_port = free_port(), free_port()
        self.transfer_args = transfer_args
        for s in range(shards):
            for r in range(replicas):
                self.start_server(s, r)
                self.start_agent(s, r)
        if not layout:
            self.start_transfer()

    def reshape(self, shards: int, replicas: int = 1) -> CubeCluster:
        """Servers and agents of a new layout beside these ones (as the pods of a new shard
        count come up beside the old), then the transfer restarted on the new cube.conf (as
        the Deployment is), over the same storage. These servers keep running."""
        new = CubeCluster(self.procs, self.root, shards, self.transfer_args, replicas,
                          self.server_args, f"{self.layout}L{shards}x{replicas}-",
                          **self.conf_fields)  # fmt: skip
        self.procs.terminate("transfer")
        new.start_transfer()
        return new

    def name(self, role: str, s: int, r: int = 0) -> str:
        return self.layout + (f"{role}{s}-{r}" if self.replicas > 1 else f"{role}{s}")

    def node(self, s: int, r: int = 0) -> CubeNode:
        return self.conf.replicas[s][r]

    def start_server(self, s: int, r: int = 0) -> None:
        node = self.node(s, r)
        start_server(self.procs, self.name("server", s, r), node.port, s, self.shards,
                     *self.server_args, host=node.ip)  # fmt: skip

    def control_url(self, s: int, r: int = 0) -> str:
        """The server's control port, which its agent uses (the same address)."""
        node = self.node(s, r)
        return f"http://{node.ip}:{CONTROL_PORTS[node.port]}"

    def start_agent(self, s: int, r: int = 0) -> None:
        node, name = self.node(s, r), self.name("agent", s, r)
        self.procs.start(name, [
            sys.executable, "-m", "elasticctr_cube", "agent", "--shard", str(s),
            "--shard-num", str(self.shards), "--cube-uri", self.cube_uri,
            "--server", self.control_url(s, r),
            "--data-dir", str(self.root / f"{self.layout}data{s}-{r}"),
            "--host", node.ip, "--port", str(node.agent_port), "--restore-interval", "0.2",
        ])  # fmt: skip
        wait_until(lambda: http_ok(f"{node.agent_url}/healthz"), 20, f"{name} to listen")

    def start_transfer(self) -> None:
        self.procs.start("transfer", [
            sys.executable, "-m", "elasticctr_cube", "transfer",
            "--model-uri", f"file://{self.model_dir}", "--cube-uri", self.cube_uri,
            "--cube-conf", str(self.conf_path), "--work-dir", str(self.root / "transfer"),
            "--host", "127.0.0.1", "--port", str(self.transfer_port),
            "--control-port", str(self.transfer_control_port), "--poll-seconds", "0.1",
            *self.transfer_args,
        ])  # fmt: skip
        wait_until(lambda: http_ok(self.transfer_url("/healthz")), 20, "transfer to listen")

    def transfer_url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.transfer_port}{path}"

    def rollback(self, version: int) -> tuple[int, dict]:
        """POST /rollback on the transfer's control port."""
        url = f"http://127.0.0.1:{self.transfer_control_port}/rollback"
        return call("POST", url, {"version": version})

    def publish_model(self, version: int, keys, values) -> None:
        uri = write_model_version(self.model_dir, version, keys, values)
        append_version(open_store(f"file://{self.model_dir}"), Version(version, version, uri))

    def publish_delta(self, version: int, parent: int, keys, values, deleted=()) -> None:
        """A delta export on `parent`: the changed keys' parts and the deleted keys."""
        uri = write_model_version(self.model_dir, version, keys, values)
        sparse = self.model_dir / str(version) / "sparse"
        (sparse / DELETED).write_bytes(deleted_keys_bytes(np.asarray(deleted, np.uint64)))
        store = open_store(f"file://{self.model_dir}")
        append_version(store, Version(version, version, uri, parent=parent))

    def transfer_status(self) -> dict:
        return call("GET", self.transfer_url("/status"))[1]

    def history(self) -> list[dict]:
        return call("GET", self.transfer_url("/history"))[1]["history"]

    def wait_result(self, version: int, timeout: float = 60.0) -> dict:
        def done():
            return next((h for h in reversed(self.history()) if h["version"] == version), None)

        return wait_until(done, timeout, f"a rollout result for version {version}", 0.05)

    def server_status(self, s: int, r: int = 0) -> dict:
        return call("GET", f"{self.node(s, r).server_url}/control/status")[1]

    def client(self, **kwargs) -> CubeClient:
        return CubeClient(self.conf, **kwargs)

    def dump(self) -> str:
        names = [
            self.name(role, s, r)
            for role in ("server", "agent")
            for s in range(self.shards)
            for r in range(self.replicas)
        ]
        return "\n".join(f"--- {n}\n{self.procs.log(n)[-3000:]}" for n in [*names, "transfer"])


def committed(cluster: CubeCluster, version: int, tables) -> None:
    """`version` was committed and every server of `cluster` serves exactly its vectors."""
    result = cluster.wait_result(version)
    assert result["result"] == "committed", f"{result}\n{cluster.dump()}"
    serves_exactly(cluster, version, tables)


def serves_exactly(cluster: CubeCluster, version: int, tables) -> None:
    """Every server of `cluster` serves `version`, exactly its vectors."""
    keys = tables[version][0]
    with cluster.client() as client:
        expect_values(client.seek(keys), keys, tables)
        assert client.seek(keys).version == version
    for s in range(cluster.shards):
        for r in range(cluster.replicas):
            assert cluster.server_status(s, r)["cur_version"] == version


def expect_values(result, keys, tables: dict[int, tuple]) -> None:
    """`result` holds exactly the vectors of one version for `keys`."""
    table_keys, table_values = tables[result.version]
    index = np.searchsorted(table_keys, keys)
    assert result.missing == 0 and result.found.all()
    np.testing.assert_array_equal(result.values, table_values[index])


def server_call(port: int, method: str, path: str, body=None):
    """A request on a server's data port (seek, status, health)."""
    return call(method, f"http://127.0.0.1:{port}{path}", body)


def control_call(port: int, method: str, path: str, body=None):
    """A request on the control port of the server whose data port is `port`."""
    return call(method, f"http://127.0.0.1:{CONTROL_PORTS[port]}{path}", body)


def load_version(port: int, version: int, path, timeout: float = 10.0) -> dict:
    """Ask a server to load `path` as `version`; its status once the load has ended."""
    code, answer = control_call(
        port, "POST", "/control/load", {"version": version, "path": str(path)}
    )
    assert code == 202, answer

    def ended():
        status = server_call(port, "GET", "/control/status")[1]
        load = status["load"] or {}
        held = version in (status["cur_version"], status["bg_version"])
        return status if held or load.get("state") in ("failed", "cancelled") else None

    return wait_until(ended, timeout, f"the load of version {version}")
