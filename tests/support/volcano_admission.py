"""Volcano's own Job-mutating admission webhook (vc-webhook-manager, built by
tools/build-tools.sh at the pinned chart's version) in front of a control plane of
tests/support/controlplane.py, so that the e2e API server stores a Volcano Job as a real cluster
does: as the webhook mutated it (tests/support/volcano_webhook.py says what it changes).

The chart's set-up on loopback: a MutatingWebhookConfiguration of the chart's name and rule
(templates/webhooks.yaml: CREATE of batch.volcano.sh/v1alpha1 jobs, failurePolicy Fail)
that calls https://127.0.0.1:<port>/jobs/mutate, whose CA bundle the manager writes in at
start (as in the chart), and the manager serving only /jobs/mutate with a certificate for
127.0.0.1 from a CA of its own. Ready once a dry-run create of a Job comes back defaulted.
"""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

from elasticctr_common.ports import free_port

from tests.support.services import ServerProcess
from tools.localcluster.controlplane import Cert, make_pki

BINARY = "vc-webhook-manager"
# The chart's name of the configuration: the manager looks it up by this name.
CONFIGURATION = "volcano-admission-service-jobs-mutate"
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"


def find_binary(path: str) -> str | None:
    return shutil.which(BINARY, path=path)


def probe_job() -> dict[str, Any]:
    """A Job the webhook changes: its task has neither minAvailable nor maxRetry."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "webhook-probe"},
        "spec": {
            "tasks": [
                {
                    "name": "probe",
                    "replicas": 2,
                    "template": {"spec": {"containers": [{"name": "c", "image": "busybox:1"}]}},
                }
            ]
        },
    }


class VolcanoJobWebhook(ServerProcess):
    """vc-webhook-manager serving /jobs/mutate for `control_plane` (a started ControlPlane)."""

    name = "volcano-webhook"
    startup_timeout = 60.0

    def __init__(self, control_plane: Any, binary: str) -> None:
        super().__init__()
        self.control_plane = control_plane
        self.binary = binary
        self.port = free_port()

    def _pick_new_port(self) -> bool:
        self.port = free_port()
        return True

    def _command(self) -> list[str]:
        # Called in the fresh workdir, before the process starts: its certificate, and the
        # configuration the manager completes with the CA bundle.
        assert self.workdir is not None
        pki = self.workdir / "pki"
        server = Cert("/CN=volcano-admission", "serverAuth", ("IP:127.0.0.1",))
        make_pki(pki, {"webhook": server})
        self._register()
        return [
            self.binary,
            f"--kubeconfig={self.control_plane.kubeconfig}",
            f"--tls-cert-file={pki / 'webhook.crt'}",
            f"--tls-private-key-file={pki / 'webhook.key'}",
            f"--ca-cert-file={pki / 'ca.crt'}",
            f"--webhook-url=https://127.0.0.1:{self.port}",
            "--listen-address=127.0.0.1",
            f"--port={self.port}",
            "--enabled-admission=/jobs/mutate",
        ]

    def _register(self) -> None:
        # A configuration left by a start that lost its port goes first.
        self.control_plane.request("DELETE", f"{CONFIGURATIONS}/{CONFIGURATION}")
        configuration = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": CONFIGURATION},
            "webhooks": [
                {
                    "name": "mutatejob.volcano.sh",
                    "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": f"https://127.0.0.1:{self.port}/jobs/mutate"},
                    "failurePolicy": "Fail",
                    "matchPolicy": "Equivalent",
                    "reinvocationPolicy": "Never",
                    "rules": [
                        {
                            "apiGroups": ["batch.volcano.sh"],
                            "apiVersions": ["v1alpha1"],
                            "operations": ["CREATE"],
                            "resources": ["jobs"],
                            "scope": "*",
                        }
                    ],
                    "sideEffects": "NoneOnDryRun",
                    "timeoutSeconds": 10,
                }
            ],
        }
        status, body = self.control_plane.request("POST", CONFIGURATIONS, configuration)
        if status != 201:
            raise RuntimeError(f"{CONFIGURATION}: HTTP {status}: {body.get('message')}")

    def mutate(self, job: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A dry-run create of `job` in the namespace `default`: (status, the Job as stored)."""
        status, stored = self.control_plane.request("POST", f"{JOBS}?dryRun=All", job)
        return status, stored

    def _ready(self) -> bool:
        # Until the manager has written the CA bundle and listens, the API server fails the
        # create (failurePolicy Fail): no Job is ever stored unmutated from here on.
        status, stored = self.mutate(probe_job())
        return status == 201 and "minAvailable" in stored["spec"]["tasks"][0]

    def stop(self, keep_workdir: bool = False) -> None:
        """Stop the manager, then drop its configuration (Job creates work unmutated again);
        the control plane may already be gone."""
        super().stop(keep_workdir)
        with contextlib.suppress(OSError):
            self.control_plane.request("DELETE", f"{CONFIGURATIONS}/{CONFIGURATION}")
