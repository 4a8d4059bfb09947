"""What the config names in a cluster that exists already (`cloud: existing`), looked up
in that cluster before anything is registered, at preview as at up.

A Volcano queue that does not exist keeps the Job from ever running (or, with Volcano's
admission webhook, fails `pulumi up` midway); a node pool no node is labelled with keeps
its pods Pending. The config alone cannot tell: the program asks the cluster, through
the kubeconfig the stack's provider uses. A missing queue is an error (nothing creates
queues on its own); a missing pool is a warning (a cluster autoscaler may bring up a
labelled node when pods wait). A PriorityClass the config names and the cluster lacks is an
error: the API server refuses every pod naming it. Volcano makes its `default` queue
itself, and a cloud the stack creates has its pools checked by the config, so neither is
looked up. A cluster that cannot be reached, or a lookup that is not allowed, is a
warning: the check then says what it could not check.
"""

from __future__ import annotations

import os
from typing import Any

import pulumi

from components.kube import POOL_LABEL
from infra import capacity
from infra.config import CLOUD_TRAITS, StackConfig, shown

NAMESPACE = "elasticctr"
VOLCANO_DEFAULT_QUEUE = "default"
# Seconds to connect and to read: a cluster that does not answer must not stall a preview.
TIMEOUT = (5, 15)
HTTPS_PORT = 443
FALLBACK_API_PORTS = (443, 6443)


def check_cluster(config: StackConfig) -> list[str]:
    """Problem lines for what the config names and the cluster lacks (warnings are logged)."""
    if CLOUD_TRAITS[config.cloud].creates_cluster or config.cluster.render_dir:
        return []
    queue = config.training.queue
    pools = {
        workload: pool
        for workload in ("training", "cube", "serving")
        if (pool := getattr(config, workload).node_pool)
    }
    classes = priority_classes(config)
    if queue == VOLCANO_DEFAULT_QUEUE and not pools and not classes:
        return []
    try:
        api = _client(config.cluster.kubeconfig, config.cluster.context)
    except Exception as err:  # any kubeconfig the client cannot read: nothing to check against
        _cannot_check(queue, pools, classes, f"no usable kubeconfig ({_first_line(err)})")
        return []
    try:
        problems = _queue_problems(api, queue) if queue != VOLCANO_DEFAULT_QUEUE else []
        problems += _priority_class_problems(api, classes)
        for workload, pool in pools.items():
            if not _has_nodes(api, pool):
                pulumi.log.warn(
                    f"{NAMESPACE}:{workload}.node_pool: no node of the cluster is labelled "
                    f"{POOL_LABEL}={pool}: the {workload} pods stay Pending until one is "
                    f"(kubectl label node <node> {POOL_LABEL}={pool})"
                )
        return problems
    except Exception as err:  # unreachable, forbidden, timed out: the provider says the rest
        _cannot_check(queue, pools, classes, _first_line(err))
        return []
    finally:
        api.close()


def api_server_ports(config: StackConfig) -> tuple[int, ...]:
    """The ports a pod's egress policy must open to reach the API server: the config's, the
    cloud's, or on a cluster that exists those its `kubernetes` Service's endpoints listen on
    (any cluster picks its own: 6443, minikube's 8443, a random one), with the Service's
    443 (some data planes filter before the translation). A cluster that cannot be asked
    gets the common two, with a warning."""
    if config.monitoring.api_server_ports:
        return tuple(sorted(set(config.monitoring.api_server_ports)))
    traits = CLOUD_TRAITS[config.cloud]
    if traits.api_server_ports:
        return tuple(sorted({HTTPS_PORT, *traits.api_server_ports}))
    why = "the stack renders manifests only"
    if not config.cluster.render_dir:
        try:
            api = _client(config.cluster.kubeconfig, config.cluster.context)
        except Exception as err:  # no kubeconfig the client can read
            why = f"no usable kubeconfig ({_first_line(err)})"
        else:
            try:
                ports = _endpoint_ports(api)
                if ports:
                    return tuple(sorted({HTTPS_PORT, *ports}))
                why = "the kubernetes Service has no endpoints"
            except Exception as err:  # unreachable, forbidden, timed out
                why = _first_line(err)
            finally:
                api.close()
    pulumi.log.warn(
        f"{NAMESPACE}:monitoring.api_server_ports: the API server's port not looked up "
        f"({why}): Prometheus may reach ports {', '.join(map(str, FALLBACK_API_PORTS))}; set "
        "the key if the cluster's API server listens on another"
    )
    return FALLBACK_API_PORTS


def _endpoint_ports(api: Any) -> set[int]:
    """The ports of the `kubernetes` Service's endpoints: its EndpointSlices, else (a
    control plane without the slice controllers) the Endpoints the API server writes."""
    from kubernetes import client

    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes", _request_timeout=TIMEOUT
    )
    ports = {p.port for s in slices.items for p in (s.ports or []) if p.port}
    if ports:
        return ports
    endpoints = client.CoreV1Api(api).read_namespaced_endpoints(
        "kubernetes", "default", _request_timeout=TIMEOUT
    )
    return {p.port for s in (endpoints.subsets or []) for p in (s.ports or []) if p.port}


