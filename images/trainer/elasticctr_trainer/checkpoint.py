"""Checkpoints that let a restarted job resume after its last completed pass.

The full model state lives on the pservers (sparse rows with their show/click and AdaGrad
state, dense parameters with their Adam moments). Trainer 0 asks every pserver to save
its shard with `fleet.save_persistables` into `<work_dir>/checkpoints/pass-<N>` on the
pserver's own disk (Paddle's table save: gzip text, `<table>/part-<rank>-<shard>.gz`).
A helper process beside each pserver (`pserver-sync`) uploads its own part files to
`<checkpoint_uri>/pass-<N>/pserver-<rank>/` and marks them done; trainer 0 also saves the
dense parameters it pulled, then appends the pass to `<checkpoint_uri>/index` last, so a
half-written checkpoint is never used. On start, each pserver builds its shard of the
latest checkpoint from the saved ones, for the pserver count of this job whatever the
count that took it (reshard.py), and loads every table before it serves; trainer 0 puts
the dense parameters into its scope before `init_worker`, which pushes them to the
pservers. An index line records the model's layout (`ModelLayout`): a job whose model
differs refuses the checkpoint (`CheckpointMismatch`) instead of loading rows and weights
that mean something else.
"""

from __future__ import annotations

import io
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from elasticctr_common.storage import Store, open_store
from elasticctr_common.trainer_json import (
    AUTO_CROSSES,
    NEW_MODEL_DENSE_TRANSFORM,
    NEW_MODEL_SPARSE_OPTIMIZER,
    DenseTransform,
    HyperParameters,
    SparseOptimizer,
    TrainerConfig,
)
from numpy.typing import NDArray

log = logging.getLogger(__name__)
INDEX = "index"
KEEP = 2  # checkpoints kept; the index keeps every line as history


class CheckpointMismatch(RuntimeError):
    """The checkpoint cannot be loaded into this job's model; the message names the
    checkpoint, the difference and what to do. A rerun would meet it again."""


# Checkpoints that record no sparse optimizer were all trained with this one, and those
# that record no dense transform fed the dense features as they are.
UNRECORDED_SPARSE_OPTIMIZER: SparseOptimizer = "adagrad"
UNRECORDED_DENSE_TRANSFORM: DenseTransform = "none"


@dataclass(frozen=True)
class ModelLayout:
    """What fixes the meaning of the tables' rows and values: a checkpoint is loaded only
    into a model with the same. (A pserver count is no part of it: reshard.py.)"""

    sparse_dim: int  # a key is feasign % sparse_dim
    embedding_dim: int  # the width of a sparse row
    slots: list[int]  # the dense model's inputs, in order
    fc_sizes: list[int]
    # The sparse rows' layout follows the optimizer (adagrad's hold its squared-gradient
    # sums).
    sparse_optimizer: SparseOptimizer = UNRECORDED_SPARSE_OPTIMIZER
    # The dense weights were learnt on the transformed values.
    dense_transform: DenseTransform = UNRECORDED_DENSE_TRANSFORM
    # The crossed slot pairs (more inputs, rows of crossed ids); unrecorded: none.
    crosses: list[list[int]] = field(default_factory=list)

    @classmethod
    def of(cls, hyper: HyperParameters, slots: list[int]) -> ModelLayout:
        optimizer, _, _ = hyper.sparse_rule()
        if hyper.crosses == AUTO_CROSSES:
            raise ValueError("hyper_parameters.crosses: auto, not chosen yet (trainer 0 does)")
        return cls(
            hyper.sparse_dim, hyper.embedding_dim, list(slots), list(hyper.fc_sizes), optimizer,
            hyper.dense_rule(), [list(pair) for pair in hyper.crosses],
        )  # fmt: skip


# The hyper-parameters a checkpoint decides when unset: (a new model's, an unrecorded one's).
DECIDED_BY_CHECKPOINT: dict[str, tuple[str, str]] = {
    "sparse_optimizer": (NEW_MODEL_SPARSE_OPTIMIZER, UNRECORDED_SPARSE_OPTIMIZER),
    "dense_transform": (NEW_MODEL_DENSE_TRANSFORM, UNRECORDED_DENSE_TRANSFORM),
}


