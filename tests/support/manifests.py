"""Schema checks of Kubernetes manifests, shared by the mock tests (tests/infra/test_manifests.py)
and the rendered manifests of the real CLI (tests/e2e/test_render.py).

Core objects: `kubernetes-validate` in strict mode (unknown fields rejected) at the oldest and
the newest Kubernetes the program supports. Volcano Jobs: their pod templates as core
PodTemplates (strict), the Job itself against Volcano's CRD schema with unknown fields
rejected (`volcano_crds.closed`), since kubernetes-validate has no schema for custom resources.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from decimal import ROUND_UP, Decimal
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes.utils import parse_quantity

from tests.support.volcano_crds import closed, openapi_schema

# The oldest Kubernetes the program supports (StatefulSet pod-index label) and the newest.
KUBERNETES_VERSIONS = ("1.28", "1.37")
VOLCANO_JOB = ("batch.volcano.sh/v1alpha1", "Job")


def is_volcano_job(manifest: dict[str, Any]) -> bool:
    return (manifest.get("apiVersion"), manifest.get("kind")) == VOLCANO_JOB


def is_operator_object(manifest: dict[str, Any]) -> bool:
    """A Prometheus Operator object (checked against its CRD: tests/support/operator_crds)."""
    return str(manifest.get("apiVersion", "")).startswith("monitoring.coreos.com/")


def describe(manifest: dict[str, Any]) -> str:
    return f"{manifest.get('kind')}/{(manifest.get('metadata') or {}).get('name')}"


def pod_templates(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(owner, pod template) of every workload object."""
    spec = manifest.get("spec", {})
    kind = manifest["kind"]
    name = manifest["metadata"]["name"]
    if kind in ("Deployment", "StatefulSet", "Job") and "template" in spec:
        yield f"{kind}/{name}", spec["template"]
    for task in spec.get("tasks", []):
        yield f"{kind}/{name}/{task['name']}", task["template"]


def kubernetes_error(manifest: dict[str, Any], version: str) -> str | None:
    """Why `manifest` is not a valid Kubernetes `version` object (strict), or None."""
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        return f"{err.message} at {list(err.path)}"
    return None


def core_errors(manifest: dict[str, Any], version: str) -> list[str]:
    """Strict schema errors of one manifest at `version`; a Volcano Job's pod templates are
    checked as core PodTemplates (the Job itself: `volcano_job_errors`); the Prometheus
    Operator's objects are not core objects."""
    if is_operator_object(manifest):
        return []
    if is_volcano_job(manifest):
        checks = [
            (
                owner,
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": "t"},
                    "template": template,
                },
            )
            for owner, template in pod_templates(manifest)
        ]
    else:
        checks = [(describe(manifest), manifest)]
    errors = []
    for what, obj in checks:
        error = kubernetes_error(obj, version)
        if error:
            errors.append(f"{what} is not a valid Kubernetes {version} object: {error}")
    return errors


def volcano_job_schema() -> dict[str, Any]:
    """Volcano's Job schema with unknown fields rejected (raises CrdsUnavailable)."""
    return dict(closed(openapi_schema("batch.volcano.sh_jobs.yaml")))


