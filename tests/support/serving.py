"""Helpers of the serving and client tests and the serving benchmarks: cube (3 servers + 3
agents + transfer, tests/support/cube.py) and serving as real processes, stopped by PID
when the test ends; a whole stack with synthetic version 1, or with poisoned embeddings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from elasticctr_common import secrets
from elasticctr_common.contract import ServingEnv
from elasticctr_common.online_eval import Quality
from elasticctr_common.ports import free_port, free_ports
from elasticctr_common.storage import open_store
from elasticctr_common.versions import Version, append_version
from elasticctr_cube.shardfile import write_shard_file

from tests.support.cube import CubeCluster, Procs, control_call, load_version, wait_until
from tests.support.make_model import default_spec, make_versions, table

REPO = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(
    str(REPO / "images" / p) for p in ("serving", "client", "cube", "common")
)


class Processes(Procs):
    """Procs with the serving and client packages on the path too."""

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PYTHONUNBUFFERED": "1", **(env or {})}
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (owned by the child)
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        self.procs[name] = proc
        return proc


def http(method: str, url: str, body: bytes | dict | None = None, timeout: float = 10.0,
         headers: dict[str, str] | None = None):  # fmt: skip
    """(status, parsed JSON or text, headers) of one request; never raises on 4xx/5xx."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw, answer_headers = response.status, response.read(), response.headers
    except urllib.error.HTTPError as err:
        status, raw, answer_headers = err.code, err.read(), err.headers
    try:
        return status, json.loads(raw), answer_headers
    except ValueError:
        return status, raw.decode(errors="replace"), answer_headers


class Serving:
    """python -m elasticctr_serving on a free port."""

    def __init__(self, procs: Processes, name: str, cluster: CubeCluster, *extra: str, env=None):
        self.procs, self.name = procs, name
        token = secrets.read(ServingEnv.AUTH_TOKEN, env or {})
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.port, self.grpc_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc = f"127.0.0.1:{self.grpc_port}"  # the Open Inference Protocol over gRPC
        procs.start(
            name,
            [
                sys.executable,
                "-m",
                "elasticctr_serving",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--grpc-port",
                str(self.grpc_port),
                "--model-uri",
                f"file://{cluster.model_dir}",
                "--cube-conf",
                str(cluster.conf_path),
                "--cube-transfer-url",
                cluster.transfer_url(""),
                "--poll-seconds",
                "0.1",
                *extra,
            ],
            env=env,
        )
        wait_until(self.healthy, 60, f"{name} to listen")

    def healthy(self) -> bool:
        try:
            return http("GET", self.url + "/healthz", timeout=1)[0] == 200
        except OSError:
            return False

    def status(self) -> dict:
        return http("GET", self.url + "/status", headers=self.auth)[1]

    def wait_version(self, version: int, timeout: float = 60.0) -> dict:
        try:
            return wait_until(
                lambda: (s := self.status())["version"] == version and s,
                timeout,
                f"{self.name} to serve version {version}",
                0.05,
            )
        except AssertionError as err:  # what serving saw, for a failure on a busy machine
            raise AssertionError(
                f"{err}\nstatus: {self.status()}\nlog:\n{self.log()[-3000:]}"
            ) from None

    def log(self) -> str:
        return self.procs.log(self.name)


def publish(cluster: CubeCluster, versions: list[int], **spec) -> dict:
    """Synthetic versions into the cluster's model dir (donefile lines last)."""
    full = default_spec(cluster.model_dir, versions, **spec)
    make_versions(full)
    return full


def probe_instances(spec: dict, count: int, seed: int = 3) -> list[dict]:
    """ElasticCTR instances over the spec's slots: 0-3 feasigns per slot, some feasigns
    unknown to every version (keys past the table), some slots left out."""
    rng = np.random.default_rng(seed)
    instances = []
    for _ in range(count):
        slots = []
        for slot in spec["slots"]:
            n = int(rng.integers(0, 4))
            if n == 0 and rng.random() < 0.5:
                continue  # omitted slot
            feasigns = [int(f) for f in rng.integers(1, spec["keys"] + 50, n)]
            # raw feasigns: the server maps them with % sparse_dim
            feasigns = [f + spec["sparse_dim"] * int(rng.integers(0, 1000)) for f in feasigns]
            slots.append({"slot_name": str(slot), "feasigns": feasigns})
        if not any(s["feasigns"] for s in slots):
            slots.append({"slot_name": str(spec["slots"][0]), "feasigns": [7]})
        instances.append({"slots": slots})
    return instances


