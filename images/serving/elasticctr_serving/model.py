"""One dense model version on Paddle Inference: load, validate, predict.

The trainer exports `<model_uri>/<V>/dense/{model.pdmodel, model.pdiparams, meta.json}`;
the program's inputs are the pooled slot embeddings (`meta.feed_names`, one [n, dim] input
per slot in slot.conf order, then one per cross of two slots, `meta.crosses`, none for a
model without: instances.py forms their keys), then one [n, dim] input per dense feature
(`meta.dense_features`, none for a model without), and its output the softmax [n, 2]
(`meta.fetch_name`).

Files are read into memory and handed to Paddle as buffers. Paddle crashes the whole
process (SIGSEGV) on some corrupt programs instead of raising, so a new version is first
loaded and probed in a child process (`python -m elasticctr_serving.model DIR`, the files
in a temporary directory under $TMPDIR, /tmp in the pod); only a version that passes there
(every dense parameter finite, probe predictions finite) is loaded into the server. Each
batch worker gets its own
predictor (`clone()` shares the weights); a predictor is not thread-safe.

Predictor options, measured on the 26-slot, 400-400-400 model (docs/serving.md): IR
optimisation on, but without `fc_fuse_pass`, whose fused `fc` kernel was 5x slower than
the `matmul` + `elementwise_add` it replaces; oneDNN for the matrix products only (its
kernels for concat, add, relu and softmax cost ~150 µs per call in set-up, 40% of a
batch-1 call); one math thread per predictor (the workers are the parallelism).
A batch of one example runs on a second predictor without oneDNN: its matrix products
cost ~110 µs of set-up per call there (235 -> 125 µs per call), but Paddle's own `mul`
kernel is slower from 2 examples up (bench/serving_predictor.py). The program's 26
per-slot inputs become one where its graph allows (graph.py: 55 µs less per call). Input
and output handles are looked up once per predictor.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import paddle.inference as paddle_infer
from elasticctr_common.crosses import cross_indices
from elasticctr_common.lines import DenseFeature
from elasticctr_common.storage import Store
from elasticctr_common.versions import MODEL_FILE, MODEL_META, PARAMS_FILE, dense_path
from google.protobuf.message import DecodeError
from numpy.typing import NDArray

from .graph import flatten, fuse_inputs
from .instances import SlotSpace

log = logging.getLogger(__name__)
REQUIRED_META = ("slots", "embedding_dim", "sparse_dim", "feed_names")


class ModelError(Exception):
    """Dense model V cannot be served; the message says why (it is rejected)."""


@dataclass
class DenseModel:
    version: int
    meta: dict[str, Any]  # meta.json
    space: SlotSpace
    embedding_dim: int
    predictors: list[paddle_infer.Predictor]  # one per batch worker
    loaded_at: float
    load_seconds: float
    # One per batch worker, for batches of one example (oneDNN off); none: `predictors`.
    single: list[paddle_infer.Predictor] = field(default_factory=list)
    fused_input: str | None = None  # the one input replacing the per-slot ones (graph.py)

    def __post_init__(self) -> None:
        self._handles: dict[
            tuple[int, bool], tuple[list[paddle_infer.Tensor], paddle_infer.Tensor]
        ] = {}

    def predict(
        self, worker: int, pooled: NDArray[np.float32], dense: NDArray[np.float32] | None = None
    ) -> NDArray[np.float32]:
        """[sparse inputs, n, dim] pooled embeddings (the slots', then the crosses') and
        [n, dense dims summed] dense values (None for a model without dense features) ->
        [n, 2] class probabilities."""
        one = pooled.shape[1] == 1 and bool(self.single)
        predictor = self.single[worker] if one else self.predictors[worker]
        handles = self._handles.get((worker, one))
        if handles is None:  # looked up once per predictor: a lookup costs as much as a copy
            inputs = [predictor.get_input_handle(name) for name in self.input_names]
            output = predictor.get_output_handle(self._output_name(predictor))
            handles = self._handles[worker, one] = (inputs, output)
        inputs, output = handles
        fed: list[NDArray[np.float32]] | NDArray[np.float32]
        if self.fused_input:  # the concat's order: the sparse inputs, then the dense ones
            flat = flatten(pooled)
            fed = [flat if dense is None else np.ascontiguousarray(np.hstack([flat, dense]))]
        elif dense is None:
            fed = pooled
        else:
            fed = [*pooled, *self._split_dense(dense)]
        for handle, values in zip(inputs, fed, strict=True):
            handle.copy_from_cpu(values)  # sets the shape too
        predictor.run()
        probabilities: NDArray[np.float32] = output.copy_to_cpu()
        return probabilities

    def _split_dense(self, dense: NDArray[np.float32]) -> list[NDArray[np.float32]]:
        offsets = np.cumsum([0, *(f.dim for f in self.space.dense)])
        return [
            np.ascontiguousarray(dense[:, begin:end])
            for begin, end in itertools.pairwise(offsets.tolist())
        ]

    @property
    def input_names(self) -> list[str]:
        return [self.fused_input] if self.fused_input else list(self.meta["feed_names"])

    def _output_name(self, predictor: paddle_infer.Predictor) -> str:
        names: list[str] = predictor.get_output_names()
        fetch: str | None = self.meta.get("fetch_name")
        return fetch if fetch is not None and fetch in names else names[0]


def load_model(
    models: Store,
    version: int,
    workers: int,
    slots: list[int] | None = None,
    sparse_dim: int | None = None,
) -> DenseModel:
    """Dense model `version` from `models` (the model URI's store), checked against the
    deployment's slot.conf and sparse_dim when given. ModelError if it cannot be served."""
    started = time.monotonic()
    try:
        meta = json.loads(models.read_text(dense_path(version, MODEL_META)))
    except FileNotFoundError as err:
        raise ModelError(f"version {version}: {err}") from None
    except ValueError as err:
        raise ModelError(f"version {version}: meta.json is not JSON ({err})") from None
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise ModelError(f"version {version}: meta.json lacks {', '.join(missing)}")
    model_slots = [int(s) for s in meta["slots"]]
    if slots is not None and model_slots != list(slots):
        raise ModelError(
            f"version {version}: trained on slots {model_slots}, but slot.conf has {list(slots)}"
        )
    if sparse_dim is not None and int(meta["sparse_dim"]) != sparse_dim:
        raise ModelError(
            f"version {version}: trained with sparse_dim {meta['sparse_dim']}, "
            f"serving maps feasigns with {sparse_dim}"
        )
    space = model_space(version, meta)
    if len(meta["feed_names"]) != space.inputs + len(space.dense):
        raise ModelError(
            f"version {version}: {len(meta['feed_names'])} feed names for {len(model_slots)} "
            f"slots, {len(space.crosses)} crosses and {len(space.dense)} dense features"
        )
    try:
        program = models.read_bytes(dense_path(version, meta.get("model_file", MODEL_FILE)))
        params = models.read_bytes(dense_path(version, meta.get("params_file", PARAMS_FILE)))
    except FileNotFoundError as err:
        raise ModelError(f"version {version}: {err}") from None
    _check_in_child(version, meta, program, params)
    program, fused_input = served_program(program, meta)
    if fused_input is None:
        log.info("version %d: the program's inputs are served as exported", version)
    first = _create_predictor(version, program, params)
    predictors = [first] + [first.clone() for _ in range(workers - 1)]
    first_single = _create_predictor(version, program, params, onednn=False)
    single = [first_single] + [first_single.clone() for _ in range(workers - 1)]
    model = DenseModel(
        version=version,
        meta=meta,
        space=space,
        embedding_dim=int(meta["embedding_dim"]),
        predictors=predictors,
        loaded_at=time.time(),
        load_seconds=0.0,
        single=single,
        fused_input=fused_input,
    )
    _smoke_test(model)
    model.load_seconds = time.monotonic() - started
    return model


ONEDNN_OPS = ("mul", "matmul", "matmul_v2")
ONEDNN_FUSES = (
    "matmul_activation_mkldnn_fuse_pass",
    "matmul_elementwise_add_mkldnn_fuse_pass",
    "elementwise_act_onednn_fuse_pass",
    "fc_act_mkldnn_fuse_pass",
    "softplus_activation_onednn_fuse_pass",
    "conv_activation_mkldnn_fuse_pass",
    "operator_scale_onednn_fuse_pass",
)


def model_space(version: int, meta: dict[str, Any]) -> SlotSpace:
    """What parsing needs from the version's meta.json (its slots, sparse_dim, dense
    features, crosses); ModelError when a part of it is not valid."""
    slots = [int(s) for s in meta["slots"]]
    dense = dense_features(version, meta)
    return SlotSpace(slots, int(meta["sparse_dim"]), dense, crosses_of(version, meta, slots))


def crosses_of(version: int, meta: dict[str, Any], slots: list[int]) -> list[tuple[int, int]]:
    """The version's crosses as input indices of their slots (meta.json `crosses`, pairs of
    its slots; none before they existed)."""
    crosses = meta.get("crosses")
    if crosses is None:
        return []
    if not isinstance(crosses, list):
        raise ModelError(
            f"version {version}: meta.json crosses is not a list of slot pairs: {crosses!r}"
        )
    try:
        return cross_indices(crosses, slots)
    except ValueError as err:
        raise ModelError(f"version {version}: meta.json crosses: {err}") from None


def dense_features(version: int, meta: dict[str, Any]) -> tuple[DenseFeature, ...]:
    """The version's dense features (meta.json `dense_features`; none before they existed)."""
    try:
        return tuple(
            DenseFeature(str(f["name"]), int(f["dim"])) for f in meta.get("dense_features") or []
        )
    except (KeyError, TypeError, ValueError):
        raise ModelError(
            f"version {version}: meta.json dense_features is not a list of {{name, dim}}: "
            f"{meta.get('dense_features')!r}"
        ) from None


def served_program(program: bytes, meta: dict[str, Any]) -> tuple[bytes, str | None]:
    """The program serving runs, and its one input when graph.py could fuse the inputs."""
    try:
        fused = fuse_inputs(program, list(meta["feed_names"]))
    except DecodeError:  # not a program: Paddle says so when it loads it
        return program, None
    return (program, None) if fused is None else fused


def predictor_config(program: bytes, params: bytes, onednn: bool = True) -> paddle_infer.Config:
    """Serving's predictor options (the module doc); `onednn=False`: the batch-1 predictor."""
    config = paddle_infer.Config()
    config.set_model_buffer(program, len(program), params, len(params))
    config.disable_gpu()
    config.disable_glog_info()
    config.set_cpu_math_library_num_threads(1)
    config.switch_ir_optim(True)
    config.delete_pass("fc_fuse_pass")
    if onednn:
        # oneDNN (on by default) for the matrix products only: its other kernels cost more
        # to set up per call than they compute here (and its fuses need them: deleted too).
        config.set_mkldnn_op(set(ONEDNN_OPS))
        for name in ONEDNN_FUSES:
            config.delete_pass(name)
    else:
        config.disable_mkldnn()
    config.enable_memory_optim()
    return config


def _create_predictor(
    version: int, program: bytes, params: bytes, onednn: bool = True
) -> paddle_infer.Predictor:
    config = predictor_config(program, params, onednn)
    try:
        return paddle_infer.create_predictor(config)
    except Exception as err:  # Paddle raises its own error types for a corrupt program
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelError(f"version {version}: Paddle cannot load the model: {first_line}") from None


def _smoke_test(model: DenseModel) -> None:
    """Inputs named as meta.json says, and two finite probabilities per example."""
    inputs = set(model.predictors[0].get_input_names())
    absent = [n for n in model.input_names if n not in inputs]
    if absent:
        raise ModelError(f"version {model.version}: the program has no input(s) {absent}")
    for n in (2, 1):  # both predictors: batch 1 runs on its own
        probe = np.zeros((model.space.inputs, n, model.embedding_dim), dtype=np.float32)
        dense = np.zeros((n, model.space.dense_dim), np.float32) if model.space.dense else None
        try:
            out = model.predict(0, probe, dense)
        except Exception as err:
            raise ModelError(f"version {model.version}: a probe prediction failed: {err}") from None
        if out.shape != (n, 2):
            raise ModelError(
                f"version {model.version}: a probe prediction gave shape {out.shape}, "
                f"expected ({n}, 2)"
            )
        if not np.isfinite(out).all():
            raise ModelError(
                f"version {model.version}: a probe prediction of {n} examples gave "
                f"probabilities that are not finite: {out.tolist()}"
            )


def _check_parameters(folder: Path, version: int) -> None:
    """Every dense parameter finite. The probe alone misses some NaN weights: oneDNN's
    matrix product of the probe's zero inputs with a NaN weight gave finite probabilities
    (the batch-1 predictor's own kernel did not), while real inputs would give NaN."""
    import paddle  # imported with paddle.inference already; static mode: this child only

    paddle.enable_static()
    tensor = paddle.base.core.VarDesc.VarType.LOD_TENSOR
    scope = paddle.static.Scope()
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CPUPlace())
        program, _, _ = paddle.static.load_inference_model(str(folder / "model"), exe)
        problems = []
        for var in program.list_vars():
            found = scope.find_var(var.name) if var.persistable and var.type == tensor else None
            if found is None:
                continue
            values = np.array(found.get_tensor())
            if not np.isfinite(values).all():
                nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
                problems.append(f"{var.name} ({nan} NaN, {inf} infinite)")
    if problems:
        raise ModelError(
            f"version {version}: dense parameters that are not finite: {', '.join(problems)}"
        )


