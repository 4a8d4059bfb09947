"""Monitoring: the stack's own Prometheus (its configuration from the contract, the API
access it needs and no more, policies both ways), or the Prometheus Operator's objects."""

from __future__ import annotations

from typing import Any

import yaml
from elasticctr_common.alerts import RULES
from elasticctr_common.metrics import ENDPOINTS

from components.prometheus import Prometheus, PrometheusArgs
from infra.config import MonitoringConfig
from tests.support.components import run_component
from tests.support.pulumi_harness import Graph

SECTION = MonitoringConfig().model_dump(exclude={"prometheus", "operator", "api_server_ports"})


def _render(prometheus: str, operator: bool = False, token: bool = True, **more: Any) -> Graph:
    return run_component(
        lambda t: Prometheus(
            "prometheus",
            PrometheusArgs(
                target=t,
                prometheus=prometheus,  # type: ignore[arg-type]
                operator=operator,
                api_server_ports=(443, 6443),
                image="r.test/prometheus:v3",
                serving_token=("serving-auth", "SERVING_AUTH_TOKEN") if token else None,
                **{**SECTION, **more},
            ),
        )
    )


def _policies(graph: Graph) -> dict[str, dict[str, Any]]:
    return {
        r.inputs["metadata"]["name"]: r.inputs["spec"]
        for r in graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    }


def test_in_cluster_prometheus_scrapes_the_contract_with_the_serving_token() -> None:
    graph = _render("in-cluster")
    data = graph.one("kubernetes:core/v1:ConfigMap").inputs["data"]
    config = yaml.safe_load(data["prometheus.yml"])
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"prometheus", *(f"elasticctr-{p}" for p in ENDPOINTS)}
    assert jobs["elasticctr-serving"]["authorization"]["credentials_file"] == (
        "/var/run/secrets/elasticctr/serving-auth/SERVING_AUTH_TOKEN"
    )
    assert jobs["elasticctr-joiner"]["kubernetes_sd_configs"][0]["namespaces"] == {
        "names": ["test-ns"]
    }
    rules = yaml.safe_load(data["elasticctr-rules.yml"])
    assert len(rules["groups"][0]["rules"]) == len(RULES)
    assert config["rule_files"] == ["/etc/prometheus/elasticctr-rules.yml"]

    spec = graph.one("kubernetes:apps/v1:StatefulSet").inputs["spec"]
    pod = spec["template"]["spec"]
    # The one pod that calls the API: its token is mounted, its Role reads pods only.
    assert pod["automountServiceAccountToken"] is True
    (role,) = graph.of_type("kubernetes:rbac.authorization.k8s.io/v1:Role")
    assert role.inputs["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    (container,) = pod["containers"]
    assert "--storage.tsdb.retention.time=15d" in container["args"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/prometheus", "/etc/prometheus", "/var/run/secrets/elasticctr/serving-auth"} <= mounts
    assert container["resources"]["limits"] and container["resources"]["requests"]
    assert spec["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "elasticctr.io/config-sha256" in spec["template"]["metadata"]["annotations"]
    assert graph.component_outputs("elasticctr:prometheus:Prometheus")["url"] == (
        "http://prometheus.test-ns.svc.cluster.local:9090"
    )


def test_each_part_admits_the_stacks_prometheus_on_its_metrics_port_only() -> None:
    policies = _policies(_render("in-cluster"))
    for endpoint in ENDPOINTS.values():
        spec = policies[f"allow-scrape-{endpoint.process}"]
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == (
            endpoint.component
        )
        (rule,) = spec["ingress"]
        assert rule["ports"] == [{"port": endpoint.port, "protocol": "TCP"}]
        assert rule["from"] == [
            {
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/part-of": "elasticctr",
                        "app.kubernetes.io/component": "prometheus",
                    }
                }
            }
        ]
    egress = policies["egress-prometheus"]["egress"]
    reached = {
        (
            r["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
            r["ports"][0]["port"],
        )
        for r in egress
        if "to" in r
    }
    assert reached == {(e.component, e.port) for e in ENDPOINTS.values()}
    # The API server's address is the cluster's: its ports, any address.
    assert [r["ports"] for r in egress if "to" not in r] == [
        [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]
    ]
    # Without the feedback loop there is no joiner to scrape, nor to reach.
    without = _policies(
        _render("in-cluster", processes=tuple(p for p in ENDPOINTS if p != "joiner"))
    )
    assert "allow-scrape-joiner" not in without
    ports = {r["ports"][0]["port"] for r in without["egress-prometheus"]["egress"] if "to" in r}
    assert ENDPOINTS["joiner"].port not in ports


def test_external_with_the_operator_makes_its_objects_and_admits_its_namespace() -> None:
    graph = _render("external", operator=True)
    assert not graph.of_type("kubernetes:apps/v1:StatefulSet")
    objects = graph.of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    assert sorted(o.inputs["metadata"]["name"] for o in objects) == sorted(
        f"elasticctr-{p}" for p in ENDPOINTS
    )
    serving = next(o for o in objects if o.inputs["metadata"]["name"] == "elasticctr-serving")
    (scrape,) = serving.inputs["spec"]["podMetricsEndpoints"]
    assert scrape["authorization"]["credentials"] == {
        "name": "serving-auth",
        "key": "SERVING_AUTH_TOKEN",
    }
    rule = graph.one("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    assert len(rule.inputs["spec"]["groups"][0]["rules"]) == len(RULES)
    spec = _policies(graph)["allow-scrape-cube-server"]
    assert spec["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_external_without_the_operator_only_opens_the_ports() -> None:
    graph = _render("external", token=False)
    assert not graph.of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")
    assert not graph.of_type("kubernetes:core/v1:ConfigMap")
    assert len(_policies(graph)) == len(ENDPOINTS)
    assert graph.component_outputs("elasticctr:prometheus:Prometheus")["url"] == ""


def test_an_alerts_for_is_the_stacks_in_the_rule_file_and_the_prometheus_rule() -> None:
    shorter = {"ElasticctrCubeShardDown": "20s", "ElasticctrJoinerDown": "1m30s"}
    defaults = {rule.alert: rule.duration for rule in RULES}
    for graph, kind in (
        (_render("in-cluster", alert_for=shorter), "kubernetes:core/v1:ConfigMap"),
        (
            _render("external", True, alert_for=shorter),
            "kubernetes:monitoring.coreos.com/v1:PrometheusRule",
        ),
    ):
        resource = graph.one(kind).inputs
        spec = (
            yaml.safe_load(resource["data"]["elasticctr-rules.yml"])
            if "data" in resource
            else resource["spec"]
        )
        durations = {r["alert"]: r["for"] for r in spec["groups"][0]["rules"]}
        assert durations == {**defaults, **shorter}
