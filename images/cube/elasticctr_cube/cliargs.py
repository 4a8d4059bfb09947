"""Command-line options that default to environment variables (set by the Pulumi program).

| option | variable |
|---|---|
| --shard | CUBE_SHARD_INDEX (the StatefulSet pod index) |
| --shard-num | CUBE_SHARD_NUM |
| --data-dir | CUBE_DATA_DIR |
| --cube-uri | CUBE_URI |
| --model-uri | MODEL_URI |
| --cube-conf | CUBE_CONF |
| --keep | CUBE_KEEP_VERSIONS |
| --base-every | CUBE_BASE_EVERY |
| --max-chain-fraction | CUBE_MAX_CHAIN_FRACTION |
| --work-dir | CUBE_WORK_DIR |
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any


def env_option(
    parser: argparse.ArgumentParser,
    flag: str,
    env: str,
    *,
    type: Callable[[str], Any] = str,
    default: Any = None,
    help: str = "",
) -> None:
    """`flag`, defaulting to $`env`, then to `default`; required if neither is set."""
    raw = os.environ.get(env)
    value = type(raw) if raw not in (None, "") else default
    fallback = f" or {default}" if default is not None else ""
    parser.add_argument(
        flag,
        type=type,
        default=value,
        required=value is None,
        help=f"{help} (default: ${env}{fallback})",
    )
