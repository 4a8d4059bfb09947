"""The pserver role: restore its part of the latest checkpoint (whatever pserver count took
it: reshard.py), then serve until trainer 0 stops the servers at the end of the job.

Paddle's `run_server` blocks in C++ without releasing the GIL, so the checkpoint upload
helper (`pserver-sync`, see checkpoint.py) runs as a child process; it exits when this
process does.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from elasticctr_common.slotconf import read_slot_conf
from elasticctr_common.storage import open_store
from elasticctr_common.trainer_json import TrainerConfig
from paddle.distributed import fleet

from . import checkpoint as ckpt
from . import reshard
from .program import SHARDS_PER_PSERVER, build_training_program, init_fleet
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


def restore(config: TrainerConfig, role: Role, slots: list[int], dense: int) -> None:
    """Load this pserver's part of the latest checkpoint, for this job's pserver count
    (reshard.py); `dense`: the values of this model's dense table."""
    checkpoints = open_store(config.runner.checkpoint_uri)
    last = ckpt.latest(checkpoints)
    if last is None:
        return
    # Resolved against this checkpoint (with_resolved_model): crosses auto are its own.
    ckpt.check_layout(checkpoints, last, ckpt.ModelLayout.of(config.hyper_parameters, slots))
    servers = len(role.pserver_endpoints)
    directory = Path(config.runner.work_dir, role.name, f"restore-pass-{last.pass_id}")
    shutil.rmtree(directory, ignore_errors=True)  # an earlier attempt's
    restored = reshard.build(
        checkpoints, last.pass_id, last.pservers, role.index, servers, SHARDS_PER_PSERVER,
        dense, directory,
    )  # fmt: skip
    server = fleet.fleet._runtime_handle._server
    for table in restored.tables:
        # Table::Load, sparse and dense alike. It returns nothing here: a directory it
        # refuses leaves the table empty with only a warning in the log, so reshard.py
        # writes exactly the files it asks for.
        server.load_sparse(str(directory), "0", table)
    shutil.rmtree(directory, ignore_errors=True)
    how = (
        f"taken with {last.pservers} pservers, resharded to {servers}"
        if last.pservers != servers
        else f"taken with {servers} pservers"
    )
    log.info(
        "pserver %d: checkpoint pass %d %s: %s",
        role.index, last.pass_id, how, json.dumps(reshard.describe(restored)),
    )  # fmt: skip
    print(f"pserver {role.index}: restored checkpoint pass {last.pass_id} ({how})", flush=True)


def run_pserver(config: TrainerConfig, role: Role) -> None:
    config = ckpt.with_resolved_model(config)
    slots = read_slot_conf(config.runner.slot_conf)
    init_fleet(role)
    net = build_training_program(config.hyper_parameters, len(slots), len(role.pserver_endpoints))
    fleet.init_server()
    restore(config, role, slots, net.dense_values)
    helper = start_sync_helper(config, role)
    try:
        host = role.bind_host or role.pserver_endpoints[role.index].rsplit(":", 1)[0]
        print(f"pserver {role.index}: serving on {host}:{role.port}", flush=True)
        fleet.fleet._runtime_handle._server.run_server(host, role.port)
    finally:
        helper.terminate()
        helper.wait(timeout=30)
