"""The contract between the program and the images, checked end to end:
every pod of every stack, as the program renders it, is fed to the image's own parsers:
its args and env to the image's option parser, its mounted config files to the image's
readers (trainer.json, cube.conf, slot.conf). A variable, flag, key or file renamed on one
side only fails here, not in a pod. Then the pods are checked against each other: the
addresses one reads (cube.conf, the transfer's URL, the agent's server) are the ports
the other listens on.

Secrets (`valueFrom`, or the files of Secret volumes) read as a placeholder; Volcano's `env`
plugin adds VC_TASK_INDEX.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from elasticctr_common.contract import NETWORK_FILE, CubeEnv, TrainerEnv
from elasticctr_common.secrets import FILE_SUFFIX
from elasticctr_common.slotconf import read_slot_conf

from infra.program import main
from tests.support import pulumi_harness as harness
from tests.support.manifests import pod_templates
from tests.support.stacks import config_with_secrets

PLACEHOLDER = "from-a-secret"


def config_files(graph: harness.Graph, pod: dict[str, Any], root: Path) -> dict[str, Path]:
    """The pod's mounted ConfigMap files written under `root`, and its Secret volumes'
    files holding a placeholder: {path in the pod: file}."""
    maps = {
        m["metadata"]["name"]: m.get("data", {})
        for m in graph.manifests()
        if m["kind"] == "ConfigMap"
    }
    sources: dict[str, list[str]] = {}
    for volume in pod["spec"].get("volumes", []):
        projected = volume.get("projected", {}).get("sources", [])
        names = [s["configMap"]["name"] for s in projected if "configMap" in s]
        if "configMap" in volume:
            names.append(volume["configMap"]["name"])
        sources[volume["name"]] = names
    secrets = {
        volume["name"]: [item["path"] for item in volume["secret"].get("items", [])]
        for volume in pod["spec"].get("volumes", [])
        if "secret" in volume
    }
    files = {}
    for container in pod["spec"]["containers"]:
        for mount in container.get("volumeMounts", []):
            for key in secrets.get(mount["name"], []):
                local = root / mount["mountPath"].strip("/") / key
                local.parent.mkdir(parents=True, exist_ok=True)
                local.write_text(PLACEHOLDER)
                files[f"{mount['mountPath']}/{key}"] = local
            for name in sources.get(mount["name"], []):
                for key, text in maps[name].items():
                    local = root / mount["mountPath"].strip("/") / key
                    local.parent.mkdir(parents=True, exist_ok=True)
                    local.write_text(text)
                    files[f"{mount['mountPath']}/{key}"] = local
    return files


def containers(graph: harness.Graph) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(owner/container, pod template, container) of every pod of the stack."""
    for manifest in graph.manifests():
        for owner, pod in pod_templates(manifest):
            for container in pod["spec"]["containers"]:
                yield f"{owner}/{container['name']}", pod, container


class Pod:
    """One container's view: its env (os.environ while parsing) and its files."""

    def __init__(self, container: dict[str, Any], files: dict[str, Path]) -> None:
        self.args: list[str] = list(container.get("args") or [])
        self.files = files
        self.env = {e["name"]: e.get("value", PLACEHOLDER) for e in container.get("env", [])} | {
            TrainerEnv.TASK_INDEX: "0"
        }
        # A secret's file (elasticctr_common.secrets) is read where the test wrote it.
        for name, value in self.env.items():
            if name.endswith(FILE_SUFFIX):
                self.env[name] = str(self.file(value))

    def file(self, path: str) -> Path:
        assert path, "no path: its variable or flag is not set"
        assert path in self.files, f"{path} is not mounted (mounted: {sorted(self.files)})"
        return self.files[path]

    def parse(self, parse_args: Callable[[list[str]], argparse.Namespace]) -> argparse.Namespace:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            return parse_args(self.args)
        except SystemExit as err:  # argparse's way of refusing
            raise AssertionError(f"the image refuses {self.args} with {self.env}") from err
        finally:
            os.environ.clear()
            os.environ.update(saved)


def check_serving(pod: Pod) -> dict[str, Any]:
    from elasticctr_common.cube.conf import CubeConf
    from elasticctr_serving.__main__ import parse_args

    args = pod.parse(parse_args)
    conf = CubeConf.load(pod.file(args.cube_conf))
    assert read_slot_conf(str(pod.file(args.slot_conf)))
    assert args.sparse_dim and args.model_uri and args.cube_transfer_url
    return {"cube_conf": conf, "transfer_url": args.cube_transfer_url}


