"""`cloud: existing`: a cluster reached through a kubeconfig (the dev stack, any cluster)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.cluster import ClusterResult, kubernetes_provider


@dataclass(frozen=True)
class ExistingClusterArgs:
    kubeconfig: str = ""  # a file path; empty: $KUBECONFIG or ~/.kube/config
    context: str = ""  # empty: the kubeconfig's current context
    volcano_managed: bool = False
    render_dir: str = ""  # write manifests to this directory instead of applying them


class ExistingCluster(pulumi.ComponentResource):
    result: ClusterResult

    def __init__(
        self, name: str, args: ExistingClusterArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("elasticctr:cluster:ExistingCluster", name, None, opts)
        rendering = bool(args.render_dir)
        provider = kubernetes_provider(
            f"{name}-provider",
            # A path, not the file's content: the state then holds no cluster credentials.
            # Rendering reaches no cluster, and the provider refuses a kubeconfig or context
            # beside renderYamlToDirectory: "" (not None, which makes the SDK read $KUBECONFIG).
            kubeconfig="" if rendering else (args.kubeconfig or None),
            context="" if rendering else (args.context or None),
            render_yaml_to_directory=args.render_dir or None,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.result = ClusterResult(
            provider=provider,
            kubeconfig=None,
            bucket=None,
            image_registry=None,
            volcano_managed=args.volcano_managed,
        )
        self.register_outputs({})
