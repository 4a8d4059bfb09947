"""Request parsing (native and Python), crossed ids, pooling and metrics text, in-process (no
Paddle, no servers)."""

from __future__ import annotations

import json
from functools import partial

import numpy as np
import orjson
import pytest
from elasticctr_common.crosses import (
    CROSS_VECTORS,
    MAX_CROSSED_IDS,
    cross_indices,
    crossed_keys,
    pair_seed,
    splitmix64,
)
from elasticctr_common.lines import DenseFeature
from elasticctr_serving.batcher import pool
from elasticctr_serving.instances import (
    BadRequest,
    Parsed,
    SlotSpace,
    crossed_feasigns,
    load_json,
    merge,
    parse_elasticctr,
    parse_plain,
    parse_request,
    parsed_keys,
    splitmix64_array,
)
from elasticctr_serving.metrics import ServingMetrics
from elasticctr_serving.v2 import decode, to_parsed
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests.support.serving import metric_sample, slot_arrays

SPACE = SlotSpace([101, 102, 103], 1000)
# SPACE's slots with two crosses, the second of its slots in the other order
CROSSED_SPACE = SlotSpace([101, 102, 103], 1000, crosses=[(0, 1), (2, 0)])


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
@given(st.lists(instance, min_size=1, max_size=4), st.sampled_from([SPACE, CROSSED_SPACE]))
def test_quick_and_careful_parsing_give_the_same_answer(instances, space):
    results: list[tuple[object, ...]] = []
    for quick in (True, False):
        try:
            p = parse_elasticctr({"instances": instances}, space, 10, quick=quick)
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
def python_parse(body: bytes, plain: bool, space: SlotSpace = SPACE):
    """What serving answers without the native parser: (count, keys, slots, rows) or the
    error (status, message)."""
    quick = b"true" not in body and b"false" not in body
    try:
        parse = parse_plain if plain else parse_elasticctr
        p = parse(load_json(body), space, 10, quick)
    except BadRequest as err:
        return ("error", err.status, str(err))
    return (p.count, p.keys.tolist(), p.slots.tolist(), p.rows.tolist())


def native_parse(native, body: bytes, plain: bool, space: SlotSpace = SPACE):
    got = native.parse(body, space.names, plain, 10)
    if got is None:
        return None
    count, raw, slots, rows = got
    p = parsed_keys(count, raw, slots, rows, space)
    return (p.count, p.keys.tolist(), p.slots.tolist(), p.rows.tolist())


def spellings(request) -> list[bytes]:
    """The same JSON written compactly, with spaces and indented."""
    return [
        json.dumps(request, separators=(",", ":")).encode(),
        json.dumps(request).encode(),
        json.dumps(request, indent=1).encode().replace(b"\n", b"\r\n"),
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(instance, min_size=0, max_size=4), st.sampled_from([SPACE, CROSSED_SPACE]),
       st.data())  # fmt: skip
def test_native_parser_answers_as_python_or_leaves_the_body_to_it(
    native_parser, instances, space, data
):
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
                native = native_parse(native_parser, b, plain, space)
                if native is not None:
                    assert native == python_parse(b, plain, space), b


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


# -- crossed ids (elasticctr_common.crosses) -------------------------------------------------
CROSSED_SLOTS = [101, 102, 103, 104, 105]  # 105 is in no cross
CROSSES = [[101, 102], [103, 101], [102, 104]]
FILLER = {"slot_name": "105", "feasigns": [1]}  # a real key in a slot no cross reads


def crossed_space(sparse_dim: int) -> SlotSpace:
    return SlotSpace(CROSSED_SLOTS, sparse_dim, crosses=cross_indices(CROSSES, CROSSED_SLOTS))


@pytest.mark.filterwarnings("error")  # numpy warns of overflow in scalar, not array, arithmetic
def test_splitmix64_of_arrays_is_the_rules():
    edges = [0, 1, 2**32, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]
    randoms = np.random.default_rng(3).integers(0, 2**64, 2000, dtype=np.uint64).tolist()
    values = np.array(edges + randoms, dtype=np.uint64)
    assert splitmix64_array(values).tolist() == [splitmix64(v) for v in edges + randoms]


@pytest.mark.filterwarnings("error")
def test_crossed_feasigns_are_the_rules_fixed_points():
    seeds = np.array([pair_seed(a, b) for a, b, *_ in CROSS_VECTORS], dtype=np.uint64)
    xs, ys = (np.array([v[i] for v in CROSS_VECTORS], dtype=np.uint64) for i in (2, 3))
    assert crossed_feasigns(seeds, xs, ys).tolist() == [v[4] for v in CROSS_VECTORS]


