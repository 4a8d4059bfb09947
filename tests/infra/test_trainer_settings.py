"""The stack's training settings -> trainer.json (infra/program.py, `trainer_settings`):
each key by its own name, defaults from the contract (elasticctr_common.trainer_json)."""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from elasticctr_common.trainer_json import HyperParameters, Runner, TrainerConfig, parse_config

from infra.config import PROGRAM_SETTINGS, StackConfig, TrainingConfig
from infra.program import trainer_settings

URIS: dict[str, Any] = {
    "train_data_uri": "hdfs://nn:8020/d",
    "slot_conf": "/etc/elasticctr/slot.conf",
    "model_uri": "s3://b/models",
    "checkpoint_uri": "s3://b/checkpoints",
}


def test_every_training_key_is_trainer_jsons_or_the_programs() -> None:
    contract = {f.name for f in fields(Runner)} | {f.name for f in fields(HyperParameters)}
    strays = set(TrainingConfig.model_fields) - contract - PROGRAM_SETTINGS
    assert not strays, f"training keys trainer.json has no field for: {strays}"
    assert not PROGRAM_SETTINGS & contract


def test_a_default_stack_writes_the_contracts_defaults() -> None:
    hyper, runner = trainer_settings(StackConfig())
    assert hyper == HyperParameters()
    written = Runner(**URIS, **runner)
    assert written == Runner(**URIS, start_date_hr="20191221/00", end_date_hr="20191221/23")


def test_set_keys_reach_trainer_json_and_the_trainer_reads_them() -> None:
    config = StackConfig.model_validate(
        {
            "training": {
                "mode": "online", "batch_size": 7, "model": "dnn", "nonclk_coeff": 0.5,
                "max_bad_line_fraction": 0.2, "publish_every_version": True, "job_name": "j",
            },
            "data": {"sparse_dim": 5000, "wait_minutes": 2, "poll_seconds": 9},
        }
    )  # fmt: skip
    hyper, runner = trainer_settings(config)
    read = parse_config(TrainerConfig(Runner(**URIS, **runner), hyper).to_dict())
    assert (read.hyper_parameters.batch_size, read.hyper_parameters.model) == (7, "dnn")
    assert (read.hyper_parameters.nonclk_coeff, read.hyper_parameters.sparse_dim) == (0.5, 5000)
    assert read.runner.mode == "online" and read.runner.end_date_hr is None
    assert (read.runner.max_bad_line_fraction, read.runner.publish_every_version) == (0.2, True)
    assert (read.runner.data_wait_seconds, read.runner.online_poll_seconds) == (120, 9)


def test_the_demos_training_settings_land_where_the_stacks_do() -> None:
    """`tools/demo.py --set training.KEY=...` and the stack's `training.KEY` reach the
    same trainer.json field, for every key of the section trainer.json has."""
    from elasticctr_common.trainer_json import apply_settings

    values = {"batch_size": 7, "model": "dnn", "nonclk_coeff": 0.5, "passes": 3,
              "max_bad_line_fraction": 0.2, "publish_every_version": True}  # fmt: skip
    hyper, runner = trainer_settings(StackConfig.model_validate({"training": values}))
    settings = [f"training.{key}={json.dumps(value)}" for key, value in values.items()]
    data = apply_settings({"runner": {**URIS, **runner}}, settings)
    for key, value in values.items():
        section = data["runner"] if key in runner else data["hyper_parameters"]
        assert section[key] == value == (runner[key] if key in runner else getattr(hyper, key))
