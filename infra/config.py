"""The stack config: one pydantic model, the single source of keys, types and defaults.

Pulumi.yaml's `config:` section and the README's config reference are generated from
this module (tools/gen_config.py); a test fails when they drift.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin
from urllib.parse import urlsplit

from elasticctr_common import alerts, canary
from elasticctr_common.contract import CUBE_BASE_EVERY, CUBE_KEEP_VERSIONS, CUBE_MAX_CHAIN_FRACTION
from elasticctr_common.crosses import AUTO_CROSS_SLOTS, cross_problems
from elasticctr_common.cube.conf import CubeConf, LoadBalancer
from elasticctr_common.feedback import CLICKS_TOPIC, IMPRESSIONS_TOPIC, PARTITION_MINUTES
from elasticctr_common.lines import LABEL, MAX_DENSE_DIM
from elasticctr_common.trainer_json import (
    AUTO_CROSSES,
    NEW_MODEL_DENSE_TRANSFORM,
    NEW_MODEL_SPARSE_OPTIMIZER,
    SPARSE_RATES,
    DataFormat,
    DenseTransform,
    HyperParameters,
    Mode,
    Model,
    Runner,
    SparseOptimizer,
)
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    WrapValidator,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

# Kubernetes quantities as the API accepts them ("10Gi", "500Mi", "1T").
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_DIGEST = r"sha256:[a-f0-9]{64}"
# Image references with a tag, a digest or both; "latest" is refused by _pinned (no
# look-ahead here).
IMAGE = rf"^[a-z0-9][a-z0-9./_-]*(:{_TAG}(@{_DIGEST})?|@{_DIGEST})$"
DIGEST = rf"^{_DIGEST}$"
TAG = rf"^{_TAG}$"
# A registry host[:port] and path components: no empty component ("docker.io//x").
REGISTRY = r"^[a-z0-9]([a-z0-9.:_-]*[a-z0-9])?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# A Service's name starts with a letter (DNS-1035): Volcano names one after its job.
DNS_1035_LABEL = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
DATE_HOUR = r"^[0-9]{8}/[0-9]{2}$"
# A PriorityClass name is a DNS subdomain: DNS labels joined by dots (253 at most).
PRIORITY_CLASS = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?){0,3}$"
# Resources Kubernetes would round to nothing, or a container could not start with: CPU is
# sent in millicores (0.0004 cores would be "0m"), memory in MiB.
MIN_CPU = 0.01
MIN_MEM = 0.0625  # GiB: 64 MiB
MAX_SPARSE_DIM = 10**9
# The longest host name a pod may have (a DNS label): Volcano names job pods <job>-<task>-<i>.
MAX_HOST_NAME = 63


def _allowed(pattern: str, text: str) -> Any:
    """A string constrained by `pattern`; `text` says what is allowed in error messages."""
    return Field(pattern=pattern, json_schema_extra={"allowed": text})


def _pinned(reference: str) -> str:
    if reference == "latest" or reference.endswith(":latest"):
        raise ValueError("latest is not a pinned tag")
    return reference


QUANTITY_UNITS = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
# Kubernetes reads a size as an int64 of bytes: more does not fit.
MAX_QUANTITY = 2**63 - 1


def _positive(quantity: str) -> str:
    number = re.sub(r"[A-Za-z]+$", "", quantity)
    size = float(number) * QUANTITY_UNITS[quantity[len(number) :]]
    if size <= 0:
        raise ValueError("a quantity > 0, such as 10Gi")
    if size > MAX_QUANTITY:
        raise Problem(
            "",
            "must be a Kubernetes quantity up to 8Ei (it holds sizes as 64-bit byte counts), "
            f"got {shown(quantity)}",
        )
    return quantity


def is_secret(annotation: Any) -> bool:
    """A field holding a secret: SecretStr, constrained (Annotated) or optional."""
    if annotation is SecretStr:
        return True
    if get_origin(annotation) is Annotated:
        return is_secret(get_args(annotation)[0])
    return any(is_secret(arg) for arg in get_args(annotation)) if get_args(annotation) else False


def _non_empty_secret(value: SecretStr) -> SecretStr:
    if not value.get_secret_value():
        raise Problem("", "must be a non-empty secret, got <secret>")
    return value


Secret = Annotated[SecretStr, AfterValidator(_non_empty_secret)]


def _ugi(value: SecretStr) -> SecretStr:
    if not value.get_secret_value().split(",", 1)[0]:
        raise Problem("", "must be 'user,password' with a user name before the comma, got <secret>")
    return value


# A PEM bundle as `pulumi config set --path ... -- "$(cat ca.pem)"` stores it: lines of one
# or more certificates; the one string value whose newlines are meant.
PEM_BUNDLE = re.compile(
    r"(-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\r?\n?)+"
)


def _pem_bundle(value: str) -> str:
    if value and not PEM_BUNDLE.fullmatch(value):
        raise Problem(
            "",
            "must be PEM certificates (-----BEGIN CERTIFICATE----- ... -----END "
            f'CERTIFICATE-----; set it with -- "$(cat ca.pem)"), got {shown(value)}',
        )
    return value


PEM_CHECK = AfterValidator(_pem_bundle)
PemBundle = Annotated[str, PEM_CHECK]
Quantity = Annotated[
    str, _allowed(QUANTITY, "a Kubernetes quantity > 0 such as 10Gi"), AfterValidator(_positive)
]
DnsLabel = Annotated[str, _allowed(DNS_LABEL, "a DNS label (a-z, 0-9, '-', at most 63)")]
PriorityClassName = Annotated[
    str,
    _allowed(
        f"^$|{PRIORITY_CLASS}",
        "a PriorityClass of the cluster (DNS labels joined by '.'), or empty for its default",
    ),
]
ServiceName = Annotated[
    str,
    _allowed(
        DNS_1035_LABEL,
        "a DNS-1035 label (a-z, 0-9, '-', at most 63, starting with a letter: Volcano names "
        "a Service after the job)",
    ),
]
PoolName = Annotated[
    str, _allowed(f"^$|{DNS_LABEL}", "a node pool name (a DNS label), or empty for any node")
]
DateHour = Annotated[str, _allowed(DATE_HOUR, "a date-hour YYYYMMDD/HH")]
# A path in HDFS or the bucket that becomes part of a URI: no spaces, no '..' segment.
DATA_PATH = r"^(/([^/\s.]|\.[^/\s.]|\.\.[^/\s])[^/\s]*)+/?$|^/$"
DATA_PATH_TEXT = "an absolute path without spaces, '..' or control characters"
DataPath = Annotated[str, _allowed(DATA_PATH, DATA_PATH_TEXT)]
PinnedImage = Annotated[
    str,
    _allowed(IMAGE, "an image with a pinned tag (not latest) or digest"),
    AfterValidator(_pinned),
]
# Optional: the pattern and its text on the field, where the error message looks for them.
ImageDigest = Annotated[str | None, _allowed(DIGEST, "a digest sha256:<64 hex digits>")]
PinnedTag = Annotated[
    str, _allowed(TAG, "a pinned image tag (not latest)"), AfterValidator(_pinned)
]


MAX_SHOWN = 100  # characters of a bad value that a problem quotes


def shown(value: Any) -> str:
    """A value as a problem quotes it: JSON, cut to a line's worth (a hostile value may be
    megabytes)."""
    text = json.dumps(value, default=str)
    if len(text) <= MAX_SHOWN:
        return text
    return f"{text[: MAX_SHOWN - 20]}... ({len(text)} characters)"


class Problem(ValueError):
    """A problem found by a validator, on `key` (a dotted path relative to the model).

    `reads` are the other keys (relative paths too) the check looked at: when one of them
    had a problem of its own, this one is not reported (it may not hold for the value the
    user meant)."""

    def __init__(self, key: str, message: str, reads: tuple[str, ...] = ()) -> None:
        super().__init__(f"{key} {message}")
        self.key = key
        self.message = message
        self.reads = reads


class Problems(ValueError):
    """Every problem a model's checks found (`checks`), reported together."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(problem) for problem in problems))
        self.problems = problems


def checks(method: Callable[[_M], Iterator[Problem]]) -> Any:
    """A model validator that runs every check of `method` (a generator of Problems) and
    raises them all at once."""

    def validate(self: _M) -> _M:
        found = list(method(self))
        if found:
            raise Problems(found)
        return self

    return model_validator(mode="after")(validate)


_M = TypeVar("_M", bound=BaseModel)


