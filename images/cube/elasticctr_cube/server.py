"""cube-server role: runs the native server (server/, Rust) in place of this process.

--shard and --shard-num default to $CUBE_SHARD_INDEX and $CUBE_SHARD_NUM.

The seek hot path is native (see docs/cube.md for why). The binary is found at
$ELASTICCTR_CUBE_SERVER_BIN, then `cube-server` on PATH, then the cargo build output
next to this package (images/cube/server/target/release/cube-server).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from elasticctr_common.cargo import cargo_build
from elasticctr_common.contract import CubeEnv
from elasticctr_common.cube.conf import DEFAULT_MAX_KEYS

SERVER_DIR = Path(__file__).resolve().parent.parent / "server"
BINARY_NAME = "cube-server"


class ServerBinaryError(RuntimeError):
    """The native cube-server cannot be found or built."""


def server_binary() -> str:
    explicit = os.environ.get("ELASTICCTR_CUBE_SERVER_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise ServerBinaryError(f"ELASTICCTR_CUBE_SERVER_BIN={explicit} is not an executable")
        return explicit
    on_path = shutil.which(BINARY_NAME)
    if on_path:
        return on_path
    built = SERVER_DIR / "target" / "release" / BINARY_NAME
    if built.exists():
        return str(built)
    raise ServerBinaryError(
        f"no {BINARY_NAME} binary: set ELASTICCTR_CUBE_SERVER_BIN, put it on PATH, or run "
        f"`cargo build --release` in {SERVER_DIR}"
    )


def build_server(offline: bool = False) -> str:
    """`cargo build --release --locked` of the native server (incremental, cached in target/)."""
    return str(cargo_build(SERVER_DIR, BINARY_NAME, "the native cube-server", offline))


def _given(args: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[2:] if argv is None else argv
    try:
        binary = server_binary()
    except ServerBinaryError as err:
        raise SystemExit(f"cube-server: {err}") from None
    for flag, env in (("--shard", CubeEnv.SHARD_INDEX), ("--shard-num", CubeEnv.SHARD_NUM)):
        if not _given(args, flag) and os.environ.get(env):
            args = [*args, flag, os.environ[env]]
    if not _given(args, "--max-keys"):  # the default cube.conf's max_keys says
        args = [*args, "--max-keys", str(DEFAULT_MAX_KEYS)]
    os.execv(binary, [binary, *args])
    return 1  # not reached
