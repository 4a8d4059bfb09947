"""The test servers themselves: start, fail loudly, stop every process, and the env they give."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from elasticctr_common.ports import free_port

from tests.support import services
from tests.support.kafka import create_topics, read_topic
from tests.support.services import (
    MlflowServer,
    S3Server,
    ServerProcess,
    ServerStartError,
)

REPO = Path(__file__).resolve().parents[2]


class ShellServer(ServerProcess):
    """A stand-in server: any shell script; ready when its HTTP port answers."""

    name = "shell"
    startup_timeout = 20.0

    def __init__(self, script: str) -> None:
        super().__init__()
        self.port = free_port()
        self.script = script.replace("PORT", str(self.port))

    def _command(self) -> list[str]:
        return ["sh", "-c", self.script]

    def _ready(self) -> bool:
        return services._http_answers(f"http://127.0.0.1:{self.port}/")


def _live_members(group: int) -> list[int]:
    """PIDs of the process group that are not zombies (an orphan's zombie may wait long
    for a reaper in a container)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def _bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A subprocess environment with nothing from ours but PATH: proves what is needed."""
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **extra}


def test_stop_ends_the_whole_process_group():
    server = ShellServer(f"sleep 600 & exec {sys.executable} -m http.server -b 127.0.0.1 PORT")
    with server:
        assert server.running
        assert server.proc is not None and server.workdir is not None
        group = server.proc.pid
        workdir = server.workdir
        assert len(_live_members(group)) == 2  # the server and its background `sleep`
    deadline = time.monotonic() + 5  # signals are delivered asynchronously
    while _live_members(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _live_members(group) == []
    assert not workdir.exists()


def test_a_server_that_exits_raises_with_its_log_tail():
    server = ShellServer("echo 'fatal: no config' >&2; exit 3")
    with pytest.raises(ServerStartError, match=r"(?s)exited with code 3.*fatal: no config"):
        server.start()
    assert not server.running
    assert server.log_path.exists()  # kept for a person to read
    server._remove_workdir()


def test_a_server_that_never_answers_times_out_and_is_stopped():
    server = ShellServer("echo waiting; exec sleep 600")
    server.startup_timeout = 1.0
    with pytest.raises(ServerStartError, match=r"(?s)did not answer within 1s.*waiting"):
        server.start()
    assert server.proc is None
    server._remove_workdir()


@pytest.mark.slow
def test_a_readiness_endpoint_is_ready_only_on_a_2xx_answer():
    """A server that listens but answers 503 on its readiness path (Prometheus, MinIO while
    they load their storage) is not ready yet; 200 is; nothing listening is not."""
    import http.server
    import threading

    status = [503]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status[0])
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/-/ready"
    try:
        assert services._http_answers(url)  # listening: enough for a liveness wait
        assert not services.http_ready(url)
        status[0] = 200
        assert services.http_ready(url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert not services.http_ready(url)


def test_s3_server_retries_on_a_port_taken_in_the_meantime():
    server = S3Server()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        taken = server.port
        with server:
            assert server.port != taken
            assert server.create_bucket("retried") == "retried"


@pytest.mark.slow
def test_s3_env_is_all_a_subprocess_needs(s3_server, tmp_path):
    bucket = s3_server.create_bucket()
    code = (
        "import boto3, sys; s3 = boto3.client('s3'); b = sys.argv[1]\n"
        "s3.put_object(Bucket=b, Key='k/v', Body=b'payload')\n"
        "print(s3.get_object(Bucket=b, Key='k/v')['Body'].read().decode())\n"
    )
    env = _bare_env(tmp_path, **s3_server.env())
    done = subprocess.run(
        [sys.executable, "-c", code, bucket], env=env, text=True, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "payload"


@pytest.mark.slow
def test_hdfs_env_is_all_a_subprocess_needs(hdfs_cluster, tmp_path):
    code = (
        "import sys; from elasticctr_common.storage import open_store\n"
        "open_store(sys.argv[1]).write_text('hour/donefile', 'ok')\n"
    )
    env = _bare_env(tmp_path, PYTHONPATH=str(REPO / "images" / "common"), **hdfs_cluster.env())
    uri = f"{hdfs_cluster.url}/env-check"
    done = subprocess.run(
        [sys.executable, "-c", code, uri], env=env, text=True, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    from hdfs_native import Client

    info = Client(hdfs_cluster.url).get_file_info("/env-check/hour/donefile")
    assert (info.owner, info.length) == (hdfs_cluster.user, 2)


@pytest.mark.slow
def test_mlflow_env_is_all_a_subprocess_needs(mlflow_server, tmp_path):
    code = (
        "import mlflow, pathlib, sys\n"
        "mlflow.set_experiment('elasticctr')\n"
        "with mlflow.start_run() as run:\n"
        "    mlflow.log_metric('auc', 0.75, step=1)\n"
        "    p = pathlib.Path(sys.argv[1]) / 'meta.json'; p.write_text('{}')\n"
        "    mlflow.log_artifact(str(p), artifact_path='model')\n"
        "print(run.info.run_id)\n"
    )
    env = _bare_env(tmp_path, **mlflow_server.env())
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], env=env, text=True, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[-1]
    url = f"{mlflow_server.tracking_uri}/api/2.0/mlflow/runs/get?run_id={run_id}"
    with urllib.request.urlopen(url, timeout=10) as response:
        run = json.load(response)["run"]
    assert run["data"]["metrics"][0]["value"] == 0.75
    artifacts = list((mlflow_server.workdir / "artifacts").rglob("meta.json"))
    assert len(artifacts) == 1  # stored by the server, in its own artifact root


def test_mlflow_allowed_hosts_keep_loopback(tmp_path):
    server = MlflowServer(allowed_hosts=["mlflow.elasticctr:5000"])
    server.workdir = tmp_path
    command = server._command()
    hosts = command[command.index("--allowed-hosts") + 1].split(",")
    assert "127.0.0.1:*" in hosts and "mlflow.elasticctr:5000" in hosts


def test_hdfs_names_a_missing_java(monkeypatch):
    monkeypatch.setattr("tests.support.services.shutil.which", lambda name, **kw: None)
    reason = services.HdfsMiniCluster.missing_prerequisite()
    assert reason is not None and "java" in reason


@pytest.mark.slow
def test_kafka_env_is_all_a_subprocess_needs(tmp_path):
    missing = services.KafkaBroker.missing_prerequisite()
    if missing:
        pytest.fail(missing)
    code = (
        "import sys; from confluent_kafka import Producer\n"
        "p = Producer({'bootstrap.servers': sys.argv[1]})\n"
        "p.produce('env-check', value=b'payload'); sys.exit(p.flush(60))\n"
    )
    with services.KafkaBroker() as kafka:
        create_topics(kafka.bootstrap, {"env-check": 1})
        env = _bare_env(tmp_path, **kafka.env())
        done = subprocess.run(
            [sys.executable, "-c", code, env["KAFKA_BOOTSTRAP_SERVERS"]],
            env=env, text=True, capture_output=True,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert read_topic(kafka.bootstrap, "env-check", at_least=1) == [b"payload"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("server", "script"),
    [
        (services.HdfsMiniCluster, services.HADOOP_SCRIPT),
        (services.KafkaBroker, services.KAFKA_SCRIPT),
    ],
    ids=["hdfs", "kafka"],
)
def test_a_removed_classpath_file_is_resolved_again_and_the_server_starts(
    server, script, tmp_path, monkeypatch
):
    """The jars' classpath file gone, the script writes it again from the Maven repository
    beside it (a copy of this machine's: no download) and the server starts from it."""
    missing = server.missing_prerequisite()
    if missing:
        pytest.fail(missing)
    resolved = services._fetch(script, server.fetch_timeout).parent
    cache = tmp_path / "cache"
    shutil.copytree(resolved / "repository", cache / resolved.name / "repository")
    monkeypatch.setenv("ELASTICCTR_CACHE", str(cache))
    assert subprocess.run([str(script), "cached"]).returncode == 1  # no classpath file yet
    with server() as running:
        assert running.running
    classpath = (cache / resolved.name / "classpath.txt").read_text().strip().split(":")
    assert all(entry.startswith(f"{cache}/") for entry in classpath), classpath
    jars = {Path(entry).name for entry in classpath}
    mine = (resolved / "classpath.txt").read_text().strip().split(":")
    assert jars == {Path(entry).name for entry in mine}
    assert subprocess.run([str(script), "cached"]).returncode == 0
