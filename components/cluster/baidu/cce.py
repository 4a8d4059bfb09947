"""Baidu CCE v2 as Pulumi dynamic resources: a managed cluster, its instance groups (node
pools) and its kubeconfig, over the CCE v2 OpenAPI (https://cce.<region>.baidubce.com/v2/...).

Each create waits for the resource to run, with a timeout; if it fails or times out, it
deletes what it started (a failed create must leave nothing behind, or the next `pulumi up`
would make a second one) and reports the API's own error text. Delete waits until the API
no longer knows the resource. Read reports the live values, so `pulumi refresh` shows drift.
Scaling an instance group is an update, never a replacement.
"""

from __future__ import annotations

from typing import Any

import pulumi
from pulumi.dynamic import (
    CreateResult,
    DiffResult,
    ReadResult,
    Resource,
    ResourceProvider,
    UpdateResult,
)

from components.cluster.baidu.openapi import NOT_FOUND, ApiError, OpenApi, wait_until

CLUSTER_FAILED = {"create_failed", "delete_failed", "deleted", "deleting"}
# Inputs that only steer the provider (how long to wait): changing them changes nothing live.
PROVIDER_SETTINGS = ("timeout_seconds", "poll_seconds")
POD_CIDR = "172.28.0.0/16"
SERVICE_CIDR = "172.31.0.0/16"
# Deleting releases what CCE bought for the cluster or group (load balancer, instances, disks).
CLUSTER_DELETE = {"deleteResource": "true", "deleteCDSSnapshot": "true"}
GROUP_DELETE = {"deleteInstances": "true", "releaseAllResources": "true"}


