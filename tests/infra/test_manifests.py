"""Every Kubernetes object the program declares, for every stack: valid against the
Kubernetes OpenAPI schema (strict), Volcano Jobs against Volcano's CRD, and every pod
bounded, unprivileged and non-root."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from elasticctr_common.metrics import ENDPOINTS

from tests.support import network_paths, operator_crds, volcano_webhook
from tests.support import pulumi_harness as harness
from tests.support.components import secret_file_of
from tests.support.manifests import (
    KUBERNETES_VERSIONS,
    VOLCANO_JOB,
    canonical_quantity,
    core_errors,
    describe,
    is_operator_object,
    pod_templates,
    quantity_fields,
    volcano_job_schema,
)
from tests.support.prerequisites import unavailable
from tests.support.volcano_crds import CrdsUnavailable

# EKS Pod Identity's agent on each node (AWS_CONTAINER_CREDENTIALS_FULL_URI), IPv4 and IPv6.
AWS_POD_IDENTITY_AGENT = ("169.254.170.23/32", "fd00:ec2::23/128")


def all_pods(graph: harness.Graph) -> list[tuple[str, dict[str, Any]]]:
    return [pod for manifest in graph.manifests() for pod in pod_templates(manifest)]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_objects_match_the_kubernetes_schema(
    stack_graph: tuple[str, harness.Graph], version: str
) -> None:
    _, graph = stack_graph
    checked = 0
    for manifest in graph.manifests():
        # A Volcano Job's pod templates are core objects: validated as such, strictly.
        errors = core_errors(manifest, version)
        if errors:
            pytest.fail("\n".join(errors))
        checked += (manifest["apiVersion"], manifest["kind"]) != VOLCANO_JOB
    assert checked >= 25


def test_prometheus_operator_objects_match_its_crds(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    _, graph = stack_graph
    objects = [m for m in graph.manifests() if is_operator_object(m)]
    if not objects:
        pytest.skip("this stack makes no Prometheus Operator objects")
    try:
        schemas = {kind: operator_crds.schema(kind) for kind in operator_crds.FILES}
    except CrdsUnavailable as why:
        unavailable(f"the Prometheus Operator's CRDs: {why}")
        return
    assert {m["kind"] for m in objects} == set(schemas)
    for manifest in objects:
        # Not jsonschema.validate: its check of the schema itself rejects Go's regexes
        # (`^(?i)...`), which apply to fields these objects do not set.
        jsonschema.Draft202012Validator(schemas[manifest["kind"]]).validate(manifest)


def test_volcano_jobs_match_the_volcano_crd(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    try:
        schema = volcano_job_schema()
    except CrdsUnavailable as why:
        pytest.skip(f"Volcano CRD schema unavailable: {why}")
    jobs = [m for m in graph.manifests() if (m["apiVersion"], m["kind"]) == VOLCANO_JOB]
    assert len(jobs) == 1
    for job in jobs:
        jsonschema.validate(job, schema)


def test_the_crd_check_rejects_unknown_fields() -> None:
    try:
        schema = volcano_job_schema()
    except CrdsUnavailable as why:
        pytest.skip(f"Volcano CRD schema unavailable: {why}")
    job = next(
        m for m in harness_graph_dev().manifests() if m["kind"] == "Job" and "tasks" in m["spec"]
    )
    job["spec"]["min_available"] = 3  # a snake_case leak, as an untranslated pod template would be
    with pytest.raises(jsonschema.ValidationError, match="min_available"):
        jsonschema.validate(job, schema)


def harness_graph_dev() -> harness.Graph:
    from tests.support.stacks import graph

    return graph("dev")


def test_volcano_s_webhook_leaves_the_training_job_as_sent(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    """The Job is stored as the program sends it, so an unchanged program shows no change
    (components/training.py): the webhook's defaults are all written out, and it never
    re-encodes the tasks."""
    _, graph = stack_graph
    (job,) = [m for m in graph.manifests() if (m["apiVersion"], m["kind"]) == VOLCANO_JOB]
    ops = volcano_webhook.patch(job)
    assert [op["path"] for op in ops if op["path"] == "/spec/tasks"] == [], ops
    assert volcano_webhook.apply(job, ops) == job


def test_every_quantity_is_written_as_the_api_server_writes_it_back(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    """A Volcano Job is stored as sent, and a re-encoded one (by Volcano's webhook) or a core
    object read back holds canonical quantities: anything else is a change on every diff."""
    _, graph = stack_graph
    found = [
        (f"{describe(m)}{path}", text)
        for m in graph.manifests()
        for path, text in quantity_fields(m.get("spec"), ".spec")
    ]
    assert any(".tasks[" in where for where, _ in found)  # the Job's pods are checked
    assert [(w, t, canonical_quantity(t)) for w, t in found if canonical_quantity(t) != t] == []


def test_every_container_has_requests_and_limits(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    for owner, template in all_pods(graph):
        for container in template["spec"]["containers"]:
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                assert set(resources.get(bound, {})) >= {"cpu", "memory"}, (
                    f"{owner}/{container['name']} {bound}"
                )


def test_every_pod_runs_unprivileged_and_non_root(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    pods = all_pods(graph)
    assert len(pods) >= 6  # mlflow, cube, transfer, serving, pserver, trainer (+ minio, hdfs)
    for owner, template in pods:
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, owner
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, owner
        # Prometheus (Kubernetes discovery) and Volcano's readiness Job (the queue's state)
        # call the API: their tokens, nobody else's.
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        calls_api = component in ("prometheus", "volcano-admission-ready")
        assert spec.get("automountServiceAccountToken") is calls_api, owner
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), owner
        for container in spec["containers"]:
            context = container["securityContext"]
            where = f"{owner}/{container['name']}"
            assert context["runAsNonRoot"] is True and context["runAsUser"] != 0, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert not context.get("privileged"), where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            image = container["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), where


def test_every_long_running_container_has_a_liveness_probe(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    """A stuck server is restarted: every container of a Deployment or StatefulSet (a Job's
    run to completion) has a liveness probe, and a startup probe, where there is one, waits
    for what the liveness probe checks."""
    _, graph = stack_graph
    servers = [m for m in graph.manifests() if m["kind"] in ("Deployment", "StatefulSet")]
    assert len(servers) >= 4  # mlflow, cube shards, cube-transfer, serving (+ minio, hdfs)
    for manifest in servers:
        for owner, template in pod_templates(manifest):
            for container in template["spec"]["containers"]:
                where = f"{owner}/{container['name']}"
                live = container.get("livenessProbe")
                assert live, f"{where} has no liveness probe"
                handler = {k: v for k, v in live.items() if k in ("httpGet", "tcpSocket")}
                assert handler, where
                startup = container.get("startupProbe")
                if startup:
                    assert {k: startup.get(k) for k in handler} == handler, where


def test_read_only_root_everywhere(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    writable = {
        f"{owner}/{c['name']}"
        for owner, template in all_pods(graph)
        for c in template["spec"]["containers"]
        if not c["securityContext"]["readOnlyRootFilesystem"]
    }
    # HDFS too: its *-site.xml files come from a ConfigMap, not from the image's starter.
    assert writable == set()


def test_no_cluster_wide_rbac_but_reading_the_training_queue(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    _, graph = stack_graph
    cluster_wide = [m for m in graph.manifests() if m["kind"].startswith("Cluster")]
    if cluster_wide:
        # Volcano's readiness Job reads one queue's state (queues are cluster-wide): the
        # training Job's.
        role, binding = sorted(cluster_wide, key=lambda m: m["kind"] != "ClusterRole")
        (training,) = [
            m for m in graph.manifests() if m["apiVersion"] == "batch.volcano.sh/v1alpha1"
        ]
        queue = training["spec"]["queue"]
        assert role["rules"] == [
            {
                "apiGroups": ["scheduling.volcano.sh"],
                "resources": ["queues"],
                "resourceNames": [queue],
                "verbs": ["get"],
            }
        ]
        assert binding["kind"] == "ClusterRoleBinding"
        assert binding["roleRef"]["name"] == role["metadata"]["name"]
        assert binding["subjects"] == [
            {
                "kind": "ServiceAccount",
                "name": "volcano-admission-ready",
                "namespace": "volcano-system",
            }
        ]
    role = next(m for m in graph.manifests() if m["kind"] == "Role")
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    assert not any("secrets" in rule["resources"] for rule in role["rules"])


# The connections each stack's pods can open (docs/architecture.md, "Security"): to pods of
# the stack when both ends' policies allow it, and out of the cluster.
COMMON_PATHS = {
    "trainer -> pserver:30240",
    "pserver -> pserver:30240",
    "trainer -> mlflow:5000",
    "cube-transfer -> mlflow:5000",  # the model registry's serving alias
    "serving -> cube:8027",
    "serving -> cube-transfer:8099",
    "cube-transfer -> cube:8001",
    "cube-transfer -> cube:8027",
}
BUCKET_USERS = ("pserver", "trainer", "cube", "cube-transfer", "serving", "mlflow")
IN_CLUSTER_HDFS = {
    "trainer -> hdfs-namenode:8020",
    "trainer -> hdfs-datanode:9866",
    "hdfs-datanode -> hdfs-namenode:8020",
    "hdfs-datanode -> hdfs-datanode:9866",
    "hdfs-datanode -> hdfs-datanode:9867",
}
CLOUD_S3 = {f"{c} -> *:443" for c in BUCKET_USERS}
# monitoring.prometheus in-cluster: the API server (any address), every part's metrics port
PROMETHEUS = {
    "prometheus -> *:443",
    "prometheus -> *:6443",
    "prometheus -> serving:8010",
    "prometheus -> cube:8027",
    "prometheus -> cube:8001",
    "prometheus -> cube-transfer:8099",
    "prometheus -> trainer:8014",
}
STACK_PATHS = {
    "dev": IN_CLUSTER_HDFS
    | PROMETHEUS
    | {f"{c} -> minio:9000" for c in (*BUCKET_USERS, "minio-client")},
    # the team's HDFS (its namenode by name: any address), BOS over HTTPS
    "baidu-prod": CLOUD_S3 | PROMETHEUS | {"trainer -> *:8020", "trainer -> *:9866"},
    "huawei-prod": IN_CLUSTER_HDFS | CLOUD_S3,
    # S3 over HTTPS, credentials from the node's Pod Identity agent; no HDFS
    "aws-prod": CLOUD_S3
    | {f"{c} -> {agent}:80" for c in BUCKET_USERS for agent in AWS_POD_IDENTITY_AGENT},
}


def test_pods_open_exactly_the_connections_they_need(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    """Default deny both ways; DNS for every pod; then per component what it uses (a
    connection between pods needs the client's egress and the server's ingress)."""
    stack, graph = stack_graph
    manifests = graph.manifests()
    policies = {m["metadata"]["name"]: m["spec"] for m in manifests if m["kind"] == "NetworkPolicy"}
    for direction in ("Ingress", "Egress"):
        assert policies[f"default-deny-{direction.lower()}"] == {
            "podSelector": {},
            "policyTypes": [direction],
        }
    works = {str(p) for p in network_paths.connections(manifests) if p.port != 53}
    assert works == COMMON_PATHS | STACK_PATHS[stack]
    dns = {p for p in network_paths.connections(manifests) if p.port == 53}
    pods = network_paths.components(manifests)
    assert {(p.client, p.server, p.protocol) for p in dns} == {
        (c, "*", proto) for c in pods for proto in ("UDP", "TCP")
    }


def test_serving_is_the_only_part_open_to_outside_the_stack(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    stack, graph = stack_graph
    ingress, _ = network_paths.allowed(graph.manifests(), "Ingress")
    pods = network_paths.components(graph.manifests())
    # aws-prod's clients come from its serving.source_ranges; the others' from anywhere
    # (with a bearer token on the prod stacks: tests/infra/test_config_security.py).
    clients = ("198.51.100.0/24", "203.0.113.0/24") if stack == "aws-prod" else ("*",)
    # aws-prod's Prometheus (monitoring.prometheus external) scrapes from its namespace.
    scrapes = (
        {
            f"namespace monitoring -> {e.component}:{e.port}"
            for e in ENDPOINTS.values()
            if e.process != "joiner"  # no feedback loop
        }
        if stack == "aws-prod"
        else set()
    )
    assert {str(p) for p in ingress if p.client not in pods} == {
        f"{c} -> serving:{port}" for c in clients for port in (8010, 8011)
    } | scrapes


def test_each_workload_holds_only_its_own_bucket_credentials(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    """A pod's bucket keys are its workload's (Secret storage-<service account>), whose
    MinIO user or IAM policy allows what that workload does; MinIO's root keys are MinIO's
    and its set-up Job's only (docs/architecture.md, "Security")."""
    stack, graph = stack_graph
    holders: dict[str, set[str]] = {}
    for owner, template in all_pods(graph):
        account = template["spec"]["serviceAccountName"]
        for container in template["spec"]["containers"]:
            # Secrets are files (elasticctr_common.secrets), never in the environment.
            assert not any(
                "secretKeyRef" in v.get("valueFrom", {}) for v in container.get("env", [])
            )
            assert "envFrom" not in container, owner
            names = {v["name"] for v in container.get("env", [])}
            if "AWS_SHARED_CREDENTIALS_FILE" in names:
                ref = secret_file_of(template["spec"], container, "AWS_SHARED_CREDENTIALS")
                assert ref["name"] == f"storage-{account}", (owner, ref)
        for volume in template["spec"].get("volumes", []):
            if "secret" in volume:
                holders.setdefault(volume["secret"]["secretName"], set()).add(account)
    if stack == "dev":
        assert holders["minio-root"] == {"minio"}  # the server and the bucket Job
    if stack == "aws-prod":  # Pod Identity: a role per workload, no keys
        assert not any(name.startswith("storage-") for name in holders)


def test_every_pod_has_its_own_service_account(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    accounts = {m["metadata"]["name"] for m in graph.manifests() if m["kind"] == "ServiceAccount"}
    for owner, template in all_pods(graph):
        name = template["spec"].get("serviceAccountName")
        assert name and name != "default" and name in accounts, owner


def test_the_feedback_loop_opens_exactly_its_connections() -> None:
    """dev with feedback on: Kafka takes serving and the joiner only; the joiner reaches
    the stream, HDFS (where it writes the partitions) and MLflow (each version's online
    quality), nothing else; the rest as before."""
    from tests.infra.test_pod_contract import feedback_graph

    manifests = feedback_graph("dev").manifests()
    works = {str(p) for p in network_paths.connections(manifests) if p.port != 53}
    feedback = {
        "serving -> kafka:9092",
        "joiner -> kafka:9092",
        "joiner -> hdfs-namenode:8020",
        "joiner -> hdfs-datanode:9866",
        "joiner -> mlflow:5000",
        "prometheus -> joiner:8012",
    }
    assert works == COMMON_PATHS | STACK_PATHS["dev"] | feedback
    ingress, _ = network_paths.allowed(manifests, "Ingress")
    pods = network_paths.components(manifests)
    assert {str(p) for p in ingress if p.client not in pods} == {
        "* -> serving:8010",
        "* -> serving:8011",
    }
    for _, template in all_pods(feedback_graph("dev")):
        for container in template["spec"]["containers"]:
            if container["name"] in ("kafka", "joiner"):
                assert container["resources"]["limits"] and container["resources"]["requests"]
                assert container["securityContext"]["readOnlyRootFilesystem"] is True
                assert template["spec"]["securityContext"]["runAsNonRoot"] is True


def test_a_canary_lets_the_transfer_read_the_joiners_figures() -> None:
    """The transfer judges a canary on the joiner's /status: that connection, no other."""
    from tests.infra.test_pod_contract import canary_graph, feedback_graph

    def works(graph: harness.Graph) -> set[str]:
        return {str(p) for p in network_paths.connections(graph.manifests()) if p.port != 53}

    assert works(canary_graph()) == works(feedback_graph("dev")) | {"cube-transfer -> joiner:8012"}


def test_the_feedback_loop_external_stream_and_its_secrets() -> None:
    """aws-prod with MSK: no broker pod; serving and the joiner reach the bootstrap port;
    the SASL credentials are a Secret's, never in a pod spec or a ConfigMap."""
    from tests.infra.test_pod_contract import feedback_graph

    graph = feedback_graph("aws-prod")
    manifests = graph.manifests()
    assert not any(m["kind"] == "StatefulSet" and m["metadata"]["name"] == "kafka"
                   for m in manifests)  # fmt: skip
    works = {str(p) for p in network_paths.connections(manifests) if p.port != 53}
    assert {"serving -> *:9096", "joiner -> *:9096"} <= works
    text = json.dumps([m for m in manifests if m["kind"] != "Secret"])
    assert "kafka-password-1" not in text and "joiner-user" not in text
    (secret,) = [m for m in manifests if m["kind"] == "Secret"
                 and m["metadata"]["name"] == "kafka-client"]  # fmt: skip
    assert set(secret.get("stringData") or secret.get("data") or {}) == {
        "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD",
    }  # fmt: skip
