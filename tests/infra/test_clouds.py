"""The cloud stacks under mocks: each creates its cloud's cluster, node pools, bucket and
registry; the Kubernetes provider hangs off that cluster; everything Kubernetes-side is the
graph an existing cluster gets; and per-cloud config errors stop the program before any
resource exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from infra import images as infra_images
from infra import outputs
from infra.load_config import ConfigError
from infra.program import main
from tests.support import cloud_mocks
from tests.support import pulumi_harness as harness
from tests.support.stacks import STACKS, config_with_secrets, graph, run_stack

CLOUD_STACKS = ("aws-prod", "huawei-prod", "baidu-prod")
CLUSTER_TYPE = {
    "aws-prod": "elasticctr:cluster:EksCluster",
    "huawei-prod": "elasticctr:cluster:HuaweiCce",
    "baidu-prod": "elasticctr:cluster:BaiduCce",
}
REGISTRY = {
    "aws-prod": f"{cloud_mocks.ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/elasticctr",
    "huawei-prod": "swr.cn-north-4.myhuaweicloud.com/elasticctr",
    "baidu-prod": f"{cloud_mocks.CCR_HOST}/elasticctr",
}
ENDPOINT = {
    "aws-prod": "https://s3.us-west-2.amazonaws.com",
    "huawei-prod": "https://obs.cn-north-4.myhuaweicloud.com",
    "baidu-prod": "https://s3.bj.bcebos.com",
}
# Credentials the cloud mocks hand out: they must only ever appear inside secrets.
CLOUD_SECRETS = ("kubeconfig-token-0001", "ecr-password-0001", "huawei-client-key-0001")


def cloud_part(g: harness.Graph, stack: str) -> list[harness.Registered]:
    """The cluster component and everything under it."""
    (root,) = g.of_type(CLUSTER_TYPE[stack])
    inside = {root.urn}
    for resource in g.resources:  # registration order: parents come first
        if resource.parent in inside:
            inside.add(resource.urn)
    return [r for r in g.resources if r.urn in inside]


def kubernetes_provider(g: harness.Graph) -> harness.Registered:
    (provider,) = g.of_type("pulumi:providers:kubernetes")
    return provider


def depends_on(g: harness.Graph, resource: harness.Registered, target: str) -> bool:
    """True if `resource` depends on `target` (a URN), directly or through others."""
    seen, todo = set(), list(resource.dependencies)
    while todo:
        urn = todo.pop()
        if urn == target:
            return True
        if urn not in seen:
            seen.add(urn)
            todo += next((r.dependencies for r in g.resources if r.urn == urn), [])
    return False


def images_of(g: harness.Graph) -> set[str]:
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("image"), str):
                found.add(value["image"])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for resource in g.kubernetes_objects():
        walk(resource.inputs)
    return found


# ---------------------------------------------------------------- what each cloud creates


def test_aws_creates_eks_node_groups_bucket_registry_and_pod_identity() -> None:
    g = graph("aws-prod")
    (eks,) = g.of_type("eks:index:Cluster")
    assert eks.inputs["name"] == "elasticctr-aws-prod"
    assert eks.inputs["skipDefaultNodeGroup"] is True
    pools = {r.inputs["nodeGroupName"]: r.inputs for r in g.of_type("eks:index:ManagedNodeGroup")}
    assert pools["training"]["instanceTypes"] == ["m6i.4xlarge"]
    assert pools["training"]["scalingConfig"] == {"minSize": 3, "desiredSize": 4, "maxSize": 8}
    assert pools["serving"]["labels"] == {"elasticctr.io/pool": "serving"}
    addons = {r.inputs["addonName"]: r for r in g.of_type("aws:eks/addon:Addon")}
    assert set(addons) == {"aws-ebs-csi-driver", "eks-pod-identity-agent"}
    (storage_class,) = g.of_type("kubernetes:storage.k8s.io/v1:StorageClass")
    assert storage_class.inputs["provisioner"] == "ebs.csi.aws.com"
    assert storage_class.inputs["metadata"]["annotations"] == {
        "storageclass.kubernetes.io/is-default-class": "true"
    }

    (bucket,) = g.of_type("aws:s3/bucket:Bucket")
    assert bucket.inputs["bucket"] == "elasticctr-prod-aws"
    (versioning,) = g.of_type("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.inputs["versioningConfiguration"] == {"status": "Enabled"}
    (encryption,) = g.of_type(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    assert encryption.inputs["rules"][0]["applyServerSideEncryptionByDefault"] == {
        "sseAlgorithm": "aws:kms"
    }
    (private,) = g.of_type("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(
        private.inputs[key]
        for key in (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
        )
    )
    repos = {r.inputs["name"]: r.inputs for r in g.of_type("aws:ecr/repository:Repository")}
    assert set(repos) == {f"elasticctr/{i}" for i in ("trainer", "cube", "serving", "mlflow")}
    assert {r["imageTagMutability"] for r in repos.values()} == {"IMMUTABLE"}

    # Each workload that uses the bucket gets a role of its own, limited to its prefixes;
    # no keys exist anywhere.
    roles = {r.name: r for r in g.of_type("aws:iam/role:Role")}
    associations = {
        r.inputs["serviceAccount"]: r
        for r in g.of_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    workloads = ("training", "cube", "cube-transfer", "serving", "mlflow")
    assert set(associations) == set(workloads)
    assert {r.inputs["namespace"] for r in associations.values()} == {"elasticctr"}
    for workload in workloads:
        role = roles[f"cluster-bucket-{workload}-role"]
        assert "pods.eks.amazonaws.com" in role.inputs["assumeRolePolicy"]
        assert role.urn in associations[workload].dependencies
    policies = {
        r.name.removeprefix("cluster-bucket-").removesuffix("-access"): json.loads(
            r.inputs["policy"]
        )["Statement"]
        for r in g.of_type("aws:iam/rolePolicy:RolePolicy")
    }
    bucket_arn = "arn:aws:s3:::elasticctr-prod-aws"
    assert policies["serving"][1] == {
        "Effect": "Allow",
        "Action": ["s3:GetObject"],
        "Resource": [f"{bucket_arn}/models/*"],
    }
    # aws-prod reads its data from S3: the trainers read the dataset, nobody else does
    training = policies["training"]
    assert training[0]["Condition"]["StringLike"]["s3:prefix"] == [
        "train_data", "train_data/*", "models", "models/*", "checkpoints", "checkpoints/*"
    ]  # fmt: skip
    assert training[3]["Resource"] == [f"{bucket_arn}/checkpoints/*"]  # deletes
    # No bucket keys: the only Secret is serving's token.
    assert [s.inputs["metadata"]["name"] for s in g.of_type("kubernetes:core/v1:Secret")] == [
        "serving-auth"
    ]


def test_huawei_creates_cce_node_pools_volcano_addon_obs_and_swr() -> None:
    g = graph("huawei-prod")
    (cce,) = g.of_type("huaweicloud:Cce/cluster:Cluster")
    assert cce.inputs["flavorId"] == "cce.s2.small" and cce.inputs["clusterVersion"] == "v1.31"
    assert cce.inputs["eip"] == "198.51.100.7"  # a public API endpoint for Pulumi
    pools = {r.inputs["name"]: r.inputs for r in g.of_type("huaweicloud:Cce/nodePool:NodePool")}
    assert pools["training"]["flavorId"] == "c7.4xlarge.2"
    assert (
        pools["training"]["initialNodeCount"],
        pools["training"]["minNodeCount"],
        pools["training"]["maxNodeCount"],
    ) == (3, 2, 6)
    assert pools["serving"]["keyPair"] == "elasticctr-nodes"
    (addon,) = g.of_type("huaweicloud:Cce/addon:Addon")
    assert addon.inputs["templateName"] == "volcano"
    assert not g.of_type("elasticctr:volcano:Volcano")  # the add-on replaces our chart
    (bucket,) = g.of_type("huaweicloud:Obs/bucket:Bucket")
    assert bucket.inputs["bucket"] == "elasticctr-prod-huawei"
    assert bucket.inputs["acl"] == "private" and bucket.inputs["versioning"] is True
    assert bucket.inputs["encryption"] is True
    (organization,) = g.of_type("huaweicloud:Swr/organization:Organization")
    assert organization.inputs["name"] == "elasticctr"
    assert len(g.of_type("huaweicloud:Swr/repository:Repository")) == 4

    # The client certificate is a credential: encrypted in the state.
    assert "certificateUsers" in cce.additional_secret_outputs
    # The kubeconfig is made from the cluster's certificates, for its public endpoint.
    provider = kubernetes_provider(g)
    kubeconfig = json.loads(provider.inputs["kubeconfig"])
    assert kubeconfig["clusters"][0]["cluster"] == {
        "server": "https://198.51.100.7:5443",
        "certificate-authority-data": "Q0EtREFUQQ==",
    }
    assert kubeconfig["users"][0]["user"]["client-key-data"] == "huawei-client-key-0001"


def test_baidu_creates_cce_instance_groups_kubeconfig_bos_and_ccr() -> None:
    g = graph("baidu-prod")
    (cce,) = g.of_type("pulumi-python:dynamic/baidu:CceCluster")
    assert cce.inputs["endpoint"] == "https://cce.bj.baidubce.com"
    assert cce.inputs["vpc_id"] == "vpc-example0001" and cce.inputs["master_flavor"] == "l50"
    assert cce.inputs["timeout_seconds"] == 3600
    groups = {
        r.inputs["name"]: r.inputs
        for r in g.of_type("pulumi-python:dynamic/baidu:CceInstanceGroup")
    }
    assert groups["training"]["instance_type"] == "bcc.g5.c16m64"
    assert (groups["training"]["replicas"], groups["training"]["max_replicas"]) == (4, 8)
    assert groups["serving"]["cluster_id"] == "cce-abc123"
    (kubeconfig,) = g.of_type("pulumi-python:dynamic/baidu:CceKubeconfig")
    assert kubeconfig.inputs["access"] == "public"
    assert kubeconfig.additional_secret_outputs == ["kubeconfig"]
    (bucket,) = g.of_type("pulumi-python:dynamic/baidu:BosBucket")
    assert bucket.inputs["bucket"] == "elasticctr-prod-baidu"
    assert bucket.inputs["endpoint"] == "https://s3.bj.bcebos.com"
    (project,) = g.of_type("pulumi-python:dynamic/baidu:CcrProject")
    assert project.inputs["instance_id"] == "ccr-example0001"
    # The provider serialized into the state is a secret (it could capture credentials).
    assert "__provider" in cce.secret_paths


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_kubernetes_provider_hangs_off_the_cloud_cluster(stack: str) -> None:
    g = graph(stack)
    provider = kubernetes_provider(g)
    cluster_type = {
        "aws-prod": "eks:index:Cluster",
        "huawei-prod": "huaweicloud:Cce/cluster:Cluster",
        "baidu-prod": "pulumi-python:dynamic/baidu:CceCluster",
    }[stack]
    (cluster,) = g.of_type(cluster_type)
    assert depends_on(g, provider, cluster.urn)
    assert provider.parent == g.one(CLUSTER_TYPE[stack]).urn
    assert "kubeconfig" in provider.secret_paths
    assert outputs.KUBECONFIG in g.stack_secret_outputs
    # Workloads wait for nodes: the provider waits for every node pool.
    pool_type = {
        "aws-prod": "eks:index:ManagedNodeGroup",
        "huawei-prod": "huaweicloud:Cce/nodePool:NodePool",
        "baidu-prod": "pulumi-python:dynamic/baidu:CceInstanceGroup",
    }[stack]
    assert all(depends_on(g, provider, pool.urn) for pool in g.of_type(pool_type))


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_workloads_use_the_cloud_registry_and_bucket(stack: str) -> None:
    g = graph(stack)
    project = {i for i in images_of(g) if "/elasticctr/" in i}
    assert project == {
        f"{REGISTRY[stack]}/{i}:0.1.0" for i in ("trainer", "cube", "serving", "mlflow")
    }
    assert g.stack_outputs[outputs.STORAGE_ENDPOINT] == ENDPOINT[stack]
    assert g.stack_outputs[outputs.BUCKET] == f"elasticctr-prod-{stack.split('-')[0]}"


@pytest.mark.parametrize("stack", STACKS)
def test_cloud_credentials_stay_secret(stack: str) -> None:
    g = graph(stack)
    for resource in g.resources:
        masked = json.loads(json.dumps(resource.inputs))
        for path in resource.secret_paths:
            _mask(masked, path)
        text = json.dumps(masked)
        for plaintext in CLOUD_SECRETS:
            assert plaintext not in text, f"{resource.type} {resource.name} leaks {plaintext}"
    assert not any(p in json.dumps(g.stack_outputs) for p in CLOUD_SECRETS) or (
        outputs.KUBECONFIG in g.stack_secret_outputs
    )


def _mask(node: Any, path: str) -> None:
    parts = path.replace("]", "").replace("[", ".").split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(parts[-1])] = "<secret>"
    else:
        node[parts[-1]] = "<secret>"


# ---------------------------------------------------------------- the Kubernetes side


def _without_eks_specifics(resources: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """What EKS adds: egress to the Pod Identity agent (pods reach the bucket as their
    role), and the NLB annotation of a LoadBalancer Service."""
    agent = {"169.254.170.23/32", "fd00:ec2::23/128"}

    def to_agent(rule: dict[str, Any]) -> bool:
        return any(peer.get("ipBlock", {}).get("cidr") in agent for peer in rule.get("to", []))

    kept = dict(resources)
    for key, inputs in resources.items():
        if key[0] == "kubernetes:networking.k8s.io/v1:NetworkPolicy" and "egress" in inputs["spec"]:
            rules = [r for r in inputs["spec"]["egress"] if not to_agent(r)]
            kept[key] = {**inputs, "spec": {**inputs["spec"], "egress": rules}}
        if key[0] == "kubernetes:core/v1:Service" and inputs["spec"].get("type") == "LoadBalancer":
            metadata = dict(inputs["metadata"])
            annotations = dict(metadata["annotations"])
            assert annotations.pop("service.beta.kubernetes.io/aws-load-balancer-type") == "nlb"
            metadata["annotations"] = annotations  # what the existing cluster's has too
            kept[key] = {**inputs, "metadata": metadata}
    return kept


def _as_existing_cluster(stack: str) -> dict[str, Any]:
    """The stack's config on an existing cluster, reaching the same bucket and registry."""
    config, _ = config_with_secrets(stack)
    storage = dict(config["elasticctr:storage"])
    storage.update(mode="external", endpoint=ENDPOINT[stack], region=_region(config))
    return {
        "elasticctr:cloud": "existing",
        "elasticctr:cluster": {},
        "elasticctr:storage": storage,
        "elasticctr:images": {"registry": REGISTRY[stack]},
    }


