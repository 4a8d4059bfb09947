"""An offline job started before its data: trainer 0 waits for the end hour's donefile (or
the wait runs out) before it pushes the dense parameters and welcomes the others, then
every trainer trains the hours trainer 0 planned."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from elasticctr_common.storage import open_store
from elasticctr_common.trainer_json import ConfigError, TrainerConfig, parse_config
from elasticctr_trainer.checkpoint import Checkpoint
from elasticctr_trainer.hours import first_ready, wait_for_range
from elasticctr_trainer.metrics import MetricsLogger
from elasticctr_trainer.sync import PassSync
from elasticctr_trainer.trainer import join_extra_seconds, offline_hours, wait_for_first_data

from tests.images.trainer.test_trainer_units import FakeClock, joined_pair
from tests.support.trainer_json import RUNNER


class Silent(MetricsLogger):
    """The metrics logger's event interface, recorded (no stdout, no MLflow)."""

    def __init__(self) -> None:
        self.mlflow = None
        self.events: list[tuple[str, dict]] = []

    def event(self, name: str, payload: dict[str, Any]) -> None:
        self.events.append((name, payload))


def config(tmp_path, **runner):
    return parse_config(
        {
            "runner": {
                **RUNNER,
                "train_data_uri": f"file://{tmp_path}/data",
                "start_date_hr": "20191221/00",
                "end_date_hr": "20191221/02",
                **runner,
            }
        }
    )


def uncrossed(cfg: TrainerConfig) -> TrainerConfig:
    """`cfg` with no crosses: nothing to choose from the data."""
    return replace(cfg, hyper_parameters=replace(cfg.hyper_parameters, crosses=[]))


def test_waits_until_the_end_hour_is_done(tmp_path):
    data = open_store(f"file://{tmp_path}")
    data.write_text("20191221/00/donefile", "")
    clock = FakeClock()
    slept = []

    def sleep(seconds):  # the end hour lands while the job waits; hour 01 never does
        slept.append(seconds)
        clock.sleep(seconds)
        data.write_text("20191221/02/donefile", "")

    ready, skipped = wait_for_range(data, "20191221/00", "20191221/02", 600, 5, clock, sleep)
    assert (ready, skipped) == (["20191221/00", "20191221/02"], ["20191221/01"])
    assert slept == [5]


def test_gives_up_after_the_wait_with_what_is_ready(tmp_path):
    data = open_store(f"file://{tmp_path}")
    data.write_text("20191221/01/donefile", "")
    clock = FakeClock()
    ready, skipped = wait_for_range(data, "20191221/00", "20191221/02", 60, 7, clock, clock.sleep)
    assert ready == ["20191221/01"] and skipped == ["20191221/00", "20191221/02"]
    assert 60 <= clock.now - 1000 < 67


def test_no_wait_when_every_hour_is_there_or_the_wait_is_zero(tmp_path):
    data = open_store(f"file://{tmp_path}")
    for hour in ("20191221/00", "20191221/01"):
        data.write_text(f"{hour}/donefile", "")

    def never(_: float) -> None:
        raise AssertionError("slept")

    assert wait_for_range(data, "20191221/00", "20191221/01", 600, 5, sleep=never)[1] == []
    assert wait_for_range(data, "20191221/00", "20191221/02", 0, 5, sleep=never)[1] == [
        "20191221/02"
    ]


def test_online_the_first_partition_is_start_or_a_later_ready_one(tmp_path):
    data = open_store(f"file://{tmp_path}")
    clock = FakeClock()

    def never(_: float) -> None:
        raise AssertionError("slept")

    assert first_ready(data, "20191221/00", 60, 0, 5, clock, never) is None
    data.write_text("20191221/02/donefile", "")  # 00 and 01 were skipped: 02 comes first
    assert first_ready(data, "20191221/00", 60, 600, 5, clock, never) == "20191221/02"
    data.write_text("20191221/00/donefile", "")
    assert first_ready(data, "20191221/00", 60, 600, 5, clock, never) == "20191221/00"
    # Minute partitions, START given as an hour: its first partition's name.
    data.write_text("20191222/0015/donefile", "")
    assert first_ready(data, "20191222/00", 15, 0, 5, clock, never) == "20191222/0015"


