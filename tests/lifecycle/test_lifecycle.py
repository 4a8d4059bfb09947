"""The ElasticCTR lifecycle in pods, on the local cluster, as a user runs it: data in with
the client's `upload`, the offline job trained by Volcano on the user's own network (the
session's stack ships one: tests/support/cluster.py), version 1 rolled out by cube and
served as trainer 0 predicted it, `predict`/`status`/`logs`, then changes under a load generator's requests: a
rescale to 3 trainers with a second pass, cube_shards 2 -> 3 -> 2, pservers 1 -> 2 with a
third pass (none may fail a request), pods deleted, a bad data hour, online mode. The
phases run in order on the session's stack; each is timed (printed, and written to
$ELASTICCTR_LIFECYCLE_REPORT when set).
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import grpc_client
from tests.support.cluster import EVAL_PATH, LocalStack, pods, unschedulable, wait_for
from tests.support.lifecycle import (
    HELDOUT,
    HOURS,
    START,
    LoadGenerator,
    Timings,
    generate_argv,
    get_json,
    instances_of,
    pod_ip,
    podgroups_of,
    port_forward,
    run_module,
    run_until_interrupted,
    service_url,
    try_json,
    volcano_job,
    workload_env,
)
from tests.support.trainer import RECOVERY_GAP_CLOSED

pytestmark = [pytest.mark.cluster, pytest.mark.lifecycle, pytest.mark.slow]
NS = LocalStack.NAMESPACE
JOB = "elasticctr-train"


class Lifecycle:
    """What the phases hand on: the stack, the generated data, the timings."""

    def __init__(self, stack: LocalStack, work: Path) -> None:
        self.stack, self.work = stack, work
        self.timings = Timings()
        self.truth: dict[str, Any] = {}
        self.token: str | None = None
        self.failed = False

    def done(self, phase: str, started: float) -> None:
        self.timings.phase(phase, started)
        self.failed = False

    def urls(self) -> dict[str, str]:
        return {
            "serving": service_url(self.stack, "serving"),
            "transfer": service_url(self.stack, "cube-transfer"),
        }

    def heldout(self) -> Path:
        return self.work / "data" / "heldout" / "part-00000"

    def job_done(self) -> dict[str, Any] | None:
        job = volcano_job(self.stack, JOB)
        phase = (job or {}).get("status", {}).get("state", {}).get("phase")
        assert phase not in ("Failed", "Aborted", "Terminated"), f"the job ended {phase}"
        return job if phase == "Completed" else None

    def committed(self, version: int) -> dict[str, Any] | None:
        status = try_json(f"{self.urls()['transfer']}/status")
        return status if status and status.get("committed") == version else None

    def serving_version(self) -> int | None:
        status = try_json(f"{self.urls()['serving']}/status", self.token)
        return status.get("version") if status else None


@pytest.fixture(scope="module")
def life(local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Any:
    state = Lifecycle(local_stack, tmp_path_factory.mktemp("lifecycle"))
    outputs = local_stack.project.run("stack", "output", "--json", "--show-secrets").json()
    state.token = outputs.get("serving_token") or None
    yield state
    print(f"\n[lifecycle] phases (s): {state.timings.phases}\n[lifecycle] {state.timings.figures}")
    report = os.environ.get("ELASTICCTR_LIFECYCLE_REPORT")
    if report:
        state.timings.report(Path(report))


@pytest.fixture(autouse=True)
def in_order(life: Lifecycle) -> Any:
    """A phase after a failed one would only fail for that reason: it is skipped instead.
    A phase counts as passed once it reaches `life.done`."""
    if life.failed:
        pytest.skip("an earlier lifecycle phase failed")
    life.failed = True
    yield


def test_1_data_in(life: Lifecycle) -> None:
    started = time.monotonic()
    data = life.work / "data"
    generated = run_module("elasticctr_trainer", *generate_argv(data))
    life.truth = json.loads(generated.stdout.strip().splitlines()[-1])
    assert (data / "slot.conf").read_text().split() == Path("stacks/slot.txt").read_text().split()
    from elasticctr_common.storage import open_store

    # The held-out set first: trainer 0 evaluates every version on it (training.eval_path).
    namenode = pod_ip(life.stack, "app.kubernetes.io/component=hdfs-namenode")
    heldout = open_store(f"hdfs://{namenode}:8020{EVAL_PATH}")
    heldout.write_bytes(life.heldout().name, life.heldout().read_bytes())
    uploaded = _upload(life, data / "train")
    assert f"{HOURS} hours ready" in uploaded.stdout + uploaded.stderr, uploaded.stderr
    life.done("1 data in", started)


def _upload(life: Lifecycle, hours: Path) -> subprocess.CompletedProcess:
    """The client's `upload` of `hours` (YYYYMMDD/HH directories) into the in-cluster HDFS,
    at the namenode's pod address: the host is not in the cluster's DNS; the datanode it
    names is a pod address too, which the node routes to."""
    namenode = pod_ip(life.stack, "app.kubernetes.io/component=hdfs-namenode")
    return run_module(
        "elasticctr_client", "upload", str(hours), "--dest", f"hdfs://{namenode}:8020/train_data"
    )


def test_2_train(life: Lifecycle) -> None:
    started = time.monotonic()
    stack = life.stack
    job = wait_for(lambda: volcano_job(stack, JOB), 60, "the Volcano Job")
    groups = podgroups_of(stack, job["metadata"]["uid"])
    assert len(groups) == 1 and groups[0]["spec"]["minMember"] == 3  # 1 pserver + 2 trainers
    running = wait_for(
        lambda: (
            podgroups_of(stack, job["metadata"]["uid"])[0]["status"].get("phase")
            in ("Running", "Completed")
            or None
        ),
        300,
        "the PodGroup to run (gang-scheduled)",
    )
    assert running
    done = wait_for(life.job_done, 900, "the offline job to complete", interval=5)
    assert done["status"]["state"]["phase"] == "Completed"
    # Every trainer exits 0; Volcano's CompleteJob (trainers done) deletes a pserver still
    # shutting down after trainer 0 stopped it, so a pserver pod, when left, exited 0.
    assert done["status"].get("failed", 0) == 0, done["status"]
    members = pods(stack.api(), NS, f"volcano.sh/job-name={JOB}")
    trainers = [p for p in members if "-trainer-" in p.metadata.name]
    assert len(trainers) == 2, [p.metadata.name for p in members]
    for pod in members:
        for status in pod.status.container_statuses:
            terminated = status.state.terminated
            assert terminated and terminated.exit_code == 0, (pod.metadata.name, status.state)
    # The trainers' metrics in MLflow, read through its REST API.
    with port_forward(stack, "svc/mlflow", 5000) as mlflow:
        experiment = get_json(
            f"{mlflow}/api/2.0/mlflow/experiments/get-by-name?experiment_name={JOB}"
        )["experiment"]
        runs = _search_runs(mlflow, experiment["experiment_id"])
    # Each trainer's run has its metrics. A job Volcano restarted (a pod failed) leaves the
    # earlier attempt's runs too: counted and reported with the job's events, first.
    restarts = done["status"].get("retryCount", 0)
    life.timings.figures["job restarts"] = restarts
    if restarts or len(runs) > 2:
        print(f"\n[lifecycle] the job restarted: {len(runs)} runs; events: {_events(stack)}")
    with_metrics = {
        r["info"]["run_name"]: {m["key"] for m in r["data"].get("metrics", [])}
        for r in runs
        if r["info"]["status"] == "FINISHED" and r["data"].get("metrics")
    }
    assert sorted(with_metrics) == ["trainer-0", "trainer-1"], [
        (r["info"]["run_name"], r["info"]["status"]) for r in runs
    ]
    for name, keys in with_metrics.items():
        assert {"auc", "loss"} <= keys, (name, keys)
    if not restarts:  # a restart after pass 1 resumes its checkpoint: no prior to set
        # The Job started before the upload: trainer 0 waited for the data before pushing
        # the dense parameters, so the new model's logit starts at its click rate.
        (prior,) = _trainer0_events(life, "prior")
        assert prior["applied"] and prior["hours"] and 0 < prior["click_rate"] < 1, prior
    life.done("2 train (data in HDFS to the job complete)", started)


def _events(stack: LocalStack) -> list[str]:
    from kubernetes import client

    events = client.CoreV1Api(stack.api()).list_namespaced_event(NS).items
    return [
        f"{e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}"
        for e in events
        if e.type == "Warning" or e.involved_object.kind == "Job"
    ]


def _search_runs(mlflow: str, experiment_id: str) -> list[dict[str, Any]]:
    import urllib.request

    body = json.dumps({"experiment_ids": [experiment_id], "max_results": 100}).encode()
    request = urllib.request.Request(
        f"{mlflow}/api/2.0/mlflow/runs/search", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return list(json.loads(response.read()).get("runs", []))


def test_3_roll_out_and_predict(life: Lifecycle) -> None:
    started = time.monotonic()
    wait_for(lambda: life.committed(1), 300, "cube to commit version 1 on every shard")
    wait_for(lambda: life.serving_version() == 1, 300, "serving to load version 1")
    life.timings.phase("3a roll out version 1 (job complete to serving it)", started)
    urls = life.urls()
    token_args = ["--token", life.token] if life.token else []
    answers = life.work / "predictions.tsv"
    predicted = run_module(
        "elasticctr_client", *token_args, "predict", str(life.heldout()),
        "--serving-url", urls["serving"], "--no-progress", "--output", str(answers),
    )  # fmt: skip
    auc = float(predicted.stdout.split("AUC: ")[1].split()[0])
    bayes = float(life.truth["heldout_bayes_auc"])
    # The user's network and a crossed pair, served with no change to serving or the
    # client: each held-out example's probability is trainer 0's own prediction for it
    # (its evaluation of version 1).
    served = np.loadtxt(answers, usecols=(2, 3), ndmin=2)
    trainer = np.loadtxt(io.StringIO(_model_file(life, "1/eval/predictions.txt")), ndmin=1)
    meta = json.loads(_model_file(life, "1/dense/meta.json"))
    difference = float(np.max(np.abs(served[:, 0] - trainer))) if len(trainer) else None
    life.timings.figures["auc"] = {
        "model": auc, "bayes_optimal": round(bayes, 4), "network": meta["network_module"],
        "trainer_eval_auc": meta.get("eval_auc"), "served_vs_trainer_max_abs": difference,
    }  # fmt: skip
    assert "model version 1" in predicted.stdout
    assert meta["model"] == "custom" and meta["crosses"] == [[1, 2]], meta
    assert len(served) == len(trainer) == HELDOUT and set(served[:, 1]) == {1}
    assert difference is not None and difference <= 1e-5, difference
    assert auc >= bayes - 0.03, f"AUC {auc:.4f}, Bayes-optimal {bayes:.4f}"
    _grpc_scores_are_predicts(life, urls["serving"])
    with port_forward(life.stack, "svc/mlflow", 5000) as mlflow:
        status = run_module(
            "elasticctr_client", *token_args, "status", "--json", "--mlflow-url", mlflow,
            "--serving-url", urls["serving"], "--transfer-url", urls["transfer"],
            "--experiment", JOB,
        )  # fmt: skip
    report = json.loads(status.stdout)
    assert _versions_in(report) == {1}, report  # cube and serving agree on version 1
    lines = _logs(life)
    assert any(line.startswith("[trainer-0]") for line in lines), lines[:20]
    assert any(line.startswith("[transfer]") for line in lines), lines[:20]
    life.done("3 roll out and predict", started)


def _grpc_scores_are_predicts(life: Lifecycle, serving: str) -> None:
    """The Open Inference Protocol over gRPC through the Service's port `grpc` (its
    NetworkPolicy opens it as it opens HTTP's): Triton's client gets /predict's scores."""
    from tests.support.serving import http

    lines = life.heldout().read_text().splitlines()[:20]
    plain = [{e["slot_name"]: e["feasigns"] for e in i["slots"]} for i in instances_of(lines)]
    auth = {"Authorization": f"Bearer {life.token}"} if life.token else {}
    code, body, _ = http("POST", serving + "/predict", {"instances": plain}, headers=auth)
    assert code == 200, body
    address = service_url(life.stack, "serving", "grpc").removeprefix("http://")
    lines_input = {"name": "lines", "datatype": "BYTES", "shape": [len(lines)], "data": lines}
    (answer,) = grpc_client.run(
        address, life.token, [{"op": "infer", "model": "elasticctr", "inputs": [lines_input]}]
    )
    assert "probability" in answer, answer
    np.testing.assert_allclose(answer["probability"], body["predictions"], rtol=0, atol=1e-6)