class Section(BaseModel):
    """Every config object: unknown keys are errors (a typo must not be silently ignored),
    and scalars are read strictly (`_strict_scalar`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None:
            return value
        field = cls.model_fields[info.field_name]
        if PEM_CHECK in field.metadata:
            return value  # lines are what a PEM bundle is: its own check reads it
        return _strict_scalar(field.annotation, value)


# Pulumi hands every top-level value to the program as a string ("4", "0.5", "true").
# Pydantic's lax parsing would also take "4.0", "1_0", " 4", "+4" and true as the integer
# 4 (or 10, or 1), "yes" and "1" as true: a typo then becomes a value nobody wrote.
INTEGER_TEXT = re.compile(r"-?[0-9]+")
NUMBER_TEXT = re.compile(r"-?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")
BOOLEAN_TEXT = {"true": True, "True": True, "false": False, "False": False}
# Spaces around a value, or a control character in it, are a paste accident, never meant.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _strict_scalar(annotation: Any, value: Any) -> Any:
    """`value` for a field of type `annotation`, or a PydanticCustomError of the kind
    load_config describes (int_parsing: "must be an integer ...")."""
    if annotation is bool:
        if isinstance(value, str) and value in BOOLEAN_TEXT:
            return BOOLEAN_TEXT[value]
        if not isinstance(value, bool):
            raise PydanticCustomError("bool_parsing", "not a boolean")
    elif annotation is int:
        integral = isinstance(value, int) and not isinstance(value, bool)
        if not (integral or (isinstance(value, str) and INTEGER_TEXT.fullmatch(value))):
            raise PydanticCustomError("int_parsing", "not an integer")
    elif annotation is float:
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not (numeric or (isinstance(value, str) and NUMBER_TEXT.fullmatch(value))):
            raise PydanticCustomError("float_parsing", "not a number")
    elif isinstance(value, str) and (value != value.strip() or CONTROL.search(value)):
        raise PydanticCustomError("string_spaces", "spaces around it or a control character")
    return value


class Cloud(StrEnum):
    EXISTING = "existing"
    BAIDU = "baidu"
    HUAWEI = "huawei"
    AWS = "aws"


@dataclass(frozen=True)
class CloudTraits:
    """What a stack on one cloud can do: the config's checks (StackConfig._check_cloud)
    and the program (infra/clusters.py, infra/preflight.py) read this, never the cloud's
    name."""

    creates_cluster: bool  # the stack makes its cluster, registry and bucket (else: exists)
    required: tuple[str, ...]  # keys of cluster.<cloud> without a default
    managed_volcano: bool  # volcano.managed can hold: the cluster brings Volcano itself
    # Its LoadBalancer passes client addresses on to the pods (source_ranges can work).
    keeps_client_address: bool
    # The bucket it makes is reached as one role per workload (no keys at all).
    workload_identity: bool
    # Where its API servers listen (a pod's policy sees that port, after the `kubernetes`
    # Service's translation); () for a cluster that exists: looked up in it (preflight).
    api_server_ports: tuple[int, ...] = ()


CLOUD_TRAITS: dict[Cloud, CloudTraits] = {
    # Whatever the cluster is: Volcano may be installed already (volcano.managed).
    Cloud.EXISTING: CloudTraits(
        creates_cluster=False,
        required=(),
        managed_volcano=True,
        keeps_client_address=True,
        workload_identity=False,
    ),
    # EKS: its NLBs keep client addresses; EKS Pod Identity gives each workload a role.
    Cloud.AWS: CloudTraits(
        creates_cluster=True,
        required=("region",),
        managed_volcano=False,
        keeps_client_address=True,
        workload_identity=True,
        api_server_ports=(443,),
    ),
    # Huawei CCE: Volcano is a managed add-on; ELB does not pass client addresses on.
    Cloud.HUAWEI: CloudTraits(
        creates_cluster=True,
        required=("region", "key_pair"),
        managed_volcano=True,
        keeps_client_address=False,
        workload_identity=False,
        api_server_ports=(5443,),
    ),
    # Baidu CCE: BLB does not pass client addresses on.
    Cloud.BAIDU: CloudTraits(
        creates_cluster=True,
        required=("region", "vpc_id", "subnet_id", "ssh_key_id", "ccr_instance_id"),
        managed_volcano=False,
        keeps_client_address=False,
        workload_identity=False,
        api_server_ports=(6443,),
    ),
}


# Instance types as each cloud spells them (checked before anything is created).
AWS_INSTANCE = r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$"
HUAWEI_FLAVOR = r"^[a-z][a-z0-9]*\.[a-z0-9]+\.[0-9]+$"
BAIDU_SPEC = r"^bcc\.[a-z0-9]+\.c[0-9]+m[0-9]+$"


class NodePool(Section):
    """A group of identical worker nodes; the cloud scales it between min and max."""

    name: DnsLabel = Field("cpu", description="pool name (nodes get label elasticctr.io/pool)")
    instance_type: str = Field("", description="instance type")
    min_nodes: int = Field(1, ge=0, le=1000, description="fewest nodes")
    desired_nodes: int = Field(2, ge=0, le=1000, description="nodes to start with")
    max_nodes: int = Field(4, ge=1, le=1000, description="most nodes")
    disk_gb: int = Field(100, ge=20, le=2000, description="data disk per node, GiB")

    @checks
    def _counts(self) -> Iterator[Problem]:
        if self.min_nodes > self.max_nodes:
            yield Problem(
                "max_nodes",
                f"must be >= min_nodes ({self.min_nodes}), got {self.max_nodes}",
                reads=("min_nodes",),
            )
        elif not self.min_nodes <= self.desired_nodes <= self.max_nodes:
            yield Problem(
                "desired_nodes",
                f"must be from min_nodes ({self.min_nodes}) to max_nodes ({self.max_nodes}), "
                f"got {self.desired_nodes}",
                reads=("min_nodes", "max_nodes"),
            )


class AwsNodePool(NodePool):
    instance_type: Annotated[
        str, _allowed(AWS_INSTANCE, "an EC2 instance type such as m6i.2xlarge")
    ] = Field("m6i.2xlarge", description="EC2 instance type")


class HuaweiNodePool(NodePool):
    instance_type: Annotated[str, _allowed(HUAWEI_FLAVOR, "an ECS flavor such as c7.2xlarge.4")] = (
        Field("c7.2xlarge.4", description="ECS flavor")
    )


class BaiduNodePool(NodePool):
    instance_type: Annotated[str, _allowed(BAIDU_SPEC, "a BCC spec such as bcc.g5.c8m32")] = Field(
        "bcc.g5.c8m32", description="BCC machine spec"
    )


def _unique_pools(pools: list[Any]) -> list[Any]:
    names = [pool.name for pool in pools]
    repeated = [
        Problem(
            f"{index}.name",
            f"must be unique among node pools, got {shown(name)}",
            reads=(f"{names.index(name)}.name",),
        )
        for index, name in enumerate(names)
        if name in names[:index]
    ]
    if repeated:
        raise Problems(repeated)
    return pools


class AwsConfig(Section):
    """`cloud: aws`: an EKS cluster with managed node groups, S3 and ECR."""

    region: Annotated[str, _allowed(r"^([a-z]{2}(-gov)?-[a-z]+-[0-9])?$", "an AWS region")] = Field(
        "", description="AWS region, e.g. us-west-2 (required for cloud aws)"
    )
    kubernetes_version: Annotated[str, _allowed(r"^1\.[0-9]+$", "a version such as 1.33")] = Field(
        "1.33", description="EKS Kubernetes version"
    )
    subnet_ids: list[Annotated[str, _allowed(r"^subnet-[0-9a-f]+$", "a subnet id")]] = Field(
        default_factory=list, description="cluster subnets; empty = the region's default VPC"
    )
    node_pools: Annotated[list[AwsNodePool], AfterValidator(_unique_pools)] = Field(
        default_factory=lambda: [AwsNodePool()], min_length=1, description="managed node groups"
    )


class HuaweiConfig(Section):
    """`cloud: huawei`: a CCE cluster with node pools, OBS and SWR."""

    region: Annotated[
        str, _allowed(r"^([a-z]{2}-[a-z]+-[0-9]+)?$", "a Huawei Cloud region such as cn-north-4")
    ] = Field("", description="Huawei Cloud region, e.g. cn-north-4 (required for cloud huawei)")
    kubernetes_version: Annotated[str, _allowed(r"^v1\.[0-9]+$", "a version such as v1.31")] = (
        Field("v1.31", description="CCE cluster version")
    )
    cluster_flavor: Annotated[
        str,
        _allowed(r"^cce\.s[12]\.(small|medium|large|xlarge)$", "a CCE flavor such as cce.s2.small"),
    ] = Field("cce.s2.small", description="control plane size (s1 single, s2 HA)")
    key_pair: Annotated[
        str, _allowed(r"^([A-Za-z0-9_-]{1,64})?$", "a key pair name (A-Z, a-z, 0-9, '_', '-')")
    ] = Field("", description="KPS key pair for node login (required for cloud huawei)")
    node_pools: Annotated[list[HuaweiNodePool], AfterValidator(_unique_pools)] = Field(
        default_factory=lambda: [HuaweiNodePool()], min_length=1, description="CCE node pools"
    )


class BaiduConfig(Section):
    """`cloud: baidu`: a CCE v2 cluster with instance groups, BOS and a CCR project."""

    region: Annotated[str, _allowed(r"^([a-z]{2,4})?$", "a Baidu Cloud region such as bj")] = Field(
        "", description="Baidu Cloud region, e.g. bj (required for cloud baidu)"
    )
    kubernetes_version: Annotated[
        str, _allowed(r"^1\.[0-9]+\.[0-9]+$", "a version such as 1.30.1")
    ] = Field("1.30.1", description="CCE Kubernetes version")
    vpc_id: Annotated[str, _allowed(r"^(vpc-[a-z0-9]+)?$", "a VPC id such as vpc-a1b2")] = Field(
        "", description="VPC of the cluster (required for cloud baidu)"
    )
    subnet_id: Annotated[str, _allowed(r"^(sbn-[a-z0-9]+)?$", "a subnet id such as sbn-a1b2")] = (
        Field("", description="subnet of nodes and API server (required for cloud baidu)")
    )
    ssh_key_id: Annotated[str, _allowed(r"^(k-[A-Za-z0-9]+)?$", "a key pair id such as k-a1b2")] = (
        Field("", description="BCC key pair for node login (required for cloud baidu)")
    )
    ccr_instance_id: Annotated[
        str, _allowed(r"^(ccr-[a-z0-9]+)?$", "a CCR instance id such as ccr-a1b2")
    ] = Field("", description="CCR enterprise instance for images (required for cloud baidu)")
    master_flavor: Literal["l50", "l200", "l500", "l1000", "l3000", "l5000"] = Field(
        "l50", description="managed control plane size (nodes it serves)"
    )
    create_timeout_minutes: int = Field(
        60, ge=5, le=240, description="how long create waits for the cluster and nodes"
    )
    node_pools: Annotated[list[BaiduNodePool], AfterValidator(_unique_pools)] = Field(
        default_factory=lambda: [BaiduNodePool()], min_length=1, description="CCE instance groups"
    )


class ClusterConfig(Section):
    """Where the Kubernetes cluster comes from. `cloud: existing` uses a kubeconfig; the
    clouds create one from their section."""

    kubeconfig: str = Field(
        "", description="kubeconfig file; empty = $KUBECONFIG or ~/.kube/config"
    )
    context: str = Field("", description="kubeconfig context; empty = its current context")
    render_dir: str = Field(
        "",
        description="write every manifest here instead of applying it (kubeconfig and context"
        " are then ignored; rendered Secrets are plaintext)",
    )
    skip_await: bool = Field(
        False, description="do not wait for readiness (a cluster that never runs containers)"
    )
    aws: AwsConfig = Field(default_factory=AwsConfig, description="cloud aws: EKS")
    huawei: HuaweiConfig = Field(default_factory=HuaweiConfig, description="cloud huawei: CCE")
    baidu: BaiduConfig = Field(default_factory=BaiduConfig, description="cloud baidu: CCE v2")


class VolcanoConfig(Section):
    managed: bool = Field(
        False,
        description="the cluster already runs Volcano (e.g. the CCE add-on): do not install it",
    )
    chart: Literal["repository", "go-module"] = Field(
        "repository",
        description="where the pinned chart comes from: Volcano's chart repository, or the "
        "Go module volcano.sh/volcano as tools/build-tools.sh keeps it (offline machines)",
    )
    image_registry: Annotated[
        str,
        _allowed(REGISTRY, "a registry path such as docker.io"),
    ] = Field(
        "docker.io",
        description="registry of Volcano's images (volcanosh/vc-*:v1.15.0); the local stack's "
        "are built on the machine",
    )


def _hdfs_address_ok(address: str) -> bool:
    found = re.match(r"^hdfs://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})/?$", address)
    return found is not None and 1 <= int(found.group(2)) <= 65535


class HdfsConfig(Section):
    """HDFS for training data: in the cluster, or an external namenode (the seeds' -hd)."""

    mode: Literal["in-cluster", "external", "none"] = Field(
        "in-cluster", description="in-cluster, external (address), or none (data in object storage)"
    )
    address: str = Field("", description="external namenode, hdfs://host:port (mode external)")
    datanode_port: int = Field(
        9866,
        ge=1,
        le=65535,
        description="the external datanodes' data transfer port, which pods may reach "
        "(dfs.datanode.address: 9866 on Hadoop 3, 50010 on Hadoop 2; mode external)",
    )
    datanodes: int = Field(1, ge=1, le=100, description="datanode pods (in-cluster)")
    replication: int = Field(1, ge=1, le=10, description="dfs.replication, at most datanodes")
    namenode_storage: Quantity = Field("10Gi", description="namenode volume size")
    datanode_storage: Quantity = Field("50Gi", description="volume size per datanode")
    cpu: float = Field(0.5, ge=MIN_CPU, le=64, description="CPU cores per namenode or datanode pod")
    mem: float = Field(
        1, ge=MIN_MEM, le=256, description="memory in GiB per namenode or datanode pod"
    )

    @checks
    def _check(self) -> Iterator[Problem]:
        if self.mode == "external" and not _hdfs_address_ok(self.address):
            yield Problem(
                "address",
                "must be hdfs://host:port (a host name or IP, a port from 1 to 65535) when "
                f"mode is external, got {shown(self.address)}",
                reads=("mode",),
            )
        for key, unset in (("address", ""), ("datanode_port", 9866)):
            if self.mode != "external" and getattr(self, key) != unset:
                yield Problem(
                    key,
                    f"is only for mode external, got {shown(getattr(self, key))} with "
                    f"mode {self.mode}",
                    reads=("mode",),
                )
        if self.mode == "in-cluster" and self.replication > self.datanodes:
            yield Problem(
                "replication",
                f"must be at most datanodes ({self.datanodes}), got {self.replication}",
                reads=("mode", "datanodes"),
            )


DENSE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
# model custom: a Python module name importable in the trainer image, or a .py file of the
# project (shipped to the pods in the training ConfigMap).
NETWORK_MODULE = r"^$|^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$|^[^/].*\.py$"


class DenseFeatureConfig(Section):
    """A dense feature of PaddleRec's slot format: `dim` values, tokens `<name>:<value>`."""

    name: Annotated[
        str, _allowed(DENSE_NAME, "letters, digits and _, not starting with a digit")
    ] = Field(
        "dense_feature", description="its token name (PaddleRec's Criteo data: dense_feature)"
    )
    dim: int = Field(13, ge=1, le=MAX_DENSE_DIM, description="values per line (Criteo: 13)")


def _dense_names(features: list[Any]) -> list[Any]:
    names = [feature.name for feature in features]
    problems = []
    for index, name in enumerate(names):
        if name == LABEL:
            problems.append(Problem(f"{index}.name", f"must not be {shown(LABEL)} (the label)"))
        elif names.index(name) != index:
            problems.append(
                Problem(f"{index}.name", f"must be unique among dense features, got {shown(name)}")
            )
    if problems:
        raise Problems(problems)
    return features


def _crosses(value: Any, _handler: Any) -> list[list[int]] | str:
    """training.crosses as a stack file holds it: auto, or pairs of slot ids (numbers, or
    the digit strings `pulumi config set --path` stores). Whether the slots are slot_conf's
    is checked with the file (infra/load_config.py)."""
    if value == AUTO_CROSSES:
        return AUTO_CROSSES
    if not isinstance(value, list):
        raise Problem("", f"must be a list of pairs of slot ids or auto, got {shown(value)}")
    pairs = [[_slot_id(s) for s in item] if isinstance(item, list) else item for item in value]
    problems = cross_problems(pairs)
    if problems:
        raise Problems([Problem("", problem) for problem in problems])
    return pairs


def _slot_id(value: Any) -> Any:
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return value


class DataConfig(Section):
    """Training data: hour directories DATASET_PATH/YYYYMMDD/HH with a donefile (data.config)."""

    source: Literal["hdfs", "storage"] = Field(
        "hdfs", description="read hours from HDFS or object storage"
    )
    dataset_path: DataPath = Field(
        "/train_data", description="absolute path of the hour directories"
    )
    start: DateHour = Field("20191221/00", description="first hour, YYYYMMDD/HH (START_DATE_HR)")
    end: DateHour = Field(
        "20191221/23", description="last hour, YYYYMMDD/HH (END_DATE_HR); ignored online"
    )
    # The export visits every id below sparse_dim (docs/trainer.md): a bound it can finish.
    sparse_dim: int = Field(
        HyperParameters.sparse_dim,
        ge=2,
        le=MAX_SPARSE_DIM,
        description="feasigns map to feasign % sparse_dim",
    )
    ugi: Annotated[SecretStr, AfterValidator(_ugi)] | None = Field(
        None, description="HDFS UGI 'user,password' (secret: set with --secret)"
    )
    wait_minutes: int = Field(
        int(Runner.data_wait_seconds // 60),
        ge=0,
        le=7 * 24 * 60,
        description="offline: how long a job waits for the end hour's donefile, then trains "
        "the hours that are ready",
    )
    poll_seconds: int = Field(
        int(Runner.online_poll_seconds),
        ge=1,
        le=3600,
        description="how often trainers look for a new hour's donefile",
    )
    format: DataFormat = Field(
        Runner.data_format,
        description="the lines' format: elasticctr ('<show> <click> <feasign>:<slot> ...') or "
        "paddlerec (PaddleRec's slot format, 'click:<0|1> <dense>:<value> ... <slot>:<feasign> "
        "...', which can carry dense features)",
    )
    dense_features: Annotated[list[DenseFeatureConfig], AfterValidator(_dense_names)] = Field(
        [],
        description="format paddlerec: the dense features every line carries in full, in "
        "the network's order (a line without them is a bad line)",
    )

    @checks
    def _dense_needs_slot_format(self) -> Iterator[Problem]:
        if self.dense_features and self.format != "paddlerec":
            yield Problem(
                "dense_features",
                f"need format paddlerec (ElasticCTR lines have no place for them), got format "
                f"{self.format}",
                reads=("format",),
            )

    @field_validator("start", "end")
    @classmethod
    def _real_hour(cls, value: str) -> str:
        try:
            datetime.strptime(value, "%Y%m%d/%H")
        except ValueError as err:
            raise Problem("", f"must be a real date-hour YYYYMMDD/HH, got {shown(value)}") from err
        return value


DEFAULT_REGISTRY = "docker.io/elasticctr"


class ImageTags(Section):
    trainer: PinnedTag = Field("0.1.0", description="trainer image tag")
    cube: PinnedTag = Field(
        "0.1.0", description="cube image tag (builder, server, agent, transfer)"
    )
    serving: PinnedTag = Field("0.1.0", description="serving image tag")
    mlflow: PinnedTag = Field("0.1.0", description="mlflow image tag (official image + boto3)")


class ImageDigests(Section):
    """Digests the registry gave the pushed images: pods then run `<tag>@<digest>`, which
    no push to the tag can change under a running stack."""

    trainer: ImageDigest = Field(None, description="trainer image digest")
    cube: ImageDigest = Field(None, description="cube image digest")
    serving: ImageDigest = Field(None, description="serving image digest")
    mlflow: ImageDigest = Field(None, description="mlflow image digest")


class ImagesConfig(Section):
    registry: Annotated[
        str,
        _allowed(REGISTRY, "a registry path such as docker.io/elasticctr"),
    ] = Field(
        DEFAULT_REGISTRY,
        description="registry of this project's images (cloud existing; clouds create theirs)",
    )
    tags: ImageTags = Field(default_factory=ImageTags, description="pinned tag per project image")
    digests: ImageDigests = Field(
        default_factory=ImageDigests,
        description="the pushed image's digest per project image (sha256:...), pinned with its "
        "tag; images.build pins what it pushes itself",
    )
    minio: PinnedImage = Field(
        "quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z", description="MinIO image"
    )
    hadoop: PinnedImage = Field(
        "apache/hadoop:3.4.1", description="HDFS image (namenode, datanodes)"
    )
    kafka: PinnedImage = Field(
        "apache/kafka:4.1.1", description="Kafka image (feedback.kafka.mode in-cluster)"
    )
    prometheus: PinnedImage = Field(
        "prom/prometheus:v3.16.0", description="Prometheus image (monitoring.prometheus in-cluster)"
    )
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy"
    )
    build: bool = Field(
        False,
        description="build images/* and push them to the stack's registry; false: pinned tags",
    )

    @checks
    def _digests_or_build(self) -> Iterator[Problem]:
        if self.build:
            for image, digest in self.digests.model_dump().items():
                if digest is not None:
                    yield Problem(
                        f"digests.{image}",
                        "must be unset when images.build is true (pods run the digest of the "
                        f"image it pushes), got {shown(digest)}",
                        reads=("build",),
                    )


class KeyPair(Section):
    access_key: Secret | None = Field(None, description="access key id (secret)")
    secret_key: Secret | None = Field(None, description="secret access key (secret)")

    @checks
    def _both(self) -> Iterator[Problem]:
        if (self.access_key is None) != (self.secret_key is None):
            yield Problem(
                "secret_key",
                "must be set together with access_key (both or neither)",
                reads=("access_key",),
            )

    @property
    def given(self) -> bool:
        return self.access_key is not None


class WorkloadKeys(Section):
    """A key pair per workload, each allowed only what that workload does (docs/clouds.md
    has the IAM policies); a workload without its own uses storage.access_key/secret_key."""

    training: KeyPair = Field(
        default_factory=KeyPair,
        description="trainers and pservers: write models/ and checkpoints/ (delete in "
        "checkpoints/), read the dataset when data.source is storage",
    )
    serving: KeyPair = Field(default_factory=KeyPair, description="serving: read models/")
    cube: KeyPair = Field(default_factory=KeyPair, description="cube agents: read cube/")
    cube_transfer: KeyPair = Field(
        default_factory=KeyPair, description="cube-transfer: read models/, write and delete cube/"
    )
    mlflow: KeyPair = Field(default_factory=KeyPair, description="MLflow: write and delete mlflow/")
    joiner: KeyPair = Field(
        default_factory=KeyPair,
        description="the feedback joiner: write the dataset prefix (data.source storage)",
    )

    def given(self) -> dict[str, KeyPair]:
        """The workloads with keys of their own, by workload name (cube_transfer:
        cube-transfer)."""
        return {
            name.replace("_", "-"): pair
            for name in type(self).model_fields
            if (pair := getattr(self, name)).given
        }


class StorageConfig(Section):
    """Object storage (S3 API) for models, cube shards and MLflow artifacts."""

    mode: Literal["minio", "external", "cloud"] = Field(
        "minio",
        description="minio (in the cluster), external bucket, or cloud (made by the cloud)",
    )
    bucket: Annotated[
        str,
        _allowed(
            r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", 'a bucket name (3-63 of a-z, 0-9, ".", "-")'
        ),
    ] = Field("elasticctr", description="bucket name")

    @field_validator("bucket")
    @classmethod
    def _s3_bucket_name(cls, value: str) -> str:
        # S3's naming rules beyond the characters (BOS and OBS follow the same).
        why = (
            "two adjacent periods" if ".." in value
            else "a period next to a hyphen" if ".-" in value or "-." in value
            else "the form of an IP address" if re.fullmatch(r"[0-9]+(\.[0-9]+){3}", value)
            else "a reserved prefix (xn--, sthree-)" if value.startswith(("xn--", "sthree-"))
            else "a reserved suffix (-s3alias, --ol-s3)" if value.endswith(("-s3alias", "--ol-s3"))
            else ""
        )  # fmt: skip
        if why:
            raise Problem("", f"must be a bucket name S3 accepts (not {why}), got {shown(value)}")
        return value

    endpoint: str = Field(
        "", description="S3 endpoint URL (mode external), e.g. https://s3.bj.bcebos.com"
    )
    region: Annotated[
        str, _allowed(r"^[a-z0-9][a-z0-9-]{0,62}$", "a region name such as us-east-1")
    ] = Field("us-east-1", description="S3 region (mode cloud: the cluster's region)")
    access_key: Secret | None = Field(
        None, description="access key id the pods use (secret; external, or cloud on baidu/huawei)"
    )
    secret_key: Secret | None = Field(None, description="secret access key the pods use (secret)")
    workload_keys: WorkloadKeys = Field(
        default_factory=WorkloadKeys,
        description="each workload's own key pair, limited to what it does (mode external, or "
        "cloud on baidu/huawei); a workload without uses access_key/secret_key",
    )
    size: Quantity = Field("20Gi", description="MinIO volume size")
    cpu: float = Field(0.5, ge=MIN_CPU, le=64, description="CPU cores of the MinIO pod")
    mem: float = Field(1, ge=MIN_MEM, le=256, description="memory in GiB of the MinIO pod")

    @checks
    def _check(self) -> Iterator[Problem]:
        if self.mode == "external":
            why = _endpoint_problem(self.endpoint)
            if why:
                yield Problem(
                    "endpoint",
                    "must be an http(s) URL, scheme://host[:port], when mode is external"
                    f"{f' ({why})' if self.endpoint else ''}, "
                    f"got {shown(_without_userinfo(self.endpoint))}",
                    reads=("mode",),
                )
        elif self.endpoint:
            where = "comes from the cloud" if self.mode == "cloud" else "is MinIO's own"
            yield Problem(
                "endpoint",
                f"is only for mode external ({where} in mode {self.mode}), got "
                f"{shown(self.endpoint)}",
                reads=("mode",),
            )
        if (self.access_key is None) != (self.secret_key is None):
            yield Problem(
                "secret_key",
                "must be set together with access_key (both or neither)",
                reads=("access_key",),
            )
        if self.mode == "minio" and self.access_key is not None:
            yield Problem(
                "access_key",
                "must be unset in mode minio: the stack makes MinIO's keys",
                reads=("mode",),
            )
        if self.mode == "minio" and self.workload_keys.given():
            yield Problem(
                "workload_keys",
                "must be unset in mode minio: the stack makes a MinIO user per workload, got "
                f"keys for {', '.join(self.workload_keys.given())}",
                reads=("mode",),
            )


def _without_userinfo(url: str) -> str:
    """`url` with a user and password in it replaced: a problem never quotes a secret."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@", r"\1<user:password>@", url)


def _endpoint_problem(url: str) -> str:
    """Why `url` is not an S3 endpoint the pods and their NetworkPolicy can use ("" if it is)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return "a port from 1 to 65535"
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not host:
        return "no http:// or https:// and host"
    if parts.username is not None or parts.password is not None:
        # Keys in the URL would sit in plaintext in the stack file and the pods' env.
        return "no user or password in it: set storage.access_key/secret_key with --secret"
    if port == 0:
        return "a port from 1 to 65535"
    if parts.path not in ("", "/") or parts.query or parts.fragment or url.endswith(("?", "#")):
        return "no path, query or fragment: the bucket is storage.bucket"
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?", host):
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return "a host name of a-z, 0-9, '.', '-' or an IP address"
    return ""


class MlflowConfig(Section):
    enabled: bool = Field(True, description="run the MLflow tracking server")
    storage: Quantity = Field("5Gi", description="backend store volume size")
    cpu: float = Field(0.5, ge=MIN_CPU, le=64, description="CPU cores")
    mem: float = Field(1, ge=MIN_MEM, le=256, description="memory in GiB")


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as err:
        raise ValueError(f"an address block such as 203.0.113.0/24 ({err})") from None


Cidr = Annotated[str, AfterValidator(_cidr)]


class ServingConfig(Section):
    replicas: int = Field(1, ge=1, le=100, description="minimum serving pods")
    max_replicas: int = Field(4, ge=1, le=100, description="maximum pods (HorizontalPodAutoscaler)")
    target_cpu_percent: int = Field(70, ge=10, le=100, description="HPA CPU utilisation target")
    cpu: float = Field(1, ge=MIN_CPU, le=64, description="CPU cores per pod")
    mem: float = Field(2, ge=MIN_MEM, le=256, description="memory in GiB per pod")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="how clients reach serving"
    )
    source_ranges: list[Cidr] = Field(
        default_factory=list,
        description="address blocks (CIDR) clients may connect from: the load balancer's "
        "loadBalancerSourceRanges and the pods' NetworkPolicy; empty: any address",
    )
    auth: Literal["none", "token"] = Field(
        "none",
        description="token: clients send Authorization: Bearer <token>, a secret the stack "
        "makes (stack output serving_token); none: no authentication",
    )
    node_pool: PoolName = Field(
        "", description="pods on nodes labelled elasticctr.io/pool=<name>; empty: any node"
    )
    priority_class: PriorityClassName = Field(
        "",
        description="PriorityClass of the serving pods (one the cluster has); empty: its default",
    )

    @checks
    def _check(self) -> Iterator[Problem]:
        if self.max_replicas < self.replicas:
            yield Problem(
                "max_replicas",
                f"must be >= replicas ({self.replicas}), got {self.max_replicas}",
                reads=("replicas",),
            )
        if self.service_type == "LoadBalancer" and not self.source_ranges and self.auth == "none":
            yield Problem(
                "service_type",
                "LoadBalancer is reachable from the internet: set serving.source_ranges (the "
                "address blocks clients connect from) or serving.auth token, or both, "
                'got "LoadBalancer" with neither',
                reads=("source_ranges", "auth"),
            )


