"""The donefile: parsing, error messages, and publishing versions on every backend."""

from __future__ import annotations

import json
import re

import pytest
from elasticctr_common.versions import (
    DonefileError,
    Version,
    append_version,
    dense_beside,
    dense_path,
    parse_donefile,
    read_versions,
    sparse_path,
)


def test_a_line_is_compact_json_with_id_key_input():
    line = Version(id=3, key=3, input="s3://b/models/3/sparse").to_line()
    assert line == '{"id":3,"key":3,"input":"s3://b/models/3/sparse"}'
    assert json.loads(line) == {"id": 3, "key": 3, "input": "s3://b/models/3/sparse"}


def test_parse_keeps_order_and_skips_blank_lines():
    text = '{"id": 1, "key": 1, "input": "u/1"}\n\n  \n{"id": 5, "key": 5, "input": "u/5"}\n'
    assert parse_donefile(text) == [Version(1, 1, "u/1"), Version(5, 5, "u/5")]
    assert parse_donefile("") == []


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("not json", "Expecting value"),
        ('{"id": 1, "key": 1}', "'input'"),
        ('{"id": "x", "key": 1, "input": "u"}', "invalid literal for int"),
        ("[1, 2, 3]", "list indices"),
    ],
)
def test_a_malformed_line_is_named_by_source_and_number(line, reason):
    text = '{"id": 1, "key": 1, "input": "u/1"}\n' + line + "\n"
    with pytest.raises(DonefileError, match=r"^models/donefile:2: not a version line \(") as err:
        parse_donefile(text, source="models/donefile")
    assert reason in str(err.value)
    assert repr(line) in str(err.value)


@pytest.mark.parametrize("second", [1, 0])
def test_ids_must_strictly_increase(second):
    text = f'{{"id": 1, "key": 1, "input": "a"}}\n{{"id": {second}, "key": 1, "input": "b"}}\n'
    message = f"donefile:2: version {second} does not follow 1"
    with pytest.raises(DonefileError, match=re.escape(message)):
        parse_donefile(text)


def test_donefile_error_is_a_value_error():
    assert issubclass(DonefileError, ValueError)


def test_no_donefile_means_no_versions(store):
    assert read_versions(store) == []


def test_append_publishes_versions_in_order(store):
    v1 = Version(1, 1, store.uri("1/sparse"))
    v2 = Version(2, 2, store.uri("2/sparse"))
    append_version(store, v1)
    append_version(store, v2)
    assert read_versions(store) == [v1, v2]
    assert store.read_text("donefile") == v1.to_line() + "\n" + v2.to_line() + "\n"


def test_append_refuses_an_old_id_and_leaves_the_donefile_alone(store):
    append_version(store, Version(7, 7, "u/7"))
    before = store.read_bytes("donefile")
    message = f"{store.uri('donefile')}: version 7 does not follow 7"
    with pytest.raises(DonefileError, match=re.escape(message)):
        append_version(store, Version(7, 7, "u/7b"))
    assert store.read_bytes("donefile") == before


def test_a_corrupt_donefile_is_reported_with_its_uri(store):
    store.write_text("donefile", '{"id": 1, "key": 1, "input": "u"}\ngarbage\n')
    with pytest.raises(DonefileError, match=re.escape(f"{store.uri('donefile')}:2:")):
        read_versions(store)


def test_another_donefile_name(store):
    append_version(store, Version(1, 1, "u/1"), name="cube/donefile")
    assert read_versions(store, name="cube/donefile") == [Version(1, 1, "u/1")]
    assert read_versions(store) == []


def test_the_layout_of_a_version():
    assert dense_path(7) == "7/dense" and dense_path(7, "meta.json") == "7/dense/meta.json"
    assert sparse_path(7) == "7/sparse" and sparse_path(7, 3) == "7/sparse/part-00003"
    assert dense_beside("s3://b/models/7/sparse/") == "s3://b/models/7/dense"
    assert dense_beside("hdfs://nn/exports/7/embeddings") is None


def test_a_delta_names_its_parent_and_a_base_line_is_unchanged(store):
    base = Version(1, 1, store.uri("1/sparse"))
    delta = Version(2, 2, store.uri("2/sparse"), parent=1)
    append_version(store, base)
    append_version(store, delta)
    assert read_versions(store) == [base, delta]
    assert store.read_text("donefile").splitlines() == [
        f'{{"id":1,"key":1,"input":"{store.uri("1/sparse")}"}}',
        f'{{"id":2,"key":2,"input":"{store.uri("2/sparse")}","parent":1}}',
    ]


def test_a_delta_on_a_version_the_donefile_does_not_name_is_refused(store):
    append_version(store, Version(1, 1, "u/1"))
    before = store.read_bytes("donefile")
    with pytest.raises(DonefileError, match="version 3 is a delta on version 2, which the"):
        append_version(store, Version(3, 3, "u/3", parent=2))
    assert store.read_bytes("donefile") == before
    store.write_text("donefile", before.decode() + '{"id":3,"key":3,"input":"u/3","parent":2}\n')
    with pytest.raises(DonefileError, match=re.escape("donefile:2: version 3 is a delta on")):
        read_versions(store)