def resolve_model(hyper: HyperParameters, last: Checkpoint | None) -> HyperParameters:
    """`hyper` with each of DECIDED_BY_CHECKPOINT set: the configured value; unset, the one
    the latest checkpoint was trained with (so an upgrade that changed a default resumes its
    model as it was), or for a new model the new model's. Crosses `auto` are the
    checkpoint's (unrecorded: none); a new model's are chosen from the data at start."""
    decided: dict[str, Any] = {}
    if hyper.crosses == AUTO_CROSSES and last is not None:
        decided["crosses"] = last.layout.crosses if last.layout else []
    for name, (new_model, unrecorded) in DECIDED_BY_CHECKPOINT.items():
        if getattr(hyper, name) is not None:
            continue
        if last is None:
            decided[name] = new_model
        else:
            decided[name] = getattr(last.layout, name) if last.layout else unrecorded
    return replace(hyper, **decided)


def with_resolved_model(config: TrainerConfig) -> TrainerConfig:
    """`config` as this job runs it: what the model leaves unset and a checkpoint decides
    (resolve_model), read before the tables are built; pservers and trainers read the same
    index, which only trainer 0 appends to, after a pass."""
    last = latest(open_store(config.runner.checkpoint_uri))
    return replace(config, hyper_parameters=resolve_model(config.hyper_parameters, last))


# Where each ModelLayout field is set: trainer.json's key (the stack config's).
LAYOUT_KEYS = {
    "sparse_dim": "hyper_parameters.sparse_dim (stack: data.sparse_dim)",
    "embedding_dim": "hyper_parameters.embedding_dim (stack: training.embedding_dim)",
    "slots": "the slots of runner.slot_conf (stack: slot_conf)",
    "fc_sizes": "hyper_parameters.fc_sizes",
    "sparse_optimizer": "hyper_parameters.sparse_optimizer (stack: training.sparse_optimizer)",
    "dense_transform": "hyper_parameters.dense_transform (stack: training.dense_transform)",
    "crosses": "hyper_parameters.crosses (stack: training.crosses)",
}


# What a checkpoint whose dense size differs says (one that records no layout, or a model
# change the record does not cover).
LAYOUT_CHANGED = (
    "the model's layout changed (hyper_parameters.model or network_module, dense_features, "
    "fc_sizes, embedding_dim, crosses or the slots of slot_conf): set it back, or train a new "
    "model from scratch with a new runner.checkpoint_uri"
)