class CubeConfig(Section):
    """CubeArgs (components/cube.py) field for field; cube.conf's defaults are CubeConf's."""

    replicas: int = Field(
        2, ge=1, le=10, description="cube-servers per shard (cube.conf dup); 1 only for dev"
    )
    timeout_ms: int = Field(
        CubeConf.timeout_ms,
        ge=10,
        le=60000,
        description="one lookup of serving, retries included (ms)",
    )
    retry: int = Field(
        CubeConf.retry, ge=0, le=10, description="retries of a lookup on another replica"
    )
    backup_request_ms: int = Field(
        CubeConf.backup_request_ms,
        ge=0,
        le=60000,
        description="hedged request to another replica after (ms); 0: off",
    )
    load_balancer: LoadBalancer = Field(
        CubeConf.load_balancer, description="replica choice: round robin, random, lowest latency"
    )
    # The agent gets a quarter of the CPU and an eighth of the memory (components/cube.py).
    cpu: float = Field(
        1, ge=4 * MIN_CPU, le=64, description="CPU cores per shard pod (server + agent)"
    )
    mem: float = Field(2, ge=8 * MIN_MEM, le=1024, description="memory in GiB per shard pod")
    storage: Quantity = Field("20Gi", description="shard volume size per pod")
    keep_versions: int = Field(
        CUBE_KEEP_VERSIONS, ge=2, le=100, description="versions kept for rollback"
    )
    base_every: int = Field(
        CUBE_BASE_EVERY,
        ge=1,
        le=1000,
        description="a delta version becomes a new base every this many versions (1: no deltas)",
    )
    max_chain_fraction: float = Field(
        CUBE_MAX_CHAIN_FRACTION,
        ge=0,
        le=10,
        description="...or once its chain's deltas hold more than this fraction of its base's keys",
    )
    transfer_cpu: float = Field(1, ge=MIN_CPU, le=64, description="CPU cores of cube-transfer")
    transfer_mem: float = Field(
        2,
        ge=MIN_MEM,
        le=1024,
        description="memory in GiB of cube-transfer (builds a version's shards)",
    )
    node_pool: PoolName = Field(
        "", description="shards and transfer on nodes labelled elasticctr.io/pool=<name>"
    )
    priority_class: PriorityClassName = Field(
        "",
        description="PriorityClass of the shards and the transfer (one the cluster has; a "
        "change is a new layout); empty: its default",
    )

    @checks
    def _check(self) -> Iterator[Problem]:
        if self.backup_request_ms >= self.timeout_ms:
            yield Problem(
                "backup_request_ms",
                f"must be below timeout_ms ({self.timeout_ms}), got {self.backup_request_ms}",
                reads=("timeout_ms",),
            )