def _versions_in(report: Any) -> set[int]:
    """Every integer under a key named like a version, anywhere in `status --json`."""
    found: set[int] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if ("version" in key or key == "committed") and isinstance(value, int):
                    found.add(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(report)
    return found


def _logs(life: Lifecycle, tail: int = 20) -> list[str]:
    """`logs` for a while against the cluster (kubeconfig, namespace, job), then Ctrl-C."""
    kubeconfig = str(life.stack.cluster.kubeconfig)
    return run_until_interrupted(
        "elasticctr_client", "logs", "--namespace", NS, "--job", JOB,
        "--kubeconfig", kubeconfig, "--tail", str(tail), "--wait", "10",
        after=15,
    ).splitlines()  # fmt: skip


def test_4_rescale_under_load(life: Lifecycle) -> None:
    started = time.monotonic()
    lines = life.heldout().read_text().splitlines()[:32]
    load = LoadGenerator(life.urls()["serving"], life.token, instances_of(lines)).start()
    try:
        _up(life, trainers="3", **{"training.passes": "2"})
        job = wait_for(
            lambda: (
                (j := volcano_job(life.stack, JOB)) and j["spec"]["tasks"][1]["replicas"] == 3 and j
            ),
            120,
            "the replaced job with 3 trainers",
        )
        assert job["spec"]["minAvailable"] == 4
        wait_for(life.job_done, 900, "the rescaled job to complete", interval=5)
        wait_for(lambda: life.committed(2), 300, "cube to commit version 2")
        wait_for(lambda: life.serving_version() == 2, 300, "serving to load version 2")
        time.sleep(3)  # requests answered by version 2
    finally:
        load.stop()
    life.timings.figures["requests during rescale"] = load.summary()
    members = pods(life.stack.api(), NS, f"volcano.sh/job-name={JOB}")
    assert len([p for p in members if "-trainer-" in p.metadata.name]) == 3
    resumed = _trainer0_events(life, "resume")
    assert resumed and resumed[-1]["after_pass"] == 1, resumed
    # The pass counter goes on: the new job trained pass 2 only.
    assert {e["step"] for e in _trainer0_events(life, "metrics")} == {2}
    assert load.failed == 0 and load.ok > 0, load.summary()
    assert load.versions >= {1, 2}, load.versions
    life.done("4 rescale to 3 trainers, pass 2, version 2 served", started)


def test_4b_cube_shards_up_and_down_under_load(life: Lifecycle) -> None:
    """`pulumi config set cube_shards 3`, `up`, then back to 2, while the load generator
    runs: each time a new layout of shard pods is built and loaded beside the old one,
    serving moves to it, and the old one is deleted (docs/cube.md, "Reshaping")."""
    from kubernetes import client

    started = time.monotonic()
    apps = client.AppsV1Api(life.stack.api())
    lines = life.heldout().read_text().splitlines()[:32]
    load = LoadGenerator(life.urls()["serving"], life.token, instances_of(lines)).start()
    seconds: dict[str, float] = {}
    try:
        wait_for(lambda: load.ok > 10, 60, "requests answered before the change")
        for shards in (3, 2):
            began = time.monotonic()
            _up(life, cube_shards=str(shards))
            seconds[f"cube_shards -> {shards}"] = round(time.monotonic() - began, 1)
            layout = _outputs(life)["cube_layout"]
            # `up` returned once serving had moved and the old layout's deletion was
            # requested (not awaited: its pods go within their grace period).
            expected = [f"cube-{layout}-{s}" for s in range(shards)]
            wait_for(
                lambda: _cube_statefulsets(apps) == expected,  # noqa: B023
                120,
                f"only layout {layout}'s StatefulSets {expected}",
            )
            # The transfer's new pod is ready; the Service's route to it may lag a moment.
            transfer = wait_for(
                lambda: try_json(f"{life.urls()['transfer']}/status"),
                60,
                "the cube-transfer Service to answer",
            )
            assert (transfer["shards"], transfer["committed"]) == (shards, 2), transfer
            assert transfer["layout"] == {"dir": f"shards-{shards}", "ready": True}, transfer
            # The old serving pods drain (they still answer, on the old layout) until the
            # Service's route forgets them: wait for only the new ones to answer.
            wait_for(
                lambda: _serving_on(life, 2, shards),  # noqa: B023
                120,
                f"serving's Service to answer with version 2 on {shards} shards",
            )
            ok = load.ok
            wait_for(lambda: load.ok > ok + 10, 60, "requests answered on the new layout")  # noqa: B023
    finally:
        load.stop()
    life.timings.figures["requests during cube_shards 2 -> 3 -> 2"] = load.summary()
    life.timings.figures["cube reshape up (s)"] = seconds
    assert load.failed == 0 and load.ok > 0, load.summary()
    life.done("4b cube_shards 2 -> 3 -> 2 under load", started)


def test_4c_pservers_up_under_load(life: Lifecycle) -> None:
    """`pulumi config set pservers 2` with a third pass: the Job is replaced, its two
    pservers reshard the one-pserver checkpoint of pass 2 (every row to the pserver that
    now owns its key) and pass 3 trains on; serving answers throughout."""
    started = time.monotonic()
    lines = life.heldout().read_text().splitlines()[:32]
    load = LoadGenerator(life.urls()["serving"], life.token, instances_of(lines)).start()
    try:
        old = volcano_job(life.stack, JOB)
        assert old is not None
        _up(life, pservers="2", **{"training.passes": "3"})
        job = _replaced(life, old["metadata"]["uid"])
        assert job["spec"]["tasks"][0]["replicas"] == 2, job["spec"]["tasks"]
        # Read while the Job runs: once its trainers are done Volcano kills the pservers,
        # and their pods (and logs) go with them.
        for pod in (f"{JOB}-pserver-0", f"{JOB}-pserver-1"):
            wait_for(
                functools.partial(_logged, life, pod, "(taken with 1 pservers, resharded to 2)"),
                600,
                f"{pod} to load the resharded checkpoint",
            )
        done = wait_for(life.job_done, 900, "the job with 2 pservers to complete", interval=5)
        # A pod failed on a loaded machine makes Volcano restart the Job once: it resumes
        # from the same resharded checkpoint (asserted below), reported with the events.
        restarts = done["status"].get("retryCount", 0)
        life.timings.figures["job restarts (4c)"] = restarts
        if restarts:
            print(f"\n[lifecycle] 4c: the job restarted {restarts}x; events: {_events(life.stack)}")
        assert restarts <= 1, (done["status"], _events(life.stack))
        wait_for(lambda: life.committed(3), 300, "cube to commit version 3")
        wait_for(lambda: life.serving_version() == 3, 300, "serving to load version 3")
    finally:
        load.stop()
    life.timings.figures["requests during pservers 1 -> 2"] = load.summary()
    resumed = _trainer0_events(life, "resume")
    assert resumed and resumed[-1]["after_pass"] == 2, resumed
    assert _trainer0_events(life, "resharded"), "trainer 0 logged no reshard"
    assert {e["step"] for e in _trainer0_events(life, "metrics")} == {3}
    assert load.failed == 0 and load.ok > 0, load.summary()
    life.done("4c pservers 1 -> 2, pass 3 resumed from the resharded checkpoint", started)


def test_4d_a_second_up_changes_nothing(life: Lifecycle) -> None:
    """After the changes above, the stack as it stands previews no change and a second
    `up` keeps the Job (what Volcano's webhook and the API server store is what was sent)."""
    started = time.monotonic()
    job = volcano_job(life.stack, JOB)
    assert job is not None
    preview = life.stack.project.run("preview", "--diff", "--expect-no-changes", check=False)
    assert preview.returncode == 0, preview.describe()
    up = life.stack.project.run("up", "--yes", "--expect-no-changes", check=False)
    assert up.returncode == 0, up.describe()
    after = volcano_job(life.stack, JOB)
    assert after is not None and after["metadata"]["uid"] == job["metadata"]["uid"]
    life.done("4d a no-op preview and up change nothing", started)


def _pod_log(life: Lifecycle, pod: str) -> str:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        return str(client.CoreV1Api(life.stack.api()).read_namespaced_pod_log(pod, NS) or "")
    except ApiException:  # gone with its Job, or never started
        return ""


def _logged(life: Lifecycle, pod: str, text: str) -> bool:
    return text in _pod_log(life, pod)


def _loaded_chains(core: Any, pod: str) -> dict[int, list[int]]:
    """version -> the chain (base, deltas) its cube-server logged loading."""
    log = core.read_namespaced_pod_log(pod, NS, container="server") or ""
    chains = {}
    for match in re.finditer(r"loaded version (\d+) \(chain \[([\d, ]*)\]\)", log):
        chains[int(match[1])] = [int(v) for v in match[2].split(",") if v.strip()]
    return chains


def _ready_pod(core: Any, pod: str, old_uid: str) -> bool:
    from kubernetes.client.rest import ApiException

    try:
        found = core.read_namespaced_pod(pod, NS)
    except ApiException:
        return False
    conditions = found.status.conditions or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return bool(found.metadata.uid != old_uid and ready)


def _serving_on(life: Lifecycle, version: int, shards: int) -> bool:
    """Whether ten status reads in a row through serving's Service all say `version` on
    `shards` shards (the Service spreads them over every pod it still routes to)."""
    for _ in range(10):
        status = try_json(f"{life.urls()['serving']}/status", life.token)
        if not status or (status["version"], status["cube"]["shards"]) != (version, shards):
            return False
    return True


def _cube_statefulsets(apps: Any) -> list[str]:
    return sorted(
        s.metadata.name
        for s in apps.list_namespaced_stateful_set(
            NS, label_selector="app.kubernetes.io/component=cube"
        ).items
    )


def _outputs(life: Lifecycle) -> dict[str, Any]:
    return dict(life.stack.project.run("stack", "output", "--json").json())


def _registered_partitions(life: Lifecycle) -> dict[int, list[str]]:
    """{version: the partitions it trained on} of every version in MLflow's model registry
    (the training job's registered model), read with MLflow's own client."""
    from elasticctr_common.registry import VERSION_TAG
    from mlflow.tracking import MlflowClient

    with port_forward(life.stack, "svc/mlflow", 5000) as mlflow:
        registered = MlflowClient(mlflow).search_model_versions(f"name='{JOB}'")
    return {
        int(v.tags[VERSION_TAG]): [p for p in v.tags.get("partitions", "").split(",") if p]
        for v in registered
        if VERSION_TAG in v.tags
    }


def _trainer0_events(life: Lifecycle, event: str) -> list[dict[str, Any]]:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    try:
        text = client.CoreV1Api(life.stack.api()).read_namespaced_pod_log(f"{JOB}-trainer-0", NS)
    except ApiException:  # not there yet, or its container not started: nothing logged
        return []
    found = []
    marker = f'{{"event": "{event}"'
    for line in (text or "").splitlines():  # glog's stderr may share a line with ours
        if marker in line:
            found.append(json.JSONDecoder().raw_decode(line[line.index(marker) :])[0])
    return found


def _delete_under_load(life: Lifecycle, selector: str, ready: Any) -> dict[str, Any]:
    """Delete the pod of `selector` while the load generator runs; the failed requests,
    and how long until `ready(uid of the deleted pod)` and requests succeed again."""
    from kubernetes import client

    lines = life.heldout().read_text().splitlines()[:32]
    load = LoadGenerator(life.urls()["serving"], life.token, instances_of(lines)).start()
    try:
        time.sleep(3)
        before = load.ok
        assert before > 0 and load.failed == 0, load.summary()
        pod = pods(life.stack.api(), NS, selector)[0]
        victim = pod.metadata.name
        deleted = time.monotonic()
        client.CoreV1Api(life.stack.api()).delete_namespaced_pod(victim, NS)
        wait_for(lambda: ready(pod.metadata.uid), 300, f"{selector} back", interval=0.5)
        ok_at_recovery = load.ok
        wait_for(lambda: load.ok > ok_at_recovery + 10, 120, "requests answered again", 0.2)
        recovered = round(time.monotonic() - deleted, 1)
    finally:
        load.stop()
    return {**load.summary(), "victim": victim, "recovered_after_s": recovered}


def test_6a_serving_pod_deleted_under_load(life: Lifecycle) -> None:
    """The Deployment replaces it and the Service recovers (one replica here: the requests
    in between fail, counted; more replicas and a disruption budget avoid that)."""
    started = time.monotonic()
    selector = "app.kubernetes.io/component=serving"

    def replaced_and_ready(deleted_uid: str) -> bool:
        return any(
            p.metadata.uid != deleted_uid
            and p.metadata.deletion_timestamp is None
            and all(c.ready for c in p.status.container_statuses or [])
            and p.status.phase == "Running"
            and life.serving_version() == 3
            for p in pods(life.stack.api(), NS, selector)
        )

    result = _delete_under_load(life, selector, replaced_and_ready)
    life.timings.figures["serving pod deleted"] = result
    assert result["ok"] > 0
    life.done("6a serving pod deleted under load", started)


def test_6b_cube_shard_pod_deleted_under_load(life: Lifecycle) -> None:
    """The StatefulSet recreates the shard's pod, its agent reloads the committed version
    (one replica per shard here: lookups of that shard fail meanwhile, counted)."""
    started = time.monotonic()
    # Shard 0's one pod (one replica here), whatever its layout's name.
    selector = "app.kubernetes.io/component=cube,elasticctr.io/cube-shard=0"

    def shard_back(deleted_uid: str) -> bool:  # the same name again, a new pod
        found = [p for p in pods(life.stack.api(), NS, selector) if p.metadata.uid != deleted_uid]
        return bool(found) and all(c.ready for c in found[0].status.container_statuses or [])

    result = _delete_under_load(life, selector, shard_back)
    life.timings.figures["cube shard pod deleted"] = result
    assert life.committed(3), "the transfer's committed version changed"
    life.done("6b cube shard pod deleted under load", started)


def _up(life: Lifecycle, **config: str) -> None:
    for key, value in config.items():
        life.stack.project.config_set(key, value, path="." in key)
    life.stack.project.run("up", "--yes", "--skip-preview", timeout=1200)


def _replaced(life: Lifecycle, old_uid: str) -> dict[str, Any]:
    return dict(
        wait_for(
            lambda: (j := volcano_job(life.stack, JOB)) and j["metadata"]["uid"] != old_uid and j,
            120,
            "the replaced job",
        )
    )


def test_6c_pserver_deleted_mid_pass(life: Lifecycle) -> None:
    """Volcano restarts the whole Job; it resumes after the last checkpoint (pass 3) and
    trains pass 4; version 4 reaches serving."""
    from kubernetes import client

    started = time.monotonic()
    old = volcano_job(life.stack, JOB)
    assert old is not None
    _up(life, **{"training.passes": "4"})
    job = _replaced(life, old["metadata"]["uid"])
    wait_for(
        lambda: any(e["pass"] == 4 for e in _trainer0_events(life, "pass_start")),
        600,
        "trainer 0 to start pass 4",
        interval=0.5,
    )
    deleted = time.monotonic()
    # At once, as a node would lose it (a graceful delete leaves it serving for its grace
    # period, long enough for the pass to finish).
    client.CoreV1Api(life.stack.api()).delete_namespaced_pod(
        f"{JOB}-pserver-0", NS, grace_period_seconds=0
    )
    done = wait_for(life.job_done, 900, "the restarted job to complete", interval=5)
    assert done["metadata"]["uid"] == job["metadata"]["uid"]
    assert done["status"].get("retryCount", 0) >= 1, done["status"]  # Volcano restarted it
    resumed = _trainer0_events(life, "resume")
    assert resumed and resumed[-1]["after_pass"] == 3, resumed
    assert {e["step"] for e in _trainer0_events(life, "metrics")} == {4}
    wait_for(lambda: life.committed(4), 300, "cube to commit version 4")
    wait_for(lambda: life.serving_version() == 4, 300, "serving to load version 4")
    life.timings.figures["pserver deleted mid-pass"] = {
        "restarts": done["status"].get("retryCount"),
        "version_4_served_after_s": round(time.monotonic() - deleted, 1),
    }
    life.done("6c pserver deleted mid-pass", started)


def test_6d_bad_data_hour_ends_the_job_and_serving_keeps_its_version(life: Lifecycle) -> None:
    """An hour with more bad lines than max_bad_line_fraction: the Job ends (exit code 3,
    TerminateJob, no retry), version 4 keeps serving, and `logs` names the file (from the
    failed trainer's pod, which Volcano keeps)."""
    started = time.monotonic()
    bad_hour = "20191221/06"
    hour_dir = life.work / "bad" / bad_hour
    hour_dir.mkdir(parents=True)
    good = life.heldout().read_text().splitlines()[:1000]
    garbage = [f"not an ElasticCTR line {i}" for i in range(5000)]  # > 1% of the lines
    (hour_dir / "part-00000").write_text("\n".join(good + garbage) + "\n")
    (hour_dir / "donefile").write_text("")
    _upload(life, life.work / "bad")
    old = volcano_job(life.stack, JOB)
    assert old is not None
    # A pass of the bad hour alone: the threshold is judged once the pass's data is read.
    _up(life, **{"data.start": bad_hour, "data.end": bad_hour, "training.passes": "5"})
    _replaced(life, old["metadata"]["uid"])

    def ended() -> dict[str, Any] | None:
        job = volcano_job(life.stack, JOB) or {}
        phase = job.get("status", {}).get("state", {}).get("phase")
        return job if phase in ("Terminated", "Failed", "Aborted", "Completed") else None

    job = wait_for(ended, 900, "the job to end on the bad hour", interval=5)
    ended_after = round(time.monotonic() - started, 1)
    assert job["status"]["state"]["phase"] == "Terminated", job["status"]
    assert job["status"].get("retryCount", 0) == 0, job["status"]  # not retried
    exit_codes = {
        p.metadata.name: s.state.terminated.exit_code
        for p in pods(life.stack.api(), NS, f"volcano.sh/job-name={JOB}")
        for s in p.status.container_statuses or []
        if s.state.terminated
    }
    failed = [name for name, code in exit_codes.items() if code == 3]
    assert failed, exit_codes
    assert life.committed(4) and life.serving_version() == 4
    lines = _logs(life, tail=300)
    named = [line for line in lines if f"{bad_hour}/part-00000" in line]
    assert named, lines[-30:]
    life.timings.figures["bad data hour"] = {
        "job": job["status"]["state"]["phase"],
        "exit_codes": exit_codes,
        "ended_after_s": ended_after,
        "logs": named[0][:200],
    }
    life.done("6d bad data hour", started)


def test_5_online_mode_follows_a_new_hour(life: Lifecycle) -> None:
    """A stack switched to online mode: its Job waits for the next hour's donefile, trains
    it when it appears and the new version reaches serving, with no command in between.
    After the offline phases: an online Job runs for good."""
    started = time.monotonic()
    new_hour = "20191221/07"
    old = volcano_job(life.stack, JOB)
    assert old is not None
    _up(life, **{"training.mode": "online", "training.passes": "1", "data.start": new_hour})
    _replaced(life, old["metadata"]["uid"])
    wait_for(
        lambda: (volcano_job(life.stack, JOB) or {}).get("status", {}).get("running") == 5,
        300,
        "the online job running (2 pservers + 3 trainers), waiting for its hour",
    )
    out = life.work / "online"
    run_module(
        "elasticctr_trainer", "generate", "--out", f"file://{out}", "--slots", "26",
        "--first-slot", "1", "--vocab", "50", "--start", new_hour, "--hours", "1",
        "--examples-per-hour", "5000", "--files-per-hour", "1", "--heldout", "0",
    )  # fmt: skip
    uploaded = time.monotonic()
    _upload(life, out / "train")
    wait_for(lambda: life.committed(5), 600, "cube to commit the new hour's version 5")
    wait_for(lambda: life.serving_version() == 5, 300, "serving to load version 5")
    life.timings.figures["online: donefile to version served (s)"] = round(
        time.monotonic() - uploaded, 1
    )
    passes = _trainer0_events(life, "pass_start")
    assert [(e["pass"], e["hours"]) for e in passes] == [(5, [new_hour])], passes
    life.done("5 online: a new hour trained and served", started)


# The feedback phase: minute partitions, clicks joined for 15 s after a partition's end,
# the simulator's traffic for 4 minutes (64 impressions a second) with the joiner's pod
# deleted at 40 s and Kafka's at 90 s, its truth drifting at 30 s: the partitions after
# Kafka's outage are all drifted traffic, and their versions serve before the end.
# bench/feedback_freshness.py runs it with longer partitions and traffic.
FEEDBACK_MINUTES = int(os.environ.get("ELASTICCTR_LIFECYCLE_FEEDBACK_MINUTES", "1"))
FEEDBACK_SECONDS = int(os.environ.get("ELASTICCTR_LIFECYCLE_FEEDBACK_SECONDS", "240"))
FEEDBACK_QPS = float(os.environ.get("ELASTICCTR_LIFECYCLE_FEEDBACK_QPS", "4"))
FEEDBACK_BATCH = int(os.environ.get("ELASTICCTR_LIFECYCLE_FEEDBACK_BATCH", "16"))
FEEDBACK_DRIFT_AT = float(os.environ.get("ELASTICCTR_LIFECYCLE_FEEDBACK_DRIFT_AT", "30"))
KILL_JOINER_AT, KILL_KAFKA_AT = 40, 90


def _simulator(
    life: Lifecycle, seconds: int, record: Path, *more: str, qps: float = 4, batch: int = 4
) -> subprocess.Popen[str]:
    """The simulator's users on the session's truth through serving's Service: `qps`
    requests a second of `batch` instances, clicks 3 s after on average; every impression
    in `record`."""
    record.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "elasticctr_trainer", "simulate",
         "--serving-url", life.urls()["serving"], "--token", life.token or "",
         "--truth", str(life.work / "data" / "truth.json"),
         "--seconds", str(seconds), "--qps", str(qps), "--batch", str(batch),
         "--click-delay", "3", "--record", str(record), *more],
        env=workload_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_7_feedback_loop_in_pods(life: Lifecycle) -> None:
    """`feedback.enabled` on the online stack: the simulator's predictions and clicks
    through serving become minute partitions in HDFS, every impression exactly once
    across a joiner pod and the Kafka pod deleted mid-run; the online Job trains them and
    serving moves on to their versions, which come back towards the truth after it drifts
    (docs/feedback.md)."""
    from collections import Counter
    from datetime import UTC, datetime

    from elasticctr_common.feedback import (
        JOINER_PORT,
        freshness,
        next_partition,
        partition_done,
        partition_of,
    )
    from elasticctr_common.storage import open_store
    from kubernetes import client

    started = time.monotonic()
    # The stack file names Kafka's stand-in; the cluster loads it as a user would.
    subprocess.run(
        [sys.executable, "tools/images.py", "import", "--stack", "local", "--address",
         str(life.stack.cluster.layout.containerd_socket), "kafka"],
        check=True, capture_output=True, timeout=900,
    )  # fmt: skip
    old = volcano_job(life.stack, JOB)
    assert old is not None
    before = life.serving_version() or 0
    hour = datetime.now(UTC).strftime("%Y%m%d/%H")
    _up(
        life,
        **{
            # The 2-core node has no room for Kafka and the joiner beside 3 trainers and 2
            # pservers: a gang waiting for room takes the first pod's that frees (a deleted
            # joiner's or Kafka's), which then stays Pending.
            "trainers": "2",
            "pservers": "1",
            "training.mode": "online",
            "training.passes": "1",
            "feedback.enabled": "true",
            "feedback.partition_minutes": str(FEEDBACK_MINUTES),
            "feedback.join_window": "15",
            # A minute of this small table's traffic touches most of its keys: without this
            # each delta would be compacted into a base at once (real tables change ~1%).
            "cube.max_chain_fraction": "10",
            "data.start": hour,
        },
    )
    online = _replaced(life, old["metadata"]["uid"])
    core = client.CoreV1Api(life.stack.api())
    everything_placed = functools.partial(unschedulable, life.stack.api(), NS)
    wait_for(
        lambda: (
            (groups := podgroups_of(life.stack, online["metadata"]["uid"]))
            and groups[0]["status"].get("phase") == "Running"
        ),
        300,
        "the online job gang-scheduled beside Kafka and the joiner",
        explain=everything_placed,
    )
    record = life.work / "feedback" / "impressions.jsonl"
    sim = _simulator(
        life, FEEDBACK_SECONDS, record, "--late-share", "0.1", "--late-after", "90",
        "--drift-at", str(FEEDBACK_DRIFT_AT), qps=FEEDBACK_QPS, batch=FEEDBACK_BATCH,
    )  # fmt: skip
    began = time.monotonic()
    try:
        for at, selector in (
            (KILL_JOINER_AT, "app.kubernetes.io/component=joiner"),
            (KILL_KAFKA_AT, "app.kubernetes.io/component=kafka"),
        ):
            time.sleep(max(0.0, at - (time.monotonic() - began)))
            assert sim.poll() is None, sim.communicate()
            (pod,) = pods(life.stack.api(), NS, selector)
            core.delete_namespaced_pod(pod.metadata.name, NS)
        out, err = sim.communicate(timeout=FEEDBACK_SECONDS + 600)
    finally:
        if sim.poll() is None:
            sim.kill()
            sim.wait()
    assert sim.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(sent) > 500, summary

    # Serving's buffer drains; the joiner closes the partition after the last one written
    # to (a late impression of a closed partition goes to the next).
    wait_for(
        lambda: (
            (s := try_json(f"{life.urls()['serving']}/status", life.token))
            and s["feedback"]["waiting"] == 0
        ),
        300,
        "serving's impressions delivered",
    )
    namenode = pod_ip(life.stack, "app.kubernetes.io/component=hdfs-namenode")
    dataset = open_store(f"hdfs://{namenode}:8020/train_data")
    first = partition_of(min(r["t"] for r in sent), FEEDBACK_MINUTES)
    last = next_partition(
        partition_of(max(r["t"] for r in sent), FEEDBACK_MINUTES), FEEDBACK_MINUTES
    )
    wait_for(
        lambda: dataset.exists(partition_done(last)),
        600 + 120 * FEEDBACK_MINUTES,
        f"the joiner to close {last}",
        explain=everything_placed,
    )
    joined: Counter[str] = Counter()
    manifests = {}
    name = first
    while name <= last:
        if dataset.exists(partition_done(name)):
            manifests[name] = json.loads(dataset.read_text(partition_done(name)))
            for file in manifests[name]["files"]:
                for line in dataset.read_text(f"{name}/{file}").splitlines():
                    joined[line.split(" ", 2)[2]] += 1
        name = next_partition(name, FEEDBACK_MINUTES)
    serving = get_json(f"{life.urls()['serving']}/status", life.token)["feedback"]
    by_simulator = Counter(r["f"] for r in sent)
    once = {
        "sent": len(sent),
        "joined": sum(joined.values()),
        "duplicated_or_unknown": sum((joined - by_simulator).values()),
        "missing": sum((by_simulator - joined).values()),
        "serving_dropped": serving["impressions"]["dropped_buffer_full"],
        "serving_failed": serving["impressions"]["failed"],
        "partitions": len(manifests),
    }
    life.timings.figures["feedback in pods"] = once | {"simulator": summary}
    assert once["duplicated_or_unknown"] == 0, once
    # What serving could not deliver it counted; nothing else is missing.
    assert once["missing"] <= once["serving_dropped"] + once["serving_failed"], once
    assert once["partitions"] >= 3, once
    # The served model came back after the drift: on the drifted traffic, the last version
    # to serve a share of it ranks nearer the truth than the first did.
    back = summary["recovery"]
    life.timings.figures["recovery after the drift"] = back
    assert back and back["last"]["version"] > back["first"]["version"], summary["versions"]
    assert back["gap_closed"] >= RECOVERY_GAP_CLOSED, summary["versions"]
    # `elasticctr status` shows the served versions' online quality from the joiner.
    with port_forward(life.stack, "svc/joiner", JOINER_PORT) as joiner:
        shown = run_module("elasticctr_client", "status", "--json", "--joiner-url", joiner)
    joiner_status = json.loads(shown.stdout)["feedback"]
    online = joiner_status["online"]
    life.timings.figures["online quality"] = online
    assert online and all(q["examples"] > 0 for q in online.values()), online
    # The simulator's late clicks (a tenth, 90 s after their impression) came after their
    # partitions closed: counted and skipped, and shown.
    counts = joiner_status["counts"]
    life.timings.figures["joiner counts"] = counts
    assert counts["late_clicks"] > 0, counts

    # The online Job trains the partitions; serving moves on to their versions.
    wait_for(
        lambda: (life.serving_version() or 0) >= before + 3,
        900,
        f"serving to move 3 versions past {before} on the feedback partitions",
        interval=5,
    )
    # Which partitions each published version trained on: the model registry's record
    # (trainer 0 registers each with its partitions), not trainer 0's pod log, which a
    # replaced Job or pod has lost part of before.
    versions = _registered_partitions(life)
    trained = {p for parts in versions.values() for p in parts}
    assert trained & set(manifests), (sorted(trained), sorted(manifests))
    # Freshness: a partition's donefile -> serving on a version trained on it.
    switched = {
        h["version"]: h["switched_at"]
        for h in get_json(f"{life.urls()['serving']}/status", life.token)["history"]
    }
    closed = {name: manifest["closed_at"] for name, manifest in manifests.items()}
    fresh = freshness(closed, versions, switched)
    life.timings.figures["feedback freshness"] = {
        "partition_minutes": FEEDBACK_MINUTES,
        "median_seconds": statistics.median(f["seconds"] for f in fresh) if fresh else None,
        "partitions": fresh,
        # What the figures come from: trainer 0's versions and their partitions, and
        # serving's switches.
        "trained": {str(v): parts for v, parts in versions.items()},
        "switched_at": {str(v): t for v, t in switched.items()},
        "closed_at": closed,
    }
    assert fresh, (versions, switched, closed)

    # The minute versions are deltas on a base: a shard pod deleted mid-chain comes back
    # serving the committed version from its base and deltas.
    pod = f"cube-{_outputs(life)['cube_layout']}-0-0"
    chains = _loaded_chains(core, pod)
    assert any(len(chain) > 1 for chain in chains.values()), chains
    old_uid = core.read_namespaced_pod(pod, NS).metadata.uid
    core.delete_namespaced_pod(pod, NS)
    wait_for(
        lambda: _ready_pod(core, pod, old_uid),
        300,
        f"{pod} back and ready",
    )
    committed = get_json(f"{life.urls()['transfer']}/status")["committed"]
    chain = _loaded_chains(core, pod).get(committed, [])
    life.timings.figures["shard pod restored mid-chain"] = {"version": committed, "chain": chain}
    assert chain and chain[-1] == committed, chain
    life.done("7 feedback loop: simulator -> serving -> Kafka -> joiner -> trainer", started)


