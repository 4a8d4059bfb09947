"""What Volcano's mutating admission webhook does to a Job it is asked to create, as read from
its source: volcano.sh/volcano v1.15.0 (the pinned chart, components/volcano.py),
pkg/webhooks/admission/jobs/mutate/mutate_job.go, `createPatch`. It answers a CREATE (never an
update) with a JSON patch of these operations, in this order:

- `add /spec/queue "default"` when the queue is empty;
- `add /spec/schedulerName` (the first --scheduler-name, "volcano") when it is empty;
- `add /spec/maxRetry 3` when maxRetry is 0 (unset);
- `replace /spec/tasks` with every task re-encoded by its Go types, when one task lacks a
  name ("default<i>"), has hostNetwork without dnsPolicy (ClusterFirstWithHostNet), lacks
  minAvailable (its partition policy's minPartitions * partitionSize, else its replicas) or
  has maxRetry 0 (3). The re-encoding is what changes what the program sent: quantities come
  back canonical ("2048Mi" -> "2Gi"), empty lists and empty strings of `omitempty` fields
  are dropped;
- `add /spec/minAvailable` (the sum of the tasks' minAvailable, else replicas) when it is 0;
- `replace /spec/plugins` with the same map, plus `svc` for the tensorflow, mpi, pytorch and
  ray plugins and `ssh` for mpi, whenever the Job has plugins.

`patch` computes those operations for a Job manifest (camelCase, as sent) and `apply` applies
them; the re-encoding of a task list is not modelled: a test asserts there is none.
"""

from __future__ import annotations

import copy
from typing import Any

SOURCE = "volcano.sh/volcano v1.15.0 pkg/webhooks/admission/jobs/mutate/mutate_job.go"
DEFAULT_QUEUE = "default"
DEFAULT_SCHEDULER = "volcano"  # webhook-manager's --scheduler-name default
DEFAULT_MAX_RETRY = 3
DEFAULT_TASK_NAME = "default"  # v1alpha1.DefaultTaskSpec, suffixed with the task's index
# Distributed-framework plugins that need the svc plugin (and mpi also ssh).
NEEDS_SVC = ("tensorflow", "mpi", "pytorch", "ray")


def _default_tasks(tasks: list[dict[str, Any]]) -> bool:
    """mutateSpec: default the tasks in place; whether any was defaulted."""
    patched = False
    for index, task in enumerate(tasks):
        if not task.get("name"):
            task["name"] = f"{DEFAULT_TASK_NAME}{index}"
            patched = True
        pod = task.get("template", {}).get("spec", {})
        if pod.get("hostNetwork") and not pod.get("dnsPolicy"):
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
            patched = True
        if task.get("minAvailable") is None:
            partition = task.get("partitionPolicy")
            task["minAvailable"] = (
                partition.get("minPartitions", 0) * partition.get("partitionSize", 0)
                if partition is not None
                else task.get("replicas", 0)
            )
            patched = True
        if not task.get("maxRetry"):
            task["maxRetry"] = DEFAULT_MAX_RETRY
            patched = True
    return patched


def patch(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch the webhook answers the CREATE of `job` with (createPatch)."""
    spec = job.get("spec", {})
    ops: list[dict[str, Any]] = []
    if not spec.get("queue"):
        ops.append({"op": "add", "path": "/spec/queue", "value": DEFAULT_QUEUE})
    if not spec.get("schedulerName"):
        ops.append({"op": "add", "path": "/spec/schedulerName", "value": DEFAULT_SCHEDULER})
    if not spec.get("maxRetry"):
        ops.append({"op": "add", "path": "/spec/maxRetry", "value": DEFAULT_MAX_RETRY})
    tasks = copy.deepcopy(spec.get("tasks") or [])
    if _default_tasks(tasks):
        ops.append({"op": "replace", "path": "/spec/tasks", "value": tasks})
    if not spec.get("minAvailable"):
        # After mutateSpec, which set every task's minAvailable in place.
        total = sum(t["minAvailable"] for t in tasks)
        ops.append({"op": "add", "path": "/spec/minAvailable", "value": total})
    plugins = spec.get("plugins")
    if plugins is not None:
        patched = {name: list(args or []) for name, args in plugins.items()}
        if any(name in plugins for name in NEEDS_SVC):
            patched.setdefault("svc", [])
        if "mpi" in plugins:
            patched.setdefault("ssh", [])
        ops.append({"op": "replace", "path": "/spec/plugins", "value": patched})
    return ops


def apply(job: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """`job` with the operations of `patch` (paths /spec/<field>) applied."""
    result = copy.deepcopy(job)
    for op in ops:
        _, section, key = op["path"].split("/")
        result.setdefault(section, {})[key] = copy.deepcopy(op["value"])
    return result
