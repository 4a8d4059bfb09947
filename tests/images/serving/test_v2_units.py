"""The v2 protocol's decoding and its mapping of tensors and lines to instances (v2.py),
without a process: each form parses to what /predict's form of the same instances does,
dense features included (the synthetic models of the process tests have none), and each
bad request is refused naming the problem."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest
from elasticctr_common.lines import DenseFeature
from elasticctr_serving.instances import BadRequest, Parsed, SlotSpace, parse_plain
from elasticctr_serving.v2 import HEADER_LENGTH, answer, decode, model_metadata, to_parsed

DENSE = (DenseFeature("age", 1), DenseFeature("ctx", 3))
SPACE = SlotSpace([101, 102, 103], 1000, DENSE)
PLAIN = [
    {"101": [5, 1001], "103": [2**64 - 1], "age": [0.5], "ctx": [1.0, -2.0, 3.5]},
    {"102": [7, 0, 9], "age": [1.5], "ctx": [0.0, 0.25, 4.0]},
]
CHECK = {"101": "UINT64", "102": "UINT64", "103": "UINT64", "age": "FP32", "ctx": "FP32"}


def canonical(parsed: Parsed) -> tuple:
    order = np.lexsort((parsed.keys, parsed.slots, parsed.rows))
    return (
        parsed.count,
        parsed.keys[order].tolist(),
        parsed.slots[order].tolist(),
        parsed.rows[order].tolist(),
        None if parsed.dense is None else parsed.dense.tolist(),
    )


def tensors(plain: list[dict]) -> list[dict]:
    """The instances as v2 JSON inputs: a slot as [n, k] padded with 0, a dense feature [n, dim]."""
    inputs = []
    for name, datatype in CHECK.items():
        rows = [instance.get(name, []) for instance in plain]
        width = max(map(len, rows))
        if width:
            data = [row + [0] * (width - len(row)) for row in rows]
            inputs.append({"name": name, "datatype": datatype, "shape": [len(rows), width],
                           "data": data})  # fmt: skip
    return inputs


def parse(body: dict | bytes, header_length: str | None = None, space=SPACE) -> Parsed:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return to_parsed(decode(raw, header_length), space, "paddlerec", 1000)


def test_tensors_parse_as_predicts_form():
    want = canonical(parse_plain({"instances": PLAIN}, SPACE, 1000))
    assert canonical(parse({"inputs": tensors(PLAIN)})) == want


def test_binary_tensors_and_int64_parse_as_json():
    inputs, blobs = [], []
    for tensor in tensors(PLAIN):
        dtype = "<u8" if tensor["datatype"] == "UINT64" else "<f4"
        if tensor["name"] == "102":
            tensor["datatype"], dtype = "INT64", "<i8"
        blob = np.array(tensor.pop("data"), dtype=dtype).tobytes()
        tensor["parameters"] = {"binary_data_size": len(blob)}
        inputs.append(tensor)
        blobs.append(blob)
    header = orjson.dumps({"inputs": inputs})
    got = parse(header + b"".join(blobs), str(len(header)))
    assert canonical(got) == canonical(parse({"inputs": tensors(PLAIN)}))


def lines_body(lines: list[str], binary: bool) -> tuple[bytes, str | None]:
    tensor = {"name": "lines", "datatype": "BYTES", "shape": [len(lines)]}
    if not binary:
        return orjson.dumps({"inputs": [{**tensor, "data": lines}]}), None
    blob = b"".join(struct.pack("<I", len(line)) + line.encode() for line in lines)
    header = orjson.dumps({"inputs": [{**tensor, "parameters": {"binary_data_size": len(blob)}}]})
    return header + blob, str(len(header))


@pytest.mark.parametrize("binary", [False, True])
def test_lines_parse_as_predicts_form(binary):
    """PaddleRec's slot format with the dense features; the click is read, not used."""
    lines = [
        "click:1 age:0.5 101:5 101:1001 ctx:1.0 ctx:-2 ctx:3.5 103:18446744073709551615",
        "click:0 102:7 102:0 102:9 age:1.5 ctx:0 ctx:.25 ctx:4e0\n",
    ]
    got = parse(*lines_body(lines, binary))
    assert canonical(got) == canonical(parse_plain({"instances": PLAIN}, SPACE, 1000))


def test_elasticctr_lines():
    space = SlotSpace([101, 102], 1000)
    body, _ = lines_body(["1 0 5:101 7:102 1005:101", "3 1 9:102"], False)
    got = to_parsed(decode(body, None), space, "elasticctr", 1000)
    want = parse_plain({"instances": [{"101": [5, 1005], "102": [7]}, {"102": [9]}]}, space, 10)
    assert canonical(got) == canonical(want)


