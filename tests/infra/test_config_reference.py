"""Pulumi.yaml's config section and the README's reference follow the model in infra/config.py."""

from __future__ import annotations

import subprocess
import sys

import yaml

from infra.config import StackConfig
from infra.config_reference import (
    README_END,
    README_START,
    markdown_reference,
    pulumi_config_section,
)
from tests.support.pulumi_harness import ROOT


def test_pulumi_yaml_declares_every_key_with_the_model_default() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    assert project["config"] == pulumi_config_section()
    assert list(project["config"]) == list(StackConfig.model_fields)
    assert project["main"] == "infra/" and project["stackConfigDir"] == "stacks"
    for key, entry in project["config"].items():
        assert entry["description"], key
        assert "default" in entry, key


def test_declared_defaults_are_the_model_defaults() -> None:
    """Loading Pulumi.yaml's defaults gives exactly the model's default config."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    defaults = {key: entry["default"] for key, entry in project["config"].items()}
    assert StackConfig.model_validate(defaults) == StackConfig()


def test_readme_reference_is_current() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start, end = readme.index(README_START), readme.index(README_END) + len(README_END)
    assert readme[start:end] == markdown_reference()
    for key in ("trainers", "data.ugi", "cube_shards", "hdfs.address", "images.tags.trainer"):
        assert f"| `{key}` |" in readme


def test_generator_check_mode_agrees() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_config.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_generator_help_prints_help_and_writes_nothing() -> None:
    before = {name: (ROOT / name).read_bytes() for name in ("Pulumi.yaml", "README.md")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_config.py"), "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0 and "--check" in result.stdout, result.stderr
    assert {name: (ROOT / name).read_bytes() for name in before} == before
    assert "up to date" not in result.stdout and "rewrote" not in result.stdout
