"""Fixtures of the trainer tests: one synthetic data set per session (generated once,
copied to S3/HDFS by the tests that need it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from elasticctr_trainer.generate import SyntheticModel, bayes_auc, generate

HOURS = ["20191221/00", "20191221/01"]
MISSING_HOUR = "20191221/02"  # written without a donefile: offline skips and reports it
BAD_FILE = "20191221/00/part-00001"
BAD_LINES = [
    "1",  # missing click
    "1 x 5:101",  # non-integer click
    "1 2 5:101",  # click > show
    "1 0 5:999",  # unknown slot
    "1 0 5-101",  # no slot separator
    "1 0 abc:101",  # non-integer feasign
    "1 0 18446744073709551616:101",  # over uint64
    "1 0",  # no feasigns
] * 4


@dataclass(frozen=True)
class Synthetic:
    root: Path
    model: SyntheticModel
    heldout: list[str]
    bayes_auc: float

    @property
    def train_uri(self) -> str:
        return f"file://{self.root}/train"

    @property
    def slot_conf(self) -> str:
        return str(self.root / "slot.conf")


@pytest.fixture(scope="session")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    """8 slots x 100 feasigns; 2 ready hours x 30000 examples in 4 files, one hour
    without donefile, 32 malformed lines in one file; 5000 held-out examples."""
    root = tmp_path_factory.mktemp("synthetic")
    model = generate(
        f"file://{root}", slot_count=8, vocab=100, start=HOURS[0], hours=3,
        examples_per_hour=30000, files_per_hour=4, heldout=5000, seed=11,
        missing_hours=[MISSING_HOUR],
    )  # fmt: skip
    bad_file = root / "train" / BAD_FILE
    bad_file.write_text(bad_file.read_text() + "".join(f"{line}\n" for line in BAD_LINES))
    heldout = (root / "heldout" / "part-00000").read_text().splitlines()
    return Synthetic(root, model, heldout, bayes_auc(model, heldout))
