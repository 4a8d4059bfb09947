"""Run the Pulumi program (or one component) under Pulumi's mocks and capture the graph.

The monitor records every RegisterResource request as the engine would receive it: type,
name, parent, dependencies, options, and inputs with secret markers intact, so tests can
check both the Kubernetes objects and what Pulumi would store as secret.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_in_stack
from pulumi.runtime.sync_await import _sync_await

from tests.support import cloud_mocks

ROOT = Path(__file__).resolve().parents[2]
SECRET_SIG = "4dabf18193072939515e22adb298388d"
SECRET_VALUE = "1b47061264138c4ac30d75fd1eb44270"
NAMESPACE = "elasticctr"


@dataclass
class Registered:
    type: str
    name: str
    urn: str
    parent: str
    custom: bool
    inputs: dict[str, Any]  # secrets unwrapped
    secret_paths: list[str]  # dotted paths of inputs marked secret
    dependencies: list[str]
    replace_on_changes: list[str]
    delete_before_replace: bool
    ignore_changes: list[str]
    retain_on_delete: bool
    additional_secret_outputs: list[str] = field(default_factory=list)
    outputs: dict[str, Any] | None = None  # components: what register_outputs recorded


@dataclass
class Graph:
    resources: list[Registered] = field(default_factory=list)
    stack_outputs: dict[str, Any] = field(default_factory=dict)
    stack_secret_outputs: list[str] = field(default_factory=list)

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.type == typ]

    def one(self, typ: str, name: str | None = None) -> Registered:
        found = [r for r in self.of_type(typ) if name is None or r.name == name]
        assert len(found) == 1, f"expected one {typ} {name or ''}, found {[r.name for r in found]}"
        return found[0]

    def component_outputs(self, typ: str, name: str | None = None) -> dict[str, Any]:
        """The outputs one component registered (register_outputs)."""
        outputs = self.one(typ, name).outputs
        assert outputs is not None, f"{typ} {name or ''} registered no outputs"
        return outputs

    def by_urn(self, urn: str) -> Registered:
        return next(r for r in self.resources if r.urn == urn)

    def kubernetes_objects(self) -> list[Registered]:
        return [
            r
            for r in self.resources
            if r.type.startswith("kubernetes:") and r.custom and "/" in r.type
        ]

    def manifests(self) -> list[dict[str, Any]]:
        """Every Kubernetes object as the API would receive it (Helm releases excluded)."""
        return [
            _integral(r.inputs)
            for r in self.kubernetes_objects()
            if not r.type.startswith("kubernetes:helm.sh/")
        ]


def _integral(value: Any) -> Any:
    """Protobuf carries numbers as floats; Kubernetes integers are integers."""
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _unwrap(value: Any, path: str, secrets: list[str]) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG) == SECRET_VALUE:
            secrets.append(path)
            return _unwrap(value.get("value"), path, secrets)
        return {k: _unwrap(v, f"{path}.{k}" if path else k, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v, f"{path}[{i}]", secrets) for i, v in enumerate(value)]
    return value


class Mocks(pulumi.runtime.Mocks):
    """Outputs a real engine and API server would add to what the program sent, and the
    stack's outputs of its last update (`previous`: none, a new stack)."""

    def __init__(self, previous: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.previous = previous or {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        outputs = dict(args.inputs)
        if args.typ == "pulumi-python:dynamic:Resource":
            outputs["value"] = "g" * int(outputs.get("length", 16))
        if (
            args.typ == "kubernetes:core/v1:Service"
            and outputs.get("spec", {}).get("type") == "LoadBalancer"
        ):
            outputs["status"] = {"loadBalancer": {"ingress": [{"hostname": "lb.example.test"}]}}
        if args.typ.startswith("kubernetes:") and "metadata" in outputs:
            outputs["metadata"] = {"uid": f"uid-{args.name}", **outputs["metadata"]}
        outputs.update(cloud_mocks.resource_outputs(args.typ, args.name, outputs))
        return f"{args.name}-id", outputs

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "pulumi:pulumi:readStackOutputs":
            return {"name": args.args["name"], "outputs": self.previous}, []
        return cloud_mocks.call_outputs(args.token), []  # (outputs, no check failures)


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks, graph: Graph) -> None:
        super().__init__(mocks)
        self.graph = graph

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            secrets: list[str] = []
            raw = json_format.MessageToDict(request.object)
            self.graph.resources.append(
                Registered(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    parent=request.parent,
                    custom=request.custom,
                    inputs=_unwrap(raw, "", secrets),
                    secret_paths=secrets,
                    dependencies=list(request.dependencies),
                    replace_on_changes=list(request.replaceOnChanges),
                    delete_before_replace=request.deleteBeforeReplace,
                    ignore_changes=list(request.ignoreChanges),
                    retain_on_delete=request.retainOnDelete,
                    additional_secret_outputs=list(request.additionalSecretOutputs),
                )
            )
        return response

    def GetDeploymentInfo(self, request: Any) -> Any:
        # Resources given as inputs (pulumi-eks node groups take their cluster) travel as
        # their ids here, not as references: the mock monitor turns references back into
        # resources on its own threads, which races the program's event loop ("attached to
        # a different loop"), now and then.
        info = super().GetDeploymentInfo(request)
        features = [
            f
            for f in info.supportedFeatures
            if f != resource_pb2.RESOURCE_MONITOR_FEATURE_RESOURCE_REFERENCES
        ]
        del info.supportedFeatures[:]
        info.supportedFeatures.extend(features)
        return info

    def RegisterResourceOutputs(self, request: Any) -> Any:
        secrets: list[str] = []
        outputs = _unwrap(json_format.MessageToDict(request.outputs), "", secrets)
        if request.urn.split("::")[2] == "pulumi:pulumi:Stack":
            self.graph.stack_outputs = outputs
            self.graph.stack_secret_outputs = secrets
        else:
            for resource in self.graph.resources:
                if resource.urn == request.urn:
                    resource.outputs = outputs
        return super().RegisterResourceOutputs(request)


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` map of stacks/Pulumi.<stack>.yaml."""
    text = (ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")
    return dict(yaml.safe_load(text).get("config") or {})


def project_defaults() -> dict[str, Any]:
    """Pulumi.yaml's declared defaults, as `elasticctr:key` -> value."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    return {
        f"{NAMESPACE}:{key}": entry["default"]
        for key, entry in (project.get("config") or {}).items()
        if "default" in entry
    }


def with_project_defaults(config: dict[str, Any]) -> dict[str, Any]:
    """`config` as the engine hands it to the program: every key of Pulumi.yaml the stack
    does not set gets its declared default (an object default as a whole object)."""
    return {**project_defaults(), **config}


def run(
    program: Callable[[], None],
    config: dict[str, Any],
    secret_keys: tuple[str, ...] = (),
    stack: str = "test",
    graph: Graph | None = None,
    previous: dict[str, Any] | None = None,
) -> Graph:
    """Run `program` under mocks with `config` (`elasticctr:key` -> value); return its graph.

    Values are given as a stack file holds them; objects are passed to Pulumi as JSON,
    as the engine does. Exceptions of the program propagate; pass `graph` to see what was
    registered before one. `previous`: the stack outputs of the last update (the engine's
    answer to readStackOutputs).
    """
    graph = graph if graph is not None else Graph()
    raw = {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    # The program looks up what it names in an existing cluster (infra/preflight.py): under
    # mocks it must reach none, whatever the caller's KUBECONFIG points at.
    kubeconfig = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(ROOT / "no-cluster-under-mocks")
    pulumi.runtime.set_all_config(raw, list(secret_keys))
    mocks = Mocks(previous)
    pulumi.runtime.set_mocks(
        mocks, project=NAMESPACE, stack=stack, preview=False, monitor=RecordingMonitor(mocks, graph)
    )
    # set_mocks made a root Stack of its own; the program gets a fresh one, as in a real run.
    pulumi_settings.ROOT.set(None)
    try:
        # Inside a Stack resource, as the real entry point runs it: exports become outputs.
        _sync_await(run_in_stack(program))
    finally:
        pulumi_settings.reset_options()
        pulumi.runtime.set_all_config({}, [])
        if kubeconfig is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = kubeconfig
    return graph
