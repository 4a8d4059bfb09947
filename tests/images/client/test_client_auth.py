"""The client against serving with a bearer token (serving.auth token): the token comes
from --token, $ELASTICCTR_SERVING_TOKEN, or the secret stack output serving_token."""

from __future__ import annotations

import json
import secrets
import string

import pytest

from tests.images.client.conftest import fake_pulumi, run_client
from tests.support.serving import Processes, start_stack

pytestmark = pytest.mark.slow
# As the stack makes it (components/generated_secret.py): letters and digits. A token of
# token_urlsafe's alphabet may start with "-", which argparse takes for an option after
# --token (a user's own token like that goes as --token=-...; tested below).
TOKEN = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(40))
LINE = "1 1 5:101 7:102\n"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, cube_server_bin):
    root = tmp_path_factory.mktemp("client-auth-stack")
    procs = Processes(root)
    try:
        yield start_stack(procs, root, serving_env={"SERVING_AUTH_TOKEN": TOKEN})
    finally:
        procs.stop_all()


@pytest.fixture
def lines(tmp_path):
    path = tmp_path / "lines"
    path.write_text(LINE * 3)
    return str(path)


def test_without_the_token_serving_refuses(guarded, lines):
    done = run_client("predict", lines, "--serving-url", guarded.serving.url, "--no-progress")
    assert done.returncode == 1 and "serving answered 401" in done.stderr, done.stderr


def test_the_token_from_the_stack_outputs(guarded, lines, tmp_path):
    outputs = {"serving_url": guarded.serving.url, "serving_token": TOKEN}
    env = fake_pulumi(tmp_path, outputs)
    done = run_client("predict", lines, "--no-progress", env=env)
    assert done.returncode == 0 and "examples: 3 (model version 1)" in done.stdout, done.stderr
    done = run_client("status", "--json", env=env)
    assert json.loads(done.stdout)["serving"]["version"] == 1, done.stdout


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_the_token_from_a_flag_or_the_environment(guarded, lines, where):
    flag = ["--token", TOKEN] if where == "flag" else []
    env = {"ELASTICCTR_SERVING_TOKEN": TOKEN} if where == "environment" else {}
    done = run_client(*flag, "predict", lines, "--serving-url", guarded.serving.url,
                      "--no-progress", env=env)  # fmt: skip
    assert done.returncode == 0 and "examples: 3" in done.stdout, done.stderr


def test_a_token_that_looks_like_an_option(guarded, lines):
    """--token=VALUE takes any value; serving refuses the wrong one with 401."""
    done = run_client("--token=-" + TOKEN[1:], "predict", lines, "--serving-url",
                      guarded.serving.url, "--no-progress")  # fmt: skip
    assert done.returncode == 1 and "serving answered 401" in done.stderr, done.stderr
