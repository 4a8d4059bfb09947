"""The assembled pack, served as the engine runs it: `python policy/` speaks the Analyzer gRPC
protocol on the port it prints. These tests are the engine's side of that conversation
(GetAnalyzerInfo, Configure, Analyze, AnalyzeStack), without the Pulumi CLI.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from tests.policy.support import container, pod
from tests.support import pulumi_harness as harness
from tests.support.stacks import graph

ROOT = Path(__file__).resolve().parents[2]
POLICY_DIR = ROOT / "policy"


def _level(name: str) -> analyzer_pb2.EnforcementLevel.ValueType:
    return analyzer_pb2.EnforcementLevel.Value(name)


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    """The pack's gRPC server, started the way the Python language host starts it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, str(POLICY_DIR)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], 60)
        port = process.stdout.readline().strip() if ready else ""
        if not port.isdigit():
            process.kill()
            _, err = process.communicate(timeout=10)
            pytest.fail(f"the policy pack did not print its port: {port!r}\n{err}")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        process.terminate()
        process.wait(timeout=10)


def _struct(props: dict[str, Any]) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(props)
    return struct


def _urn(resource_type: str, name: str) -> str:
    return f"urn:pulumi:ci::elasticctr::{resource_type}::{name}"


def analyze(
    stub: analyzer_pb2_grpc.AnalyzerStub, resource_type: str, name: str, props: dict[str, Any]
) -> list[Any]:
    request = analyzer_pb2.AnalyzeRequest(
        type=resource_type,
        properties=_struct(props),
        urn=_urn(resource_type, name),
        name=name,
        options=analyzer_pb2.AnalyzerResourceOptions(),
    )
    return list(stub.Analyze(request).diagnostics)


def analyze_stack(
    stub: analyzer_pb2_grpc.AnalyzerStub, resources: list[harness.Registered]
) -> list[Any]:
    request = analyzer_pb2.AnalyzeStackRequest(
        resources=[
            analyzer_pb2.AnalyzerResource(
                type=r.type,
                properties=_struct(r.inputs),
                urn=r.urn,
                name=r.name,
                options=analyzer_pb2.AnalyzerResourceOptions(),
                parent=r.parent,
                dependencies=r.dependencies,
            )
            for r in resources
            if r.custom
        ]
    )
    return list(stub.AnalyzeStack(request).diagnostics)