def test_online_waits_for_the_first_partition_only_to_choose_crosses(tmp_path, monkeypatch):
    """An online job's new model with crosses auto: trainer 0 waits for its first
    partition before it chooses them (or the wait runs out); otherwise it does not wait."""
    data = open_store(f"file://{tmp_path}/data")
    online = {"mode": "online", "end_date_hr": None, "data_wait_seconds": 30,
              "online_poll_seconds": 0.05}  # fmt: skip
    choosing = config(tmp_path, **online)  # crosses auto, the default
    plain = uncrossed(choosing)
    assert join_extra_seconds(plain) == 0 and join_extra_seconds(choosing) == 30
    started = time.monotonic()
    timer = threading.Timer(0.5, lambda: data.write_text("20191221/00/donefile", ""))
    timer.start()
    assert wait_for_first_data(choosing, data, None) is None
    timer.join()
    assert data.exists("20191221/00/donefile") and time.monotonic() - started >= 0.5

    # Named crosses, or a resumed model (its crosses are its checkpoint's): no wait.
    def never(*_: Any) -> None:
        raise AssertionError("waited for the first partition")

    monkeypatch.setattr("elasticctr_trainer.trainer.first_ready", never)
    empty = open_store(f"file://{tmp_path}/none")
    last = Checkpoint(pass_id=3, hour="20191221/02", version=3, pservers=1, trainers=1)
    assert wait_for_first_data(plain, empty, None) is None
    assert wait_for_first_data(choosing, empty, last) is None


def test_every_trainer_trains_trainer_0s_plan(tmp_path):
    """Trainer 1 reads the plan even though an hour lands after trainer 0 decided."""
    cfg = config(tmp_path, data_wait_seconds=0)
    data = open_store(cfg.runner.train_data_uri)
    data.write_text("20191221/00/donefile", "")
    zero, (one,) = joined_pair(open_store(f"file://{tmp_path}/sync"))
    logger = Silent()
    waited = wait_for_first_data(cfg, data, None)
    assert offline_hours(cfg, data, logger, zero, 0, waited) == ["20191221/00"]
    data.write_text("20191221/02/donefile", "")
    follower = Silent()
    assert offline_hours(cfg, data, follower, one, 1, None) == ["20191221/00"]
    skipped = ("skipped_hours", {"hours": ["20191221/01", "20191221/02"], "reason": "no donefile"})
    assert logger.events == [skipped] and follower.events == [skipped]


def test_the_others_wait_for_trainer_0_while_it_waits_for_data(tmp_path):
    """Trainer 0 waits for the data before its welcome (a new model's output bias starts
    from it): the others wait for the welcome that much longer than for a peer."""
    cfg = config(tmp_path, data_wait_seconds=30, online_poll_seconds=0.05)
    data = open_store(cfg.runner.train_data_uri)
    sync = open_store(f"file://{tmp_path}/sync")
    zero = PassSync(sync, timeout=30, poll_seconds=0.01)
    one = PassSync(sync, timeout=0.2, poll_seconds=0.01)  # runs out while trainer 0 waits
    planned: list[list[str]] = []

    def follower() -> None:
        one.join(1, join_extra_seconds(cfg))
        one.joined(1)
        one.timeout = 30  # the plan follows the welcome at once, but the machine may be busy
        planned.append(offline_hours(cfg, data, Silent(), one, 1, None))

    thread = threading.Thread(target=follower)
    thread.start()
    timer = threading.Timer(0.5, lambda: data.write_text("20191221/02/donefile", ""))
    timer.start()
    waited = wait_for_first_data(cfg, data, None)
    assert waited == (["20191221/02"], ["20191221/00", "20191221/01"])
    zero.welcome(2)
    assert offline_hours(cfg, data, Silent(), zero, 0, waited) == ["20191221/02"]
    thread.join(timeout=30)
    timer.join()
    assert planned == [["20191221/02"]]


def test_nothing_to_wait_for_online_or_after_the_last_pass(tmp_path):
    offline = config(tmp_path, data_wait_seconds=600, passes=2)
    data = open_store(offline.runner.train_data_uri)
    last = Checkpoint(pass_id=2, hour=None, version=2, pservers=1, trainers=1)
    assert wait_for_first_data(offline, data, last) is None
    online = uncrossed(config(tmp_path, mode="online", end_date_hr=None, data_wait_seconds=600))
    assert wait_for_first_data(online, data, None) is None
    assert join_extra_seconds(online) == 0 and join_extra_seconds(offline) == 600


def test_no_data_at_all_fails_every_trainer_naming_the_dataset(tmp_path):
    cfg = config(tmp_path, data_wait_seconds=0)
    data = open_store(cfg.runner.train_data_uri)
    zero, (one,) = joined_pair(open_store(f"file://{tmp_path}/sync"))
    waited = wait_for_first_data(cfg, data, None)
    with pytest.raises(FileNotFoundError, match=r"/data: no hour of 20191221/00\.\.20191221/02"):
        offline_hours(cfg, data, Silent(), zero, 0, waited)
    with pytest.raises(FileNotFoundError, match="no hour of"):
        offline_hours(cfg, data, Silent(), one, 1, None)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("data_wait_seconds", -1, "runner.data_wait_seconds: must be >= 0, got -1"),
        ("online_poll_seconds", 0, "runner.online_poll_seconds: must be > 0"),
    ],
)
def test_bad_wait_settings_name_the_key(tmp_path, key, value, message):
    with pytest.raises(ConfigError, match=message):
        config(tmp_path, **{key: value})