def volcano_job_errors(manifest: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    # The validator jsonschema.validate would pick (as the mock tests use).
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [
        f"{describe(manifest)} does not match Volcano's Job CRD: {err.message} at {list(err.path)}"
        for err in validator.iter_errors(manifest)
    ]


def schema_errors(
    manifests: Iterable[dict[str, Any]],
    versions: Iterable[str] = KUBERNETES_VERSIONS,
    volcano_schema: dict[str, Any] | None = None,
) -> list[str]:
    """Every schema problem of `manifests`: strict core checks at each of `versions`, and
    Volcano Jobs against `volcano_schema` when given."""
    errors = []
    for manifest in manifests:
        for version in versions:
            errors += core_errors(manifest, version)
        if volcano_schema is not None and is_volcano_job(manifest):
            errors += volcano_job_errors(manifest, volcano_schema)
    return errors


def load_rendered(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(file, object) of every YAML document under `directory` (renderYamlToDirectory puts
    CRDs in 0-crd/ and the rest in 1-manifest/, one object per file)."""
    found = []
    for path in sorted(directory.rglob("*")):
        if path.suffix not in (".yaml", ".yml") or not path.is_file():
            continue
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document:
                found.append((path, document))
    return found


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value ("1Gi", "500m"), or None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        return Decimal(parse_quantity(value))
    except ValueError:
        return None


# apimachinery's canonical suffixes: base 1024 by tens of powers of two, base 10 by thousands.
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T"}
_DECIMAL_SUFFIXES |= {15: "P", 18: "E"}


def canonical_quantity(text: str) -> str:
    """How the API server writes the quantity `text` back: apimachinery's
    `Quantity.CanonicalizeBytes` (k8s.io/apimachinery v0.36, pkg/api/resource/quantity.go).
    The format is the one it was written in (binary "Mi", exponent "e3", else decimal SI);
    the value is rounded up to nano units; binary keeps the largest power of 1024 that
    leaves a whole number, unless the value is below 1024 or fractional (then decimal SI);
    decimal keeps the largest multiple of 3 as exponent that leaves a whole mantissa."""
    value = Decimal(parse_quantity(text)).quantize(Decimal("1e-9"), rounding=ROUND_UP)
    if value == 0:
        return "0"
    number = text.lstrip("+-")
    binary = number.endswith("i")
    exponent_format = not binary and ("e" in number or "E" in number[:-1])
    if binary and abs(value) >= 1024 and value == value.to_integral_value():
        amount, power = int(value), 0
        while amount % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
            amount //= 1024
            power += 1
        return f"{amount}{_BINARY_SUFFIXES[power]}"
    sign, digits, exponent = value.normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits))) * (-1 if sign else 1)
    shift = exponent % 3  # down to a multiple of 3, the mantissa staying whole
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if exponent_format:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_DECIMAL_SUFFIXES[exponent]}"


def quantity_fields(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, text) of every quantity of a pod spec or Volcano Job: resource requests and
    limits (of containers and volume claims) and emptyDir size limits."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}"
            if key in ("requests", "limits") and isinstance(item, dict):
                yield from ((f"{where}.{k}", v) for k, v in item.items() if isinstance(v, str))
            elif key == "sizeLimit" and isinstance(item, str):
                yield where, item
            else:
                yield from quantity_fields(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from quantity_fields(item, f"{path}[{i}]")


def same_scalar(left: Any, right: Any) -> bool:
    """Equal, or the same quantity written two ways (the API server and the provider write
    quantities canonically: 1024Mi becomes 1Gi, 1000m becomes 1)."""
    if left == right:
        return True
    return quantity(left) is not None and quantity(left) == quantity(right)


def mismatches(
    expected: Any,
    actual: Any,
    path: str = "",
    same: Callable[[Any, Any], bool] = same_scalar,
) -> list[str]:
    """Where `actual` (read back) lacks what `expected` (declared) says. The API server adds
    defaults, so dicts only need to contain the declared keys; scalars compare with `same`
    (by default quantities by value: 1024Mi reads back as 1Gi from a core object); Secrets'
    stringData is read back as data (checked apart)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: {actual!r} is not an object"]
        found = []
        for key, value in expected.items():
            if key == "stringData":
                continue
            if key not in actual:
                found.append(f"{path}.{key}: missing (declared {value!r})")
            else:
                found += mismatches(value, actual[key], f"{path}.{key}", same)
        return found
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: {actual!r} is not the declared list {expected!r}"]
        return [
            m
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for m in mismatches(e, a, f"{path}[{i}]", same)
        ]
    return [] if same(expected, actual) else [f"{path}: {actual!r}, declared {expected!r}"]


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two JSON-like values differ, as `path: left != right` lines (quantities compare
    by value)."""
    if isinstance(left, dict) and isinstance(right, dict):
        found = []
        for key in sorted(left.keys() | right.keys()):
            if key not in right:
                found.append(f"{path}.{key}: only left ({left[key]!r})")
            elif key not in left:
                found.append(f"{path}.{key}: only right ({right[key]!r})")
            else:
                found += differences(left[key], right[key], f"{path}.{key}")
        return found
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            d
            for i, (a, b) in enumerate(zip(left, right, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    return [] if same_scalar(left, right) else [f"{path}: {left!r} != {right!r}"]
