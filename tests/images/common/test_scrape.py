"""Prometheus's scrape jobs for a stack (elasticctr_common.scrape): one per endpoint of the
metrics contract, its component's pods in the stack's namespace, on the contract's port;
a configuration Prometheus's own checker accepts, and the same jobs as PodMonitors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from elasticctr_common.alerts import rule_file
from elasticctr_common.metrics import ENDPOINTS
from elasticctr_common.scrape import pod_monitors, prometheus_config, scrape_configs

from tests.support.prometheus import run_promtool


def _relabel(rules: list[dict], meta: dict[str, str]) -> dict[str, str] | None:
    """Prometheus's relabelling of one target (the actions these jobs use: replace and
    keep, anchored regexes, `$1` references), to read the jobs' effect here."""
    labels = dict(meta)
    for rule in rules:
        source = ";".join(labels.get(name, "") for name in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), source)
        if rule.get("action", "replace") == "keep":
            if match is None:
                return None
            continue
        if match is not None:
            template = re.sub(r"\$\{?(\d+)\}?", r"\\\1", rule.get("replacement", "$1"))
            value = match.expand(template)
            labels[rule["target_label"]] = value
    return {k: v for k, v in labels.items() if not k.startswith("__meta_")}


def _pod(component: str, ip: str, phase: str = "Running") -> dict[str, str]:
    return {
        "__address__": f"{ip}:9999",
        "__meta_kubernetes_namespace": "prod",
        "__meta_kubernetes_pod_name": f"{component}-0",
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_phase": phase,
        "__meta_kubernetes_pod_label_app_kubernetes_io_part_of": "elasticctr",
        "__meta_kubernetes_pod_label_app_kubernetes_io_component": component,
    }


@pytest.mark.parametrize("endpoint", list(ENDPOINTS.values()), ids=list(ENDPOINTS))
def test_a_job_scrapes_its_components_running_pods_on_the_contract_port(endpoint) -> None:
    (job,) = [
        j for j in scrape_configs("prod", 30) if j["job_name"] == f"elasticctr-{endpoint.process}"
    ]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["namespaces"] == {"names": ["prod"]}
    assert job["metrics_path"] == endpoint.path
    rules = job["relabel_configs"]
    target = _relabel(rules, _pod(endpoint.component, "10.1.2.3"))
    assert target == {
        "__address__": f"10.1.2.3:{endpoint.port}",
        "namespace": "prod",
        "pod": f"{endpoint.component}-0",
        "process": endpoint.process,
    }
    ipv6 = _relabel(rules, _pod(endpoint.component, "fd00::7"))
    assert ipv6 is not None and ipv6["__address__"] == f"[fd00::7]:{endpoint.port}"
    assert _relabel(rules, _pod(endpoint.component, "10.1.2.3", "Pending")) is None
    other = "serving" if endpoint.component != "serving" else "joiner"
    assert _relabel(rules, _pod(other, "10.1.2.3")) is None


def test_every_endpoint_has_one_job_and_the_token_goes_to_serving_only() -> None:
    jobs = scrape_configs("prod", 15, {"serving": "/var/run/secrets/elasticctr/serving-auth/t"})
    assert [j["job_name"] for j in jobs] == [f"elasticctr-{p}" for p in ENDPOINTS]
    with_token = [j["job_name"] for j in jobs if "authorization" in j]
    assert with_token == ["elasticctr-serving"]
    with pytest.raises(ValueError, match="processes the contract lacks"):
        scrape_configs("prod", 15, {"servng": "/t"})


def test_prometheus_accepts_the_whole_configuration(tmp_path: Path) -> None:
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule_file()))
    token = tmp_path / "token"
    token.write_text("secret")
    config = prometheus_config("prod", 30, [str(tmp_path / "rules.yml")], {"serving": str(token)})
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result = run_promtool("check", "config", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_pod_monitors_hold_the_same_selection_port_and_token() -> None:
    monitors = pod_monitors("prod", 30, {"serving": ("serving-auth", "SERVING_AUTH_TOKEN")})
    assert [m["metadata"]["name"] for m in monitors] == [f"elasticctr-{p}" for p in ENDPOINTS]
    for monitor, endpoint in zip(monitors, ENDPOINTS.values(), strict=True):
        spec = monitor["spec"]
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == endpoint.component
        assert spec["namespaceSelector"] == {"matchNames": ["prod"]}
        (scrape,) = spec["podMetricsEndpoints"]
        rules = [
            {
                {"sourceLabels": "source_labels", "targetLabel": "target_label"}.get(k, k): v
                for k, v in r.items()
            }
            for r in scrape["relabelings"]
        ]
        target = _relabel(rules, _pod(endpoint.component, "10.1.2.3"))
        assert target is not None and target["__address__"] == f"10.1.2.3:{endpoint.port}"
        assert target["process"] == endpoint.process
        token = scrape.get("authorization")
        if endpoint.process == "serving":
            assert token == {
                "type": "Bearer",
                "credentials": {"name": "serving-auth", "key": "SERVING_AUTH_TOKEN"},
            }
        else:
            assert token is None
