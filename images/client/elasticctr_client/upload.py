"""`upload`: local ElasticCTR hour directories and slot.conf -> the stack's storage.

Source layout: `<dir>/YYYYMMDD/HH/<data files>` (+ `donefile`), as the trainer reads it
(docs/architecture.md). Each hour's data files go first and its donefile last, so the
trainer never sees a ready hour with missing files; an hour without a local donefile is
uploaded without one (not ready) and reported. The destination is any storage URI
(`s3://bucket/prefix`, `hdfs://host:port/path`, `file:///path`).

An HDFS named by its cluster DNS name (the stack output `hdfs_address` of an in-cluster
HDFS), from outside the cluster, is written through a pod of its datanodes: each file
goes over the Kubernetes API (`kubectl exec -i`) into `hdfs dfs -put -f -` there. Only
the datanodes and the trainers may reach the namenode and every datanode (the stack's
NetworkPolicies), and a client outside the cluster could reach neither.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol, TextIO
from urllib.parse import urlparse

from elasticctr_common.contract import DONEFILE, HDFS_DATANODES
from elasticctr_common.slotconf import SLOT_CONF_SUFFIXES, SlotConfError, read_slot_conf
from elasticctr_common.storage import StorageError, Store, open_store

from .errors import (
    CredentialsError,
    InputError,
    RefusedError,
    UnreachableError,
    UsageError,
)
from .forward import IN_A_POD, Forwarder, credentials_problem, in_cluster_service, last_words

DAY, HOUR = re.compile(r"^\d{8}$"), re.compile(r"^\d{2}$")
HDFS_PORT = 8020  # a namenode's RPC port when the URI names none


@dataclass
class UploadReport:
    ready: list[str] = field(default_factory=list)  # hours uploaded with their donefile
    not_ready: list[str] = field(default_factory=list)  # hours uploaded without one
    files: int = 0
    bytes: int = 0


def hour_dirs(source: Path) -> list[Path]:
    """`YYYYMMDD/HH` directories under `source`, in time order."""
    days = sorted(d for d in source.iterdir() if d.is_dir() and DAY.match(d.name))
    return [h for d in days for h in sorted(d.iterdir()) if h.is_dir() and HOUR.match(h.name)]


PUT_MIN_RATE = 256 * 1024  # bytes/s: slower than this through kubectl exec is a hang
PUT_ATTEMPTS = 3


class ExecTimedOut(UnreachableError):
    """A `kubectl exec` into the datanode pod that did not end within its limit."""


class Destination(Protocol):
    def upload(self, local: Path, name: str) -> None: ...
    def uri(self, name: str) -> str: ...


class ThroughDatanode:
    """An in-cluster HDFS from outside the cluster: files piped into `hdfs dfs -put -f -`
    in a pod of its datanode StatefulSet (`kubectl exec -i`), under `path`.

    A `kubectl exec -i` can hang after its stdin is sent (seen once in a CI run: a
    donefile's put still open 20 minutes later), so each put has a time limit,
    `timeout` plus the file's size at PUT_MIN_RATE, and is sent again when it passes it:
    `-put -f` of the same bytes is safe to repeat, and the hour's donefile still goes
    after its data."""

    def __init__(self, kubectl: list[str], namespace: str, dest_uri: str, timeout: float) -> None:
        self.kubectl, self.namespace, self.dest_uri = kubectl, namespace, dest_uri.rstrip("/")
        self.path = urlparse(dest_uri).path.rstrip("/") or "/"
        self.timeout = timeout

    def uri(self, name: str) -> str:
        return f"{self.dest_uri}/{name}"

    def check(self) -> None:
        """The pod, the right to exec in it and the namenode, before any file: the
        dataset directory is made (it may exist)."""
        self._hdfs(["-mkdir", "-p", self.path], None, self.timeout)

    def upload(self, local: Path, name: str) -> None:
        limit = self.timeout + local.stat().st_size / PUT_MIN_RATE
        for attempt in range(1, PUT_ATTEMPTS + 1):
            with local.open("rb") as data:
                try:
                    self._hdfs(["-put", "-f", "-", f"{self.path.rstrip('/')}/{name}"], data, limit)
                    return
                except ExecTimedOut:
                    if attempt == PUT_ATTEMPTS:
                        raise

    def _hdfs(self, argv: list[str], stdin: BinaryIO | None, timeout: float | None) -> None:
        target = f"statefulset/{HDFS_DATANODES}"
        command = [*self.kubectl, "--namespace", self.namespace, "exec", "-i", target, "--",
                   "hdfs", "dfs", *argv]  # fmt: skip
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                capture_output=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise ExecTimedOut(
                f"{self.dest_uri}: `hdfs dfs {argv[0]}` in {target} (namespace "
                f"{self.namespace}) did not end within {timeout:g} s; is the cluster up and "
                "HDFS ready?"
            ) from None
        if done.returncode != 0:
            said = last_words(done.stderr, done.returncode)
            error = CredentialsError if credentials_problem(said) else UnreachableError
            raise error(
                f"{self.dest_uri}: `hdfs dfs {argv[0]}` in {target} (namespace "
                f"{self.namespace}, through kubectl exec) failed: {said}"
            )


def upload(
    source: Path,
    dest_uri: str,
    slot_conf: Path | None = None,
    log: TextIO = sys.stderr,
    timeout: float = 30.0,
    forwarder: Forwarder | None = None,
) -> UploadReport:
    if not source.is_dir():
        raise InputError(
            f"{source} is not a directory; pass the local directory of YYYYMMDD/HH hour directories"
        )
    hours = hour_dirs(source)
    if not hours:
        raise InputError(
            f"{source} has no YYYYMMDD/HH hour directories (e.g. {source}/20191221/00); "
            "pass the directory above them"
        )
    if slot_conf is not None:
        _check_slot_conf(slot_conf)  # before anything is sent
    store: Destination
    through = _through_datanode(dest_uri, forwarder, timeout)
    if through is not None:
        through.check()
        store = through
    else:
        try:
            opened = open_store(dest_uri)
        except StorageError as err:
            raise UsageError(f"--dest {err}") from None
        _check_namenode(dest_uri, opened, timeout)
        store = opened
    try:
        return _upload(hours, store, slot_conf, log)
    except Exception as err:
        mapped = storage_error(err, dest_uri)
        if mapped is err:
            raise
        raise mapped from err


def _through_datanode(
    dest_uri: str, forwarder: Forwarder | None, timeout: float
) -> ThroughDatanode | None:
    """The way in for an HDFS named by its cluster DNS name, from outside the cluster."""
    parsed = urlparse(dest_uri)
    if parsed.scheme != "hdfs" or forwarder is None or os.environ.get(IN_A_POD):
        return None
    service = in_cluster_service(f"hdfs://{parsed.netloc}")
    if service is None:
        return None
    namespace = service[0]
    instead = (
        f"copy each file in with `kubectl -n {namespace} exec -i statefulset/{HDFS_DATANODES} "
        f"-- hdfs dfs -put -f - {parsed.path.rstrip('/')}/YYYYMMDD/HH/FILE < FILE`"
    )
    kubectl = forwarder.kubectl(dest_uri, "write through a datanode pod", instead)
    return ThroughDatanode(kubectl, namespace, dest_uri, timeout)


def _check_namenode(dest_uri: str, store: Store, timeout: float) -> None:
    """An hdfs:// namenode that refuses, is not there or does not answer fails here within
    `timeout`: the HDFS client itself retries for minutes before it gives up."""
    parsed = urlparse(dest_uri)
    if parsed.scheme != "hdfs":
        return
    host, port = parsed.hostname, parsed.port or HDFS_PORT
    address = f"{host}:{port}"
    try:
        socket.create_connection((host, port), timeout).close()
    except OSError as err:
        reason = "no answer" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise UnreachableError(
            f"{dest_uri}: cannot connect to the HDFS namenode at {address} ({reason.lower()}); "
            "is it up, and --dest's host:port right?"
        ) from None
    answered = threading.Event()

    def probe() -> None:
        # An error here is the upload's too: it meets it again, and maps it.
        with contextlib.suppress(Exception):
            store.exists("")
        answered.set()

    threading.Thread(target=probe, name="namenode-probe", daemon=True).start()
    if not answered.wait(timeout):
        raise UnreachableError(
            f"{dest_uri}: the HDFS namenode at {address} does not answer within {timeout:g} s; "
            "is that its RPC port (8020 by default), or pass a larger --timeout"
        )


def _check_slot_conf(slot_conf: Path) -> None:
    try:
        read_slot_conf(slot_conf)
    except OSError as err:
        raise InputError(
            f"slot.conf {slot_conf}: {err.strerror or err}; pass --slot-conf FILE"
        ) from None
    except UnicodeDecodeError as err:
        raise InputError(
            f"slot.conf {slot_conf}: a byte that is not UTF-8 at offset {err.start}; "
            "convert it (iconv -t UTF-8)"
        ) from None
    except SlotConfError as err:
        problems = "; ".join(str(err).splitlines())
        raise InputError(f"{problems}; slot.conf is one integer slot id per line") from None


def _upload(
    hours: list[Path], store: Destination, slot_conf: Path | None, log: TextIO
) -> UploadReport:
    report = UploadReport()
    for hour in hours:
        name = f"{hour.parent.name}/{hour.name}"
        files = sorted(f for f in hour.iterdir() if f.is_file() and f.name != DONEFILE)
        for f in files:
            store.upload(f, f"{name}/{f.name}")
            report.files += 1
            report.bytes += f.stat().st_size
        if (hour / DONEFILE).exists():
            store.upload(hour / DONEFILE, f"{name}/{DONEFILE}")  # last: the hour is ready
            report.ready.append(name)
        else:
            report.not_ready.append(name)
        print(
            f"{name}: {len(files)} files"
            + ("" if name in report.ready else " (no donefile: not ready for training)"),
            file=log,
        )
    if slot_conf is not None:
        store.upload(slot_conf, "slot.conf")
        print(
            f"slot.conf -> {store.uri('slot.conf')} (training reads the stack's slot_conf: "
            f"`{config_command(slot_conf)}`)",
            file=log,
        )
    return report


def config_command(slot_conf: Path) -> str:
    """The command that makes `slot_conf` the stack's slot_conf: the config takes a path
    to a file named *.txt or *.conf (absolute, or relative to the project)."""
    path = slot_conf.resolve()
    if path.suffix in SLOT_CONF_SUFFIXES:
        return f"pulumi config set slot_conf {shlex.quote(str(path))}"
    named = path.with_name(path.name + ".conf")
    return (
        f"cp {shlex.quote(str(path))} {shlex.quote(str(named))} && "
        f"pulumi config set slot_conf {shlex.quote(str(named))}"
    )


S3_CREDENTIAL_CODES = {
    "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
    "ExpiredToken", "403", "401",
}  # fmt: skip
KEYS_HINT = "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) to the storage's keys"


def storage_error(err: Exception, dest: str) -> Exception:
    """A CliError for a failed upload to `dest`, naming it and what to do; `err` itself
    when it is not a storage failure the user can act on."""
    try:
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import (
            ClientError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
        )
    except ImportError:  # no boto3: not an S3 failure
        return err
    if isinstance(err, NoCredentialsError):
        return CredentialsError(f"{dest}: no S3 credentials; {KEYS_HINT}")
    if isinstance(err, EndpointConnectionError | ConnectTimeoutError):
        endpoint = os.environ.get("AWS_ENDPOINT_URL", "AWS S3")
        return UnreachableError(
            f"{dest}: cannot connect to the storage at {endpoint}; is it up, and "
            "AWS_ENDPOINT_URL right?"
        )
    code = None
    if isinstance(err, ClientError):
        code = str(err.response.get("Error", {}).get("Code"))
    elif isinstance(err, S3UploadFailedError):  # upload_file wraps the ClientError's text
        found = re.search(r"An error occurred \((\w+)\)", str(err))
        code = found.group(1) if found else None
    if code is None:
        return err
    if code in S3_CREDENTIAL_CODES:
        return CredentialsError(f"{dest}: the storage refused the keys ({code}); {KEYS_HINT}")
    if code in ("NoSuchBucket", "404"):
        return RefusedError(f"{dest}: no such bucket; create it, or pass the right --dest")
    return RefusedError(f"{dest}: the storage answered {code}")
