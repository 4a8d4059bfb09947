"""no-plaintext-credentials: ConfigMaps and env hold no credential in plaintext."""

from __future__ import annotations

import pytest

from policy.credentials import is_credential_name, words
from tests.policy.support import UNKNOWN_STRING, container, pod, violations

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
RULE = "no-plaintext-credentials"
SECRET_VALUE = "hunter2-Very-Secret"
FIX = (
    ". Put credentials in a Secret (a Pulumi secret in the stack config: `pulumi config set "
    "--secret`) and mount it as files (or read it with valueFrom.secretKeyRef)."
)


def config_map(data: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": data}


def test_words_split_every_naming_style() -> None:
    assert words("HDFS_UGI") == ["hdfs", "ugi"]
    assert words("secretAccessKey") == ["secret", "access", "key"]
    assert words("APIKey") == ["api", "key"]
    assert words("fs.s3a.secret.key") == ["fs", "s", "3", "a", "secret", "key"]


@pytest.mark.parametrize(
    "name",
    [
        "DB_PASSWORD",
        "HDFS_UGI",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "apiKey",
        "GITHUB_TOKEN",
        "BCE_SK",
        "ssh_private_key",
        "fs.s3a.secret.key",
        "client_secret",
    ],
)
def test_credential_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "PADDLE_PORT",
        "CUBE_KEEP_VERSIONS",
        "MLFLOW_S3_ENDPOINT_URL",
        "SECRET_NAME",
        "TOKEN_FILE",
        "PWD",
        "passes",
        "sparse_dim",
        "dict_name",
        "HDFS-SITE.XML_dfs.permissions.enabled",
        "MONKEY",
    ],
)
def test_names_that_are_not_credentials(name: str) -> None:
    assert not is_credential_name(name)


def test_env_from_a_secret_passes() -> None:
    env = [
        {
            "name": "HDFS_UGI",
            "valueFrom": {"secretKeyRef": {"name": "hdfs-ugi", "key": "HDFS_UGI"}},
        },
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PADDLE_PORT", "value": "30240"},
        {"name": "DB_PASSWORD", "value": ""},
        {"name": "API_TOKEN", "value": "$(TOKEN_FROM_ELSEWHERE)"},
    ]
    assert violations(RULE, DEPLOYMENT, pod([container(env=env)])) == []


def test_a_plaintext_credential_in_env_fails_without_showing_it() -> None:
    env = [{"name": "PADDLE_PORT", "value": "30240"}, {"name": "HDFS_UGI", "value": SECRET_VALUE}]
    messages = violations(RULE, DEPLOYMENT, pod([container(env=env)]))
    assert messages == [
        'Deployment "web": container "app" (spec.template.spec.containers[0]) env HDFS_UGI '
        "(env[1]) is named like a credential and holds a plaintext value" + FIX
    ]
    assert SECRET_VALUE not in messages[0]


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("AKIA" + "ABCDEFGHIJKLMNOP", "an AWS access key id"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE...", "a private key"),
        ("postgres://app:" + SECRET_VALUE + "@db:5432/app", "a URL with a password"),
        ("ghp_" + "a" * 36, "a GitHub token"),
        ("pul-" + "0" * 40, "a Pulumi access token"),
    ],
)
def test_a_value_that_looks_like_a_credential_fails_whatever_its_name(
    value: str, kind: str
) -> None:
    env = [{"name": "CONNECTION", "value": value}]
    [message] = violations(RULE, DEPLOYMENT, pod([container(env=env)]))
    assert f"env CONNECTION (env[0]) holds {kind}" in message
    assert value not in message


def test_urls_without_a_password_pass() -> None:
    env = [
        {"name": "TRAIN_DATA", "value": "hdfs://hdfs-namenode.ns.svc.cluster.local:8020/train"},
        {"name": "MLFLOW_TRACKING_URI", "value": "http://mlflow.ns:5000"},
        {"name": "AWS_ENDPOINT_URL", "value": "https://s3.bj.bcebos.com"},
    ]
    assert violations(RULE, DEPLOYMENT, pod([container(env=env)])) == []


def test_credentials_in_volcano_task_env_fail() -> None:
    props = {
        "spec": {
            "tasks": [
                {
                    "name": "trainer",
                    "template": {
                        "spec": {
                            "containers": [container(env=[{"name": "HDFS_UGI", "value": "u,p"}])]
                        }
                    },
                }
            ]
        }
    }
    [message] = violations(RULE, "kubernetes:batch.volcano.sh/v1alpha1:Job", props)
    assert "spec.tasks[0] (trainer).template.spec.containers[0]) env HDFS_UGI" in message


def test_the_programs_config_files_pass() -> None:
    trainer_json = '{"runner": {"mode": "offline", "model_uri": "s3://b/models", "passes": 1}}'
    cube_conf = (
        '{"dict_name": "ctr_embedding", "shard": 2, "nodes": [{"ip": "cube-0", "port": 8027}]}'
    )
    data = {"trainer.json": trainer_json, "cube.conf": cube_conf, "slot.conf": "6048\n6002\n"}
    assert violations(RULE, CONFIG_MAP, config_map(data)) == []


@pytest.mark.parametrize(
    ("data", "finding"),
    [
        (
            {"password": SECRET_VALUE},
            'data["password"] is named like a credential and holds a plaintext value',
        ),
        (
            {"app.json": '{"db": {"host": "db", "password": "' + SECRET_VALUE + '"}}'},
            'data["app.json"] has key db.password that looks like a credential',
        ),
        (
            {"app.properties": "user=bob\n# password=commented\npassword = " + SECRET_VALUE},
            'data["app.properties"] has line 3 (password) that looks like a credential',
        ),
        (
            {"app.yaml": "storage:\n  secret_key: '" + SECRET_VALUE + "'\n"},
            'data["app.yaml"] has line 2 (secret_key) that looks like a credential',
        ),
        (
            {
                "core-site.xml": "<property><name>fs.s3a.secret.key</name><value>"
                + SECRET_VALUE
                + "</value></property>"
            },
            'data["core-site.xml"] has property fs.s3a.secret.key that looks like a credential',
        ),
        (
            {"notes.txt": "key id AKIA" + "ABCDEFGHIJKLMNOP" + " for the bucket"},
            'data["notes.txt"] has an AWS access key id that looks like a credential',
        ),
    ],
)
def test_credentials_in_config_maps_fail_without_showing_them(
    data: dict[str, str], finding: str
) -> None:
    [message] = violations(RULE, CONFIG_MAP, config_map(data))
    assert message == f'ConfigMap "app": {finding}' + FIX
    assert SECRET_VALUE not in message


def test_placeholders_and_references_in_config_files_pass() -> None:
    text = 'password: ""\ntoken: ${TOKEN}\nsecret_name: app-secrets\npassword_file: /run/pw\n'
    assert violations(RULE, CONFIG_MAP, config_map({"app.yaml": text})) == []


def test_unknown_values_are_not_judged_during_preview() -> None:
    env = [{"name": "DB_PASSWORD", "value": UNKNOWN_STRING}]
    assert violations(RULE, DEPLOYMENT, pod([container(env=env)])) == []
    assert violations(RULE, CONFIG_MAP, config_map({"password": UNKNOWN_STRING})) == []
