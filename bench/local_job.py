"""The benchmarks' training jobs: `python -m elasticctr_trainer local`, as users run it,
with this checkout's trainer packages and metrics to the logs only (no MLflow)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def trainer_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without a role's variables, with the trainer packages and
    the native pipe, as the image has them (`ELASTICCTR_PIPE_BIN=` in `extra`: the Python one)."""
    from elasticctr_trainer.pipe import NATIVE_PIPE_ENV, build_native_pipe

    paths = [str(REPO / "images" / p) for p in ("trainer", "common")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "TRAINING_ROLE"))}
    env.pop("MLFLOW_TRACKING_URI", None)  # metrics to stdout only
    env[NATIVE_PIPE_ENV] = str(build_native_pipe())
    return {**env, "PYTHONPATH": os.pathsep.join(paths), **(extra or {})}


def local_job_command(config: Path, log_dir: Path, pservers: int, trainers: int) -> list[str]:
    return [
        sys.executable, "-m", "elasticctr_trainer", "local", "--config", str(config),
        "--pservers", str(pservers), "--trainers", str(trainers), "--log-dir", str(log_dir),
    ]  # fmt: skip
