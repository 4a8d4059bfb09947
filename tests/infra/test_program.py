"""The whole program per stack, under mocks: graph shape, outputs, secrets, invariants."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from components import kube
from components.cube import LAYOUT_LABEL, SHARD_LABEL, CubeArgs
from components.hdfs import HdfsArgs
from components.mlflow import MlflowArgs
from components.serving import ServingArgs
from infra import outputs
from infra.config import CubeConfig, HdfsConfig, MlflowConfig, ServingConfig
from tests.support import pulumi_harness as harness
from tests.support.manifests import describe, pod_templates
from tests.support.stacks import STACKS, TEST_SECRETS, run_stack
from tests.support.stacks import graph as stack_graph_of

COMPONENTS = {
    "elasticctr:namespace:Namespace",
    "elasticctr:storage:ObjectStorage",
    "elasticctr:mlflow:Mlflow",
    "elasticctr:cube:Cube",
    "elasticctr:training:Training",
    "elasticctr:serving:Serving",
}
CLUSTER_COMPONENT = {
    "dev": "elasticctr:cluster:ExistingCluster",
    "baidu-prod": "elasticctr:cluster:BaiduCce",
    "huawei-prod": "elasticctr:cluster:HuaweiCce",
    "aws-prod": "elasticctr:cluster:EksCluster",
}


def test_every_stack_builds_its_full_graph(stack_graph: tuple[str, harness.Graph]) -> None:
    stack, graph = stack_graph
    types = {r.type for r in graph.resources}
    assert types >= COMPONENTS
    # The cluster comes from the stack's cloud (tests/infra/test_clouds.py looks inside).
    assert CLUSTER_COMPONENT[stack] in types
    # Volcano is installed unless the cluster manages it (Huawei's CCE add-on).
    assert ("elasticctr:volcano:Volcano" in types) == (stack != "huawei-prod")
    # HDFS: in the cluster or external; AWS reads its data from S3.
    assert ("elasticctr:hdfs:Hdfs" in types) == (stack != "aws-prod")
    # MinIO only where the stack has no external bucket.
    assert bool(
        graph.of_type("kubernetes:apps/v1:StatefulSet")
        and any(
            r.inputs["metadata"]["name"] == "minio"
            for r in graph.of_type("kubernetes:apps/v1:StatefulSet")
        )
    ) == (stack == "dev")
    for kind in (
        "batch.volcano.sh/v1alpha1:Job",
        "apps/v1:Deployment",
        "core/v1:Service",
        "networking.k8s.io/v1:NetworkPolicy",
        "autoscaling/v2:HorizontalPodAutoscaler",
    ):
        assert graph.of_type(f"kubernetes:{kind}"), f"{stack} has no {kind}"


def test_dev_stack_resource_counts(dev_graph: harness.Graph) -> None:
    """The dev graph, per component: a change here is a change reviewers should see."""
    per_component: Counter[str] = Counter()
    for resource in dev_graph.resources:
        component = _component_of(dev_graph, resource)
        if component and resource.custom:
            per_component[component] += 1
    assert dict(per_component) == {
        "elasticctr:cluster:ExistingCluster": 1,  # the Kubernetes provider
        # default-deny ingress and egress, DNS egress; NetworkPolicies: an egress policy
        # per component that opens connections (docs/architecture.md, "Security")
        "elasticctr:namespace:Namespace": 8,
        # the release, the gate Job (webhook answers, queue Open), its account, its queue grant
        "elasticctr:volcano:Volcano": 5,
        # MinIO: root keys (2) and their Secret; per workload (5) two keys and a Secret;
        # account, Service, StatefulSet, policies ConfigMap, set-up Job, two NetworkPolicies
        "elasticctr:storage:ObjectStorage": 25,
        "elasticctr:hdfs:Hdfs": 10,  # + the hdfs-conf ConfigMap
        "elasticctr:mlflow:Mlflow": 6,
        # per shard (2 in dev): a StatefulSet, a Service and a PodDisruptionBudget
        "elasticctr:cube:Cube": 17,
        "elasticctr:training:Training": 6,
        "elasticctr:serving:Serving": 7,  # + its PodDisruptionBudget
        # ConfigMap, account, Role and its binding, Service, StatefulSet, its egress, and an
        # ingress policy per scraped process (5 without the feedback loop's joiner)
        "elasticctr:prometheus:Prometheus": 12,
    }


def _component_of(graph: harness.Graph, resource: harness.Registered) -> str | None:
    parent = resource.parent
    while parent:
        owner = graph.by_urn(parent) if any(r.urn == parent for r in graph.resources) else None
        if owner is None:
            return None
        if owner.type.startswith("elasticctr:"):
            return owner.type
        parent = owner.parent
    return None


def test_every_resource_belongs_to_a_component(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    for resource in graph.resources:
        if resource.type.startswith("elasticctr:"):
            continue
        assert _component_of(graph, resource), (
            f"{resource.type} {resource.name} has no component parent"
        )


def test_components_register_their_outputs(dev_graph: harness.Graph) -> None:
    for component in (r for r in dev_graph.resources if r.type.startswith("elasticctr:")):
        assert component.outputs is not None, f"{component.type} did not call register_outputs"
    assert dev_graph.component_outputs("elasticctr:cube:Cube")["shards"] == 2


def test_stack_outputs(stack_graph: tuple[str, harness.Graph]) -> None:
    stack, graph = stack_graph
    out = graph.stack_outputs
    namespace = harness.stack_config(stack)["elasticctr:namespace"]
    assert out[outputs.NAMESPACE] == namespace
    assert (
        out[outputs.TRAINER0_LOGS] == f"kubectl -n {namespace} logs -f elasticctr-train-trainer-0"
    )
    assert out[outputs.MLFLOW_URL] == f"http://mlflow.{namespace}.svc.cluster.local:5000"
    # The shard pods' names carry the layout: `kubectl get pods` finds them by it.
    layout = out[outputs.CUBE_LAYOUT]
    assert layout == graph.component_outputs("elasticctr:cube:Cube")["layout"]
    (shard0,) = [
        r for r in graph.of_type("kubernetes:apps/v1:StatefulSet") if r.name == "cube-shard-0"
    ]
    assert shard0.inputs["metadata"]["name"] == f"cube-{layout}-0"
    if stack == "dev":
        assert out[outputs.SERVING_URL] == "http://serving.elasticctr-dev.svc.cluster.local:8010"
        assert out[outputs.STORAGE_ENDPOINT] == "http://minio.elasticctr-dev.svc.cluster.local:9000"
        assert (
            out[outputs.HDFS_ADDRESS]
            == "hdfs://hdfs-namenode.elasticctr-dev.svc.cluster.local:8020"
        )
    else:  # LoadBalancer: the address the cloud gives the Service
        assert out[outputs.SERVING_URL] == "http://lb.example.test:8010"
    assert out[outputs.BUCKET] == harness.stack_config(stack).get("elasticctr:storage", {}).get(
        "bucket", "elasticctr"
    )


def test_secrets_stay_secret(stack_graph: tuple[str, harness.Graph]) -> None:
    """A secret of the config appears only inside values Pulumi marks secret."""
    stack, graph = stack_graph
    plaintexts = list(TEST_SECRETS.get(stack, {}).values())
    # MinIO's generated keys are secrets too (the mock makes them "ggg...").
    for dynamic in graph.of_type("pulumi-python:dynamic:Resource"):
        plaintexts.append("g" * int(dynamic.inputs["length"]))
    assert plaintexts or stack == "aws-prod"
    for resource in graph.resources:
        exposed = _without_secret_paths(resource)
        for plaintext in plaintexts:
            assert plaintext not in json.dumps(exposed), (
                f"{resource.type} {resource.name} leaks a secret"
            )
    public = {k: v for k, v in graph.stack_outputs.items() if k not in graph.stack_secret_outputs}
    assert not any(p in json.dumps(public) for p in plaintexts)


def _without_secret_paths(resource: harness.Registered) -> dict[str, object]:
    # Drop secret-marked values; what remains is what Pulumi stores in plaintext.
    masked = json.loads(json.dumps(resource.inputs))
    for path in resource.secret_paths:
        node = masked
        parts = path.replace("]", "").replace("[", ".").split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = "<secret>"
        else:
            node[last] = "<secret>"
    return masked


# One Secret of bucket keys per workload (docs/architecture.md, "Security").
WORKLOAD_KEYS = {f"storage-{w}" for w in ("training", "cube", "cube-transfer", "serving", "mlflow")}


def test_secret_values_land_in_kubernetes_secrets(stack_graph: tuple[str, harness.Graph]) -> None:
    stack, graph = stack_graph
    secrets = {r.inputs["metadata"]["name"]: r for r in graph.of_type("kubernetes:core/v1:Secret")}
    expected = {
        "dev": {"minio-root", *WORKLOAD_KEYS},
        "baidu-prod": {"hdfs-ugi", "serving-auth", *WORKLOAD_KEYS},
        "huawei-prod": {"serving-auth", *WORKLOAD_KEYS},
        "aws-prod": {"serving-auth"},  # each workload reaches S3 as its IAM role
    }[stack]
    assert set(secrets) == expected
    for secret in secrets.values():
        for key in secret.inputs["stringData"]:
            # Pulumi marks the whole stringData, or the key, as secret.
            assert {"stringData", f"stringData.{key}"} & set(secret.secret_paths), (
                f"{key} of {secret.name} is not secret"
            )


def test_trainers_change_touches_only_the_training_job() -> None:
    """`pulumi config set trainers 4` on dev: the Job changes (and is replaced), nothing else."""
    before = {(r.type, r.name): r for r in run_stack("dev", {}).resources}
    after = {(r.type, r.name): r for r in run_stack("dev", {"elasticctr:trainers": "4"}).resources}
    assert before.keys() == after.keys()
    changed = {key for key in before if before[key].inputs != after[key].inputs}
    assert changed == {("kubernetes:batch.volcano.sh/v1alpha1:Job", "training-job")}
    job = after[("kubernetes:batch.volcano.sh/v1alpha1:Job", "training-job")]
    assert job.replace_on_changes == ["spec"] and job.delete_before_replace
    tasks = {t["name"]: t for t in job.inputs["spec"]["tasks"]}
    assert tasks["trainer"]["replicas"] == 4
    assert job.inputs["spec"]["minAvailable"] == 4 + 1  # dev has one pserver


def test_cube_shards_change_touches_cube_and_serving_only() -> None:
    before = {(r.type, r.name): r for r in run_stack("dev", {}).resources}
    after = {
        (r.type, r.name): r for r in run_stack("dev", {"elasticctr:cube_shards": "3"}).resources
    }
    changed = {name for (_, name) in before if before[_, name].inputs != after[_, name].inputs}
    added = {name for (_, name) in after.keys() - before.keys()}
    # A new layout: every shard's objects get new names (replaced: created beside the old,
    # which go at the end of `up`), the shard list, and the pods that read it (they roll).
    shard_objects = {
        f"cube-shard-{s}{kind}" for s in (0, 1) for kind in ("", "-service", "-budget")
    }
    assert changed == {"cube-conf", "cube-transfer", "serving-deployment", *shard_objects}
    assert added == {"cube-shard-2", "cube-shard-2-service", "cube-shard-2-budget"}
    for s in (0, 1):
        key = ("kubernetes:apps/v1:StatefulSet", f"cube-shard-{s}")
        old, new = (g[key].inputs["metadata"]["name"] for g in (before, after))
        assert old != new and old.endswith(f"-{s}") and new.endswith(f"-{s}")
    # Serving's Deployment is awaited: `up` ends once its pods serve the new layout.
    serving = after[("kubernetes:apps/v1:Deployment", "serving-deployment")]
    assert "pulumi.com/skipAwait" not in serving.inputs["metadata"].get("annotations", {})
    (conf,) = json.loads(
        after[("kubernetes:core/v1:ConfigMap", "cube-conf")].inputs["data"]["cube.conf"]
    )
    shards = [r for (t, n), r in after.items() if t.endswith("StatefulSet") and "cube" in n]
    assert len(shards) == conf["shard"] == len(conf["nodes"]) == 3


def test_configmaps_change_in_place_on_every_cloud(stack_graph: tuple[str, harness.Graph]) -> None:
    """A new cube.conf must update serving's pods, not delete and re-create serving."""
    _, graph = stack_graph
    (provider,) = graph.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["enableConfigMapMutable"] in (True, "true")


