"""The canonical form of a quantity, as the API server writes it back (tests/support/manifests.py)."""

from __future__ import annotations

import pytest

from tests.support.manifests import canonical_quantity, quantity_fields

# apimachinery v0.36.0 pkg/api/resource/quantity_test.go: TestQuantityString (alternate ->
# expect) and TestQuantityParseEmit (in -> expect).
APIMACHINERY = [
    ("1024Mi", "1Gi"),
    ("307200Ki", "300Mi"),
    ("6Ki", "6Ki"),
    ("1025024Mi", "1001Gi"),
    ("1024Gi", "1Ti"),
    ("5000m", "5"),
    ("0.5", "500m"),
    ("1000M", "1G"),
    ("0.001T", "1G"),
    ("1000u", "1m"),
    ("80m", "80m"),
    ("1.08", "1080m"),
    ("1080000000n", "1080m"),
    ("300M", "300M"),
    ("1234567M", "1234567M"),
    ("3k", "3k"),
    ("1025", "1025"),
    ("0", "0"),
    ("00", "0"),
    (".001e12", "1e9"),
    ("0.001e0", "1e-3"),
    ("1000e-12", "1e-9"),
    ("80e-3", "80e-3"),
    ("3e3", "3e3"),
    ("1Ki", "1Ki"),
    (".001Ki", "1024m"),
    (".000001Ki", "1024u"),
    (".000000001Ki", "1024n"),
    (".000000000001Ki", "2n"),
    ("-1024Mi", "-1Gi"),
    ("-1.08", "-1080m"),
]


@pytest.mark.parametrize(("text", "canonical"), APIMACHINERY)
def test_canonical_quantity_follows_apimachinery(text: str, canonical: str) -> None:
    assert canonical_quantity(text) == canonical


def test_quantity_fields_finds_requests_limits_and_size_limits() -> None:
    pod = {
        "containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"memory": "2Gi"}}}],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    assert list(quantity_fields(pod)) == [
        (".containers[0].resources.requests.cpu", "1"),
        (".containers[0].resources.limits.memory", "2Gi"),
        (".volumes[0].emptyDir.sizeLimit", "1Gi"),
    ]
