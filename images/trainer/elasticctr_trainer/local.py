"""Local mode: N pservers and M trainers as processes on this machine, with the same code
and environment contract as the cluster (host-name endpoints on loopback).

The job fails as a whole, like a Volcano job: when any process exits non-zero, the
others are stopped (after a short grace in which the trainers may exit on their own).
Logs go to `<log_dir>/<role>-<i>.log`, PIDs to `<role>-<i>.pid`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from elasticctr_common.contract import TrainerEnv
from elasticctr_common.ports import free_ports

SHUTDOWN_GRACE_SECONDS = 30.0
FAILURE_GRACE_SECONDS = 10.0


def process_envs(
    pservers: int, trainers: int, ports: list[int], metrics_ports: list[int] | None = None
) -> dict[str, dict[str, str]]:
    """Each process's environment: `ports` the pservers', `metrics_ports` the trainers'
    /metrics (on one machine they cannot share the contract's port; None: none)."""
    common = {
        TrainerEnv.PSERVERS: ",".join(f"localhost:{p}" for p in ports),
        TrainerEnv.TRAINERS_NUM: str(trainers),
    }
    envs = {}
    for i, port in enumerate(ports[:pservers]):
        envs[f"pserver-{i}"] = {
            **common, TrainerEnv.ROLE: "PSERVER", TrainerEnv.PSERVER_ID: str(i),
            TrainerEnv.PSERVER_PORT: str(port), TrainerEnv.POD_IP: "127.0.0.1",
        }  # fmt: skip
    for i in range(trainers):
        envs[f"trainer-{i}"] = {
            **common, TrainerEnv.ROLE: "TRAINER", TrainerEnv.TRAINER_ID: str(i),
            TrainerEnv.METRICS_PORT: str(metrics_ports[i] if metrics_ports else 0),
        }  # fmt: skip
    return envs


def run_local(config: str, pservers: int, trainers: int, log_dir: str) -> int:
    """Run the job; return 0 when every trainer finished, 1 otherwise."""
    logs = Path(log_dir)
    logs.mkdir(parents=True, exist_ok=True)
    envs = process_envs(pservers, trainers, free_ports(pservers), free_ports(trainers))
    pythonpath = os.pathsep.join(p for p in sys.path if p)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    command = [sys.executable, "-m", "elasticctr_trainer", "run", "--config", config]
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        for name, env in envs.items():  # pservers first
            with open(logs / f"{name}.log", "wb") as log:
                procs[name] = subprocess.Popen(
                    command,
                    env={**os.environ, **env, "PYTHONPATH": pythonpath},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            (logs / f"{name}.pid").write_text(str(procs[name].pid))
        return _supervise(procs)
    finally:
        _stop(procs)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # runs run_local's `finally`, which stops the processes


def _supervise(procs: dict[str, subprocess.Popen[bytes]]) -> int:
    """1 as soon as any process fails; 0 once every trainer finished (trainer 0 stops the
    pservers at the end, so they exit 0 too)."""
    trainers = [p for n, p in procs.items() if n.startswith("trainer-")]
    while True:
        for name, proc in procs.items():
            code = proc.poll()
            if code not in (None, 0):
                # The other trainers learn of a failed pass from trainer 0 and exit on their
                # own, with the reason in their logs: a short grace before stopping them.
                deadline = time.time() + FAILURE_GRACE_SECONDS
                while time.time() < deadline and any(t.poll() is None for t in trainers):
                    time.sleep(0.2)
                print(f"local: {name} exited with {code}; stopping the job", file=sys.stderr)
                return 1
        if all(t.poll() == 0 for t in trainers):
            deadline = time.time() + SHUTDOWN_GRACE_SECONDS
            while time.time() < deadline and any(p.poll() is None for p in procs.values()):
                time.sleep(0.2)
            return 0
        time.sleep(0.2)


def _stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.time() + 10
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
