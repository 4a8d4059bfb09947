"""`cloud: aws`: an EKS cluster (pulumi-eks) with managed node groups, the EBS CSI driver and
a default gp3 StorageClass, an S3 bucket, ECR repositories, and EKS Pod Identity so that the
workloads reach the bucket without keys.

Credentials are the AWS provider's standard ones (AWS_PROFILE, AWS_ACCESS_KEY_ID/..., or the
instance role); the region comes from the stack config.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components.bucket_access import BucketUser, s3_policy_json
from components.cluster import (
    POOL_LABEL,
    PROJECT_IMAGES,
    CloudBucket,
    ClusterResult,
    NodePoolSpec,
    RegistryLogin,
    after,
    kubernetes_provider,
)
from components.kube import object_labels
from components.network import Outside, Route

NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)
EBS_CSI_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
# EKS Pod Identity: the agent add-on hands pods the role associated with their service account.
POD_IDENTITY_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ],
}
# The Pod Identity agent on every node, where the SDKs get the role's credentials
# (AWS_CONTAINER_CREDENTIALS_FULL_URI): egress policies must let pods reach it.
POD_IDENTITY_AGENT = (
    Route(Outside("169.254.170.23/32"), (80,)),
    Route(Outside("fd00:ec2::23/128"), (80,)),
)
# A Network Load Balancer (instance targets) passes client addresses on to the nodes, and
# with externalTrafficPolicy Local to the pods, whose NetworkPolicy then judges them; the
# classic ELB of the in-tree default proxies TCP and shows the pods its own addresses.
LOAD_BALANCER_ANNOTATIONS = {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
EC2_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


@dataclass(frozen=True)
class EksClusterArgs:
    cluster_name: str  # the EKS cluster's name (unique per account and region)
    region: str
    kubernetes_version: str
    node_pools: tuple[NodePoolSpec, ...]
    subnet_ids: tuple[str, ...] = ()  # empty: the default VPC's subnets
    bucket: str | None = None  # create this S3 bucket (storage mode cloud)
    # Who gets the bucket through Pod Identity: the workloads (their service accounts in
    # `bucket_namespace`), each with a role of its own.
    bucket_users: tuple[BucketUser, ...] = ()
    bucket_namespace: str = ""
    repository_prefix: str = "elasticctr"


class EksCluster(pulumi.ComponentResource):
    result: ClusterResult

    def __init__(
        self, name: str, args: EksClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if not args.node_pools:
            raise ValueError(f"{name}: at least one node pool is required")
        super().__init__("elasticctr:cluster:EksCluster", name, None, opts)
        self._name = name
        self._aws = aws.Provider(
            f"{name}-aws", region=args.region, opts=pulumi.ResourceOptions(parent=self)
        )

        node_role = self._role(f"{name}-node-role", EC2_TRUST, NODE_POLICIES)
        cluster = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.kubernetes_version,
            subnet_ids=list(args.subnet_ids) or None,
            skip_default_node_group=True,  # the managed node groups below replace it
            instance_roles=[node_role],
            opts=self._component_opts(),
        )
        # The cluster's name once it exists (pulumi-eks does not export it as a plain string).
        cluster_name = cluster.kubeconfig_json.apply(lambda _: args.cluster_name)
        self.node_groups = [
            eks.ManagedNodeGroup(
                f"{name}-pool-{pool.name}",
                cluster=cluster,
                node_group_name=pool.name,
                node_role=node_role,
                instance_types=[pool.instance_type],
                scaling_config={
                    "min_size": pool.min_nodes,
                    "desired_size": pool.desired_nodes,
                    "max_size": pool.max_nodes,
                },
                disk_size=pool.disk_gb,
                labels={POOL_LABEL: pool.name},
                opts=self._component_opts(),
            )
            for pool in args.node_pools
        ]
        pod_identity = aws.eks.Addon(
            f"{name}-pod-identity-agent",
            cluster_name=cluster_name,
            addon_name="eks-pod-identity-agent",
            opts=self._opts(depends_on=self.node_groups),
        )
        ebs_role = self._role(f"{name}-ebs-csi-role", POD_IDENTITY_TRUST, (EBS_CSI_POLICY,))
        ebs_csi = aws.eks.Addon(
            f"{name}-ebs-csi-driver",
            cluster_name=cluster_name,
            addon_name="aws-ebs-csi-driver",
            pod_identity_associations=[
                {"role_arn": ebs_role.arn, "service_account": EBS_CSI_SERVICE_ACCOUNT}
            ],
            opts=self._opts(depends_on=[pod_identity]),
        )

        # pulumi-eks gives the kubeconfig as JSON (it runs `aws eks get-token`): a secret.
        kubeconfig: pulumi.Output[str] = pulumi.Output.secret(cluster.kubeconfig_json)
        provider = kubernetes_provider(
            f"{name}-provider",
            kubeconfig=kubeconfig,
            # Workloads need nodes, and their volumes the CSI driver: nothing is applied before.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*self.node_groups, ebs_csi]),
        )
        # EKS marks no StorageClass as default (1.30+): volume claims without a class would
        # stay pending. gp3 through the CSI driver, bound where the pod lands. Claims made
        # before it exists get it too (retroactive default class, GA since Kubernetes 1.28).
        k8s.storage.v1.StorageClass(
            f"{name}-gp3",
            metadata={
                "name": "gp3",
                "labels": object_labels("storage-class"),
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            provisioner="ebs.csi.aws.com",
            parameters={"type": "gp3", "encrypted": "true"},
            volume_binding_mode="WaitForFirstConsumer",
            allow_volume_expansion=True,
            reclaim_policy="Delete",
            opts=pulumi.ResourceOptions(parent=self, provider=provider, depends_on=[ebs_csi]),
        )

        bucket = None
        if args.bucket is not None:
            bucket = self._bucket(args, cluster_name, pod_identity)
        registry, login = self._registry(args)
        self.result = ClusterResult(
            provider=provider,
            kubeconfig=kubeconfig,
            bucket=bucket,
            image_registry=registry,
            volcano_managed=False,
            registry_login=login,
            load_balancer_annotations=LOAD_BALANCER_ANNOTATIONS,
        )
        self.register_outputs({"cluster_name": cluster_name, "image_registry": registry})

    def _opts(self, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        """A child on this stack's AWS provider (the region of the config)."""
        return pulumi.ResourceOptions(parent=self, provider=self._aws, depends_on=list(depends_on))

    def _component_opts(self) -> pulumi.ResourceOptions:
        """pulumi-eks components take the AWS provider by package name."""
        return pulumi.ResourceOptions(parent=self, providers={"aws": self._aws})

    def _role(self, name: str, trust: Mapping[str, Any], policies: tuple[str, ...]) -> aws.iam.Role:
        role = aws.iam.Role(name, assume_role_policy=json.dumps(trust), opts=self._opts())
        for index, policy in enumerate(policies):
            aws.iam.RolePolicyAttachment(
                f"{name}-{index}", role=role.name, policy_arn=policy, opts=self._opts()
            )
        return role

    def _bucket(
        self, args: EksClusterArgs, cluster_name: pulumi.Output[str], agent: aws.eks.Addon
    ) -> CloudBucket:
        assert args.bucket is not None
        name = self._name
        bucket = aws.s3.Bucket(f"{name}-bucket", bucket=args.bucket, opts=self._opts())
        aws.s3.BucketVersioning(
            f"{name}-bucket-versioning",
            bucket=bucket.id,
            versioning_configuration={"status": "Enabled"},
            opts=self._opts(),
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-bucket-encryption",
            bucket=bucket.id,
            rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"}}],
            opts=self._opts(),
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-bucket-private",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=self._opts(),
        )
        # A role per workload: what it does in the bucket (its prefixes), nothing else.
        namespace = args.bucket_namespace
        for user in args.bucket_users:
            role = aws.iam.Role(
                f"{name}-bucket-{user.name}-role",
                assume_role_policy=json.dumps(POD_IDENTITY_TRUST),
                opts=self._opts(),
            )
            aws.iam.RolePolicy(
                f"{name}-bucket-{user.name}-access",
                role=role.id,
                policy=bucket.arn.apply(functools.partial(_policy, user)),
                opts=self._opts(),
            )
            aws.eks.PodIdentityAssociation(
                f"{name}-bucket-{namespace}-{user.name}",
                cluster_name=cluster_name,
                namespace=namespace,
                service_account=user.name,
                role_arn=role.arn,
                opts=self._opts(depends_on=[agent]),
            )
        return CloudBucket(
            endpoint=after(bucket, f"https://s3.{args.region}.amazonaws.com"),
            bucket=args.bucket,
            region=args.region,
            access_key=None,  # Pod Identity
            secret_key=None,
            identity_routes=POD_IDENTITY_AGENT,
        )

    def _registry(self, args: EksClusterArgs) -> tuple[pulumi.Output[str], RegistryLogin]:
        repositories = [
            aws.ecr.Repository(
                f"{self._name}-repo-{image}",
                name=f"{args.repository_prefix}/{image}",
                # Tags are pinned in the config: a pushed tag never changes meaning.
                image_tag_mutability="IMMUTABLE",
                image_scanning_configuration={"scan_on_push": True},
                force_delete=True,  # images are rebuilt from images/: destroy may drop them
                opts=self._opts(),
            )
            for image in PROJECT_IMAGES
        ]
        first = repositories[0]
        registry = pulumi.Output.all(first.registry_id, *[r.urn for r in repositories]).apply(
            lambda values: (
                f"{values[0]}.dkr.ecr.{args.region}.amazonaws.com/{args.repository_prefix}"
            )
        )
        token = aws.ecr.get_authorization_token_output(
            registry_id=first.registry_id, opts=pulumi.InvokeOutputOptions(provider=self._aws)
        )
        login = RegistryLogin(
            address=registry.apply(lambda url: url.split("/", 1)[0]),
            username=token.user_name,
            password=pulumi.Output.secret(token.password),
        )
        return registry, login


def _policy(user: BucketUser, bucket_arn: str) -> str:
    return s3_policy_json(bucket_arn, user)
