"""Volcano, the batch scheduler the training Job runs on: its official Helm chart, pinned.

The chart comes from Volcano's chart repository, or, on a machine without internet, from
the Go module of the same release (`chart_path`), with its images from a registry of the
stack's choice. Clusters that already run Volcano (the CCE add-ons) set `volcano.managed`
and the program does not create this component at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import kube
from components.kube import KubeTarget

# Pinned upstream: https://volcano-sh.github.io/helm-charts, chart "volcano" (the same chart
# as installer/helm/chart/volcano in the Go module volcano.sh/volcano at this version).
CHART = "volcano"
CHART_REPO = "https://volcano-sh.github.io/helm-charts"
CHART_VERSION = "1.15.0"
NAMESPACE = "volcano-system"
RELEASE = "volcano"
# The chart's admission webhook: its Service, and the image of its Deployment (and hook Job).
ADMISSION_SERVICE = f"{RELEASE}-admission-service"
ADMISSION_IMAGE = f"volcanosh/vc-webhook-manager:v{CHART_VERSION}"
# Volcano's queues: cluster-wide objects, the status of which the webhook checks.
QUEUE_GROUP = "scheduling.volcano.sh"
QUEUE_RESOURCE = "queues"


@dataclass(frozen=True)
class VolcanoArgs:
    provider: pulumi.ProviderResource
    # Wait for the scheduler, controllers and admission webhook to be ready (off only on
    # clusters that never run containers, such as the e2e API server).
    wait_for_ready: bool = True
    # A local copy of the chart at CHART_VERSION; None: the chart repository.
    chart_path: str | None = None
    # Where the chart's images (volcanosh/vc-scheduler:v1.15.0, ...) are pulled from.
    image_registry: str = "docker.io"
    image_pull_policy: str = "IfNotPresent"
    # The queue the training Job is submitted to: ready means Volcano admits jobs to it.
    queue: str = "default"


class Volcano(pulumi.ComponentResource):
    release_name: pulumi.Output[str]
    namespace: pulumi.Output[str]
    version: pulumi.Output[str]

    def __init__(
        self, name: str, args: VolcanoArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("elasticctr:volcano:Volcano", name, None, opts)
        local = bool(args.chart_path)
        release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE,
            chart=args.chart_path or CHART,
            # A local chart is the version it holds (checked by infra/volcano_chart.py).
            version=None if local else CHART_VERSION,
            repository_opts=None if local else {"repo": CHART_REPO},
            namespace=NAMESPACE,
            create_namespace=True,
            values={
                "basic": {
                    "image_registry": args.image_registry,
                    # The chart's default is Always, which an offline node cannot honour.
                    "image_pull_policy": args.image_pull_policy,
                }
            },
            # CRDs are templates of this chart, so upgrades keep them current.
            skip_await=not args.wait_for_ready,
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        self.release = release
        # What waits for Volcano (the training Job) waits for this: its webhook answering.
        self.ready: pulumi.Resource = (
            self._admission_answers(name, args, release) if args.wait_for_ready else release
        )
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

    def _admission_answers(
        self, name: str, args: VolcanoArgs, release: k8s.helm.v3.Release
    ) -> k8s.batch.v1.Job:
        """A Job that ends once the admission webhook completes a TLS handshake and the
        training queue is Open.

        The chart's webhook Deployment has no readiness probe: it counts as ready before it
        listens, and a Volcano Job created then fails ("failed calling webhook ...
        connection refused"). The webhook then refuses jobs to a queue until the controller
        has marked it Open (on a fresh, busy cluster, seconds after the webhook answers:
        "queue `default` status is ``"). Pulumi waits for a Job to complete, so everything
        depending on this waits for both. It runs the webhook's own image (openssl and
        kubectl are in it for the chart's certificate hook), with a token that may read
        that one queue and nothing else."""
        host = f"{ADMISSION_SERVICE}.{NAMESPACE}.svc:443"
        state = (
            f"kubectl get {QUEUE_RESOURCE}.{QUEUE_GROUP} {args.queue} --cache-dir /tmp/kube "
            "-o jsonpath='{.status.state}'"
        )
        probe = (
            f"until openssl s_client -connect {host} </dev/null >/dev/null 2>&1 "
            f'&& [ "$({state})" = Open ]; do sleep 1; done'
        )
        # The stack's pod conventions (non-root, read-only, requests = limits, own account),
        # in Volcano's namespace.
        target = KubeTarget(args.provider, NAMESPACE, args.image_pull_policy)
        component = "volcano-admission-ready"
        account = kube.service_account(target, component, component, self)
        reader = self._queue_reader(target, component, args.queue, account)
        container = kube.container(
            target,
            "probe",
            f"{args.image_registry}/{ADMISSION_IMAGE}",
            ["/bin/sh", "-c", probe],
            cpu=0.05,
            mem=0.0625,
        )
        return k8s.batch.v1.Job(
            f"{name}-admission-ready",
            metadata=target.metadata(component, component),
            spec={
                "backoff_limit": 0,
                "active_deadline_seconds": 600,
                "template": kube.pod_template(
                    component,
                    [container],
                    service_account=account.metadata["name"],
                    restart_policy="Never",
                    api_access=True,
                ),
            },
            opts=target.opts(self, depends_on=[release, reader]),
        )

    def _queue_reader(
        self,
        target: KubeTarget,
        component: str,
        queue: str,
        account: k8s.core.v1.ServiceAccount,
    ) -> k8s.rbac.v1.ClusterRoleBinding:
        """`get` on the training queue alone (queues are cluster-wide: a ClusterRole)."""
        metadata = {"name": component, "labels": kube.object_labels(component)}
        role = k8s.rbac.v1.ClusterRole(
            component,
            metadata=metadata,
            rules=[
                {
                    "api_groups": [QUEUE_GROUP],
                    "resources": [QUEUE_RESOURCE],
                    "resource_names": [queue],
                    "verbs": ["get"],
                }
            ],
            opts=target.opts(self),
        )
        # The role's name is an output of it: the binding waits for the role.
        return k8s.rbac.v1.ClusterRoleBinding(
            component,
            metadata=metadata,
            role_ref={
                "api_group": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role.metadata["name"],
            },
            subjects=[
                {"kind": "ServiceAccount", "name": account.metadata["name"], "namespace": NAMESPACE}
            ],
            opts=target.opts(self),
        )
