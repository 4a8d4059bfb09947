"""trainer.json is read with its types: a value of the wrong JSON type is named, never
coerced or left to crash the trainer later."""

from __future__ import annotations

from typing import Any

import pytest
from elasticctr_common.trainer_json import (
    ConfigError,
    HyperParameters,
    apply_settings,
    parse_config,
)

from tests.support.trainer_json import RUNNER

# A runner section with every required key (the trainer tests use it too).


@pytest.mark.parametrize(
    ("hyper", "message"),
    [
        ({"batch_size": 1.5}, "hyper_parameters.batch_size: expected an integer, got 1.5"),
        ({"batch_size": "abc"}, 'hyper_parameters.batch_size: expected an integer, got "abc"'),
        ({"batch_size": True}, "hyper_parameters.batch_size: expected an integer, got true"),
        (
            {"learning_rate": "0.1"},
            'hyper_parameters.learning_rate: expected a finite number, got "0.1"',
        ),
        (
            {"learning_rate": float("nan")},
            "hyper_parameters.learning_rate: expected a finite number, got NaN",
        ),
        (
            {"fc_sizes": [400, "400"]},
            'hyper_parameters.fc_sizes: expected a list of integers, got [400, "400"]',
        ),
        (
            {"model": "xgboost"},
            'hyper_parameters.model: expected wide_deep or dnn or deepfm or dcn or custom, got "xgboost"',
        ),
        ({"embedding_dim": 1}, "hyper_parameters.embedding_dim: must be >= 2, got 1"),
        (
            {"crosses": [101, 102]},
            "hyper_parameters.crosses: expected a list of lists of integers or auto, got [101, 102]",
        ),
        (
            {"crosses": "all"},
            'hyper_parameters.crosses: expected a list of lists of integers or auto, got "all"',
        ),
        (
            {"crosses": [[101, 101]]},
            "hyper_parameters.crosses: cross [101, 101]: a slot crossed with itself",
        ),
        ({"learning_rate": 0}, "hyper_parameters.learning_rate: must be > 0, got 0"),
        (
            {"sparse_learning_rate": -1},
            "hyper_parameters.sparse_learning_rate: must be > 0 (or unset: by "
            "sparse_optimizer), got -1",
        ),
        (
            {"sparse_optimizer": "ftrl"},
            'hyper_parameters.sparse_optimizer: expected sgd or adagrad, got "ftrl"',
        ),
    ],
)
def test_a_hyper_parameter_of_the_wrong_type_is_named(hyper: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"runner": RUNNER, "hyper_parameters": hyper})
    assert str(err.value) == message


def test_every_key_of_the_wrong_type_is_named_at_once() -> None:
    runner = {k: v for k, v in RUNNER.items() if k != "model_uri"} | {"passes": "2"}
    with pytest.raises(ConfigError) as err:
        parse_config({"runner": runner, "hyper_parameters": {"batch_size": 1.5, "dense_l2": None}})
    assert str(err.value).splitlines() == [
        "runner.model_uri: required",
        'runner.passes: expected an integer, got "2"',
        "hyper_parameters.batch_size: expected an integer, got 1.5",
        "hyper_parameters.dense_l2: expected a finite number, got null",
    ]


def test_integers_are_numbers_and_null_is_an_unset_optional() -> None:
    config = parse_config(
        {
            "runner": {**RUNNER, "eval_data_uri": None, "publish_margin": 0},
            "hyper_parameters": {"learning_rate": 1, "batch_size": 64},
        }
    )
    assert config.hyper_parameters.learning_rate == 1 and config.runner.eval_data_uri is None


def test_a_setting_given_on_the_command_line_is_typed_too() -> None:
    with pytest.raises(ConfigError, match=r"hyper_parameters\.batch_size: expected an integer"):
        apply_settings({"runner": RUNNER}, ["hyper_parameters.batch_size=abc"])


def test_a_training_setting_goes_where_the_program_puts_it() -> None:
    """The demo's `--set training.KEY=...` takes the stack's names: a runner key to the
    runner, a model key to hyper_parameters, as infra/program.py maps the stack's section."""
    data = apply_settings(
        {"runner": dict(RUNNER)},
        ["training.passes=3", "training.model=wide_deep", "training.delete_threshold=50"],
    )
    assert data["runner"]["passes"] == 3
    assert data["hyper_parameters"] == {"model": "wide_deep", "delete_threshold": 50}


def test_an_unknown_section_names_the_three_it_takes() -> None:
    with pytest.raises(ConfigError, match=r"expected training\.KEY=JSON"):
        apply_settings({"runner": RUNNER}, ["model.passes=3"])


@pytest.mark.parametrize(("mode", "expected"), [("offline", 1000.0), ("online", 0.0)])
def test_an_unset_delete_threshold_follows_the_mode(mode: str, expected: float) -> None:
    """Offline passes repeat their data: ids below 1000 shows a pass are deleted after each
    (the measured remedy for memorised rare ids). Online partitions are each trained on
    once: deleting would forget every rare id at each small partition, so none is."""
    runner = {**RUNNER, "mode": mode}
    config = parse_config({"runner": runner, "hyper_parameters": {}})
    assert config.hyper_parameters.delete_threshold == expected
    assert config.hyper_parameters.deletion() == expected
    chosen = parse_config({"runner": runner, "hyper_parameters": {"delete_threshold": 50}})
    assert chosen.hyper_parameters.deletion() == 50
    with pytest.raises(ValueError, match="unset"):
        HyperParameters().deletion()


@pytest.mark.parametrize(
    ("hyper", "rule"),
    [
        ({"sparse_optimizer": "sgd"}, ("sgd", 0.01, 0.01)),
        ({"sparse_optimizer": "sgd", "sparse_learning_rate": 0.02}, ("sgd", 0.02, 0.01)),
        ({"sparse_optimizer": "sgd", "embedx_learning_rate": 0.1}, ("sgd", 0.01, 0.1)),
        # adagrad's one rate for both, as before there were two.
        ({"sparse_optimizer": "adagrad"}, ("adagrad", 0.05, 0.05)),
        ({"sparse_optimizer": "adagrad", "sparse_learning_rate": 0.2}, ("adagrad", 0.2, 0.2)),
        (
            {"sparse_optimizer": "adagrad", "sparse_learning_rate": 0.2,
             "embedx_learning_rate": 0.1},
            ("adagrad", 0.2, 0.1),
        ),
    ],
)  # fmt: skip
def test_unset_sparse_rates_follow_the_optimizer(hyper: dict[str, Any], rule: tuple) -> None:
    config = parse_config({"runner": RUNNER, "hyper_parameters": hyper})
    assert config.hyper_parameters.sparse_rule() == rule


def test_an_unset_sparse_optimizer_stays_unset_until_the_job_starts() -> None:
    """It depends on the checkpoint (checkpoint.resolve_model), not on the file."""
    config = parse_config({"runner": RUNNER, "hyper_parameters": {}})
    assert config.hyper_parameters.sparse_optimizer is None
    with pytest.raises(ValueError, match="sparse_optimizer: unset"):
        config.hyper_parameters.sparse_rule()