def check_capacity(config: StackConfig, tally: capacity.Tally) -> None:
    """On a cluster that exists already, warn when the stack's pods cannot all fit
    (infra/capacity.py). A cluster that cannot be asked is only noted: the provider fails
    on it anyway, with its own message."""
    if CLOUD_TRAITS[config.cloud].creates_cluster or config.cluster.render_dir or not tally.parts:
        return
    try:
        api = _client(config.cluster.kubeconfig, config.cluster.context)
    except Exception as err:  # no kubeconfig the client can read
        pulumi.log.info(f"{NAMESPACE}: the cluster's room not checked: {_first_line(err)}")
        return
    try:
        free = capacity.room(api, config.namespace, TIMEOUT)
    except Exception as err:  # unreachable, forbidden (listing nodes and pods), timed out
        pulumi.log.info(f"{NAMESPACE}: the cluster's room not checked: {_first_line(err)}")
        return
    finally:
        api.close()
    for warning in [*capacity.too_large(tally, free), capacity.shortfall(tally, free)]:
        if warning:
            pulumi.log.warn(warning)


def _client(kubeconfig: str, context: str) -> Any:
    """An API client as the stack's provider reaches the cluster: the kubeconfig file
    given, else $KUBECONFIG (read now: the client reads it once, at import), else
    ~/.kube/config; the context given, else the file's current one."""
    from kubernetes import config as kube_config

    path = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
    return kube_config.new_client_from_config(config_file=path, context=context or None)


def _queue_problems(api: Any, queue: str) -> list[str]:
    """The queue exists and is open, or one problem line."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    objects = client.CustomObjectsApi(api)
    try:
        found = objects.get_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", queue, _request_timeout=TIMEOUT
        )
    except ApiException as err:
        if err.status != 404:
            raise
        names = _queue_names(objects)
        if names is None:  # no Volcano yet (the stack may install it): nothing to look in
            return []
        return [
            f"{NAMESPACE}:training.queue must name a Volcano queue of the cluster "
            f"({', '.join(names) or 'none'}), got {shown(queue)}: the Job would never be "
            "scheduled (create the queue, or set training.queue)"
        ]
    state = (found.get("status") or {}).get("state")
    if state not in (None, "Open"):
        return [
            f"{NAMESPACE}:training.queue must name an open Volcano queue, got {shown(queue)} "
            f"({state}): Volcano admits no job to it"
        ]
    return []


def _queue_names(objects: Any) -> list[str] | None:
    """The cluster's Volcano queues; None when it has no queue API."""
    from kubernetes.client.exceptions import ApiException

    try:
        listed = objects.list_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", _request_timeout=TIMEOUT
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return sorted(item["metadata"]["name"] for item in listed.get("items") or [])


def priority_classes(config: StackConfig) -> dict[str, str]:
    """`<section>.priority_class` -> the PriorityClass it names, for the parts the stack runs."""
    sections = ["training", "cube", "serving"] + (["feedback"] if config.feedback.enabled else [])
    return {
        f"{section}.priority_class": name
        for section in sections
        if (name := getattr(config, section).priority_class)
    }


def _priority_class_problems(api: Any, classes: dict[str, str]) -> list[str]:
    """A problem line for each PriorityClass named that the cluster lacks."""
    if not classes:
        return []
    from kubernetes import client

    listed = client.SchedulingV1Api(api).list_priority_class(_request_timeout=TIMEOUT)
    names = sorted(item.metadata.name for item in listed.items)
    known = ", ".join(names) or "none"
    return [
        f"{NAMESPACE}:{key} must name a PriorityClass of the cluster ({known}), "
        f"got {shown(name)}: the API server would refuse its pods (create it, e.g. kubectl "
        f"create priorityclass {name} --value 1000, or leave the key empty)"
        for key, name in classes.items()
        if name not in names
    ]


def _has_nodes(api: Any, pool: str) -> bool:
    from kubernetes import client

    nodes = client.CoreV1Api(api).list_node(
        label_selector=f"{POOL_LABEL}={pool}", limit=1, _request_timeout=TIMEOUT
    )
    return bool(nodes.items)


def _cannot_check(queue: str, pools: dict[str, str], classes: dict[str, str], why: str) -> None:
    what = [f"training.queue {queue}"] if queue != VOLCANO_DEFAULT_QUEUE else []
    what += [f"{workload}.node_pool {pool}" for workload, pool in pools.items()]
    what += [f"{key} {name}" for key, name in classes.items()]
    pulumi.log.warn(f"{NAMESPACE}: could not look up {', '.join(what)} in the cluster: {why}")


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]
