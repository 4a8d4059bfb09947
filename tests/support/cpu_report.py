"""`--cpu-top N`: the N tests that took the most CPU, beside pytest's `--durations` (wall
time). On a 2-core machine running two sessions, wall time says how long a test waited as
much as how much it worked; CPU says what it cost the other session.

A test's CPU is pytest's own (user + system) plus that of the processes it started and
waited for (RUSAGE_CHILDREN counts a process once reaped, its own reaped children
included), over its set-up, call and teardown: a server a module-scoped fixture starts is
counted to the test whose teardown stops it. Pods and daemons nobody waits for are not
counted (the cluster session's containers: docs/tooling.md measures those apart).
"""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

CPU_SECONDS = pytest.StashKey[dict[str, float]]()


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cpu-top", type=int, default=0, metavar="N",
        help="list the N tests that took the most CPU (theirs and their processes')",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    config.stash[CPU_SECONDS] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    before = cpu_seconds()
    yield
    item.config.stash[CPU_SECONDS][item.nodeid] = cpu_seconds() - before


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config):
    top = config.getoption("--cpu-top")
    spent = config.stash[CPU_SECONDS]
    if not top or not spent:
        return
    total = sum(spent.values())
    terminalreporter.write_sep("=", f"most CPU: top {top} of {total:.0f} CPU-seconds in tests")
    for nodeid, seconds in sorted(spent.items(), key=lambda kv: -kv[1])[:top]:
        terminalreporter.write_line(f"{seconds:8.1f}s cpu  {nodeid}")
