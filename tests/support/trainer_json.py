"""The smallest valid runner section of trainer.json (elasticctr_common.trainer_json), for
tests that build a trainer config of their own."""

from __future__ import annotations

from typing import Any

RUNNER: dict[str, Any] = {
    "train_data_uri": "file:///data",
    "start_date_hr": "20191221/00",
    "end_date_hr": "20191221/23",
    "slot_conf": "/etc/elasticctr/slot.conf",
    "model_uri": "s3://b/models",
    "checkpoint_uri": "s3://b/checkpoints",
}
