"""The cloud cluster components on their own, under mocks: inputs checked before any child,
and the pieces that are plain functions (Huawei's kubeconfig)."""

from __future__ import annotations

import json

import pytest

from components.cluster import NodePoolSpec
from components.cluster.aws import EksCluster, EksClusterArgs
from components.cluster.baidu import BaiduCce, BaiduCceArgs
from components.cluster.huawei import HuaweiCce, HuaweiCceArgs, kubeconfig_from_certificates
from tests.support import pulumi_harness as harness

POOL = NodePoolSpec("cpu", "c7.2xlarge.4", 1, 2, 3, 100)


def test_huawei_kubeconfig_prefers_the_verified_public_endpoint() -> None:
    clusters = [
        {"name": "internalCluster", "server": "https://192.168.0.5:5443"},
        {"name": "externalCluster", "server": "https://203.0.113.9:5443"},
        {
            "name": "externalClusterTLSVerify",
            "server": "https://203.0.113.9:5443",
            "certificate_authority_data": "Q0E=",
        },
    ]
    users = [{"name": "user", "client_certificate_data": "Y2VydA==", "client_key_data": "a2V5"}]
    config = json.loads(kubeconfig_from_certificates("c1", clusters, users))
    assert config["clusters"][0]["cluster"] == {
        "server": "https://203.0.113.9:5443",
        "certificate-authority-data": "Q0E=",
    }
    assert config["users"][0]["user"] == {
        "client-certificate-data": "Y2VydA==",
        "client-key-data": "a2V5",
    }
    assert config["current-context"] == "c1"


def test_huawei_kubeconfig_without_a_public_endpoint_is_an_error() -> None:
    # Never an empty kubeconfig: the provider would use the user's current context instead.
    internal = [{"name": "internalCluster", "server": "https://192.168.0.5:5443"}]
    with pytest.raises(
        ValueError, match=r"c1 has no public endpoint \(certificates for: internalCluster\)"
    ):
        kubeconfig_from_certificates("c1", internal, [{"name": "user"}])
    with pytest.raises(ValueError, match="certificates for: none"):
        kubeconfig_from_certificates("c1", None, None)


def test_huawei_kubeconfig_without_a_ca_skips_verification_explicitly() -> None:
    clusters = [{"name": "externalCluster", "server": "https://203.0.113.9:5443"}]
    config = json.loads(kubeconfig_from_certificates("c1", clusters, [{"name": "user"}]))
    assert config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] is True


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: EksCluster("c", EksClusterArgs("n", "us-west-2", "1.33", node_pools=())),
            "c: at least one node pool is required",
        ),
        (
            lambda: HuaweiCce(
                "c",
                HuaweiCceArgs("n", "cn-north-4", "v1.31", "cce.s2.small", "kp", (), bucket="b"),
            ),
            "c: at least one node pool is required",
        ),
        (
            lambda: BaiduCce(
                "c",
                BaiduCceArgs(
                    "n", "bj", "1.30.1", "vpc-1", "sbn-1", "k-1", "ccr-1", "l50", (), 600.0
                ),
            ),
            "c: at least one node pool is required",
        ),
    ],
)
def test_bad_args_fail_before_any_child(build: object, message: str) -> None:
    graph = harness.Graph()

    def program() -> None:
        build()  # type: ignore[operator]

    with pytest.raises(ValueError, match=message):
        harness.run(program, {}, graph=graph)
    assert graph.resources == []


def test_aws_without_a_bucket_makes_no_bucket_and_no_pod_identity_role() -> None:
    def program() -> None:
        EksCluster(
            "c",
            EksClusterArgs(
                "n", "us-west-2", "1.33", (NodePoolSpec("cpu", "m6i.large", 1, 1, 1, 50),)
            ),
        )

    graph = harness.run(program, {})
    assert not graph.of_type("aws:s3/bucket:Bucket")
    assert not graph.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    outputs = graph.one("elasticctr:cluster:EksCluster").outputs
    assert outputs == {
        "cluster_name": "n",
        "image_registry": "123456789012.dkr.ecr.us-west-2.amazonaws.com/elasticctr",
    }
