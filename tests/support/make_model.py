"""Synthetic model versions in the trainer's export layout, without training (tests, bench).

`python make_model.py SPEC.json` writes, for each version of the spec, what trainer 0
exports: `<model_uri>/<V>/dense/{model.pdmodel,model.pdiparams,meta.json}` (a Paddle
static program with the trainer's dense architecture: one pooled input per slot, FC layers
with ReLU, softmax over two classes), `<V>/sparse/part-00000` (SequenceFile) and the
donefile line, last. It also writes `<V>/weights.npz` so that a test can compute the
expected probabilities with numpy alone (`expected_probabilities`), independently of Paddle.

Run it as a process (Paddle's static mode is global state, not for the test process).
SPEC: {"model_dir", "versions": [V...], "slots": [...], "embedding_dim", "sparse_dim",
"keys": K, "fc_sizes": [...], "seed", "publish": true, "overrides": {V: [[param, index...,
value]]}, "delta_after": B, "crosses": [[slot, slot]...]} (overrides: dense parameter values to
replace, e.g. ["w1", 3, 4, "nan"]; delta_after: each version V > B is a delta export on V - 1,
its table V - 1's with 2% of the keys changed and 0.5% deleted; crosses: the model has one
more pooled input per pair, after the slots', as a model trained with them)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def table(spec: dict, version: int) -> tuple[np.ndarray, np.ndarray]:
    """Sparse keys 1..K (all within sparse_dim) and version-specific vectors; for a delta
    version (`delta_after`), its parent's with some keys changed and some deleted."""
    if version > spec.get("delta_after", version):
        keys, values = table(spec, version - 1)
        changed, deleted = delta_rows(spec, version, keys)
        values = values.copy()
        values[changed] = delta_values(spec, version, int(changed.sum()))
        return keys[~deleted], values[~deleted]
    keys = np.arange(1, spec["keys"] + 1, dtype=np.uint64)
    rng = np.random.default_rng(spec["seed"] * 1000 + version)
    scale = 1.0 / np.sqrt(spec["embedding_dim"])
    values = (rng.standard_normal((len(keys), spec["embedding_dim"])) * scale).astype(np.float32)
    return keys, values