def check_transfer(pod: Pod) -> dict[str, Any]:
    from elasticctr_common.cube.conf import CubeConf
    from elasticctr_cube.transfer import parse_args

    args = pod.parse(parse_args)
    conf = CubeConf.load(pod.file(args.cube_conf))
    assert conf.shard >= 1 and args.model_uri and args.cube_uri
    # The stack's compaction policy reaches the transfer (its defaults: the contract's).
    assert args.base_every >= 1 and args.max_chain_fraction >= 0
    return {"cube_conf": conf, "port": args.port}


def check_agent(pod: Pod) -> dict[str, Any]:
    from elasticctr_cube.agent import parse_args

    args = pod.parse(parse_args)
    assert 0 <= args.shard < args.shard_num and args.cube_uri
    return {"port": args.port, "server": args.server, "shards": args.shard_num}


@functools.cache
def cube_server() -> str:
    from elasticctr_cube.server import build_server

    return build_server()  # cargo, incremental: built once by the first test that needs it


def check_server(pod: Pod) -> dict[str, Any]:
    """The Python entry point adds the shard from the env; the flags are the binary's."""
    from elasticctr_cube.server import _given

    args = pod.args
    for flag, env in (("--shard", CubeEnv.SHARD_INDEX), ("--shard-num", CubeEnv.SHARD_NUM)):
        assert _given(args, flag) or pod.env.get(env), f"cube-server gets no {flag}"
    # The binary's own parser (clap) reads the flags and their values; --help after them
    # makes it exit there, 0, instead of serving.
    parsed = subprocess.run(
        [cube_server(), *args, "--help"], capture_output=True, text=True, check=False
    )
    assert parsed.returncode == 0, f"cube-server refuses {args}: {parsed.stderr}"
    flags = dict(arg.removeprefix("--").split("=", 1) for arg in args)
    return {"port": int(flags["port"]), "control_port": int(flags["control-port"])}


def check_training(pod: Pod) -> dict[str, Any]:
    from elasticctr_common.trainer_json import load_config
    from elasticctr_trainer.roles import role_from_env

    role = role_from_env(pod.env)  # one template per task: TRAINING_ROLE says which
    config = load_config(pod.file(pod.args[pod.args.index("--config") + 1]))
    assert read_slot_conf(str(pod.file(config.runner.slot_conf)))
    assert config.runner.model_uri and config.runner.checkpoint_uri
    hyper = config.hyper_parameters
    module = hyper.network_module
    if module is not None and module.endswith(".py"):
        # The user's network as the pod has it (the ConfigMap's file), loaded and run on
        # a probe batch by the trainer's own check, the first thing every pod does.
        from elasticctr_trainer.networks import checked_network

        local = replace(hyper, network_module=str(pod.file(module)))
        checked_network(local, len(read_slot_conf(str(pod.file(config.runner.slot_conf)))))
    return {"pserver": role.is_server, "network": module}


CHECKS: dict[str, Callable[[Pod], dict[str, Any]]] = {
    "serving": check_serving,
    "transfer": check_transfer,
    "agent": check_agent,
    "server": check_server,
    "pserver": check_training,
    "trainer": check_training,
}


def read_every_pod(stack: str, graph: harness.Graph, root: Path) -> dict[str, list[Any]]:
    """What each of the project's containers read, by container name."""
    read: dict[str, list[Any]] = {name: [] for name in CHECKS}
    for where, pod, container in containers(graph):
        check = CHECKS.get(container["name"])
        if check is None:
            continue  # not one of this project's images (MinIO, HDFS, MLflow, Volcano)
        files = config_files(graph, pod, root / where.replace("/", "_"))
        try:
            read[container["name"]].append(check(Pod(container, files)))
        except Exception as err:
            pytest.fail(f"{stack}: {where}: {type(err).__name__}: {err}")
    return read


def test_every_pod_is_read_by_its_images_own_parsers(
    stack_graph: tuple[str, harness.Graph], tmp_path: Path
) -> None:
    stack, graph = stack_graph
    read = read_every_pod(stack, graph, tmp_path)
    missing = {name for name, seen in read.items() if not seen}
    assert not missing, f"{stack}: no pod for {missing}"
    assert {r["pserver"] for r in read["trainer"] + read["pserver"]} == {True, False}


