"""Changes a running stack cannot take safely are refused before any resource exists
(infra/guard.py); everything else goes through."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pytest

from infra import guard
from tests.support import pulumi_harness as harness
from tests.support.stacks import config_with_secrets, graph, run_stack

CUSTOM = {"model": "custom", "network_module": "tests/images/trainer/nets/two_tower.py"}


def dev_shape() -> dict:
    return dict(graph("dev").stack_outputs[guard.SHAPE_OUTPUT])


def dev_with_section(key: str, values: dict) -> dict[str, Any]:
    """The dev stack's own section `key` with `values` changed in it."""
    base, _ = config_with_secrets("dev")
    return {key: {**base.get(key, {}), **values}}


def test_the_stack_records_what_the_guard_watches() -> None:
    shape = dev_shape()
    assert shape["namespace"] == "elasticctr-dev"
    assert shape["training.embedding_dim"] == 9 and shape["data.sparse_dim"] > 0
    assert shape["slot_conf"] == list(range(1, 27))  # stacks/slot.txt
    assert shape["hdfs.datanode_storage"]  # dev runs HDFS in the cluster
    assert shape["data.dense_features"] == []
    assert shape["training.model"] == "dnn layers only"  # wide_deep, no dense features


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("elasticctr:namespace", "elasticctr-other", "volumes of HDFS, MinIO and MLflow"),
        ("elasticctr:training", {"embedding_dim": 16}, "fail at restore"),
        ("elasticctr:training", {"sparse_optimizer": "adagrad"}, "fail at restore"),
        ("elasticctr:training", {"dense_transform": "none"}, "fail at restore"),
        ("elasticctr:training", {"crosses": [[1, 2]]}, "fail at restore"),
        ("elasticctr:data", {"sparse_dim": 77}, "fail at restore"),
        ("elasticctr:training", {"model": "dcn"}, "dense parameters are another network's"),
        ("elasticctr:training", CUSTOM, "dense parameters are another network's"),
        (
            "elasticctr:data",
            {"dense_features": [{"name": "dense_feature", "dim": 13}], "format": "paddlerec"},
            "fail at restore",
        ),
        ("elasticctr:hdfs", {"datanode_storage": "99Gi"}, "take its old claims back"),
    ],
)
def test_an_unsafe_change_is_refused_before_any_resource(key: str, value, words: str) -> None:
    from infra.program import main

    overrides = dev_with_section(key, value) if isinstance(value, dict) else {key: value}
    config, secrets = config_with_secrets("dev", overrides)
    registered = harness.Graph()
    with pytest.raises(guard.UnsafeChange) as raised:
        harness.run(
            main,
            config,
            secrets,
            stack="dev",
            graph=registered,
            previous={guard.SHAPE_OUTPUT: dev_shape()},
        )
    (line,) = raised.value.problems
    name = key.split(":")[1] + ("." + next(iter(value)) if isinstance(value, dict) else "")
    assert line.startswith(f"elasticctr:{name}: "), line
    assert words in line and "Instead: " in line, line
    assert registered.resources == []  # refused before anything was registered
    assert str(raised.value).startswith(
        "this change cannot be applied to the running stack safely (nothing was changed):"
    )


def test_safe_changes_and_new_stacks_go_through() -> None:
    previous = {guard.SHAPE_OUTPUT: dev_shape()}
    # Without dense features wide_deep, dnn and deepfm share their dense parameters.
    for overrides in (
        {"elasticctr:trainers": "4"},
        {"elasticctr:pservers": "3"},
        {"elasticctr:cube_shards": "3"},
        {"elasticctr:training": {"model": "dnn"}},
        {"elasticctr:training": {"model": "deepfm"}},
        {"elasticctr:training": {"sparse_learning_rate": 0.01, "embedx_learning_rate": 0.1}},
    ):
        assert run_stack("dev", overrides, previous).resources
    # A stack with no outputs yet (new), or outputs of a version without the shape.
    assert run_stack("dev", {"elasticctr:namespace": "other"}, {}).resources
    assert run_stack("dev", {"elasticctr:namespace": "other"}, {"namespace": "x"}).resources