def one(name: str, datatype: str, shape: list, data: object) -> dict:
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


AGE = one("age", "FP32", [1, 1], [0.5])
CTX = one("ctx", "FP32", [1, 3], [1, 2, 3])
SLOT = one("101", "UINT64", [1, 1], [5])


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"inputs": []}, 400, '"inputs" is empty: nothing to predict'),
        ({"input": [SLOT]}, 400, 'the body must be a JSON object with an "inputs" list of tensors'),
        ({"inputs": [SLOT, SLOT]}, 400, "input '101' is given twice"),
        ({"inputs": [one("101", "FP64", [1, 1], [5]), AGE, CTX]}, 400,
         "input '101': datatype 'FP64' is not one serving takes (UINT64, INT64, FP32, BYTES)"),
        ({"inputs": [one("101", "FP32", [1, 1], [5]), AGE, CTX]}, 400,
         "input '101': datatype FP32, expected UINT64 or INT64"),
        ({"inputs": [one("101", "UINT64", [1], [5]), AGE, CTX]}, 400,
         "input '101': shape [1], expected [n, k] (n instances)"),
        ({"inputs": [one("101", "UINT64", [1, 2], [5]), AGE, CTX]}, 400,
         "input '101': 1 values, the shape holds 2"),
        ({"inputs": [one("101", "UINT64", [1, 1], [-5]), AGE, CTX]}, 400,
         "input '101': -5 is not a UINT64 integer"),
        ({"inputs": [one("101", "UINT64", [1, 1], [1.5]), AGE, CTX]}, 400,
         "input '101': 1.5 is not a UINT64 integer"),
        ({"inputs": [one("101", "INT64", [1, 1], [-5]), AGE, CTX]}, 400,
         "input '101': feasign -5 is not an unsigned 64-bit integer"),
        ({"inputs": [one("999", "UINT64", [1, 1], [5]), AGE, CTX]}, 400,
         "unknown input '999' (the model's inputs: 101, 102, 103, age, ctx; or 'lines' alone)"),
        ({"inputs": [SLOT, AGE]}, 400,
         "input(s) 'ctx' missing: every request needs the model's dense features (age[1], ctx[3])"),
        ({"inputs": [SLOT, AGE, one("ctx", "FP32", [1, 2], [1, 2])]}, 400,
         "input 'ctx': shape [1, 2], expected [n, 3] (the dense feature's dim)"),
        ({"inputs": [SLOT, AGE, one("ctx", "FP32", [1, 3], [1, 2, 1e39])]}, 400,
         "input 'ctx': a value is not finite as a float32"),
        ({"inputs": [SLOT, AGE, one("ctx", "FP32", [1, 3], [1, 2, "x"])]}, 400,
         "input 'ctx': 'x' is not an FP32 number"),
        ({"inputs": [one("101", "UINT64", [2, 1], [5, 6]), AGE, CTX]}, 400,
         "input 'age': 1 instances, other inputs have 2 (the first dimension is the instances')"),
        ({"inputs": [one("101", "UINT64", [1001, 1], [5] * 1001)]}, 413,
         "1001 instances in one request, more than the limit 1000"),
        ({"inputs": [one("lines", "BYTES", [1], ["click:1 101:5"]), SLOT]}, 400,
         "input 'lines' holds whole instances: send it alone"),
        ({"inputs": [one("lines", "BYTES", [1], ["click:1 101:5"])]}, 400,
         "lines[0]: not a paddlerec example line: missing dense feature: age: 0 of 1 values"),
        ({"inputs": [one("lines", "BYTES", [1], ["click:1 104:5 age:1 ctx:1 ctx:2 ctx:3"])]},
         400, "lines[0]: unknown slot 104 (the model's slots: 101, 102, 103)"),
        ({"inputs": [one("lines", "UINT64", [1], [5])]}, 400,
         "input 'lines': datatype UINT64, expected BYTES"),
        ({"inputs": [SLOT, AGE, CTX], "outputs": [{"name": "prob"}]}, 400,
         "unknown output 'prob': the model's one output is 'probability'"),
    ],
)  # fmt: skip
def test_bad_requests_are_named(body, status, message):
    with pytest.raises(BadRequest) as err:
        parse(body)
    assert err.value.status == status and str(err.value).startswith(message), str(err.value)


