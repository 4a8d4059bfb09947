"""Resharding a checkpoint without Paddle's servers: the routing and the dense split against
Paddle's own formulas, key parsing, and the directories a pserver is handed for checkpoints
of synthetic rows (test_trainer_reshard.py loads real ones into real pservers)."""

from __future__ import annotations

import gzip
import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest
from elasticctr_common.storage import open_store
from elasticctr_common.trainer_json import HyperParameters
from elasticctr_trainer import reshard
from elasticctr_trainer.checkpoint import (
    Checkpoint,
    CheckpointMismatch,
    ModelLayout,
    check_layout,
    latest,
    resolve_model,
)

PER_SERVER = 8


def paddle_sparse_server(shard_num: int, server_num: int, key: int) -> int:
    """brpc_ps_client.cc's get_sparse_shard, as written there."""
    remind = shard_num % server_num
    local_shard_num = shard_num // server_num if remind == 0 else shard_num // server_num + 1
    return (key % shard_num) // local_shard_num


@pytest.mark.parametrize(("shards", "servers"), [(8, 1), (16, 2), (24, 3), (10, 3), (7, 4)])
def test_sparse_layout_routes_keys_as_paddle(shards, servers):
    layout = reshard.SparseLayout(shards, servers)
    for key in [*range(200), 2**63 + 5, 2**64 - 1]:
        shard = key % shards
        owner = paddle_sparse_server(shards, servers, key)
        assert shard in layout.shards_of(owner)
        assert layout.file_name(shard) == f"part-{owner:03d}-{shard:05d}.gz"


@pytest.mark.parametrize(("values", "servers"), [(226, 1), (226, 2), (226, 3), (7, 3), (5, 7)])
def test_dense_spans_are_paddle_blocks(values, servers):
    from paddle.distributed.ps.the_one_ps import CommonAccessor

    spans = reshard.dense_spans(values, servers)
    sizes = [CommonAccessor.get_shard(None, values, servers, r) for r in range(servers)]
    assert [len(s) for s in spans] == sizes
    assert [i for s in spans for i in s] == list(range(values))


def test_parse_keys():
    block = b"7 0 1\n18446744073709551615 2\n123456789 1 2 3\n"
    starts, ends, keys = reshard.parse_keys(block)
    assert keys.tolist() == [7, 2**64 - 1, 123456789]
    assert [block[s:e] for s, e in zip(starts, ends, strict=True)] == block.splitlines()
    for bad in (
        b"x1 0\n",
        b" 1 0\n",
        b"\n",
        b"12\n",
        b"1" * 21 + b" 0\n",
        b"1 0\n3a 0\n",
        b"18446744073709551616 0\n",
        b"99999999999999999999 0\n",
    ):
        with pytest.raises(ValueError, match="not a sparse row"):
            reshard.parse_keys(bad)


def rows_of(key: int) -> bytes:
    return f"{key} 0 0 {key % 97} 1 0.{key} 0.5\n".encode()


def save_checkpoint(root: Path, pservers: int, keys: list[int], dense: list[bytes]) -> None:
    """A checkpoint laid out as Paddle's table save and checkpoint.py's upload lay it out."""
    shards = PER_SERVER * pservers
    for rank in range(pservers):
        table = root / f"pass-1/pserver-{rank}/000"
        table.mkdir(parents=True)
        for shard in range(rank * PER_SERVER, (rank + 1) * PER_SERVER):
            rows = b"".join(rows_of(k) for k in keys if k % shards == shard)
            (table / f"part-{rank:03d}-{shard:05d}.gz").write_bytes(gzip.compress(rows))
        span = reshard.dense_spans(len(dense), pservers)[rank]
        part = root / f"pass-1/pserver-{rank}/001/part-{rank:03d}.gz"
        part.parent.mkdir()
        part.write_bytes(gzip.compress(b"".join(dense[i] for i in span)))


