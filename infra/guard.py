"""Changes a running stack cannot take safely, refused before any resource is registered.

Most changes are safe on a running stack: the training Job resumes from its checkpoint, a
new cube layout is built beside the old one (components/cube.py). A few would lose data
or leave a job that cannot start, and nothing in the preview's diff says so. For those the
program exports the values they concern (`stack_shape`); each run reads the stack's last
outputs from the engine (`pulumi:pulumi:readStackOutputs`, the call StackReference makes,
here synchronous) and refuses a change of any of them with why and what to do instead;
a change that may or may not be safe (an edit of the user's network file) is a warning in
the preview instead. A new stack has no outputs: nothing to compare.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from elasticctr_common.trainer_json import AUTO_CROSSES, dense_parameters
from pulumi.runtime import invoke

from infra.config import StackConfig
from infra.load_config import NAMESPACE, LoadedConfig

SHAPE_OUTPUT = "stack_shape"
READ_OUTPUTS = "pulumi:pulumi:readStackOutputs"
# The engine writes a new stack's first checkpoint as the update starts: a read at that
# moment can find the file half written ("failed to load checkpoint: EOF").
READ_ATTEMPTS = 5
READ_PAUSE_SECONDS = 0.5

_NEW_STACK = (
    "create a new stack for it (`pulumi stack init`), move what you keep, then "
    "`pulumi destroy` this one"
)
_CHECKPOINTS = (
    "the job resumes from its checkpoint, whose tables have the old shape, and would fail "
    "at restore; versions trained so far would no longer fit serving's requests"
)
_NEW_MODEL = "train the new model in a new stack (`pulumi stack init`), or keep the old value"
_CLAIMS = (
    "a StatefulSet's volume claims cannot change: the StatefulSet would be replaced (the "
    "service down meanwhile) and take its old claims back, at their old size"
)
_GROW = (
    "grow the claims themselves (`kubectl -n <namespace> patch pvc ...`, where the "
    "StorageClass allows expansion), or keep the old value"
)


@dataclass(frozen=True)
class Rule:
    key: str  # as the user sets it (pulumi config set --path <key>)
    value: Callable[[LoadedConfig], Any]  # None: the rule does not apply to this stack
    why: str
    instead: str
    # A watched key whose change also changes this value: reported once, under that key.
    follows: str = ""
    # Only a warning in the preview: the change may be safe, and the program cannot tell.
    warn_only: bool = False
    # The value that means "as the checkpoint has it": a change to it is always safe.
    follows_checkpoint: Any = None


def _in_cluster_hdfs(config: StackConfig, value: str) -> str | None:
    return value if config.hdfs.mode == "in-cluster" else None


def _network_file_digest(config: LoadedConfig) -> str | None:
    """The start of the sha256 of the user's network file, when one is shipped: an edit
    to it may rename or reshape its layers, which only building it with Paddle would show
    (the program does not import Paddle)."""
    if config.network_text is None:
        return None
    return "sha256 " + hashlib.sha256(config.network_text.encode()).hexdigest()[:16]


RULES = (
    Rule(
        "namespace",
        lambda c: c.stack.namespace,
        "every object would move to the new namespace, and the volumes of HDFS, MinIO and "
        "MLflow (training data, models, checkpoints) go with the old one",
        _NEW_STACK,
    ),
    Rule(
        "storage.mode",
        lambda c: c.stack.storage.mode,
        "models, cube versions and checkpoints stay in the old store: training would start "
        "from nothing and serving would lose its versions",
        _NEW_STACK,
    ),
    Rule(
        "storage.bucket",
        lambda c: c.stack.storage.bucket,
        "models, cube versions and checkpoints stay in the old bucket: training would start "
        "from nothing and serving would lose its versions",
        "copy the bucket's models/, cube/ and checkpoints/ to the new bucket first, or "
        + _NEW_STACK,
    ),
    Rule(
        "hdfs.mode",
        lambda c: c.stack.hdfs.mode,
        "the training data would be read from elsewhere, and an in-cluster HDFS left behind "
        "is deleted with its data",
        "copy the hour directories to the new place first, or " + _NEW_STACK,
    ),
    Rule(
        "hdfs.namenode_storage",
        lambda c: _in_cluster_hdfs(c.stack, c.stack.hdfs.namenode_storage),
        _CLAIMS,
        _GROW,
    ),
    Rule(
        "hdfs.datanode_storage",
        lambda c: _in_cluster_hdfs(c.stack, c.stack.hdfs.datanode_storage),
        _CLAIMS,
        _GROW,
    ),
    Rule(
        "storage.size",
        lambda c: c.stack.storage.size if c.stack.storage.mode == "minio" else None,
        _CLAIMS,
        _GROW,
    ),
    Rule("data.sparse_dim", lambda c: c.stack.data.sparse_dim, _CHECKPOINTS, _NEW_MODEL),
    Rule(
        "training.embedding_dim",
        lambda c: c.stack.training.embedding_dim,
        _CHECKPOINTS,
        _NEW_MODEL,
    ),
    # Unset follows the checkpoint, so unsetting is safe and setting it is refused too:
    # only unset is sure to match a running model.
    Rule(
        "training.sparse_optimizer",
        lambda c: c.stack.training.sparse_optimizer or "unset",
        _CHECKPOINTS,
        _NEW_MODEL,
        follows_checkpoint="unset",
    ),
    Rule(
        "training.dense_transform",
        lambda c: c.stack.training.dense_transform or "unset",
        _CHECKPOINTS,
        _NEW_MODEL,
        follows_checkpoint="unset",
    ),
    Rule("slot_conf", lambda c: c.slots, _CHECKPOINTS, _NEW_MODEL),
    # auto follows the checkpoint, so naming pairs is refused too (as for sparse_optimizer).
    Rule(
        "training.crosses",
        lambda c: c.stack.training.crosses,
        _CHECKPOINTS,
        _NEW_MODEL,
        follows_checkpoint=AUTO_CROSSES,
    ),
    # Watched with none too: adding dense features widens the network's first layer.
    Rule(
        "data.dense_features",
        lambda c: [[f.name, f.dim] for f in c.stack.data.dense_features],
        _CHECKPOINTS,
        _NEW_MODEL,
    ),
    # The network, as far as its dense parameters go: dnn, wide_deep and deepfm share
    # theirs without dense features, so a change among them is safe then.
    Rule(
        "training.model",
        lambda c: dense_parameters(
            c.stack.training.model,
            c.stack.training.network_module,
            bool(c.stack.data.dense_features),
        ),
        "the job resumes from its checkpoint, whose dense parameters are another network's, "
        "and would fail at restore",
        _NEW_MODEL,
        follows="data.dense_features",
    ),
    Rule(
        "training.network_module",
        _network_file_digest,
        "the file changed; the job resumes from its checkpoint, and if the network's layers "
        "now have other names or shapes it fails at restore (serving keeps its version)",
        "if the layers changed, " + _NEW_MODEL + "; an edit that keeps every layer's name "
        "and shape resumes as before",
        follows="training.model",
        warn_only=True,
    ),
)


class UnsafeChange(pulumi.RunError):
    """Changes refused on a running stack; one line each (a RunError: no traceback)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            "this change cannot be applied to the running stack safely (nothing was "
            "changed):\n  " + "\n  ".join(problems)
        )


