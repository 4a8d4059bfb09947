"""Request parsing, pooling and metrics text, in-process (no Paddle, no servers)."""

from __future__ import annotations

import numpy as np
import pytest
from elasticctr_serving.batcher import pool
from elasticctr_serving.instances import (
    BadRequest,
    SlotSpace,
    load_json,
    merge,
    parse_elasticctr,
    parse_plain,
)
from elasticctr_serving.metrics import ServingMetrics
from hypothesis import given, settings
from hypothesis import strategies as st

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
    results = []
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
    count, keys, slots, rows = merge([a, b])
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
    m.latency.observe(0.003, "/predict")
    m.latency.observe(7.0, "/predict")
    m.model_version.set(4)
    text = m.render()
    assert 'elasticctr_serving_requests_total{path="/predict",code="200"} 1' in text
    assert 'elasticctr_serving_request_seconds_bucket{path="/predict",le="0.005"} 1' in text
    assert 'elasticctr_serving_request_seconds_bucket{path="/predict",le="+Inf"} 2' in text
    assert 'elasticctr_serving_request_seconds_count{path="/predict"} 2' in text
    assert "elasticctr_serving_model_version 4" in text
    assert "# TYPE elasticctr_serving_request_seconds histogram" in text
