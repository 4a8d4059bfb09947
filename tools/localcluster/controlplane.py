"""A Kubernetes control plane as host processes: the local cluster's, and the tests'.

etcd + kube-apiserver (+ kube-controller-manager and kube-scheduler when they
are built) with free ports, a fresh CA, serving and client certificates (made
with the ``openssl`` command), a service-account signing key and an admin
kubeconfig. tools/localcluster/cluster.py joins a node to it; the end-to-end tests
run it alone on loopback (no node: pods stay Pending, workloads get objects, not
containers), with CRDs registered and a CLI (tests/support/controlplane.py).

Library::

    with ControlPlane() as cp:
        cp.kubeconfig  # Path of the admin kubeconfig

Binaries are looked up on PATH, then in the directories that
``tools/build-tools.sh --print-path`` names (see docs/tooling.md).
Standard library only.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticctr_common.ports import free_ports, port_was_taken

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_TOOLS = REPO_ROOT / "tools" / "build-tools.sh"
STATE_FILE = "controlplane.json"

REQUIRED = ("etcd", "kube-apiserver")
OPTIONAL = ("kube-controller-manager", "kube-scheduler")

# Without a node the service CIDR is configuration only: nothing routes to it (no
# kube-proxy), and no process sends traffic to it. A node (tools/localcluster) passes its own.
SERVICE_CIDR = "10.0.0.0/24"


class ControlPlaneError(RuntimeError):
    """The control plane could not start (the message carries the server's log tail)."""


class PortTaken(ControlPlaneError):
    """A server could not bind a port picked for it a moment before: another process (a
    parallel test session picking at once; before free_ports picked above the kernel's
    ephemeral range, an outgoing connection) took it in between."""


# Attempts to start the servers, each with new ports, when one finds its port taken.
PORT_ATTEMPTS = 3


class BinariesNotFound(ControlPlaneError):
    """Some required binaries are neither on PATH nor built by tools/build-tools.sh."""


def tool_path_dirs() -> list[str]:
    """The bin directories of tools/build-tools.sh (whether built or not)."""
    try:
        out = subprocess.run(
            ["bash", str(BUILD_TOOLS), "--print-path"],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return []
    return [d for d in out.split(":") if d]


def find_binaries(names: Iterable[str] = REQUIRED + OPTIONAL) -> dict[str, str]:
    """Maps each name to an executable found on PATH or in the build-tools dirs."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *tool_path_dirs()])
    found = {}
    for name in names:
        path = shutil.which(name, path=search)
        if path:
            found[name] = path
    return found


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


@dataclass(frozen=True)
class Cert:
    """A certificate the CA signs: its subject, usage, and (servers) alternative names."""

    subject: str
    usage: str = "clientAuth"  # extendedKeyUsage: clientAuth or serverAuth
    sans: tuple[str, ...] = ()


def apiserver_sans(address: str, service_ip: str) -> tuple[str, ...]:
    """Names the API server answers to: its address, loopback and the `kubernetes` Service."""
    ips = dict.fromkeys(["127.0.0.1", address, service_ip])  # ordered, no duplicates
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    names.append("kubernetes.default.svc.cluster.local")
    return (*(f"IP:{ip}" for ip in ips), *(f"DNS:{name}" for name in names))


def make_pki(pki: Path, certs: dict[str, Cert]) -> None:
    """A fresh CA, the certificates `certs` names (ECDSA P-256) and the service-account key."""
    pki.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "30",
        "-subj",
        "/CN=elasticctr-local-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        cwd=pki,
    )
    for name, cert in certs.items():
        _openssl(
            "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", cert.subject,
            cwd=pki,
        )  # fmt: skip
        ext = pki / f"{name}.ext"
        ext.write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage={cert.usage}\n"
            + (f"subjectAltName={','.join(cert.sans)}\n" if cert.sans else "")
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-extfile",
            ext.name,
            "-out",
            f"{name}.crt",
            cwd=pki,
        )
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key", cwd=pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)
    for key in pki.glob("*.key"):
        key.chmod(0o600)


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    def b64(name: str) -> str:
        return base64.b64encode((pki / name).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(f"{user}.crt"),
                    "client-key-data": b64(f"{user}.key"),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    # JSON is YAML: every kubeconfig reader takes it.
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


def log_tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a server's log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _pid_is(pid: int, exe: str, marker: str) -> bool:
    """The process still runs `exe` with `marker` (our dir) in its arguments: no recycled PID."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (
        bool(argv)
        and argv[0].decode(errors="replace") == exe
        and any(marker.encode() in a for a in argv)
    )


def terminate_pids(procs: Sequence[dict[str, Any]], timeout: float = 20.0) -> list[int]:
    """SIGTERM each {pid, exe, marker} (in the given order), SIGKILL what outlives `timeout`.

    Returns the PIDs that are still alive afterwards (normally none)."""
    mine = [p for p in procs if pid_alive(p["pid"]) and _pid_is(p["pid"], p["exe"], p["marker"])]
    for p in mine:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p["pid"], signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(p["pid"]) and time.monotonic() < deadline:
            _reap(p["pid"])
            time.sleep(0.1)
        if pid_alive(p["pid"]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 5
            while pid_alive(p["pid"]) and time.monotonic() < deadline:
                _reap(p["pid"])
                time.sleep(0.1)
        _reap(p["pid"])
    return [p["pid"] for p in mine if pid_alive(p["pid"])]


def stop_detached(directory: Path, keep_dir: bool = False) -> None:
    """Stop the servers a detached start recorded in `directory` (by PID, newest first)
    and remove it."""
    d = directory.resolve()
    state_file = d / STATE_FILE
    if not state_file.exists():
        raise ControlPlaneError(f"no {STATE_FILE} in {d}: nothing started there")
    state = json.loads(state_file.read_text())
    procs = [
        {"pid": p["pid"], "exe": p["exe"], "marker": str(d)} for p in reversed(state["processes"])
    ]
    left = terminate_pids(procs)
    if left:
        raise ControlPlaneError(f"still alive: {left}")
    if not keep_dir:
        shutil.rmtree(d, ignore_errors=True)


def _reap(pid: int) -> None:
    # Not our child (CLI `down`): ChildProcessError, and init reaps it.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


@dataclass
class _Server:
    name: str
    exe: str
    args: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    env: dict[str, str] | None = None  # None: this process's environment


@dataclass
class ControlPlane:
    """etcd + kube-apiserver (+ controller-manager, scheduler) on 127.0.0.1.

    workdir: where certs, data, kubeconfigs and logs go; a fresh temp dir if None
      (then `stop()` removes it). An existing workdir must be empty.
    controllers: also start kube-controller-manager and kube-scheduler if found
      (True), never (False), or demand them ("required").
    """

    workdir: Path | str | None = None
    controllers: bool | str = True
    start_timeout: float = 120.0
    keep_workdir: bool = False
    detach: bool = False  # servers outlive this Python process (the local cluster, CLI `up`)
    binaries: dict[str, str] = field(default_factory=dict)
    # Where the API server listens and what it advertises: loopback without a node; the
    # node's InternalIP when a kubelet joins (pods reach the API through the `kubernetes`
    # Service, which then points there).
    address: str = "127.0.0.1"
    service_cidr: str = SERVICE_CIDR
    # A kubelet joins as this node: the Node authorizer, kubelet client credentials, and the
    # controller-manager allocating the node's pod CIDR from `cluster_cidr`.
    node_name: str | None = None
    cluster_cidr: str | None = None
    # More client (or server) certificates for the node's daemons: name -> Cert; each
    # client gets `<name>.kubeconfig` in the workdir.
    extra_certs: dict[str, Cert] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._servers: list[_Server] = []
        self._own_workdir = self.workdir is None
        self.dir: Path | None = None
        self.kubeconfig: Path | None = None
        self.server: str | None = None
        self.ports: dict[str, int] = {}

    # ---- lifecycle ---------------------------------------------------------
    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        want = REQUIRED + (OPTIONAL if self.controllers else ())
        found = {**find_binaries(want), **self.binaries}
        required = REQUIRED + (OPTIONAL if self.controllers == "required" else ())
        missing = [n for n in required if n not in found]
        if missing:
            raise BinariesNotFound(
                f"not found on PATH nor in the tools/build-tools.sh dirs: {', '.join(missing)} "
                f"(build them with `bash tools/build-tools.sh kubernetes etcd`)"
            )
        self.binaries = {n: found[n] for n in want if n in found}

        for attempt in range(1, PORT_ATTEMPTS + 1):
            if self.workdir is None:
                self.dir = Path(tempfile.mkdtemp(prefix="elasticctr-cp-"))
            else:
                self.dir = Path(self.workdir).resolve()
                self.dir.mkdir(parents=True, exist_ok=True)
                if any(self.dir.iterdir()):
                    raise ControlPlaneError(f"{self.dir} is not empty")
            if not self.detach:
                atexit.register(self.stop)
            try:
                self._start_servers()
                return self
            except PortTaken:
                if attempt == PORT_ATTEMPTS:
                    self.stop()
                    raise
                self.stop(keep_workdir=False)  # again from an empty workdir, new ports
            except BaseException:
                self.stop()  # the error carries the log tail; keep_workdir=True keeps the rest
                raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _start_servers(self) -> None:
        d = self.dir
        assert d is not None
        pki, logs = d / "pki", d / "logs"
        logs.mkdir()
        service_ip = str(next(ipaddress.ip_network(self.service_cidr).hosts()))
        sans = apiserver_sans(self.address, service_ip)
        certs = {
            "apiserver": Cert("/CN=kube-apiserver", "serverAuth", sans),
            "admin": Cert("/O=system:masters/CN=elasticctr-admin"),
            "controller-manager": Cert("/CN=system:kube-controller-manager"),
            "scheduler": Cert("/CN=system:kube-scheduler"),
            **self.extra_certs,
        }
        if self.node_name:
            # The API server's identity towards kubelets (logs, exec, port-forward).
            certs["apiserver-kubelet-client"] = Cert(
                "/O=system:masters/CN=kube-apiserver-kubelet-client"
            )
        make_pki(pki, certs)
        etcd_client, etcd_peer, api, cm, sched = free_ports(5)
        self.ports = {
            "etcd": etcd_client,
            "etcd-peer": etcd_peer,
            "kube-apiserver": api,
            "kube-controller-manager": cm,
            "kube-scheduler": sched,
        }
        self.server = f"https://{self.address}:{api}"
        self.kubeconfig = d / "admin.kubeconfig"
        write_kubeconfig(self.kubeconfig, self.server, pki, "admin")
        for name, cert in self.extra_certs.items():
            if cert.usage == "clientAuth":
                write_kubeconfig(d / f"{name}.kubeconfig", self.server, pki, name)

        etcd_url, peer_url = f"http://127.0.0.1:{etcd_client}", f"http://127.0.0.1:{etcd_peer}"
        self._launch(
            _Server(
                "etcd",
                self.binaries["etcd"],
                [
                    "--name=elasticctr",
                    f"--data-dir={d / 'etcd-data'}",
                    f"--listen-client-urls={etcd_url}",
                    f"--advertise-client-urls={etcd_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=elasticctr={peer_url}",
                    "--initial-cluster-state=new",
                    "--unsafe-no-fsync=true",  # test data only: durability is not wanted here
                    "--log-level=warn",
                ],
                logs / "etcd.log",
            )
        )
        self._wait(
            "etcd", lambda: json.loads(self._get(f"{etcd_url}/health")).get("health") == "true"
        )

        self._launch(
            _Server(
                "kube-apiserver",
                self.binaries["kube-apiserver"],
                [
                    f"--etcd-servers={etcd_url}",
                    f"--bind-address={self.address}",
                    f"--advertise-address={self.address}",
                    f"--secure-port={api}",
                    f"--cert-dir={d / 'apiserver-certs'}",
                    f"--tls-cert-file={pki / 'apiserver.crt'}",
                    f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={pki / 'ca.crt'}",
                    "--allow-privileged=true",
                    f"--service-cluster-ip-range={self.service_cidr}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    "--profiling=false",
                    *self._node_flags(pki),
                ],
                logs / "kube-apiserver.log",
            )
        )
        self._wait("kube-apiserver", lambda: self._get(f"{self.server}/readyz") == "ok")

        if "kube-controller-manager" in self.binaries:
            kc = d / "controller-manager.kubeconfig"
            write_kubeconfig(kc, self.server, pki, "controller-manager")
            self._launch(
                _Server(
                    "kube-controller-manager",
                    self.binaries["kube-controller-manager"],
                    [
                        f"--kubeconfig={kc}",
                        f"--authentication-kubeconfig={kc}",
                        f"--authorization-kubeconfig={kc}",
                        "--bind-address=127.0.0.1",
                        f"--secure-port={cm}",
                        f"--cert-dir={d / 'controller-manager-certs'}",
                        f"--root-ca-file={pki / 'ca.crt'}",
                        f"--service-account-private-key-file={pki / 'sa.key'}",
                        f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                        f"--cluster-signing-key-file={pki / 'ca.key'}",
                        f"--service-cluster-ip-range={self.service_cidr}",
                        *(
                            [
                                "--allocate-node-cidrs=true",
                                f"--cluster-cidr={self.cluster_cidr}",
                                "--node-cidr-mask-size=24",
                            ]
                            if self.cluster_cidr
                            else []
                        ),
                        "--leader-elect=false",
                        "--use-service-account-credentials=true",
                        "--profiling=false",
                    ],
                    logs / "kube-controller-manager.log",
                )
            )
        if "kube-scheduler" in self.binaries:
            ks = d / "scheduler.kubeconfig"
            write_kubeconfig(ks, self.server, pki, "scheduler")
            self._launch(
                _Server(
                    "kube-scheduler",
                    self.binaries["kube-scheduler"],
                    [
                        f"--kubeconfig={ks}",
                        f"--authentication-kubeconfig={ks}",
                        f"--authorization-kubeconfig={ks}",
                        "--bind-address=127.0.0.1",
                        f"--secure-port={sched}",
                        f"--cert-dir={d / 'scheduler-certs'}",
                        "--leader-elect=false",
                        "--profiling=false",
                    ],
                    logs / "kube-scheduler.log",
                )
            )
        for name in ("kube-controller-manager", "kube-scheduler"):
            if name in self.binaries:
                port = self.ports[name]
                self._wait(
                    name,
                    lambda p=port: (
                        self._get(f"https://127.0.0.1:{p}/healthz", verify=False) == "ok"
                    ),
                )
        self._write_state()

    def _node_flags(self, pki: Path) -> list[str]:
        """API server flags that differ when a kubelet joins."""
        if not self.node_name:
            return [
                "--authorization-mode=RBAC",
                # No node runs: keep the 'kubernetes' Service free of loopback endpoints.
                "--endpoint-reconciler-type=none",
            ]
        return [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            # The node's host name resolves to 127.0.0.1 here: logs and exec go to its IP.
            "--kubelet-preferred-address-types=InternalIP,Hostname",
        ]

    def launch(
        self,
        name: str,
        exe: str,
        args: Sequence[str],
        ready: Callable[..., object],
        env: dict[str, str] | None = None,
    ) -> int:
        """Start one more server beside the control plane (a scheduler, a controller):
        logged, waited for with `ready()`, stopped by PID with the others. Returns its PID."""
        assert self.dir is not None, "start() first"
        server = _Server(name, exe, list(args), self.dir / "logs" / f"{name}.log", env=env)
        self._launch(server)
        self._wait(name, ready)
        assert server.proc is not None
        return server.proc.pid

    def _launch(self, server: _Server) -> None:
        with open(server.log, "ab") as log:
            server.proc = subprocess.Popen(
                [server.exe, *server.args],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env=server.env,
                start_new_session=True,  # no terminal signal reaches the servers
            )
        self._servers.append(server)
        self._write_state()

    # `ready` is called with no arguments (`...`: the lambdas bind loop values as defaults).
    def _wait(self, name: str, ready: Callable[..., object]) -> None:
        server = next(s for s in self._servers if s.name == name)
        deadline = time.monotonic() + self.start_timeout
        last = ""
        while time.monotonic() < deadline:
            if server.proc is not None and server.proc.poll() is not None:
                tail = log_tail(server.log)
                error = PortTaken if port_was_taken(tail) else ControlPlaneError
                raise error(
                    f"{name} exited with code {server.proc.returncode}; {server.log}:\n{tail}"
                )
            try:
                if ready():
                    return
            except (OSError, ValueError, urllib.error.URLError) as e:
                last = str(e)
            time.sleep(0.25)
        raise ControlPlaneError(
            f"{name} not ready after {self.start_timeout:.0f}s (last: {last}); "
            f"{server.log}:\n{log_tail(server.log)}"
        )

    def stop(self, keep_workdir: bool | None = None) -> None:
        """Terminate the servers by PID (reverse start order) and remove the workdir."""
        procs = [
            {"pid": s.proc.pid, "exe": s.exe, "marker": str(self.dir)}
            for s in reversed(self._servers)
            if s.proc is not None
        ]
        left = terminate_pids(procs)
        for s in self._servers:
            if s.proc is not None and s.proc.poll() is None:
                s.proc.wait(timeout=5)
        self._servers.clear()
        atexit.unregister(self.stop)
        if left:
            raise ControlPlaneError(f"processes still alive after SIGKILL: {left}")
        keep = self.keep_workdir if keep_workdir is None else keep_workdir
        if (
            self.dir is not None
            and not keep
            and (self._own_workdir or (self.dir / STATE_FILE).exists())
        ):
            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def pids(self) -> dict[str, int]:
        return {s.name: s.proc.pid for s in self._servers if s.proc is not None}

    def _write_state(self) -> None:
        assert self.dir is not None
        state = {
            "kubeconfig": str(self.kubeconfig),
            "server": self.server,
            "ports": self.ports,
            "processes": [
                {"name": s.name, "pid": s.proc.pid, "exe": s.exe, "log": str(s.log)}
                for s in self._servers
                if s.proc is not None
            ],
        }
        tmp = self.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        tmp.replace(self.dir / STATE_FILE)

    # ---- API access (admin client cert, stdlib only) ----------------------
    def _ssl_context(self, verify: bool = True) -> ssl.SSLContext:
        assert self.dir is not None
        pki = self.dir / "pki"
        if not verify:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def _get(self, url: str, verify: bool = True) -> str:
        ctx = self._ssl_context(verify) if url.startswith("https:") else None
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            text: str = r.read().decode()
            return text

    def watch(self, path: str, since: str, seconds: int) -> Iterator[dict[str, Any]]:
        """The events of the collection at `path` after resourceVersion `since`, for
        `seconds` (the server ends the stream then), as the API server sends them."""
        query = f"watch=1&resourceVersion={since}&timeoutSeconds={seconds}"
        separator = "&" if "?" in path else "?"
        req = urllib.request.Request(
            f"{self.server}{path}{separator}{query}", headers={"Accept": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=seconds + 30, context=self._ssl_context()) as r:
            for line in r:
                if line.strip():
                    yield json.loads(line)

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """One call to the API server as the admin user; returns (status, JSON body)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.server}{path}",
            data=data,
            method=method,
            headers={
                "Content-Type": (
                    "application/merge-patch+json" if method == "PATCH" else "application/json"
                ),
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ssl_context()) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw or b"{}")
            except ValueError:
                return e.code, {"message": raw.decode(errors="replace")}
