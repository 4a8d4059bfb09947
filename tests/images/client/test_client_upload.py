"""`upload`: hour directories and slot.conf to S3-compatible storage (moto) and HDFS
(MiniDFSCluster), donefiles last, the destination from flags or stack outputs."""

from __future__ import annotations

import json
import os
import sys

import pytest
from elasticctr_client import upload as upload_module
from elasticctr_common.storage import LocalStore, open_store

from tests.images.client.conftest import fake_pulumi, run_client


@pytest.fixture
def hours(tmp_path):
    src = tmp_path / "local"
    for hour, files, done in (("20191221/00", 2, True), ("20191221/01", 1, False)):
        d = src / hour
        d.mkdir(parents=True)
        for i in range(files):
            (d / f"part-{i:05d}").write_text(f"1 0 {i}:101\n1 1 {i + 7}:102\n")
        if done:
            (d / "donefile").write_text("")
    (src / "notes.txt").write_text("not an hour")
    slot_conf = tmp_path / "slot.conf"
    slot_conf.write_text("101\n102\n")
    return src, slot_conf


def check_uploaded(store, src) -> None:
    assert store.list() == ["20191221", "slot.conf"]
    assert store.list("20191221/00") == ["donefile", "part-00000", "part-00001"]
    assert store.list("20191221/01") == ["part-00000"]  # no donefile: not ready
    assert store.read_text("20191221/00/part-00001") == (src / "20191221/00/part-00001").read_text()
    assert store.read_text("slot.conf") == "101\n102\n"


def test_upload_to_s3(hours, s3_server, s3_env):
    src, slot_conf = hours
    bucket = s3_server.create_bucket()
    done = run_client(
        "upload",
        str(src),
        "--dest",
        f"s3://{bucket}/train_data",
        "--slot-conf",
        str(slot_conf),
        env=s3_env,
    )
    assert done.returncode == 0, done.stderr
    assert "uploaded 3 files" in done.stdout and "1 hours ready, 1 without donefile" in done.stdout
    assert "20191221/01: 1 files (no donefile: not ready for training)" in done.stderr
    check_uploaded(open_store(f"s3://{bucket}/train_data"), src)


def test_upload_to_hdfs(hours, hdfs_cluster, hdfs_env):
    src, slot_conf = hours
    dest = f"{hdfs_cluster.url}/train_data"
    done = run_client(
        "upload", str(src), "--dest", dest, "--slot-conf", str(slot_conf), env=hdfs_env
    )
    assert done.returncode == 0, done.stderr
    check_uploaded(open_store(dest), src)


def test_destination_from_stack_outputs(hours, s3_server, tmp_path):
    src, _ = hours
    bucket = s3_server.create_bucket()
    env = {k: v for k, v in s3_server.env().items() if k != "AWS_ENDPOINT_URL"}
    outputs = {"bucket": bucket, "storage_endpoint": s3_server.endpoint_url}
    env.update(fake_pulumi(tmp_path, outputs))
    done = run_client("upload", str(src), "--data-source", "storage", env=env)
    assert done.returncode == 0, done.stderr
    assert f"to s3://{bucket}/train_data" in done.stdout
    store = s3_server.client().list_objects_v2(Bucket=bucket)["Contents"]
    assert "train_data/20191221/00/donefile" in {o["Key"] for o in store}


def test_each_hours_donefile_goes_last(hours, tmp_path, monkeypatch):
    src, _ = hours
    order: list[str] = []

    class Recording(LocalStore):
        def upload(self, local_path, path):
            order.append(path)
            super().upload(local_path, path)

    monkeypatch.setattr(upload_module, "open_store", lambda uri: Recording(uri))
    upload_module.upload(src, f"file://{tmp_path}/dest")
    assert order == [
        "20191221/00/part-00000",
        "20191221/00/part-00001",
        "20191221/00/donefile",
        "20191221/01/part-00000",
    ]


def test_bad_slot_conf_uploads_nothing(hours, tmp_path):
    src, slot_conf = hours
    slot_conf.write_text("101\nabc\n")
    done = run_client(
        "upload", str(src), "--dest", f"file://{tmp_path}/dest", "--slot-conf", str(slot_conf)
    )
    assert (
        done.returncode == 3
        and "slot id must be an integer from 0 to 18446744073709551615, got 'abc'" in done.stderr
    )
    assert not (tmp_path / "dest").exists()
    done = run_client("upload", str(tmp_path / "nothing"), "--dest", f"file://{tmp_path}/d")
    assert done.returncode == 3 and "is not a directory" in done.stderr


def test_upload_json(hours, tmp_path):
    src, slot_conf = hours
    dest = f"file://{tmp_path}/dest"
    done = run_client("upload", str(src), "--dest", dest, "--slot-conf", str(slot_conf), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "dest": dest, "ready": ["20191221/00"], "not_ready": ["20191221/01"], "files": 3,
        "bytes": sum(f.stat().st_size for f in src.rglob("part-*")),
    }  # fmt: skip


IN_CLUSTER_HDFS = "hdfs://hdfs-namenode.elasticctr-dev.svc.cluster.local:8020"


