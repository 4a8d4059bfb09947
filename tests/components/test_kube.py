"""Shared pod conventions."""

from __future__ import annotations

import pytest

from components import kube
from tests.support.manifests import canonical_quantity


def test_api_fields_translates_field_names_but_not_data_keys() -> None:
    template = kube.pod_template(
        "trainer",
        [
            {
                "name": "c",
                "security_context": kube.container_security(),
                "env": kube.env({"MY_VAR": "1"}),
            }
        ],
        annotations={"elasticctr.io/config_sha": "x"},
    )
    api = kube.api_fields(template)
    assert api["metadata"]["annotations"] == {"elasticctr.io/config_sha": "x"}
    container = api["spec"]["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["env"] == [{"name": "MY_VAR", "value": "1"}]
    assert api["spec"]["automountServiceAccountToken"] is False
    assert kube.api_fields({"from_": [{"pod_selector": {}}]}) == {"from": [{"podSelector": {}}]}


def test_resources_are_guaranteed_qos() -> None:
    assert kube.resources(0.5, 1.5) == {
        "requests": {"cpu": "500m", "memory": "1536Mi"},
        "limits": {"cpu": "500m", "memory": "1536Mi"},
    }


def test_digest_is_order_independent() -> None:
    assert kube.digest({"a": "1", "b": "2"}) == kube.digest({"b": "2", "a": "1"})
    assert kube.digest({"a": "1"}) != kube.digest({"a": "2"})


def test_a_node_pool_becomes_a_node_selector_on_the_pool_label() -> None:
    container = {"name": "c", "security_context": kube.container_security()}
    pinned = kube.api_fields(kube.pod_template("serving", [container], node_pool="serving"))
    assert pinned["spec"]["nodeSelector"] == {"elasticctr.io/pool": "serving"}
    anywhere = kube.api_fields(kube.pod_template("serving", [container]))
    assert "nodeSelector" not in anywhere["spec"]


@pytest.mark.parametrize(
    ("cores", "gib", "cpu", "memory"),
    [
        (1, 2, "1", "2Gi"),
        (0.5, 1.5, "500m", "1536Mi"),
        (2.5, 0.0625, "2500m", "64Mi"),
        (16, 1024, "16", "1Ti"),
        (1000, 0.5, "1k", "512Mi"),
    ],
)
def test_quantities_are_written_as_kubernetes_writes_them_back(
    cores: float, gib: float, cpu: str, memory: str
) -> None:
    assert (kube.quantity_cpu(cores), kube.quantity_mem(gib)) == (cpu, memory)
    # The same as the API server's canonical form of the plain millicores and MiB.
    assert cpu == canonical_quantity(f"{round(cores * 1000)}m")
    assert memory == canonical_quantity(f"{round(gib * 1024)}Mi")