def _scale(life: Lifecycle, kind: str, name: str, replicas: int) -> None:
    """A Deployment's or StatefulSet's replicas, behind the program's back (a fault)."""
    from kubernetes import client

    patch = getattr(client.AppsV1Api(life.stack.api()), f"patch_namespaced_{kind}_scale")
    patch(name, NS, {"spec": {"replicas": replicas}})


def _induced_alert(
    prometheus: str, alert: str, fault: Callable[[], None], repair: Callable[[], None]
) -> dict[str, float]:
    """`alert` fires after `fault()` and clears after `repair()` (Prometheus's
    /api/v1/alerts); the seconds each took."""
    from tests.support.prometheus import api_get

    def state() -> str | None:
        alerts = api_get(prometheus, "/api/v1/alerts")["alerts"]
        states = [a["state"] for a in alerts if a["labels"]["alertname"] == alert]
        return states[0] if states else None

    # An earlier phase's fault of the same kind (a pod deleted, restored) is over first.
    wait_for(lambda: state() is None, 180, f"no {alert} before the fault")
    began = time.monotonic()
    fault()
    try:
        wait_for(lambda: state() == "firing", 300, f"{alert} to fire", interval=2)
        fired = time.monotonic() - began
    finally:
        repair()
    repaired = time.monotonic()
    wait_for(lambda: state() is None, 600, f"{alert} to clear", interval=2)
    return {
        "fired_after_s": round(fired, 1),
        "cleared_after_s": round(time.monotonic() - repaired, 1),
    }


