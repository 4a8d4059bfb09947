"""Real servers for tests, each a subprocess on 127.0.0.1: S3 (moto), HDFS (MiniDFSCluster),
MLflow, Kafka (a KRaft broker).

Every server runs in its own process group and is stopped through that group (TERM, wait,
KILL), so helpers it forks (MLflow's uvicorn workers) go too. A failed start raises
`ServerStartError` with the tail of the server's log. Use them as context managers:

    with S3Server() as s3:
        subprocess.run(cmd, env={**os.environ, **s3.env()})
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from elasticctr_common.ports import free_port, port_was_taken

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # console scripts of this venv (mlflow)
HADOOP_SCRIPT = REPO / "tools" / "hadoop-minicluster.sh"


class ServerStartError(RuntimeError):
    """A test server did not come up; the message ends with the tail of its log."""


def _http_answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # any HTTP status means the server is listening and parsing requests
    except OSError:
        return False


def http_ready(url: str) -> bool:
    """Whether a readiness endpoint says ready: a 2xx answer. Prometheus and MinIO answer
    503 on theirs while they still load their storage."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:  # an HTTPError (a non-2xx status) is an OSError too
        return False


class ServerProcess:
    """One server subprocess with a private temp dir and a log file."""

    name = "server"
    startup_timeout = 60.0
    stop_timeout = 15.0

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None
        self.startup_seconds: float | None = None

    # --- what a server type defines ---
    def _command(self) -> list[str]:
        raise NotImplementedError

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def _ready(self) -> bool:
        raise NotImplementedError

    def _after_ready(self) -> None:
        """Set-up once the server answers (e.g. permissions)."""

    def _pick_new_port(self) -> bool:
        """After a lost race for a port: choose another and return True, if the type can."""
        return False

    # --- life cycle ---
    @property
    def log_path(self) -> Path:
        assert self.workdir is not None, f"{self.name} was never started"
        return self.workdir / "server.log"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, AssertionError):
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def start(self) -> Self:
        if self.proc is not None:
            raise RuntimeError(f"{self.name} already started")
        for _ in range(3):
            try:
                return self._start_once()
            except ServerStartError as err:
                # free_port() is free when asked, not when the server binds: another process
                # may take it in between. Retry on a new port; keep any other failure's log.
                if not port_was_taken(str(err)) or not self._pick_new_port():
                    raise
                self._remove_workdir()
        raise ServerStartError(f"{self.name}: every port tried was taken")

    def _start_once(self) -> Self:
        self.workdir = Path(tempfile.mkdtemp(prefix=f"elasticctr-{self.name}-"))
        began = time.monotonic()
        with open(self.log_path, "wb") as log:
            # A new session = a new process group we can signal as a whole.
            self.proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self._env(),
                start_new_session=True,
            )
        atexit.register(self.stop)  # no orphan servers if the test run ends abruptly
        try:
            self._wait_ready(began + self.startup_timeout)
            self._after_ready()
        except BaseException:
            self.stop(keep_workdir=True)
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, deadline: float) -> None:
        assert self.proc is not None
        while True:
            code = self.proc.poll()
            if code is not None:
                raise self._failure(f"exited with code {code} while starting")
            if self._ready():
                return
            if time.monotonic() > deadline:
                raise self._failure(f"did not answer within {self.startup_timeout:.0f}s")
            time.sleep(0.2)

    def _failure(self, what: str) -> ServerStartError:
        return ServerStartError(
            f"{self.name} {what}; log {self.log_path}, last lines:\n{self.log_tail()}"
        )

    def stop(self, keep_workdir: bool = False) -> None:
        """Stop the process group by our child's PID; remove the temp dir unless asked."""
        proc, self.proc = self.proc, None
        if proc is not None:
            atexit.unregister(self.stop)
            for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            # Helpers that outlived their leader (the group id stays theirs while they live).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        if not keep_workdir:
            self._remove_workdir()

    def _remove_workdir(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class S3Server(ServerProcess):
    """moto in server mode: an in-memory S3 API at http://127.0.0.1:<port>."""

    name = "s3"
    startup_timeout = 60.0
    access_key = "testing"
    secret_key = "testing"
    region = "us-east-1"

    def __init__(self) -> None:
        super().__init__()
        self.port = free_port()

    def _pick_new_port(self) -> bool:
        self.port = free_port()
        return True

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def _ready(self) -> bool:
        return _http_answers(self.endpoint_url + "/moto-api/")

    def env(self) -> dict[str, str]:
        """The boto3 environment a process needs to use this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def client(self) -> Any:
        """A boto3 S3 client for this server (set up here, not from the environment)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )

    def create_bucket(self, name: str | None = None) -> str:
        """Create a bucket (a fresh unique name if none given) and return its name."""
        name = name or f"test-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name