def test_the_pods_reach_each_other_where_they_listen(
    stack_graph: tuple[str, harness.Graph], tmp_path: Path
) -> None:
    stack, graph = stack_graph
    read = read_every_pod(stack, graph, tmp_path)
    (server,) = {(r["port"], r["control_port"]) for r in read["server"]}
    (agent,) = {(r["port"], r["server"], r["shards"]) for r in read["agent"]}
    (transfer,) = read["transfer"]
    (serving,) = {(r["cube_conf"], r["transfer_url"]) for r in read["serving"]}
    conf, transfer_url = serving
    assert conf == transfer["cube_conf"], f"{stack}: serving and transfer read other shards"
    assert agent[1].endswith(f":{server[1]}"), f"{stack}: agent -> {agent[1]}, server {server}"
    assert conf.shard == agent[2] == len(read["server"]), f"{stack}: one StatefulSet per shard"
    ports = {(n.port, n.agent_port) for _, _, n in conf.servers()}
    assert ports == {(server[0], agent[0])}, f"{stack}: cube.conf {ports}, pods {server} {agent}"
    assert transfer_url.endswith(f":{transfer['port']}"), f"{stack}: {transfer_url}"


USER_NETWORK = "tests/images/trainer/nets/two_tower.py"


def custom_stack(network: str) -> harness.Graph:
    """The dev stack on Criteo-shaped data with the user's own network `network`."""
    config, secrets = config_with_secrets("dev")
    config["elasticctr:training"] = {
        **config.get("elasticctr:training", {}), "model": "custom", "network_module": network,
    }  # fmt: skip
    config["elasticctr:data"] = {
        **config.get("elasticctr:data", {}),
        "format": "paddlerec",
        "dense_features": [{"name": "dense_feature", "dim": 13}],
    }
    return harness.run(main, config, secrets, stack="dev")


def test_a_users_network_reaches_every_training_pod_and_builds_there(tmp_path: Path) -> None:
    read = read_every_pod("dev + custom", custom_stack(USER_NETWORK), tmp_path)
    assert {r["network"] for r in read["trainer"] + read["pserver"]} == {NETWORK_FILE}
    assert {r["pserver"] for r in read["trainer"] + read["pserver"]} == {True, False}


def test_a_network_that_builds_the_wrong_logit_fails_the_pods_check(tmp_path: Path) -> None:
    graph = custom_stack("tests/images/trainer/nets/wrong_shape.py")
    with pytest.raises(pytest.fail.Exception, match=r"the logit must have shape \[batch, 1\]"):
        read_every_pod("dev + wrong_shape", graph, tmp_path)


