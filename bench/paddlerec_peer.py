"""PaddleRec's own static parameter-server trainer on our data, as a peer to compare with:
`models/rank/dnn` (its `static_model_lod.py`: variable-length slots, the sparse table on
the pserver) trained by its `tools/static_ps_trainer.py`, 1 pserver + 1 trainer started
by Paddle's launcher, from a PaddleRec checkout given on the command line (never part of
this repository).

    python bench/paddlerec_peer.py --paddlerec /path/to/PaddleRec --data MULTISLOT_DIR \
        --work DIR --slots 26 --sparse-dim 1000001 --batch-size 512 --threads 1

The same examples as ours, already in MultiSlot text (label, show, click, the slots),
rewritten to the model's inputs: label, the 26 slots, and its 13 dense features as
zeros (our data has none). Network as the stack's where PaddleRec lets it be set:
embedding dim 9, FC 400-400-400, Adam 1e-4 (lazy on the table), async; its own
accessor and sparse rule. No parsing in its loop (`cat` as the pipe), like the local
bound. Prints one JSON line with PaddleRec's own examples/s of the epoch ("ips").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

DENSE = 13


def rewrite(source: Path, target: Path) -> int:
    """Our MultiSlot lines -> label, slots, 13 dense zeros; the number of lines."""
    zeros = f" {DENSE} " + " ".join(["0"] * DENSE)
    count = 0
    with open(source) as lines, open(target, "w") as out:
        for line in lines:
            tokens = line.split()
            # 1 <label> 1 <show> 1 <click> <n> ids... per slot
            out.write(f"1 {tokens[1]} {' '.join(tokens[6:])}{zeros}\n")
            count += 1
    return count


def write_config(work: Path, opts: argparse.Namespace) -> Path:
    """config.yaml, and beside it the `static_model` module PaddleRec imports from the
    config's directory: a shim naming the variable-length-slot model of the checkout."""
    models = opts.paddlerec / "models/rank/dnn"
    (work / "static_model.py").write_text(
        f"import sys\nsys.path.insert(0, {str(models)!r})\n"
        "from static_model_lod import StaticModel  # noqa: E402,F401\n"
    )
    lines = [
        "hyper_parameters:",
        "  optimizer: {class: Adam, learning_rate: 0.0001, adam_lazy_mode: True}",
        f"  sparse_inputs_slots: {opts.slots + 1}",
        f"  sparse_feature_number: {opts.sparse_dim}",
        "  sparse_feature_dim: 9",
        f"  dense_input_dim: {DENSE}",
        "  fc_sizes: [400, 400, 400]",
        "  distributed_embedding: 1",
        "runner:",
        "  epochs: 1",
        "  print_interval: 1000",
        '  sync_mode: "async"',
        f"  thread_num: {opts.threads}",
        "  use_gpu: 0",
        "  use_auc: False",
        '  reader_type: "QueueDataset"',
        # PaddleRec appends "<yaml> <utils dir>" to the pipe command: sh drops them.
        '  pipe_command: "sh -c cat --"',
        '  train_reader_path: "no_python_reader"',
        "  dataset_debug: False",
        "  split_file_list: False",
        f"  train_batch_size: {opts.batch_size}",
        f'  train_data_dir: "{work / "data"}"',
        f'  model_save_path: "{work / "model"}"',
    ]
    config = work / "config.yaml"
    config.write_text("\n".join(lines) + "\n")
    return config


def wait_for_worker(log: Path, launcher: subprocess.Popen[bytes], timeout: float = 900) -> str:
    """The worker's log once it says it is done (or the launcher ended, or time is up)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline and launcher.poll() is None:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "Run Success, Exit." in text or "Traceback" in text:
            break
        time.sleep(0.5)
    return log.read_text(errors="replace") if log.exists() else text


def main() -> None:
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--paddlerec", type=Path, required=True, help="a PaddleRec checkout")
    args.add_argument("--data", type=Path, required=True, help="our MultiSlot text files")
    args.add_argument("--work", type=Path, required=True)
    args.add_argument("--slots", type=int, required=True)
    args.add_argument("--sparse-dim", type=int, required=True)
    args.add_argument("--batch-size", type=int, required=True)
    args.add_argument("--threads", type=int, default=1)
    opts = args.parse_args()
    opts.paddlerec = opts.paddlerec.resolve()
    (opts.work / "data").mkdir(parents=True, exist_ok=True)
    for source in sorted(opts.data.iterdir()):
        target = opts.work / "data" / source.name
        if not target.exists():
            rewrite(source, target)
    config = write_config(opts.work, opts)
    logs = opts.work / "log"
    shutil.rmtree(logs, ignore_errors=True)  # a log of an earlier run would end the wait at once
    shutil.rmtree(opts.work / "model", ignore_errors=True)
    command = [sys.executable, "-m", "paddle.distributed.launch", "--run_mode", "ps",
               "--server_num", "1", "--trainer_num", "1", "--log_dir", str(logs),
               str(opts.paddlerec / "tools/static_ps_trainer.py"), "-m", str(config)]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "TRAINING_"))}
    launcher = subprocess.Popen(command, cwd=opts.work, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        worker = wait_for_worker(logs / "workerlog.0", launcher)
    finally:
        # Its pserver never stops by itself (stop_worker does not stop servers in 2.6).
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGTERM)
        launcher.wait(timeout=30)
    speed = re.search(r"Epoch: 0, using time:? ([\d.]+) second, ips:? ([\d.]+)", worker)
    if not speed:
        raise SystemExit(f"PaddleRec's trainer failed:\n{worker[-3000:]}")
    result = {"seconds": float(speed.group(1)), "examples_per_sec": float(speed.group(2))}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