def sent_by_slot(instance: dict) -> dict[str, list[int]]:
    """An ElasticCTR instance's feasigns per slot, a slot given twice its lists in order."""
    lists: dict[str, list[int]] = {}
    for entry in instance["slots"]:
        lists.setdefault(entry["slot_name"], []).extend(entry["feasigns"])
    return lists


def expected_keys(instances: list[dict], sparse_dim: int) -> dict[tuple[int, int], list[int]]:
    """(instance, sparse input) -> its keys, in order: each slot's as sent, then each cross's
    by the rule's own crossed_keys."""
    want = {}
    for row, instance in enumerate(instances):
        sent = sent_by_slot(instance)
        for i, slot in enumerate(CROSSED_SLOTS):
            keys = [f % sparse_dim for f in sent.get(str(slot), []) if f % sparse_dim]
            if keys:
                want[row, i] = keys
        for n, (a, b) in enumerate(CROSSES):
            xs, ys = sent.get(str(a), []), sent.get(str(b), [])
            keys = crossed_keys(pair_seed(a, b), xs, ys, sparse_dim)
            if keys:
                want[row, len(CROSSED_SLOTS) + n] = keys
    return want


def keys_by_input(parsed: Parsed) -> dict[tuple[int, int], list[int]]:
    got: dict[tuple[int, int], list[int]] = {}
    columns = (parsed.keys.tolist(), parsed.slots.tolist(), parsed.rows.tolist())
    for key, index, row in zip(*columns, strict=True):
        got.setdefault((row, index), []).append(key)
    return got


def every_path(instances: list[dict], space: SlotSpace, native) -> dict[str, Parsed]:
    """The instances as every request form and path parses them: ElasticCTR's form (quick,
    careful, native), the plain one (Python, native), v2 tensors and v2 lines."""
    request = {"instances": instances}
    plain = {"instances": [sent_by_slot(i) for i in instances]}
    tensors = [
        {"name": slot, "datatype": "UINT64", "shape": list(array.shape), "data": array.tolist()}
        for slot, array in slot_arrays({"slots": space.slots}, instances)
    ]
    lines = [
        "1 0 " + " ".join(f"{f}:{e['slot_name']}" for e in i["slots"] for f in e["feasigns"])
        for i in instances
    ]
    v2_lines = {"inputs": [{"name": "lines", "datatype": "BYTES", "shape": [len(lines)],
                            "data": lines}]}  # fmt: skip
    paths = {
        "quick": parse_elasticctr(request, space, 1000),
        "careful": parse_elasticctr(request, space, 1000, quick=False),
        "plain": parse_plain(plain, space, 1000),
        "v2 tensors": to_parsed(decode(orjson.dumps({"inputs": tensors}), None), space, "", 1000),
        "v2 lines": to_parsed(decode(orjson.dumps(v2_lines), None), space, "elasticctr", 1000),
    }
    for path, body, is_plain in (("native", request, False), ("native plain", plain, True)):
        got = native.parse(json.dumps(body).encode(), space.names, is_plain, 1000)
        if got is not None:  # else a body the native parser leaves to the Python code
            count, raw, slots, rows = got
            paths[path] = parsed_keys(count, raw, slots, rows, space)
    return paths


def check_crossed(instances: list[dict], sparse_dim: int, native) -> dict[str, Parsed]:
    """Every path gives the rule's keys per instance and input, the sent keys before the
    crossed ones; what was sent (raw: impressions) is what a model without crosses sees."""
    space = crossed_space(sparse_dim)
    want = expected_keys(instances, sparse_dim)
    paths = every_path(instances, space, native)
    uncrossed = every_path(instances, SlotSpace(CROSSED_SLOTS, sparse_dim), native)
    for path, parsed in paths.items():
        assert keys_by_input(parsed) == want, path
        sent = len(parsed.keys) - parsed.crossed
        assert (parsed.slots[:sent] < len(CROSSED_SLOTS)).all(), path
        assert (parsed.slots[sent:] >= len(CROSSED_SLOTS)).all(), path
        plain = uncrossed[path]
        assert parsed.largest_feasign == plain.largest_feasign, path
        for field in ("raw", "raw_slots", "raw_rows"):
            assert np.array_equal(getattr(parsed, field), getattr(plain, field)), (path, field)
    return paths


