"""The `elasticctr` command the set-up installs into .venv: the client's commands and the
clone's tools, run from a directory outside the clone as a user would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from elasticctr_client import command

ROOT = Path(__file__).resolve().parents[3]
# The console script beside the interpreter of the venv the set-up made.
ELASTICCTR = Path(sys.executable).parent / "elasticctr"


def run(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    if not ELASTICCTR.exists():
        pytest.fail(f"{ELASTICCTR} is missing: tools/setup.sh installs it (-e ./images/client)")
    # No PYTHONPATH: the command finds its packages as an installed one does.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run(
        [str(ELASTICCTR), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_installed_command_is_this_clones(tmp_path: Path) -> None:
    assert command.clone_root() == ROOT
    done = run(tmp_path, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: elasticctr ")
    for name in ("predict", "click", "logs", "status", "upload", *command.TOOLS):
        assert name in done.stdout


def test_generate_writes_where_the_user_is(tmp_path: Path) -> None:
    done = run(
        tmp_path, "generate", "--out", f"file://{tmp_path}/data", "--hours", "1",
        "--examples-per-hour", "200", "--heldout", "100",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    hours = sorted(p.relative_to(tmp_path / "data").as_posix() for p in tmp_path.glob("data/*/*/*"))
    assert hours == ["train/20191221/00"], hours


@pytest.mark.parametrize("tool", ["demo", "generate"])
def test_each_tool_answers_its_own_help(tmp_path: Path, tool: str) -> None:
    done = run(tmp_path, tool, "--help")
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout and "--help" not in done.stderr


def test_a_client_command_fails_on_one_line_naming_the_command(tmp_path: Path) -> None:
    done = run(tmp_path, "predict", "missing.txt", "--serving-url", "http://127.0.0.1:9")
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("error: ") and "missing.txt" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_tool_without_a_clone_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command.clone_root(tmp_path) is None
    assert command.main(["demo", "--help"], root=tmp_path) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: elasticctr demo runs a tool of the project's clone")
    assert str(tmp_path) in err


def test_dashboard_prints_or_writes_grafanas_json(tmp_path: Path) -> None:
    """No stack needed: the dashboard comes from the metrics contract alone."""
    import json

    from elasticctr_common.dashboard import dashboard

    printed = run(tmp_path, "dashboard")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == dashboard()
    written = run(tmp_path, "dashboard", "--out", "board.json", "--title", "prod")
    assert written.returncode == 0 and "import it in Grafana" in written.stderr
    assert json.loads((tmp_path / "board.json").read_text())["title"] == "prod"
    refused = run(tmp_path, "dashboard", "--out", "missing/board.json")
    assert refused.returncode == 3
    assert refused.stderr == (
        "error: --out missing/board.json: cannot write it (No such file or directory)\n"
    )


def test_alerts_prints_a_rule_file_or_a_prometheus_rule(tmp_path: Path) -> None:
    import yaml
    from elasticctr_common.alerts import prometheus_rule, rule_file

    printed = run(tmp_path, "alerts")
    assert printed.returncode == 0, printed.stderr
    assert yaml.safe_load(printed.stdout) == rule_file()
    operator = run(tmp_path, "alerts", "--operator", "elasticctr-prod")
    assert yaml.safe_load(operator.stdout) == prometheus_rule("elasticctr-prod")
    shorter = run(tmp_path, "alerts", "--for", "ElasticctrCubeShardDown=20s")
    rules = yaml.safe_load(shorter.stdout)["groups"][0]["rules"]
    assert {r["alert"]: r["for"] for r in rules}["ElasticctrCubeShardDown"] == "20s"
    for bad, said in (
        ("ElasticctrCubeShardDown", "--for takes ALERT=DURATION"),
        ("ElasticctrShardDown=20s", "unknown alerts ['ElasticctrShardDown']"),
        ("ElasticctrCubeShardDown=soon", "not Prometheus durations"),
    ):
        refused = run(tmp_path, "alerts", "--for", bad)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr


def test_scrape_config_prints_the_stacks_jobs_or_its_pod_monitors(tmp_path: Path) -> None:
    import yaml
    from elasticctr_common.scrape import pod_monitors, scrape_configs

    printed = run(tmp_path, "scrape-config", "prod", "--token-file", "/etc/prom/serving-token")
    assert printed.returncode == 0, printed.stderr
    assert yaml.safe_load(printed.stdout) == {
        "scrape_configs": scrape_configs("prod", 30, {"serving": "/etc/prom/serving-token"})
    }
    operator = run(tmp_path, "scrape-config", "prod", "--operator", "--interval", "15")
    assert list(yaml.safe_load_all(operator.stdout)) == pod_monitors("prod", 15)
    refused = run(tmp_path, "scrape-config", "prod", "--interval", "0")
    assert refused.returncode == 2
    assert "argument --interval: invalid integer >= 1 value: '0'" in refused.stderr
