"""What reading one request costs serving, per request form (docs/serving.md, "Open
Inference Protocol"), in one process:

    ELASTICCTR_SERVING_PARSER_LIB=images/serving/parser/target/release/libelasticctr_parser.so \\
    .venv/bin/python bench/serving_v2_parse.py [--instances 64] [--slots 26] [--calls 200]

The same random instances (0-3 feasigns per slot, some slots left out) as ElasticCTR's JSON
form (the native parser when the library loads), as v2 per-slot UINT64 tensors in binary
(tritonclient's default) and as a v2 `lines` tensor; the process's CPU time, the best of
5 x `--calls` calls each.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "images" / "serving"), str(ROOT / "images" / "common")]

from elasticctr_serving.instances import Parsed, SlotSpace, parse_request  # noqa: E402
from elasticctr_serving.native import parser  # noqa: E402
from elasticctr_serving.v2 import decode, to_parsed  # noqa: E402


def instances(slots: list[int], count: int, rng: np.random.Generator) -> list[dict[str, list[int]]]:
    """{slot: feasigns} per instance, every instance with at least one feasign."""
    out = []
    for _ in range(count):
        instance = {str(s): [int(f) for f in rng.integers(1, 2**63, rng.integers(0, 4))]
                    for s in slots}  # fmt: skip
        instance = {s: f for s, f in instance.items() if f} or {str(slots[0]): [7]}
        out.append(instance)
    return out


def bodies(
    slots: list[int], given: list[dict[str, list[int]]]
) -> dict[str, tuple[bytes, str | None]]:
    elasticctr = {"instances": [{"slots": [{"slot_name": s, "feasigns": f} for s, f in i.items()]}
                                for i in given]}  # fmt: skip
    inputs, blobs = [], []
    for slot in slots:
        rows = [i.get(str(slot), []) for i in given]
        width = max(map(len, rows))
        if not width:
            continue
        matrix = np.zeros((len(rows), width), dtype="<u8")
        for r, row in enumerate(rows):
            matrix[r, : len(row)] = row
        blob = matrix.tobytes()
        inputs.append({"name": str(slot), "datatype": "UINT64", "shape": list(matrix.shape),
                       "parameters": {"binary_data_size": len(blob)}})  # fmt: skip
        blobs.append(blob)
    header = orjson.dumps({"inputs": inputs})
    lines = ["1 0 " + " ".join(f"{f}:{s}" for s, fs in i.items() for f in fs) for i in given]
    line_tensor = {"name": "lines", "datatype": "BYTES", "shape": [len(lines)], "data": lines}
    return {
        "elasticctr JSON": (orjson.dumps(elasticctr), None),
        "v2 binary tensors": (header + b"".join(blobs), str(len(header))),
        "v2 lines": (orjson.dumps({"inputs": [line_tensor]}), None),
    }


def v2_run(body: bytes, header_length: str | None, space: SlotSpace) -> Callable[[], Parsed]:
    return lambda: to_parsed(decode(body, header_length), space, "elasticctr", 10000)


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--instances", type=int, default=64)
    options.add_argument("--slots", type=int, default=26)
    options.add_argument("--calls", type=int, default=200)
    args = options.parse_args()
    slots = list(range(1, args.slots + 1))
    space = SlotSpace(slots, 1000001)
    given = instances(slots, args.instances, np.random.default_rng(5))
    forms = bodies(slots, given)
    body, _ = forms["elasticctr JSON"]
    runs: dict[str, Callable[[], Parsed]] = {
        "elasticctr JSON": lambda: parse_request(body, space, 10000, False),
        **{name: v2_run(*forms[name], space) for name in ("v2 binary tensors", "v2 lines")},
    }
    want = parse_request(body, space, 10000, False)
    print(f"native parser: {'yes' if parser() is not None else 'no'}")
    for name, run in runs.items():
        got = run()
        assert got.count == want.count
        assert sorted(got.keys.tolist()) == sorted(want.keys.tolist())
        # CPU time, not wall time: what a busy machine's other processes do not add to.
        timer = timeit.Timer(run, timer=time.process_time)
        best = min(timer.repeat(number=args.calls, repeat=5)) / args.calls
        print(f"{name}: {best * 1e6:.0f} µs per request of {args.instances} instances")


if __name__ == "__main__":
    main()
