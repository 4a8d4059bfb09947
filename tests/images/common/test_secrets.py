"""Secrets as files (elasticctr_common.secrets), as the images read them, and the program's
side of the same contract (components/kube.py's secret_files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from elasticctr_common import secrets
from elasticctr_common.feedback import FeedbackConfigError, FeedbackEnv, kafka_client_config

from components import kube


def test_the_file_wins_and_its_trailing_newline_goes(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cr3t with spaces \n")
    env = {"SERVING_AUTH_TOKEN_FILE": str(token), "SERVING_AUTH_TOKEN": "ignored"}
    assert secrets.read("SERVING_AUTH_TOKEN", env) == "s3cr3t with spaces "


def test_without_a_file_the_variable_then_nothing() -> None:
    assert secrets.read("HDFS_UGI", {"HDFS_UGI": "hadoop,pw"}) == "hadoop,pw"
    assert secrets.read("HDFS_UGI", {}) == ""
    assert secrets.read("HDFS_UGI", {"HDFS_UGI_FILE": ""}) == ""


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(secrets.SecretError, match=r"HDFS_UGI_FILE=.*absent: cannot read"):
        secrets.read("HDFS_UGI", {"HDFS_UGI_FILE": str(missing)})
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(secrets.SecretError, match="not UTF-8"):
        secrets.read("HDFS_UGI", {"HDFS_UGI_FILE": str(binary)})


def test_the_program_names_the_files_the_images_read(tmp_path: Path) -> None:
    """secret_files' variables and paths, laid out as the kubelet mounts the Secret (one
    file per key under the mount path), read back by secrets.read."""
    files = kube.secret_files("kafka-sasl", "kafka-client", ["KAFKA_SASL_USERNAME"])
    (mount,) = files.mounts
    (volume,) = files.volumes
    assert mount["read_only"] and mount["mount_path"].startswith(secrets.SECRETS_DIR + "/")
    assert volume["secret"]["secret_name"] == "kafka-client"
    assert volume["secret"]["default_mode"] == 0o440
    (variable,) = files.env
    root = tmp_path / "root"
    local = root / str(variable["value"]).lstrip("/")
    local.parent.mkdir(parents=True)
    local.write_text("alice")
    env = {variable["name"]: str(local)}
    assert secrets.read("KAFKA_SASL_USERNAME", env) == "alice"


def test_sasl_credentials_come_from_files(tmp_path: Path) -> None:
    (tmp_path / "user").write_text("alice\n")
    (tmp_path / "password").write_text("pw")
    base = {FeedbackEnv.BOOTSTRAP: "kafka:9092", FeedbackEnv.SECURITY_PROTOCOL: "SASL_SSL"}
    env = {
        **base,
        "KAFKA_SASL_USERNAME_FILE": str(tmp_path / "user"),
        "KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "password"),
    }
    config = kafka_client_config(env)
    assert (config["sasl.username"], config["sasl.password"]) == ("alice", "pw")
    with pytest.raises(FeedbackConfigError, match="KAFKA_SASL_PASSWORD_FILE"):
        kafka_client_config({**env, "KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "absent")})
    with pytest.raises(FeedbackConfigError, match=r"KAFKA_SASL_PASSWORD \(or .*_FILE\)"):
        kafka_client_config({**base, "KAFKA_SASL_USERNAME": "alice"})