def _changed(olds: dict[str, Any], news: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    return [key for key in keys if olds.get(key) != news.get(key)]


def _api(props: dict[str, Any]) -> OpenApi:
    return OpenApi(str(props["endpoint"]))


def _delete(props: dict[str, Any], path: str, query: dict[str, str], what: str) -> None:
    """DELETE `path`, then wait until a GET says it is gone (404); done if already gone."""
    api = _api(props)
    if api.find("DELETE", path, query) is None:
        return
    wait_until(
        lambda: True if api.find("GET", path) is None else None,
        float(props["timeout_seconds"]),
        float(props["poll_seconds"]),
        f"{what} to be deleted",
    )


# ---------------------------------------------------------------- cluster


class _ClusterProvider(ResourceProvider):
    REPLACE_ON = ("endpoint", "cluster_name", "k8s_version", "vpc_id", "subnet_id", "master_flavor")

    def create(self, props: dict[str, Any]) -> CreateResult:
        api = _api(props)
        subnet = props["subnet_id"]
        reply = api.call(
            "POST",
            "/v2/cluster",
            body={
                "cluster": {
                    "clusterName": props["cluster_name"],
                    "clusterType": "normal",
                    "k8sVersion": props["k8s_version"],
                    "runtimeType": "containerd",
                    "vpcID": props["vpc_id"],
                    "masterConfig": {
                        "masterType": "managed",
                        "clusterHA": 1,
                        # Pulumi talks to the API server from outside the VPC.
                        "exposedPublic": True,
                        "clusterBLBVPCSubnetID": subnet,
                        "managedClusterMasterOption": {"masterFlavor": props["master_flavor"]},
                    },
                    "containerNetworkConfig": {
                        "mode": "kubenet",
                        "lbServiceVPCSubnetID": subnet,
                        "clusterPodCIDR": POD_CIDR,
                        "clusterIPServiceCIDR": SERVICE_CIDR,
                    },
                },
                "options": {"skipNetworkCheck": False},
            },
        )
        cluster_id = str(reply["clusterID"])
        try:
            phase = self._wait_running(api, cluster_id, props)
        except Exception as err:
            path = f"/v2/cluster/{cluster_id}"
            raise RuntimeError(
                _undo(api, path, CLUSTER_DELETE, "cluster", cluster_id, err)
            ) from err
        return CreateResult(cluster_id, {**props, "cluster_id": cluster_id, "phase": phase})

    def _wait_running(self, api: OpenApi, cluster_id: str, props: dict[str, Any]) -> str:
        def probe() -> str | None:
            status = api.call("GET", f"/v2/cluster/{cluster_id}")["cluster"]["status"]
            phase = str(status.get("clusterPhase", ""))
            if phase in CLUSTER_FAILED:
                raise RuntimeError(
                    f"cluster {cluster_id} is {phase}: {_cluster_error(api, cluster_id, status)}"
                )
            return phase if phase == "running" else None

        return wait_until(
            probe,
            float(props["timeout_seconds"]),
            float(props["poll_seconds"]),
            f"cluster {cluster_id} to be running",
        )

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        reply = _api(props).find("GET", f"/v2/cluster/{id_}")
        if reply is None:
            return ReadResult("", {})
        cluster = reply["cluster"]
        spec, status = cluster["spec"], cluster["status"]
        master = spec.get("masterConfig", {})
        live = {
            "cluster_name": spec.get("clusterName"),
            "k8s_version": spec.get("k8sVersion"),
            "vpc_id": spec.get("vpcID"),
            "subnet_id": master.get("clusterBLBVPCSubnetID", props.get("subnet_id")),
            "master_flavor": master.get("managedClusterMasterOption", {}).get(
                "masterFlavor", props.get("master_flavor")
            ),
            "phase": status.get("clusterPhase"),
        }
        return ReadResult(id_, {**props, **live, "cluster_id": id_})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = _changed(olds, news, self.REPLACE_ON)
        settings = _changed(olds, news, PROVIDER_SETTINGS)
        return DiffResult(
            changes=bool(replaces or settings),
            replaces=replaces,
            # Two clusters of the same name cannot coexist.
            delete_before_replace=True,
        )

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        # Only provider settings reach here (everything else replaces).
        return UpdateResult({**olds, **{k: news[k] for k in PROVIDER_SETTINGS}})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        _delete(props, f"/v2/cluster/{id_}", CLUSTER_DELETE, f"cluster {id_}")


def _cluster_error(api: OpenApi, cluster_id: str, status: dict[str, Any]) -> str:
    """The API's own account of a failure: the failed steps of the cluster's event."""
    try:
        event = api.call("GET", f"/v2/event/cluster/{cluster_id}")
    except ApiError:
        event = {}
    messages = [
        f"{step.get('stepName')}: {step.get('errMsg') or step.get('errInfo', {}).get('message')}"
        for step in event.get("steps", [])
        if step.get("errMsg") or step.get("errInfo", {}).get("message")
    ]
    return "; ".join(messages) or str(status.get("workflowMessage") or "no error text given")


def _undo(
    api: OpenApi, path: str, query: dict[str, str], kind: str, ident: str, cause: Exception
) -> str:
    """Delete what a failed create started; the message says what happened to it."""
    try:
        api.call("DELETE", path, query=query)
        return f"{cause} (the {kind} {ident} is being deleted again)"
    except Exception as err:  # the create's failure stays the message; this is a remark
        return f"{cause} (deleting the {kind} {ident} failed too: {err}; delete it by hand)"


class CceCluster(Resource, module="baidu", name="CceCluster"):
    """A managed CCE v2 cluster, public API endpoint, kubenet networking, no nodes."""

    cluster_id: pulumi.Output[str]
    phase: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        endpoint: str,
        cluster_name: str,
        k8s_version: str,
        vpc_id: str,
        subnet_id: str,
        master_flavor: str,
        timeout_seconds: float,
        poll_seconds: float = 30,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _ClusterProvider(),
            name,
            {
                "endpoint": endpoint,
                "cluster_name": cluster_name,
                "k8s_version": k8s_version,
                "vpc_id": vpc_id,
                "subnet_id": subnet_id,
                "master_flavor": master_flavor,
                "timeout_seconds": timeout_seconds,
                "poll_seconds": poll_seconds,
                "cluster_id": None,
                "phase": None,
            },
            opts,
        )


