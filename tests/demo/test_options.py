"""The feedback loop's warm-up takes its options from the demo's own parser: each data
and training option of tools/demo.py reaches tools/feedback_loop.py with the demo's
default, but for the few the loop sets for its warm-up, and what the loop cannot do is
refused by name."""

from __future__ import annotations

import pytest

from tools import demo, feedback_loop

# The demo's options that are about running the demo, not about its data.
DEMO_ONLY = {"keep_running"}
# The warm-up: one version to start from, on less data than the demo's.
WARM_UP = {"hours": 1, "examples": 20000, "passes": 1}


def test_every_data_option_of_the_demo_reaches_the_loop_with_its_default() -> None:
    demos = vars(demo.parse_args([]))
    loops = vars(feedback_loop.parse_args([]))
    shared = {name: loops.get(name, "missing") for name in demos if name not in DEMO_ONLY}
    expected = {name: value for name, value in demos.items() if name not in DEMO_ONLY}
    assert shared == expected | WARM_UP | {"set": shared["set"]}
    assert feedback_loop.parse_args(["--seed", "3", "--slot-conf", "slots"]).seed == 3


def test_the_loops_settings_come_before_yours() -> None:
    args = feedback_loop.parse_args(["--set", "hyper_parameters.delete_threshold=5"])
    assert args.set == [
        "runner.publish_every_version=true",
        "hyper_parameters.delete_threshold=5",  # applied last: yours wins
    ]


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["--profile", "criteo"], "--profile criteo"), (["--data", "/data"], "--data /data")],
)
def test_the_loop_refuses_data_its_simulator_has_no_truth_for(argv, named, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        feedback_loop.parse_args(argv)
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert named in error and "--profile simple" in error


def _warm_up(**hyper: object) -> dict[str, dict[str, object]]:
    """trainer.json as the demo writes it for the warm-up (offline, settings unresolved)."""
    from elasticctr_common.trainer_json import HyperParameters, Runner, TrainerConfig

    from tests.support.trainer_json import RUNNER

    config = TrainerConfig(Runner(**RUNNER), HyperParameters(**hyper))  # type: ignore[arg-type]
    return config.to_dict()


def test_the_online_job_resolves_its_own_modes_defaults() -> None:
    """The warm-up's offline deletion threshold would delete every id under it from the
    table at each minute partition; the online job gets the online default, or yours."""
    from elasticctr_common.trainer_json import delete_threshold_for, parse_config

    config = feedback_loop.online_config(_warm_up(), "file:///feedback", "20261129/0100", 5)
    parsed = parse_config(config)
    assert parsed.runner.mode == "online" and parsed.runner.partition_minutes == 5
    assert parsed.runner.train_data_uri == "file:///feedback" and parsed.runner.end_date_hr is None
    assert parsed.hyper_parameters.deletion() == delete_threshold_for("online") == 0
    assert delete_threshold_for("offline") > 0

    yours = _warm_up(delete_threshold=5.0)
    yours = feedback_loop.online_config(yours, "file:///f", "20261129/0100", 1)
    assert parse_config(yours).hyper_parameters.deletion() == 5.0