def _region(config: dict[str, Any]) -> str:
    cloud = config["elasticctr:cloud"]
    return str(config["elasticctr:cluster"][cloud]["region"])


def _outside_cloud(g: harness.Graph, stack: str | None) -> dict[tuple[str, str], Any]:
    inside = {r.urn for r in cloud_part(g, stack)} if stack else set()
    existing = {r.urn for r in g.of_type("elasticctr:cluster:ExistingCluster")}
    existing |= {r.urn for r in g.resources if r.parent in existing}
    return {
        (r.type, r.name): r.inputs
        for r in g.resources
        if r.urn not in inside and r.urn not in existing
    }


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_kubernetes_side_is_the_graph_an_existing_cluster_gets(stack: str) -> None:
    """The cloud changes the cluster part only: the rest is resource for resource, input for
    input, what the same stack makes on a cluster it is given."""
    on_cloud = _outside_cloud(graph(stack), stack)
    on_existing = _outside_cloud(run_stack(stack, _as_existing_cluster(stack)), None)
    if stack == "aws-prod":
        on_cloud = _without_eks_specifics(on_cloud)
    assert on_cloud.keys() == on_existing.keys()
    differing = [key for key in on_cloud if on_cloud[key] != on_existing[key]]
    assert differing == []


def test_the_four_stacks_have_the_same_kubernetes_shape() -> None:
    """Per component, the same kinds of Kubernetes objects on every stack (sizes, and the
    optional parts a stack's config turns off, aside). Secrets are left out: which exist
    follows the credentials a stack has (HDFS UGI, bucket keys; see test_program.py)."""
    shapes: dict[str, dict[str, set[str]]] = {}
    for stack in STACKS:
        g = graph(stack)
        by_urn = {r.urn: r for r in g.resources}
        shape: dict[str, set[str]] = {}
        for resource in g.kubernetes_objects():
            owner = by_urn.get(resource.parent)
            while owner is not None and not owner.type.startswith("elasticctr:"):
                owner = by_urn.get(owner.parent)
            if resource.type == "kubernetes:core/v1:Secret":
                continue
            if owner is not None and not owner.type.startswith("elasticctr:cluster:"):
                shape.setdefault(owner.type, set()).add(resource.type)
        shapes[stack] = shape
    always = (
        "namespace:Namespace",
        "mlflow:Mlflow",
        "cube:Cube",
        "training:Training",
        "serving:Serving",
    )
    for component in (f"elasticctr:{c}" for c in always):
        kinds = {stack: shapes[stack].get(component) for stack in STACKS}
        assert len({frozenset(k or ()) for k in kinds.values()}) == 1, (component, kinds)