@pytest.mark.parametrize(("old", "new"), [(1, 2), (2, 3), (3, 2), (4, 2), (2, 2), (2, 1)])
def test_every_row_lands_on_its_new_owner_once(tmp_path, old, new):
    keys = [k * 7 + 3 for k in range(700)] + [2**64 - 1]
    dense = [f"{i}.5 0.{i} 1e-0{i % 9}\n".encode() for i in range(226)]
    save_checkpoint(tmp_path / "ckpt", old, keys, dense)
    store = open_store(f"file://{tmp_path}/ckpt")
    shards = PER_SERVER * new
    seen: list[int] = []
    for rank in range(new):
        directory = tmp_path / f"pserver-{rank}"
        restored = reshard.build(store, 1, old, rank, new, PER_SERVER, len(dense), directory)
        assert restored.tables == [0, 1]
        files = sorted(p.name for p in (directory / "000").iterdir())
        # What Paddle's load lists: one file per shard of the new count, this pserver's at
        # its positions.
        assert files == [f"part-{s // PER_SERVER:03d}-{s:05d}.gz" for s in range(shards)]
        for name in files:
            owner, shard = int(name[5:8]), int(name[9:14])
            text = gzip.decompress((directory / "000" / name).read_bytes())
            if owner != rank:
                assert text == b""
                continue
            for line in text.splitlines(keepends=True):
                key = int(line.split()[0])
                assert key % shards == shard and line == rows_of(key)
                seen.append(key)
        blocks = [
            gzip.decompress((directory / "001" / f"part-{r:03d}.gz").read_bytes())
            for r in range(new)
        ]
        assert blocks == [b"".join(dense[i] for i in s) for s in reshard.dense_spans(226, new)]
        assert not (directory / ".download").exists()
        if new == old:  # the same layout: files taken whole
            assert restored.files_copied == PER_SERVER and restored.rows_read == 0
    assert sorted(seen) == sorted(keys)


def test_a_whole_multiple_is_copied_without_reading(tmp_path):
    keys = list(range(1, 500))
    save_checkpoint(tmp_path / "ckpt", 4, keys, [b"1 2 3\n"] * 10)
    store = open_store(f"file://{tmp_path}/ckpt")
    restored = reshard.build(store, 1, 4, 1, 2, PER_SERVER, 10, tmp_path / "out")
    assert (restored.files_copied, restored.files_read, restored.rows_read) == (16, 4, 0)


def test_a_gcd_above_one_reads_only_the_shards_it_may_own(tmp_path):
    keys = range(1, 500)
    save_checkpoint(tmp_path / "ckpt", 2, list(keys), [b"1 2 3\n"] * 10)
    store = open_store(f"file://{tmp_path}/ckpt")
    # 16 old shards, 32 new: pserver 0 owns keys % 32 in 0..7, only in old shards 0..7
    restored = reshard.build(store, 1, 2, 0, 4, PER_SERVER, 10, tmp_path / "out")
    assert restored.files_read == 8 + 2  # and the 2 dense files
    assert restored.rows_read == sum(1 for k in keys if k % 16 < 8)
    assert restored.rows_kept == sum(1 for k in keys if k % 32 < 8)


def test_another_dense_size_is_a_mismatch_naming_the_checkpoint(tmp_path):
    save_checkpoint(tmp_path / "ckpt", 1, [1, 2], [b"1 2 3\n"] * 226)
    store = open_store(f"file://{tmp_path}/ckpt")
    with pytest.raises(CheckpointMismatch) as err:
        reshard.build(store, 1, 1, 0, 2, PER_SERVER, 300, tmp_path / "out")
    assert f"checkpoint file://{tmp_path}/ckpt/pass-1, table 001" in str(err.value)
    assert "hold 226 values, this job's model has 300" in str(err.value)
    assert "runner.checkpoint_uri" in str(err.value)