def delta_rows(spec: dict, version: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which rows of the parent's table a delta version changes, and which it deletes."""
    rng = np.random.default_rng(spec["seed"] * 1000 + version + 700)
    pick = rng.random(len(keys))
    return pick < 0.02, pick > 0.995


def delta_values(spec: dict, version: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(spec["seed"] * 1000 + version + 900)
    scale = 1.0 / np.sqrt(spec["embedding_dim"])
    return (rng.standard_normal((count, spec["embedding_dim"])) * scale).astype(np.float32)


def dense_weights(spec: dict, version: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(spec["seed"] * 1000 + version + 500)
    width = (len(spec["slots"]) + len(spec.get("crosses", []))) * spec["embedding_dim"]
    layers = []
    for size in [*spec["fc_sizes"], 2]:
        w = (rng.standard_normal((width, size)) / np.sqrt(width)).astype(np.float32)
        b = (rng.standard_normal(size) * 0.1).astype(np.float32)
        layers.append((w, b))
        width = size
    return layers


def expected_probabilities(model_dir: Path, version: int, pooled: np.ndarray) -> np.ndarray:
    """Click probabilities of `pooled` [n, inputs * dim] (input-major per row: the slots,
    then the crosses) under V, numpy."""
    weights = np.load(model_dir / str(version) / "weights.npz")
    hidden = pooled.astype(np.float64)
    count = len(weights.files) // 2
    for i in range(count):
        hidden = hidden @ weights[f"w{i}"] + weights[f"b{i}"]
        if i < count - 1:
            hidden = np.maximum(hidden, 0)
    hidden -= hidden.max(axis=1, keepdims=True)
    prob = np.exp(hidden) / np.exp(hidden).sum(axis=1, keepdims=True)
    return prob[:, 1]


def write_version(spec: dict, version: int) -> None:
    import paddle
    from elasticctr_common.seqfile import write_sequence_file
    from elasticctr_common.storage import open_store
    from elasticctr_common.versions import DELETED, Version, append_version, deleted_keys_bytes

    paddle.enable_static()
    models = open_store(spec["model_dir"])
    root = Path(spec["model_dir"].removeprefix("file://")) / str(version)
    dim, slots = spec["embedding_dim"], spec["slots"]
    layers = dense_weights(spec, version)
    # {"V": [["w1", row, col, "nan"], ["b0", i, "inf"]]}: values a damaged export may hold
    for name, *where, value in spec.get("overrides", {}).get(str(version), []):
        layers[int(name[1:])][0 if name[0] == "w" else 1][tuple(where)] = float(value)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        names = [f"pooled_{s}" for s in slots]
        names += [f"pooled_{a}x{b}" for a, b in spec.get("crosses", [])]
        pooled = [paddle.static.data(name, [None, dim], "float32") for name in names]
        hidden = paddle.concat(pooled, axis=1)
        for i, (w, _b) in enumerate(layers):
            hidden = paddle.static.nn.fc(
                hidden,
                w.shape[1],
                activation="relu" if i < len(layers) - 1 else None,
                weight_attr=paddle.ParamAttr(name=f"fc_w{i}"),
                bias_attr=paddle.ParamAttr(name=f"fc_b{i}"),
            )
        prob = paddle.nn.functional.softmax(hidden)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    scope = paddle.static.global_scope()
    for i, (w, b) in enumerate(layers):
        scope.find_var(f"fc_w{i}").get_tensor().set(w, paddle.CPUPlace())
        scope.find_var(f"fc_b{i}").get_tensor().set(b, paddle.CPUPlace())
    dense = root / "dense"
    paddle.static.save_inference_model(str(dense / "model"), pooled, [prob], exe, program=main)
    meta = {
        "version": version,
        "slots": slots,
        "embedding_dim": dim,
        "sparse_dim": spec["sparse_dim"],
        "feed_names": [v.name for v in pooled],
        "fetch_name": prob.name,
        "model_file": "model.pdmodel",
        "params_file": "model.pdiparams",
        **({"crosses": spec["crosses"]} if spec.get("crosses") else {}),
    }
    (dense / "meta.json").write_text(json.dumps(meta, indent=1))
    np.savez(
        root / "weights.npz",
        **{f"w{i}": w for i, (w, _) in enumerate(layers)},
        **{f"b{i}": b for i, (_, b) in enumerate(layers)},
    )
    (root / "sparse").mkdir(parents=True, exist_ok=True)
    parent = version - 1 if version > spec.get("delta_after", version) else None
    if parent is None:
        write_sequence_file(root / "sparse" / "part-00000", table(spec, version))
    else:
        keys, _ = table(spec, parent)
        changed, deleted = delta_rows(spec, version, keys)
        rows = (keys[changed], delta_values(spec, version, int(changed.sum())))
        write_sequence_file(root / "sparse" / "part-00000", rows)
        (root / "sparse" / DELETED).write_bytes(deleted_keys_bytes(keys[deleted]))
    if spec.get("publish", True):
        line = Version(version, version, models.uri(f"{version}/sparse"), parent=parent)
        append_version(models, line)


def make_versions(spec: dict, timeout: float = 300) -> None:
    """Run this script as a process for `spec` (see the module doc)."""
    path = Path(spec["model_dir"].removeprefix("file://")) / f".spec-{spec['versions'][0]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec))
    pythonpath = ":".join(str(REPO / "images" / p) for p in ("common", "cube"))
    env = {"PYTHONPATH": pythonpath, "PATH": "/usr/bin:/bin", "GLOG_minloglevel": "2"}
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"make_model.py failed:\n{done.stderr[-3000:]}")


def default_spec(model_dir: Path, versions: list[int], **overrides) -> dict:
    spec = {
        "model_dir": f"file://{model_dir}",
        "versions": versions,
        "slots": [101, 102, 103, 104, 105, 106, 107, 108],
        "embedding_dim": 9,
        "sparse_dim": 1000001,
        "keys": 2000,
        "fc_sizes": [64, 32],
        "seed": 5,
    }
    return {**spec, **overrides}


if __name__ == "__main__":
    loaded = json.loads(Path(sys.argv[1]).read_text())
    for v in loaded["versions"]:
        write_version(loaded, v)
