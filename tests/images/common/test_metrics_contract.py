"""The metrics contract itself: its rules (units, `_total`, labels) are enforced where a
family is declared; each Python part's registry holds exactly the contract's families;
serving's hand-made registry matches it. The live processes are checked in their own
suites (tests/images/cube/test_metrics.py, ...), through tests/support/metrics.py."""

from __future__ import annotations

import pytest
from elasticctr_common import metrics as m
from elasticctr_common.exposition import Exposition

from tests.support.metrics import check, parse


@pytest.mark.parametrize(
    ("family", "message"),
    [
        (("elasticctr_x_requests", m.COUNTER, "h"), "counters, and only they, end in _total"),
        (("elasticctr_x_version_total", m.GAUGE, "h"), "counters, and only they, end in _total"),
        (("elasticctr_x_latency", m.HISTOGRAM, "h", (), (1.0,)), "a unit suffix"),
        (("elasticctr_x_seconds", m.HISTOGRAM, "h"), "a histogram needs buckets"),
        (("elasticctr_x_seconds", m.HISTOGRAM, "h", (), (2.0, 1.0)), "buckets must increase"),
        (("elasticctr_x_up", m.GAUGE, "h", ("le",)), "not le/quantile"),
        (("elasticctr_x_up", m.GAUGE, "h", ("a", "a")), "lowercase, unique"),
        (("x_up", m.GAUGE, "h"), "the name must be elasticctr_"),
        (("elasticctr_x_up", "summary", "h"), "type 'summary' is not one of"),
        (("elasticctr_x_up", m.GAUGE, ""), "help must say"),
    ],
)
def test_a_family_against_the_conventions_is_refused_naming_it(family, message):
    with pytest.raises(ValueError, match=rf"metric family '{family[0]}': .*{message}"):
        m.Family(*family)


def test_an_endpoint_refuses_a_family_outside_its_prefix_or_twice():
    up = m.Family("elasticctr_a_up", m.GAUGE, "h")
    with pytest.raises(ValueError, match=r"families \['elasticctr_a_up'\] do not start with"):
        m.Endpoint("b", 1, "elasticctr_b_", (up,), component="b")
    with pytest.raises(ValueError, match="listed twice"):
        m.Endpoint("a", 1, "elasticctr_a_", (up, up), component="a")
    with pytest.raises(KeyError, match="a has no metric family elasticctr_a_down"):
        m.Endpoint("a", 1, "elasticctr_a_", (up,), component="a")["down"]


def test_ports_come_from_the_contract():
    ports = {name: e.port for name, e in m.ENDPOINTS.items()}
    assert ports == {
        "serving": 8010, "cube-server": 8027, "cube-agent": 8001, "cube-transfer": 8099,
        "trainer": 8014, "joiner": 8012,
    }  # fmt: skip


@pytest.mark.parametrize("endpoint", list(m.ENDPOINTS.values()), ids=list(m.ENDPOINTS))
def test_an_exposition_holds_exactly_the_contracts_families(endpoint):
    exposition = Exposition(endpoint)
    text = exposition.render().decode()
    families = check(endpoint, parse(text, "text/plain"))
    assert len(families) == len(endpoint.families)


def test_the_check_finds_a_family_the_contract_lacks_and_wrong_labels_or_buckets():
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    r = CollectorRegistry()
    Counter("elasticctr_joiner_extra_total", "not in the contract", registry=r).inc()
    Counter("elasticctr_joiner_clicks_total", "labelled here", ("topic",), registry=r).labels(
        "a"
    ).inc()
    Histogram("elasticctr_cube_agent_prepare_seconds", "h", ("result",), registry=r).labels(
        "ready"
    ).observe(1)
    text = generate_latest(r).decode()
    joiner = m.JOINER.problems(parse(text, "text/plain"))
    assert "joiner: family elasticctr_joiner_extra (counter) is not in the contract" in joiner
    assert (
        "joiner: elasticctr_joiner_clicks_total has labels ['topic'], the contract says []"
        in joiner
    )
    agent = m.CUBE_AGENT.problems(parse(text, "text/plain"))
    assert any("prepare_seconds has buckets [0.005," in p for p in agent), agent


def test_servings_registry_is_the_contracts():
    from elasticctr_serving.metrics import ServingMetrics

    text = ServingMetrics().render()
    families = check(m.SERVING, parse(text, "text/plain"))
    assert len(families) == len(m.SERVING.families)