class KafkaConfig(Section):
    """The stream of the feedback loop: a KRaft broker in the cluster, or an external one."""

    mode: Literal["in-cluster", "external"] = Field(
        "in-cluster", description="in-cluster: a Kafka StatefulSet; external: bootstrap_servers"
    )
    bootstrap_servers: str = Field(
        "", description="external: host:port[,host:port...] (MSK, Huawei DMS, Baidu Kafka)"
    )
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="external: how clients connect"
    )
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="external, SASL_*: the mechanism"
    )
    username: SecretStr | None = Field(None, description="external, SASL_*: user (secret)")
    password: SecretStr | None = Field(None, description="external, SASL_*: password (secret)")
    ca_cert: PemBundle = Field(
        "", description="external, SSL/SASL_SSL: PEM CA bundle (empty: the image's CAs)"
    )
    impressions_topic: str = Field(IMPRESSIONS_TOPIC, min_length=1, description="topic name")
    clicks_topic: str = Field(CLICKS_TOPIC, min_length=1, description="topic name")
    topic_partitions: int = Field(
        3, ge=1, le=1000, description="partitions of a topic the joiner creates"
    )
    retention_hours: int = Field(
        72, ge=1, le=8760, description="in-cluster: how long the broker keeps records"
    )
    storage: Quantity = Field("10Gi", description="in-cluster: the broker's volume size")
    cpu: float = Field(0.5, ge=MIN_CPU, le=64, description="in-cluster: CPU cores of the broker")
    mem: float = Field(1, ge=0.5, le=256, description="in-cluster: memory in GiB of the broker")

    @model_validator(mode="after")
    def _external(self) -> KafkaConfig:
        if self.mode == "external" and not self.bootstrap_servers:
            raise Problem("bootstrap_servers", 'must be set in mode external, got ""')
        for server in filter(None, self.bootstrap_servers.split(",")):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise Problem(
                    "bootstrap_servers",
                    f"must be host:port[,host:port...], got {json.dumps(self.bootstrap_servers)}",
                )
        if self.mode == "in-cluster" and self.bootstrap_servers:
            raise Problem("bootstrap_servers", "is for mode external")
        if self.mode == "in-cluster" and self.security_protocol != "PLAINTEXT":
            raise Problem(
                "security_protocol",
                "must be PLAINTEXT in mode in-cluster (its NetworkPolicies admit only the "
                "stack's serving and joiner)",
            )
        sasl = self.security_protocol.startswith("SASL")
        if sasl and (self.username is None or self.password is None):
            raise Problem(
                "username",
                f"and password must be set (with --secret) with {self.security_protocol}",
            )
        if not sasl and (self.username is not None or self.password is not None):
            raise Problem("username", f"and password are for SASL_*, got {self.security_protocol}")
        return self


