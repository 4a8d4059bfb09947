"""A private containerd for tests: its own root, state, socket and config under a temporary
directory, never the machine's /var/lib/containerd or /run/containerd/containerd.sock
(the cluster tooling's), with the CRI plugin off. Started and stopped by PID; containers
run with `ctr` (whose `run IMAGE ID ARGS` replaces the entrypoint too: give whole
commands).

    with PrivateContainerd(tmp_path) as containerd:
        containerd.ctr("images", "import", archive)
        containerd.start("nn", image, ["hdfs", "namenode"], env=..., mounts=...)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

NAMESPACE = "elasticctr-test"


class PrivateContainerd:
    def __init__(self, namespace: str = NAMESPACE) -> None:
        # Unix socket paths are limited to 108 bytes: a short directory of its own.
        self.base = Path(tempfile.mkdtemp(prefix="ectr-", dir="/tmp"))
        self.address = str(self.base / "c.sock")
        self.namespace = namespace
        self._process: subprocess.Popen[bytes] | None = None
        self._running: list[str] = []

    def __enter__(self) -> PrivateContainerd:
        config = self.base / "config.toml"
        config.write_text(
            f"""version = 2
root = "{self.base / "root"}"
state = "{self.base / "state"}"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{self.address}"
[ttrpc]
  address = "{self.address}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.base / "opt"}"
"""
        )
        log = (self.base / "containerd.log").open("wb")
        self._process = subprocess.Popen(
            ["containerd", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"containerd exited: {self.log_tail()}")
            if self.ctr("version", check=False).returncode == 0:
                return self
            time.sleep(0.2)
        self.__exit__(None, None, None)
        raise RuntimeError(f"containerd did not answer on {self.address}: {self.log_tail()}")

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for name in reversed(self._running):
            self.stop(name)
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)  # by PID: only the one started here
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self.base, ignore_errors=True)
        with contextlib.suppress(OSError):  # only when empty: never another's state
            (Path("/run/containerd/runc") / self.namespace).rmdir()

    def log_tail(self) -> str:
        log = self.base / "containerd.log"
        return log.read_text(errors="replace")[-3000:] if log.is_file() else ""

    def ctr(
        self, *args: str | Path, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        command = ["ctr", "-a", self.address, "-n", self.namespace, *map(str, args)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {result.stderr}")
        return result

    def _private_dirs(self) -> list[str]:
        return [f"--runc-root={self.base / 'runc'}", f"--fifo-dir={self.base / 'fifo'}"]

    def _run_args(
        self, env: Mapping[str, str], mounts: Mapping[str, tuple[Path, bool]], read_only: bool
    ) -> list[str]:
        # ctr 1.6 has no --user: containers run as the image's USER. runc's state and the
        # I/O fifos in our directory too, not under /run/containerd (the machine's
        # containerd's); the shims' sockets still go to /run/containerd/s (fixed in 1.6,
        # named by a hash of our socket's path: no clash), and the shim's clean-up may
        # leave an empty /run/containerd/runc/<our namespace>, removed on exit.
        args = ["--net-host", *self._private_dirs()]
        if read_only:
            args.append("--read-only")
        for name, value in env.items():
            args += ["--env", f"{name}={value}"]
        for target, (source, writable) in mounts.items():
            mode = "rw" if writable else "ro"
            args += ["--mount", f"type=bind,src={source},dst={target},options=rbind:{mode}"]
        return args

    def run(
        self,
        name: str,
        image: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        mounts: Mapping[str, tuple[Path, bool]] | None = None,
        read_only: bool = True,
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion; stdout and stderr as the command wrote them."""
        args = self._run_args(env or {}, mounts or {}, read_only)
        return self.ctr("run", "--rm", *args, image, name, *command, check=False, timeout=timeout)

    def start(
        self,
        name: str,
        image: str,
        command: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        mounts: Mapping[str, tuple[Path, bool]] | None = None,
        read_only: bool = True,
    ) -> Path:
        """Start in the background; returns the file its output goes to."""
        log = self.base / f"{name}.log"
        args = self._run_args(env or {}, mounts or {}, read_only)
        self.ctr("run", "-d", f"--log-uri=file://{log}", *args, image, name, *command)
        self._running.append(name)
        return log

    def image_config(self, reference: str) -> dict[str, Any]:
        """The image's OCI config as containerd stores it (User, Entrypoint, Cmd, Env...)."""
        listing = self.ctr("images", "ls").stdout.splitlines()[1:]
        digests = {line.split()[0]: line.split()[2] for line in listing if line.strip()}
        manifest = json.loads(self.ctr("content", "get", digests[reference]).stdout)
        if "manifests" in manifest:  # an index: the amd64 manifest
            manifest = json.loads(
                self.ctr("content", "get", manifest["manifests"][0]["digest"]).stdout
            )
        blob = json.loads(self.ctr("content", "get", manifest["config"]["digest"]).stdout)
        return dict(blob.get("config", {}))

    def exec_in_image(
        self, name: str, reference: str, argv: Sequence[str], timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` instead of the image's entrypoint (like `docker run --entrypoint`),
        with the image's env, user and working directory, on a read-only root and a tmpfs
        /tmp. ctr 1.6 has no --entrypoint: an OCI spec file says it."""
        config = self.image_config(reference)
        spec = json.loads(self.ctr("oci", "spec").stdout)
        user = str(config.get("User") or "0")
        uid, _, gid = user.partition(":")
        if not uid.isdigit() or (gid and not gid.isdigit()):
            raise ValueError(f"{reference}: a numeric USER is expected, got {user!r}")
        spec["process"]["args"] = list(argv)
        spec["process"]["env"] = list(config.get("Env") or [])
        spec["process"]["cwd"] = config.get("WorkingDir") or "/"
        spec["process"]["user"] = {"uid": int(uid), "gid": int(gid or uid)}
        spec["root"]["readonly"] = True
        spec["mounts"].append(
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777"]}
        )  # fmt: skip
        spec["linux"].pop("cgroupsPath", None)
        # With a spec file ctr takes no image: the image's rootfs is mounted for it, on a
        # writable snapshot (runc makes /proc and /dev there; the spec's root stays
        # read-only for the process), dropped after.
        rootfs = self.base / f"{name}.rootfs"
        rootfs.mkdir()
        self.ctr("images", "mount", "--rw", reference, rootfs)
        try:
            spec["root"]["path"] = str(rootfs)
            spec_file = self.base / f"{name}.spec.json"
            spec_file.write_text(json.dumps(spec))
            return self.ctr(
                "run", "--rm", "--config", spec_file, name, check=False, timeout=timeout
            )
        finally:
            self.ctr("images", "unmount", "--rm", rootfs, check=False)

    def stop(self, name: str) -> None:
        self.ctr("task", "kill", "--signal", "SIGKILL", name, check=False)
        for _ in range(50):
            if self.ctr("task", "delete", name, check=False).returncode == 0:
                break
            time.sleep(0.2)
        self.ctr("container", "delete", name, check=False)
        if name in self._running:
            self._running.remove(name)


def available() -> str:
    """Why a private containerd cannot run here ("" when it can)."""
    if os.geteuid() != 0:
        return "a private containerd needs root"
    missing = [tool for tool in ("containerd", "ctr", "runc") if shutil.which(tool) is None]
    return f"not installed: {', '.join(missing)}" if missing else ""