class HdfsMiniCluster(ServerProcess):
    """Hadoop's MiniDFSCluster: a namenode and N datanodes in one JVM, on 127.0.0.1.

    The JVM runs as HDFS superuser `hdfs`; `/` is then handed to `user`, an ordinary user,
    so clients with HADOOP_USER_NAME=user can write anywhere yet permissions stay checked.
    """

    name = "hdfs"
    startup_timeout = 180.0  # 6 s idle; 35 s seen on 2 busy cores
    fetch_timeout = 900.0  # first run downloads about 90 MB from Maven Central
    superuser = "hdfs"

    def __init__(self, datanodes: int = 1, user: str = "elasticctr") -> None:
        super().__init__()
        self.datanodes = datanodes
        self.user = user
        self.port: int | None = None

    @staticmethod
    def missing_prerequisite() -> str | None:
        """Why this machine cannot run the cluster, or None if it can."""
        if shutil.which("java") is None:
            return "no `java` on PATH (HdfsMiniCluster runs Hadoop's MiniDFSCluster)"
        if shutil.which("mvn") is None and not _hadoop_classpath_cached():
            return "no `mvn` on PATH and no cached Hadoop jars (tools/hadoop-minicluster.sh)"
        return None

    @property
    def url(self) -> str:
        """hdfs://127.0.0.1:<port>, the prefix of every path on this cluster."""
        assert self.port is not None, "cluster not started"
        return f"hdfs://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a process needs besides the URL: the HDFS user."""
        return {"HADOOP_USER_NAME": self.user}

    def start(self) -> Self:
        fetch_hadoop_jars(self.fetch_timeout)  # before the clock of startup_timeout starts
        return super().start()

    def _command(self) -> list[str]:
        assert self.workdir is not None
        return [
            str(HADOOP_SCRIPT), "run", "-format",
            "-nnport", "0", "-httpport", "0",  # the JVM picks the ports: no race
            "-datanodes", str(self.datanodes),
            "-writeDetails", str(self.workdir / "details.json"),
            "-D", f"hdfs.minidfs.basedir={self.workdir / 'dfs'}",
            "-D", f"dfs.replication={min(self.datanodes, 3)}",
        ]  # fmt: skip

    def _env(self) -> dict[str, str]:
        assert self.workdir is not None
        log4j = self.workdir / "log4j.properties"
        log4j.write_text(
            "log4j.rootLogger=WARN,console\n"
            "log4j.logger.org.apache.hadoop.test.MiniDFSClusterManager=INFO\n"
            "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.console.layout.ConversionPattern=%d{HH:mm:ss} %p %c{1}: %m%n\n"
        )
        opts = f"-Xmx512m -Djava.net.preferIPv4Stack=true -Dlog4j.configuration=file:{log4j}"
        return {
            **os.environ,
            "HADOOP_USER_NAME": self.superuser,
            "HADOOP_MINICLUSTER_JAVA_OPTS": opts,
        }

    def _ready(self) -> bool:
        assert self.workdir is not None
        # MiniDFSClusterManager writes this file after waitActive(): datanodes registered.
        try:
            details = json.loads((self.workdir / "details.json").read_text())
        except (OSError, ValueError):
            return False
        self.port = int(details["namenode_port"])
        return True

    def _after_ready(self) -> None:
        # As the superuser, in a child process: hdfs-native reads HADOOP_USER_NAME from the
        # environment, and this process's environment is not ours to change.
        code = (
            "import sys; from hdfs_native import Client\n"
            "Client(sys.argv[1]).set_owner('/', owner=sys.argv[2], group='supergroup')\n"
        )
        env = {**os.environ, "HADOOP_USER_NAME": self.superuser}
        done = subprocess.run(
            [sys.executable, "-c", code, self.url, self.user],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if done.returncode != 0:
            raise self._failure(f"set-up failed: {done.stderr.strip()[-2000:]}")


def _hadoop_classpath_cached() -> bool:
    return subprocess.run([str(HADOOP_SCRIPT), "cached"]).returncode == 0


def fetch_hadoop_jars(timeout: float = 900.0) -> Path:
    """Run tools/hadoop-minicluster.sh fetch (instant once cached); the classpath file."""
    return _fetch(HADOOP_SCRIPT, timeout)


class MlflowServer(ServerProcess):
    """`mlflow server` with a sqlite backend store and proxied artifacts in its temp dir."""

    name = "mlflow"
    # Creates the sqlite schema (alembic migrations) first: 14 s idle; 40 s seen on 2 busy cores.
    startup_timeout = 180.0

    def __init__(self, allowed_hosts: Sequence[str] = ()) -> None:
        """`allowed_hosts`: Host headers to accept besides loopback, e.g. "mlflow.ns:5000"."""
        super().__init__()
        self.port = free_port()
        self.allowed_hosts = list(allowed_hosts)

    def _pick_new_port(self) -> bool:
        self.port = free_port()
        return True

    @property
    def tracking_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What an MLflow client process needs; telemetry off (no traffic off this machine)."""
        return {
            "MLFLOW_TRACKING_URI": self.tracking_uri,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
        }

    def _command(self) -> list[str]:
        assert self.workdir is not None
        mlflow = shutil.which("mlflow", path=str(BIN)) or "mlflow"
        cmd = [
            mlflow, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{self.workdir / 'mlflow.db'}",
            # Clients upload artifacts through the server (mlflow-artifacts:/), as in-cluster.
            "--artifacts-destination", str(self.workdir / "artifacts"),
        ]  # fmt: skip
        if self.allowed_hosts:
            # The flag replaces MLflow's default list, so loopback goes back in.
            loopback = ["localhost", "localhost:*", "127.0.0.1", "127.0.0.1:*"]
            cmd += ["--allowed-hosts", ",".join(loopback + self.allowed_hosts)]
        return cmd

    def _env(self) -> dict[str, str]:
        # The job runner (huey consumers for GenAI jobs) adds 8 processes we never use.
        return {**os.environ, **self.env(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}

    def _ready(self) -> bool:
        return _http_answers(self.tracking_uri + "/health")


KAFKA_SCRIPT = REPO / "tools" / "kafka-broker.sh"


class KafkaBroker(ServerProcess):
    """One KRaft Kafka node (broker and controller in one JVM) on 127.0.0.1, from the jars
    tools/kafka-broker.sh caches. Its log dirs outlive `kill()`: `restart()` brings the
    same broker back on the same port with what it had written, as a pod delete does."""

    name = "kafka"
    startup_timeout = 180.0  # ~15 s idle; a JVM on 2 busy cores takes longer
    fetch_timeout = 900.0
    cluster_id = "ElasticctrTestsKafka01"  # 22 characters: a base64 UUID's length

    def __init__(self) -> None:
        super().__init__()
        self.port = free_port()
        self.controller_port = free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="elasticctr-kafka-data-"))

    @staticmethod
    def missing_prerequisite() -> str | None:
        if shutil.which("java") is None:
            return "no `java` on PATH (KafkaBroker runs Kafka's broker)"
        cached = subprocess.run([str(KAFKA_SCRIPT), "cached"]).returncode == 0
        if shutil.which("mvn") is None and not cached:
            return "no `mvn` on PATH and no cached Kafka jars (tools/kafka-broker.sh)"
        return None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a client process needs (elasticctr_common.feedback.FeedbackEnv)."""
        return {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}

    def start(self) -> Self:
        _fetch(KAFKA_SCRIPT, self.fetch_timeout)
        return super().start()

    def _pick_new_port(self) -> bool:
        if any(self.data_dir.iterdir()):
            return False  # a formatted broker keeps its ports
        self.port, self.controller_port = free_port(), free_port()
        return True

    def _properties(self) -> Path:
        assert self.workdir is not None
        path = self.workdir / "server.properties"
        path.write_text(
            "process.roles=broker,controller\n"
            "node.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}\n"
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}\n"
            "controller.listener.names=CONTROLLER\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n"
            f"log.dirs={self.data_dir / 'logs'}\n"
            "offsets.topic.replication.factor=1\n"
            "transaction.state.log.replication.factor=1\n"
            "transaction.state.log.min.isr=1\n"
            "group.initial.rebalance.delay.ms=0\n"
            "auto.create.topics.enable=false\n"
        )
        return path

    def _command(self) -> list[str]:
        props = self._properties()
        script = str(KAFKA_SCRIPT)
        # Formatting is skipped when the log dirs already are (a restart).
        return [
            "sh", "-c", '"$0" format "$1" "$2" && exec "$0" run "$1"',
            script, str(props), self.cluster_id,
        ]  # fmt: skip

    def _env(self) -> dict[str, str]:
        return {**os.environ, "KAFKA_JAVA_OPTS": "-Xmx384m -Xms64m -XX:+UseSerialGC"}

    def _ready(self) -> bool:
        try:
            return "Kafka Server started" in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the broker (no clean shutdown), keeping its log dirs."""
        proc = self.proc
        assert proc is not None, "kafka is not running"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self.stop()

    def restart(self) -> Self:
        return self.start()

    def close(self) -> None:
        """Stop and remove the log dirs too."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fetch(script: Path, timeout: float) -> Path:
    """Run `script fetch` (instant once cached); the classpath file it prints."""
    try:
        done = subprocess.run(
            [str(script), "fetch"], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as err:
        raise ServerStartError(f"{script} fetch took over {timeout:.0f}s") from err
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
        raise ServerStartError(f"{script} fetch failed ({done.returncode}):\n{tail}")
    return Path(done.stdout.strip().splitlines()[-1])
