"""`pulumi up` goes past a Deployment only once its rollout is complete, with the real CLI
and provider against a local API server whose Deployment controller runs.

The provider's own Deployment await can end on a status from before the update, and the
engine then deletes what the old pods still use (a reshape's old cube layout): so every
Deployment carries kube.ROLLOUT_COMPLETE. Here a Deployment with that metadata and
serving's rollout strategy is updated while this test plays the kubelet: the old pod stays
ready and available throughout, the new one is held unready, and `up` must not end until
the test lets the new pod become ready.
"""

from __future__ import annotations

import shutil
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from components import kube
from tests.support.controlplane import api_client
from tests.support.pulumi_cli import Project, Result, temp_dir

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
kubernetes = pytest.importorskip("kubernetes")
NAMESPACE = "rollout-probe"
VERSION = "elasticctr.test/version"  # the pod template's annotation: which template a pod has

PROGRAM = textwrap.dedent(
    f'''
    """One Deployment with the program's Deployment metadata and serving's strategy."""
    import pulumi
    import pulumi_kubernetes as k8s

    from components import kube

    provider = k8s.Provider("k8s")
    namespace = k8s.core.v1.Namespace(
        "namespace", metadata={{"name": "{NAMESPACE}"}},
        opts=pulumi.ResourceOptions(provider=provider),
    )
    target = kube.KubeTarget(provider=provider, namespace="{NAMESPACE}")
    labels = {{"app": "probe"}}
    k8s.apps.v1.Deployment(
        "probe",
        metadata=target.deployment_metadata("probe", "probe"),
        spec={{
            "replicas": 1,
            "revision_history_limit": kube.REVISION_HISTORY_LIMIT,
            "selector": {{"match_labels": labels}},
            "strategy": {{"rolling_update": {{"max_unavailable": 0, "max_surge": 1}}}},
            "template": {{
                "metadata": {{
                    "labels": labels,
                    "annotations": {{"{VERSION}": pulumi.Config().require("version")}},
                }},
                # No scheduler takes the pods: the test is their kubelet.
                "spec": {{
                    "scheduler_name": "none",
                    "containers": [{{"name": "probe", "image": "probe:1"}}],
                }},
            }},
        }},
        opts=pulumi.ResourceOptions(
            provider=provider,
            depends_on=[namespace],
            custom_timeouts=pulumi.CustomTimeouts(create="3m", update="3m"),
        ),
    )
    '''
)


class Kubelet:
    """Marks ready and running every pod of the namespace whose template version is in
    `ready` (a set the test grows), from a thread, until stopped."""

    def __init__(self, api: Any) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.ready: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def pods(self) -> list[Any]:
        return list(self.core.list_namespaced_pod(NAMESPACE).items)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self._mark_ready()
            except kubernetes.client.ApiException:  # the namespace is not there yet
                continue

    def _mark_ready(self) -> None:
        for pod in self.pods():
            version = (pod.metadata.annotations or {}).get(VERSION)
            conditions = pod.status.conditions or []
            if version not in self.ready or pod.metadata.deletion_timestamp:
                continue
            if any(c.type == "Ready" and c.status == "True" for c in conditions):
                continue
            self.core.patch_namespaced_pod_status(
                pod.metadata.name,
                NAMESPACE,
                {
                    "status": {
                        "phase": "Running",
                        "conditions": [{"type": "Ready", "status": "True"}],
                    }
                },
            )


def _eventually(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def api(control_plane: Any) -> Iterator[Any]:
    with api_client(control_plane) as client:
        yield client


@pytest.fixture(scope="module")
def project(control_plane: Any, cluster_path: str) -> Iterator[Project]:
    work = temp_dir("elasticctr-e2e-rollout-")
    try:
        project = Project.create(
            work, "ci", cluster_path, kubeconfig=control_plane.kubeconfig, config={}
        )
        program = project.dir / "rollout_probe"
        program.mkdir()
        (program / "__main__.py").write_text(PROGRAM, encoding="utf-8")
        _use_program(project.dir / "Pulumi.yaml", "rollout_probe/")
        yield project
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _use_program(pulumi_yaml: Path, main: str) -> None:
    """The project file without the stack config schema, running `main`."""
    lines = pulumi_yaml.read_text(encoding="utf-8").splitlines()
    head = lines[: lines.index("config:")]
    kept = [f"main: {main}" if line.startswith("main:") else line for line in head]
    pulumi_yaml.write_text("\n".join(kept) + "\n", encoding="utf-8")


def _deployment(api: Any) -> Any:
    return kubernetes.client.AppsV1Api(api).read_namespaced_deployment("probe", NAMESPACE)


def _observed(deployment: Any) -> bool:
    return bool(deployment.status.observed_generation == deployment.metadata.generation)


def _condition(deployment: Any, kind: str) -> Any:
    return next(c for c in deployment.status.conditions or [] if c.type == kind)


def test_up_ends_only_once_the_new_pods_are_ready(project: Project, api: Any) -> None:
    with Kubelet(api) as kubelet:
        kubelet.ready.add("1")
        project.config_set("version", "1")
        project.up()
        first = _deployment(api)
        assert _condition(first, "Progressing").reason == "NewReplicaSetAvailable"
        assert first.metadata.annotations[kube.WAIT_FOR] == kube.ROLLOUT_COMPLETE

        project.config_set("version", "2")
        finished: list[Result] = []
        up = threading.Thread(target=lambda: finished.append(project.up(check=False)))
        up.start()
        try:
            # The controller has seen the update and started the new pod, which stays unready;
            # the old one is still available, so the Deployment reports Available.
            _eventually(
                lambda: any(
                    (p.metadata.annotations or {}).get(VERSION) == "2" for p in kubelet.pods()
                ),
                "the new template's pod",
            )
            _eventually(lambda: _observed(_deployment(api)), "the controller to see the update")
            time.sleep(5)
            rolling = _deployment(api)
            assert _condition(rolling, "Available").status == "True"
            assert _condition(rolling, "Progressing").reason != "NewReplicaSetAvailable"
            assert up.is_alive() and not finished, finished and finished[0].describe()

            kubelet.ready.add("2")
        finally:
            up.join(timeout=180)
        (result,) = finished
        assert result.returncode == 0, result.describe()
        done = _deployment(api)
        assert _condition(done, "Progressing").reason == "NewReplicaSetAvailable"
        versions = {(p.metadata.annotations or {}).get(VERSION) for p in kubelet.pods()}
        assert versions == {"2"}
