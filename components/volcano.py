"""Volcano, the batch scheduler the training Job runs on: its official Helm chart, pinned.

Clusters that already run Volcano (the CCE add-ons) set `volcano.managed` and the program
does not create this component at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

# Pinned upstream: https://volcano-sh.github.io/helm-charts, chart "volcano".
CHART = "volcano"
CHART_REPO = "https://volcano-sh.github.io/helm-charts"
CHART_VERSION = "1.15.0"
NAMESPACE = "volcano-system"
RELEASE = "volcano"


@dataclass(frozen=True)
class VolcanoArgs:
    provider: pulumi.ProviderResource
    # Wait for the scheduler, controllers and admission webhook to be ready (off only on
    # clusters that never run containers, such as the e2e API server).
    wait_for_ready: bool = True


class Volcano(pulumi.ComponentResource):
    release_name: pulumi.Output[str]
    namespace: pulumi.Output[str]
    version: pulumi.Output[str]

    def __init__(
        self, name: str, args: VolcanoArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("elasticctr:volcano:Volcano", name, None, opts)
        release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE,
            chart=CHART,
            version=CHART_VERSION,
            repository_opts={"repo": CHART_REPO},
            namespace=NAMESPACE,
            create_namespace=True,
            # CRDs are templates of this chart, so upgrades keep them current.
            skip_await=not args.wait_for_ready,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        self.release = release
        self.release_name = release.name.apply(lambda given: given or RELEASE)
        self.namespace = pulumi.Output.from_input(NAMESPACE)
        self.version = pulumi.Output.from_input(CHART_VERSION)
        self.register_outputs(
            {
                "release_name": self.release_name,
                "namespace": self.namespace,
                "version": self.version,
            }
        )