class FeedbackConfig(Section):
    """The feedback loop (docs/feedback.md): serving logs impressions, takes clicks, the
    joiner writes labelled partitions where the trainer reads (data.dataset_path)."""

    enabled: bool = Field(False, description="log impressions, take clicks, run the joiner")
    sample_rate: float = Field(1.0, ge=0, le=1, description="share of requests logged")
    join_window: int = Field(
        600, ge=0, le=86400, description="seconds after a partition's end clicks still join it"
    )
    partition_minutes: int = Field(
        60, description="partition length: 60 (hour directories) or N dividing an hour"
    )
    buffer_records: int = Field(
        100000,
        ge=100,
        le=10_000_000,
        description="serving: records (a request's impressions, a click) held while the "
        "stream is away; past it they are dropped and counted",
    )
    compression: Literal["none", "lz4", "zstd", "gzip", "snappy"] = Field(
        "none",
        description="serving: how its producer compresses impressions and clicks (fewer "
        "bytes to the brokers and on their disks, more CPU in serving)",
    )
    joiner_cpu: float = Field(0.5, ge=MIN_CPU, le=64, description="CPU cores of the joiner")
    joiner_mem: float = Field(1, ge=MIN_MEM, le=256, description="memory in GiB of the joiner")
    priority_class: PriorityClassName = Field(
        "", description="PriorityClass of Kafka's and the joiner's pods (one the cluster has)"
    )
    kafka: KafkaConfig = Field(default_factory=KafkaConfig, description="the stream")

    @field_validator("partition_minutes")
    @classmethod
    def _divides_an_hour(cls, value: int) -> int:
        if value not in PARTITION_MINUTES:
            allowed = ", ".join(map(str, PARTITION_MINUTES))
            raise Problem("", f"must divide an hour ({allowed}), got {value}")
        return value