def slot_arrays(spec: dict, instances: list[dict]) -> list[tuple[str, np.ndarray]]:
    """(slot, UINT64 [n, k]) per slot the instances use, each row one instance's feasigns
    of the slot padded with feasign 0: the Open Inference Protocol's tensors."""
    arrays = []
    for slot in spec["slots"]:
        rows = [
            [f for e in i["slots"] if e["slot_name"] == str(slot) for f in e["feasigns"]]
            for i in instances
        ]
        width = max(map(len, rows))
        if width:  # a slot left out is padding in every instance
            array = np.zeros((len(rows), width), dtype=np.uint64)
            for r, row in enumerate(rows):
                array[r, : len(row)] = row
            arrays.append((str(slot), array))
    return arrays


def predicted_by_predict(serving: Serving, instances: list[dict]) -> np.ndarray:
    """/predict's scores of `instances` (serving's own endpoint), as a reference."""
    plain = [{e["slot_name"]: e["feasigns"] for e in i["slots"]} for i in instances]
    code, body, _ = http(
        "POST", serving.url + "/predict", {"instances": plain}, headers=serving.auth
    )
    assert code == 200, body
    return np.array(body["predictions"])


def expected(spec: dict, version: int, instances: list[dict]) -> np.ndarray:
    """Click probabilities of `instances` under synthetic `version`, computed with numpy."""
    from tests.support.make_model import expected_probabilities

    flat = pooled_inputs(spec, version, instances)
    return expected_probabilities(cluster_model_dir(spec), version, flat)


def pooled_inputs(spec: dict, version: int, instances: list[dict]) -> np.ndarray:
    """The model's inputs for `instances` [n, slots * dim] (slot-major), with numpy."""
    keys, values = table(spec, version)
    lookup = {int(k): v for k, v in zip(keys, values, strict=True)}
    dim, slots = spec["embedding_dim"], spec["slots"]
    pooled = np.zeros((len(instances), len(slots), dim), dtype=np.float64)
    index = {str(s): i for i, s in enumerate(slots)}
    for row, instance in enumerate(instances):
        for entry in instance["slots"]:
            for f in entry["feasigns"]:
                key = int(f) % spec["sparse_dim"]
                if key in lookup:
                    pooled[row, index[entry["slot_name"]]] += lookup[key]
    return pooled.reshape(len(instances), len(slots) * dim)


def cluster_model_dir(spec: dict) -> Path:
    return Path(spec["model_dir"].removeprefix("file://"))


INFERENCE_PATH = "/ElasticCTRPredictionService/inference"


class Load:
    """Threads sending random slices of the probe instances until stopped; every answer
    is checked against the expected probabilities of the version it reports."""

    def __init__(self, url: str, instances: list, want: dict[int, np.ndarray], threads=4):
        self.url, self.instances, self.want = url, instances, want
        self.stop = threading.Event()
        self.errors: list = []
        self.seen: list[list[int]] = [[] for _ in range(threads)]
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        rng = np.random.default_rng(i)
        while not self.stop.is_set():
            start = int(rng.integers(0, len(self.instances) - 16))
            size = int(rng.integers(1, 17))
            body = {"instances": self.instances[start : start + size]}
            try:
                code, answer, _ = http("POST", self.url + INFERENCE_PATH, body)
            except OSError as err:
                self.errors.append(f"no answer: {err}")
                continue
            if code != 200:
                self.errors.append((code, answer))
                continue
            version = answer["version"]
            got = np.array([p["prob1"] for p in answer["predictions"]])
            diff = np.max(np.abs(got - self.want[version][start : start + size]))
            if diff > 1e-5:
                self.errors.append(f"version {version}: answer off by {diff}")
            self.seen[i].append(version)

    def answered(self) -> int:
        return sum(len(s) for s in self.seen)

    def wait_answers(self, more: int, timeout: float = 60.0) -> None:
        target = self.answered() + more
        wait_until(lambda: self.answered() >= target, timeout, f"{more} more answers")

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def metric_sample(text: str, name: str, **labels: str) -> float | None:
    """The value of sample `name` with exactly `labels` in Prometheus text `text`, read with
    prometheus_client's parser (which refuses text that is not the format); None if absent."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def announce(cluster, version: int) -> None:
    """The trainer's last step: the donefile line that makes version V exist."""
    models = open_store(f"file://{cluster.model_dir}")
    append_version(models, Version(version, version, models.uri(f"{version}/sparse")))


