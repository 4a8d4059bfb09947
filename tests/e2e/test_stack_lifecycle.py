"""The `ci` stack's whole life with the real Pulumi CLI against a local Kubernetes API server.

One control plane (tests/e2e/conftest.py) and one copy of the project (tests/support/
pulumi_cli.py) serve the whole module; the tests run in file order, each one step of the
stack's life, and a step is skipped when the one it builds on did not pass:

1. `pulumi preview` plans every resource the program declares: the same types and names as
   the program's graph under mocks, for the same config;
2. `pulumi up` creates them all; the API server then holds every object with the fields the
   program declared (a Volcano Job field the CRD does not know would be pruned, and fail
   here), and the secrets are encrypted in the state;
3. a second `pulumi up --expect-no-changes` changes nothing;
4. `trainers 2 -> 4`: `pulumi preview --diff` shows the Volcano Job, and nothing else, to be
   replaced; `pulumi up` deletes it, then creates it with 4 trainers and minAvailable 5;
5. `cube_shards 2 -> 3`: the shard StatefulSets and cube.conf follow;
6. `trainers 0`: preview and up fail with the program's message, and nothing changes;
7. `pulumi destroy` leaves no object of the stack on the API server.

The control plane has no node: pods stay Pending, so only the API objects are checked.
Set ELASTICCTR_E2E_ARTIFACTS=<dir> to keep the trainers preview (text and JSON) and the time
of each CLI command there (docs/e2e.md quotes them).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from components import kube
from infra.program import main as program
from tests.support import pulumi_harness as harness
from tests.support.components import env_of, secret_file_of
from tests.support.manifests import describe, mismatches
from tests.support.pulumi_cli import CI_JOB as JOB
from tests.support.pulumi_cli import CI_NAMESPACE as NAMESPACE
from tests.support.pulumi_cli import CI_STACK as STACK
from tests.support.pulumi_cli import CI_UGI as UGI
from tests.support.pulumi_cli import VOLCANO_JOB_TYPE as JOB_TYPE
from tests.support.pulumi_cli import (
    Project,
    changed_steps,
    ci_project,
    resources_of,
    temp_dir,
    type_and_name,
    without_plugin_warnings,
)
from tests.support.stacks import config_with_secrets

kubernetes = pytest.importorskip("kubernetes", reason="the kubernetes Python client is missing")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STACK_TYPE = "pulumi:pulumi:Stack"
# Controllers write these on objects the program declared; they are not the program's change.
CONTROLLER_ANNOTATIONS = ("deployment.kubernetes.io/",)


# ---- the stack and its API server --------------------------------------------------
@dataclass
class Lifecycle:
    project: Project
    api: Any  # kubernetes.client.ApiClient (admin)
    kubeconfig: Path
    passed: set[str] = field(default_factory=set)
    planned: set[tuple[str, str]] = field(default_factory=set)  # (type, name) of the preview
    artifacts: dict[str, str] = field(default_factory=dict)

    def require(self, *steps: str) -> None:
        missing = [s for s in steps if s not in self.passed]
        if missing:
            pytest.skip(f"needs the earlier step(s) {', '.join(missing)}, which did not pass")

    # ---- API access ---------------------------------------------------------------
    def get(self, path: str) -> dict[str, Any] | None:
        """GET `path` as the admin; None for 404."""
        try:
            return self.call("GET", path)
        except kubernetes.client.ApiException as err:
            if err.status == 404:
                return None
            raise

    def items(self, path: str) -> list[dict[str, Any]]:
        """The items of the list GET `path` answers."""
        listed: list[dict[str, Any]] = self.call("GET", path)["items"]
        return listed

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One API call as the admin, JSON in and out."""
        response = self.api.call_api(
            path,
            method,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=30,
        )
        return dict(json.loads(response.data))

    def object(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        return self.get(object_path(manifest))

    def custom(self, kind_path: str, name: str) -> dict[str, Any]:
        found = self.get(f"{kind_path}/{name}")
        assert found is not None, f"{kind_path}/{name} is not on the API server"
        return found

    def snapshot(self, manifests: list[dict[str, Any]]) -> dict[str, Any]:
        """What a change of the program could change, per declared object."""
        return {describe(m): fingerprint(self.object(m)) for m in manifests}


def object_path(manifest: dict[str, Any]) -> str:
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    plural = kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
    meta = manifest["metadata"]
    namespace = f"/namespaces/{meta['namespace']}" if meta.get("namespace") else ""
    return f"{base}{namespace}/{plural}/{meta['name']}"


def fingerprint(obj: dict[str, Any] | None) -> Any:
    if obj is None:
        return None
    meta = obj["metadata"]
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith(CONTROLLER_ANNOTATIONS)
    }
    body = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return (meta["uid"], meta.get("labels"), annotations, json.dumps(body, sort_keys=True))


