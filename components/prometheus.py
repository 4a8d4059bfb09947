"""Monitoring (docs/monitoring.md): who scrapes the stack's parts, and where the alert
rules live.

- `in-cluster`: a Prometheus of the stack's own, a StatefulSet `prometheus` of one pod, its
  TSDB on a volume (kept `retention`), behind the Service `prometheus:9090`. It finds the
  parts' pods through the Kubernetes API (a Role that lists and watches pods in the
  namespace, and nothing else), scrapes the jobs of elasticctr_common.scrape and evaluates
  the rules of elasticctr_common.alerts. Its image is `images.prometheus`
  (prom/prometheus, or the stand-in built here).
- `external`: a Prometheus outside the stack (in `scraper_namespace`) scrapes it; with
  `operator`, the stack makes the Prometheus Operator's PodMonitor and PrometheusRule
  objects for it, the same jobs and rules.

Either way each scraped part admits the scraper on its metrics port (NetworkPolicy), and
serving's /metrics takes the serving token when serving wants one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s
import yaml
from elasticctr_common import alerts, scrape
from elasticctr_common.metrics import ENDPOINTS

from components import kube
from components.kube import KubeTarget
from components.network import ANYWHERE, InNamespace, Peer, Route, allow_egress, allow_ingress

COMPONENT = "prometheus"
SERVICE_ACCOUNT = "prometheus"
CONFIG_MAP = "prometheus-conf"
CONF_DIR = "/etc/prometheus"
CONFIG_FILE = "prometheus.yml"
RULES_FILE = "elasticctr-rules.yml"
DATA_DIR = "/prometheus"
PORT = scrape.PROMETHEUS_PORT


@dataclass(frozen=True)
class PrometheusArgs:
    target: KubeTarget
    # The stack's monitoring section (infra/config.py MonitoringConfig), field for field.
    prometheus: Literal["in-cluster", "external"]
    operator: bool
    scraper_namespace: str
    scrape_interval: int  # seconds
    retention: str  # a Prometheus duration (15d)
    storage: str
    cpu: float
    mem: float
    priority_class: str  # the pod's; "": the cluster's default
    # The API server's ports (infra/preflight.py looks them up); its address is the
    # cluster's, not known ahead: any address on these.
    api_server_ports: tuple[int, ...]
    # The parts of this stack to scrape (processes of the metrics contract; the joiner only
    # with the feedback loop).
    processes: tuple[str, ...] = tuple(ENDPOINTS)
    image: str = ""  # in-cluster
    # serving's auth Secret and its key, when its /metrics wants the token
    serving_token: tuple[str, str] | None = None
    alert_for: Mapping[str, str] = field(default_factory=dict)  # `for` by alert name


class Prometheus(pulumi.ComponentResource):
    url: pulumi.Output[str]  # in-cluster: the HTTP API; external: ""

    def __init__(
        self, name: str, args: PrometheusArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.prometheus == "in-cluster" and not args.image:
            raise ValueError(f"{name}: image is required with prometheus in-cluster")
        super().__init__("elasticctr:prometheus:Prometheus", name, None, opts)
        self.rules = alerts.with_durations(args.alert_for)
        target = args.target
        scraper: Peer
        if args.prometheus == "in-cluster":
            self._in_cluster(name, args)
            scraper = COMPONENT
            self.url = pulumi.Output.concat(
                "http://prometheus.", target.namespace, f".svc.cluster.local:{PORT}"
            )
        else:
            if args.operator:
                self._operator_objects(name, args)
            scraper = InNamespace(args.scraper_namespace)
            self.url = pulumi.Output.from_input("")
        # Each part admits the scraper on its metrics port: one policy per port, beside the
        # part's own (policies add up).
        for endpoint in scrape.endpoints(args.processes):
            allow_ingress(
                target,
                f"{name}-scrape-{endpoint.process}",
                endpoint.component,
                [endpoint.port],
                [scraper],
                self,
                policy_name=f"allow-scrape-{endpoint.process}",
            )
        self.register_outputs({"url": self.url})

    def _in_cluster(self, name: str, args: PrometheusArgs) -> None:
        target = args.target
        token = args.serving_token
        secrets = kube.SecretFiles()
        credentials: dict[str, str] = {}
        if token is not None:
            secrets = kube.secret_files("serving-auth", token[0], [token[1]])
            credentials["serving"] = kube.secret_path("serving-auth", token[1])
        config = pulumi.Output.from_input(target.namespace).apply(
            lambda namespace: yaml.safe_dump(
                scrape.prometheus_config(
                    namespace,
                    args.scrape_interval,
                    [f"{CONF_DIR}/{RULES_FILE}"],
                    credentials,
                    args.processes,
                ),
                sort_keys=False,
            )
        )
        rules = yaml.safe_dump(alerts.rule_file(self.rules), sort_keys=False)
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-conf",
            metadata=target.metadata(CONFIG_MAP, COMPONENT),
            data={CONFIG_FILE: config, RULES_FILE: rules},
            opts=target.opts(self),
        )
        account = kube.service_account(target, SERVICE_ACCOUNT, COMPONENT, self)
        role = k8s.rbac.v1.Role(
            f"{name}-role",
            metadata=target.metadata(SERVICE_ACCOUNT, COMPONENT),
            rules=[{"api_groups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
            opts=target.opts(self),
        )
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-binding",
            metadata=target.metadata(SERVICE_ACCOUNT, COMPONENT),
            role_ref={
                "api_group": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": SERVICE_ACCOUNT,
            },
            subjects=[
                {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": target.namespace}
            ],
            opts=target.opts(self, depends_on=[role, account]),
        )
        server = kube.container(
            target,
            COMPONENT,
            args.image,
            ["/bin/prometheus"],
            args=[
                f"--config.file={CONF_DIR}/{CONFIG_FILE}",
                f"--storage.tsdb.path={DATA_DIR}",
                f"--storage.tsdb.retention.time={args.retention}",
                f"--web.listen-address=:{PORT}",
            ],
            ports={"http": PORT},
            cpu=args.cpu,
            mem=args.mem,
            readiness=kube.http_probe("/-/ready", PORT, 10),
            liveness=kube.liveness(kube.http_probe("/-/healthy", PORT, 30)),
            mounts=[
                {"name": "data", "mount_path": DATA_DIR},
                {"name": "prometheus-conf", "mount_path": CONF_DIR, "read_only": True},
                *secrets.mounts,
            ],
        )
        kube.service(target, f"{name}-service", COMPONENT, COMPONENT, {"http": PORT}, self)
        k8s.apps.v1.StatefulSet(
            f"{name}-server",
            metadata=target.metadata(COMPONENT, COMPONENT),
            spec={
                "service_name": COMPONENT,
                "replicas": 1,
                "selector": {"match_labels": kube.labels(COMPONENT)},
                "persistent_volume_claim_retention_policy": kube.RETAIN_VOLUMES,
                "template": kube.pod_template(
                    COMPONENT,
                    [server],
                    [
                        {"name": "prometheus-conf", "config_map": {"name": CONFIG_MAP}},
                        *secrets.volumes,
                    ],
                    service_account=account.metadata["name"],
                    # A new configuration or rule set restarts it (its TSDB is on the volume).
                    annotations={
                        "elasticctr.io/config-sha256": pulumi.Output.all(config, rules).apply(
                            lambda texts: kube.digest({CONFIG_FILE: texts[0], RULES_FILE: texts[1]})
                        )
                    },
                    priority_class=args.priority_class,
                    api_access=True,
                ),
                "volume_claim_templates": [kube.volume_claim("data", args.storage)],
            },
            opts=target.opts(self, depends_on=[config_map, binding]),
        )
        allow_egress(
            target,
            f"{name}-egress",
            COMPONENT,
            [
                Route(ANYWHERE, args.api_server_ports),
                *dict.fromkeys(
                    Route(e.component, (e.port,)) for e in scrape.endpoints(args.processes)
                ),
            ],
            self,
        )

    def _operator_objects(self, name: str, args: PrometheusArgs) -> None:
        """The Prometheus Operator's objects: a PodMonitor per endpoint, the PrometheusRule."""
        target = args.target
        token = args.serving_token
        for endpoint in scrape.endpoints(args.processes):
            secret = token if endpoint.process == "serving" else None
            monitor = pulumi.Output.from_input(target.namespace).apply(
                functools.partial(
                    scrape.pod_monitor,
                    endpoint=endpoint,
                    interval_seconds=args.scrape_interval,
                    token_secret=secret,
                )
            )
            k8s.apiextensions.CustomResource(
                f"{name}-{endpoint.process}-monitor",
                api_version=scrape.OPERATOR_API,
                kind="PodMonitor",
                metadata=target.metadata(scrape.job_name(endpoint), COMPONENT),
                spec=monitor.apply(lambda doc: doc["spec"]),
                opts=target.opts(self),
            )
        rule = pulumi.Output.from_input(target.namespace).apply(
            lambda namespace: alerts.prometheus_rule(namespace, self.rules)
        )
        k8s.apiextensions.CustomResource(
            f"{name}-rules",
            api_version=scrape.OPERATOR_API,
            kind="PrometheusRule",
            metadata=target.metadata(alerts.GROUP, COMPONENT),
            spec=rule.apply(lambda doc: doc["spec"]),
            opts=target.opts(self),
        )
