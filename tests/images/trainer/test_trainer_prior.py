"""Where a new model's logit starts (elasticctr_trainer/prior.py): the output bias of each
network, the click rate of the data ready at start, its log-odds."""

from __future__ import annotations

import gzip
import importlib.util
import math
from pathlib import Path

import paddle
import pytest
from elasticctr_common.storage import open_store
from elasticctr_common.trainer_json import parse_config
from elasticctr_trainer.lines import LineParser
from elasticctr_trainer.model import build_ctr_model
from elasticctr_trainer.networks import BUILT_IN
from elasticctr_trainer.prior import (
    RATE_BOUNDS,
    click_rate,
    log_odds,
    prior_hours,
)

from tests.support.trainer_json import RUNNER

NETS = Path(__file__).with_name("nets")


def model_bias(name, build, dense):
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        model = build_ctr_model(4, 1000, 9, [16, 8], (name, build), dense, 0.0)
    return main, model.output_bias


@pytest.mark.parametrize("network", sorted(BUILT_IN))
@pytest.mark.parametrize("dense", [[], [("price", 3)]])
def test_every_built_in_network_has_a_one_value_output_bias(network, dense):
    main, name = model_bias(network, BUILT_IN[network], dense)
    assert name is not None and name.endswith(".b_0")
    (parameter,) = [p for p in main.all_parameters() if p.name == name]
    assert math.prod(parameter.shape) == 1


def test_a_network_without_a_last_bias_has_none():
    spec = importlib.util.spec_from_file_location("two_tower", NETS / "two_tower.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # Its towers' biases are 16 wide and multiplied, not added last.
    assert model_bias("two_tower.py", module.build, [])[1] is None


def write_hour(data, hour, lines, compressed=False):
    body = ("\n".join(lines) + "\n").encode()
    name = "part-0.gz" if compressed else "part-0"
    data.write_bytes(f"{hour}/{name}", gzip.compress(body) if compressed else body)
    data.write_text(f"{hour}/donefile", "")


def test_the_click_rate_of_the_first_valid_lines_of_hours(tmp_path):
    data = open_store(f"file://{tmp_path}")
    parser = LineParser([1, 2], 1000)
    # Hour 01 is gzip-compressed with a bad line; 02 plain.
    write_hour(data, "20191221/01", ["1 1 5:1", "1 0 6:2", "not a line", "", "1 0 7:9"], True)
    write_hour(data, "20191221/02", ["1 0 5:1"] * 3 + ["2 2 6:2"])
    hours = ["20191221/01", "20191221/02"]
    # A line's click count above 1 is one clicked example; "7:9" has an unknown slot.
    assert click_rate(data, hours, parser) == (2 / 6, 6)
    assert click_rate(data, hours, parser, limit=2) == (0.5, 2)
    assert click_rate(data, [], parser) is None
    # A file listed but gone (a dangling link) or not text is skipped: the pass counts it.
    (tmp_path / "20191221/02/part-1").symlink_to(tmp_path / "nowhere")
    data.write_bytes("20191221/02/part-2", b"\x00\xff" * 100)
    assert click_rate(data, hours, parser) == (2 / 6, 6)


def test_the_hours_of_the_prior(tmp_path):
    """Offline: the first three hours trainer 0 waited for; online: the first partition,
    only if it is there already (the job then waits for partitions after the push)."""
    data = open_store(f"file://{tmp_path}")
    uri = f"file://{tmp_path}"
    offline = parse_config({"runner": {**RUNNER, "train_data_uri": uri}}).runner
    planned = ["20191221/01", "20191221/02", "20191221/05", "20191221/06"]
    assert prior_hours(data, offline, planned) == planned[:3]
    assert prior_hours(data, offline, []) == [] and prior_hours(data, offline, None) == []
    online = parse_config(
        {"runner": {**RUNNER, "train_data_uri": uri, "mode": "online", "end_date_hr": None}}
    ).runner
    assert prior_hours(data, online, None) == []
    write_hour(data, "20191221/01", ["1 0 5:1"])  # 00 skipped: the first pass trains 01
    assert prior_hours(data, online, None) == ["20191221/01"]
    write_hour(data, "20191221/00", ["1 0 5:1"])
    assert prior_hours(data, online, None) == ["20191221/00"]


def test_log_odds_within_bounds():
    assert log_odds(0.5) == 0.0
    assert log_odds(0.01) == pytest.approx(math.log(0.01 / 0.99))
    low, high = RATE_BOUNDS
    assert log_odds(0.0) == pytest.approx(math.log(low / (1 - low)))
    assert log_odds(1.0) == pytest.approx(math.log(high / (1 - high)))
