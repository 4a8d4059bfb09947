"""The stack config: one pydantic model, the single source of keys, types and defaults.

Pulumi.yaml's `config:` section and the README's config reference are generated from
this module (tools/gen_config.py); a test fails when they drift.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

# Kubernetes quantities as the API accepts them ("10Gi", "500Mi", "1T").
QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
# Image references with a tag or a digest; "latest" is refused by _pinned (no look-ahead here).
IMAGE = r"^[a-z0-9][a-z0-9./_-]*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}|@sha256:[a-f0-9]{64})$"
TAG = r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DATE_HOUR = r"^[0-9]{8}/[0-9]{2}$"


def _allowed(pattern: str, text: str) -> Any:
    """A string constrained by `pattern`; `text` says what is allowed in error messages."""
    return Field(pattern=pattern, json_schema_extra={"allowed": text})


def _pinned(reference: str) -> str:
    if reference == "latest" or reference.endswith(":latest"):
        raise ValueError("latest is not a pinned tag")
    return reference


Quantity = Annotated[str, _allowed(QUANTITY, "a Kubernetes quantity such as 10Gi")]
DnsLabel = Annotated[str, _allowed(DNS_LABEL, "a DNS label (a-z, 0-9, '-', at most 63)")]
DateHour = Annotated[str, _allowed(DATE_HOUR, "a date-hour YYYYMMDD/HH")]
PinnedImage = Annotated[
    str,
    _allowed(IMAGE, "an image with a pinned tag (not latest) or digest"),
    AfterValidator(_pinned),
]
PinnedTag = Annotated[
    str, _allowed(TAG, "a pinned image tag (not latest)"), AfterValidator(_pinned)
]


class Problem(ValueError):
    """A problem found by a validator, on `key` (a dotted path relative to the model)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key} {message}")
        self.key = key
        self.message = message


