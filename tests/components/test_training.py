"""The training component: Volcano Job shape, Paddle fleet env, replacement on change."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from elasticctr_common.contract import NETWORK_FILE
from elasticctr_common.trainer_json import HyperParameters, parse_config

from components.kube import KubeTarget
from components.training import Training, TrainingArgs, pserver_endpoints
from tests.support.components import STORE, env_of, run_component, secret_file_of


def args(target: KubeTarget, **overrides: Any) -> TrainingArgs:
    base = TrainingArgs(
        target=target,
        image="registry.test/trainer:1.2.3",
        store=STORE,
        slot_conf_map="slot-conf",
        job_name="ctr",
        trainers=3,
        pservers=2,
        cpu=2,
        mem=4,
        train_data_uri="hdfs://nn:8020/train_data",
        eval_data_uri=None,
        hyper_parameters=HyperParameters(sparse_dim=1000001),
        runner_settings={"start_date_hr": "20191221/00", "end_date_hr": "20191221/23"},
        queue="default",
        node_pool="",
        mlflow_url="http://mlflow:5000",
    )
    return dataclasses.replace(base, **overrides)


def job_of(**overrides: Any) -> tuple[dict[str, Any], Any]:
    graph = run_component(lambda t: Training("training", args(t, **overrides)))
    return graph.one("kubernetes:batch.volcano.sh/v1alpha1:Job").inputs, graph


def test_job_tasks_policies_and_gang_size() -> None:
    job, _ = job_of()
    spec = job["spec"]
    assert job["metadata"]["name"] == "ctr" and job["metadata"]["namespace"] == "test-ns"
    assert spec["schedulerName"] == "volcano" and spec["minAvailable"] == 5
    assert spec["plugins"] == {"svc": [], "env": []}
    assert {(p["event"], p["action"]) for p in spec["policies"]} == {
        ("PodEvicted", "RestartJob"),
        ("PodFailed", "RestartJob"),
    }
    tasks = {t["name"]: t for t in spec["tasks"]}
    assert (tasks["pserver"]["replicas"], tasks["trainer"]["replicas"]) == (2, 3)
    assert tasks["trainer"]["policies"] == [
        {"exitCode": 3, "action": "TerminateJob"},  # bad data: no retry on the same data
        {"event": "TaskCompleted", "action": "CompleteJob"},
    ]
    # a checkpoint of another model layout: every attempt would fail alike
    assert tasks["pserver"]["policies"] == [{"exitCode": 3, "action": "TerminateJob"}]
    # Volcano's webhook defaults, written out: it then stores the tasks as sent.
    assert [(t["minAvailable"], t["maxRetry"]) for t in spec["tasks"]] == [(2, 3), (3, 3)]
    assert spec["maxRetry"] == 3 and spec["queue"] == "default"
    for task in tasks.values():
        assert task["template"]["spec"]["restartPolicy"] == "Never"


def test_paddle_fleet_environment() -> None:
    job, _ = job_of()
    for task in job["spec"]["tasks"]:
        container = task["template"]["spec"]["containers"][0]
        env = env_of(container)
        assert env["TRAINING_ROLE"] == task["name"].upper()
        assert (
            env["PADDLE_PSERVERS_IP_PORT_LIST"] == "ctr-pserver-0.ctr:30240,ctr-pserver-1.ctr:30240"
        )
        assert env["PADDLE_TRAINERS_NUM"] == "3" and env["PADDLE_PORT"] == "30240"
        assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert env["AWS_ENDPOINT_URL"] == STORE.endpoint
        # The keys as boto3's credentials file, never in the environment.
        assert "AWS_ACCESS_KEY_ID" not in env and "AWS_SECRET_ACCESS_KEY" not in env
        pod = task["template"]["spec"]
        assert secret_file_of(pod, container, "AWS_SHARED_CREDENTIALS") == {
            "name": "object-storage-credentials",
            "key": "credentials",
        }
        # The trainer id comes from Volcano's env plugin (VC_TASK_INDEX), never a fixed value.
        assert "PADDLE_TRAINER_ID" not in env
        assert container["command"] == ["python", "-m", "elasticctr_trainer", "run"]
        assert container["args"] == ["--config", "/etc/elasticctr/trainer.json"]
    pserver = next(t for t in job["spec"]["tasks"] if t["name"] == "pserver")
    assert pserver["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "pserver", "containerPort": 30240}
    ]


def test_config_file_and_mounts() -> None:
    runner = {
        "mode": "online", "start_date_hr": "20191221/00", "end_date_hr": None,
        "data_wait_seconds": 120, "online_poll_seconds": 5, "publish_margin": 0.01,
    }  # fmt: skip
    hyper = HyperParameters(sparse_dim=1000001, embedding_dim=11, model="dnn", embedx_threshold=7)
    job, graph = job_of(
        runner_settings=runner, hyper_parameters=hyper, eval_data_uri="hdfs://nn:8020/heldout"
    )
    text = graph.one("kubernetes:core/v1:ConfigMap").inputs["data"]["trainer.json"]
    config = parse_config(json.loads(text))  # the trainer's own reader
    # The whole model, fc_sizes and all; the trainer sets an unset delete_threshold by mode.
    assert config.hyper_parameters == dataclasses.replace(hyper, delete_threshold=0.0)
    assert {key: getattr(config.runner, key) for key in runner} == runner
    assert (config.runner.train_data_uri, config.runner.eval_data_uri) == (
        "hdfs://nn:8020/train_data",
        "hdfs://nn:8020/heldout",
    )
    assert config.runner.slot_conf == "/etc/elasticctr/slot.conf"
    assert (config.runner.model_uri, config.runner.checkpoint_uri) == (
        "s3://test-bucket/models",
        "s3://test-bucket/checkpoints",
    )
    assert (config.runner.mlflow_experiment, config.runner.work_dir) == (
        "ctr",
        "/var/lib/elasticctr",
    )
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    sources = pod["volumes"][0]["projected"]["sources"]
    assert [s["configMap"]["name"] for s in sources] == ["training-config", "slot-conf"]
    annotation = job["spec"]["tasks"][0]["template"]["metadata"]["annotations"][
        "elasticctr.io/config-sha256"
    ]
    assert len(annotation) == 64


def test_a_new_config_changes_the_pod_template_hash() -> None:
    first, _ = job_of(hyper_parameters=HyperParameters(learning_rate=0.001))
    second, _ = job_of(hyper_parameters=HyperParameters(learning_rate=0.002))
    key = "elasticctr.io/config-sha256"
    hashes = [
        j["spec"]["tasks"][0]["template"]["metadata"]["annotations"][key] for j in (first, second)
    ]
    assert hashes[0] != hashes[1]


def test_ugi_is_a_secret_only_when_given() -> None:
    _, without = job_of()
    assert without.of_type("kubernetes:core/v1:Secret") == []
    job, graph = job_of(hdfs_ugi="alice,pw")
    secret = graph.one("kubernetes:core/v1:Secret")
    assert secret.inputs["metadata"]["name"] == "hdfs-ugi" and "stringData" in secret.secret_paths
    pod = job["spec"]["tasks"][1]["template"]["spec"]
    assert "HDFS_UGI" not in env_of(pod["containers"][0])
    assert secret_file_of(pod, pod["containers"][0], "HDFS_UGI") == {
        "name": "hdfs-ugi",
        "key": "HDFS_UGI",
    }


def test_any_spec_change_replaces_the_job() -> None:
    _, graph = job_of()
    job = graph.one("kubernetes:batch.volcano.sh/v1alpha1:Job")
    # Volcano's webhook refuses in-place changes; same name, so delete first.
    assert job.replace_on_changes == ["spec"]
    assert job.delete_before_replace is True


def test_pserver_endpoints_follow_volcano_host_names() -> None:
    assert pserver_endpoints("job", 1) == "job-pserver-0.job:30240"
    assert pserver_endpoints("j", 3).split(",")[2] == "j-pserver-2.j:30240"


@pytest.mark.parametrize(("trainers", "pservers"), [(0, 1), (1, 0)])
def test_bad_counts_fail_before_any_child(trainers: int, pservers: int) -> None:
    with pytest.raises(ValueError, match="trainers and pservers must be >= 1"):
        run_component(lambda t: Training("training", args(t, trainers=trainers, pservers=pservers)))


def test_a_network_file_is_shipped_beside_trainer_json() -> None:
    hyper = HyperParameters(sparse_dim=1000001, model="custom", network_module=NETWORK_FILE)
    _, graph = job_of(hyper_parameters=hyper, network_text="def build(inputs): ...\n")
    data = graph.one("kubernetes:core/v1:ConfigMap").inputs["data"]
    assert data["network.py"] == "def build(inputs): ...\n"
    config = parse_config(json.loads(data["trainer.json"]))
    assert config.hyper_parameters.network_module == NETWORK_FILE
    _, plain = job_of()
    assert "network.py" not in plain.one("kubernetes:core/v1:ConfigMap").inputs["data"]