# ---------------------------------------------------------------- images.build


def test_build_pushes_the_images_to_the_cloud_registry_and_pods_run_the_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for image in ("trainer", "cube", "serving", "mlflow"):
        (tmp_path / image).mkdir()
        (tmp_path / image / "Dockerfile").write_text("FROM scratch\n")
    monkeypatch.setattr(infra_images, "IMAGES_DIR", tmp_path)
    g = run_stack("aws-prod", {"elasticctr:images": {"build": True}})
    built = {r.name: r.inputs for r in g.of_type("docker-build:index:Image")}
    assert set(built) == {f"images-{i}" for i in ("trainer", "cube", "serving", "mlflow")}
    trainer = built["images-trainer"]
    assert trainer["tags"] == [f"{REGISTRY['aws-prod']}/trainer:0.1.0"]
    assert trainer["dockerfile"] == {"location": str(tmp_path / "trainer" / "Dockerfile")}
    assert trainer["context"] == {"location": str(tmp_path)}
    assert trainer["push"] is True
    assert trainer["registries"][0]["username"] == "AWS"
    secret_paths = g.one("docker-build:index:Image", "images-trainer").secret_paths
    assert any(p.startswith("registries") for p in secret_paths)
    digest = f"@sha256:{cloud_mocks.IMAGE_DIGEST}"
    assert f"{REGISTRY['aws-prod']}/trainer:0.1.0{digest}" in images_of(g)


