"""A job with another pserver count resumes from the checkpoint: its pservers reshard it.

Online, one pserver count trains hour 00 (pass 1, checkpointed); a job with another count
resumes at hour 01, which has a donefile and no data, so pass 2 trains nothing: its
version is an export of the restored table and its checkpoint a save of it. They must hold
exactly what pass 1's checkpoint holds, every sparse row (key, show/click, embedding, the
sparse rule's state) and every dense value (parameter, Adam moments), each row on the pserver
Paddle routes its key to. Hour 02 (pass 3) then trains as usual."""

from __future__ import annotations

import ctypes
import gzip
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.support.trainer import (
    LocalJob,
    impressions,
    read_sequence_file,
    run_job,
    write_config,
)

pytestmark = pytest.mark.slow
HOURS = ["20191221/00", "20191221/01", "20191221/02"]  # trained, empty, trained
SHARDS_PER_PSERVER = 8  # program.py's: a checkpoint of P pservers has 8P sparse shards
SPARSE_PART = re.compile(r"part-(\d{3})-(\d{5})\.gz$")
EMBEDDING_DIM = 9  # the trainer's default
LIBC = ctypes.CDLL(None)
LIBC.strtof.restype = ctypes.c_float
LIBC.strtof.argtypes = [ctypes.c_char_p, ctypes.c_void_p]


@pytest.fixture(scope="module")
def data(synthetic, tmp_path_factory):
    """Hours 00 and 02 one file each of the synthetic set, hour 01 a donefile alone."""
    root = tmp_path_factory.mktemp("reshard-data")
    sources = ["20191221/00/part-00000", None, "20191221/01/part-00000"]
    for hour, source in zip(HOURS, sources, strict=True):
        (root / hour).mkdir(parents=True)
        if source:
            shutil.copy(synthetic.root / "train" / source, root / hour / "part-00000")
        (root / hour / "donefile").write_text("")
    return root


def config(data: Path, synthetic, work: Path, end: str, optimizer: str | None = None) -> Path:
    runner = {
        "train_data_uri": f"file://{data}",
        "mode": "online",
        "start_date_hr": HOURS[0],
        "end_date_hr": end,
        "slot_conf": synthetic.slot_conf,
        "model_uri": f"file://{work}/models",
        "checkpoint_uri": f"file://{work}/checkpoints",
        "work_dir": str(work / "scratch"),
        "publish_every_version": True,
    }
    hyper: dict = {"embedding_dim": EMBEDDING_DIM}
    if optimizer:
        hyper["sparse_optimizer"] = optimizer
    return write_config(work / "trainer.json", runner, hyper)


@pytest.fixture(scope="module")
def trained(data, synthetic, tmp_path_factory):
    """Pass 1 (hour 00) checkpointed by a job of P pservers and a sparse optimizer (unset:
    the default), one per pair asked for."""
    done: dict[tuple[int, str | None], Path] = {}

    def get(pservers: int, optimizer: str | None = None) -> Path:
        if (pservers, optimizer) not in done:
            work = tmp_path_factory.mktemp(f"trained-{pservers}-{optimizer}")
            job = config(data, synthetic, work, HOURS[0], optimizer)
            run_job(job, work / "logs", pservers, 1)
            done[pservers, optimizer] = work
        return done[pservers, optimizer]

    return get


def sparse_rows(pass_dir: Path) -> dict[int, list[bytes]]:
    """Rows by pserver: every line of its sparse shard files, each checked to be in the
    file of its key's shard."""
    pservers = len(list(pass_dir.glob("pserver-*/")))
    shards = SHARDS_PER_PSERVER * pservers
    rows: dict[int, list[bytes]] = {}
    for part in sorted(pass_dir.glob("pserver-*/*/part-*")):
        match = SPARSE_PART.match(part.name)
        if not match:
            continue
        owner, shard = int(match.group(1)), int(match.group(2))
        assert part.parent.parent.name == f"pserver-{owner}"
        for line in gzip.decompress(part.read_bytes()).splitlines():
            assert int(line.split()[0]) % shards == shard, (part, line)
            # the pserver brpc_ps_client routes the key to (8 shards each)
            assert shard // SHARDS_PER_PSERVER == owner
            rows.setdefault(owner, []).append(line)
    return rows


def dense_lines(pass_dir: Path) -> list[list[bytes]]:
    """Each pserver's dense lines (`param moment1 moment2`), by pserver."""
    parts = sorted(pass_dir.glob("pserver-*/*/part-[0-9][0-9][0-9].gz"))
    return [gzip.decompress(p.read_bytes()).splitlines() for p in parts]


def strtof(text: bytes) -> np.float32:
    """What Paddle's load makes of a saved value (string_helper's str_to_float: strtof)."""
    return np.float32(LIBC.strtof(text, None))


def export(models: Path, version: int) -> dict[int, bytes]:
    parts = sorted((models / str(version) / "sparse").glob("part-*"))
    table: dict[int, bytes] = {}
    for part in parts:
        keys, values = read_sequence_file(part.read_bytes())
        table.update({int(k): v.tobytes() for k, v in zip(keys, values, strict=True)})
    return table


def meta(models: Path, version: int) -> dict:
    return json.loads((models / f"{version}/dense/meta.json").read_text())