@dataclass(frozen=True)
class Checkpoint:
    pass_id: int
    hour: str | None  # online mode: the last hour trained
    version: int  # the model version exported by this pass
    pservers: int
    trainers: int
    layout: ModelLayout | None = None  # None: taken before checkpoints recorded it
    # Whether the table was shrunk (decay, deletion) before it was saved; an offline job's
    # last pass keeps it whole (trainer.shrinks_after). Older lines: every pass shrank.
    table_shrunk: bool = True

    def to_line(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_line(cls, line: str) -> Checkpoint:
        data = json.loads(line)
        layout = data.pop("layout", None)
        return cls(**data, layout=ModelLayout(**layout) if layout is not None else None)


def latest(store: Store) -> Checkpoint | None:
    if not store.exists(INDEX):
        return None
    lines = [line for line in store.read_text(INDEX).splitlines() if line.strip()]
    return Checkpoint.from_line(lines[-1]) if lines else None


def check_layout(store: Store, checkpoint: Checkpoint, layout: ModelLayout) -> None:
    """Raise CheckpointMismatch when `checkpoint` was taken with another model layout."""
    if checkpoint.layout is None:
        log.warning(
            "checkpoint pass %d records no model layout: only its dense size is checked",
            checkpoint.pass_id,
        )
        return
    changed = [
        f"{LAYOUT_KEYS[f.name]} was {getattr(checkpoint.layout, f.name)}, this job has "
        f"{getattr(layout, f.name)}"
        for f in fields(ModelLayout)
        if getattr(checkpoint.layout, f.name) != getattr(layout, f.name)
    ]
    if changed:
        raise CheckpointMismatch(
            f"checkpoint pass {checkpoint.pass_id} ({store.uri(f'pass-{checkpoint.pass_id}')}) "
            f"belongs to another model: {'; '.join(changed)}. Its rows and weights cannot be "
            "carried over (a change of pserver count can, nothing else of the model's "
            "layout): set these back, or train a new model from scratch with a new "
            f"runner.checkpoint_uri (or after removing {store.uri(INDEX)})."
        )


def append(store: Store, checkpoint: Checkpoint) -> None:
    text = store.read_text(INDEX) if store.exists(INDEX) else ""
    store.write_text(INDEX, text + checkpoint.to_line() + "\n")


def local_dir(work_dir: str, pass_id: int) -> str:
    return os.path.join(work_dir, "checkpoints", f"pass-{pass_id}")


def own_part_files(directory: str, rank: int) -> list[Path]:
    """This pserver's files in a table save directory shared by several pservers."""
    prefix = f"part-{rank:03d}"
    root = Path(directory)
    return sorted(
        p
        for p in root.glob("*/part-*")
        if p.name == prefix or p.name.startswith((prefix + "-", prefix + "."))
    )


# trainer 0 -------------------------------------------------------------------------


def save_dense(store: Store, pass_id: int, arrays: dict[str, NDArray[Any]]) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    store.write_bytes(f"pass-{pass_id}/dense.npz", buffer.getvalue())


def load_dense(store: Store, pass_id: int) -> dict[str, NDArray[Any]]:
    with np.load(io.BytesIO(store.read_bytes(f"pass-{pass_id}/dense.npz"))) as data:
        return {name: data[name] for name in data.files}


def request_upload(store: Store, pass_id: int, directory: str) -> None:
    store.write_text(f"requests/pass-{pass_id}.json", json.dumps({"dir": directory}))


def wait_uploads(store: Store, pass_id: int, pservers: int, timeout: float) -> None:
    deadline = time.time() + timeout
    markers = [f"pass-{pass_id}/pserver-{rank}.done" for rank in range(pservers)]
    while not all(store.exists(m) for m in markers):
        if time.time() > deadline:
            missing = [store.uri(m) for m in markers if not store.exists(m)]
            raise TimeoutError(f"checkpoint pass {pass_id}: pservers did not upload {missing}")
        time.sleep(0.5)


def prune(store: Store, pass_id: int, keep: int = KEEP) -> None:
    """After pass `pass_id` is in the index: drop its upload request and older checkpoints."""
    store.delete(f"requests/pass-{pass_id}.json")
    store.delete(f"pass-{pass_id - keep}")


# pserver ------------------------------------------------------------------------------


def upload_pending(store: Store, rank: int) -> list[int]:
    """Upload this pserver's saved shards for every request it has not answered yet."""
    done = []
    for name in store.list("requests"):
        pass_id = int(name.removeprefix("pass-").removesuffix(".json"))
        marker = f"pass-{pass_id}/pserver-{rank}.done"
        if store.exists(marker):
            continue
        directory = json.loads(store.read_text(f"requests/{name}"))["dir"]
        files = own_part_files(directory, rank)
        if not files:  # saved by an earlier attempt of this pod: nothing here to send
            continue
        for path in files:
            relative = path.relative_to(directory).as_posix()
            store.upload(path, f"pass-{pass_id}/pserver-{rank}/{relative}")
        store.write_text(marker, json.dumps({"files": len(files)}))
        for path in files:  # the uploaded copy is the checkpoint now
            path.unlink()
        log.info("checkpoint pass %d: uploaded %d files of pserver %d", pass_id, len(files), rank)
        done.append(pass_id)
    return done


def serve_uploads(checkpoint_uri: str, rank: int, parent_pid: int, poll_seconds: float) -> None:
    """The `pserver-sync` helper: upload requested shards until its pserver is gone."""
    from elasticctr_common.storage import open_store

    store = open_store(checkpoint_uri)
    while os.getppid() == parent_pid:
        try:
            upload_pending(store, rank)
        except Exception:  # a storage hiccup: log it and retry on the next poll
            log.exception("pserver %d: checkpoint upload failed, retrying", rank)
        time.sleep(poll_seconds)
