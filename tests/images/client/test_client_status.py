"""`status` says what users see: an UNHEALTHY line when a cube-server does not serve the
committed version, or does not answer and requests fail, in the text and in `--json`, and
the command exits 1. Real processes: 3 cube shards, the transfer and serving."""

from __future__ import annotations

import json

import pytest
from elasticctr_cube.httpjson import call

from tests.images.client.conftest import run_client
from tests.support.serving import http, probe_instances, publish, start_stack

pytestmark = pytest.mark.slow
INFERENCE = "/ElasticCTRPredictionService/inference"


def test_status_reports_shards_off_the_committed_version_and_failing_requests(
    procs, tmp_path, cube_server_bin
):
    # The previous version stays loaded beside the committed one (no unload).
    stack = start_stack(procs, tmp_path, unload_after="-1")
    cluster = stack.cluster
    flags = [
        "status",
        "--serving-url",
        stack.serving.url,
        "--transfer-url",
        cluster.transfer_url(""),
    ]
    body = {"instances": probe_instances(stack.spec, 4)}
    assert http("POST", stack.serving.url + INFERENCE, body)[0] == 200

    healthy = run_client(*flags)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "UNHEALTHY" not in healthy.stdout
    assert "requests in the last 60 s: 1, failed 0, refused as bad input 0" in healthy.stdout
    report = json.loads(run_client(*flags, "--json").stdout)
    assert report["unhealthy"] == []
    assert [s["cur_version"] for s in report["cube"]["servers"].values()] == [1, 1, 1]

    # Version 2 is committed, then shard 1 goes back to version 1 behind the transfer's back:
    # every lookup still finds version 2 (it stays loaded there), so requests succeed.
    publish(stack.cluster, [2])
    assert cluster.wait_result(2)["result"] == "committed"
    stack.serving.wait_version(2)
    switched = call("POST", cluster.control_url(1) + "/control/switch", {"version": 1})
    assert switched[0] == 200, switched
    off = run_client(*flags)
    assert off.returncode == 1, off.stdout + off.stderr
    assert "UNHEALTHY cube: shard 1 serves version 1, not the committed 2" in off.stdout

    # A shard's server dies: requests fail, and status says so with the cause.
    procs.kill("server2")
    failed = [http("POST", stack.serving.url + INFERENCE, body)[0] for _ in range(3)]
    assert failed == [503] * 3
    down = run_client(*flags, "--json")
    assert down.returncode == 1
    report = json.loads(down.stdout)
    assert report["serving"]["requests"]["failure_causes"] == {"cube_unavailable": 3}
    (requests_line, cube_line) = report["unhealthy"]
    total = report["serving"]["requests"]["requests"]  # 4, unless the first one is past 60 s
    assert requests_line.startswith(
        f"serving: 3 of {total} requests failed in the last 60 s (cube_unavailable 3); "
        "last: HTTP 503 cube lookup failed: "
    ), requests_line
    assert cube_line.startswith(
        "cube: shard 1 serves version 1, not the committed 2; shard 2 does not answer (server: "
    ), cube_line
    text = run_client(*flags).stdout
    assert f"UNHEALTHY {requests_line}" in text and f"UNHEALTHY {cube_line}" in text


def test_what_a_wait_waits_for() -> None:
    from elasticctr_client.status import settled, waiting_for

    serving = {"version": 1, "requests": {"failed": 0}}
    assert settled({"serving": serving, "unhealthy": []})
    assert waiting_for({"serving": {**serving, "version": None}, "unhealthy": []}) == (
        "serving has no model version yet (training publishes the first)"
    )
    assert waiting_for({"cube": {"error": "refused"}, "serving": serving, "unhealthy": []}) == (
        "cube does not answer yet (refused)"
    )
    assert waiting_for({"serving": serving, "unhealthy": ["cube: shard 1 serves version 1"]}) == (
        "cube: shard 1 serves version 1"
    )


def test_status_shows_where_the_registrys_serving_alias_points() -> None:
    from elasticctr_client.status import render

    cube = {
        "committed": 4, "previous": 3, "phase": "idle", "kept_versions": [3, 4],
        "last_error": None, "shards": 2,
        "registry": {"model": "elasticctr-train", "serving": 3, "error": "version 4 ... not registered"},
    }  # fmt: skip
    text = render({"cube": cube, "unhealthy": []})
    assert (
        "  MLflow model elasticctr-train: alias serving -> version 3 "
        "(not moved: version 4 ... not registered)"
    ) in text.splitlines()
    assert "MLflow model" not in render({"cube": {**cube, "registry": None}, "unhealthy": []})


def test_wait_asks_again_until_its_time_is_up_then_reports(tmp_path) -> None:
    import socket
    import time

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: refused
    url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    try:
        started = time.monotonic()
        done = run_client("--retries", "0", "status", "--serving-url", url, "--wait", "6")
        waited = time.monotonic() - started
    finally:
        closed.close()
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("waiting: serving does not answer yet") == 1, done.stderr
    assert "serving: unavailable" in done.stdout
    assert waited >= 6, waited


def test_status_shows_the_stacks_firing_and_pending_alerts() -> None:
    """A real Prometheus evaluating rules: `status --prometheus-url` shows the project's
    firing alerts with their labels and summary, counts the pending ones, and leaves out
    another team's alerts of the same Prometheus."""
    import time

    from tests.support.prometheus import PrometheusServer, api_get

    ours = {"part_of": "elasticctr", "namespace": "prod"}
    rules = {
        "groups": [
            {
                "name": "t",
                "rules": [
                    {
                        "alert": "ElasticctrCubeServerNotReady",
                        "expr": 'label_replace(vector(1), "pod", "cube-0-0", "", "")',
                        "labels": {"severity": "critical", **ours},
                        "annotations": {"summary": "a cube server holds no version"},
                    },
                    {
                        "alert": "ElasticctrDataLag",
                        "expr": "vector(1)",
                        "for": "1h",
                        "labels": {"severity": "warning", **ours},
                    },
                    {"alert": "TheirDiskFull", "expr": "vector(1)", "labels": {"severity": "page"}},
                ],
            }
        ]
    }
    server = PrometheusServer(rules).start()
    try:
        deadline = time.monotonic() + 60
        while len(api_get(server.url, "/api/v1/alerts")["alerts"]) < 3:
            assert time.monotonic() < deadline, "Prometheus evaluated no rules in 60 s"
            time.sleep(0.5)
        text = run_client("status", "--prometheus-url", server.url)
        shown = run_client("status", "--prometheus-url", server.url, "--json")
    finally:
        server.stop()
    assert text.returncode == 0, text.stderr
    assert "alerts: 1 firing, 1 pending" in text.stdout, text.stdout
    assert (
        "  FIRING ElasticctrCubeServerNotReady (critical; namespace=prod, pod=cube-0-0) since "
    ) in text.stdout
    assert text.stdout.rstrip().endswith(": a cube server holds no version"), text.stdout
    assert "TheirDiskFull" not in text.stdout + shown.stdout
    alerts = json.loads(shown.stdout)["alerts"]
    assert [a["alert"] for a in alerts["firing"]] == ["ElasticctrCubeServerNotReady"]
    assert alerts["firing"][0]["labels"] == {"namespace": "prod", "pod": "cube-0-0"}
    assert [a["alert"] for a in alerts["pending"]] == ["ElasticctrDataLag"]
