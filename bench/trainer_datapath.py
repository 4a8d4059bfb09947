"""Examples/s of one trainer with 26 slots: Paddle's C++ data path (QueueDataset reading
files through the trainer's pipe command) against a plain Python feed (parse in Python,
build LoDTensors, `exe.run` per batch), in the same run, on the same data, against the
same live pserver.

    PYTHONPATH=images/trainer:images/common .venv/bin/python bench/trainer_datapath.py \
        [--examples 200000] [--rounds 2]

One pserver runs as a child process (stopped at the end); this process is trainer 0.
Each round times every path once, alternating, and the table reports the best round.
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

from elasticctr_common.ports import free_ports

SLOTS = 26


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--examples", type=int, default=200_000)
    args.add_argument("--files", type=int, default=8)
    args.add_argument("--vocab", type=int, default=10_000, help="feasigns per slot")
    args.add_argument("--batch-size", type=int, default=512)
    args.add_argument("--rounds", type=int, default=2)
    args.add_argument("--threads", type=int, default=1, help="threads of the C++ data path")
    opts = args.parse_args()

    from elasticctr_trainer.generate import generate

    work = Path(tempfile.mkdtemp(prefix="elasticctr-bench-"))
    generate(f"file://{work}/data", SLOTS, opts.vocab, "20191221/00", 1, opts.examples,
             opts.files, heldout=0, seed=5)  # fmt: skip
    config = work / "trainer.json"
    runner = {
        "train_data_uri": f"file://{work}/data/train", "start_date_hr": "20191221/00",
        "end_date_hr": "20191221/00", "slot_conf": str(work / "data/slot.conf"),
        "model_uri": f"file://{work}/models", "checkpoint_uri": f"file://{work}/ckpt",
        "work_dir": str(work / "scratch"),
    }  # fmt: skip
    hyper = {"batch_size": opts.batch_size}
    config.write_text(json.dumps({"runner": runner, "hyper_parameters": hyper}))
    (port,) = free_ports(1)
    env = {
        "PADDLE_PSERVERS_IP_PORT_LIST": f"localhost:{port}", "PADDLE_TRAINERS_NUM": "1",
        "PADDLE_PORT": str(port), "POD_IP": "127.0.0.1",
    }  # fmt: skip
    log = open(work / "pserver.log", "wb")  # noqa: SIM115 - the child process writes it
    pserver = subprocess.Popen(
        [sys.executable, "-m", "elasticctr_trainer", "run", "--config", str(config)],
        env={
            **os.environ,
            **env,
            "TRAINING_ROLE": "PSERVER",
            "PADDLE_PSERVER_ID": "0",
            "PYTHONPATH": os.pathsep.join(sys.path),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        os.environ.update({**env, "TRAINING_ROLE": "TRAINER", "PADDLE_TRAINER_ID": "0"})
        results = measure(config, work, opts.rounds, opts.threads)
    finally:
        if pserver.poll() is None:
            pserver.terminate()
        pserver.wait(timeout=30)
    print_table(results, opts)


def measure(config_path: Path, work: Path, rounds: int, threads: int) -> dict[str, list[float]]:
    import paddle
    from elasticctr_common.trainer_json import load_config
    from elasticctr_trainer.feed import feed_dict
    from elasticctr_trainer.lines import LineParser
    from elasticctr_trainer.roles import role_from_env
    from elasticctr_trainer.trainer import Trainer, pipe_command
    from paddle.distributed import fleet

    config = load_config(config_path)
    trainer = Trainer(config, role_from_env())
    trainer.build()
    fleet.init_worker()
    files = sorted(str(p) for p in (work / "data/train/20191221/00").glob("part-*"))
    examples = sum(len(Path(f).read_text().splitlines()) for f in files)
    batch = config.hyper_parameters.batch_size

    def cpp_path(threads: int) -> float:
        dataset = paddle.distributed.QueueDataset()
        command = pipe_command(config, trainer.slots, str(work / "reports"))
        dataset.init(batch_size=batch, thread_num=threads, use_var=trainer.net.feed_order,
                     pipe_command=command)  # fmt: skip
        dataset.set_filelist(files)
        started = time.perf_counter()
        trainer.exe.train_from_dataset(trainer.main, dataset, thread=threads, debug=False)
        return examples / (time.perf_counter() - started)

    parser = LineParser(trainer.slots, config.hyper_parameters.sparse_dim)
    names = [v.name for v in trainer.net.feed_order]

    def python_path() -> float:
        # A fresh executor: one whose cached program saw train_from_dataset crashes (2.6).
        exe = paddle.static.Executor(paddle.CPUPlace())
        started = time.perf_counter()
        pending = []
        for path in files:
            with open(path) as lines:
                for line in lines:
                    pending.append(parser.parse(line))
                    if len(pending) == batch:
                        exe.run(trainer.main, feed=feed_dict(names, pending))
                        pending = []
        if pending:
            exe.run(trainer.main, feed=feed_dict(names, pending))
        return examples / (time.perf_counter() - started)

    def parse_only() -> float:
        started = time.perf_counter()
        for path in files:
            with open(path) as lines:
                chunk = []
                for line in lines:
                    chunk.append(parser.parse(line))
                    if len(chunk) == batch:
                        feed_dict(names, chunk)
                        chunk = []
        return examples / (time.perf_counter() - started)

    results: dict[str, list[float]] = {}
    # One thread count per process: Paddle keeps the first run's thread scopes.
    paths = {
        f"C++ dataset (QueueDataset + pipe), {threads} thread(s)": lambda: cpp_path(threads),
        "Python feed (parse + LoDTensor + exe.run)": python_path,
        "Python parse + LoDTensor only, no training": parse_only,
    }
    try:
        for _ in range(rounds):
            for name, path in paths.items():
                results.setdefault(name, []).append(path())
                print(f"{name}: {results[name][-1]:,.0f} examples/s", flush=True)
    finally:
        fleet.fleet._runtime_handle._worker.stop_server()
        fleet.stop_worker()
    return results


def print_table(results: dict[str, list[float]], opts: argparse.Namespace) -> None:
    print(f"\n{SLOTS} slots, {opts.examples:,} examples in {opts.files} files, vocab "
          f"{opts.vocab:,}/slot, batch {opts.batch_size}, 1 pserver + 1 trainer, C++ path "
          f"with {opts.threads} thread(s), "
          f"best of {opts.rounds} rounds\n")  # fmt: skip
    print("| data path | examples/s per trainer |")
    print("|---|---:|")
    for name, values in results.items():
        print(f"| {name} | {max(values):,.0f} |")


if __name__ == "__main__":
    main()