def test_serving_comes_after_every_cube_shard(stack_graph: tuple[str, harness.Graph]) -> None:
    """Serving's Deployment depends on every shard StatefulSet of the current layout: its
    rollout starts once they exist."""
    stack, graph = stack_graph
    shards = {
        r.urn
        for r in graph.of_type("kubernetes:apps/v1:StatefulSet")
        if r.inputs["metadata"]["labels"]["app.kubernetes.io/component"] == "cube"
    }
    serving = graph.one("kubernetes:apps/v1:Deployment", "serving-deployment")
    assert shards and shards <= set(serving.dependencies), f"{stack}: {serving.dependencies}"


def test_deployments_keep_no_old_replica_sets(stack_graph: tuple[str, harness.Graph]) -> None:
    """Every Deployment keeps no old ReplicaSet: going back to an earlier pod template (a
    reshape undone) makes a fresh one, whose rollout the provider really awaits."""
    stack, graph = stack_graph
    deployments = graph.of_type("kubernetes:apps/v1:Deployment")
    assert deployments
    for deployment in deployments:
        limit = deployment.inputs["spec"].get("revisionHistoryLimit")
        assert limit == 0, f"{stack}: {deployment.urn} keeps {limit} old ReplicaSets"


def test_every_awaited_deployment_waits_for_its_whole_rollout(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    """`up` goes on past a Deployment (and deletes what its old pods used) only once the
    controller says every replica runs the new template: the condition, not the provider's
    own await, which can end on a status from before the update."""
    stack, graph = stack_graph
    for deployment in graph.of_type("kubernetes:apps/v1:Deployment"):
        annotations = deployment.inputs["metadata"].get("annotations", {})
        if annotations.get("pulumi.com/skipAwait") == "true":
            assert kube.WAIT_FOR not in annotations, f"{stack}: {deployment.urn}"
        else:
            assert annotations.get(kube.WAIT_FOR) == kube.ROLLOUT_COMPLETE, (
                f"{stack}: {deployment.urn} {annotations}"
            )
    serving = graph.one("kubernetes:apps/v1:Deployment", "serving-deployment")
    assert serving.inputs["metadata"]["annotations"][kube.WAIT_FOR] == kube.ROLLOUT_COMPLETE


RECOMMENDED = {
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
}
SELECTOR_LABELS = {
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/component",
    SHARD_LABEL,
    LAYOUT_LABEL,
}


def _selectors(value: Any, where: str = "") -> Iterator[tuple[str, dict[str, str]]]:
    """(path, labels) of every label selector in an object: spec.selector (a Service's map
    or a matchLabels), podSelector and namespaceSelector, the NetworkPolicy peers' too."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}"
            if key in ("selector", "podSelector", "namespaceSelector") and isinstance(item, dict):
                yield path, item.get("matchLabels", {} if "matchExpressions" in item else item)
            elif key != "template":  # a pod template's labels are no selector
                yield from _selectors(item, path)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _selectors(item, f"{where}[{i}]")


def _label_graphs() -> list[tuple[str, harness.Graph]]:
    from tests.infra.test_pod_contract import feedback_graph

    graphs = [(stack, stack_graph_of(stack)) for stack in STACKS]
    return [*graphs, ("dev with feedback", feedback_graph("dev"))]


def test_every_object_has_the_recommended_labels() -> None:
    """Kubernetes' recommended labels on every object the program makes (Helm's release is
    no object; Volcano's chart labels its own): the stack as the instance, the program's
    version, Pulumi as the manager."""
    version = importlib.metadata.version("elasticctr")
    for stack, graph in _label_graphs():
        instance = stack.split()[0]
        manifests = graph.manifests()
        assert len(manifests) > 30
        for manifest in manifests:
            labels = manifest["metadata"].get("labels", {})
            component = labels.get("app.kubernetes.io/component")
            assert component, f"{stack}: {describe(manifest)} has no component: {labels}"
            assert {key: labels.get(key) for key in RECOMMENDED} == {
                "app.kubernetes.io/name": component,
                "app.kubernetes.io/instance": instance,
                "app.kubernetes.io/version": version,
                "app.kubernetes.io/managed-by": "pulumi",
            }, f"{stack}: {describe(manifest)}: {labels}"
            assert labels["app.kubernetes.io/part-of"] == "elasticctr"


def test_selectors_and_replacing_pod_templates_keep_todays_labels() -> None:
    """Selectors keep today's labels (a Deployment's or StatefulSet's cannot change; a
    Service's, a NetworkPolicy's or a budget's would stop matching running pods). No pod
    template carries the version (every release would restart every pod); the training
    Job's and the cube shards' carry none of the new labels (a new template replaces the
    Job, makes a new cube layout); the others carry the stack's stable ones."""
    for stack, graph in _label_graphs():
        selectors = 0
        for manifest in graph.manifests():
            for path, selector in _selectors(manifest.get("spec", {}), "spec"):
                if path.endswith("namespaceSelector"):  # other namespaces: the kubelet's, DNS
                    continue
                selectors += 1
                assert set(selector) <= SELECTOR_LABELS, f"{stack}: {describe(manifest)}{path}"
                assert selector.get("app.kubernetes.io/part-of", "elasticctr") == "elasticctr"
            for owner, template in pod_templates(manifest):
                labels = template["metadata"]["labels"]
                component = labels["app.kubernetes.io/component"]
                assert "app.kubernetes.io/version" not in labels, f"{stack}: {owner}"
                replaced = manifest["kind"] == "Job" and "tasks" in manifest["spec"]
                if replaced or SHARD_LABEL in labels:
                    assert set(labels) <= SELECTOR_LABELS, f"{stack}: {owner}: {labels}"
                else:
                    assert labels == {
                        **kube.labels(component),
                        "app.kubernetes.io/name": component,
                        "app.kubernetes.io/instance": stack.split()[0],
                        "app.kubernetes.io/managed-by": "pulumi",
                    }, f"{stack}: {owner}: {labels}"
        assert selectors > 20


def test_disruption_budgets_let_a_drain_through_one_pod_at_a_time(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    """Each cube shard's and serving's budget selects exactly one workload's pods and lets
    one of them go: a drain goes through, one pod of each at a time."""
    stack, graph = stack_graph
    manifests = graph.manifests()
    pods = [(owner, t) for m in manifests for owner, t in pod_templates(m)]
    covered = []
    for budget in (m for m in manifests if m["kind"] == "PodDisruptionBudget"):
        spec = budget["spec"]
        assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec, describe(budget)
        selector = spec["selector"]["matchLabels"]
        (owner,) = [o for o, t in pods if t["metadata"]["labels"].items() >= selector.items()]
        covered.append(owner.split("/")[0])
    assert covered.count("Deployment") == 1, f"{stack}: {covered}"  # serving's
    shards = [m for m in manifests if m["kind"] == "StatefulSet" and SHARD_LABEL in
              m["spec"]["selector"]["matchLabels"]]  # fmt: skip
    assert covered.count("StatefulSet") == len(shards) > 0, f"{stack}: {covered}"


PRIORITIES = {"training": "batch", "cube": "online.lookups", "serving": "online", "feedback": "log"}
# Which part's class each pod template gets: the rest keep the cluster's default.
PRIORITY_OF = {
    "elasticctr-train/pserver": "training", "elasticctr-train/trainer": "training",
    "cube-transfer": "cube", "serving": "serving", "kafka": "feedback", "joiner": "feedback",
}  # fmt: skip


def test_each_parts_pods_get_its_priority_class_and_no_other_pod_one() -> None:
    """`<part>.priority_class` names the PriorityClass of that part's pods (the training
    Job's too, which Volcano orders and preempts jobs by); unset, no pod names one."""
    config: dict[str, dict[str, Any]] = {
        f"elasticctr:{part}": {"priority_class": name} for part, name in PRIORITIES.items()
    }
    config["elasticctr:feedback"]["enabled"] = True
    graph = run_stack("local", config)
    seen = {}
    for manifest in graph.manifests():
        for owner, template in pod_templates(manifest):
            name = owner.split("/", 1)[1]
            part = "cube" if name.startswith("cube-") and name != "cube-transfer" else None
            part = part or PRIORITY_OF.get(name)
            seen[name] = template["spec"].get("priorityClassName")
            assert seen[name] == (PRIORITIES[part] if part else None), owner
    assert set(PRIORITY_OF) <= set(seen), sorted(seen)
    assert [n for n in seen if n.startswith("cube-") and n != "cube-transfer"], sorted(seen)
    [job] = graph.of_type("kubernetes:batch.volcano.sh/v1alpha1:Job")
    assert job.inputs["spec"]["priorityClassName"] == "batch"
    for manifest in run_stack("local", {}).manifests():
        assert "priorityClassName" not in json.dumps(manifest), describe(manifest)


def _transfer_env(graph: harness.Graph) -> dict[str, Any]:
    (deployment,) = [
        m
        for m in graph.manifests()
        if m["kind"] == "Deployment" and m["metadata"]["name"] == "cube-transfer"
    ]
    _, template = next(pod_templates(deployment))
    (container,) = template["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_transfer_moves_the_registrys_alias_of_the_jobs_model_when_mlflow_runs(
    dev_graph: harness.Graph,
) -> None:
    env = _transfer_env(dev_graph)
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.elasticctr-dev.svc.cluster.local:5000"
    assert env["ELASTICCTR_REGISTERED_MODEL"] == "elasticctr-train"  # the trainers' experiment
    without = _transfer_env(run_stack("dev", {"elasticctr:mlflow": {"enabled": False}}))
    assert "MLFLOW_TRACKING_URI" not in without and "ELASTICCTR_REGISTERED_MODEL" not in without


@pytest.mark.parametrize(
    ("section", "args", "not_args"),
    [
        # (the config section, its component's args, its keys the program uses otherwise)
        (CubeConfig, CubeArgs, set()),
        (HdfsConfig, HdfsArgs, {"datanode_port"}),  # the routes to an external HDFS
        (MlflowConfig, MlflowArgs, {"enabled"}),
        (ServingConfig, ServingArgs, {"source_ranges", "auth"}),  # converted (tuple, bool)
    ],
)
def test_each_section_reaches_its_args_under_its_own_names(section, args, not_args) -> None:
    """The one mapping rule (infra/program.py): a section's settings are its args' fields of
    the same names, and no args field restates a section's default."""
    fields = {f.name: f for f in dataclasses.fields(args)}
    assert set(section.model_fields) - not_args <= set(fields)
    for name in section.model_fields:
        if name in fields:
            restated = fields[name].default is not dataclasses.MISSING
            assert not restated, f"{args.__name__}.{name} restates its default"
