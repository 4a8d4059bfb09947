"""The MinIO set-up Job's script against a real MinIO server and `mc` on loopback: it makes
the bucket and a user per workload whose policy allows what that workload does and nothing
more, checked with the workloads' own storage library; a second run changes nothing.

The binaries are MinIO's and mc's as tools/build-tools.sh builds them (ELASTICCTR_MINIO_BIN
and ELASTICCTR_MC_BIN, else the tool cache); without them the test is skipped.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from elasticctr_common.ports import free_port
from elasticctr_common.secrets import file_variable
from elasticctr_common.storage import open_store

from components import cube, mlflow, serving, training
from components.bucket_access import BucketUser, s3_policy_json
from components.generated_secret import ALPHABET
from components.minio import ROOT_KEYS, key_variables, setup_script
from components.object_storage import credentials_file
from tests.support.services import ServerProcess, http_ready
from tools.localcluster.settings import CACHE

pytestmark = pytest.mark.slow
BUCKET = "elasticctr"
USERS = (
    training.bucket_user("train_data"),
    cube.SHARD_BUCKET_USER,
    cube.TRANSFER_BUCKET_USER,
    serving.BUCKET_USER,
    mlflow.BUCKET_USER,
)


def _key(length: int) -> str:
    """A secret key as the stack makes MinIO's (components/generated_secret.py): letters and
    digits. (URL-safe base64 may start with '-', which `mc` takes for a flag: the stack
    never makes such a key, and mode minio takes no key from the user.)"""
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def _binary(name: str) -> str | None:
    explicit = os.environ.get(f"ELASTICCTR_{name.upper()}_BIN")
    if explicit:
        return explicit
    found = sorted((CACHE / "tools").glob(f"{name}-*/bin/{name}"))
    return str(found[-1]) if found else None


MINIO, MC = _binary("minio"), _binary("mc")


class MinioServer(ServerProcess):
    name = "minio"

    def __init__(self, binary: str) -> None:
        super().__init__()
        self.binary, self.port = binary, free_port()
        self.root = ("root-" + secrets.token_hex(6), _key(32))

    def _pick_new_port(self) -> bool:
        self.port = free_port()
        return True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        assert self.workdir is not None
        data = self.workdir / "data"
        return [self.binary, "server", str(data), "--address", f"127.0.0.1:{self.port}",
                "--console-address", f"127.0.0.1:{free_port()}"]  # fmt: skip

    def _env(self) -> dict[str, str]:
        # As in its pod: the root keys in files, named by MINIO_ROOT_USER_FILE/..._PASSWORD_FILE.
        assert self.workdir is not None
        return {
            **os.environ,
            **write_secret_files(
                self.workdir / "secrets", dict(zip(ROOT_KEYS, self.root, strict=True))
            ),
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
        }

    def _ready(self) -> bool:
        return http_ready(self.url + "/minio/health/ready")


@pytest.fixture(scope="module")
def minio(tmp_path_factory) -> Iterator[tuple[MinioServer, dict[str, tuple[str, str]]]]:
    if MINIO is None or MC is None:
        pytest.skip("no minio/mc binaries (tools/build-tools.sh minio mc)")
    keys = {u.name: (secrets.token_hex(10), _key(40)) for u in USERS}
    with MinioServer(MINIO) as server:
        work = tmp_path_factory.mktemp("minio-job")
        for user in USERS:
            (work / f"{user.name}.json").write_text(s3_policy_json(f"arn:aws:s3:::{BUCKET}", user))
        env = {
            **os.environ,
            "PATH": f"{Path(MC).parent}:{os.environ['PATH']}",
            "HOME": str(work),
            "MC_CONFIG_DIR": str(work / "mc"),
        }
        # As in the Job: every key in a file its <VAR>_FILE names, none in the environment.
        values = dict(zip(ROOT_KEYS, server.root, strict=True))
        for user in USERS:
            values.update(zip(key_variables(user), keys[user.name], strict=True))
        env.update(write_secret_files(work / "secrets", values))
        script = setup_script(BUCKET, USERS, server.url, str(work))
        for attempt in (1, 2):  # the Job may run again (a retry, a new stack version)
            done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True,
                                  text=True, timeout=120)  # fmt: skip
            assert done.returncode == 0, f"run {attempt}: {done.stdout}\n{done.stderr}"
        yield server, keys


def write_secret_files(directory: Path, values: dict[str, str]) -> dict[str, str]:
    """Each value in a file of its own: the <VAR>_FILE variables naming them."""
    directory.mkdir(parents=True, exist_ok=True)
    for var, value in values.items():
        (directory / var).write_text(value)
    return {file_variable(var): str(directory / var) for var in values}


def client(server: MinioServer, key: tuple[str, str]):
    return boto3.client(
        "s3",
        endpoint_url=server.url,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        region_name="us-east-1",
    )


def allowed(call) -> bool:
    try:
        call()
    except ClientError as err:
        assert err.response["Error"]["Code"] == "AccessDenied", err
        return False
    return True


PREFIXES = ("models", "cube", "checkpoints", "mlflow", "train_data", "other")


def rights(server: MinioServer, key: tuple[str, str]) -> dict[str, str]:
    """What a key may do per prefix: r(ead), w(rite), d(elete), l(ist)."""
    s3 = client(server, key)
    found = {}
    for prefix in PREFIXES:
        name = f"{prefix}/probe-{secrets.token_hex(4)}"
        flags = ""
        flags += (
            "l"
            if allowed(lambda p=prefix: s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{p}/"))
            else ""
        )
        flags += (
            "r" if allowed(lambda p=prefix: s3.get_object(Bucket=BUCKET, Key=f"{p}/seed")) else ""
        )
        flags += (
            "w" if allowed(lambda n=name: s3.put_object(Bucket=BUCKET, Key=n, Body=b"x")) else ""
        )
        flags += (
            "d"
            if allowed(lambda p=prefix: s3.delete_object(Bucket=BUCKET, Key=f"{p}/gone"))
            else ""
        )
        found[prefix] = flags
    return found


def test_each_workload_may_do_what_it_does_and_nothing_else(minio) -> None:
    server, keys = minio
    root = client(server, server.root)
    for prefix in PREFIXES:
        root.put_object(Bucket=BUCKET, Key=f"{prefix}/seed", Body=b"seed")
    expected = {
        # exports versions, checkpoints (keeps two), reads the hours; never deletes a model
        "training": {"models": "lrw", "checkpoints": "lrwd", "train_data": "lr"},
        "cube": {"cube": "lr"},  # agents fetch shards
        "cube-transfer": {"models": "lr", "cube": "lrwd"},  # builds, publishes, prunes
        "serving": {"models": "lr"},  # dense models
        "mlflow": {"mlflow": "lrwd"},  # artifacts
    }
    for user in USERS:
        got = {p: f for p, f in rights(server, keys[user.name]).items() if f}
        assert got == expected[user.name], user.name


def test_the_workloads_storage_library_works_within_its_rights(
    minio, tmp_path, monkeypatch
) -> None:
    """What the images do (elasticctr_common.storage: list, exists, multipart upload,
    download, delete a tree) under the policies, as the transfer and an agent."""
    server, keys = minio
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)

    def as_user(user: BucketUser, uri: str):
        # As in the pods: the workload's Secret key `credentials`, the file the program writes.
        credentials = tmp_path / f"{user.name}.credentials"
        credentials.write_text(credentials_file(*keys[user.name]))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
        boto3.setup_default_session()  # boto3 keeps the first credentials it found
        return open_store(uri)

    big = tmp_path / "shard"
    big.write_bytes(os.urandom(9 * 1024 * 1024))  # above boto3's multipart threshold (8 MiB)
    transfer = as_user(cube.TRANSFER_BUCKET_USER, f"s3://{BUCKET}/cube")
    transfer.upload(big, "7/shard-0.cube")
    transfer.write_text("7/manifest.json", "{}")
    assert transfer.exists("7") and transfer.list("7") == ["manifest.json", "shard-0.cube"]
    agent = as_user(cube.SHARD_BUCKET_USER, f"s3://{BUCKET}/cube")
    agent.download("7/shard-0.cube", tmp_path / "fetched")
    assert (tmp_path / "fetched").read_bytes() == big.read_bytes()
    with pytest.raises(ClientError, match="AccessDenied"):
        agent.write_text("7/manifest.json", "tampered")
    transfer = as_user(cube.TRANSFER_BUCKET_USER, f"s3://{BUCKET}/cube")
    transfer.delete("7")
    assert not transfer.exists("7")
