"""KServe's Open Inference Protocol (v2 REST) for serving's one model (docs/serving.md,
"Open Inference Protocol"): request decoding, the CTR instance <-> tensor mapping,
metadata and answers. The routes are app.py's.

An instance is given either way, never both in one request:

- tensors: one per slot, named by its slot id, UINT64 (or INT64 >= 0) of shape
  [n, k], each row one instance's feasigns of that slot padded with 0 (feasign 0 is the
  padding key: never looked up; a slot left out is all padding); one per dense feature,
  named by it, FP32 [n, dim];
- `lines`: BYTES [n], one example line each in the model's data format (ElasticCTR's
  `<show> <click> <feasign>:<slot> ...` or PaddleRec's slot format, read as the trainer
  reads them, elasticctr_common.lines); show and click are read and not used.

The answer's one output, `probability`, FP32 [n], is each instance's click probability
(/predict's number). Triton's binary tensor data extension is understood both ways
(tritonclient uses it by default): inputs with `parameters.binary_data_size` follow the
JSON header (`Inference-Header-Content-Length`), in input order; outputs are binary when
asked (`binary_data_output`, or an output's `binary_data`).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any

import numpy as np
import orjson
from elasticctr_common.lines import F32_OVERFLOW, MAX_FEASIGN, BadLine, LineFormat
from numpy.typing import NDArray

from .instances import BadRequest, Parsed, SlotSpace, parsed_keys

MODEL_NAME = "elasticctr"
SERVER_NAME = "elasticctr-serving"
SERVER_VERSION = version("elasticctr-common")  # the images' code, one version for all
EXTENSIONS = ["binary_tensor_data"]
OUTPUT = "probability"
LINES = "lines"
HEADER_LENGTH = "Inference-Header-Content-Length"
PLATFORM = "paddle_inference"
GRPC_SERVICE = "inference.GRPCInferenceService"  # the protocol's gRPC service (v2_grpc.py)
GRPC_INFER = f"/{GRPC_SERVICE}/ModelInfer"
# (numpy type, bytes per element) of the datatypes serving takes.
DATATYPES: dict[str, tuple[type[np.generic], int]] = {
    "UINT64": (np.uint64, 8),
    "INT64": (np.int64, 8),
    "FP32": (np.float32, 4),
    "BYTES": (np.object_, 0),
}
MAX_INT64 = 2**63 - 1
_WIRE = {name: np.dtype(dtype).newbyteorder("<") for name, (dtype, _) in DATATYPES.items()}


@dataclass
class Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]
    data: NDArray[Any]  # flat: numbers in their numpy type, BYTES as Python bytes


@dataclass
class InferRequest:
    inputs: dict[str, Tensor]
    id: str | None = None
    binary_output: bool = False
    # Outputs the request names (empty: all, i.e. `probability`).
    outputs: list[str] = field(default_factory=list)


def decode(body: bytes, header_length: str | None) -> InferRequest:
    """A v2 inference request (JSON, or JSON + binary tensor data); BadRequest naming what
    is wrong."""
    if header_length is None:
        header, binary = body, b""
    else:
        if not header_length.isdigit() or int(header_length) > len(body):
            raise BadRequest(
                f"{HEADER_LENGTH}: {header_length[:40]!r} is not a length within the body's "
                f"{len(body)} bytes"
            )
        cut = int(header_length)
        header, binary = body[:cut], body[cut:]
    try:
        request = orjson.loads(header)
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"malformed JSON: {err}") from None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise BadRequest('the body must be a JSON object with an "inputs" list of tensors')
    if not request["inputs"]:
        raise BadRequest('"inputs" is empty: nothing to predict')
    parameters = _parameters(request, "the request")
    given_id = request.get("id")
    if given_id is not None and not isinstance(given_id, str):
        raise BadRequest(f'"id" must be a string, got {given_id!r:.40}')
    inputs: dict[str, Tensor] = {}
    offset = 0
    for n, item in enumerate(request["inputs"]):
        tensor, offset = _tensor(n, item, binary, offset)
        if tensor.name in inputs:
            raise BadRequest(f"input {tensor.name!r} is given twice")
        inputs[tensor.name] = tensor
    if offset != len(binary):
        raise BadRequest(
            f"{len(binary) - offset} bytes of binary data after the inputs' binary_data_size "
            f"({offset} bytes in all)"
        )
    binary_output = parameters.get("binary_data_output") is True
    outputs = []
    requested = request.get("outputs", [])
    if not isinstance(requested, list):
        raise BadRequest('"outputs" must be a list of {"name": ...}')
    for item in requested:
        name = item.get("name") if isinstance(item, dict) else None
        if name != OUTPUT:
            raise BadRequest(f"unknown output {name!r}: the model's one output is {OUTPUT!r}")
        outputs.append(name)
        binary_output = _parameters(item, f"output {name!r}").get("binary_data") is True
    return InferRequest(inputs, given_id, binary_output, outputs)


def _parameters(item: dict[str, Any], where: str) -> dict[str, Any]:
    parameters = item.get("parameters", {})
    if not isinstance(parameters, dict):
        raise BadRequest(f'{where}: "parameters" must be an object')
    return parameters


def _tensor(n: int, item: object, binary: bytes, offset: int) -> tuple[Tensor, int]:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise BadRequest(f'input {n}: expected an object with "name", "datatype", "shape"')
    name: str = item["name"]
    datatype, shape, count = _checked(name, item.get("datatype"), item.get("shape"))
    size = _parameters(item, f"input {name!r}").get("binary_data_size")
    if size is not None:
        if type(size) is not int or size < 0 or offset + size > len(binary):
            raise BadRequest(
                f"input {name!r}: binary_data_size {size!r:.40} is past the "
                f"{len(binary) - offset} bytes of binary data left"
            )
        data = _binary(name, datatype, count, binary[offset : offset + size])
        offset += size
    elif "data" in item:
        data = _json_data(name, datatype, count, item["data"])
    else:
        raise BadRequest(f'input {name!r}: no "data" and no binary_data_size')
    return Tensor(name, datatype, tuple(shape), data), offset


def tensor(
    name: str, datatype: str, shape: list[int], raw: bytes | None, values: list[Any]
) -> Tensor:
    """An input given as raw bytes (the binary form's layout), or else as a list of values
    (flat, row-major): gRPC's two forms."""
    datatype, shape, count = _checked(name, datatype, shape)
    if raw is not None:
        return Tensor(name, datatype, tuple(shape), _binary(name, datatype, count, raw))
    return Tensor(name, datatype, tuple(shape), _json_data(name, datatype, count, values))


def _checked(name: str, datatype: object, shape: object) -> tuple[str, list[int], int]:
    """The datatype, shape and number of elements of a tensor; BadRequest if the datatype
    or shape is not one serving takes."""
    if datatype not in DATATYPES:
        raise BadRequest(
            f"input {name!r}: datatype {datatype!r:.40} is not one serving takes "
            f"({', '.join(DATATYPES)})"
        )
    if (
        not isinstance(shape, list)
        or not shape
        or not all(type(d) is int and d >= 0 for d in shape)
    ):
        raise BadRequest(f"input {name!r}: shape must be a list of sizes >= 0, got {shape!r:.80}")
    assert isinstance(datatype, str)
    return datatype, shape, math.prod(shape)


def _binary(name: str, datatype: str, count: int, raw: bytes) -> NDArray[Any]:
    dtype, width = DATATYPES[datatype]
    if datatype != "BYTES":
        if len(raw) != count * width:
            raise BadRequest(
                f"input {name!r}: {len(raw)} bytes of {datatype} data, the shape needs "
                f"{count} x {width}"
            )
        return np.frombuffer(raw, dtype=_WIRE[datatype]).astype(dtype, copy=False)
    elements: list[bytes] = []
    at = 0
    while at < len(raw):  # each element: its length (uint32, little endian), its bytes
        if at + 4 > len(raw):
            raise BadRequest(f"input {name!r}: BYTES data ends inside an element's length")
        (length,) = struct.unpack_from("<I", raw, at)
        if at + 4 + length > len(raw):
            raise BadRequest(f"input {name!r}: BYTES element {len(elements)} runs past the data")
        elements.append(raw[at + 4 : at + 4 + length])
        at += 4 + length
    return _sized(name, count, elements)


def _json_data(name: str, datatype: str, count: int, data: object) -> NDArray[Any]:
    flat = _flatten(name, data)
    if datatype == "BYTES":  # strings in JSON, bytes in gRPC
        if not all(isinstance(v, (str, bytes)) for v in flat):
            raise BadRequest(f"input {name!r}: BYTES data must be strings")
        return _sized(name, count, [v.encode() if isinstance(v, str) else v for v in flat])
    if datatype == "FP32":
        bad = next((v for v in flat if type(v) not in (int, float)), None)
        if bad is not None:
            raise BadRequest(f"input {name!r}: {bad!r:.40} is not an FP32 number")
        if not all(abs(v) < F32_OVERFLOW for v in flat):
            raise BadRequest(f"input {name!r}: a value is not finite as a float32")
        return _sized(name, count, flat, np.float32)
    low, high = (0, MAX_FEASIGN) if datatype == "UINT64" else (-MAX_INT64 - 1, MAX_INT64)
    bad = next((v for v in flat if type(v) is not int or not low <= v <= high), None)
    if bad is not None:
        raise BadRequest(f"input {name!r}: {bad!r:.40} is not a {datatype} integer")
    return _sized(name, count, flat, DATATYPES[datatype][0])


def _flatten(name: str, data: object) -> list[Any]:
    """The data of a tensor, flat or nested lists (both are the spec's), in row-major order."""
    if not isinstance(data, list):
        raise BadRequest(f'input {name!r}: "data" must be a list')
    flat: list[Any] = []
    stack = [iter(data)]
    while stack:
        for value in stack[-1]:
            if isinstance(value, list):
                stack.append(iter(value))
                break
            flat.append(value)
        else:
            stack.pop()
    return flat


def _sized(
    name: str, count: int, values: list[Any], dtype: type[np.generic] = np.object_
) -> NDArray[Any]:
    if len(values) != count:
        raise BadRequest(f"input {name!r}: {len(values)} values, the shape holds {count}")
    if dtype is np.object_:
        array = np.empty(count, dtype=object)
        array[:] = values
        return array
    return np.array(values, dtype=dtype)


def to_parsed(
    request: InferRequest, space: SlotSpace, data_format: str, max_instances: int
) -> Parsed:
    """The request's instances, as the other request forms are parsed (instances.py)."""
    inputs = request.inputs
    if LINES in inputs:
        if len(inputs) > 1:
            others = ", ".join(repr(n) for n in inputs if n != LINES)
            raise BadRequest(
                f"input {LINES!r} holds whole instances: send it alone, or tensors per slot "
                f"and dense feature instead (also given: {others})"
            )
        return _from_lines(inputs[LINES], space, data_format, max_instances)
    return _from_tensors(inputs, space, max_instances)


def _count(tensor: Tensor, rank: int, max_instances: int) -> int:
    """The instances of a tensor of `rank` dimensions, the first one the instances'."""
    if len(tensor.shape) != rank:
        want = "[n]" if rank == 1 else "[n, k]"
        raise BadRequest(
            f"input {tensor.name!r}: shape {list(tensor.shape)}, expected {want} (n instances)"
        )
    n = tensor.shape[0]
    if n == 0:
        raise BadRequest(f"input {tensor.name!r}: no instances (shape {list(tensor.shape)})")
    if n > max_instances:
        raise BadRequest(f"{n} instances in one request, more than the limit {max_instances}", 413)
    return n


def _from_tensors(inputs: dict[str, Tensor], space: SlotSpace, max_instances: int) -> Parsed:
    count: int | None = None
    matrices: list[NDArray[np.uint64]] = []  # [n, k] per slot
    slot_indexes: list[int] = []
    dense = np.zeros((0, space.dense_dim), dtype=np.float32) if space.dense else None
    for tensor in inputs.values():
        slot = space.index.get(tensor.name)
        feature = space.dense_index.get(tensor.name)
        if slot is None and feature is None:
            raise BadRequest(
                f"unknown input {tensor.name!r} (the model's inputs: "
                f"{', '.join(input_names(space))}; or {LINES!r} alone)"
            )
        want = ("UINT64", "INT64") if slot is not None else ("FP32",)
        if tensor.datatype not in want:
            raise BadRequest(
                f"input {tensor.name!r}: datatype {tensor.datatype}, expected {' or '.join(want)}"
            )
        n = _count(tensor, 2, max_instances)
        if count is not None and n != count:
            raise BadRequest(
                f"input {tensor.name!r}: {n} instances, other inputs have {count} (the first "
                "dimension is the instances')"
            )
        count = n
        if feature is not None:
            assert dense is not None
            if tensor.shape[1] != feature.dim:
                raise BadRequest(
                    f"input {tensor.name!r}: shape {list(tensor.shape)}, expected "
                    f"[n, {feature.dim}] (the dense feature's dim)"
                )
            values = tensor.data.reshape(n, feature.dim)
            if not bool((np.abs(values.astype(np.float64)) < F32_OVERFLOW).all()):
                raise BadRequest(f"input {tensor.name!r}: a value is not finite as a float32")
            if dense.shape[0] == 0:
                dense = np.zeros((n, space.dense_dim), dtype=np.float32)
            start = sum(f.dim for f in space.dense[: space.dense.index(feature)])
            dense[:, start : start + feature.dim] = values
            continue
        assert slot is not None
        if tensor.datatype == "INT64" and bool((tensor.data < 0).any()):
            bad = int(tensor.data[tensor.data < 0][0])
            raise BadRequest(
                f"input {tensor.name!r}: feasign {bad} is not an unsigned 64-bit integer"
            )
        matrices.append(tensor.data.astype(np.uint64, copy=False).reshape(n, tensor.shape[1]))
        slot_indexes.append(slot)
    assert count is not None  # decode refuses a request without inputs
    missing = [f.name for f in space.dense if f.name not in inputs]
    if missing:
        raise BadRequest(
            f"input(s) {', '.join(repr(m) for m in missing)} missing: every request needs the "
            f"model's dense features ({space.describe_dense()})"
        )
    # One [n, all slots' k] matrix: raveled, its feasigns are in instance order (as the
    # other forms'), whole-array operations only, however many slots.
    widths = [m.shape[1] for m in matrices]
    table = np.hstack(matrices) if matrices else np.zeros((count, 0), dtype=np.uint64)
    raw = table.ravel()
    slot_of = np.tile(np.repeat(np.array(slot_indexes, dtype=np.int32), widths), count)
    rows = np.repeat(np.arange(count, dtype=np.int32), sum(widths))
    given = raw != 0  # the padding feasign: what a slot with fewer feasigns is filled with
    if not space.dense:
        per_instance = given.reshape(count, -1).any(axis=1) if raw.size else np.zeros(count, bool)
        if not per_instance.all():
            empty = int(np.argmin(per_instance))
            raise BadRequest(f"instance {empty} is empty: no slot has a feasign")
    parsed = parsed_keys(count, raw[given], slot_of[given], rows[given], space)
    parsed.dense = dense
    return parsed


def _from_lines(tensor: Tensor, space: SlotSpace, data_format: str, max_instances: int) -> Parsed:
    if tensor.datatype != "BYTES":
        raise BadRequest(f"input {LINES!r}: datatype {tensor.datatype}, expected BYTES")
    count = _count(tensor, 1, max_instances)
    form = LineFormat(data_format, space.dense)
    raw: list[int] = []
    slots: list[int] = []
    rows: list[int] = []
    dense = np.zeros((count, space.dense_dim), dtype=np.float32) if space.dense else None
    for i, element in enumerate(tensor.data):
        try:
            line = form.split(element.decode("ascii"))
        except UnicodeDecodeError:
            raise BadRequest(f"{LINES}[{i}]: not an ASCII line") from None
        except BadLine as bad:
            raise BadRequest(f"{LINES}[{i}]: not a {data_format} example line: {bad}") from None
        for feasign, slot in line.features:
            index = space.index.get(str(slot))
            if index is None:
                known = ", ".join(str(s) for s in space.slots)
                raise BadRequest(f"{LINES}[{i}]: unknown slot {slot} (the model's slots: {known})")
            raw.append(feasign)
            slots.append(index)
            rows.append(i)
        if dense is not None:
            dense[i] = [float(v) for v in line.dense]
    parsed = parsed_keys(
        count,
        np.array(raw, dtype=np.uint64),
        np.array(slots, dtype=np.int32),
        np.array(rows, dtype=np.int32),
        space,
    )
    parsed.dense = dense
    return parsed


def input_names(space: SlotSpace) -> list[str]:
    return [str(s) for s in space.slots] + [f.name for f in space.dense]


def model_metadata(version: int, space: SlotSpace) -> dict[str, Any]:
    inputs: list[dict[str, Any]] = [
        {"name": str(s), "datatype": "UINT64", "shape": [-1, -1]} for s in space.slots
    ]
    inputs += [{"name": f.name, "datatype": "FP32", "shape": [-1, f.dim]} for f in space.dense]
    return {
        "name": MODEL_NAME,
        "versions": [str(version)],
        "platform": PLATFORM,
        "inputs": inputs,
        "outputs": [{"name": OUTPUT, "datatype": "FP32", "shape": [-1]}],
    }


def answer(
    request: InferRequest,
    version: int,
    scores: NDArray[np.float32],
    parameters: dict[str, str | int],
) -> tuple[bytes, int | None]:
    """The response body, and its JSON header's length when binary data follows it.
    NaN scores (failed instances) are null in JSON."""
    output: dict[str, Any] = {"name": OUTPUT, "datatype": "FP32", "shape": [len(scores)]}
    body: dict[str, Any] = {"model_name": MODEL_NAME, "model_version": str(version)}
    if request.id is not None:
        body["id"] = request.id
    body["parameters"] = parameters
    body["outputs"] = [output]
    if not request.binary_output:
        output["data"] = [None if math.isnan(s) else s for s in scores.tolist()]
        return orjson.dumps(body), None
    data = scores.astype("<f4").tobytes()
    output["parameters"] = {"binary_data_size": len(data)}
    header = orjson.dumps(body)
    return header + data, len(header)
