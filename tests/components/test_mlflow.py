"""MLflow: SQLite on a kept volume, artifacts proxied to the bucket, in-cluster host names allowed."""

from __future__ import annotations

from components.mlflow import Mlflow, MlflowArgs
from infra.config import MlflowConfig
from tests.support.components import STORE, env_of, run_component


def test_server_arguments_and_storage() -> None:
    graph = run_component(
        lambda t: Mlflow(
            "mlflow",
            MlflowArgs(
                target=t,
                image="r.test/mlflow:3",
                store=STORE,
                **MlflowConfig().model_dump(include={"storage", "cpu", "mem"}),
            ),
        )
    )
    container = graph.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"][
        "containers"
    ][0]
    arguments = container["args"]
    assert "--artifacts-destination=s3://test-bucket/mlflow" in arguments
    assert "--backend-store-uri=sqlite:////var/lib/elasticctr/mlflow/mlflow.db" in arguments
    hosts = (
        next(a for a in arguments if a.startswith("--allowed-hosts=")).split("=", 1)[1].split(",")
    )
    assert {"mlflow", "mlflow:5000", "mlflow.test-ns.svc.cluster.local:5000"} <= set(hosts)
    # MLflow's own check: a port-forward on any local port passes, other names do not.
    from mlflow.server.security_utils import is_allowed_host_header

    for host in ("127.0.0.1:8080", "localhost:5000", "mlflow.test-ns.svc:5000"):
        assert is_allowed_host_header(hosts, host), host
    for host in ("evil.example:5000", "10.96.0.5:5000"):
        assert not is_allowed_host_header(hosts, host), host
    assert env_of(container)["MLFLOW_S3_ENDPOINT_URL"] == STORE.endpoint
    volume = graph.one("kubernetes:core/v1:PersistentVolumeClaim")
    assert volume.retain_on_delete is True
    assert (
        graph.component_outputs("elasticctr:mlflow:Mlflow")["url"]
        == "http://mlflow.test-ns.svc.cluster.local:5000"
    )