def test_7b_prometheus_scrapes_every_part(life: Lifecycle) -> None:
    """The stack's Prometheus (monitoring.prometheus in-cluster) while every part runs (the
    online Job, the joiner, serving, cube): each part's job has its pods up, every metric
    family of the contract is known to Prometheus with its type, the alert rules are
    loaded, a query reads the simulator's traffic, and a shard taken down raises the
    shard-down alert, which clears once it is back (docs/monitoring.md)."""
    from elasticctr_common.alerts import RULES
    from elasticctr_common.metrics import ENDPOINTS
    from elasticctr_common.scrape import PROMETHEUS_PORT, job_name

    from tests.support.prometheus import api_get

    started = time.monotonic()
    with port_forward(life.stack, "svc/prometheus", PROMETHEUS_PORT) as prometheus:

        def up_jobs() -> dict[str, list[dict[str, Any]]]:
            targets = api_get(prometheus, "/api/v1/targets", state="active")["activeTargets"]
            by_job: dict[str, list[dict[str, Any]]] = {}
            for target in targets:
                by_job.setdefault(target["labels"]["job"], []).append(target)
            return by_job

        def every_part_up() -> dict[str, list[dict[str, Any]]] | None:
            jobs = up_jobs()
            ok = all(
                any(t["health"] == "up" for t in jobs.get(job_name(e), []))
                for e in ENDPOINTS.values()
            )
            return jobs if ok else None

        jobs = wait_for(every_part_up, 180, "Prometheus scraping every part")
        for endpoint in ENDPOINTS.values():
            for target in jobs[job_name(endpoint)]:
                labels = target["labels"]
                assert labels["namespace"] == NS and labels["process"] == endpoint.process
                assert target["scrapeUrl"].endswith(f":{endpoint.port}{endpoint.path}")
        metadata = api_get(prometheus, "/api/v1/metadata")
        missing, mistyped = [], []
        for endpoint in ENDPOINTS.values():
            for family in endpoint.families:
                # The name a scrape reports: OpenMetrics drops a counter's `_total`.
                known = metadata.get(family.family_name) or metadata.get(family.name)
                if not known:
                    missing.append(family.name)
                elif family.type not in {m["type"] for m in known}:
                    mistyped.append((family.name, known))
        assert not missing and not mistyped, (missing, mistyped)
        groups = api_get(prometheus, "/api/v1/rules", type="alert")["groups"]
        loaded = {r["name"]: r["health"] for g in groups for r in g["rules"]}
        assert loaded == {rule.alert: "ok" for rule in RULES}, loaded
        served = api_get(
            prometheus,
            "/api/v1/query",
            query=f'sum(elasticctr_serving_examples_total{{namespace="{NS}"}})',
        )["result"]
        assert served and float(served[0]["value"][1]) > 0, served
        # `elasticctr status` shows the stack's alerts from it.
        shown = run_module("elasticctr_client", "status", "--json", "--prometheus-url", prometheus)
        alerting = json.loads(shown.stdout)["alerts"]
        assert "error" not in alerting and {"firing", "pending"} <= set(alerting), alerting

        # A fault induced: shard 1's pods deleted and kept away (its StatefulSet at 0). The
        # shard-down rule fires after its `for` (the local stack's monitoring.alert_for),
        # and clears once the shard is back.
        shard = f"cube-{_outputs(life)['cube_layout']}-1"
        seen = _induced_alert(
            prometheus, "ElasticctrCubeShardDown",
            lambda: _scale(life, "stateful_set", shard, 0),
            lambda: _scale(life, "stateful_set", shard, 1),
        )  # fmt: skip
    life.timings.figures["prometheus alerts"] = alerting | {"induced shard down": seen}
    life.timings.figures["prometheus targets"] = {
        job: len(targets) for job, targets in sorted(jobs.items())
    }
    life.done("7b Prometheus scrapes every part", started)


