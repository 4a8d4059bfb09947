"""Request parsing (native and Python), pooling and metrics text, in-process (no Paddle, no
servers)."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import pytest
from elasticctr_common.lines import DenseFeature
from elasticctr_serving.batcher import pool
from elasticctr_serving.instances import (
    BadRequest,
    SlotSpace,
    load_json,
    merge,
    parse_elasticctr,
    parse_plain,
    parse_request,
    parsed_keys,
)
from elasticctr_serving.metrics import ServingMetrics
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests.support.serving import metric_sample

SPACE = SlotSpace([101, 102, 103], 1000)


def elasticctr(*instances: dict) -> dict:
    return {
        "instances": [
            {"slots": [{"slot_name": s, "feasigns": f} for s, f in i.items()]} for i in instances
        ]
    }


def test_feasigns_map_into_sparse_dim_and_padding_is_dropped():
    parsed = parse_elasticctr(
        elasticctr({"101": [1005, 2000], "103": [7]}, {"102": [0, 3]}), SPACE, 10
    )
    assert parsed.count == 2
    assert parsed.keys.tolist() == [5, 7, 3]  # 2000 % 1000 and 0 are the padding key 0
    assert parsed.slots.tolist() == [0, 2, 1]
    assert parsed.rows.tolist() == [0, 0, 1]


def test_both_forms_and_both_paths_agree():
    body = elasticctr({"101": [18446744073709551615, 5], "102": []}, {"103": [999, 1000]})
    quick = parse_elasticctr(body, SPACE, 10)
    careful = parse_elasticctr(body, SPACE, 10, quick=False)
    plain = parse_plain(
        {"instances": [{"101": [18446744073709551615, 5], "102": []}, {"103": [999, 1000]}]},
        SPACE,
        10,
    )
    for other in (careful, plain):
        assert other.count == quick.count
        for field in ("keys", "slots", "rows"):
            assert getattr(other, field).tolist() == getattr(quick, field).tolist()
    assert quick.keys.tolist() == [18446744073709551615 % 1000, 5, 999]


feasign = st.one_of(
    st.integers(0, 2**64 - 1),
    st.integers(-5, 5),
    st.integers(2**64, 2**65),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["12", "x", "", "18446744073709551616"]),
)
slot_name = st.one_of(st.sampled_from(["101", "102", "103", "999"]), st.integers(100, 104))
feasign_list = st.one_of(
    st.lists(feasign, max_size=4), st.sampled_from(["", "12", {}, None, 5, [[1]]])
)
instance = st.one_of(
    st.fixed_dictionaries(
        {
            "slots": st.lists(
                st.fixed_dictionaries({"slot_name": slot_name, "feasigns": feasign_list}),
                max_size=4,
            )
        }
    ),
    st.sampled_from([{}, [], "x", {"slots": ""}, {"slots": {}}, {"slots": [[]]}]),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(instance, min_size=1, max_size=4))
def test_quick_and_careful_parsing_give_the_same_answer(instances):
    results: list[tuple[object, ...]] = []
    for quick in (True, False):
        try:
            p = parse_elasticctr({"instances": instances}, SPACE, 10, quick=quick)
            results.append((p.count, p.keys.tolist(), p.slots.tolist(), p.rows.tolist()))
        except BadRequest as err:
            results.append(("error", err.status, str(err)))
    # The quick path lets booleans through as 0/1; the server sends bodies with JSON
    # booleans to the careful path (app.py), so only bool-free bodies must agree.
    has_bool = "True" in repr(instances) or "False" in repr(instances)
    if not has_bool:
        assert results[0] == results[1]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"instances": [{"slots": [{"feasigns": [1]}]}]},
            'each slot must be an object with "slot_name"',
        ),
        ({"instances": [{"slots": "101"}]}, 'instance 0: expected an object with a "slots" list'),
        ({"instances": [{"101": [1]}, {"101": []}]}, "instance 1 is empty"),
        ({"instances": [{"101": ["1", "x"]}]}, "instance 0, slot 101: feasign 'x' is not"),
        ({"instances": [{"104": [1]}]}, "unknown slot '104' (the model's slots: 101, 102, 103)"),
        ({"instances": [[1]]}, "instance 0: expected an object of slot -> feasign list"),
    ],
)
def test_plain_and_elasticctr_errors_name_the_problem(body, message):
    parse = parse_plain if "slots" not in str(body) else parse_elasticctr
    with pytest.raises(BadRequest, match=None) as caught:
        parse(body, SPACE, 10)
    assert message in str(caught.value) and caught.value.status == 400


def test_too_many_instances_and_malformed_json():
    with pytest.raises(BadRequest) as caught:
        parse_plain({"instances": [{"101": [1]}] * 11}, SPACE, 10)
    assert caught.value.status == 413
    with pytest.raises(BadRequest, match="malformed JSON"):
        load_json(b'{"instances": [')


def test_merge_renumbers_rows_and_pool_sums_per_slot_and_instance():
    a = parse_plain({"instances": [{"101": [1, 2]}, {"103": [3]}]}, SPACE, 10)
    b = parse_plain({"instances": [{"102": [4], "101": [5]}]}, SPACE, 10)
    merged = merge([a, b])
    count, keys, slots, rows = merged.count, merged.keys, merged.slots, merged.rows
    assert count == 3 and keys.tolist() == [1, 2, 3, 4, 5] and rows.tolist() == [0, 0, 1, 2, 2]
    values = np.arange(5 * 2, dtype=np.float32).reshape(5, 2)  # key k -> row k - 1
    pooled = pool(values, slots, rows, 3, count)
    assert pooled.shape == (3, 3, 2) and pooled.dtype == np.float32
    want = np.zeros((3, 3, 2), np.float32)
    want[0, 0] = values[0] + values[1]
    want[2, 1] = values[2]
    want[1, 2] = values[3]
    want[0, 2] = values[4]
    np.testing.assert_array_equal(pooled, want)
    assert all(pooled[s].flags["C_CONTIGUOUS"] for s in range(3))


def test_metrics_text_format():
    m = ServingMetrics()
    m.requests.inc(1, "/predict", "200")
    m.requests.inc(2, "/predict", "200")
    m.latency.observe(0.003, "/predict")
    m.latency.observe(7.0, "/predict")
    m.model_version.set(4)
    m.stage_seconds.inc(0.25, "parse")
    text = m.render()
    # Valid text format: prometheus_client's parser reads every family back.
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["elasticctr_serving_request_seconds"].type == "histogram"
    assert families["elasticctr_serving_requests"].type == "counter"
    value = partial(metric_sample, text)
    assert value("elasticctr_serving_requests_total", path="/predict", code="200") == 3
    assert m.requests.get("/predict", "200") == 3
    assert value("elasticctr_serving_request_seconds_bucket", path="/predict", le="0.005") == 1
    assert value("elasticctr_serving_request_seconds_bucket", path="/predict", le="+Inf") == 2
    assert value("elasticctr_serving_request_seconds_count", path="/predict") == 2
    assert value("elasticctr_serving_request_seconds_sum", path="/predict") == 7.003
    assert value("elasticctr_serving_model_version") == 4
    assert value("elasticctr_serving_cube_committed_version") == -1
    assert value("elasticctr_serving_stage_seconds_total", stage="parse") == 0.25
    # The names docs/serving.md lists, and no _created series beside them.
    for name in (
        "requests_total", "request_seconds_count", "examples_total", "batches_total",
        "batch_examples_count", "cube_keys_total", "cube_missing_keys_total", "model_version",
        "cube_committed_version", "model_switches_total", "model_rejections_total",
        "isolated_requests_total",
    ):  # fmt: skip
        assert f"\nelasticctr_serving_{name}" in text, name
    assert "_created" not in text
    # Each ServingMetrics has its own registry: a second one starts from zero.
    assert "elasticctr_serving_requests_total{" not in ServingMetrics().render()


# -- the native parser, unique and pool (images/serving/parser) ------------------------------
def python_parse(body: bytes, plain: bool):
    """What serving answers without the native parser: (count, keys, slots, rows) or the
    error (status, message)."""
    quick = b"true" not in body and b"false" not in body
    try:
        parse = parse_plain if plain else parse_elasticctr
        p = parse(load_json(body), SPACE, 10, quick)
    except BadRequest as err:
        return ("error", err.status, str(err))
    return (p.count, p.keys.tolist(), p.slots.tolist(), p.rows.tolist())


def native_parse(native, body: bytes, plain: bool):
    got = native.parse(body, SPACE.names, plain, 10)
    if got is None:
        return None
    count, raw, slots, rows = got
    p = parsed_keys(count, raw, slots, rows, SPACE)
    return (p.count, p.keys.tolist(), p.slots.tolist(), p.rows.tolist())


def spellings(request) -> list[bytes]:
    """The same JSON written compactly, with spaces and indented."""
    return [
        json.dumps(request, separators=(",", ":")).encode(),
        json.dumps(request).encode(),
        json.dumps(request, indent=1).encode().replace(b"\n", b"\r\n"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(instance, min_size=0, max_size=4), st.data())
def test_native_parser_answers_as_python_or_leaves_the_body_to_it(native_parser, instances, data):
    plain_instances = [
        {e["slot_name"]: e["feasigns"] for e in i["slots"] if isinstance(e.get("slot_name"), str)}
        if isinstance(i, dict) and isinstance(i.get("slots"), list)
        and all(isinstance(e, dict) for e in i["slots"])
        else i
        for i in instances
    ]  # fmt: skip
    for plain, request in (
        (False, {"instances": instances}),
        (True, {"instances": plain_instances}),
    ):
        for body in spellings(request):
            # and a one-byte change of it: anything the parser takes, it takes rightly
            at = data.draw(st.integers(0, len(body) - 1))
            mutated = body[:at] + bytes([data.draw(st.integers(0, 255))]) + body[at + 1 :]
            for b in (body, mutated):
                native = native_parse(native_parser, b, plain)
                if native is not None:
                    assert native == python_parse(b, plain), b


def test_native_parser_takes_the_usual_requests(native_parser):
    request = elasticctr({"101": [1005, 2000, 18446744073709551615], "103": [7]}, {"102": [0, 3]})
    plain = {"instances": [{"101": [1005, 2000], "103": [7]}, {"102": [0, 3]}]}
    for form, request_of_form in ((False, request), (True, plain)):
        for body in spellings(request_of_form):
            got = native_parse(native_parser, body, form)
            assert got is not None and got == python_parse(body, form)
    # Left to the Python code, which answers or names the problem:
    for body, is_plain in [
        (b'{"instances": [{"slots": [{"slot_name": "101", "feasigns": ["5"]}]}]}', False),
        (b'{"instances": [{"slots": [{"slot_name": "1\\u00301", "feasigns": [5]}]}]}', False),
        (b'{"instances": [{"slots": [{"slot_name": "101", "feasigns": [1.5]}]}]}', False),
        (b'{"instances": [{"101": [1], "101": [2]}]}', True),
        (b'{"instances": [{"101": []}]}', True),
        (b'{"instances": [' + b'{"101": [1]},' * 10 + b'{"101": [1]}]}', True),
    ]:
        assert native_parse(native_parser, body, is_plain) is None


def test_parse_request_gives_the_same_answer_on_both_paths(native_parser):
    body = json.dumps(elasticctr({"101": [1005, 2000], "103": [7]}, {"102": [0, 3]})).encode()
    parsed = parse_request(body, SPACE, 10, plain=False)
    assert (parsed.count, parsed.keys.tolist()) == python_parse(body, False)[:2]
    with pytest.raises(BadRequest, match="unknown slot '999'"):
        parse_request(b'{"instances": [{"999": [1]}]}', SPACE, 10, plain=True)


def test_native_unique_and_pool_equal_numpy_bit_for_bit(native_parser):
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(0, 3000))
        keys = rng.integers(1, int(rng.integers(2, 5000)), n).astype(np.uint64)
        unique, inverse = native_parser.unique(keys)
        assert np.array_equal(unique[inverse], keys)
        assert sorted(unique.tolist()) == np.unique(keys).tolist()
        slot_count, count, dim = int(rng.integers(1, 30)), int(rng.integers(1, 70)), 9
        scale = rng.choice([1e-3, 1.0, 1e6])
        values = (rng.standard_normal((len(unique), dim)) * scale).astype(np.float32)
        slots = rng.integers(0, slot_count, n).astype(np.int32)
        rows = rng.integers(0, count, n).astype(np.int32)
        got = native_parser.pool(values, inverse, slots, rows, slot_count, count)
        want = pool(values[inverse], slots, rows, slot_count, count)
        assert got.shape == want.shape and got.dtype == want.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    with pytest.raises(RuntimeError, match="elasticctr_pool"):
        native_parser.pool(values, inverse, slots + slot_count, rows, slot_count, count)


DENSE_SPACE = SlotSpace(
    [101, 102], 1000, (DenseFeature("dense_feature", 3), DenseFeature("age", 1))
)


def test_dense_features_are_read_in_both_forms_in_the_models_order():
    instances = [
        {"slots": [{"slot_name": "101", "feasigns": [5]}],
         "dense": {"age": [30], "dense_feature": [0.5, -1, 2e3]}},
        {"slots": [], "dense": {"dense_feature": [0, 0, 0], "age": [1.25]}},  # no feasign: fine
    ]  # fmt: skip
    body = json.dumps({"instances": instances}).encode()
    parsed = parse_request(body, DENSE_SPACE, 10, plain=False)
    assert parsed.count == 2 and parsed.keys.tolist() == [5] and parsed.rows.tolist() == [0]
    assert parsed.dense is not None and parsed.dense.dtype == np.float32
    np.testing.assert_array_equal(parsed.dense, [[0.5, -1, 2000, 30], [0, 0, 0, 1.25]])
    plain = parse_request(
        json.dumps({"instances": [
            {"101": [5], "age": [30], "dense_feature": [0.5, -1, 2e3]},
            {"dense_feature": [0, 0, 0], "age": [1.25]},
        ]}).encode(),
        DENSE_SPACE, 10, plain=True,
    )  # fmt: skip
    assert plain.dense is not None and parsed.dense is not None
    np.testing.assert_array_equal(plain.dense, parsed.dense)
    merged = merge([parsed, plain])
    assert merged.count == 4 and merged.dense is not None and merged.dense.shape == (4, 4)
    assert merged.rows.tolist() == [0, 2]


@pytest.mark.parametrize(
    ("dense", "message"),
    [
        ({"dense_feature": [1, 2, 3]}, "instance 0: dense feature(s) age missing (every instance "
         "needs the model's dense features: dense_feature[3], age[1])"),
        ({"dense_feature": [1, 2], "age": [1]}, "instance 0, dense feature dense_feature: "
         "expected a list of 3 numbers, got 2 values"),
        ({"dense_feature": "1 2 3", "age": [1]}, "instance 0, dense feature dense_feature: "
         "expected a list of 3 numbers, got str"),
        ({"dense_feature": [1, "2", 3], "age": [1]}, "instance 0, dense feature dense_feature: "
         "value '2' is not a number"),
        ({"dense_feature": [1, True, 3], "age": [1]}, "instance 0, dense feature dense_feature: "
         "value True is not a number"),
        ({"dense_feature": [1, 2, 3], "age": [1e39]}, "instance 0, dense feature age: value "
         "1e+39 is not finite as a float32"),
        ({"dense_feature": [1, 2, 3], "age": [1], "height": [2]}, "instance 0: unknown dense "
         "feature 'height' (the model's dense features: dense_feature[3], age[1])"),
    ],
)  # fmt: skip
def test_a_bad_dense_part_is_refused_naming_the_instance_and_feature(dense, message):
    body = {"instances": [{"slots": [{"slot_name": "101", "feasigns": [5]}], "dense": dense}]}
    with pytest.raises(BadRequest) as caught:
        parse_request(json.dumps(body).encode(), DENSE_SPACE, 10, plain=False)
    assert str(caught.value) == message and caught.value.status == 400
    plain = {"instances": [{"101": [5], **dense}]}
    with pytest.raises(BadRequest) as caught:
        parse_request(json.dumps(plain).encode(), DENSE_SPACE, 10, plain=True)
    assert str(caught.value) == message.replace("unknown dense feature", "unknown slot") or (
        "height" in message and "unknown slot 'height'" in str(caught.value)
    )


def test_no_dense_part_for_a_model_without_dense_features():
    body = {"instances": [{"slots": [{"slot_name": "101", "feasigns": [5]}], "dense": {"a": [1]}}]}
    with pytest.raises(BadRequest, match=r"instance 0: unknown dense feature 'a' \(the model's "
                       r"dense features: none\)"):  # fmt: skip
        parse_request(json.dumps(body).encode(), SPACE, 10, plain=False)
    with pytest.raises(BadRequest, match='instance 0: expected "dense"'):
        parse_request(
            json.dumps({"instances": [{"slots": [], "dense": [1]}]}).encode(),
            DENSE_SPACE,
            10,
            plain=False,
        )
