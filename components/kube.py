"""Conventions every elasticctr pod follows (docs/architecture.md, "Kubernetes conventions").

Components build their pods from these helpers so that security context, resources,
labels and config mounts are decided in one place.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as package_metadata
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# The contract's config and scratch directories, which every component mounts.
from elasticctr_common.contract import CONFIG_DIR as CONFIG_DIR
from elasticctr_common.contract import DATA_DIR as DATA_DIR
from elasticctr_common.scrape import COMPONENT_LABEL as SCRAPE_COMPONENT_LABEL
from elasticctr_common.scrape import PART_OF as SCRAPE_PART_OF_LABEL
from elasticctr_common.scrape import PART_OF_VALUE
from elasticctr_common.secrets import SECRETS_DIR, file_variable

# The user of the project's images (their Dockerfiles create it), and of every pod that runs
# no official image with a user of its own: above the host's users (10000 and up, as
# scanners ask), so a container escape lands on no account of the node.
RUN_AS_USER = 10001
# The selector's labels (labels()), which Prometheus's jobs select by too (the contract's).
PART_OF = PART_OF_VALUE
PART_OF_LABEL = SCRAPE_PART_OF_LABEL
COMPONENT_LABEL = SCRAPE_COMPONENT_LABEL  # selects a part's pods
# Kubernetes' recommended labels beyond the selector's part-of and component.
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the stack: two stacks in one cluster differ
VERSION_LABEL = "app.kubernetes.io/version"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "pulumi"
# Seconds a server goes on answering, not ready, after SIGTERM before it stops accepting:
# time for the endpoints to drop the pod, so no client is sent to a closed port. With the
# drain after it (10 s at most), well inside the default grace period of 30 s.
SHUTDOWN_DELAY_SECONDS = 5
# Old ReplicaSets kept by a Deployment: none. Going back to an earlier pod template would
# revive its ReplicaSet at 0 replicas, which the provider's await takes for a finished
# rollout, so `up` would go on (and delete what the old pods still use) before the new
# pods are ready. A fresh ReplicaSet is awaited properly; rollback is by config anyway.
REVISION_HISTORY_LIMIT = 0
# On every node of a cloud stack's pool (components/cluster): `node_pool` selects by it.
POOL_LABEL = "elasticctr.io/pool"


WAIT_FOR = "pulumi.com/waitFor"
# The provider's built-in Deployment await (pulumi-kubernetes 4.x) can end on a copy of the
# Deployment from before the update, cached by an informer another await started: the old
# status says "available", and the engine then deletes what the old pods still use (an old
# cube layout). A waitFor condition is judged only on a status the controller wrote for the
# applied generation. The controller sets this reason once every replica runs the new
# template and is available; a template change always makes a new ReplicaSet (none is
# kept to revive: REVISION_HISTORY_LIMIT), which first resets it to NewReplicaSetCreated.
ROLLOUT_COMPLETE = (
    'jsonpath={.status.conditions[?(@.type=="Progressing")].reason}=NewReplicaSetAvailable'
)


@dataclass(frozen=True)
class KubeTarget:
    """Where components put their objects, and how: shared by every component's args."""

    provider: pulumi.ProviderResource
    namespace: pulumi.Input[str]
    image_pull_policy: str = "IfNotPresent"
    # The Kubernetes provider waits for readiness unless told not to; a stack whose cluster
    # never runs containers (the e2e API server) sets this.
    skip_await: bool = False

    def opts(self, parent: pulumi.Resource, **kwargs: Any) -> pulumi.ResourceOptions:
        """Options of a component's child: parented to it, on the stack's provider."""
        return pulumi.ResourceOptions(parent=parent, provider=self.provider, **kwargs)

    def metadata(
        self,
        name: str,
        component: str,
        annotations: dict[str, str] | None = None,
        await_ready: bool = True,
    ) -> k8s.meta.v1.ObjectMetaArgsDict:
        """Metadata of an object; `await_ready=False` for workloads that can only become
        ready later (once training has produced a first model version)."""
        merged = dict(annotations or {})
        if self.skip_await or not await_ready:
            merged["pulumi.com/skipAwait"] = "true"
        meta: dict[str, Any] = {
            "name": name,
            "namespace": self.namespace,
            "labels": object_labels(component),
        }
        if merged:
            meta["annotations"] = merged
        return meta

    def deployment_metadata(self, name: str, component: str) -> k8s.meta.v1.ObjectMetaArgsDict:
        """Metadata of a Deployment: `up` waits until its rollout is complete
        (ROLLOUT_COMPLETE), not only until the provider's own await says so."""
        awaited = None if self.skip_await else {WAIT_FOR: ROLLOUT_COMPLETE}
        return self.metadata(name, component, awaited)