class Section(BaseModel):
    """Every config object: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Cloud(StrEnum):
    EXISTING = "existing"
    BAIDU = "baidu"
    HUAWEI = "huawei"
    AWS = "aws"


class ClusterConfig(Section):
    """Where the Kubernetes cluster comes from. `cloud: existing` uses a kubeconfig."""

    kubeconfig: str = Field(
        "", description="kubeconfig file; empty = $KUBECONFIG or ~/.kube/config"
    )
    context: str = Field("", description="kubeconfig context; empty = its current context")
    render_dir: str = Field(
        "", description="write every manifest under this directory instead of applying it"
    )
    skip_await: bool = Field(
        False, description="do not wait for readiness (a cluster that never runs containers)"
    )


class VolcanoConfig(Section):
    managed: bool = Field(
        False,
        description="the cluster already runs Volcano (e.g. the CCE add-on): do not install it",
    )


class HdfsConfig(Section):
    """HDFS for training data: in the cluster, or an external namenode (the seeds' -hd)."""

    mode: Literal["in-cluster", "external", "none"] = Field(
        "in-cluster", description="in-cluster, external (address), or none (data in object storage)"
    )
    address: str = Field("", description="external namenode, hdfs://host:port (mode external)")
    datanodes: int = Field(1, ge=1, le=100, description="datanode pods (in-cluster)")
    replication: int = Field(1, ge=1, le=10, description="dfs.replication, at most datanodes")
    namenode_storage: Quantity = Field("10Gi", description="namenode volume size")
    datanode_storage: Quantity = Field("50Gi", description="volume size per datanode")

    @model_validator(mode="after")
    def _check(self) -> HdfsConfig:
        if self.mode == "external" and not re.match(r"^hdfs://[^/:]+:[0-9]+/?$", self.address):
            raise Problem(
                "address",
                f"must be hdfs://host:port when mode is external, got {json.dumps(self.address)}",
            )
        if self.mode == "in-cluster" and self.address:
            raise Problem(
                "address",
                f"is only for mode external, got {json.dumps(self.address)} with mode in-cluster",
            )
        if self.mode == "in-cluster" and self.replication > self.datanodes:
            raise Problem(
                "replication",
                f"must be at most datanodes ({self.datanodes}), got {self.replication}",
            )
        return self


class DataConfig(Section):
    """Training data: hour directories DATASET_PATH/YYYYMMDD/HH with a donefile (data.config)."""

    source: Literal["hdfs", "storage"] = Field(
        "hdfs", description="read hours from HDFS or object storage"
    )
    dataset_path: Annotated[str, _allowed(r"^/.*", "an absolute path (starting with /)")] = Field(
        "/train_data", description="absolute path of the hour directories"
    )
    start: DateHour = Field("20191221/00", description="first hour, YYYYMMDD/HH (START_DATE_HR)")
    end: DateHour = Field(
        "20191221/23", description="last hour, YYYYMMDD/HH (END_DATE_HR); ignored online"
    )
    sparse_dim: int = Field(
        1000001, ge=2, le=2**63 - 1, description="feasigns map to feasign % sparse_dim"
    )
    ugi: SecretStr | None = Field(
        None, description="HDFS UGI 'user,password' (secret: set with --secret)"
    )

    @field_validator("start", "end")
    @classmethod
    def _real_hour(cls, value: str) -> str:
        try:
            datetime.strptime(value, "%Y%m%d/%H")
        except ValueError as err:
            raise Problem(
                "", f"must be a real date-hour YYYYMMDD/HH, got {json.dumps(value)}"
            ) from err
        return value

    @model_validator(mode="after")
    def _ordered(self) -> DataConfig:
        if self.end < self.start:
            raise Problem(
                "end", f"must not be before start ({self.start}), got {json.dumps(self.end)}"
            )
        return self


class ImageTags(Section):
    trainer: PinnedTag = Field("0.1.0", description="trainer image tag")
    cube: PinnedTag = Field(
        "0.1.0", description="cube image tag (builder, server, agent, transfer)"
    )
    serving: PinnedTag = Field("0.1.0", description="serving image tag")
    mlflow: PinnedTag = Field("0.1.0", description="mlflow image tag (official image + boto3)")


class ImagesConfig(Section):
    registry: Annotated[
        str,
        _allowed(
            r"^[a-z0-9][a-z0-9.:/_-]*[a-z0-9]$", "a registry path such as docker.io/elasticctr"
        ),
    ] = Field("docker.io/elasticctr", description="registry of this project's images")
    tags: ImageTags = Field(default_factory=ImageTags, description="pinned tag per project image")
    minio: PinnedImage = Field(
        "quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z", description="MinIO image"
    )
    hadoop: PinnedImage = Field(
        "apache/hadoop:3.4.1", description="HDFS image (namenode, datanodes)"
    )
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy"
    )

    def image(self, name: Literal["trainer", "cube", "serving", "mlflow"]) -> str:
        return f"{self.registry}/{name}:{getattr(self.tags, name)}"


class StorageConfig(Section):
    """Object storage (S3 API) for models, cube shards and MLflow artifacts."""

    mode: Literal["minio", "external"] = Field(
        "minio", description="minio (in the cluster) or external bucket"
    )
    bucket: Annotated[
        str,
        _allowed(
            r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", 'a bucket name (3-63 of a-z, 0-9, ".", "-")'
        ),
    ] = Field("elasticctr", description="bucket name")
    endpoint: str = Field(
        "", description="S3 endpoint URL (mode external), e.g. https://s3.bj.bcebos.com"
    )
    region: str = Field("us-east-1", min_length=1, description="S3 region")
    access_key: SecretStr | None = Field(None, description="access key id (secret; external mode)")
    secret_key: SecretStr | None = Field(
        None, description="secret access key (secret; external mode)"
    )
    size: Quantity = Field("20Gi", description="MinIO volume size")

    @model_validator(mode="after")
    def _check(self) -> StorageConfig:
        if self.mode == "external" and not re.match(r"^https?://[^/]+", self.endpoint):
            raise Problem(
                "endpoint",
                f"must be an http(s) URL when mode is external, got {json.dumps(self.endpoint)}",
            )
        if (self.access_key is None) != (self.secret_key is None):
            raise Problem("secret_key", "must be set together with access_key (both or neither)")
        return self


class MlflowConfig(Section):
    enabled: bool = Field(True, description="run the MLflow tracking server")
    storage: Quantity = Field("5Gi", description="backend store volume size")
    cpu: float = Field(0.5, gt=0, le=64, description="CPU cores")
    mem: float = Field(1, gt=0, le=256, description="memory in GiB")


