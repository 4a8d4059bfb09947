"""The four stacks run under mocks, as the engine configures them: their stack files, and
Pulumi.yaml's defaults for every key they do not set."""

from __future__ import annotations

import functools
from typing import Any

from infra.program import main
from tests.support import pulumi_harness as harness

STACKS = ("dev", "baidu-prod", "huawei-prod", "aws-prod")
# What a user adds with `pulumi config set --secret`, never written in the stack files.
TEST_SECRETS: dict[str, dict[str, str]] = {
    "baidu-prod": {
        "data.ugi": "alice,ugi-password-1",
        "storage.access_key": "AKBAIDU0001",
        "storage.secret_key": "SKBAIDU-secret-0001",
    },
    "huawei-prod": {
        "storage.access_key": "AKHUAWEI0001",
        "storage.secret_key": "SKHUAWEI-secret-0001",
    },
}


def config_with_secrets(
    stack: str, overrides: dict[str, Any] | None = None
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The stack file's config plus its test secrets (as secret keys) and overrides."""
    config = harness.with_project_defaults(harness.stack_config(stack))
    secret_keys = set()
    for path, value in TEST_SECRETS.get(stack, {}).items():
        key, field = path.split(".")
        full = f"elasticctr:{key}"
        config[full] = {**config.get(full, {}), field: value}
        secret_keys.add(full)
    config.update(overrides or {})
    return config, tuple(sorted(secret_keys))


@functools.cache
def graph(stack: str) -> harness.Graph:
    config, secrets = config_with_secrets(stack)
    return harness.run(main, config, secrets, stack=stack)


def run_stack(
    stack: str, overrides: dict[str, Any], previous: dict[str, Any] | None = None
) -> harness.Graph:
    """The stack with `overrides`; `previous`: its outputs of the last update, if any."""
    config, secrets = config_with_secrets(stack, overrides)
    return harness.run(main, config, secrets, stack=stack, previous=previous)
