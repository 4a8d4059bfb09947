"""Fixtures: the program's graph per stack, under mocks."""

from __future__ import annotations

import pytest

from tests.support import pulumi_harness as harness
from tests.support.stacks import STACKS, graph


@pytest.fixture(params=STACKS)
def stack_graph(request: pytest.FixtureRequest) -> tuple[str, harness.Graph]:
    return request.param, graph(request.param)


@pytest.fixture
def dev_graph() -> harness.Graph:
    return graph("dev")