def labels(component: str) -> dict[str, str]:
    """Selector labels of one component (stable: they select pods, and a selector of a
    Deployment or StatefulSet cannot change)."""
    return {PART_OF_LABEL: PART_OF, COMPONENT_LABEL: component}


def stack_labels(component: str) -> dict[str, str]:
    """The selector labels and the recommended ones that never change for a stack's object:
    what pod templates carry (pod_template)."""
    return {
        **labels(component),
        NAME_LABEL: component,
        INSTANCE_LABEL: pulumi.get_stack(),
        MANAGED_BY_LABEL: MANAGED_BY,
    }


def object_labels(component: str) -> dict[str, str]:
    """Every recommended label, the program's version included: the labels of each object
    the program makes (KubeTarget.metadata), never of a pod template (pod_template)."""
    return {**stack_labels(component), VERSION_LABEL: package_metadata.version(PART_OF)}


def quantity_cpu(cores: float) -> str:
    """Cores in millicores, written as Kubernetes writes them back ("2", "1500m")."""
    return _canonical(round(cores * 1000), 1000, ("m", "", "k", "M", "G", "T", "P", "E"))


def quantity_mem(gib: float) -> str:
    """GiB in MiB, written as Kubernetes writes them back ("2Gi", "1536Mi")."""
    return _canonical(round(gib * 1024), 1024, ("Mi", "Gi", "Ti", "Pi", "Ei"))


def _canonical(amount: int, base: int, suffixes: tuple[str, ...]) -> str:
    """`amount` of the unit `suffixes[0]` in the canonical form of apimachinery's Quantity:
    the largest suffix that leaves a whole number. A custom resource (the Volcano Job) is
    stored as sent, and a quantity re-encoded by Volcano's webhook or read back from a core
    object comes back canonical: any other spelling would show as a change on every diff."""
    step = 0
    while amount and amount % base == 0 and step < len(suffixes) - 1:
        amount //= base
        step += 1
    return f"{amount}{suffixes[step]}" if amount else "0"


def resources(cpu: float, mem_gib: float) -> k8s.core.v1.ResourceRequirementsArgsDict:
    """Requests equal to limits: Guaranteed QoS, so training and serving are never the first
    pods evicted and throughput does not depend on what else shares the node."""
    amounts = {"cpu": quantity_cpu(cpu), "memory": quantity_mem(mem_gib)}
    return {"requests": amounts, "limits": amounts}


def container_security(
    read_only_root: bool = True, user: int = RUN_AS_USER
) -> k8s.core.v1.SecurityContextArgsDict:
    """Restricted Pod Security Standard, and a read-only root where the image allows it."""
    return {
        "run_as_non_root": True,
        "run_as_user": user,
        "run_as_group": user,
        "allow_privilege_escalation": False,
        "read_only_root_filesystem": read_only_root,
        "capabilities": {"drop": ["ALL"]},
        "seccomp_profile": {"type": "RuntimeDefault"},
    }


def pod_security(user: int = RUN_AS_USER) -> k8s.core.v1.PodSecurityContextArgsDict:
    return {
        "run_as_non_root": True,
        "run_as_user": user,
        "run_as_group": user,
        "fs_group": user,
        "seccomp_profile": {"type": "RuntimeDefault"},
    }