class MonitoringConfig(Section):
    """Who scrapes the parts' metrics and evaluates the alert rules (docs/monitoring.md)."""

    prometheus: Literal["in-cluster", "external", "off"] = Field(
        "off",
        description="in-cluster: a Prometheus of the stack scrapes every part and evaluates "
        "the alert rules; external: a Prometheus in scraper_namespace does (operator: with "
        "PodMonitor and PrometheusRule objects); off: nobody (the parts still serve /metrics)",
    )
    operator: bool = Field(
        False,
        description="external: the cluster runs the Prometheus Operator; the stack makes "
        "its PodMonitors and PrometheusRule",
    )
    scraper_namespace: DnsLabel = Field(
        "monitoring",
        description="external: the namespace of the Prometheus that scrapes the stack (its "
        "pods may reach the parts' metrics ports)",
    )
    scrape_interval: int = Field(30, ge=5, le=600, description="seconds between scrapes")
    retention: Annotated[
        str, _allowed(r"^[1-9][0-9]*(h|d|w|y)$", "a duration such as 15d (h, d, w or y)")
    ] = Field("15d", description="in-cluster: how long Prometheus keeps samples")
    storage: Quantity = Field("10Gi", description="in-cluster: Prometheus's volume size")
    cpu: float = Field(0.5, ge=MIN_CPU, le=64, description="in-cluster: CPU cores of Prometheus")
    mem: float = Field(2, ge=MIN_MEM, le=256, description="in-cluster: memory in GiB of Prometheus")
    priority_class: PriorityClassName = Field(
        "", description="in-cluster: PriorityClass of Prometheus's pod (one the cluster has)"
    )
    api_server_ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=list,
        description="in-cluster: ports Prometheus may reach the API server on; empty: the "
        "cloud's, or on an existing cluster those its `kubernetes` Service's endpoints use",
    )
    alert_for: dict[str, str] = Field(
        default_factory=dict,
        description="how long an alert's condition must hold before it fires, by alert "
        "(ElasticctrCubeShardDown: 2m); the others keep their own (docs/monitoring.md)",
    )

    @field_validator("alert_for")
    @classmethod
    def _known_alerts(cls, value: dict[str, str]) -> dict[str, str]:
        names = [rule.alert for rule in alerts.RULES]
        for name, duration in value.items():
            if name not in names:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise Problem(
                    name, f"is not an alert of the stack{hint}; allowed: {', '.join(names)}"
                )
            if not alerts.is_duration(duration):
                raise Problem(
                    name,
                    "must be a Prometheus duration such as 30s, 5m or 1h30m, got "
                    + shown(duration),
                )
        return value

    @checks
    def _check(self) -> Iterator[Problem]:
        if self.operator and self.prometheus != "external":
            yield Problem(
                "operator",
                f"is for prometheus external, got prometheus {shown(self.prometheus)}",
                reads=("prometheus",),
            )


class CanaryConfig(Section):
    """A new version first serves a share of requests beside the committed one and is
    promoted or rolled back on its online AUC from the joined feedback (docs/monitoring.md,
    "Canary"). Offline-only stacks keep the publish gate alone."""

    enabled: bool = Field(
        False, description="judge each new version on live traffic first (needs feedback)"
    )
    fraction: float = Field(
        canary.FRACTION, gt=0, lt=1, description="share of requests (by request id) it serves"
    )
    margin: float = Field(
        canary.MARGIN,
        ge=0,
        lt=0.5,
        description="online AUC it may lose against the committed version and be promoted",
    )
    confidence: float = Field(
        canary.CONFIDENCE, ge=0.5, lt=1, description="of the test that promotes or rolls back"
    )
    min_clicks: int = Field(
        canary.MIN_CLICKS,
        ge=10,
        le=10_000_000,
        description="clicked (and as many unclicked) joined impressions each version needs "
        "before a decision",
    )
    max_minutes: int = Field(
        canary.MAX_SECONDS // 60,
        ge=1,
        le=10080,
        description="a canary not decided by then is rolled back",
    )


