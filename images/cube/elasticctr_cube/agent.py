"""cube-agent: beside each cube-server; fetches, verifies and loads its shard of a version.

Commands come from cube-transfer over HTTP (:8001); the agent passes them on to its server's
control port (:8028, on loopback: the two share a pod): prepare V (fetch the shard file of
V from `<cube_uri>/shards-<N>/<V>/` into the data directory, check its size and SHA-256
against the manifest and that every value is finite, have the server load it into its
background slot), switch V, abort V, unload V. A restarted server comes back empty: the
agent then restores the committed version (`<cube_uri>/shards-<N>/current`) on its own, so
a shard never stays down after a crash.

A delta version V is applied on its parent when the server holds the parent: only V's
delta file is fetched. Otherwise (a restart, a rollback, a version whose parent the server
dropped) the agent fetches the chain from the base, or from the newest version of the
chain the server holds, and the server loads it in one go: it never applies a delta on
another parent (it checks each file's parent).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from elasticctr_common.contract import (
    CUBE_AGENT_PORT,
    CUBE_SERVER_CONTROL_PORT,
    DATA_DIR,
    CubeEnv,
)
from elasticctr_common.exposition import CONTENT_TYPE, Exposition
from elasticctr_common.metrics import (
    AGENT_FAILURE_CAUSES,
    CUBE_AGENT,
    PREPARE_RESULTS,
    PREPARE_STATES,
)
from elasticctr_common.shutdown import DRAIN_SECONDS, StopSignal
from elasticctr_common.storage import open_store

from .cliargs import env_option
from .httpjson import ApiError, Handler, HttpCallError, Text, call, drain_all, serve
from .manifest import Manifest, layout_dir, read_chain, read_current, read_manifest
from .shardfile import nonfinite_text, scan_shard_file

log = logging.getLogger("cube-agent")
KEEP_PREPARES = 8
IN_PROGRESS = PREPARE_STATES
# The failure cause of a prepare by the state it was in (metrics.AGENT_FAILURE_CAUSES).
FAILED_IN = {"queued": "start", "fetching": "fetch", "verifying": "verify", "loading": "load"}


class AgentError(Exception):
    """A prepare step failed; the message says which and why."""


class Agent:
    def __init__(
        self,
        *,
        shard: int,
        shard_num: int,
        cube_uri: str,
        server_url: str,
        data_dir: str,
        load_timeout: float = 600.0,
    ) -> None:
        self.shard, self.shard_num = shard, shard_num
        # Only versions built for this shard count (manifest.py).
        self.cube_store = open_store(cube_uri).child(layout_dir(shard_num))
        self.server_url = server_url.rstrip("/")
        self.data_dir = Path(data_dir)
        self.load_timeout = load_timeout
        self._lock = threading.Lock()  # guards _prepares and _aborted
        self._work = threading.Lock()  # one fetch + load at a time
        self._prepares: dict[int, dict[str, Any]] = {}
        self._aborted: set[int] = set()
        self._working: set[int] = set()  # versions a worker is preparing (or queued for)
        self._needs: dict[int, set[int]] = {}  # versions whose files a prepare uses
        self.metrics = Exposition(CUBE_AGENT)
        for result in PREPARE_RESULTS:  # every series from the start, at 0
            self.metrics["prepares_total"].labels(result)
        for cause in AGENT_FAILURE_CAUSES:
            self.metrics["failures_total"].labels(cause)
        self.metrics["prepared_version"].set(-1)

    # -- the server -------------------------------------------------------------------
    def server(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        code, answer = call(method, self.server_url + path, body, timeout)
        if code >= 400 and path != "/readyz":
            raise ApiError(code, f"cube-server {path}: {(answer or {}).get('error', code)}")
        return answer

    def held_versions(self) -> set[int]:
        status = self.server("GET", "/control/status")
        return {v for v in (status["cur_version"], status["bg_version"]) if v is not None}

    def held_files(self) -> set[int]:
        """The versions whose files the server maps: the chains of the versions it holds."""
        status = self.server("GET", "/control/status")
        held = [status.get(slot) or {} for slot in ("current", "background")]
        return {int(v) for h in held for v in h.get("chain") or [h.get("version")] if v is not None}

    # -- prepare: fetch, verify, load -------------------------------------------------
    def prepare(self, version: int) -> dict[str, Any]:
        with self._lock:
            self._aborted.discard(version)
            state = self._prepares.get(version)
            if state and state["state"] in IN_PROGRESS and version in self._working:
                return dict(state)
            state = {"version": version, "state": "queued", "error": None, "started": time.time()}
            self._prepares[version] = state
            for old in sorted(self._prepares)[:-KEEP_PREPARES]:
                del self._prepares[old]
            self._working.add(version)
        threading.Thread(target=self._prepare, args=(version,), daemon=True).start()
        return dict(state)

    def _set(self, version: int, state: str, error: str | None = None) -> None:
        with self._lock:
            entry = self._prepares.setdefault(version, {"version": version, "started": time.time()})
            entry.update(state=state, error=error, seconds=round(time.time() - entry["started"], 3))

    def _check_abort(self, version: int) -> None:
        with self._lock:
            if version in self._aborted:
                raise AgentError(f"version {version}: aborted")

    def _prepare(self, version: int) -> None:
        try:
            with self._work:
                self._run(version)
        finally:
            with self._lock:
                self._working.discard(version)

    def _run(self, version: int, switch: bool = False) -> bool:
        """Fetch, verify and load `version` (and switch to it): the prepare state ends
        ready, failed or aborted, whoever asked (the transfer, or a restore). The caller
        holds `_work`."""
        switching = False
        try:
            self._check_abort(version)
            self.prepare_now(version)
            switching = True
            if switch:
                self.server("POST", "/control/switch", {"version": version})
        except Exception as err:  # storage clients raise their own types: all fail the prepare
            with self._lock:
                aborted = version in self._aborted
                step = self._prepares.get(version, {}).get("state", "queued")
            message = str(err) if isinstance(err, AgentError | ApiError) else _describe(err)
            result = "aborted" if aborted else "failed"
            self._set(version, result, message)
            if not aborted:
                cause = "switch" if switching else FAILED_IN.get(step, "start")
                self.metrics["failures_total"].labels(cause).inc()
            self._count(version, result)
            log.warning("prepare of version %s failed: %s", version, err)
            self.cleanup()
            return False
        self._set(version, "ready")
        self._count(version, "ready")
        self.metrics["last_success_timestamp_seconds"].set_to_current_time()
        self.metrics["prepared_version"].set(version)
        return True

    def _count(self, version: int, result: str) -> None:
        with self._lock:
            seconds = self._prepares.get(version, {}).get("seconds", 0.0)
        self.metrics["prepares_total"].labels(result).inc()
        self.metrics["prepare_seconds"].labels(result).observe(seconds)

    def render_metrics(self) -> bytes:
        """The exposition, with the prepares under way counted now."""
        with self._lock:
            states = [p["state"] for v, p in self._prepares.items() if v in self._working]
        gauge = self.metrics["prepares_in_progress"]
        for state in PREPARE_STATES:
            gauge.labels(state).set(states.count(state))
        return self.metrics.render()

    def prepare_now(self, version: int) -> None:
        """Fetch, verify and load `version` (caller holds no lock; raises on failure)."""
        held = self.held_versions()
        if version in held:
            return
        self._set(version, "fetching")
        files = self._files_to_load(version, held)
        paths = []
        for manifest in files:
            paths.append(str(self.fetch(manifest, preparing=version)))
            self._check_abort(version)
        self._set(version, "loading")
        body: dict[str, Any] = {"version": version}
        if len(paths) == 1:
            body["path"] = paths[0]
        else:
            body["chain"] = paths
        self.server("POST", "/control/load", body)
        deadline = time.monotonic() + self.load_timeout
        while time.monotonic() < deadline:
            self._check_abort(version)
            status = self.server("GET", "/control/status")
            if version in (status["cur_version"], status["bg_version"]):
                return
            load = status.get("load") or {}
            if load.get("version") == version and load.get("state") in ("failed", "cancelled"):
                raise AgentError(
                    f"cube-server could not load version {version}: {load.get('error')}"
                )
            time.sleep(0.02)
        raise AgentError(f"cube-server did not load version {version} in {self.load_timeout}s")

    def _files_to_load(self, version: int, held: set[int]) -> list[Manifest]:
        """The manifests whose shard files make `version` on what the server holds: its
        own file when it is a base or its parent is held, else its chain from the newest
        held version of it (or from its base)."""
        manifest = read_manifest(self.cube_store, version)
        if not manifest.is_delta or manifest.parent in held:
            files = [manifest]
        else:
            chain = read_chain(self.cube_store, version)
            start = max((i + 1 for i, m in enumerate(chain) if m.version in held), default=0)
            files = chain[start:]
        with self._lock:
            self._needs[version] = {m.version for m in files}
        return files

    def local_path(self, version: int, file: str) -> Path:
        return self.data_dir / str(version) / file

    def fetch(self, manifest: Manifest, preparing: int) -> Path:
        """Download (unless it is here already) and verify this shard's file of `manifest`,
        for the prepare of version `preparing`."""
        version = manifest.version
        if manifest.shard_num != self.shard_num:
            raise AgentError(
                f"version {version} has {manifest.shard_num} shards, this agent serves shard "
                f"{self.shard} of {self.shard_num}"
            )
        entry = manifest.entry(self.shard)
        local = self.local_path(version, entry.file)
        if not (local.exists() and local.stat().st_size == entry.bytes):
            self.cube_store.child(str(version)).download(entry.file, local)
        self._set(preparing, "verifying")
        corrupt = f"shard file of version {version} is corrupt"
        size = local.stat().st_size
        if size != entry.bytes:
            _refuse(local, f"{corrupt}: size {size} bytes, manifest says {entry.bytes}")
        scan = scan_shard_file(local)
        if scan.sha256 != entry.sha256:
            _refuse(local, f"{corrupt}: sha256 {scan.sha256}, manifest says {entry.sha256}")
        if scan.nonfinite_keys:  # written by hand, or by a builder that did not check
            refused = nonfinite_text(scan.nonfinite_keys, scan.named_keys)
            _refuse(local, f"shard file {entry.file} of version {version} is refused: {refused}")
        return local

    # -- switch, abort, unload --------------------------------------------------------
    def switch(self, version: int) -> dict[str, Any]:
        answer: dict[str, Any] = self.server("POST", "/control/switch", {"version": version})
        self.cleanup()
        return answer

    def abort(self, version: int) -> dict[str, Any]:
        with self._lock:
            self._aborted.add(version)
            if version in self._prepares and self._prepares[version]["state"] in IN_PROGRESS:
                self._prepares[version].update(state="aborted", error="aborted")
        status = self.server("GET", "/control/status", timeout=2.0)
        result = "nothing held"
        if status["bg_version"] == version or (status.get("load") or {}).get("version") == version:
            result = self.server("POST", "/control/unload", {"version": version})["result"]
        self.cleanup()
        return {"result": result, "version": version}

    def unload(self, version: int) -> dict[str, Any]:
        answer: dict[str, Any] = self.server("POST", "/control/unload", {"version": version})
        self.cleanup()
        return answer

    def cleanup(self) -> None:
        """Delete local files of versions the server neither maps nor is about to load."""
        try:
            keep = self.held_files()
        except (ApiError, HttpCallError):
            return
        with self._lock:
            busy = {v for v, p in self._prepares.items() if p["state"] in IN_PROGRESS}
            keep |= busy | {n for v in busy for n in self._needs.get(v, ())}
            self._needs = {v: n for v, n in self._needs.items() if v in busy}
        for child in self.data_dir.glob("*") if self.data_dir.exists() else []:
            if child.name.isdigit() and int(child.name) not in keep:
                shutil.rmtree(child, ignore_errors=True)

    # -- restore after a server restart -----------------------------------------------
    def restore_once(self) -> int | None:
        """If the server holds no current version, bring back the committed one."""
        try:
            status = self.server("GET", "/control/status", timeout=2.0)
        except (ApiError, HttpCallError):
            return None  # server down: try again later
        if status["cur_version"] is not None or not self._work.acquire(blocking=False):
            return None
        try:
            return self._restore()
        except Exception as err:  # the store is unreachable: try again at the next interval
            log.warning("restore failed (will retry): %s", _describe(err))
            return None
        finally:
            self._work.release()

    def _restore(self) -> int | None:
        committed = read_current(self.cube_store)
        if committed is None:
            return None
        log.warning("server holds no version: restoring committed version %s", committed)
        with self._lock:
            self._aborted.discard(committed)
            mine = committed not in self._working
            self._working.add(committed)
        try:
            # The prepare state of `committed` ends ready (or failed) here too: a later
            # rollout to it (a rollback) must not wait for a prepare nobody is doing.
            if not self._run(committed, switch=True):
                return None
            self.metrics["restores_total"].inc()
        finally:
            if mine:
                with self._lock:
                    self._working.discard(committed)
        self.cleanup()
        return committed

    def status(self) -> dict[str, Any]:
        try:
            server: Any = self.server("GET", "/control/status", timeout=2.0)
        except (ApiError, HttpCallError) as err:
            server = {"error": str(err)}
        with self._lock:
            # "active": a worker is on it; a state in progress without one is stale.
            prepares = {
                str(v): {**p, "active": v in self._working} for v, p in self._prepares.items()
            }
        return {
            "shard": self.shard,
            "shard_num": self.shard_num,
            "server": server,
            "prepares": prepares,
        }


def _refuse(local: Path, message: str) -> NoReturn:
    """Delete a fetched shard file that must not be loaded, and fail the prepare."""
    local.unlink(missing_ok=True)
    raise AgentError(message)


def _describe(err: Exception) -> str:
    return f"{type(err).__name__}: {err}"


def _version(body: dict[str, Any]) -> int:
    try:
        return int(body["version"])
    except (KeyError, TypeError, ValueError):
        raise ApiError(400, 'needs "version": an integer') from None


def routes(agent: Agent) -> dict[tuple[str, str], Handler]:
    return {
        ("GET", "/healthz"): lambda _: (200, {"status": "ok"}),
        ("GET", "/agent/status"): lambda _: (200, agent.status()),
        ("GET", "/metrics"): lambda _: (200, Text(CONTENT_TYPE, agent.render_metrics())),
        ("POST", "/agent/prepare"): lambda b: (202, agent.prepare(_version(b))),
        ("POST", "/agent/switch"): lambda b: (200, agent.switch(_version(b))),
        ("POST", "/agent/abort"): lambda b: (200, agent.abort(_version(b))),
        ("POST", "/agent/unload"): lambda b: (200, agent.unload(_version(b))),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options, defaulting to the environment the Pulumi program sets (cliargs.py)."""
    p = argparse.ArgumentParser(prog="elasticctr_cube agent", description=__doc__)
    env_option(p, "--shard", CubeEnv.SHARD_INDEX, type=int, help="this shard's index")
    env_option(p, "--shard-num", CubeEnv.SHARD_NUM, type=int, help="number of shards")
    env_option(p, "--cube-uri", CubeEnv.CUBE_URI, help="where cube-transfer publishes versions")
    p.add_argument(
        "--server",
        default=f"http://127.0.0.1:{CUBE_SERVER_CONTROL_PORT}",
        help="this shard's cube-server, its control port (--control-port)",
    )
    env_option(
        p,
        "--data-dir",
        CubeEnv.DATA_DIR,
        default=f"{DATA_DIR}/cube",
        help="local shard files (shared with the server)",
    )
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=CUBE_AGENT_PORT)
    p.add_argument("--restore-interval", type=float, default=2.0)
    p.add_argument("--load-timeout", type=float, default=600.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s cube-agent %(message)s")
    if not 0 <= args.shard < args.shard_num:
        raise SystemExit(
            f"cube-agent: need 0 <= --shard < --shard-num, got {args.shard}/{args.shard_num}"
        )
    agent = Agent(
        shard=args.shard,
        shard_num=args.shard_num,
        cube_uri=args.cube_uri,
        server_url=args.server,
        data_dir=args.data_dir,
        load_timeout=args.load_timeout,
    )
    stop = StopSignal().install()
    server = serve(args.host, args.port, routes(agent))
    log.info(
        "shard %s of %s on port %s, server %s", args.shard, args.shard_num, args.port, args.server
    )
    while not stop.is_set():
        agent.restore_once()
        stop.wait(args.restore_interval)
    log.info("stopping: draining requests in flight")
    drain_all([server], DRAIN_SECONDS)
    return 0