# The feedback loop, on a stack of each kind of stream: dev with Kafka in the cluster,
# aws-prod with an external one (SASL over TLS, a CA bundle, credentials as secrets).
FEEDBACK_STACKS: dict[str, dict[str, Any]] = {
    "dev": {"enabled": True, "partition_minutes": 5, "join_window": 120},
    "aws-prod": {
        "enabled": True,
        "partition_minutes": 15,
        "kafka": {
            "mode": "external",
            "bootstrap_servers": "b-1.msk.example:9096,b-2.msk.example:9096",
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "username": "joiner-user",
            "password": "kafka-password-1",
            "ca_cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        },
    },
}


@functools.cache
def feedback_graph(stack: str) -> harness.Graph:
    from infra.program import main
    from tests.support.stacks import config_with_secrets

    config, secrets = config_with_secrets(stack, {"elasticctr:feedback": FEEDBACK_STACKS[stack]})
    return harness.run(main, config, (*secrets, "elasticctr:feedback"), stack=stack)


CANARY = {"enabled": True, "fraction": 0.2, "margin": 0.02, "min_clicks": 300}


@functools.cache
def canary_graph() -> harness.Graph:
    """dev with the feedback loop and a canary."""
    from infra.program import main
    from tests.support.stacks import config_with_secrets

    config, secrets = config_with_secrets(
        "dev", {"elasticctr:feedback": FEEDBACK_STACKS["dev"], "elasticctr:canary": CANARY}
    )
    return harness.run(main, config, (*secrets, "elasticctr:feedback"), stack="dev")


def test_the_transfer_judges_a_canary_on_the_joiners_figures(tmp_path: Path) -> None:
    from elasticctr_cube.canary import policy_from_args
    from elasticctr_cube.transfer import parse_args
    from elasticctr_joiner.__main__ import parse_args as joiner_args

    def parsed(graph: harness.Graph, name: str, parse: Callable[..., Any]) -> Any:
        (found,) = [
            Pod(c, config_files(graph, pod, tmp_path / where.replace("/", "_"))).parse(parse)
            for where, pod, c in containers(graph)
            if c["name"] == name
        ]
        return found

    graph = canary_graph()
    policy = policy_from_args(parsed(graph, "transfer", parse_args))
    assert policy is not None
    assert (policy.fraction, policy.margin, policy.min_clicks) == (0.2, 0.02, 300)
    assert (policy.confidence, policy.max_seconds) == (0.99, 3600)  # the contract's defaults
    name = graph.one("kubernetes:core/v1:Namespace").inputs["metadata"]["name"]
    port = parsed(graph, "joiner", joiner_args).port
    assert policy.joiner_url == f"http://joiner.{name}.svc.cluster.local:{port}"
    # Without the canary the transfer switches each version at once.
    assert policy_from_args(parsed(feedback_graph("dev"), "transfer", parse_args)) is None


def check_joiner(pod: Pod) -> dict[str, Any]:
    from elasticctr_common.feedback import kafka_client_config
    from elasticctr_joiner.__main__ import parse_args

    args = pod.parse(parse_args)
    assert args.kafka == kafka_client_config(pod.env)
    return {
        "dataset": args.dataset_uri,
        "minutes": args.partition_minutes,
        "kafka": args.kafka,
        "topics": (args.impressions_topic, args.clicks_topic),
        "ca": args.kafka.get("ssl.ca.location"),
        "files": pod.files,
    }


def check_feedback_serving(pod: Pod) -> dict[str, Any]:
    from elasticctr_common.feedback import (
        FeedbackEnv,
        compression_type,
        kafka_client_config,
        topics,
    )

    check_serving(pod)
    rate = float(pod.env[FeedbackEnv.SAMPLE_RATE])
    assert 0 <= rate <= 1 and int(pod.env[FeedbackEnv.BUFFER_RECORDS]) > 0
    # Set by the program, and one the image accepts (it raises on any other).
    assert compression_type(pod.env) == pod.env[FeedbackEnv.COMPRESSION]
    kafka = kafka_client_config(pod.env)
    return {"kafka": kafka, "topics": topics(pod.env), "files": pod.files}


@pytest.mark.parametrize("stack", sorted(FEEDBACK_STACKS))
def test_the_feedback_loop_pods_agree_on_stream_topics_and_partitions(
    stack: str, tmp_path: Path
) -> None:
    graph = feedback_graph(stack)
    checks = {"joiner": check_joiner, "serving": check_feedback_serving, "trainer": check_training}
    read: dict[str, list[dict[str, Any]]] = {name: [] for name in checks}
    kafka_conf = []
    for where, pod, container in containers(graph):
        files = config_files(graph, pod, tmp_path / where.replace("/", "_"))
        if container["name"] == "kafka":
            kafka_conf.append(files["/etc/kafka-conf/server.properties"].read_text())
        if container["name"] in checks:
            read[container["name"]].append(checks[container["name"]](Pod(container, files)))
    (joiner,) = read["joiner"]
    (serving,) = read["serving"]
    assert serving["kafka"] == joiner["kafka"], "serving and the joiner reach one stream"
    assert serving["topics"] == joiner["topics"]
    # The trainers follow the joiner's partitions, where the joiner writes them.
    trainer = next(p for p in containers(graph) if p[2]["name"] == "trainer")
    files = config_files(graph, trainer[1], tmp_path / "trainer-json")
    from elasticctr_common.trainer_json import load_config

    runner = load_config(files["/etc/elasticctr/trainer.json"]).runner
    assert (runner.train_data_uri, runner.partition_minutes) == (
        joiner["dataset"], FEEDBACK_STACKS[stack]["partition_minutes"],
    )  # fmt: skip
    assert joiner["minutes"] == runner.partition_minutes and runner.mode in ("online", "offline")
    if FEEDBACK_STACKS[stack].get("kafka", {}).get("mode") == "external":
        assert not kafka_conf, "no broker in the cluster with an external stream"
        assert joiner["kafka"]["security.protocol"] == "SASL_SSL"
        assert joiner["kafka"]["sasl.username"] == PLACEHOLDER  # from the Secret
        for reader in (joiner, serving):
            ca = reader["kafka"]["ssl.ca.location"]
            assert "BEGIN CERTIFICATE" in reader["files"][ca].read_text()
    else:
        (properties,) = kafka_conf
        advertised = next(
            line.split("=", 1)[1] for line in properties.splitlines()
            if line.startswith("advertised.listeners=")
        )  # fmt: skip
        assert advertised == f"PLAINTEXT://{joiner['kafka']['bootstrap.servers']}"