# ---------------------------------------------------------------- instance group


class _InstanceGroupProvider(ResourceProvider):
    REPLACE_ON = (
        "endpoint",
        "cluster_id",
        "name",
        "instance_type",
        "disk_gb",
        "vpc_id",
        "subnet_id",
        "ssh_key_id",
    )

    def create(self, props: dict[str, Any]) -> CreateResult:
        api = _api(props)
        cluster_id = props["cluster_id"]
        reply = api.call(
            "POST",
            f"/v2/cluster/{cluster_id}/instancegroup",
            body={
                "instanceGroupName": props["name"],
                "clusterRole": "node",
                "replicas": int(props["replicas"]),
                "instanceTemplate": {
                    "clusterRole": "node",
                    "machineType": "BCC",
                    "instanceResource": {
                        "machineSpec": props["instance_type"],
                        "cdsList": [
                            {
                                "diskPath": "/home/cce",
                                "storageType": "cloud_hp1",
                                "cdsSize": int(props["disk_gb"]),
                            }
                        ],
                    },
                    "vpcConfig": {
                        "vpcID": props["vpc_id"],
                        "vpcSubnetID": props["subnet_id"],
                        "securityGroupType": "normal",
                    },
                    "sshKeyID": props["ssh_key_id"],
                    "instanceChargingType": "Postpaid",
                    "labels": dict(props.get("labels") or {}),
                },
                "clusterAutoscalerSpec": _autoscaler(props),
            },
        )
        group_id = str(reply["instanceGroupID"])
        path = f"/v2/cluster/{cluster_id}/instancegroup/{group_id}"
        try:
            ready = self._wait_ready(api, path, int(props["replicas"]), props)
        except Exception as err:
            raise RuntimeError(
                _undo(api, path, GROUP_DELETE, "instance group", group_id, err)
            ) from err
        return CreateResult(
            group_id, {**props, "instance_group_id": group_id, "ready_replicas": ready}
        )

    def _wait_ready(self, api: OpenApi, path: str, replicas: int, props: dict[str, Any]) -> int:
        def probe() -> int | None:
            group = api.call("GET", path)["instanceGroup"]
            status = group.get("status") or {}
            failed = (status.get("undeliveredMachines") or {}).get("failedMachines") or []
            if failed:
                raise RuntimeError(f"instances failed to start: {', '.join(failed)}")
            ready = int(status.get("readyReplicas", 0))
            return ready if ready == replicas else None

        return wait_until(
            probe,
            float(props["timeout_seconds"]),
            float(props["poll_seconds"]),
            f"instance group {path.rsplit('/', 1)[-1]} to have {replicas} ready nodes",
        )

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        path = f"/v2/cluster/{props['cluster_id']}/instancegroup/{id_}"
        reply = _api(props).find("GET", path)
        if reply is None:
            return ReadResult("", {})
        group = reply["instanceGroup"]
        spec, status = group["spec"], group.get("status") or {}
        autoscaler = spec.get("clusterAutoscalerSpec") or {}
        template = spec.get("instanceTemplate") or {}
        live = {
            "name": spec.get("instanceGroupName"),
            "replicas": spec.get("replicas"),
            "ready_replicas": status.get("readyReplicas"),
            "instance_type": (template.get("instanceResource") or {}).get("machineSpec"),
            "min_replicas": autoscaler.get("minReplicas", props.get("min_replicas")),
            "max_replicas": autoscaler.get("maxReplicas", props.get("max_replicas")),
        }
        return ReadResult(id_, {**props, **live, "instance_group_id": id_})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = _changed(olds, news, self.REPLACE_ON)
        updates = _changed(
            olds, news, ("replicas", "min_replicas", "max_replicas", "labels", *PROVIDER_SETTINGS)
        )
        return DiffResult(changes=bool(replaces or updates), replaces=replaces)

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        api = _api(news)
        path = f"/v2/cluster/{news['cluster_id']}/instancegroup/{id_}"
        if _changed(olds, news, ("min_replicas", "max_replicas")):
            api.call("PUT", f"{path}/autoscaler", body=_autoscaler(news))
        ready = olds.get("ready_replicas")
        if olds.get("replicas") != news["replicas"]:
            # CCE picks the nodes to remove (its shrink policy) and releases them.
            api.call(
                "PUT",
                f"{path}/replicas",
                body={"replicas": int(news["replicas"]), "deleteInstance": True},
            )
            ready = self._wait_ready(api, path, int(news["replicas"]), news)
        return UpdateResult({**news, "instance_group_id": id_, "ready_replicas": ready})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        path = f"/v2/cluster/{props['cluster_id']}/instancegroup/{id_}"
        _delete(props, path, GROUP_DELETE, f"instance group {id_}")