# Scratch space for containers with a read-only root (pod_template adds the volume).
TMP_MOUNT: k8s.core.v1.VolumeMountArgsDict = {"name": "tmp", "mount_path": "/tmp"}


def config_volume(*config_maps: pulumi.Input[str]) -> k8s.core.v1.VolumeArgsDict:
    """One read-only directory (CONFIG_DIR) holding the keys of several ConfigMaps."""
    return {
        "name": "config",
        "projected": {"sources": [{"config_map": {"name": cm}} for cm in config_maps]},
    }


CONFIG_MOUNT: k8s.core.v1.VolumeMountArgsDict = {
    "name": "config",
    "mount_path": CONFIG_DIR,
    "read_only": True,
}


def container(
    target: KubeTarget,
    name: str,
    image: pulumi.Input[str],
    command: Sequence[pulumi.Input[str]],
    *,
    cpu: float,
    mem: float,
    args: Sequence[pulumi.Input[str]] = (),
    env: Sequence[k8s.core.v1.EnvVarArgsDict] = (),
    ports: Mapping[str, int] | None = None,
    readiness: k8s.core.v1.ProbeArgsDict | None = None,
    liveness: k8s.core.v1.ProbeArgsDict | None = None,
    startup: k8s.core.v1.ProbeArgsDict | None = None,
    mounts: Sequence[k8s.core.v1.VolumeMountArgsDict] = (),
    read_only_root: bool = True,
    user: int = RUN_AS_USER,
) -> k8s.core.v1.ContainerArgsDict:
    """A container following the conventions: pull policy, resources, security, /tmp.
    `startup`, when given, holds `liveness` off until it first passes. `user`: an official
    image's own user, where it needs that one (its pod_template's too)."""
    spec: dict[str, Any] = {
        "name": name,
        "image": image,
        "image_pull_policy": target.image_pull_policy,
        "command": list(command),
        "resources": resources(cpu, mem),
        "security_context": container_security(read_only_root, user),
        "volume_mounts": [*mounts, TMP_MOUNT] if read_only_root else list(mounts),
    }
    if args:
        spec["args"] = list(args)
    if env:
        spec["env"] = list(env)
    if ports:
        spec["ports"] = [
            {"name": port_name, "container_port": port} for port_name, port in ports.items()
        ]
    if readiness is not None:
        spec["readiness_probe"] = readiness
    if liveness is not None:
        spec["liveness_probe"] = liveness
    if startup is not None:
        spec["startup_probe"] = startup
    return spec


