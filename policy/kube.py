"""Reading resources as the policy engine hands them to a validator.

Properties arrive as the engine's JSON: Kubernetes camelCase keys, every number a float,
secrets already unwrapped. During a preview some values are not known yet (they depend on
resources that do not exist yet); the SDK wraps the properties in proxies that raise
`UnknownValueError` when such a value is read. `get` turns that into `UNKNOWN`, so a rule
skips what it cannot judge yet: the engine runs the rule again on `pulumi up`, when every
value is known.

Validators call `report(message, None)`: pulumi_policy types `ReportViolation` as
`Callable[[str, Optional[str]], None]`, although its urn is optional at run time (and
ignored for a resource policy).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pulumi_policy.proxy import UnknownValueError


class _Unknown:
    """A value the engine does not know yet (preview)."""

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = _Unknown()


def is_list(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def get(value: Any, *path: str | int, default: Any = None) -> Any:
    """value[path[0]][path[1]]...: `default` when a step is missing, UNKNOWN when unknown."""
    try:
        for key in path:
            if isinstance(key, int):
                if not is_list(value) or not 0 <= key < len(value):
                    return default
            elif not isinstance(value, Mapping) or key not in value:
                return default
            value = value[key]
    except UnknownValueError:
        return UNKNOWN
    return value


def items(value: Any) -> list[Any]:
    """The elements of a list (UNKNOWN for unknown ones); [] when `value` is not a list."""
    if not is_list(value):
        return []
    return [get(value, i) for i in range(len(value))]


def entries(value: Any) -> list[tuple[str, Any]]:
    """The (key, value) pairs of a mapping (UNKNOWN values for unknown ones)."""
    if not isinstance(value, Mapping):
        return []
    return [(key, get(value, key)) for key in value]


def number(value: Any) -> float | None:
    """A JSON number as a float (the engine sends every number as one); None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def show(value: float) -> str:
    """A number as people write it: 2, 0.5 (not 2.0)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# ---- type tokens -----------------------------------------------------------------------


@dataclass(frozen=True)
class TypeToken:
    """`package:module:Kind`, e.g. kubernetes:apps/v1:Deployment."""

    package: str
    module: str
    kind: str

    @property
    def group(self) -> str:
        """The API group of a Kubernetes type ("core" for the legacy group)."""
        return self.module.split("/", 1)[0]

    @property
    def base_kind(self) -> str:
        """The kind without the `Patch` suffix of server-side-apply patch resources."""
        return self.kind.removesuffix("Patch")


def parse_type(token: str) -> TypeToken | None:
    parts = token.split(":")
    return TypeToken(*parts) if len(parts) == 3 else None


VOLCANO_JOB = "kubernetes:batch.volcano.sh/v1alpha1:Job"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"

# Where the pod spec of each workload kind lives, by (API group, kind).
_TEMPLATE = ("spec", "template", "spec")
_POD_SPEC_PATHS: dict[tuple[str, str], tuple[str, ...]] = {
    ("core", "Pod"): ("spec",),
    ("core", "PodTemplate"): ("template", "spec"),
    ("core", "ReplicationController"): _TEMPLATE,
    **{("apps", k): _TEMPLATE for k in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet")},
    **{("extensions", k): _TEMPLATE for k in ("Deployment", "DaemonSet", "ReplicaSet")},
    ("batch", "Job"): _TEMPLATE,
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template", "spec"),
}


@dataclass(frozen=True)
class PodSpec:
    """One pod spec inside a resource: `where` is its path, for messages."""

    where: str
    spec: Any
    task: str | None = None  # Volcano task name
    replicas: Any = None  # Volcano task replicas (a float, UNKNOWN or None)


def pod_specs(resource_type: str, props: Any) -> list[PodSpec]:
    """Every pod spec of a Kubernetes workload (one per task of a Volcano Job)."""
    token = parse_type(resource_type)
    if token is None or token.package != "kubernetes":
        return []
    if resource_type.removesuffix("Patch") == VOLCANO_JOB:
        specs = []
        for i, task in enumerate(items(get(props, "spec", "tasks"))):
            name = get(task, "name")
            label = f" ({name})" if isinstance(name, str) else ""
            spec = get(task, "template", "spec")
            if isinstance(spec, Mapping):
                specs.append(
                    PodSpec(
                        f"spec.tasks[{i}]{label}.template.spec",
                        spec,
                        name if isinstance(name, str) else f"#{i}",
                        get(task, "replicas"),
                    )
                )
        return specs
    path = _POD_SPEC_PATHS.get((token.group, token.base_kind))
    spec = get(props, *path) if path else None
    return [PodSpec(".".join(path), spec)] if path and isinstance(spec, Mapping) else []


CONTAINER_FIELDS = ("containers", "initContainers", "ephemeralContainers")


@dataclass(frozen=True)
class Container:
    pod: PodSpec
    field: str  # containers, initContainers or ephemeralContainers
    index: int
    spec: Any

    @property
    def name(self) -> str:
        name = get(self.spec, "name")
        return name if isinstance(name, str) else f"#{self.index}"

    @property
    def where(self) -> str:
        return f"{self.pod.where}.{self.field}[{self.index}]"

    @property
    def label(self) -> str:
        kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}
        return f'{kind.get(self.field, "container")} "{self.name}" ({self.where})'


def containers(
    resource_type: str, props: Any, fields: Sequence[str] = CONTAINER_FIELDS
) -> Iterator[Container]:
    for pod in pod_specs(resource_type, props):
        for field in fields:
            for i, spec in enumerate(items(get(pod.spec, field))):
                if isinstance(spec, Mapping):
                    yield Container(pod, field, i, spec)


def object_label(resource_type: str, props: Any, resource_name: str) -> str:
    """`Deployment "serving"`: the kind and the object's own name (the resource's if unknown)."""
    token = parse_type(resource_type)
    kind = token.kind if token else resource_type
    name = get(props, "metadata", "name")
    return f'{kind} "{name if isinstance(name, str) else resource_name}"'


# ---- quantities ------------------------------------------------------------------------

_QUANTITY = re.compile(
    r"^\s*(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?\s*$"
)
_SCALE: dict[str | None, float] = {
    None: 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    **{s: 1024.0 ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}
GIB = 1024.0**3


def quantity(value: Any) -> float | None:
    """A Kubernetes quantity ("500m", "4Gi", 2) as a plain number; None if it is not one."""
    plain = number(value)
    if plain is not None:
        return plain
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    return float(match["number"]) * _SCALE[match["suffix"]]