def test_recorded_digests_pin_the_pods_images_beside_their_tags() -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    g = run_stack("aws-prod", {"elasticctr:images": {"digests": {"trainer": digest}}})
    images = images_of(g)
    assert f"{REGISTRY['aws-prod']}/trainer:0.1.0@{digest}" in images
    assert f"{REGISTRY['aws-prod']}/serving:0.1.0" in images  # no digest recorded: the tag


def test_build_without_a_dockerfile_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "Dockerfile").write_text("FROM scratch\n")
    monkeypatch.setattr(infra_images, "IMAGES_DIR", tmp_path)
    with pytest.raises(ValueError, match="no Dockerfile for cube, serving, mlflow"):
        run_stack("dev", {"elasticctr:images": {"build": True}})


# ---------------------------------------------------------------- per-cloud config errors


def problems_of(stack: str, overrides: dict[str, Any]) -> list[str]:
    config, secrets = config_with_secrets(stack, overrides)
    g = harness.Graph()
    with pytest.raises(ConfigError) as failure:
        harness.run(main, config, secrets, stack=stack, graph=g)
    assert g.resources == [], "resources were registered before the config was checked"
    return failure.value.problems


def _cluster(stack: str, **changes: Any) -> dict[str, Any]:
    """The stack's cluster section with some of its cloud's keys changed."""
    config = harness.stack_config(stack)
    cluster = json.loads(json.dumps(config["elasticctr:cluster"]))
    cloud = config["elasticctr:cloud"]
    cluster[cloud].update(changes)
    return {"elasticctr:cluster": cluster}