def service(
    target: KubeTarget,
    resource_name: str,
    name: str,
    component: str,
    ports: Mapping[str, int],
    parent: pulumi.Resource,
    *,
    headless: bool = False,
    publish_not_ready: bool = False,
    service_type: str | None = None,
    extra: Mapping[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    await_ready: bool = True,
) -> k8s.core.v1.Service:
    """A Service in front of `component`'s pods, named `name` (its DNS name); `extra` adds
    spec fields (a load balancer's), `annotations` the cloud's load balancer options.
    `await_ready=False` for pods that become ready only later (the provider waits for a
    Service until no selected pod is unready)."""
    spec: dict[str, Any] = {
        "selector": labels(component),
        "ports": [{"name": port_name, "port": port} for port_name, port in ports.items()],
    }
    if headless:
        spec["cluster_ip"] = "None"
    if publish_not_ready:
        spec["publish_not_ready_addresses"] = True
    if service_type is not None:
        spec["type"] = service_type
    spec.update(extra or {})
    return k8s.core.v1.Service(
        resource_name,
        metadata=target.metadata(name, component, annotations, await_ready),
        spec=spec,
        opts=target.opts(parent),
    )


def env(values: dict[str, pulumi.Input[str]]) -> list[k8s.core.v1.EnvVarArgsDict]:
    return [{"name": name, "value": value} for name, value in values.items()]


@dataclass(frozen=True)
class SecretFiles:
    """Secrets as files: the pod's volumes, the container's read-only mounts, and the
    `<VAR>_FILE` variables naming each file (elasticctr_common.secrets), so that a secret
    never sits in a process's environment, which crash reports and `/proc` show. Add two
    to mount both."""

    volumes: tuple[k8s.core.v1.VolumeArgsDict, ...] = ()
    mounts: tuple[k8s.core.v1.VolumeMountArgsDict, ...] = ()
    env: tuple[k8s.core.v1.EnvVarArgsDict, ...] = ()

    def __add__(self, other: SecretFiles) -> SecretFiles:
        return SecretFiles(
            self.volumes + other.volumes, self.mounts + other.mounts, self.env + other.env
        )


def secret_path(volume: str, key: str) -> str:
    """Where secret_files mounts `key` of the Secret of volume `volume`."""
    return f"{SECRETS_DIR}/{volume}/{key}"


def secret_files(
    volume: str, secret_name: pulumi.Input[str], keys: Sequence[str] | Mapping[str, str]
) -> SecretFiles:
    """Secret `secret_name` mounted as volume `volume` under SECRETS_DIR: a list of keys
    (each read as the variable of its name), or {variable: secret key}."""
    names = keys if isinstance(keys, Mapping) else {key: key for key in keys}
    return SecretFiles(
        volumes=(
            {
                "name": volume,
                "secret": {
                    "secret_name": secret_name,
                    "items": [{"key": k, "path": k} for k in dict.fromkeys(names.values())],
                    # Owner root, group the pod's fsGroup: readable by the pod's user only.
                    "default_mode": 0o440,
                },
            },
        ),
        mounts=({"name": volume, "mount_path": f"{SECRETS_DIR}/{volume}", "read_only": True},),
        env=tuple(
            env({file_variable(var): secret_path(volume, key) for var, key in names.items()})
        ),
    )


def field_env(name: str, field_path: str) -> k8s.core.v1.EnvVarArgsDict:
    """An env var from the downward API, e.g. status.podIP."""
    return {"name": name, "value_from": {"field_ref": {"field_path": field_path}}}


def http_probe(path: str, port: int, period: int = 10) -> k8s.core.v1.ProbeArgsDict:
    return {
        "http_get": {"path": path, "port": port},
        "period_seconds": period,
        "timeout_seconds": 2,
        "failure_threshold": 3,
    }


def liveness(handler: k8s.core.v1.ProbeArgsDict) -> k8s.core.v1.ProbeArgsDict:
    """A liveness probe (`handler`: its http_get or tcp_socket) that restarts a process only
    after two minutes without an answer: a busy process answers late, a stuck one not at all."""
    return {**handler, "period_seconds": 20, "timeout_seconds": 5, "failure_threshold": 6}


def startup(handler: k8s.core.v1.ProbeArgsDict, minutes: int = 10) -> k8s.core.v1.ProbeArgsDict:
    """A startup probe allowing `minutes` for `handler` to first answer, so that a slow first
    start (HDFS formatting its namenode, MLflow migrating its database, on a busy node) is
    not taken for a stuck process by the liveness probe, which waits for it."""
    return {**handler, "period_seconds": 10, "timeout_seconds": 5, "failure_threshold": 6 * minutes}


def service_account(
    target: KubeTarget, name: str, component: str, parent: pulumi.Resource
) -> k8s.core.v1.ServiceAccount:
    """A workload's own identity; no API token in its pods (none of them calls the API)."""
    return k8s.core.v1.ServiceAccount(
        name,
        metadata=target.metadata(name, component),
        automount_service_account_token=False,
        opts=target.opts(parent),
    )


def _mounts_tmp(spec: k8s.core.v1.ContainerArgsDict) -> bool:
    mounts = spec.get("volume_mounts")
    return isinstance(mounts, list) and TMP_MOUNT in mounts


# Data volumes outlive their StatefulSet (pulumi destroy, re-creation, scale-down).
RETAIN_VOLUMES: k8s.apps.v1.StatefulSetPersistentVolumeClaimRetentionPolicyArgsDict = {
    "when_deleted": "Retain",
    "when_scaled": "Retain",
}


def volume_claim(name: str, size: str) -> k8s.core.v1.PersistentVolumeClaimArgsDict:
    """A StatefulSet volume claim template (the cluster's default StorageClass)."""
    return {
        "metadata": {"name": name},
        "spec": {"access_modes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}},
    }


def pod_template(
    component: str,
    containers: Sequence[k8s.core.v1.ContainerArgsDict],
    volumes: Sequence[k8s.core.v1.VolumeArgsDict] = (),
    service_account: pulumi.Input[str] | None = None,
    annotations: dict[str, pulumi.Input[str]] | None = None,
    restart_policy: str | None = None,
    tmp_size: str = "1Gi",
    node_pool: str = "",
    extra_labels: Mapping[str, pulumi.Input[str]] | None = None,
    affinity: k8s.core.v1.AffinityArgsDict | None = None,
    recommended_labels: bool = True,
    priority_class: str = "",
    user: int = RUN_AS_USER,
    api_access: bool = False,
) -> k8s.core.v1.PodTemplateSpecArgsDict:
    """A pod of `component`: its labels (and `extra_labels`), the restricted security
    context, no API token, the /tmp scratch volume its read-only containers mount, and,
    given a `node_pool`, a node selector for that pool's nodes, and given a
    `priority_class`, that PriorityClass (the cluster's default otherwise). `api_access`:
    the pod calls the Kubernetes API, with its service account's token (what its Role
    allows); no other pod has one."""
    spec: dict[str, Any] = {
        "security_context": pod_security(user),
        "automount_service_account_token": api_access,
        "containers": list(containers),
    }
    all_volumes = list(volumes)
    if any(_mounts_tmp(c) for c in containers):
        all_volumes.append({"name": "tmp", "empty_dir": {"size_limit": tmp_size}})
    if all_volumes:
        spec["volumes"] = all_volumes
    if service_account is not None:
        spec["service_account_name"] = service_account
    if restart_policy is not None:
        spec["restart_policy"] = restart_policy
    if node_pool:
        spec["node_selector"] = {POOL_LABEL: node_pool}
    if affinity is not None:
        spec["affinity"] = affinity
    if priority_class:
        spec["priority_class_name"] = priority_class
    # A pod template's labels are part of what its pods are: a change rolls them. So never
    # the version (every release would restart every pod, its image changed or not), and
    # the stack's other labels only where a one-time rolling restart on the upgrade that
    # adds them is harmless: `recommended_labels=False` for the training Job's pods (a new
    # template replaces the Job) and the cube shards' (a new template is a new layout:
    # cube memory twice over while it rolls out). Their owners carry every label.
    own = stack_labels(component) if recommended_labels else labels(component)
    metadata: dict[str, Any] = {"labels": {**own, **(extra_labels or {})}}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


# Fields whose keys are data (label names, resource names, file names), not API fields.
_FREE_FORM = {"labels", "annotations", "match_labels", "node_selector", "data", "string_data"}
_FREE_FORM |= {"limits", "requests"}


def api_fields(value: Any) -> Any:
    """Pulumi's snake_case args as the camelCase of the Kubernetes API.

    Typed resources translate their args themselves; a CustomResource's spec is sent as
    written, so pod templates built with the helpers above go through this first.
    """
    if isinstance(value, dict):
        return {
            _camel(key): value[key] if key in _FREE_FORM else api_fields(value[key])
            for key in value
        }
    if isinstance(value, list):
        return [api_fields(item) for item in value]
    return value


def _camel(key: str) -> str:
    head, *rest = key.rstrip("_").split("_")  # `from_` (a Python keyword) is `from`
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def json_digest(value: Any) -> str:
    """A stable hash of a JSON-able value (dict keys in order)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def digest(data: Mapping[str, str]) -> str:
    """A stable hash of a ConfigMap's data, put on pod templates to roll pods on change."""
    text = "\n".join(f"{key}={data[key]}" for key in sorted(data))
    return hashlib.sha256(text.encode()).hexdigest()