def test_a_change_to_what_the_checkpoint_has_goes_through() -> None:
    """auto crosses and an unset optimizer or transform are what the running model's
    checkpoint has (checkpoint.resolve_model): a change to them is safe, one away refused."""
    before = dev_shape()
    named = {
        **before,
        "training.crosses": [[1, 2]],
        "training.sparse_optimizer": "adagrad",
        "training.dense_transform": "none",
    }
    following = {
        **before,
        "training.crosses": "auto",
        "training.sparse_optimizer": "unset",
        "training.dense_transform": "unset",
    }
    assert guard.problems(named, following) == []
    lines = guard.problems(following, named)
    assert [line.split(":", 2)[1] for line in lines] == [
        "training.sparse_optimizer",
        "training.dense_transform",
        "training.crosses",
    ], lines
    overrides = dev_with_section("elasticctr:training", {"crosses": "auto"})
    assert run_stack("dev", overrides, {guard.SHAPE_OUTPUT: named}).resources


def test_an_edit_of_the_network_file_is_a_preview_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whether an edit keeps the layers' names and shapes only Paddle could tell: the stack
    records the file's digest, and a changed one goes through with a warning."""
    overrides = dev_with_section("elasticctr:training", CUSTOM)
    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *a, **k: warned.append(message))
    shape = dict(run_stack("dev", overrides, {}).stack_outputs[guard.SHAPE_OUTPUT])
    digest = shape["training.network_module"]
    assert re.fullmatch(r"sha256 [0-9a-f]{16}", digest), digest
    assert run_stack("dev", overrides, {guard.SHAPE_OUTPUT: shape}).resources
    assert not [w for w in warned if "network_module" in w], warned
    edited = {**shape, "training.network_module": "sha256 0123456789abcdef"}
    assert run_stack("dev", overrides, {guard.SHAPE_OUTPUT: edited}).resources
    (line,) = [w for w in warned if "network_module" in w]
    assert line.startswith(
        f'elasticctr:training.network_module: "sha256 0123456789abcdef" -> "{digest}": '
        "the file changed;"
    ), line
    assert "fails at restore" in line and "Instead: if the layers changed" in line, line
    # A built-in network ships no file: nothing recorded, nothing to warn about.
    assert "training.network_module" not in dev_shape()
    # Another file is another network: refused (training.model), not warned about twice.
    other = {**edited, "training.model": "custom (tests/images/trainer/nets/other.py)"}
    lines = guard.problems(other, shape) + guard.warnings(other, shape)
    assert [line.split(":", 2)[1] for line in lines] == ["training.model"], lines


def test_the_message_names_the_change_and_what_to_do() -> None:
    before = dev_shape()
    after = {**before, "slot_conf": [*before["slot_conf"], 27], "namespace": "b"}
    lines = guard.problems(before, after)
    assert lines[0].startswith('elasticctr:namespace: "elasticctr-dev" -> "b": ')
    assert "Instead: create a new stack for it (`pulumi stack init`)" in lines[0]
    assert lines[1].startswith(
        "elasticctr:slot_conf: 26 slots [1, 2, ..., 26] -> 27 slots [1, 2, ..., 27]: "
    )
    # A value only one side has (a rule that does not apply, or an older stack): no change.
    assert guard.problems({"storage.size": "2Gi"}, {}) == []


def test_a_checkpoint_read_while_the_engine_writes_it_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new stack's first checkpoint can be half written when the guard reads it."""
    from types import SimpleNamespace

    calls: list[str] = []

    def flaky(token: str, args: dict[str, Any]) -> Any:
        calls.append(token)
        if len(calls) < 3:
            raise Exception("invoke failed: failed to load checkpoint: EOF")
        return SimpleNamespace(value={"outputs": {guard.SHAPE_OUTPUT: {"namespace": "x"}}})

    monkeypatch.setattr(guard, "invoke", flaky)
    monkeypatch.setattr(guard, "READ_PAUSE_SECONDS", 0)
    assert guard.previous_shape() == {"namespace": "x"} and len(calls) == 3

    def broken(token: str, args: dict[str, Any]) -> Any:
        raise Exception("invoke failed: permission denied")

    monkeypatch.setattr(guard, "invoke", broken)
    with pytest.raises(Exception, match="permission denied"):
        guard.previous_shape()
