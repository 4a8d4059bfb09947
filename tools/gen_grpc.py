#!/usr/bin/env python3
"""Generate serving's gRPC messages (the Open Inference Protocol) from their .proto with
grpcio-tools' protoc: grpc_predict_v2_pb2.py and its type stub, beside the .proto.

    .venv/bin/python tools/gen_grpc.py          # rewrite them
    .venv/bin/python tools/gen_grpc.py --check  # exit 1 if they differ from the .proto's

grpcio-tools is pinned to the last release on protobuf 4 (tests/support/requirements.txt):
the serving image runs Paddle's protobuf 4.25, which newer generated code refuses.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "images" / "serving" / "elasticctr_serving" / "generated"
PROTO = GENERATED / "grpc_predict_v2.proto"
OUTPUTS = ("grpc_predict_v2_pb2.py", "grpc_predict_v2_pb2.pyi")


def generate(into: Path) -> None:
    from grpc_tools import protoc

    argv = ["protoc", f"-I{PROTO.parent}", f"--python_out={into}", f"--pyi_out={into}", PROTO.name]
    if protoc.main(argv) != 0:
        raise SystemExit(f"gen_grpc: protoc failed on {PROTO}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if stale")
    args = parser.parse_args(argv)
    if not args.check:
        generate(GENERATED)
        print(f"gen_grpc: wrote {', '.join(OUTPUTS)} in {GENERATED.relative_to(ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = [n for n in OUTPUTS if (Path(tmp) / n).read_bytes() != (GENERATED / n).read_bytes()]
    if stale:
        print(f"gen_grpc: {', '.join(stale)} differ from {PROTO.name}: run tools/gen_grpc.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