class ServingConfig(Section):
    replicas: int = Field(1, ge=1, le=100, description="minimum serving pods")
    max_replicas: int = Field(4, ge=1, le=100, description="maximum pods (HorizontalPodAutoscaler)")
    target_cpu_percent: int = Field(70, ge=10, le=100, description="HPA CPU utilisation target")
    cpu: float = Field(1, gt=0, le=64, description="CPU cores per pod")
    mem: float = Field(2, gt=0, le=256, description="memory in GiB per pod")
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = Field(
        "ClusterIP", description="how clients reach serving"
    )

    @model_validator(mode="after")
    def _check(self) -> ServingConfig:
        if self.max_replicas < self.replicas:
            raise Problem(
                "max_replicas", f"must be >= replicas ({self.replicas}), got {self.max_replicas}"
            )
        return self


class CubeConfig(Section):
    cpu: float = Field(1, gt=0, le=64, description="CPU cores per shard pod (server + agent)")
    mem: float = Field(2, gt=0, le=1024, description="memory in GiB per shard pod")
    storage: Quantity = Field("20Gi", description="shard volume size per pod")
    keep_versions: int = Field(3, ge=2, le=100, description="versions kept for rollback")


class TrainingConfig(Section):
    mode: Literal["offline", "online"] = Field(
        "offline", description="offline: start..end; online: follow new hours"
    )
    passes: int = Field(1, ge=1, le=10000, description="passes over start..end (offline)")
    batch_size: int = Field(32, ge=1, le=65536, description="examples per batch per trainer")
    learning_rate: float = Field(0.0001, gt=0, le=10, description="Adam learning rate")
    embedding_dim: int = Field(9, ge=1, le=1024, description="sparse embedding width")
    max_bad_line_fraction: float = Field(
        0.01, ge=0, le=1, description="a pass fails above this share of bad lines"
    )
    job_name: DnsLabel = Field(
        "elasticctr-train", description="Volcano Job name (pod host names derive from it)"
    )
    queue: DnsLabel = Field("default", description="Volcano queue")


class StackConfig(Section):
    """The whole stack. Top-level keys are `elasticctr:<key>` in stacks/Pulumi.<stack>.yaml."""

    cloud: Cloud = Field(Cloud.EXISTING, description="existing, baidu, huawei or aws")
    cluster: ClusterConfig = Field(
        default_factory=ClusterConfig, description="cluster access / creation"
    )
    namespace: DnsLabel = Field("elasticctr", description="Kubernetes namespace of everything")
    trainers: int = Field(2, ge=1, le=1000, description="trainer pods (-t)")
    pservers: int = Field(2, ge=1, le=100, description="parameter-server pods (-p)")
    cpu: float = Field(2, gt=0, le=128, description="CPU cores per training pod (-u)")
    mem: float = Field(4, gt=0, le=1024, description="memory in GiB per training pod (-m)")
    cube_shards: int = Field(2, ge=1, le=1000, description="cube shard servers (-b)")
    slot_conf: str = Field(
        "stacks/slot.txt",
        min_length=1,
        description="slot.conf (-s): a .txt, one slot id per line; relative to the project",
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

    @field_validator("hdfs", mode="before")
    @classmethod
    def _hdfs_shorthand(cls, value: Any) -> Any:
        # `pulumi config set hdfs hdfs://nn:8020` mirrors the seeds' `-hd <address>`.
        if isinstance(value, str) and value.startswith("hdfs://"):
            return {"mode": "external", "address": value}
        if value == "in-cluster":
            return {"mode": "in-cluster"}
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> StackConfig:
        if self.data.source == "hdfs" and self.hdfs.mode == "none":
            raise Problem("data.source", 'must be "storage" when hdfs.mode is none, got "hdfs"')
        if self.data.source == "hdfs" and self.hdfs.mode == "external" and self.data.ugi is None:
            raise Problem("data.ugi", "must be set (with --secret) to read an external HDFS")
        return self


# Config keys whose values hold secrets, with the key path inside them.
SECRET_FIELDS: dict[str, tuple[str, ...]] = {
    "data": ("ugi",),
    "storage": ("access_key", "secret_key"),
}