def test_a_shard_file_holding_a_foreign_key_is_refused(tmp_path):
    save_checkpoint(tmp_path / "ckpt", 1, [1, 2], [b"1 2 3\n"])
    part = tmp_path / "ckpt/pass-1/pserver-0/000/part-000-00003.gz"
    part.write_bytes(gzip.compress(rows_of(12)))  # 12 % 8 == 4
    store = open_store(f"file://{tmp_path}/ckpt")
    with pytest.raises(ValueError, match=r"part-000-00003.gz: sparse shard file 3 of 8 holds"):
        reshard.build(store, 1, 1, 0, 3, PER_SERVER, 1, tmp_path / "out")


def test_a_missing_pserver_directory_is_named(tmp_path):
    save_checkpoint(tmp_path / "ckpt", 1, [1, 2], [b"1 2 3\n"])
    store = open_store(f"file://{tmp_path}/ckpt")
    with pytest.raises(FileNotFoundError, match="pass-1/pserver-1: no table files"):
        reshard.build(store, 1, 2, 0, 1, PER_SERVER, 1, tmp_path / "out")


LAYOUT = ModelLayout(sparse_dim=1000001, embedding_dim=9, slots=[1, 2, 3], fc_sizes=[400, 400])


def test_the_index_line_records_the_layout_and_reads_old_lines(tmp_path):
    store = open_store(f"file://{tmp_path}")
    checkpoint = Checkpoint(3, None, 3, pservers=2, trainers=2, layout=LAYOUT)
    old = {"pass_id": 2, "hour": None, "version": 2, "pservers": 2, "trainers": 2}
    store.write_text("index", json.dumps(old) + "\n" + checkpoint.to_line() + "\n")
    assert latest(store) == checkpoint
    store.write_text("index", json.dumps(old) + "\n")
    assert latest(store) == Checkpoint(2, None, 2, 2, 2, layout=None)
    check_layout(store, Checkpoint(2, None, 2, 2, 2), LAYOUT)  # nothing recorded to compare


def test_another_layout_is_refused_naming_each_difference(tmp_path):
    store = open_store(f"file://{tmp_path}")
    checkpoint = Checkpoint(3, None, 3, pservers=2, trainers=2, layout=LAYOUT)
    check_layout(store, checkpoint, LAYOUT)
    other = ModelLayout(sparse_dim=500009, embedding_dim=16, slots=[1, 2, 3], fc_sizes=[400, 400])
    with pytest.raises(CheckpointMismatch) as err:
        check_layout(store, checkpoint, other)
    message = str(err.value)
    assert message.startswith(f"checkpoint pass 3 (file://{tmp_path}/pass-3) belongs to another")
    assert (
        "hyper_parameters.sparse_dim (stack: data.sparse_dim) was 1000001, this job has " in message
    )
    assert (
        "hyper_parameters.embedding_dim (stack: training.embedding_dim) was 9, this job has 16"
        in message
    )
    assert "slot" not in message.split("belongs")[1].split("Its rows")[0]
    assert f"removing file://{tmp_path}/index" in message


def test_other_crosses_are_refused_and_old_lines_had_none(tmp_path):
    store = open_store(f"file://{tmp_path}")
    crossed = replace(LAYOUT, crosses=[[1, 2]])
    checkpoint = Checkpoint(3, None, 3, pservers=2, trainers=2, layout=crossed)
    store.write_text("index", checkpoint.to_line() + "\n")
    assert latest(store) == checkpoint
    with pytest.raises(CheckpointMismatch) as err:
        check_layout(store, checkpoint, LAYOUT)
    assert "hyper_parameters.crosses (stack: training.crosses) was [[1, 2]], this job has []" in (
        str(err.value)
    )
    assert Checkpoint.from_line(OLD_LINE).layout.crosses == []  # type: ignore[union-attr]


