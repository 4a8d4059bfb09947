"""The feedback loop's records and partition names (elasticctr_common.feedback): a
request's impressions round-trip to the trainer's `<feasign>:<slot>` text; every
malformed record is refused with a countable reason, never half taken."""

from __future__ import annotations

import base64
import json

import pytest
from elasticctr_common.feedback import (
    BadRecord,
    Click,
    freshness,
    impression_records,
    impressions,
    impressions_head,
    impressions_message,
    impressions_record,
    kafka_client_config,
    next_partition,
    pack_impressions,
    parse_click,
    parse_partition,
    partition_of,
)

RECORD = pack_impressions(
    "req-1", 1_700_000_000.5, 7, [101, 102, 103], [0.25, None],
    [[(2**64 - 1, 101), (5, 103), (6, 101)], [(0, 102)]],
)  # fmt: skip


def test_a_request_round_trips_to_training_features():
    first, second = impressions(RECORD)
    assert first.key == ("req-1", 0) and second.key == ("req-1", 1)
    assert first.features == "18446744073709551615:101 5:103 6:101"
    assert second.features == "0:102"  # the padding feasign too, as sent
    assert (first.score, second.score, first.version, first.time) == (0.25, None, 7, 1.7e9 + 0.5)


def test_the_arrays_are_spliced_into_the_head_as_base64_fields():
    head = impressions_head("req-3", 1.5, 2, (101, 102), [0.25, float("nan")])
    encoded = json.dumps(head, separators=(",", ":")).encode()
    record = impressions_record(encoded, b"\x01" * 16, b"\x00\x00\x01\x00", b"\x01\x00\x00\x00" * 2)
    assert json.loads(record) == {
        "rid": "req-3", "t": 1.5, "v": 2, "slots": [101, 102], "s": [0.25, None],
        "f": base64.b64encode(b"\x01" * 16).decode(), "k": "AAABAA==", "c": "AQAAAAEAAAA=",
    }  # fmt: skip
    assert [m.features for m in impressions(record)] == [
        f"{0x0101010101010101}:101", f"{0x0101010101010101}:102",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="must be a JSON object"):
        impressions_record(b"[1]", b"", b"", b"")


def test_a_message_holds_one_or_more_records_one_a_line():
    other = pack_impressions("req-2", 1.7e9, 7, [101], [0.5], [[(9, 101)]])
    message = impressions_message([RECORD, other])
    assert message.count(b"\n") == 1  # compact JSON has no newline of its own
    assert impression_records(message) == [RECORD, other]
    assert impression_records(RECORD) == [RECORD]  # a record alone, as other producers send
    assert impression_records(message + b"\n\n") == [RECORD, other]
    assert impression_records(None) == [None]
    assert impression_records(b"") == [b""]  # a message with no record: one bad record
    with pytest.raises(BadRecord, match="not_json"):
        impressions(impression_records(b"")[0])


def _with(**changes: object) -> bytes:
    record = json.loads(RECORD)
    record.update(changes)
    return json.dumps(record).encode()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (None, "empty"),
        (b"\xff\x00", "not_json"),
        (b"[1, 2]", "not_object"),
        (_with(rid="a b"), "bad_request_id"),
        (_with(t="now"), "bad_time"),
        (_with(t=float("nan")), "bad_time"),  # NaN: Python reads it, a time it is not
        (_with(v=-1), "bad_version"),
        (_with(slots=[]), "bad_slots"),
        (_with(s=[0.5, 1.5]), "bad_score"),
        (_with(s=[0.5]), "bad_features"),  # 1 score, 2 instances
        (_with(f="not base64!"), "bad_features"),
        (_with(f=base64.b64encode(b"1234567").decode()), "bad_features"),  # not 8-byte values
        (_with(k=base64.b64encode((9).to_bytes(2, "little") * 4).decode()), "bad_features"),
    ],
)
def test_malformed_records_are_refused_with_a_reason(data: bytes | None, reason: str):
    with pytest.raises(BadRecord) as err:
        impressions(data)
    assert err.value.reason == reason


def test_clicks():
    assert parse_click(Click("r-1", 3, 1.7e9).to_bytes()) == Click("r-1", 3, 1.7e9)
    with pytest.raises(BadRecord, match="bad_instance"):
        parse_click(b'{"rid": "r", "i": true, "t": 1.0}')


def test_partitions_of_n_minutes_in_utc():
    assert partition_of(1_700_000_000, 5) == "20231114/2210"  # 22:13:20 UTC
    assert partition_of(1_700_000_000, 60) == "20231114/22"
    assert next_partition("20231231/2355", 5) == "20240101/0000"
    assert parse_partition("20231114/22", 15) == parse_partition("20231114/2200", 15)
    with pytest.raises(ValueError, match="not the start of a 15-minute partition"):
        parse_partition("20231114/2210", 15)


def test_freshness_is_a_partitions_close_to_the_first_version_served_that_holds_it():
    closed = {"20231114/2200": 1000.0, "20231114/2205": 1300.0, "20231114/2210": 1600.0}
    trained = {
        4: ["20231114/2200"],
        5: ["20231114/2205"],
        6: ["20231114/2205"],
        7: ["20231114/2210"],
    }
    # Version 5 was skipped by cube (6 came first); 7 is not served yet.
    switched = {3: 900.0, 4: 1040.5, 6: 1390.0}
    assert freshness(closed, trained, switched) == [
        {"partition": "20231114/2200", "version": 4, "served_version": 4, "seconds": 40.5},
        {"partition": "20231114/2205", "version": 5, "served_version": 6, "seconds": 90.0},
    ]
    assert freshness(closed, {}, switched) == []


def test_kafka_client_settings_name_what_is_missing():
    assert kafka_client_config({"KAFKA_BOOTSTRAP_SERVERS": "k:9092"}) == {
        "bootstrap.servers": "k:9092", "security.protocol": "PLAINTEXT",
    }  # fmt: skip
    with pytest.raises(
        ValueError,
        match=r"KAFKA_SASL_PASSWORD \(or KAFKA_SASL_PASSWORD_FILE\) is required with SASL_SSL",
    ):
        kafka_client_config({
            "KAFKA_BOOTSTRAP_SERVERS": "k:9096", "KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "KAFKA_SASL_USERNAME": "u",
        })  # fmt: skip