def _autoscaler(props: dict[str, Any]) -> dict[str, Any]:
    low, high = int(props["min_replicas"]), int(props["max_replicas"])
    return {
        "enabled": low < high,
        "minReplicas": low,
        "maxReplicas": high,
        "scalingGroupPriority": 1,
    }


class CceInstanceGroup(Resource, module="baidu", name="CceInstanceGroup"):
    """A node pool: `replicas` BCC instances of one spec, scaled by the cluster autoscaler
    between min and max."""

    instance_group_id: pulumi.Output[str]
    ready_replicas: pulumi.Output[int]

    def __init__(
        self,
        name: str,
        *,
        endpoint: str,
        cluster_id: pulumi.Input[str],
        group_name: str,
        instance_type: str,
        replicas: int,
        min_replicas: int,
        max_replicas: int,
        disk_gb: int,
        vpc_id: str,
        subnet_id: str,
        ssh_key_id: str,
        labels: dict[str, str],
        timeout_seconds: float,
        poll_seconds: float = 30,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _InstanceGroupProvider(),
            name,
            {
                "endpoint": endpoint,
                "cluster_id": cluster_id,
                "name": group_name,
                "instance_type": instance_type,
                "replicas": replicas,
                "min_replicas": min_replicas,
                "max_replicas": max_replicas,
                "disk_gb": disk_gb,
                "vpc_id": vpc_id,
                "subnet_id": subnet_id,
                "ssh_key_id": ssh_key_id,
                "labels": labels,
                "timeout_seconds": timeout_seconds,
                "poll_seconds": poll_seconds,
                "instance_group_id": None,
                "ready_replicas": None,
            },
            opts,
        )


# ---------------------------------------------------------------- kubeconfig


class _KubeconfigProvider(ResourceProvider):
    def _fetch(self, props: dict[str, Any]) -> str:
        path = f"/v2/kubeconfig/{props['cluster_id']}/{props['access']}"
        kubeconfig = str(_api(props).call("GET", path).get("kubeConfig") or "")
        if not kubeconfig:
            # An empty one would send the Kubernetes provider to the user's current context.
            raise RuntimeError(f"GET {path}: CCE returned no kubeconfig")
        return kubeconfig

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(
            f"{props['cluster_id']}-{props['access']}", {**props, "kubeconfig": self._fetch(props)}
        )

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        # A rotated certificate shows as drift and the next update picks it up.
        try:
            return ReadResult(id_, {**props, "kubeconfig": self._fetch(props)})
        except ApiError as err:
            if err.status == NOT_FOUND:
                return ReadResult("", {})
            raise

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = _changed(olds, news, ("endpoint", "cluster_id", "access"))
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=True)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        pass  # a view of the cluster's credentials: nothing to delete


class CceKubeconfig(Resource, module="baidu", name="CceKubeconfig"):
    """The cluster's kubeconfig (public endpoint), kept as a secret in the state."""

    kubeconfig: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        endpoint: str,
        cluster_id: pulumi.Input[str],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _KubeconfigProvider(),
            name,
            {
                "endpoint": endpoint,
                "cluster_id": cluster_id,
                "access": "public",
                "kubeconfig": None,
            },
            pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(additional_secret_outputs=["kubeconfig"])
            ),
        )