# An index line from before checkpoints recorded the sparse rule and the dense transform.
OLD_LINE = json.dumps(
    {"pass_id": 2, "hour": None, "version": 2, "pservers": 2, "trainers": 2,
     "layout": {"sparse_dim": 1000001, "embedding_dim": 9, "slots": [1], "fc_sizes": [4]}}
)  # fmt: skip


def test_a_new_model_gets_sgd_and_a_resumed_one_keeps_its_optimizer(tmp_path):
    hyper = HyperParameters()
    assert resolve_model(hyper, None).sparse_rule() == ("sgd", 0.01, 0.01)
    sgd = Checkpoint(3, None, 3, 2, 2, layout=replace(LAYOUT, sparse_optimizer="sgd"))
    assert resolve_model(hyper, sgd).sparse_optimizer == "sgd"
    # Checkpoints from before the choice recorded none: every one of them was adagrad's.
    for old in (Checkpoint.from_line(OLD_LINE), Checkpoint(2, None, 2, 2, 2)):
        assert resolve_model(hyper, old).sparse_rule() == ("adagrad", 0.05, 0.05)
    # A configured optimizer is kept whatever the checkpoint (check_layout refuses a change).
    chosen = HyperParameters(sparse_optimizer="adagrad", sparse_learning_rate=0.1)
    assert resolve_model(chosen, sgd).sparse_rule() == ("adagrad", 0.1, 0.1)


def test_crosses_auto_are_a_resumed_models_own_and_a_new_models_to_choose():
    auto = HyperParameters(crosses="auto")
    assert resolve_model(auto, None).crosses == "auto"  # trainer 0 chooses at start
    crossed = Checkpoint(3, None, 3, 2, 2, layout=replace(LAYOUT, crosses=[[1, 2]]))
    assert resolve_model(auto, crossed).crosses == [[1, 2]]
    for old in (Checkpoint.from_line(OLD_LINE), Checkpoint(2, None, 2, 2, 2)):
        assert resolve_model(auto, old).crosses == []
    assert resolve_model(HyperParameters(crosses=[[2, 3]]), crossed).crosses == [[2, 3]]
    with pytest.raises(ValueError, match="not chosen yet"):
        ModelLayout.of(resolve_model(auto, None), [1, 2, 3])


def test_a_new_model_squashes_its_dense_features_and_a_resumed_one_keeps_its_transform():
    hyper = HyperParameters()
    assert resolve_model(hyper, None).dense_rule() == "signed_log1p"
    squashed = Checkpoint(3, None, 3, 2, 2, layout=replace(LAYOUT, dense_transform="signed_log1p"))
    assert resolve_model(hyper, squashed).dense_rule() == "signed_log1p"
    # Checkpoints from before the choice recorded none: they all fed the values as they are.
    for old in (Checkpoint.from_line(OLD_LINE), Checkpoint(2, None, 2, 2, 2)):
        assert resolve_model(hyper, old).dense_rule() == "none"
    # A configured one is kept whatever the checkpoint (check_layout refuses a change).
    assert resolve_model(HyperParameters(dense_transform="none"), squashed).dense_rule() == "none"
    with pytest.raises(ValueError, match="dense_transform: unset"):
        hyper.dense_rule()


@pytest.mark.parametrize(
    ("key", "recorded", "this_job"),
    [("sparse_optimizer", "adagrad", "sgd"), ("dense_transform", "none", "signed_log1p")],
)
def test_another_model_choice_is_refused_naming_the_setting(tmp_path, key, recorded, this_job):
    store = open_store(f"file://{tmp_path}")
    line = json.loads(OLD_LINE)
    line["layout"] = {**asdict(LAYOUT), key: recorded}
    old = Checkpoint.from_line(json.dumps(line))
    with pytest.raises(CheckpointMismatch) as err:
        check_layout(store, old, replace(LAYOUT, **{key: this_job}))
    assert (
        f"hyper_parameters.{key} (stack: training.{key}) was {recorded}, this job has {this_job}"
        in str(err.value)
    )
