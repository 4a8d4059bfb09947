"""The sparse optimizers trainer.json allows and the Paddle rules the trainer configures for
them (model.py) are the same set, with a default rate pair each."""

from __future__ import annotations

from elasticctr_common.trainer_json import SPARSE_OPTIMIZERS, SPARSE_RATES
from elasticctr_trainer.model import SPARSE_RULES


def test_the_trainer_has_a_paddle_rule_for_every_optimizer_the_config_allows():
    assert sorted(SPARSE_RULES) == sorted(SPARSE_OPTIMIZERS) == sorted(SPARSE_RATES)
