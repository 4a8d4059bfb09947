"""Serving warns, once, when every feasign it receives is below the table size Paddle
Serving's ElasticCTR client reduces feasigns by: that client's requests would score
near-random otherwise."""

from __future__ import annotations

import logging

import pytest
from elasticctr_serving.feasign_check import (
    ENOUGH_FEASIGNS,
    PADDLE_CLIENT_TABLE_SIZE,
    ReducedFeasignCheck,
)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_only_reduced_feasigns_warn_once(caplog):
    check = ReducedFeasignCheck()
    for _ in range(3):
        check.observe(1000001, ENOUGH_FEASIGNS, PADDLE_CLIENT_TABLE_SIZE - 1)
    [message] = _warnings(caplog)
    assert "below 100000001" in message and "data.sparse_dim" in message


def test_raw_feasigns_or_the_clients_own_sparse_dim_never_warn(caplog):
    raw = ReducedFeasignCheck()
    raw.observe(1000001, 10, 2**63)
    raw.observe(1000001, 10 * ENOUGH_FEASIGNS, 5)
    same = ReducedFeasignCheck()
    same.observe(PADDLE_CLIENT_TABLE_SIZE, 10 * ENOUGH_FEASIGNS, 5)
    assert _warnings(caplog) == []