# The canary phase: a share and test bounds for this machine's traffic (16 impressions a
# second, a third of them clicked): a decision in minutes. A stack's defaults are stricter.
CANARY = {
    "canary.enabled": "true",
    "canary.fraction": "0.3",
    "canary.margin": "0.1",
    "canary.confidence": "0.95",
    "canary.min_clicks": "100",
    "canary.max_minutes": "15",
}
CANARY_SIMULATOR_SECONDS = 1800  # stopped once both decisions are in


def test_7c_canary_in_pods(life: Lifecycle) -> None:
    """With the feedback loop's simulator running: a version trained on label-shuffled data
    (published through a loosened gate) serves the canary's share of requests, is caught
    by its online AUC and rolled back everywhere; a version trained on the real data is
    promoted; no request fails; both decisions are in `status --json` and in MLflow with
    their numbers (docs/monitoring.md, "Canary")."""
    from elasticctr_common.scrape import PROMETHEUS_PORT

    started = time.monotonic()
    old = volcano_job(life.stack, JOB)
    assert old is not None
    # The training job stands still meanwhile: the versions below come from jobs on this
    # machine, and a donefile has one writer at a time. An offline job past its passes
    # (the checkpoint is far beyond pass 1) trains nothing and completes.
    paused = {"training.mode": "offline", "data.start": START, "data.end": START}
    _up(life, **CANARY, **paused)
    _replaced(life, old["metadata"]["uid"])
    wait_for(life.job_done, 600, "the offline job with nothing left to train", interval=5)
    record = life.work / "canary" / "impressions.jsonl"
    sim = _simulator(life, CANARY_SIMULATOR_SECONDS, record, "--late-share", "0")
    try:
        with port_forward(life.stack, "svc/mlflow", 5000) as mlflow:
            bad = _train_here(life, "shuffled", mlflow, shuffle=True)
            rolled_back = _canary_decided(life, bad, "rolled_back")
            shown_bad = _canary_status(life)
            good = _train_here(life, "real", mlflow, shuffle=False)
            promoted = _canary_decided(life, good, "committed")
            wait_for(lambda: life.serving_version() == good, 300, f"serving on version {good}")
            shown_good = _canary_status(life)
            tags = {v: _canary_tag(mlflow, v) for v in (bad, good)}
        # The joiner stopped while serving logs impressions: the joiner-down alert fires
        # after its `for` (the local stack's monitoring.alert_for), clears once it is back.
        with port_forward(life.stack, "svc/prometheus", PROMETHEUS_PORT) as prometheus:
            joiner_down = _induced_alert(
                prometheus, "ElasticctrJoinerDown",
                lambda: _scale(life, "deployment", "joiner", 0),
                lambda: _scale(life, "deployment", "joiner", 1),
            )  # fmt: skip
    finally:
        if sim.poll() is None:
            sim.send_signal(signal.SIGTERM)
        out, err = sim.communicate(timeout=300)
    assert sim.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    by_version = {row["version"]: row for row in summary["versions"]}
    trial = [r for r in sent if rolled_back["started"] <= r["t"] <= rolled_back["finished"]]
    on_bad = {r["rid"] for r in trial if r["v"] == bad}
    share = len(on_bad) / max(1, len({r["rid"] for r in trial}))
    # The version on trial's baseline is what was committed when it was staged (the paused
    # Job's last version may have had a trial of its own first).
    baseline = rolled_back["canary"]["baseline"]
    life.timings.figures["canary in pods"] = {
        "baseline": baseline,
        "shuffled": {"version": bad, "share_of_requests": round(share, 3),
                     "decision": rolled_back["canary"]["decision"],
                     "seconds": rolled_back["canary"]["seconds"]},
        "real": {"version": good, "decision": promoted["canary"]["decision"],
                 "seconds": promoted["canary"]["seconds"]},
        "simulator": {"requests": summary["requests"], "errors": summary["errors"],
                      "versions": summary["versions"]},
        "induced joiner down": joiner_down,
    }  # fmt: skip
    # No request failed, and the shuffled version scored at most its share of them.
    assert summary["errors"] == {}, summary["errors"]
    assert on_bad and share <= 0.3 + 0.08, share
    assert by_version[bad]["auc"] < 0.6, by_version[bad]
    decision = rolled_back["canary"]["decision"]
    assert decision["decision"] == "rollback" and decision["z"] < -decision["critical_z"]
    assert decision["candidate"]["auc"] < decision["baseline"]["auc"] - 0.1, decision
    assert promoted["canary"]["decision"]["decision"] == "promote"
    # What `status --json` showed after each decision.
    assert shown_bad["last_canary"]["version"] == bad
    assert (
        shown_bad["last_canary"]["result"] == "rolled_back" and shown_bad["committed"] == baseline
    )
    assert shown_good["last_canary"]["version"] == good and shown_good["committed"] == good
    assert tags[bad].startswith("rolled back: online AUC"), tags
    assert tags[good].startswith("promoted: online AUC"), tags
    life.done("7c canary: a shuffled-label version rolled back, a good one promoted", started)