def state_changes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """What differs between two lists of state resources, by URN and field."""
    old = {r["urn"]: r for r in before}
    new = {r["urn"]: r for r in after}
    changes = [f"{urn}: gone" for urn in old.keys() - new.keys()]
    changes += [f"{urn}: new" for urn in new.keys() - old.keys()]
    for urn in old.keys() & new.keys():
        for key in sorted(old[urn].keys() | new[urn].keys()):
            a, b = old[urn].get(key), new[urn].get(key)
            if a == b:
                continue
            if isinstance(a, dict) and isinstance(b, dict):
                keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
                changes.append(f"{urn}: {key}: {keys}")
            else:
                changes.append(f"{urn}: {key}: {a!r} -> {b!r}")
    return changes


def task(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in job["spec"]["tasks"] if t["name"] == name)


@functools.cache
def mock_graph() -> harness.Graph:
    """The program under mocks with the `ci` stack file's config and the secret UGI the test
    sets (its kubeconfig path changes no resource)."""
    config, secrets = config_with_secrets(STACK)
    config["elasticctr:data"] = {**config["elasticctr:data"], "ugi": UGI}
    return harness.run(program, config, (*secrets, "elasticctr:data"), stack=STACK)


@pytest.fixture(scope="module")
def lifecycle(control_plane: Any, cluster_path: str) -> Iterator[Lifecycle]:
    work = temp_dir("elasticctr-e2e-")
    api = None
    try:
        project = ci_project(work, cluster_path, control_plane.kubeconfig)
        api = kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig))
        state = Lifecycle(project=project, api=api, kubeconfig=control_plane.kubeconfig)
        yield state
        _save_artifacts(state)
    finally:
        if api is not None:
            api.close()
        # Nothing to destroy: the control plane is thrown away with its etcd.
        shutil.rmtree(work, ignore_errors=True)


