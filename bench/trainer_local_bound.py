"""The local bound of a trainer: the stack's network (model.build_ctr_dnn, unchanged) and
batch trained in one process with a local embedding table of the same size, no parameter
server, through Paddle's own C++ data path (QueueDataset, the same thread count), on
data already in Paddle's MultiSlot text (`cat` as the pipe: no parsing in the loop).

    PYTHONPATH=images/trainer:images/common python bench/trainer_local_bound.py \
        --data DIR --slots 26 --sparse-dim 1000001 --batch-size 512 --threads 1

Prints one JSON line: examples, seconds, examples_per_sec and cpu_seconds.

The network is built exactly as the trainer builds it; only its table is made local:
`sparse_embedding` declares a parameter-server table (an auto-growing SelectedRows that a
plain executor cannot look up), so the table variable becomes a dense
[sparse_dim, embedding_dim + 2] tensor and the lookups local ones. Dense parameters get
Adam as in the stack; the table gets lazy Adam (rows of the batch only), where the
pservers run AdaGrad on the same rows: both touch only the batch's rows.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def localize_sparse_table(programs: list[Any], table: str) -> None:
    """Make the parameter-server table `table` a local dense tensor in `programs`."""
    from paddle.base import core

    for program in programs:
        block = program.global_block()
        var = block.var(table)
        shape = list(var.shape)
        var.desc.set_type(core.VarDesc.VarType.LOD_TENSOR)
        var.desc.set_shape(shape)  # the type change drops the SelectedRows' shape and dtype
        var.desc.set_dtype(core.VarDesc.VarType.FP32)
        for op in block.ops:
            if op.type == "lookup_table":
                op._set_attr("is_distributed", False)
                op._set_attr("remote_prefetch", False)


def train_local(
    files: list[str], slots: int, sparse_dim: int, batch_size: int, threads: int
) -> dict[str, float]:
    import paddle
    from elasticctr_common.trainer_json import HyperParameters
    from elasticctr_trainer.model import SPARSE_TABLE, build_ctr_model
    from elasticctr_trainer.networks import load_network

    paddle.enable_static()
    hyper = HyperParameters(model="dnn")
    net = build_ctr_model(
        slots, sparse_dim, hyper.embedding_dim, hyper.fc_sizes, load_network("dnn", None)
    )
    main, startup = paddle.static.default_main_program(), paddle.static.default_startup_program()
    localize_sparse_table([main, startup], SPARSE_TABLE)
    paddle.optimizer.Adam(learning_rate=hyper.learning_rate, lazy_mode=True).minimize(net.loss)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    dataset = paddle.distributed.QueueDataset()
    dataset.init(batch_size=batch_size, thread_num=threads, use_var=net.feed_order,
                 pipe_command="cat")  # fmt: skip
    dataset.set_filelist(files)
    examples = sum(Path(f).read_bytes().count(b"\n") for f in files)
    started, cpu = time.perf_counter(), time.process_time()
    exe.train_from_dataset(main, dataset, thread=threads)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "examples": examples,
        "seconds": seconds,
        "examples_per_sec": examples / seconds,
        "cpu_seconds": cpu,  # every thread of the process, the `cat` pipes not counted
    }


def main() -> None:
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--data", required=True, help="directory of MultiSlot text files")
    args.add_argument("--slots", type=int, required=True)
    args.add_argument("--sparse-dim", type=int, required=True)
    args.add_argument("--batch-size", type=int, required=True)
    args.add_argument("--threads", type=int, default=1)
    opts = args.parse_args()
    files = sorted(str(p) for p in Path(opts.data).iterdir() if p.is_file())
    result = train_local(files, opts.slots, opts.sparse_dim, opts.batch_size, opts.threads)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