class TrainingConfig(Section):
    """trainer.json's settings (their defaults are the contract's, elasticctr_common
    .trainer_json): each goes into trainer.json under its own name (infra/program.py,
    `trainer_settings`), but for the program's own (PROGRAM_SETTINGS)."""

    mode: Mode = Field(Runner.mode, description="offline: start..end; online: follow new hours")
    passes: int = Field(
        Runner.passes, ge=1, le=10000, description="passes over start..end (offline)"
    )
    batch_size: int = Field(
        HyperParameters.batch_size, ge=1, le=65536, description="examples per batch per trainer"
    )
    learning_rate: float = Field(
        HyperParameters.learning_rate, gt=0, le=10, description="Adam learning rate"
    )
    sparse_optimizer: SparseOptimizer | None = Field(
        HyperParameters.sparse_optimizer,
        description="the sparse table's update rule: sgd steps by the sum of an id's "
        "gradients (each example counts), adagrad by their mean over its shows in a push; "
        f"unset: {NEW_MODEL_SPARSE_OPTIMIZER} for a new model, and a model resumed from a "
        "checkpoint keeps its own",
    )
    dense_transform: DenseTransform | None = Field(
        HyperParameters.dense_transform,
        description="what the network gets of each dense feature (data.dense_features) x: "
        "none: x; signed_log1p: sign(x) * ln(1 + |x|), for counts and other heavy tails; "
        f"unset: {NEW_MODEL_DENSE_TRANSFORM} for a new model, and a model resumed from a "
        "checkpoint keeps its own",
    )
    sparse_learning_rate: float | None = Field(
        HyperParameters.sparse_learning_rate,
        gt=0,
        le=100,
        description="learning rate of the ids' own weights; unset: "
        + ", ".join(f"{name} {rates[0]:g}" for name, rates in SPARSE_RATES.items()),
    )
    embedx_learning_rate: float | None = Field(
        HyperParameters.embedx_learning_rate,
        gt=0,
        le=100,
        description="learning rate of the ids' embedding vectors; unset: sgd "
        f"{SPARSE_RATES['sgd'][1]:g}, adagrad sparse_learning_rate's",
    )
    # The row is embed_w (the id's weight) and embedding_dim - 1 embedx columns (model.py):
    # at 1 the table has no embedding vectors at all.
    embedding_dim: int = Field(
        HyperParameters.embedding_dim, ge=2, le=1024, description="sparse embedding width"
    )
    crosses: Annotated[list[list[int]] | Literal["auto"], WrapValidator(_crosses)] = Field(
        HyperParameters.crosses,
        description="pairs of slot_conf's slots, e.g. [[101, 102]]: each pair's ids crossed "
        "into one more id per example (trainer and serving form them; clients send the "
        "slots as before), for clicks that depend on the pair; auto: every pair of the "
        f"{AUTO_CROSS_SLOTS} single-hot slots with the fewest ids in the first lines, chosen "
        "when a new model starts (a resumed one keeps its own); []: none, for the cheapest "
        'serving (docs/trainer.md, "Crossed ids")',
    )
    max_bad_line_fraction: float = Field(
        Runner.max_bad_line_fraction,
        ge=0,
        le=1,
        description="a pass fails above this share of malformed lines, or of unusable data files",
    )
    model: Model = Field(
        HyperParameters.model,
        description="wide_deep: per-id weights (a logistic regression on the ids) plus the "
        "DNN, for long-tailed ids (most real logs); dnn: the seeds' CTR-DNN alone; deepfm, "
        "dcn: DeepFM, Deep & Cross; custom: your own network (network_module)",
    )
    network_module: Annotated[
        str,
        _allowed(NETWORK_MODULE, "empty, a module name (a.b.c) or a relative path to a .py file"),
    ] = Field(
        "",
        description="model custom: your network, a .py file of the project (relative to it; "
        "shipped to the pods) or a module name your trainer image holds; its build(inputs) "
        'returns the click logit (docs/trainer.md, "Your own network")',
    )
    embedx_threshold: int = Field(
        HyperParameters.embedx_threshold,
        ge=0,
        le=1_000_000,
        description="score an id needs before it gets its embedding vector (below: its "
        "per-id weight only); score = non-clicks * nonclk_coeff + clicks * click_coeff",
    )
    nonclk_coeff: float = Field(
        HyperParameters.nonclk_coeff, ge=0, le=100, description="score of a shown, unclicked id"
    )
    click_coeff: float = Field(
        HyperParameters.click_coeff, ge=0, le=100, description="score of a click"
    )
    show_click_decay_rate: float = Field(
        HyperParameters.show_click_decay_rate,
        gt=0,
        le=1,
        description="after every pass but an offline job's last, shows and clicks decay "
        "by this factor",
    )
    delete_threshold: float | None = Field(
        HyperParameters.delete_threshold,
        ge=0,
        le=1e6,
        description="after every pass but an offline job's last (and the decay), ids "
        "scoring below this are deleted: rare ids forget what one pass taught them (0: never "
        "delete); unset: 1000 offline, where passes repeat their data, 0 online, where none does",
    )
    dense_l2: float = Field(
        HyperParameters.dense_l2, ge=0, le=10, description="L2 regularisation of dense weights"
    )
    eval_path: Annotated[str, _allowed(f"^$|{DATA_PATH}", f"empty or {DATA_PATH_TEXT}")] = Field(
        "",
        description="held-out data (same source as data.dataset_path): every version is "
        "evaluated on it and gated; empty: no evaluation, no gate",
    )
    publish_margin: float = Field(
        Runner.publish_margin,
        ge=0,
        le=1,
        description="a version whose held-out AUC is below the serving version's by more than "
        "this is kept but not published",
    )
    publish_every_version: bool = Field(
        Runner.publish_every_version,
        description="publish every version that passes its check, better or not",
    )
    cpu: float = Field(
        2, ge=MIN_CPU, le=128, description="CPU cores per pserver or trainer pod (-u)"
    )
    mem: float = Field(
        4, ge=MIN_MEM, le=1024, description="memory in GiB per pserver or trainer pod (-m)"
    )
    job_name: ServiceName = Field(
        "elasticctr-train", description="Volcano Job name (pod host names derive from it)"
    )
    queue: DnsLabel = Field("default", description="Volcano queue")
    node_pool: PoolName = Field(
        "", description="pservers and trainers on nodes labelled elasticctr.io/pool=<name>"
    )
    priority_class: PriorityClassName = Field(
        "",
        description="PriorityClass of the Volcano Job and its pods (one the cluster has; a "
        "change replaces the Job); empty: its default",
    )

    @checks
    def _network_module(self) -> Iterator[Problem]:
        if self.model == "custom" and not self.network_module:
            yield Problem(
                "network_module",
                "is required with model custom (a .py file of the project or a module name)",
                reads=("model",),
            )
        if self.model != "custom" and self.network_module:
            yield Problem(
                "network_module",
                f"is only for model custom, got {shown(self.network_module)} with model "
                f"{self.model}",
                reads=("model",),
            )


# TrainingConfig's keys that are the program's (the job's pods, its queue, its pool;
# eval_path becomes runner.eval_data_uri), not trainer.json's.
PROGRAM_SETTINGS = frozenset(
    {"cpu", "mem", "job_name", "queue", "node_pool", "priority_class", "eval_path"}
)

# Keys that moved into a section: {old top-level key: its path now}. A stack file that sets
# the old key is read as if it set the new one, with a warning (infra/load_config.py), so
# that no stack breaks or changes on the upgrade.
MOVED_KEYS: dict[str, str] = {"cpu": "training.cpu", "mem": "training.mem"}