def shape(config: LoadedConfig) -> dict[str, Any]:
    """The values the rules watch, as the stack output records them."""
    return {rule.key: value for rule in RULES if (value := rule.value(config)) is not None}


def problems(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """One line per watched value that changed and is refused (keys either side lacks are
    no change)."""
    return _changes(previous, current, warn_only=False)


def warnings(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """One line per watched value that changed and is only warned about."""
    return _changes(previous, current, warn_only=True)


def _changes(previous: Mapping[str, Any], current: Mapping[str, Any], warn_only: bool) -> list[str]:
    changed = [
        rule for rule in RULES
        if rule.key in previous and rule.key in current
        and previous[rule.key] != current[rule.key]
        and current[rule.key] != rule.follows_checkpoint
    ]  # fmt: skip
    keys = {rule.key for rule in changed}
    return [
        f"{NAMESPACE}:{rule.key}: {_show(previous[rule.key])} -> {_show(current[rule.key])}: "
        f"{rule.why}. Instead: {rule.instead}."
        for rule in changed
        if rule.follows not in keys and rule.warn_only == warn_only
    ]


def _show(value: Any) -> str:
    value = _integral(value)
    if isinstance(value, list) and len(value) > 6:  # slot ids
        return f"{len(value)} slots [{value[0]}, {value[1]}, ..., {value[-1]}]"
    return json.dumps(value)


def _integral(value: Any) -> Any:
    """Numbers as the config has them: outputs come back from the engine as floats."""
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


def previous_shape() -> dict[str, Any]:
    """The shape the stack's last update exported; empty for a new stack."""
    name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    for attempt in range(1, READ_ATTEMPTS + 1):
        try:
            result = invoke(READ_OUTPUTS, {"name": name})
            break
        except Exception as err:  # the engine's error, as the SDK raises it
            if "failed to load checkpoint" not in str(err) or attempt == READ_ATTEMPTS:
                raise
            time.sleep(READ_PAUSE_SECONDS)
    outputs = (result.value or {}).get("outputs") or {}
    recorded = outputs.get(SHAPE_OUTPUT)
    return dict(recorded) if isinstance(recorded, Mapping) else {}


def check(config: LoadedConfig) -> dict[str, Any]:
    """Raise UnsafeChange for a refused change; the shape to export otherwise (after a
    preview warning for each change that may be unsafe)."""
    current = shape(config)
    previous = previous_shape()
    found = problems(previous, current)
    if found:
        raise UnsafeChange(found)
    for line in warnings(previous, current):
        pulumi.log.warn(line)
    return current