def _pool(stack: str, **changes: Any) -> dict[str, Any]:
    config = harness.stack_config(stack)
    cloud = config["elasticctr:cloud"]
    pools = json.loads(json.dumps(config["elasticctr:cluster"][cloud]["node_pools"]))
    pools[0].update(changes)
    return _cluster(stack, node_pools=pools)


@pytest.mark.parametrize(
    ("stack", "overrides", "expected"),
    [
        (
            "aws-prod",
            _cluster("aws-prod", region=""),
            'elasticctr:cluster.aws.region must be set when cloud is aws, got ""',
        ),
        (
            "huawei-prod",
            _cluster("huawei-prod", region=""),
            'elasticctr:cluster.huawei.region must be set when cloud is huawei, got ""',
        ),
        (
            "baidu-prod",
            _cluster("baidu-prod", region=""),
            'elasticctr:cluster.baidu.region must be set when cloud is baidu, got ""',
        ),
        (
            "aws-prod",
            _cluster("aws-prod", region="Oregon"),
            'elasticctr:cluster.aws.region must be an AWS region, got "Oregon"',
        ),
        (
            "aws-prod",
            _pool("aws-prod", instance_type="m6i"),
            'elasticctr:cluster.aws.node_pools.0.instance_type must be an EC2 instance type such as m6i.2xlarge, got "m6i"',
        ),
        (
            "huawei-prod",
            _pool("huawei-prod", instance_type="m6i.2xlarge"),
            'elasticctr:cluster.huawei.node_pools.0.instance_type must be an ECS flavor such as c7.2xlarge.4, got "m6i.2xlarge"',
        ),
        (
            "baidu-prod",
            _pool("baidu-prod", instance_type="c7.2xlarge.4"),
            'elasticctr:cluster.baidu.node_pools.0.instance_type must be a BCC spec such as bcc.g5.c8m32, got "c7.2xlarge.4"',
        ),
        (
            "aws-prod",
            _pool("aws-prod", min_nodes=5, desired_nodes=5, max_nodes=2),
            "elasticctr:cluster.aws.node_pools.0.max_nodes must be >= min_nodes (5), got 2",
        ),
        (
            "huawei-prod",
            _pool("huawei-prod", min_nodes=2, desired_nodes=9, max_nodes=6),
            "elasticctr:cluster.huawei.node_pools.0.desired_nodes must be from min_nodes (2) to max_nodes (6), got 9",
        ),
        (
            "baidu-prod",
            _pool("baidu-prod", min_nodes=-1),
            "elasticctr:cluster.baidu.node_pools.0.min_nodes must be an integer >= 0, got -1",
        ),
        (
            "baidu-prod",
            _pool("baidu-prod", name="serving"),
            'elasticctr:cluster.baidu.node_pools.1.name must be unique among node pools, got "serving"',
        ),
        (
            "aws-prod",
            _pool("aws-prod", gpus=1),
            "elasticctr:cluster.aws.node_pools.0.gpus is not a known key; allowed: name, instance_type, min_nodes, desired_nodes, max_nodes, disk_gb",
        ),
        (
            "aws-prod",
            _cluster("aws-prod", node_pools=[]),
            "elasticctr:cluster.aws.node_pools must be list should have at least 1 item after validation, not 0, got []",
        ),
        (
            "baidu-prod",
            _cluster("baidu-prod", ccr_instance_id=""),
            'elasticctr:cluster.baidu.ccr_instance_id must be set when cloud is baidu, got ""',
        ),
        (
            "huawei-prod",
            _cluster("huawei-prod", key_pair=""),
            'elasticctr:cluster.huawei.key_pair must be set when cloud is huawei, got ""',
        ),
        (
            "dev",
            {"elasticctr:cluster": {"aws": {"region": "us-west-2"}}},
            "elasticctr:cluster.aws is for cloud aws, got cloud existing",
        ),
        (
            "dev",
            {"elasticctr:storage": {"mode": "cloud"}},
            'elasticctr:storage.mode must be minio or external with cloud existing, got "cloud"',
        ),
        (
            "aws-prod",
            {"elasticctr:images": {"registry": "docker.io/elasticctr-team"}},
            'elasticctr:images.registry is for cloud existing: a aws stack pushes to and pulls from the registry it creates, got "docker.io/elasticctr-team"',
        ),
        (
            "aws-prod",
            {"elasticctr:volcano": {"managed": True}},
            "elasticctr:volcano.managed must be false on cloud aws: the cluster it creates has no Volcano add-on",
        ),
        (
            "aws-prod",
            {"elasticctr:serving": {"node_pool": "gpu"}},
            'elasticctr:serving.node_pool must be empty or one of cluster.aws.node_pools (training, serving), got "gpu"',
        ),
        (
            "huawei-prod",
            {"elasticctr:training": {"node_pool": "Training"}},
            'elasticctr:training.node_pool must be a node pool name (a DNS label), or empty for any node, got "Training"',
        ),
        (
            "aws-prod",
            {"elasticctr:storage": {"mode": "cloud", "bucket": "b-1", "endpoint": "https://s3"}},
            'elasticctr:storage.endpoint is only for mode external (comes from the cloud in mode cloud), got "https://s3"',
        ),
    ],
)
def test_each_cloud_config_error_is_named_before_anything_exists(
    stack: str, overrides: dict[str, Any], expected: str
) -> None:
    assert problems_of(stack, overrides) == [expected]


