"""A rollback asked for while the last rollout wraps up (its result recorded, old versions
being pruned under the transfer's lock) waits for it instead of being refused; one asked
for while a rollout is still under way is refused at once."""

from __future__ import annotations

import threading
import time

import pytest
from elasticctr_common.cube.conf import CubeConf
from elasticctr_cube import transfer as transfer_module
from elasticctr_cube.rollout import Rollout, RolloutRunner
from elasticctr_cube.transfer import Transfer


def busy_transfer(tmp_path, phase: str, holding: float) -> Transfer:
    """A transfer whose rollout in `phase` holds its lock for `holding` seconds, as its
    `_rolling` does."""
    conf = CubeConf.parse(
        {"dict_name": "ctr", "shard": 1, "nodes": [{"ip": "127.0.0.1", "port": 1, "agent_port": 2}]}
    )
    t = Transfer(
        model_uri=f"file://{tmp_path}/models", cube_uri=f"file://{tmp_path}/cube", conf=conf,
        work_dir=str(tmp_path / "work"), runner=RolloutRunner(conf),
    )  # fmt: skip
    t.rollout = Rollout(2, 1, phase=phase)
    held = threading.Event()

    def roll() -> None:
        with t._rolling():
            held.set()
            time.sleep(holding)

    threading.Thread(target=roll, daemon=True).start()
    held.wait(5)
    return t


def test_the_wrap_up_of_an_ended_rollout_is_waited_for(tmp_path):
    t = busy_transfer(tmp_path, "committed", holding=0.3)
    started = time.monotonic()
    assert t.wrapped_up()
    assert 0.25 < time.monotonic() - started < 5


@pytest.mark.parametrize("phase", ["preparing", "holding", "switching", "draining", "reverting"])
def test_a_rollout_under_way_is_not_waited_for(tmp_path, phase):
    t = busy_transfer(tmp_path, phase, holding=2)
    started = time.monotonic()
    assert not t.wrapped_up()
    assert time.monotonic() - started < 0.1


def test_a_wrap_up_that_lasts_is_waited_for_only_so_long(tmp_path, monkeypatch):
    monkeypatch.setattr(transfer_module, "WRAP_UP_SECONDS", 0.3)
    t = busy_transfer(tmp_path, "aborted", holding=3)
    started = time.monotonic()
    assert not t.wrapped_up()
    assert 0.25 < time.monotonic() - started < 5
