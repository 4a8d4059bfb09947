"""The export stage of the turnaround benchmark: trainer 0's own export (export.py's
`prepare_version` + `publish_version`) of a sparse table of N trained keys, from a real
pserver, timed in a process of its own.

    PYTHONPATH=images/trainer:images/common python bench/turnaround_export.py \
        --keys 1000000 --work DIR

The table is filled through the training program itself: one pass of `train_from_dataset`
over MultiSlot lines whose first slot lists 10,000 distinct keys each (1..N, the others
padding), so every key 1..N is pushed once and exists on the pserver (sparse_dim N + 1).
Then the peak resident memory is reset (/proc/self/clear_refs) and the export runs into
`<work>/models` (file://). Prints one JSON line: dump seconds (`prepare_version`: the pulls,
the local SequenceFile parts and the model check's scan), write seconds (`publish_version`:
the upload), keys, the trainer's peak RSS during the export and the pserver's RSS.

With `--delta F`, the export keeps trainer 0's snapshot (as the trainer does), then a second
pass pushes a fraction F of the keys again (every 1/F-th key), and a second export is timed:
a delta on the first (the whole table pulled and compared with the snapshot, the changed
rows written). A second JSON line gives its figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from elasticctr_common.ports import free_ports

SLOTS = 26
KEYS_PER_LINE = 10_000


def proc_status_kib(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def write_fill_data(path: Path, keys: int) -> None:
    """MultiSlot lines (label, show, click, 26 slots) listing keys 1..`keys` in slot 0."""
    padding = " ".join(["1 0"] * (SLOTS - 1))
    with open(path, "w") as out:
        for start in range(1, keys + 1, KEYS_PER_LINE):
            ids = range(start, min(start + KEYS_PER_LINE, keys + 1))
            out.write(f"1 0 1 1 1 0 {len(ids)} {' '.join(map(str, ids))} {padding}\n")


def write_config(work: Path, keys: int) -> Path:
    (work / "slot.conf").write_text("".join(f"{101 + i}\n" for i in range(SLOTS)))
    runner = {
        "train_data_uri": f"file://{work}/unused", "start_date_hr": "20191221/00",
        "end_date_hr": "20191221/00", "slot_conf": str(work / "slot.conf"),
        "model_uri": f"file://{work}/models", "checkpoint_uri": f"file://{work}/ckpt",
        "work_dir": str(work / "scratch"),
    }  # fmt: skip
    config = work / "trainer.json"
    config.write_text(json.dumps({"runner": runner, "hyper_parameters": {"sparse_dim": keys + 1}}))
    return config


def write_delta_data(path: Path, keys: int, fraction: float) -> int:
    """MultiSlot lines listing every (1/fraction)-th key of 1..`keys`, clicked (the fill's
    are not: the gradient of a model saturated on the fill's label would leave the values
    as they are); how many."""
    step = max(1, round(1 / fraction))
    chosen = range(1, keys + 1, step)
    padding = " ".join(["1 0"] * (SLOTS - 1))
    with open(path, "w") as out:
        for start in range(0, len(chosen), KEYS_PER_LINE):
            ids = chosen[start : start + KEYS_PER_LINE]
            out.write(f"1 1 1 1 1 1 {len(ids)} {' '.join(map(str, ids))} {padding}\n")
    return len(chosen)


def export(
    config_path: Path, fill: Path, pserver_pid: int, delta: Path | None = None
) -> list[dict[str, Any]]:
    import paddle
    from elasticctr_common.trainer_json import load_config
    from elasticctr_trainer.delta import SNAPSHOT
    from elasticctr_trainer.roles import role_from_env
    from elasticctr_trainer.trainer import Trainer
    from paddle.distributed import fleet

    config = load_config(config_path)
    trainer = Trainer(config, role_from_env())
    trainer.build()
    fleet.init_worker()

    def train(path: Path) -> None:
        """One pass over `path` (a dataset is good for one pass)."""
        dataset = paddle.distributed.QueueDataset()
        dataset.init(batch_size=8, thread_num=1, use_var=trainer.net.feed_order,
                     pipe_command="cat")  # fmt: skip
        dataset.set_filelist([str(path)])
        trainer.exe.train_from_dataset(trainer.main, dataset, thread=1)
        trainer.flush_pushes()

    try:
        train(fill)
        snapshot = Path(config.runner.work_dir) / SNAPSHOT if delta else None
        results = [timed_export(trainer, config, pserver_pid, snapshot, None)]
        if delta is not None:
            train(delta)
            results.append(timed_export(trainer, config, pserver_pid, snapshot,
                                        results[0]["version"]))  # fmt: skip
        return results
    finally:
        fleet.fleet._runtime_handle._worker.stop_server()
        fleet.stop_worker()


def timed_export(
    trainer: Any, config: Any, pserver_pid: int, snapshot: Path | None, parent: int | None
) -> dict[str, Any]:
    """One export as finish_pass does it, timed; with `snapshot` and `parent`, a delta."""
    import paddle
    from elasticctr_common.storage import open_store
    from elasticctr_trainer.export import prepare_version, publish_version

    hyper = config.hyper_parameters
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS from here on
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="turnaround-export-") as tmp:
        exe = paddle.static.Executor(paddle.CPUPlace())  # as finish_pass does
        prepared = prepare_version(exe, trainer.test_program, trainer.dump_program,
                                   trainer.net, hyper.sparse_dim, Path(tmp), snapshot=snapshot,
                                   parent=parent)  # fmt: skip
        dumped = time.perf_counter()
        models = open_store(config.runner.model_uri)
        version = publish_version(models, prepared, trainer.slots, hyper.sparse_dim,
                                  hyper.embedding_dim, {})  # fmt: skip
        written = time.perf_counter()
    return {
        "keys": prepared.sparse_keys,
        "written_keys": prepared.written_keys,
        "parent": prepared.parent,
        "dump_s": dumped - started,
        "diff_s": prepared.diff.seconds if prepared.diff else 0.0,
        "write_s": written - dumped,
        "version": version.id,
        "input": version.input,
        "peak_rss_kib": proc_status_kib("self", "VmHWM"),
        "pserver_rss_kib": proc_status_kib(pserver_pid, "VmHWM"),
    }


def main() -> None:
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--keys", type=int, required=True)
    args.add_argument("--work", type=Path, required=True)
    args.add_argument("--delta", type=float, help="then a delta export of this key fraction")
    opts = args.parse_args()
    opts.work.mkdir(parents=True, exist_ok=True)
    config = write_config(opts.work, opts.keys)
    fill = opts.work / "fill.txt"
    write_fill_data(fill, opts.keys)
    delta = None
    if opts.delta:
        delta = opts.work / "delta.txt"
        write_delta_data(delta, opts.keys, opts.delta)
    (port,) = free_ports(1)
    env = {"PADDLE_PSERVERS_IP_PORT_LIST": f"localhost:{port}", "PADDLE_TRAINERS_NUM": "1"}
    with open(opts.work / "pserver.log", "wb") as log:
        pserver = subprocess.Popen(
            [sys.executable, "-m", "elasticctr_trainer", "run", "--config", str(config)],
            env={**os.environ, **env, "TRAINING_ROLE": "PSERVER", "PADDLE_PSERVER_ID": "0",
                 "PADDLE_PORT": str(port), "POD_IP": "127.0.0.1"},
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        os.environ.update({**env, "TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0"})
        results = export(config, fill, pserver.pid, delta)
    finally:
        if pserver.poll() is None:
            pserver.terminate()
        pserver.wait(timeout=60)
    for result in results:
        print(json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip Paddle's static destructors, which can crash at exit


if __name__ == "__main__":
    main()