def test_bucket_keys_are_required_where_pods_cannot_use_their_identity() -> None:
    """Both secrets a Baidu stack file leaves to `config set --secret`, named at once."""
    config = harness.stack_config("baidu-prod")
    g = harness.Graph()
    with pytest.raises(ConfigError) as failure:
        harness.run(main, config, (), stack="baidu-prod", graph=g)
    assert g.resources == []
    assert failure.value.problems == [
        "elasticctr:data.ugi must be set (with --secret) to read an external HDFS",
        "elasticctr:storage.access_key must be set (with --secret) in mode cloud on baidu: the "
        "workloads without keys of their own (cube, cube-transfer, mlflow, serving, training) "
        "reach the bucket with these keys",
    ]


@pytest.mark.parametrize("stack", CLOUD_STACKS)
def test_workloads_run_on_their_node_pools(stack: str) -> None:
    """Trainers and pservers on the training pool; cube and serving on the serving pool
    (the stack files' `node_pool`s); the services (HDFS, MLflow, MinIO) anywhere."""
    g = graph(stack)

    def selector(type_: str, name: str) -> Any:
        return g.one(type_, name).inputs["spec"]["template"]["spec"].get("nodeSelector")

    serving_pool = {"elasticctr.io/pool": "serving"}
    assert selector("kubernetes:apps/v1:Deployment", "serving-deployment") == serving_pool
    for shard in g.of_type("kubernetes:apps/v1:StatefulSet"):
        if shard.name.startswith("cube-shard-"):
            assert selector("kubernetes:apps/v1:StatefulSet", shard.name) == serving_pool
    assert selector("kubernetes:apps/v1:Deployment", "cube-transfer") == serving_pool
    (job,) = g.of_type("kubernetes:batch.volcano.sh/v1alpha1:Job")
    for task in job.inputs["spec"]["tasks"]:
        assert task["template"]["spec"]["nodeSelector"] == {"elasticctr.io/pool": "training"}
    services = []
    workloads = g.of_type("kubernetes:apps/v1:Deployment") + g.of_type(
        "kubernetes:apps/v1:StatefulSet"
    )
    for r in workloads:
        template = r.inputs["spec"]["template"]
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        if component not in ("serving", "cube", "cube-transfer"):
            services.append(component)
            assert "nodeSelector" not in template["spec"], r.name
    assert "mlflow" in services
