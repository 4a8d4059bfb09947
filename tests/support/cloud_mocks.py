"""What the clouds' providers would compute for the resources the cloud components create,
so that the program's mock runs see realistic cluster ids, registries and kubeconfigs.

Used by the harness's Mocks for every run (the dev stack creates none of these types).
"""

from __future__ import annotations

import json
from typing import Any

ACCOUNT = "123456789012"
FAKE_KUBECONFIG = json.dumps(
    {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://203.0.113.10:6443"}}],
        "users": [{"name": "u", "user": {"token": "kubeconfig-token-0001"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
)
CCR_HOST = "ccr-abc123-pub.cnc.bj.baidubce.com"
IMAGE_DIGEST = "d" * 64


def resource_outputs(typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """Outputs to add to `inputs` for a resource of type `typ` (empty for other types)."""
    if typ == "eks:index:Cluster":
        return {"kubeconfigJson": FAKE_KUBECONFIG}
    if typ == "aws:ecr/repository:Repository":
        return {
            "registryId": ACCOUNT,
            "repositoryUrl": f"{ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/{inputs.get('name')}",
        }
    if typ == "aws:iam/role:Role":
        return {"arn": f"arn:aws:iam::{ACCOUNT}:role/{name}", "name": name}
    if typ == "aws:s3/bucket:Bucket":
        return {"arn": f"arn:aws:s3:::{inputs.get('bucket')}"}
    if typ == "huaweicloud:Vpc/eip:Eip":
        return {"address": "198.51.100.7"}
    if typ == "huaweicloud:Cce/cluster:Cluster":
        return {
            "certificateClusters": [
                {"name": "internalCluster", "server": "https://192.168.0.10:5443"},
                {
                    "name": "externalClusterTLSVerify",
                    "server": "https://198.51.100.7:5443",
                    "certificateAuthorityData": "Q0EtREFUQQ==",
                },
            ],
            "certificateUsers": [
                {
                    "name": "user",
                    "clientCertificateData": "Q0VSVC1EQVRB",
                    "clientKeyData": "huawei-client-key-0001",
                }
            ],
        }
    if typ == "pulumi-python:dynamic/baidu:CceCluster":
        return {"cluster_id": "cce-abc123", "phase": "running"}
    if typ == "pulumi-python:dynamic/baidu:CceInstanceGroup":
        return {"instance_group_id": f"cce-ig-{inputs.get('name')}", "ready_replicas": 0}
    if typ == "pulumi-python:dynamic/baidu:CceKubeconfig":
        return {"kubeconfig": FAKE_KUBECONFIG}
    if typ == "pulumi-python:dynamic/baidu:CcrProject":
        return {"registry": f"{CCR_HOST}/{inputs.get('project')}"}
    if typ == "docker-build:index:Image":
        return {"ref": f"{inputs['tags'][0]}@sha256:{IMAGE_DIGEST}"}
    return {}


def call_outputs(token: str) -> dict[str, Any]:
    """Results of provider functions (invokes) the cloud components call."""
    if token == "aws:ecr/getAuthorizationToken:getAuthorizationToken":
        return {
            "userName": "AWS",
            "password": "ecr-password-0001",
            "proxyEndpoint": f"https://{ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com",
        }
    return {}