def test_an_instance_with_only_padding_is_empty():
    space = SlotSpace([101, 102], 1000)
    body = {"inputs": [one("101", "UINT64", [2, 2], [[5, 0], [0, 0]])]}
    with pytest.raises(BadRequest, match=r"^instance 1 is empty: no slot has a feasign$"):
        parse(body, space=space)


def binary(datatype: str, shape: list, size: int, data: bytes, name: str = "101") -> tuple:
    """A body of one input with binary data, and its header's length."""
    tensor = {"name": name, "datatype": datatype, "shape": shape,
              "parameters": {"binary_data_size": size}}  # fmt: skip
    header = orjson.dumps({"inputs": [tensor]})
    return header + data, str(len(header))


@pytest.mark.parametrize(
    ("body", "header_length", "message"),
    [
        (b'{"inputs": []}', "99", f"{HEADER_LENGTH}: '99' is not a length within the body's 14"),
        (binary("UINT64", [1, 1], 8, b"\0" * 8)[0], None, "malformed JSON"),
        (*binary("UINT64", [1, 1], 4, b"\0" * 4),
         "input '101': 4 bytes of UINT64 data, the shape needs 1 x 8"),
        (*binary("UINT64", [1, 1], 16, b"\0" * 8),
         "input '101': binary_data_size 16 is past the 8 bytes of binary data left"),
        (*binary("UINT64", [1, 1], 8, b"\0" * 12),
         "4 bytes of binary data after the inputs' binary_data_size (8 bytes in all)"),
        (*binary("BYTES", [1], 6, b"\x09\0\0\0ab", "lines"),
         "input 'lines': BYTES element 0 runs past the data"),
        (*binary("BYTES", [2], 6, b"\x02\0\0\0ab", "lines"),
         "input 'lines': 1 values, the shape holds 2"),
    ],
)  # fmt: skip
def test_bad_binary_requests_are_named(body, header_length, message):
    with pytest.raises(BadRequest) as err:
        decode(body, header_length)
    assert str(err.value).startswith(message), str(err.value)


def test_answers_json_and_binary():
    scores = np.array([0.25, np.nan, 0.75], dtype=np.float32)
    request = decode(orjson.dumps({"id": "a1", "inputs": [SLOT]}), None)
    body, header_length = answer(request, 4, scores, {"request_id": "r"})
    assert header_length is None
    assert orjson.loads(body) == {
        "model_name": "elasticctr", "model_version": "4", "id": "a1",
        "parameters": {"request_id": "r"},
        "outputs": [{"name": "probability", "datatype": "FP32", "shape": [3],
                     "data": [0.25, None, 0.75]}],
    }  # fmt: skip
    request = decode(orjson.dumps({"inputs": [SLOT], "parameters": {"binary_data_output": True}}),
                     None)  # fmt: skip
    body, header_length = answer(request, 4, scores, {})
    assert header_length is not None
    output = orjson.loads(body[:header_length])["outputs"][0]
    assert output["parameters"] == {"binary_data_size": 12} and "data" not in output
    got = np.frombuffer(body[header_length:], dtype="<f4")
    np.testing.assert_array_equal(got, scores)  # NaN where it was


def test_model_metadata_lists_slots_and_dense_features():
    meta = model_metadata(3, SPACE)
    assert meta["versions"] == ["3"]
    assert [(i["name"], i["datatype"], i["shape"]) for i in meta["inputs"]] == [
        ("101", "UINT64", [-1, -1]), ("102", "UINT64", [-1, -1]), ("103", "UINT64", [-1, -1]),
        ("age", "FP32", [-1, 1]), ("ctx", "FP32", [-1, 3]),
    ]  # fmt: skip


def test_a_models_crosses_are_no_inputs_of_its_metadata():
    """Serving forms the crossed ids from the slots' tensors (instances.py): a client sends
    the slots, as to a model without crosses."""
    crossed = SlotSpace([101, 102, 103], 1000, DENSE, crosses=[(0, 2)])
    assert model_metadata(3, crossed) == model_metadata(3, SPACE)
    with pytest.raises(BadRequest, match=r"^unknown input '101x102'"):
        parse({"inputs": [one("101x102", "UINT64", [1, 1], [5]), AGE, CTX]}, space=crossed)
    got = parse({"inputs": tensors(PLAIN)}, space=crossed)
    assert canonical(got) == canonical(parse_plain({"instances": PLAIN}, crossed, 1000))
    assert got.crossed == 2  # instance 0: 5 and 1001 of slot 101, each with 2**64 - 1 of 103