@pytest.fixture
def procs(tmp_path):
    p = Processes(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@dataclass
class Stack:
    cluster: CubeCluster
    serving: Serving
    spec: dict
    procs: Processes


def start_stack(procs: Processes, root, *serving_args: str, unload_after: str = "5",
                server_args: tuple[str, ...] = (), replicas: int = 1,
                transfer_args: tuple[str, ...] = (),
                serving_env: dict[str, str] | None = None, **conf) -> Stack:  # fmt: skip
    """3 cube shards (of `replicas` servers each) + transfer + serving, version 1 served;
    `conf`: cube.conf settings (CubeConf's fields)."""
    cluster = CubeCluster(procs, root, 3, ["--max-attempts", "1", "--unload-previous-after",
                                           unload_after, *transfer_args], replicas,
                          server_args, **conf)  # fmt: skip
    spec = publish(cluster, [1])
    result = cluster.wait_result(1)
    # A failed first rollout (one attempt) left serving nothing to wait for: say so here.
    assert result.get("result") == "committed", f"version 1: {result}\n{cluster.dump()}"
    serving = Serving(procs, "serving", cluster, *serving_args, env=serving_env)
    serving.wait_version(1)
    return Stack(cluster, serving, spec, procs)


NAN_KEY, HUGE_KEY = 1234, 1500  # poisoned sparse keys of start_poisoned_stack


def clean_instances(spec: dict, count: int, seed: int) -> list[dict]:
    """`count` probe instances that use neither poisoned key."""
    poisoned = {NAN_KEY, HUGE_KEY}
    return [
        i
        for i in probe_instances(spec, count * 2, seed)
        if not any(f % spec["sparse_dim"] in poisoned for e in i["slots"] for f in e["feasigns"])
    ][:count]


def serve_directly(cluster: CubeCluster, version: int, keys, values) -> None:
    """Shard files of `version` written and switched in through each server's control
    port: no build, no agent, no transfer (nothing of this is committed)."""
    for s in range(cluster.shards):
        mine = keys % np.uint64(cluster.shards) == s
        path = cluster.root / f"direct-v{version}-{s}.cube"
        write_shard_file(path, version=version, shard=s, shard_num=cluster.shards,
                         keys=keys[mine], values=values[mine])  # fmt: skip
        port = cluster.node(s).port
        assert load_version(port, version, path)["bg_version"] == version
        assert control_call(port, "POST", "/control/switch", {"version": version})[0] == 200


def start_poisoned_stack(procs: Processes, root) -> Stack:
    """3 cube-servers holding synthetic version 1 with a NaN in the vector of NAN_KEY and
    3e38 (finite, the float32 range ends at 3.4e38) in every value of HUGE_KEY's; serving
    on version 1. The shard files are loaded through the servers' control ports, past the
    builder's and the agents' checks (which refuse NaN): serving must not rely on them.
    Serving is given no transfer (nothing is committed): it follows the servers."""
    cluster = CubeCluster(procs, root, 3, ["--max-attempts", "1"])
    spec = publish(cluster, [1], publish=False)
    keys, values = table(spec, 1)
    values[NAN_KEY - 1, 4] = np.nan  # keys are 1..K
    values[HUGE_KEY - 1] = 3e38
    serve_directly(cluster, 1, keys, values)
    dead = f"http://127.0.0.1:{free_port()}"
    serving = Serving(procs, "serving", cluster, "--cube-transfer-url", dead)
    serving.wait_version(1)
    return Stack(cluster, serving, spec, procs)


def poisoned_stack(tmp_path_factory) -> Iterator[Stack]:
    """The body of a module fixture: start_poisoned_stack, stopped when the module ends."""
    root = tmp_path_factory.mktemp("poisoned")
    procs = Processes(root)
    try:
        yield start_poisoned_stack(procs, root)
    finally:
        procs.stop_all()


class JoinerStandIn:
    """Answers GET /status with each version's online figures as the joiner writes them
    (Quality.as_json), set by the test: the canary's judge without Kafka."""

    def __init__(self) -> None:
        self.online: dict[int, Quality] = {}
        figures = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                online = {str(v): q.as_json() for v, q in figures.online.items()}
                body = json.dumps({"state": "running", "online": online}).encode()
                self.send_response(200 if self.path == "/status" else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
