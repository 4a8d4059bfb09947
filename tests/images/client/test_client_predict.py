"""`predict` against real serving: probabilities per line, the AUC against the click
labels, skipped lines, batches, endpoints from `pulumi stack output`, status."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from tests.images.client.conftest import NO_LOGIN, fake_pulumi, run_client, with_kubectl
from tests.images.client.test_client_logs import kubeconfig_of
from tests.support.compressors import compress
from tests.support.serving import (
    HUGE_KEY,
    NAN_KEY,
    clean_instances,
    expected,
    poisoned_stack,
    probe_instances,
)

pytestmark = pytest.mark.slow


def rank_auc(labels, scores) -> float:
    labels, scores = np.asarray(labels, bool), np.asarray(scores)
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos, neg = labels.sum(), (~labels).sum()
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def to_lines(instances: list[dict], labels: np.ndarray) -> list[str]:
    lines = []
    for instance, label in zip(instances, labels, strict=True):
        tokens = [f"{f}:{e['slot_name']}" for e in instance["slots"] for f in e["feasigns"]]
        lines.append(f"1 {int(label)} {' '.join(tokens)}")
    return lines


@pytest.fixture(scope="module")
def data(stack, tmp_path_factory):
    instances = probe_instances(stack.spec, 300, seed=13)
    instances = [i for i in instances if all(e["feasigns"] for e in i["slots"])]
    probs = expected(stack.spec, 1, instances)
    labels = (np.random.default_rng(2).random(len(probs)) < probs).astype(int)
    lines = to_lines(instances, labels)
    huge = "9" * 5000  # int() refuses it; the trainer reads it as out of range
    bad = ["1", "1 x 5:101", "2 3 5:101", "1 0 5:999", "1 0 abc:101", "1 0", "1 0 \u00b2:101",
           f"1 0 {huge}:101"]  # fmt: skip
    path = tmp_path_factory.mktemp("lines") / "part-00000"
    path.write_text("\n".join(lines[:100] + bad + lines[100:]) + "\n")
    return path, probs, labels


def test_predict_prints_probabilities_and_the_auc(stack, data, tmp_path):
    path, probs, labels = data
    out = tmp_path / "out.tsv"
    done = run_client(
        "predict",
        str(path),
        "--serving-url",
        stack.serving.url,
        "--batch-size",
        "50",
        "--output",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    rows = np.loadtxt(out, usecols=(1, 2, 3))
    assert len(rows) == len(probs)
    assert np.array_equal(rows[:, 0], labels)
    assert np.max(np.abs(rows[:, 1] - probs)) <= 1e-5
    assert set(rows[:, 2]) == {1}
    found = re.search(r"^AUC: (\S+)$", done.stdout, re.M)
    assert found is not None, done.stdout
    auc = float(found.group(1))
    assert auc == pytest.approx(rank_auc(labels, probs), abs=1e-4)
    assert f"examples: {len(probs)} (model version 1), skipped lines: 8" in done.stdout
    assert "unknown slot 999" in done.stdout
    # the progress bar; not on a terminal, one line per tenth
    assert re.search(rf"\] {len(probs)}/{len(probs) + 8} examples", done.stderr), done.stderr


def test_predict_reads_data_files_as_the_trainer_does(stack, data, tmp_path):
    """A compressed file (by its bytes: the name says nothing) is predicted as its text; a
    file that is not text is refused, named."""
    path, probs, _ = data
    packed = tmp_path / "part-00000.log"
    packed.write_bytes(compress("zstd", path.read_bytes()))
    url = stack.serving.url
    done = run_client("predict", str(packed), "--serving-url", url, "--no-progress")
    assert done.returncode == 0, done.stderr
    assert f"examples: {len(probs)} (model version 1), skipped lines: 8" in done.stdout
    noise = tmp_path / "noise"
    noise.write_bytes(random.Random(22).randbytes(5000))
    done = run_client("predict", str(path), str(noise), "--serving-url", url, "--no-progress")
    assert done.returncode == 3
    assert f"error: {noise}: not UTF-8 text at line 1" in done.stderr


def test_endpoints_come_from_pulumi_stack_output(stack, data, tmp_path):
    path, probs, _ = data
    env = fake_pulumi(tmp_path, {"serving_url": stack.serving.url, "namespace": "x"})
    done = run_client("--stack", "dev", "predict", str(path), "--no-progress", env=env)
    assert done.returncode == 0, done.stderr
    assert f"examples: {len(probs)}" in done.stdout
    args = (tmp_path / "pulumi-args").read_text()
    assert args.strip() == "stack output --json --show-secrets --stack dev"
    done = run_client("predict", str(path), env=fake_pulumi(tmp_path / "empty", {}))
    assert done.returncode == 4
    assert "no --serving-url: pass --serving-url, or run where" in done.stderr


def test_predict_reports_a_refused_batch(stack, tmp_path):
    path = tmp_path / "lines"
    path.write_text("1 0 18446744073709551615:101\n")
    done = run_client("predict", str(path), "--serving-url", stack.serving.url + "/nope")
    assert done.returncode == 7 and "serving answered 404" in done.stderr


def test_status_shows_versions_and_training_progress(stack, mlflow_server, tmp_path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.tracking_uri)
    experiment = client.create_experiment("client-status-test")
    for name in ("trainer-0", "trainer-1"):
        run = client.create_run(experiment, run_name=name)
        for step, auc in ((1, 0.70), (2, 0.75)):
            client.log_metric(run.info.run_id, "auc", auc, step=step)
            client.log_metric(run.info.run_id, "loss", 0.5 / step, step=step)
        if name == "trainer-0":  # version 2 held back by the publish gate
            client.log_metric(run.info.run_id, "published", 0.0, step=2)
            client.set_tag(run.info.run_id, "held_back_versions", "2: held-out AUC 0.70 ...")
    transfer = stack.cluster.transfer_url("")
    args = [
        "status",
        "--mlflow-url",
        mlflow_server.tracking_uri,
        "--experiment",
        "client-status-test",
        "--serving-url",
        stack.serving.url,
        "--transfer-url",
        transfer,
    ]
    done = run_client(*args, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["serving"]["version"] == 1 and report["serving"]["cube_committed"] == 1
    assert report["cube"]["committed"] == 1 and report["cube"]["shards"] == 3
    assert report["cube"]["registry"] is None  # this transfer is given no MLflow
    runs = report["training"]["runs"]
    assert [r["run"] for r in runs] == ["trainer-0", "trainer-1"]
    assert all(r["pass"] == 2 and r["metrics"]["auc"] == pytest.approx(0.75) for r in runs)
    text = run_client(*args).stdout
    assert "serving: model version 1, cube committed 1 (from transfer)" in text
    assert "trainer-0: RUNNING, pass 2  auc=0.75 loss=0.25 published=0" in text
    assert "versions held back (not published): 2: held-out AUC 0.70 ..." in text
    assert runs[0]["held_back"] == "2: held-out AUC 0.70 ..." and runs[1]["held_back"] is None
    assert "cube: committed 1" in text
    # Flags name what to ask: a stack that cannot be read is a warning, not the end.
    no_login = fake_pulumi(tmp_path / "no-login", None)
    broken = run_client(
        "--timeout", "2", "status", "--serving-url", "http://127.0.0.1:9", env=no_login
    )  # fmt: skip
    assert broken.returncode == 1 and "serving: unavailable" in broken.stdout
    assert f"warning: `stack output --json --show-secrets` failed: {NO_LOGIN}" in broken.stderr
    # Nothing given but the stack: its error is the answer.
    nothing = run_client("status", env=no_login)
    assert nothing.returncode == 4 and NO_LOGIN in nothing.stderr
    # An in-cluster address from outside the cluster goes through kubectl port-forward;
    # here the kubeconfig's API server is a closed port: one line naming kubectl's error.
    closed = tmp_path / "kubeconfig"
    closed.write_text(json.dumps(kubeconfig_of("https://127.0.0.1:9")))
    outside = run_client(
        "--timeout", "2", "status", "--serving-url",
        "http://serving.elasticctr.svc.cluster.local:8010",
        env={**no_login, "PATH": f"{no_login['PATH']}:{with_kubectl()}", "KUBECONFIG": str(closed)},
        drop=("KUBERNETES_",),
    )  # fmt: skip
    assert outside.returncode == 6, outside.stderr
    assert outside.stderr.splitlines()[-1].startswith(
        "error: kubectl port-forward to svc/serving in namespace elasticctr failed: "
    ), outside.stderr


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory, cube_server_bin):
    yield from poisoned_stack(tmp_path_factory)


def test_examples_serving_fails_are_reported_and_left_out(poisoned, tmp_path):
    """Serving answers an example whose embedding is NaN (or whose slot sum overflows)
    with its own error: the client leaves it out of the rows and the AUC, names it, and
    exits 1; the other examples of its batch are predicted."""
    spec = poisoned.spec
    instances = [i for i in clean_instances(spec, 60, 14) if all(e["feasigns"] for e in i["slots"])]
    probs = expected(spec, 1, instances)
    labels = (np.random.default_rng(3).random(len(probs)) < probs).astype(int)
    lines = to_lines(instances, labels)
    nan_line = f"1 1 5:101 {NAN_KEY}:103"
    huge_line = f"1 0 {HUGE_KEY}:102 {HUGE_KEY}:102"
    path = tmp_path / "part-00000"
    path.write_text("\n".join([*lines[:10], nan_line, *lines[10:], huge_line]) + "\n")
    out = tmp_path / "out.tsv"
    done = run_client("predict", str(path), "--serving-url", poisoned.serving.url,
                      "--batch-size", "16", "--output", str(out))  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    rows = np.loadtxt(out, usecols=(0, 1, 2))
    assert [int(n) for n in rows[:, 0]] == [*range(1, 11), *range(12, len(lines) + 2)]
    assert np.max(np.abs(rows[:, 2] - probs)) <= 1e-5
    assert f"examples: {len(lines)} (model version 1), skipped lines: 0" in done.stdout
    assert (
        "failed examples (no prediction): 2 {'nonfinite_embedding': 1, 'nonfinite_pooled': 1}"
        in done.stdout
    )
    assert (
        f"  line 11: instance 10: the embedding of sparse key {NAN_KEY} (slot 103) in cube "
        "version 1 is not finite (NaN or infinite)"
    ) in done.stdout
    assert f"  line {len(lines) + 2}: instance " in done.stdout
    found = re.search(r"^AUC: (\S+)$", done.stdout, re.M)
    assert found is not None, done.stdout
    assert float(found.group(1)) == pytest.approx(rank_auc(labels, probs), abs=1e-4)