def _save_artifacts(state: Lifecycle) -> None:
    target = os.environ.get("ELASTICCTR_E2E_ARTIFACTS")
    if not target:
        return
    out = Path(target)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in state.artifacts.items():
        (out / name).write_text(text, encoding="utf-8")
    lines = [f"{seconds:7.1f}s  pulumi {command}" for command, seconds in state.project.timings()]
    (out / "timings.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def declared() -> list[dict[str, Any]]:
    """Every Kubernetes object of the `ci` stack (trainers 2, cube_shards 2) under mocks."""
    return mock_graph().manifests()


# ---- 1. preview --------------------------------------------------------------------
def test_preview_plans_every_resource_of_the_program(lifecycle: Lifecycle) -> None:
    result, preview = lifecycle.project.preview_json()
    planned = {type_and_name(step["urn"]) for step in preview["steps"]}
    assert {step["op"] for step in preview["steps"]} == {"create"}, result.stdout
    mocked = {(r.type, r.name) for r in mock_graph().resources}
    # The engine adds the stack itself; the mocks record everything the program registers.
    assert planned - mocked == {(STACK_TYPE, f"elasticctr-{STACK}")}, result.stdout
    assert mocked - planned == set(), result.stdout
    assert preview["changeSummary"] == {"create": len(planned)}
    assert not [d for d in preview.get("diagnostics", []) if d.get("severity") == "error"]
    # Every part is there, and no Volcano chart (volcano.managed).
    types = {t for t, _ in planned}
    assert {"elasticctr:volcano:Volcano", "kubernetes:helm.sh/v3:Release"}.isdisjoint(types)
    assert {JOB_TYPE, "kubernetes:apps/v1:StatefulSet", "pulumi-python:dynamic:Resource"} <= types
    lifecycle.planned = planned
    lifecycle.passed.add("preview")


# ---- 2. up -------------------------------------------------------------------------
def test_up_creates_every_resource(lifecycle: Lifecycle, declared: list[dict[str, Any]]) -> None:
    lifecycle.require("preview")
    result = lifecycle.project.up()
    assert f"+ {len(lifecycle.planned)} created" in result.stdout, result.stdout
    state = lifecycle.project.export()
    in_state = {type_and_name(r["urn"]) for r in resources_of(state)}
    # The state also holds the default providers the engine made for the dynamic resources
    # and for the guard's read of the stack's last outputs (infra/guard.py).
    assert in_state - lifecycle.planned == {
        ("pulumi:providers:pulumi-python", "default"),
        ("pulumi:providers:pulumi", "default"),
    }
    assert lifecycle.planned <= in_state

    problems = []
    for manifest in declared:
        live = lifecycle.object(manifest)
        if live is None:
            problems.append(f"{describe(manifest)}: not on the API server")
            continue
        problems += [f"{describe(manifest)}{m}" for m in mismatches(manifest, live)]
        # Created by the provider (client-side apply: a create fails on an object that
        # exists, components/cluster/__init__.py), labelled as Pulumi's.
        managers = {(f["manager"], f["operation"]) for f in live["metadata"]["managedFields"]}
        if not any(m.startswith("pulumi-kubernetes") for m, _ in managers):
            problems.append(f"{describe(manifest)}: not written by Pulumi: {managers}")
        if live["metadata"].get("labels", {}).get("app.kubernetes.io/managed-by") != "pulumi":
            problems.append(f"{describe(manifest)}: no app.kubernetes.io/managed-by: pulumi")
    assert problems == []
    lifecycle.passed.add("up")


def test_the_training_job_is_a_gang_of_pservers_and_trainers(lifecycle: Lifecycle) -> None:
    lifecycle.require("up")
    job = lifecycle.custom(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs", JOB)
    spec = job["spec"]
    assert spec["minAvailable"] == 3  # trainers 2 + pservers 1
    assert (spec["schedulerName"], spec["queue"], spec["maxRetry"]) == ("volcano", "default", 3)
    assert spec["plugins"] == {"svc": [], "env": []}
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [("pserver", 1), ("trainer", 2)]
    assert task(job, "trainer")["policies"] == [
        {"exitCode": 3, "action": "TerminateJob"},
        {"event": "TaskCompleted", "action": "CompleteJob"},
    ]
    assert job["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    for name in ("pserver", "trainer"):
        pod = task(job, name)["template"]["spec"]
        (container,) = pod["containers"]
        env = env_of(container)
        assert env["TRAINING_ROLE"] == name.upper()
        assert env["PADDLE_TRAINERS_NUM"] == "2"
        assert env["PADDLE_PSERVERS_IP_PORT_LIST"] == f"{JOB}-pserver-0.{JOB}:30240"
        assert secret_file_of(pod, container, "HDFS_UGI") == {"name": "hdfs-ugi", "key": "HDFS_UGI"}
        assert container["image"] == "docker.io/elasticctr/trainer:0.1.0"
        assert (pod["restartPolicy"], pod["serviceAccountName"]) == ("Never", "training")
        assert pod["securityContext"]["runAsNonRoot"] is True


def test_cube_serving_and_their_config_maps(lifecycle: Lifecycle) -> None:
    lifecycle.require("up")
    ns = f"/namespaces/{NAMESPACE}"
    layout = lifecycle.project.run("stack", "output", "cube_layout").stdout.strip()
    cube = lifecycle.custom(f"/apis/apps/v1{ns}/statefulsets", f"cube-{layout}-1")  # 1 of 2
    assert cube["spec"]["replicas"] == 1  # the ci stack's cube.replicas
    assert cube["spec"]["serviceName"] == "cube-headless"
    assert cube["spec"]["podManagementPolicy"] == "Parallel"
    containers = {c["name"]: c for c in cube["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"server", "agent"}
    assert env_of(containers["server"])["CUBE_SHARD_NUM"] == "2"
    assert cube["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "2Gi"
    }
    conf_map = lifecycle.custom(f"/api/v1{ns}/configmaps", "cube-conf")
    (conf,) = json.loads(conf_map["data"]["cube.conf"])  # Paddle Serving's list form
    assert (conf["shard"], conf["dup"]) == (2, 1)
    assert [n["ipport_list"] for n in conf["nodes"]] == [
        f"list://cube-{layout}-{i}-0.cube-headless.{NAMESPACE}.svc.cluster.local:8027"
        for i in range(2)
    ]
    serving = lifecycle.custom(f"/apis/apps/v1{ns}/deployments", "serving")
    template = serving["spec"]["template"]
    # Pods roll when cube.conf changes: the template carries its hash.
    assert template["metadata"]["annotations"]["elasticctr.io/cube-conf-sha256"] == kube.digest(
        conf_map["data"]
    )
    sources = template["spec"]["volumes"][0]["projected"]["sources"]
    assert [s["configMap"]["name"] for s in sources] == ["cube-conf", "slot-conf"]
    assert serving["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    slot = lifecycle.custom(f"/api/v1{ns}/configmaps", "slot-conf")
    assert slot["data"]["slot.conf"].split() == (
        (Path(__file__).parents[2] / "stacks" / "slot.txt").read_text().split()
    )
    training = lifecycle.custom(f"/api/v1{ns}/configmaps", "training-config")
    runner = json.loads(training["data"]["trainer.json"])["runner"]
    assert runner["train_data_uri"] == (
        f"hdfs://hdfs-namenode.{NAMESPACE}.svc.cluster.local:8020/train_data"
    )
    assert (runner["start_date_hr"], runner["end_date_hr"]) == ("20191221/00", "20191221/05")


def test_services_rbac_and_network_policies(lifecycle: Lifecycle) -> None:
    lifecycle.require("up")
    ns = f"/namespaces/{NAMESPACE}"
    namespace = lifecycle.custom("/api/v1/namespaces", NAMESPACE)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"

    services = {s["metadata"]["name"]: s["spec"] for s in lifecycle.items(f"/api/v1{ns}/services")}
    assert services["cube-headless"]["clusterIP"] == "None"
    assert services["cube-headless"]["publishNotReadyAddresses"] is True
    assert [(p["name"], p["port"]) for p in services["serving"]["ports"]] == [
        ("http", 8010),
        ("grpc", 8011),
    ]
    assert services["serving"]["type"] == "ClusterIP"
    assert {"minio", "mlflow", "cube-transfer", "serving", "cube-headless"} <= set(services)

    role = lifecycle.custom(f"/apis/rbac.authorization.k8s.io/v1{ns}/roles", "elasticctr-viewer")
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    assert not any("secrets" in rule["resources"] for rule in role["rules"])
    binding = lifecycle.custom(
        f"/apis/rbac.authorization.k8s.io/v1{ns}/rolebindings", "elasticctr-viewer"
    )
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "elasticctr-viewer",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "elasticctr-viewer", "namespace": NAMESPACE}
    ]
    accounts = {a["metadata"]["name"]: a for a in lifecycle.items(f"/api/v1{ns}/serviceaccounts")}
    ours = {"training", "cube", "cube-transfer", "serving", "mlflow", "minio", "hdfs"}
    assert ours | {"elasticctr-viewer"} <= set(accounts)
    assert all(accounts[a]["automountServiceAccountToken"] is False for a in ours)
    # The role is usable: the API server answers an access review for the viewer.
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:elasticctr-viewer",
            "resourceAttributes": {"namespace": NAMESPACE, "verb": "list", "resource": "pods"},
        },
    }
    allowed = lifecycle.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    assert allowed["status"]["allowed"] is True

    policies = {
        p["metadata"]["name"]: p["spec"]
        for p in lifecycle.items(f"/apis/networking.k8s.io/v1{ns}/networkpolicies")
    }
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    pserver = policies["allow-pserver"]["ingress"][0]
    assert pserver["ports"] == [{"port": 30240, "protocol": "TCP"}]
    assert [
        f["podSelector"]["matchLabels"]["app.kubernetes.io/component"] for f in pserver["from"]
    ] == [
        "trainer",
        "pserver",
    ]
    assert "from" not in policies["allow-serving"]["ingress"][0]  # the public API
    # Egress too: denied by default, DNS for all, then per component (the API server
    # accepts every rule as written: ports with protocols, pod selectors, ip blocks).
    assert policies["default-deny-egress"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    assert policies["allow-dns"]["egress"][0]["ports"] == [
        {"port": 53, "protocol": "UDP"},
        {"port": 53, "protocol": "TCP"},
    ]
    components = ("pserver", "trainer", "cube", "cube-transfer", "serving", "mlflow")
    assert {f"egress-{c}" for c in (*components, "hdfs-datanode", "minio-client")} <= set(policies)


def test_secrets_are_in_the_cluster_and_encrypted_in_the_state(lifecycle: Lifecycle) -> None:
    lifecycle.require("up")
    ns = f"/namespaces/{NAMESPACE}"
    ugi = lifecycle.custom(f"/api/v1{ns}/secrets", "hdfs-ugi")
    assert base64.b64decode(ugi["data"]["HDFS_UGI"]).decode() == UGI
    plaintexts = [UGI]
    # MinIO's root keys, and each workload's own (docs/architecture.md, "Security")
    for name, (user, password) in {
        "minio-root": ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"),
        **{f"storage-{w}": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
           for w in ("training", "cube", "cube-transfer", "serving", "mlflow")},
    }.items():  # fmt: skip
        keys = lifecycle.custom(f"/api/v1{ns}/secrets", name)["data"]
        access = base64.b64decode(keys[user]).decode()
        secret = base64.b64decode(keys[password]).decode()
        assert (len(access), len(secret)) == (20, 40), name
        plaintexts += [access, secret]
    assert len(set(plaintexts)) == len(plaintexts)  # no two workloads share a key
    for path in [*lifecycle.project.state_files(), lifecycle.project.stack_file]:
        text = path.read_text(encoding="utf-8", errors="replace")
        leaked = [
            p for p in plaintexts if p in text or base64.b64encode(p.encode()).decode() in text
        ]
        assert leaked == [], f"{path} holds secrets in plaintext"
    assert "secure:" in lifecycle.project.stack_file.read_text(encoding="utf-8")


# ---- 3. idempotence ----------------------------------------------------------------
def test_a_second_up_changes_nothing(lifecycle: Lifecycle, declared: list[dict[str, Any]]) -> None:
    lifecycle.require("up")
    before = lifecycle.snapshot(declared)
    result = lifecycle.project.up("--expect-no-changes")
    assert f"{len(lifecycle.planned)} unchanged" in result.stdout, result.stdout
    assert lifecycle.snapshot(declared) == before
    lifecycle.passed.add("idempotent")


# ---- 4. trainers 2 -> 4 --------------------------------------------------------------
def test_more_trainers_replace_the_job_and_nothing_else(
    lifecycle: Lifecycle, declared: list[dict[str, Any]]
) -> None:
    lifecycle.require("idempotent")
    project = lifecycle.project
    jobs = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"
    old_uid = lifecycle.custom(jobs, JOB)["metadata"]["uid"]
    others = [m for m in declared if m["kind"] != "Job" or "tasks" not in m["spec"]]
    before = lifecycle.snapshot(others)

    project.config_set("trainers", "4")
    text = project.run("preview", "--diff")
    _, preview = project.preview_json()
    lifecycle.artifacts["trainers-2-to-4.diff.txt"] = without_plugin_warnings(text.stdout)
    lifecycle.artifacts["trainers-2-to-4.preview.json"] = json.dumps(preview, indent=2)

    changes = changed_steps(preview)
    assert list(changes.values()) == [("replace", JOB_TYPE)], text.stdout
    (step,) = [s for s in preview["steps"] if s["op"] != "same"]
    assert set(step["detailedDiff"]) == {
        "spec.minAvailable",
        "spec.tasks[1].replicas",
        "spec.tasks[1].minAvailable",  # the trainers' gang (Volcano's default, written out)
        # PADDLE_TRAINERS_NUM of both tasks.
        "spec.tasks[0].template.spec.containers[0].env[1].value",
        "spec.tasks[1].template.spec.containers[0].env[1].value",
    }
    assert {d["kind"] for d in step["detailedDiff"].values()} == {"update-replace"}
    assert "minAvailable: 3 => 5" in text.stdout
    # The diff aligns the colons of a task's changed fields.
    assert re.search(r"~ replicas *: 2 => 4", text.stdout), text.stdout
    assert re.search(r"~ minAvailable *: 2 => 4", text.stdout), text.stdout
    assert "+-1 to replace" in text.stdout

    result = project.up()
    output = result.stdout
    # deleteBeforeReplace: the old Job is gone before its replacement (same name) is created.
    assert output.index("deleted original") < output.index("created replacement"), output
    job = lifecycle.custom(jobs, JOB)
    assert job["metadata"]["uid"] != old_uid
    assert [(t["name"], t["replicas"]) for t in job["spec"]["tasks"]] == [
        ("pserver", 1),
        ("trainer", 4),
    ]
    assert job["spec"]["minAvailable"] == 4 + 1
    assert task(job, "trainer")["minAvailable"] == 4
    for name in ("pserver", "trainer"):
        (container,) = task(job, name)["template"]["spec"]["containers"]
        assert env_of(container)["PADDLE_TRAINERS_NUM"] == "4"
    assert lifecycle.snapshot(others) == before
    lifecycle.passed.add("trainers")


# ---- 5. cube_shards 2 -> 3 -----------------------------------------------------------
# Updated in place: the shard list, and the pods that read it (their templates carry its
# hash, so they roll).
CUBE_PARTS = {
    ("kubernetes:core/v1:ConfigMap", "cube-conf"),
    ("kubernetes:apps/v1:Deployment", "cube-transfer"),
    ("kubernetes:apps/v1:Deployment", "serving-deployment"),
}
# Replaced: shards 0 and 1 of a new layout are new objects beside the old (components/cube.py).
OLD_SHARDS = {
    (kind, f"cube-shard-{s}{suffix}")
    for s in (0, 1)
    for kind, suffix in (
        ("kubernetes:apps/v1:StatefulSet", ""),
        ("kubernetes:core/v1:Service", "-service"),
        ("kubernetes:policy/v1:PodDisruptionBudget", "-budget"),
    )
}
NEW_SHARD = {
    ("kubernetes:apps/v1:StatefulSet", "cube-shard-2"),
    ("kubernetes:core/v1:Service", "cube-shard-2-service"),
    ("kubernetes:policy/v1:PodDisruptionBudget", "cube-shard-2-budget"),
}


def test_more_cube_shards_make_a_new_layout_beside_the_old(
    lifecycle: Lifecycle, declared: list[dict[str, Any]]
) -> None:
    lifecycle.require("trainers")
    project = lifecycle.project
    ns = f"/namespaces/{NAMESPACE}"
    old_layout = project.run("stack", "output", "cube_layout").stdout.strip()
    others = [
        m
        for m in declared
        if (m["kind"], m["metadata"]["name"])
        not in {
            ("ConfigMap", "cube-conf"),
            *(("StatefulSet", f"cube-{old_layout}-{s}") for s in (0, 1)),
            *(("Service", f"cube-{old_layout}-{s}") for s in (0, 1)),
            *(("PodDisruptionBudget", f"cube-{old_layout}-{s}") for s in (0, 1)),
            ("Deployment", "cube-transfer"),
            ("Deployment", "serving"),
        }
    ]
    before = lifecycle.snapshot(others)

    project.config_set("cube_shards", "3")
    _, preview = project.preview_json()
    lifecycle.artifacts["cube-shards-2-to-3.preview.json"] = json.dumps(preview, indent=2)
    ops: dict[tuple[str, str], set[str]] = {}
    for step in preview.get("steps") or []:
        if step["op"] != "same":
            ops.setdefault(type_and_name(step["urn"]), set()).add(step["op"])
    ops.pop((STACK_TYPE, f"elasticctr-{STACK}"), None)
    assert {k for k, o in ops.items() if o == {"create"}} == NEW_SHARD, ops
    assert {k for k, o in ops.items() if o == {"update"}} == CUBE_PARTS, ops
    replaced = {k for k, o in ops.items() if "create-replacement" in o or "replace" in o}
    assert replaced == OLD_SHARDS, ops
    # Created before the old ones are deleted (at the end of `up`, after serving moved).
    assert all("delete-before-replace" not in o for o in ops.values()), ops
    project.up()

    layout = project.run("stack", "output", "cube_layout").stdout.strip()
    assert layout != old_layout
    for shard in range(3):
        cube = lifecycle.custom(f"/apis/apps/v1{ns}/statefulsets", f"cube-{layout}-{shard}")
        for container in cube["spec"]["template"]["spec"]["containers"]:
            assert env_of(container)["CUBE_SHARD_NUM"] == "3"
            assert env_of(container)["CUBE_SHARD_INDEX"] == str(shard)
    for shard in (0, 1):  # the old layout is gone
        path = f"/apis/apps/v1{ns}/statefulsets/cube-{old_layout}-{shard}"
        assert lifecycle.get(path) is None, path
    conf_map = lifecycle.custom(f"/api/v1{ns}/configmaps", "cube-conf")
    (conf,) = json.loads(conf_map["data"]["cube.conf"])
    assert conf["shard"] == 3
    assert [n["ipport_list"] for n in conf["nodes"]] == [
        f"list://cube-{layout}-{i}-0.cube-headless.{NAMESPACE}.svc.cluster.local:8027"
        for i in range(3)
    ]
    digest = kube.digest(conf_map["data"])
    for name, key in (("serving", "cube-conf-sha256"), ("cube-transfer", "config-sha256")):
        deployment = lifecycle.custom(f"/apis/apps/v1{ns}/deployments", name)
        assert (
            deployment["spec"]["template"]["metadata"]["annotations"][f"elasticctr.io/{key}"]
            == digest
        )
    assert lifecycle.snapshot(others) == before
    lifecycle.artifacts["cube-shards-2-to-3.ops.json"] = json.dumps(
        {f"{t} {n}": sorted(o) for (t, n), o in sorted(ops.items())}, indent=2
    )
    lifecycle.passed.add("cube")


# ---- 6. a bad value ---------------------------------------------------------------
def test_a_bad_value_fails_and_changes_nothing(
    lifecycle: Lifecycle, declared: list[dict[str, Any]]
) -> None:
    lifecycle.require("up")
    project = lifecycle.project
    # Decrypted: a failed update still rewrites the state, secrets with new ciphertexts.
    state_before = resources_of(project.export(show_secrets=True))
    api_before = lifecycle.snapshot(declared)
    message = 'elasticctr:trainers must be an integer >= 1, got "0"'

    project.config_set("trainers", "0")
    try:
        preview = project.run("preview", check=False)
        up = project.up(check=False)
    finally:
        project.config_set("trainers", "4")
    for result in (preview, up):
        assert result.returncode != 0, result.describe()
        assert "invalid stack config" in result.output, result.describe()
        assert message in result.output, result.describe()
    assert state_changes(state_before, resources_of(project.export(show_secrets=True))) == []
    assert lifecycle.snapshot(declared) == api_before


def test_an_unsafe_change_is_refused_and_changes_nothing(
    lifecycle: Lifecycle, declared: list[dict[str, Any]]
) -> None:
    """A change the running stack cannot take (infra/guard.py), through the real engine: the
    stack's last outputs are read back, and preview and up stop before any change."""
    lifecycle.require("up")
    project = lifecycle.project
    state_before = resources_of(project.export(show_secrets=True))
    api_before = lifecycle.snapshot(declared)
    project.config_set("training.embedding_dim", "16", path=True)
    try:
        preview = project.run("preview", check=False)
        up = project.up(check=False)
    finally:
        project.run("config", "rm", "--path", "training.embedding_dim")
    for result in (preview, up):
        assert result.returncode != 0, result.describe()
        assert "cannot be applied to the running stack safely" in result.output, result.describe()
        assert "elasticctr:training.embedding_dim: 9 -> 16: " in result.output, result.describe()
    assert state_changes(state_before, resources_of(project.export(show_secrets=True))) == []
    assert lifecycle.snapshot(declared) == api_before
    # Back as it was, nothing to do.
    assert project.run("preview", "--expect-no-changes", check=False).returncode == 0


# ---- 7. destroy --------------------------------------------------------------------
def test_destroy_leaves_nothing_of_the_stack(
    lifecycle: Lifecycle, declared: list[dict[str, Any]]
) -> None:
    lifecycle.require("up")
    result = lifecycle.project.run("destroy", "--yes")
    assert "deleted" in result.stdout, result.stdout
    assert resources_of(lifecycle.project.export()) == []
    # The namespace is deleted with everything in it, the controllers' objects (pods, volume
    # claims of the StatefulSets) too; its deletion may finish just after the CLI returns.
    deadline = time.monotonic() + 60
    while lifecycle.get(f"/api/v1/namespaces/{NAMESPACE}") and time.monotonic() < deadline:
        time.sleep(1)
    left = [describe(m) for m in declared if lifecycle.object(m) is not None]
    assert left == []
    assert lifecycle.get(f"/api/v1/namespaces/{NAMESPACE}") is None
    selector = "labelSelector=app.kubernetes.io%2Fpart-of%3Delasticctr"
    for path in ("/api/v1/pods", "/api/v1/configmaps", "/apis/apps/v1/deployments"):
        assert lifecycle.items(f"{path}?{selector}") == [], path
    lifecycle.project.run("stack", "rm", "--yes")