CHILD_TIMEOUT = 300.0


def _check_in_child(version: int, meta: dict[str, Any], program: bytes, params: bytes) -> None:
    """Load and probe the model in a child process: a crash there rejects the version."""
    with tempfile.TemporaryDirectory(prefix=f"elasticctr-check-{version}-") as tmp:
        Path(tmp, "model.pdmodel").write_bytes(program)
        Path(tmp, "model.pdiparams").write_bytes(params)
        Path(tmp, "meta.json").write_text(json.dumps(meta))
        # This process's import path, however it was set (PYTHONPATH, sys.path edits).
        path = os.pathsep.join(p for p in sys.path if p)
        env = {**os.environ, "GLOG_minloglevel": "3", "PYTHONPATH": path}
        try:
            done = subprocess.run(
                [sys.executable, "-m", "elasticctr_serving.model", tmp, str(version)],
                capture_output=True,
                text=True,
                timeout=CHILD_TIMEOUT,
                env=env,
            )
        except subprocess.TimeoutExpired:
            raise ModelError(f"version {version}: loading took over {CHILD_TIMEOUT:.0f}s") from None
    if done.returncode == 0:
        return
    output = f"{done.stdout}\n{done.stderr}"
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    reason = next((line for line in reversed(lines) if line.startswith("ModelError: ")), None)
    if reason:
        raise ModelError(reason.removeprefix("ModelError: "))
    crash = "crashed Paddle" if done.returncode < 0 else f"exited {done.returncode}"
    errors = [line for line in lines if "Error:" in line] or lines[-1:]
    detail = errors[0] if errors else ""
    raise ModelError(f"version {version}: loading it {crash}: {detail[:300]}")


def _child_main(directory: str, version: int) -> None:
    folder = Path(directory)
    meta = json.loads((folder / "meta.json").read_text())
    program = (folder / "model.pdmodel").read_bytes()
    params = (folder / "model.pdiparams").read_bytes()
    program, fused_input = served_program(program, meta)
    predictor = _create_predictor(version, program, params)  # a corrupt program fails here
    _check_parameters(folder, version)
    model = DenseModel(
        version,
        meta,
        model_space(version, meta),
        int(meta["embedding_dim"]),
        [predictor],
        time.time(),
        0.0,
        [_create_predictor(version, program, params, onednn=False)],
        fused_input,
    )
    _smoke_test(model)


if __name__ == "__main__":
    try:
        _child_main(sys.argv[1], int(sys.argv[2]))
    except ModelError as err:
        print(f"ModelError: {err}", file=sys.stderr)
        sys.exit(3)
