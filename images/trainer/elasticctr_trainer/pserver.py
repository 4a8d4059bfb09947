"""The pserver role: restore the latest checkpoint shard, then serve until trainer 0 stops
the servers at the end of the job.

Paddle's `run_server` blocks in C++ without releasing the GIL, so the checkpoint upload
helper (`pserver-sync`, see checkpoint.py) runs as a child process; it exits when this
process does.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

from elasticctr_common.slotconf import read_slot_conf
from elasticctr_common.storage import open_store
from elasticctr_common.trainer_json import TrainerConfig
from paddle.distributed import fleet

from . import checkpoint as ckpt
from .program import build_training_program, init_fleet
from .roles import Role

log = logging.getLogger(__name__)


def start_sync_helper(config: TrainerConfig, role: Role) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "elasticctr_trainer", "pserver-sync",
        "--checkpoint-uri", config.runner.checkpoint_uri,
        "--rank", str(role.index),
        "--parent-pid", str(os.getpid()),
    ]  # fmt: skip
    return subprocess.Popen(command, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def restore(config: TrainerConfig, role: Role) -> None:
    checkpoints = open_store(config.runner.checkpoint_uri)
    last = ckpt.latest(checkpoints)
    if last is None:
        return
    if last.pservers != len(role.pserver_endpoints):
        raise RuntimeError(
            f"checkpoint pass {last.pass_id} was taken with {last.pservers} pservers, this "
            f"job has {len(role.pserver_endpoints)}: resharding is not supported"
        )
    directory = os.path.join(config.runner.work_dir, role.name, f"restore-pass-{last.pass_id}")
    tables = ckpt.download_shard(checkpoints, last, role.index, directory)
    server = fleet.fleet._runtime_handle._server
    for table in tables:
        server.load_sparse(directory, "0", table)  # Table::Load, sparse and dense alike
    shutil.rmtree(directory, ignore_errors=True)
    log.info("pserver %d restored tables %s of pass %d", role.index, tables, last.pass_id)
    print(f"pserver {role.index}: restored checkpoint pass {last.pass_id}", flush=True)


def run_pserver(config: TrainerConfig, role: Role) -> None:
    slots = read_slot_conf(config.runner.slot_conf)
    init_fleet(role)
    build_training_program(config.hyper_parameters, len(slots), len(role.pserver_endpoints))
    fleet.init_server()
    restore(config, role)
    helper = start_sync_helper(config, role)
    try:
        host = role.bind_host or role.pserver_endpoints[role.index].rsplit(":", 1)[0]
        print(f"pserver {role.index}: serving on {host}:{role.port}", flush=True)
        fleet.fleet._runtime_handle._server.run_server(host, role.port)
    finally:
        helper.terminate()
        helper.wait(timeout=30)
