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
