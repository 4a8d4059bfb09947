"""Every image the cluster runs, built by tools/images.py, imported into a private
containerd and run there: user, entrypoint, and what the image must be able to do."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.containerd import PrivateContainerd
from tests.tools.conftest import images_tool, require_builder

pytestmark = pytest.mark.cluster

# image -> (USER, ENTRYPOINT, a command that must succeed inside, text its output contains)
EXPECTED: dict[str, tuple[str, list[str], list[str], str]] = {
    "trainer": (
        "10001",
        ["python", "-m", "elasticctr_trainer"],
        # Paddle, and the native pipe the image installed (15 % 10 = key 5 of slot 1)
        ["sh", "-c", "python -c 'import elasticctr_trainer, paddle; print(paddle.__version__)'"
         " && echo '1 0 15:1' | \"$ELASTICCTR_PIPE_BIN\" --slots 1 --sparse-dim 10"
         " --report-dir /tmp/reports"],
        "2.6.2\n1 0 1 1 1 0 1 5",
    ),
    "cube": (
        "10001",
        ["python", "-m", "elasticctr_cube"],
        ["python", "-c", "import os, elasticctr_cube; "
         "print(os.access(os.environ['ELASTICCTR_CUBE_SERVER_BIN'], os.X_OK))"],
        "True",
    ),
    "serving": (
        "10001",
        ["python", "-m", "elasticctr_serving"],
        ["python", "-c", "import ctypes, os, importlib.util, elasticctr_serving.rollout, paddle; "
         "assert importlib.util.find_spec('elasticctr_cube') is None, 'ships elasticctr_cube'; "
         "ctypes.CDLL(os.environ['ELASTICCTR_SERVING_PARSER_LIB']); print('parser loaded')"],
        "parser loaded",
    ),
    "client": (
        "10001",
        ["python", "-m", "elasticctr_client"],
        ["sh", "-c", "elasticctr --help >/dev/null && "
         "python -c 'import elasticctr_client, kubernetes; print(\"ok\")'"],
        "ok",
    ),
    "mlflow": (
        "10001:10001",
        ["mlflow", "server"],
        ["python", "-c", "import mlflow, boto3; print(mlflow.__version__)"],
        "3.17.2",
    ),
    "pause": ("65535:65535", ["/pause"], ["/pause", "-v"], "pause"),
    "hadoop": ("1000", [], ["hdfs", "version"], "Hadoop 3.4.1"),
    "minio": ("", [], ["sh", "-c", "minio --version && mc --version"], "version"),
    # prom/prometheus's user (nobody) and entrypoint; promtool checks the rule file.
    "prometheus": (
        "65534",
        ["/bin/prometheus"],
        ["sh", "-c", "/bin/prometheus --version && /bin/promtool --version"],
        "prometheus, version 3.16.0",
    ),
    "vc-scheduler": ("", ["/vc-scheduler"], ["/vc-scheduler", "--help"], "scheduler"),
    "vc-controller-manager": (
        "", ["/vc-controller-manager"], ["/vc-controller-manager", "--help"], "controller"
    ),
    "vc-webhook-manager": (
        "",
        ["/vc-webhook-manager"],
        ["sh", "-c", "cd / && test -x ./gen-admission-secret.sh && [[ -n sh ]] "
         "&& openssl version && kubectl version --client && /vc-webhook-manager --help"],
        "OpenSSL",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def built() -> dict[str, Any]:
    require_builder()
    tool = images_tool()
    # Named as the local stack names them: the cluster session's stack and the README
    # walkthrough build the same images under these names, so all three share one cache
    # entry each (an entry is per name, and the name is part of its key).
    options = tool.stack_options("local", tool.Options())
    results = tool.build(tool.catalog(options), tool.RUNTIME_IMAGES)
    return {result.name: result for result in results}


@pytest.fixture(scope="module")
def imported(built: dict[str, Any], private_containerd: PrivateContainerd) -> dict[str, str]:
    tool = images_tool()
    ready = [name for name in tool.RUNTIME_IMAGES if built[name].outcome in tool.READY]
    results = tool.import_into(private_containerd.address, ready, private_containerd.namespace)
    # a second import finds them all in place
    again = tool.import_into(private_containerd.address, ready, private_containerd.namespace)
    assert {r.outcome for r in again} == {"present"}
    return {r.name: r.reference for r in results}


def test_every_runtime_image_has_an_expectation() -> None:
    assert set(EXPECTED) == set(images_tool().RUNTIME_IMAGES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_image_runs_in_containerd(
    name: str,
    built: dict[str, Any],
    imported: dict[str, str],
    private_containerd: PrivateContainerd,
) -> None:
    result = built[name]
    if result.outcome == "unavailable":
        pytest.skip(f"{name}: {result.detail}")
    assert result.outcome in images_tool().READY, f"{name}: {result.outcome}: {result.detail}"
    reference = imported[name]
    user, entrypoint, command, expected = EXPECTED[name]
    config = private_containerd.image_config(reference)
    assert (config.get("User") or "") == user
    assert (config.get("Entrypoint") or []) == entrypoint
    run = private_containerd.exec_in_image(f"check-{name}", reference, command)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-3000:]
    assert expected in output
