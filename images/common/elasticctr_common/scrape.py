"""How Prometheus scrapes one stack, from the metrics contract (metrics.py): a job per
endpoint, whose targets are the pods of the endpoint's component in the stack's namespace
(found through the Kubernetes API), each scraped at the pod's own address on the
contract's port and path. Every series gets the labels dashboard.py and alerts.py group by:
`namespace`, `pod`, and `process` (the endpoint).

The pod's address is used, not a declared container port: a trainer declares none (nobody
else connects to it), and declaring one would change its Job's pods.

Two forms of the same jobs: `scrape_configs` for a Prometheus configuration file (the
stack's own Prometheus), `pod_monitors` for the Prometheus Operator. Stdlib only: the
program and the client both may use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .metrics import ENDPOINTS, Endpoint

PART_OF: Final = "app.kubernetes.io/part-of"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
PART_OF_VALUE: Final = "elasticctr"
JOB_PREFIX: Final = "elasticctr-"
PROMETHEUS_PORT: Final = 9090
SELF_JOB: Final = "prometheus"
OPERATOR_API: Final = "monitoring.coreos.com/v1"


def endpoints(processes: Iterable[str] | None = None) -> list[Endpoint]:
    """The contract's endpoints of `processes` (every one by default); ValueError naming
    those it lacks."""
    chosen = list(ENDPOINTS) if processes is None else list(processes)
    unknown = sorted(set(chosen) - set(ENDPOINTS))
    if unknown:
        raise ValueError(f"processes the contract lacks: {unknown}")
    return [ENDPOINTS[p] for p in chosen]


def job_name(endpoint: Endpoint) -> str:
    return f"{JOB_PREFIX}{endpoint.process}"


def _selector(endpoint: Endpoint) -> dict[str, str]:
    return {PART_OF: PART_OF_VALUE, COMPONENT_LABEL: endpoint.component}


def _address_rules(endpoint: Endpoint) -> list[dict[str, Any]]:
    """The pod's IP on the endpoint's port (IPv6 in brackets): Prometheus's relabelling,
    whose regexes are anchored at both ends."""
    return [
        {
            "source_labels": ["__meta_kubernetes_pod_ip"],
            "regex": "([^:]+)",
            "target_label": "__address__",
            "replacement": f"${{1}}:{endpoint.port}",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_ip"],
            "regex": "(.+:.+)",
            "target_label": "__address__",
            "replacement": f"[${{1}}]:{endpoint.port}",
        },
    ]


def _relabel_configs(endpoint: Endpoint) -> list[dict[str, Any]]:
    selector = _selector(endpoint)
    keep = [
        {
            "source_labels": [f"__meta_kubernetes_pod_label_{_sanitise(k)}"],
            "regex": v,
            "action": "keep",
        }
        for k, v in selector.items()
    ]
    return [
        *keep,
        # A finished trainer or a pod not yet started has nothing to serve.
        {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
        *_address_rules(endpoint),
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"target_label": "process", "replacement": endpoint.process},
    ]


def _sanitise(label: str) -> str:
    """A Kubernetes label's name as Prometheus's discovery spells it in a meta label."""
    return "".join(c if c.isalnum() else "_" for c in label)


def scrape_configs(
    namespace: str,
    interval_seconds: int,
    credentials_files: Mapping[str, str] | None = None,
    processes: Iterable[str] | None = None,
) -> list[dict[str, Any]]:
    """The stack's jobs for `scrape_configs:` (of `processes`, by default every endpoint's);
    `credentials_files` maps a process to the file holding the bearer token its /metrics
    wants (serving with auth)."""
    credentials_files = credentials_files or {}
    unknown = set(credentials_files) - set(ENDPOINTS)
    if unknown:
        raise ValueError(f"credentials for processes the contract lacks: {sorted(unknown)}")
    jobs = []
    for endpoint in endpoints(processes):
        job: dict[str, Any] = {
            "job_name": job_name(endpoint),
            "scrape_interval": f"{interval_seconds}s",
            "metrics_path": endpoint.path,
            "kubernetes_sd_configs": [
                {
                    "role": "pod",
                    "namespaces": {"names": [namespace]},
                    "selectors": [
                        {
                            "role": "pod",
                            "label": ",".join(f"{k}={v}" for k, v in _selector(endpoint).items()),
                        }
                    ],
                }
            ],
            "relabel_configs": _relabel_configs(endpoint),
        }
        if endpoint.process in credentials_files:
            job["authorization"] = {
                "type": "Bearer",
                "credentials_file": credentials_files[endpoint.process],
            }
        jobs.append(job)
    return jobs


def prometheus_config(
    namespace: str,
    interval_seconds: int,
    rule_files: list[str],
    credentials_files: Mapping[str, str] | None = None,
    processes: Iterable[str] | None = None,
) -> dict[str, Any]:
    """A whole Prometheus configuration file: the stack's jobs and Prometheus's own."""
    return {
        "global": {
            "scrape_interval": f"{interval_seconds}s",
            "evaluation_interval": f"{interval_seconds}s",
        },
        "rule_files": rule_files,
        "scrape_configs": [
            {
                "job_name": SELF_JOB,
                "static_configs": [{"targets": [f"localhost:{PROMETHEUS_PORT}"]}],
            },
            *scrape_configs(namespace, interval_seconds, credentials_files, processes),
        ],
    }


def _camel(rule: Mapping[str, Any]) -> dict[str, Any]:
    """A relabel rule as the Prometheus Operator's RelabelConfig spells it."""
    names = {"source_labels": "sourceLabels", "target_label": "targetLabel"}
    return {names.get(k, k): v for k, v in rule.items()}


def pod_monitor(
    namespace: str,
    endpoint: Endpoint,
    interval_seconds: int,
    token_secret: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The same job as a PodMonitor of the Prometheus Operator; `token_secret` is the
    (Secret, key) of the bearer token the endpoint wants. The operator selects the pods
    and adds `namespace` and `pod` itself."""
    relabel = [
        # The operator keeps pods that are not running; their address is useless.
        {"sourceLabels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
        *(_camel(rule) for rule in _address_rules(endpoint)),
        {"targetLabel": "process", "replacement": endpoint.process},
    ]
    scrape: dict[str, Any] = {
        "path": endpoint.path,
        "interval": f"{interval_seconds}s",
        "relabelings": relabel,
    }
    if token_secret is not None:
        name, key = token_secret
        scrape["authorization"] = {"type": "Bearer", "credentials": {"name": name, "key": key}}
    return {
        "apiVersion": OPERATOR_API,
        "kind": "PodMonitor",
        "metadata": {
            "name": job_name(endpoint),
            "namespace": namespace,
            "labels": {PART_OF: PART_OF_VALUE},
        },
        "spec": {
            "selector": {"matchLabels": _selector(endpoint)},
            "namespaceSelector": {"matchNames": [namespace]},
            "podMetricsEndpoints": [scrape],
        },
    }


def pod_monitors(
    namespace: str,
    interval_seconds: int,
    token_secrets: Mapping[str, tuple[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """A PodMonitor per endpoint; `token_secrets` maps a process to its token's Secret."""
    token_secrets = token_secrets or {}
    return [
        pod_monitor(namespace, e, interval_seconds, token_secrets.get(e.process))
        for e in ENDPOINTS.values()
    ]