def _train_here(life: Lifecycle, name: str, mlflow: str, shuffle: bool) -> int:
    """A training job on this machine (the trainer's processes, the stack's trainer.json)
    from scratch on the generated hours, labels shuffled across examples or not, publishing
    into the stack's model store and registry through a loosened gate (any held-out AUC
    passes); the version it published."""
    import random

    from kubernetes import client

    from tests.support.trainer import run_job

    core = client.CoreV1Api(life.stack.api())
    work = life.work / "canary" / name
    data = work / "data"
    source = life.work / "data" / "train"
    rng = random.Random(7)
    for hour_dir in sorted(p for p in source.glob("*/*") if p.is_dir()):
        target = data / hour_dir.relative_to(source)
        target.mkdir(parents=True)
        for part in sorted(hour_dir.iterdir()):
            lines = part.read_text().splitlines() if part.name.startswith("part-") else None
            if lines is not None and shuffle:
                fields = [line.split(" ", 2) for line in lines]
                clicks = [f[1] for f in fields]
                rng.shuffle(clicks)
                lines = [f"{f[0]} {c} {f[2]}" for f, c in zip(fields, clicks, strict=True)]
            (target / part.name).write_text("\n".join(lines) + "\n" if lines else part.read_text())
    hours = sorted(str(p.relative_to(data)) for p in data.glob("*/*"))
    shipped = core.read_namespaced_config_map("training-config", NS).data
    config = json.loads(shipped["trainer.json"])
    if "network.py" in shipped:  # the stack's own network, here as in its pods
        (work / "network.py").write_text(shipped["network.py"])
        config["hyper_parameters"]["network_module"] = str(work / "network.py")
    config["runner"].update(
        train_data_uri=f"file://{data}", mode="offline", start_date_hr=hours[0],
        end_date_hr=hours[-1], passes=1, slot_conf=str(life.work / "data" / "slot.conf"),
        checkpoint_uri=f"file://{work}/checkpoints", work_dir=str(work / "scratch"),
        eval_data_uri=f"file://{life.heldout().parent}", publish_margin=1.0,
        data_wait_seconds=0,
    )  # fmt: skip
    (work / "trainer.json").write_text(json.dumps(config))
    storage = _storage_env(life, work)
    env = {
        **storage,
        "MLFLOW_S3_ENDPOINT_URL": storage["AWS_ENDPOINT_URL"],
        "MLFLOW_TRACKING_URI": mlflow,
    }
    job = run_job(work / "trainer.json", work / "logs", 1, 1, env=env)
    (version,) = [e["version"] for e in job.events("trainer-0", "version") if e["published"]]
    return int(version)