# adagrad: a model trained before sgd was the default, resumed by a job that leaves the
# optimizer unset, as an upgraded stack does: it keeps adagrad, rows and all.
@pytest.mark.parametrize(
    ("before", "after", "optimizer"),
    [(1, 2, None), (1, 3, None), (2, 1, None), (2, 2, None), (1, 2, "adagrad")],
)
def test_a_new_pserver_count_resumes_from_the_checkpoint(
    trained, data, synthetic, tmp_path, before, after, optimizer
):
    source = trained(before, optimizer)
    work = tmp_path / "work"
    for name in ("checkpoints", "models"):
        shutil.copytree(source / name, work / name)
    saved = source / "checkpoints/pass-1"

    job = run_job(config(data, synthetic, work, HOURS[2]), work / "logs", after, 1)

    resharded = f"taken with {before} pservers" + (
        f", resharded to {after}" if before != after else ""
    )
    for rank in range(after):
        assert f"pserver {rank}: restored checkpoint pass 1 ({resharded})" in job.log(
            f"pserver-{rank}"
        )
    assert job.events("trainer-0", "resume") == [{"event": "resume", "after_pass": 1, "version": 1}]
    assert job.events("trainer-0", "resharded") == (
        [{"event": "resharded", "pass": 1, "from_pservers": before, "to_pservers": after}]
        if before != after
        else []
    )

    # Pass 2 trained nothing: its checkpoint, saved by the new pservers, is pass 1's, row
    # for row and value for value.
    index = [json.loads(line) for line in (work / "checkpoints/index").read_text().splitlines()]
    assert [(c["pass_id"], c["pservers"]) for c in index] == [(1, before), (2, after), (3, after)]
    restored = work / "checkpoints/pass-2"
    old_rows, new_rows = sparse_rows(saved), sparse_rows(restored)
    assert sorted(new_rows) == list(range(after))  # every pserver holds a part
    assert sorted(r for rows in new_rows.values() for r in rows) == sorted(
        r for rows in old_rows.values() for r in rows
    )
    old_dense, new_dense = dense_lines(saved), dense_lines(restored)
    assert [line for block in new_dense for line in block] == [
        line for block in old_dense for line in block
    ]
    values = sum(len(block) for block in old_dense)
    assert [len(block) for block in new_dense] == [
        min(values, (r + 1) * (values // after + 1)) - min(values, r * (values // after + 1))
        for r in range(after)
    ]
    assert len(old_dense[0][0].split()) == 3  # the parameter and both Adam moments
    with np.load(saved / "dense.npz") as old, np.load(restored / "dense.npz") as new:
        assert sorted(old.files) == sorted(new.files)
        for name in old.files:
            assert old[name].tobytes() == new[name].tobytes(), name

    # Version 2 is the restored table pulled from the pservers: every embedding bit for bit
    # what the saved text loads as.
    expected = {}
    for line in (r for rows in old_rows.values() for r in rows):
        key, *fields = line.split()
        # slot, unseen days, delta score, show, click, embed_w (and with adagrad its
        # g2sum); for an id with an embedding vector, the vector (and its g2sum)
        state = 1 if optimizer == "adagrad" else 0
        assert len(fields) in (6 + state, 6 + state + (EMBEDDING_DIM - 1) + state)
        head = 6 + state
        embedx = (
            fields[head : len(fields) - state]
            if len(fields) > head
            else [b"0"] * (EMBEDDING_DIM - 1)
        )
        expected[int(key)] = np.array([strtof(f) for f in [fields[5], *embedx]]).tobytes()
    pulled = export(work / "models", 2)
    assert pulled.keys() == expected.keys()
    assert [k for k in expected if pulled[k] != expected[k]] == []
    hours = [(data / h / "part-00000").read_text().splitlines() for h in (HOURS[0], HOURS[2])]
    assert meta(work / "models", 1)["table_shows"] == impressions(hours[0], 100003)
    assert meta(work / "models", 2)["table_shows"] == impressions(hours[0], 100003)

    # Pass 3 trains hour 02 on top of it, and is published.
    versions = [json.loads(line)["id"] for line in (work / "models/donefile").read_text().split()]
    assert versions == [1, 2, 3]
    assert meta(work / "models", 3)["table_shows"] == pytest.approx(
        impressions(hours[0], 100003) + impressions(hours[1], 100003)
    )


def test_a_model_of_another_layout_is_refused_at_start(trained, data, synthetic, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(trained(1) / "checkpoints", work / "checkpoints")
    path = config(data, synthetic, work, HOURS[2])
    settings = json.loads(path.read_text())
    settings["hyper_parameters"]["embedding_dim"] = EMBEDDING_DIM - 1
    path.write_text(json.dumps(settings))
    job = LocalJob(path, work / "logs", pservers=2, trainers=1)
    assert job.wait() == 1
    message = (
        "checkpoint pass 1 (file://{}/pass-1) belongs to another model: "
        "hyper_parameters.embedding_dim (stack: training.embedding_dim) was 9, this job has 8"
    ).format(work / "checkpoints")
    failed = [n for n in ("pserver-0", "pserver-1", "trainer-0") if message in job.log(n)]
    assert failed  # whichever failed first; the others were stopped
    assert "Traceback" not in job.log(failed[0])
    assert not (work / "models").exists()