def fake_kubectl(tmp_path, fail: str = "", hang_once: str = "") -> dict:
    """A `kubectl` on PATH standing in for the Kubernetes API and a datanode pod's
    `hdfs dfs`: it records each call, and `exec ... -- hdfs dfs -put -f - PATH` writes its
    stdin under tmp_path/hdfs/PATH (`-mkdir -p PATH` makes it). `fail`: what it says on
    stderr before exiting 1, as kubectl does when the API refuses. `hang_once`: the first
    put to a path ending so reads its stdin and then never ends, as a stuck exec does."""
    bin_dir = tmp_path / "kbin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, json, pathlib\n"
        f"root = pathlib.Path({str(tmp_path / 'hdfs')!r})\n"
        f"with open({str(tmp_path / 'kubectl-calls')!r}, 'a') as log:\n"
        "    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"if {fail!r}:\n"
        f"    sys.stderr.write({fail!r} + '\\n'); sys.exit(1)\n"
        "argv = sys.argv[sys.argv.index('--') + 1:]\n"
        "assert argv[:2] == ['hdfs', 'dfs'], argv\n"
        "path = root / argv[-1].lstrip('/')\n"
        "if argv[2] == '-mkdir':\n"
        "    path.mkdir(parents=True, exist_ok=True)\n"
        "else:\n"
        "    path.parent.mkdir(parents=True, exist_ok=True)\n"
        "    data = sys.stdin.buffer.read()\n"
        "    hung = root.parent / 'hung-once'\n"
        f"    if {hang_once!r} and argv[-1].endswith({hang_once!r}) and not hung.exists():\n"
        "        hung.touch(); import time; time.sleep(600)\n"
        "    path.write_bytes(data)\n"
    )
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def kubectl_calls(tmp_path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "kubectl-calls").read_text().splitlines()]


def test_an_in_cluster_hdfs_is_written_through_a_datanode_pod(hours, tmp_path):
    src, slot_conf = hours
    env = {**fake_pulumi(tmp_path, {"hdfs_address": IN_CLUSTER_HDFS})}
    env["PATH"] = fake_kubectl(tmp_path)["PATH"].replace(os.environ["PATH"], env["PATH"])
    done = run_client(
        "--stack", "dev", "upload", str(src), "--slot-conf", str(slot_conf), env=env,
        drop=("KUBERNETES_SERVICE_HOST", "KUBECONFIG"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"to {IN_CLUSTER_HDFS}/train_data: 1 hours ready" in done.stdout
    check_uploaded(LocalStore(f"file://{tmp_path}/hdfs/train_data"), src)
    calls = kubectl_calls(tmp_path)
    exec_ = ["--namespace", "elasticctr-dev", "exec", "-i", "statefulset/hdfs-datanode", "--"]
    assert calls[0] == [*exec_, "hdfs", "dfs", "-mkdir", "-p", "/train_data"]
    puts = [call[-1] for call in calls[1:]]
    assert all(call[:-1] == [*exec_, "hdfs", "dfs", "-put", "-f", "-"] for call in calls[1:])
    assert puts == [
        "/train_data/20191221/00/part-00000",
        "/train_data/20191221/00/part-00001",
        "/train_data/20191221/00/donefile",  # the hour is ready after its data
        "/train_data/20191221/01/part-00000",
        "/train_data/slot.conf",
    ]


def test_a_put_whose_exec_hangs_is_sent_again(hours, tmp_path):
    src, slot_conf = hours
    env = {**fake_pulumi(tmp_path, {"hdfs_address": IN_CLUSTER_HDFS})}
    kubectl_path = fake_kubectl(tmp_path, hang_once="/donefile")["PATH"]
    env["PATH"] = kubectl_path.replace(os.environ["PATH"], env["PATH"])
    done = run_client(
        "--stack", "dev", "--timeout", "2", "upload", str(src), "--slot-conf", str(slot_conf),
        env=env, drop=("KUBERNETES_SERVICE_HOST", "KUBECONFIG"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "hung-once").exists()  # the first put of the donefile did hang
    check_uploaded(LocalStore(f"file://{tmp_path}/hdfs/train_data"), src)
    puts = [call[-1] for call in kubectl_calls(tmp_path)[1:]]
    assert puts[1:5] == [
        "/train_data/20191221/00/part-00001",
        "/train_data/20191221/00/donefile",
        "/train_data/20191221/00/donefile",  # again, after the first passed its limit
        "/train_data/20191221/01/part-00000",
    ]


def test_a_refused_exec_is_one_line_naming_the_pod(hours, tmp_path):
    src, _ = hours
    refusal = (
        'Error from server (Forbidden): pods "hdfs-datanode-0" is forbidden: User "dev" '
        'cannot create resource "pods/exec" in API group "" in the namespace "elasticctr-dev"'
    )
    env = fake_kubectl(tmp_path, fail=refusal)
    dest = f"{IN_CLUSTER_HDFS}/train_data"
    done = run_client("upload", str(src), "--dest", dest, env=env,
                      drop=("KUBERNETES_SERVICE_HOST",))  # fmt: skip
    assert done.returncode == 5, done.stderr  # credentials: the API refused
    (line,) = done.stderr.strip().splitlines()
    assert "`hdfs dfs -mkdir` in statefulset/hdfs-datanode (namespace elasticctr-dev" in line
    assert 'cannot create resource "pods/exec"' in line
    assert len(kubectl_calls(tmp_path)) == 1  # nothing was sent after the check failed


def test_no_kubectl_for_an_in_cluster_hdfs_says_what_to_do(hours, tmp_path):
    src, _ = hours
    dest = f"{IN_CLUSTER_HDFS}/train_data"
    done = run_client("upload", str(src), "--dest", dest, env={"PATH": "/nonexistent"},
                      drop=("KUBERNETES_SERVICE_HOST",))  # fmt: skip
    assert done.returncode == 4, done.stderr
    assert "kubectl is not on PATH to write through a datanode pod" in done.stderr
    assert "exec -i statefulset/hdfs-datanode -- hdfs dfs -put -f -" in done.stderr