def _storage_env(life: Lifecycle, work: Path) -> dict[str, str]:
    """boto3's environment for the stack's MinIO with the training workload's keys (its
    Secret, written to a file in `work`), at the MinIO pod's address."""
    import base64

    from kubernetes import client

    core = client.CoreV1Api(life.stack.api())
    secret = core.read_namespaced_secret("storage-training", NS).data["credentials"]
    credentials = work / "credentials"
    credentials.parent.mkdir(parents=True, exist_ok=True)
    credentials.write_bytes(base64.b64decode(secret))
    minio = pod_ip(life.stack, "app.kubernetes.io/component=minio")
    return {
        "AWS_ENDPOINT_URL": f"http://{minio}:9000",
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def _model_file(life: Lifecycle, path: str) -> str:
    """A file of the stack's model store (trainer.json's `model_uri`), read as trainer 0
    wrote it."""
    from unittest import mock

    from elasticctr_common.storage import open_store
    from kubernetes import client

    core = client.CoreV1Api(life.stack.api())
    shipped = core.read_namespaced_config_map("training-config", NS).data
    models = json.loads(shipped["trainer.json"])["runner"]["model_uri"]
    with mock.patch.dict(os.environ, _storage_env(life, life.work / "storage")):
        return open_store(models).read_text(path)


def _canary_decided(life: Lifecycle, version: int, result: str) -> dict[str, Any]:
    """The transfer's history entry of `version`'s canary, once decided: `result`."""
    transfer = life.urls()["transfer"]
    wait_for(
        lambda: (
            (get_json(f"{transfer}/status").get("canary") or {}).get("version") == version
            or _canary_entry(transfer, version)
        ),
        900,
        f"version {version} on trial",
    )
    entry = wait_for(
        lambda: _canary_entry(transfer, version), 900, f"the decision on version {version}",
        interval=5,
    )  # fmt: skip
    assert entry["result"] == result, entry
    return dict(entry)


def _canary_entry(transfer: str, version: int) -> dict[str, Any] | None:
    history = get_json(f"{transfer}/history")["history"]
    found = [h for h in history if h["kind"] == "canary" and h["version"] == version]
    return found[-1] if found else None


def _canary_status(life: Lifecycle) -> dict[str, Any]:
    shown = run_module(
        "elasticctr_client", "status", "--json", "--transfer-url", life.urls()["transfer"]
    )
    return dict(json.loads(shown.stdout)["cube"])


def _canary_tag(mlflow: str, version: int) -> str:
    """The canary's verdict on the registered model version of `version` (MLflow's client)."""
    from elasticctr_common.registry import ModelRegistry
    from mlflow.tracking import MlflowClient

    number = ModelRegistry(mlflow, JOB).find(version)
    assert number is not None, f"version {version} is not registered"
    tags = MlflowClient(mlflow).get_model_version(JOB, number).tags
    return str(tags.get("elasticctr.canary", ""))