class StackConfig(Section):
    """The whole stack. Top-level keys are `elasticctr:<key>` in stacks/Pulumi.<stack>.yaml."""

    cloud: Cloud = Field(Cloud.EXISTING, description="existing, baidu, huawei or aws")
    cluster: ClusterConfig = Field(
        default_factory=ClusterConfig, description="cluster access / creation"
    )
    namespace: DnsLabel = Field("elasticctr", description="Kubernetes namespace of everything")
    create_namespace: bool = Field(
        True,
        description="create the namespace and own it (restricted pod security, default-deny "
        "ingress, deleted by destroy); false: it exists already and is used as it is, never "
        "labelled, locked down or deleted",
    )
    trainers: int = Field(2, ge=1, le=1000, description="trainer pods (-t)")
    pservers: int = Field(2, ge=1, le=100, description="parameter-server pods (-p)")
    cube_shards: int = Field(2, ge=1, le=1000, description="cube shard servers (-b)")
    slot_conf: str = Field(
        "stacks/slot.txt",
        min_length=1,
        description="slot.conf (-s): a .txt or .conf file, one slot id per line; relative to "
        "the project",
    )
    hdfs: HdfsConfig = Field(
        default_factory=HdfsConfig, description="HDFS in-cluster, or an hdfs:// address (-hd)"
    )
    data: DataConfig = Field(
        default_factory=DataConfig, description="training data (-f data.config)"
    )
    images: ImagesConfig = Field(
        default_factory=ImagesConfig, description="image registry and pinned tags"
    )
    storage: StorageConfig = Field(
        default_factory=StorageConfig, description="object storage (S3 API)"
    )
    mlflow: MlflowConfig = Field(default_factory=MlflowConfig, description="MLflow tracking server")
    serving: ServingConfig = Field(default_factory=ServingConfig, description="prediction service")
    cube: CubeConfig = Field(default_factory=CubeConfig, description="cube shard resources")
    training: TrainingConfig = Field(
        default_factory=TrainingConfig, description="training hyper-parameters"
    )
    volcano: VolcanoConfig = Field(
        default_factory=VolcanoConfig, description="Volcano installation"
    )
    feedback: FeedbackConfig = Field(
        default_factory=FeedbackConfig, description="impressions + clicks -> training data"
    )
    monitoring: MonitoringConfig = Field(
        default_factory=MonitoringConfig, description="Prometheus: scrapes and alert rules"
    )
    canary: CanaryConfig = Field(
        default_factory=CanaryConfig, description="new versions on trial on live traffic"
    )

    @field_validator("namespace")
    @classmethod
    def _not_a_system_namespace(cls, value: str) -> str:
        if value in SYSTEM_NAMESPACES or value.startswith("kube-"):
            raise Problem(
                "",
                f"must not be a system namespace ({', '.join(SYSTEM_NAMESPACES)}, kube-*): the "
                f"stack labels, locks down and deletes its namespace, got {shown(value)}",
            )
        return value

    @field_validator("hdfs", mode="before")
    @classmethod
    def _hdfs_shorthand(cls, value: Any) -> Any:
        # `pulumi config set hdfs hdfs://nn:8020` mirrors the seeds' `-hd <address>`.
        if isinstance(value, str) and value.startswith("hdfs://"):
            return {"mode": "external", "address": value}
        if value in ("in-cluster", "none"):
            return {"mode": value}
        if isinstance(value, str):
            raise Problem(
                "",
                "must be an hdfs://host:port address, in-cluster, none, or an object "
                f"(pulumi config set --path hdfs.mode ...), got {shown(value)}",
            )
        return value

    @checks
    def _cross_checks(self) -> Iterator[Problem]:
        if self.canary.enabled and not self.feedback.enabled:
            yield Problem(
                "canary.enabled",
                "needs feedback.enabled: a canary is judged on joined impressions and clicks, "
                "got canary.enabled true with feedback.enabled false",
                reads=("feedback.enabled",),
            )
        # data.end bounds an offline job only: a stack switched to online keeps its old end.
        if self.training.mode == "offline" and self.data.end < self.data.start:
            yield Problem(
                "data.end",
                f"must not be before start ({self.data.start}), got {shown(self.data.end)}",
                reads=("data.start", "training.mode"),
            )
        if self.training.mode == "online" and self.training.passes != 1:
            yield Problem(
                "training.passes",
                "must be 1 in training mode online (each new hour is trained once), "
                f"got {self.training.passes}",
                reads=("training.mode",),
            )
        job = self.training.job_name
        host = max(
            (f"{job}-pserver-{self.pservers - 1}", f"{job}-trainer-{self.trainers - 1}"), key=len
        )
        if len(host) > MAX_HOST_NAME:
            yield Problem(
                "training.job_name",
                f"must leave pod host names at most {MAX_HOST_NAME} characters (the longest "
                f"is {host}, {len(host)}), got {shown(job)} ({len(job)} characters)",
                reads=("pservers", "trainers"),
            )
        if self.storage.workload_keys.mlflow.given and not self.mlflow.enabled:
            yield Problem(
                "storage.workload_keys.mlflow",
                "is for a stack with mlflow.enabled true",
                reads=("mlflow.enabled",),
            )
        if self.data.source == "hdfs" and self.hdfs.mode == "none":
            yield Problem(
                "data.source",
                'must be "storage" when hdfs.mode is none, got "hdfs"',
                reads=("hdfs.mode",),
            )
        if self.data.source == "hdfs" and self.hdfs.mode == "external" and self.data.ugi is None:
            yield Problem(
                "data.ugi",
                "must be set (with --secret) to read an external HDFS",
                reads=("data.source", "hdfs.mode"),
            )
        yield from self._check_cloud()

    def _check_cloud(self) -> Iterator[Problem]:
        """The cloud's own section is complete, and nothing meant for another cloud is set."""
        cloud, traits = self.cloud.value, CLOUD_TRAITS[self.cloud]
        for other in (Cloud.AWS, Cloud.HUAWEI, Cloud.BAIDU):
            section = getattr(self.cluster, other.value)
            if other != self.cloud and section != type(section)():
                yield Problem(
                    f"cluster.{other.value}",
                    f"is for cloud {other.value}, got cloud {cloud}",
                    reads=("cloud",),
                )
        if self.volcano.managed and not traits.managed_volcano:
            yield Problem(
                "volcano.managed",
                f"must be false on cloud {cloud}: the cluster it creates has no Volcano add-on",
                reads=("cloud",),
            )
        if not traits.creates_cluster:
            if self.storage.mode == "cloud":
                yield Problem(
                    "storage.mode",
                    'must be minio or external with cloud existing, got "cloud"',
                    reads=("cloud",),
                )
            return
        for key in ("kubeconfig", "context", "render_dir"):
            if getattr(self.cluster, key):
                yield Problem(
                    f"cluster.{key}",
                    f"is for cloud existing: a {cloud} stack reaches the cluster it creates, "
                    f"got {shown(getattr(self.cluster, key))}",
                    reads=("cloud",),
                )
        section = getattr(self.cluster, cloud)
        pools = [pool.name for pool in section.node_pools]
        for workload in ("training", "cube", "serving"):
            wanted = getattr(self, workload).node_pool
            if wanted and wanted not in pools:
                yield Problem(
                    f"{workload}.node_pool",
                    f"must be empty or one of cluster.{cloud}.node_pools ({', '.join(pools)}), "
                    f"got {shown(wanted)}",
                    reads=("cloud", f"cluster.{cloud}.node_pools"),
                )
        for key in traits.required:
            if not getattr(section, key):
                yield Problem(
                    f"cluster.{cloud}.{key}",
                    f'must be set when cloud is {cloud}, got ""',
                    reads=("cloud",),
                )
        if self.images.registry != DEFAULT_REGISTRY:
            yield Problem(
                "images.registry",
                f"is for cloud existing: a {cloud} stack pushes to and pulls from the registry "
                f"it creates, got {shown(self.images.registry)}",
                reads=("cloud",),
            )
        serving = self.serving
        if (
            serving.source_ranges
            and serving.service_type == "LoadBalancer"
            and not traits.keeps_client_address
        ):
            yield Problem(
                "serving.source_ranges",
                f"cannot be kept by a LoadBalancer on cloud {cloud}: its default load balancer "
                "does not pass client addresses on, so the pods' NetworkPolicy would refuse "
                "every client; use serving.auth token (and the load balancer's own access "
                "control, docs/architecture.md), got " + shown(serving.source_ranges),
                reads=("cloud", "serving.service_type"),
            )
        storage = self.storage
        keys = storage.access_key is not None
        own = storage.workload_keys.given()
        if storage.mode == "cloud" and traits.workload_identity and (keys or own):
            yield Problem(
                "storage.access_key" if keys else "storage.workload_keys",
                "must not be set in mode cloud on aws: each workload reaches S3 as its own role "
                "(EKS Pod Identity)",
                reads=("cloud", "storage.mode"),
            )
        workloads = {"training", "serving", "cube", "cube-transfer"}
        workloads |= {"mlflow"} if self.mlflow.enabled else set()
        if self.feedback.enabled and self.data.source == "storage":
            workloads |= {"joiner"}
        if (
            storage.mode == "cloud"
            and not traits.workload_identity
            and not keys
            and not workloads <= own.keys()
        ):
            yield Problem(
                "storage.access_key",
                f"must be set (with --secret) in mode cloud on {cloud}: the workloads without "
                f"keys of their own ({', '.join(sorted(workloads - own.keys()))}) reach the "
                "bucket with these keys",
                reads=("cloud", "storage.mode", "storage.workload_keys", "mlflow.enabled"),
            )


# Namespaces of the cluster itself and of what the stack installs beside its own.
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", "volcano-system")


# Config keys whose values hold secrets, with the key path inside them.
SECRET_FIELDS: dict[str, tuple[str, ...]] = {
    "data": ("ugi",),
    "feedback": ("kafka.username", "kafka.password"),
    "storage": ("access_key", "secret_key", "workload_keys"),
}