@st.composite
def crossed_requests(draw) -> tuple[int, list[dict]]:
    """(sparse_dim, instances): multi-hot slots (more ids than a cross takes), slots given
    twice, empty ones, padding feasigns, ids near 2**64; each instance with a real key."""
    sparse_dim = draw(st.sampled_from([7, 1000, 2**64 - 1]))  # 7: crossed keys of 0 too
    feasign = st.one_of(
        st.integers(0, 2**64 - 1),
        st.integers(2**64 - 20, 2**64 - 1),
        st.integers(1, 12),  # the same ids in several slots and instances
        st.sampled_from([0, sparse_dim]),  # padding
    )
    names = st.sampled_from([str(s) for s in CROSSED_SLOTS])
    entry = st.fixed_dictionaries({"slot_name": names, "feasigns": st.lists(feasign, max_size=7)})
    instances = []
    for slots in draw(st.lists(st.lists(entry, max_size=6), min_size=1, max_size=5)):
        # each form refuses an instance without a key, in its own words
        real = any(f % sparse_dim for e in slots for f in e["feasigns"])
        instances.append({"slots": slots if real else [*slots, FILLER]})
    return sparse_dim, instances


@settings(max_examples=150, deadline=None)
@given(crossed_requests())
def test_every_request_path_forms_the_crossed_ids_of_the_rule(native_parser, generated):
    sparse_dim, instances = generated
    check_crossed(instances, sparse_dim, native_parser)


def test_crossed_ids_of_many_instances(native_parser):
    rng = np.random.default_rng(17)
    near_top = 2**64 - rng.integers(1, 1000, 5000).astype(np.uint64)
    pools = [rng.integers(1, 50, 5000), rng.integers(0, 2**64, 5000, np.uint64), near_top]
    instances = []
    for _ in range(400):
        slots = [
            {"slot_name": str(slot), "feasigns": [int(f) for f in rng.choice(pools[slot % 3], n)]}
            for slot in CROSSED_SLOTS
            for n in [int(rng.choice([0, 1, 1, 2, MAX_CROSSED_IDS + 3]))]
        ]
        instances.append({"slots": [*slots, FILLER]})
    paths = check_crossed(instances, 1_000_003, native_parser)
    assert {"native", "native plain"} <= set(paths)  # the usual bodies: the native parser's
    assert paths["quick"].crossed > 400


def test_a_request_names_slots_never_a_cross():
    space = crossed_space(1000)
    for name in ("101x102", "[101, 102]", "106"):
        body = json.dumps({"instances": [{name: [5]}]}).encode()
        with pytest.raises(BadRequest) as caught:
            parse_request(body, space, 10, plain=True)
        assert str(caught.value) == (
            f"instance 0: unknown slot {name!r} (the model's slots: 101, 102, 103, 104, 105)"
        )


def test_the_crosses_are_part_of_the_space():
    """A request parsed for a model of other crosses is not batched with this model's."""
    assert crossed_space(1000) == crossed_space(1000)
    assert hash(crossed_space(1000)) == hash(crossed_space(1000))
    assert crossed_space(1000) != SlotSpace(CROSSED_SLOTS, 1000)
    assert crossed_space(1000) != SlotSpace(CROSSED_SLOTS, 1000, crosses=[(0, 1)])
    space = crossed_space(1000)
    assert space.inputs == 8 and space.cross_slots == CROSSES
    assert [space.describe_input(i) for i in (4, 5, 7)] == [
        "slot 105", "cross [101, 102]", "cross [102, 104]"
    ]  # fmt: skip


def test_merge_and_pool_take_the_crosses_inputs():
    space = crossed_space(1000)
    a = parse_plain({"instances": [{"101": [1, 2], "102": [3]}]}, space, 10)
    b = parse_plain({"instances": [{"103": [4]}, {"103": [5], "101": [6]}]}, space, 10)
    merged = merge([a, b])
    assert merged.crossed == a.crossed + b.crossed == 3  # 2 x 1 in a, 1 x 1 in b's second
    crossed = merged.slots >= len(CROSSED_SLOTS)
    assert merged.rows[crossed].tolist() == [0, 0, 2]
    assert merged.slots[crossed].tolist() == [5, 5, 6]
    values = np.ones((len(merged.keys), 2), dtype=np.float32)
    pooled = pool(values, merged.slots, merged.rows, space.inputs, merged.count)
    assert pooled.shape == (8, 3, 2)
    assert pooled[5, :, 0].tolist() == [2, 0, 0] and pooled[6, :, 0].tolist() == [0, 0, 1]
    assert pooled[7].sum() == 0  # no request gave slot 104