def test_the_pack_pins_pulumi_policy_and_runs_in_the_projects_venv() -> None:
    pins = dict(
        line.split("==")
        for line in (POLICY_DIR / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    assert metadata.version("pulumi-policy") == pins["pulumi-policy"]
    assert metadata.version("pulumi") == pins["pulumi"]
    project = yaml.safe_load((POLICY_DIR / "PulumiPolicy.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    venv = (POLICY_DIR / project["runtime"]["options"]["virtualenv"]).resolve()
    assert venv == (ROOT / ".venv").resolve()
    assert (
        "-r ../../policy/requirements.txt"
        in (ROOT / "tests" / "support" / "requirements.txt").read_text()
    )


def test_the_engine_sees_every_policy(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "elasticctr-guardrails"
    assert info.supportsConfig
    levels = {p.name: p.enforcementLevel for p in info.policies}
    assert levels.pop("training-budget") == _level("ADVISORY")
    assert len(levels) == 12 and set(levels.values()) == {_level("MANDATORY")}
    budget = next(p for p in info.policies if p.name == "training-budget")
    assert budget.configSchema.properties["maxPodCpu"]["default"] == 8


def test_a_bad_deployment_is_rejected_with_readable_messages(
    analyzer: analyzer_pb2_grpc.AnalyzerStub,
) -> None:
    bad = container(
        "web",
        image="nginx:latest",
        resources={},
        securityContext={"privileged": True, "runAsNonRoot": True},
        env=[{"name": "DB_PASSWORD", "value": "hunter2"}],
    )
    diagnostics = analyze(analyzer, "kubernetes:apps/v1:Deployment", "web", pod([bad]))
    assert {d.policyName for d in diagnostics} == {
        "container-resources",
        "image-tag-pinned",
        "no-privileged-containers",
        "no-plaintext-credentials",
    }
    assert {d.enforcementLevel for d in diagnostics} == {_level("MANDATORY")}
    privileged = next(d for d in diagnostics if d.policyName == "no-privileged-containers")
    # The engine shows the description, then the rule's own message.
    assert privileged.message == (
        "No container is privileged, may escalate privileges, or adds capabilities beyond "
        'NET_BIND_SERVICE.\nDeployment "web": container "web" '
        "(spec.template.spec.containers[0]): securityContext.privileged is true. Remove this "
        "setting: a privileged container can take over its node."
    )
    assert privileged.policyPackName == "elasticctr-guardrails"
    assert all("hunter2" not in d.message for d in diagnostics)


def test_values_unknown_during_preview_do_not_break_a_rule(
    analyzer: analyzer_pb2_grpc.AnalyzerStub,
) -> None:
    from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE, UNKNOWN_STRING_VALUE

    app = container(
        image=UNKNOWN_STRING_VALUE,
        env=[{"name": "DB_PASSWORD", "value": UNKNOWN_STRING_VALUE}],
        securityContext={"runAsNonRoot": UNKNOWN_STRING_VALUE},
    )
    props = pod([app])
    props["spec"]["replicas"] = UNKNOWN_NUMBER_VALUE
    props["metadata"]["namespace"] = UNKNOWN_STRING_VALUE
    assert analyze(analyzer, "kubernetes:apps/v1:Deployment", "web", props) == []


def test_the_dev_stack_passes_resource_by_resource_and_as_a_stack(
    analyzer: analyzer_pb2_grpc.AnalyzerStub,
) -> None:
    dev = graph("dev")
    found = [
        (r.name, d.policyName, d.message)
        for r in dev.resources
        if r.custom
        for d in analyze(analyzer, r.type, r.name, r.inputs)
    ]
    assert found == []
    assert analyze_stack(analyzer, dev.resources) == []


def test_a_broken_shard_list_is_rejected_at_stack_level(
    analyzer: analyzer_pb2_grpc.AnalyzerStub,
) -> None:
    from tests.policy.support import replace_inputs

    sts = ("kubernetes:apps/v1:StatefulSet", "cube-shard-1")
    changed = replace_inputs(graph("dev"), {sts: lambda i: i["spec"].update(replicas=2)})
    diagnostics = analyze_stack(analyzer, changed)
    assert {d.policyName for d in diagnostics} == {"cube-shards-match"}
    assert diagnostics[0].urn == graph("dev").one(*sts).urn
    assert diagnostics[0].enforcementLevel == _level("MANDATORY")


def test_the_budget_is_policy_config(analyzer: analyzer_pb2_grpc.AnalyzerStub) -> None:
    job = graph("dev").one("kubernetes:batch.volcano.sh/v1alpha1:Job")
    assert analyze(analyzer, job.type, job.name, job.inputs) == []
    config = struct_pb2.Struct()
    config.update({"maxJobCpu": 2})
    analyzer.Configure(
        analyzer_pb2.ConfigureAnalyzerRequest(
            policyConfig={
                "training-budget": analyzer_pb2.PolicyConfig(
                    enforcementLevel=_level("ADVISORY"), properties=config
                )
            }
        )
    )
    try:
        [diagnostic] = analyze(analyzer, job.type, job.name, job.inputs)
    finally:
        analyzer.Configure(analyzer_pb2.ConfigureAnalyzerRequest(policyConfig={}))
    assert diagnostic.enforcementLevel == _level("ADVISORY")
    assert diagnostic.message.endswith(
        'Job "elasticctr-train": its 3 pods ask for 3 CPU cores together, above the budget of 2 '
        "(policy config maxJobCpu)."
    )
