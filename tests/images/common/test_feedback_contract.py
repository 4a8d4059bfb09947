"""The feedback loop's records and partition names (elasticctr_common.feedback): a
request's impressions round-trip to the trainer's `<feasign>:<slot>` text; every
malformed record is refused with a countable reason, never half taken."""

from __future__ import annotations

import base64
import json

import pytest
from elasticctr_common.feedback import (
    FRAMED_MESSAGE,
    BadRecord,
    Click,
    compression_type,
    freshness,
    impression_records,
    impressions,
    impressions_head,
    impressions_message,
    json_impressions_record,
    kafka_client_config,
    next_partition,
    pack_impressions,
    packed_impressions_record,
    parse_click,
    parse_partition,
    partition_of,
)


def _request(packed: bool) -> bytes:
    return pack_impressions(
        "req-1", 1_700_000_000.5, 7, [101, 102, 103], [0.25, None],
        [[(2**64 - 1, 101), (5, 103), (6, 101)], [(0, 102)]], packed=packed,
    )  # fmt: skip


RECORD, PACKED = _request(packed=False), _request(packed=True)


@pytest.mark.parametrize("record", [RECORD, PACKED], ids=["json", "packed"])
def test_a_request_round_trips_to_training_features(record: bytes):
    first, second = impressions(record)
    assert first.key == ("req-1", 0) and second.key == ("req-1", 1)
    assert first.features == "18446744073709551615:101 5:103 6:101"
    assert second.features == "0:102"  # the padding feasign too, as sent
    assert (first.score, second.score, first.version, first.time) == (0.25, None, 7, 1.7e9 + 0.5)


def test_the_arrays_are_spliced_into_the_head_as_base64_fields():
    head = impressions_head("req-3", 1.5, 2, (101, 102), [0.25, float("nan")])
    encoded = json.dumps(head, separators=(",", ":")).encode()
    arrays = (b"\x01" * 16, b"\x00\x00\x01\x00", b"\x01\x00\x00\x00" * 2)
    record = json_impressions_record(encoded, *arrays)
    assert json.loads(record) == {
        "rid": "req-3", "t": 1.5, "v": 2, "slots": [101, 102], "s": [0.25, None],
        "f": base64.b64encode(b"\x01" * 16).decode(), "k": "AAABAA==", "c": "AQAAAAEAAAA=",
    }  # fmt: skip
    packed = packed_impressions_record(encoded, *arrays)
    # The head's length and JSON, the feasigns' count, then the arrays as they are.
    assert packed == b"\x01" + len(encoded).to_bytes(4, "little") + encoded + (
        b"\x02\x00\x00\x00" + b"".join(arrays)
    )
    assert len(packed) < len(record)
    for each in (record, packed):
        assert [m.features for m in impressions(each)] == [
            f"{0x0101010101010101}:101", f"{0x0101010101010101}:102",
        ]  # fmt: skip
    for pack in (json_impressions_record, packed_impressions_record):
        with pytest.raises(ValueError, match="must be a JSON object"):
            pack(b"[1]", b"", b"", b"")


def test_a_framed_message_holds_records_of_either_encoding():
    other = pack_impressions("req-2", 1.7e9, 7, [101], [0.5], [[(9, 101)]])
    message = impressions_message([PACKED, other, PACKED])
    assert message.startswith(FRAMED_MESSAGE)
    assert len(message) == len(FRAMED_MESSAGE) + 3 * 4 + 2 * len(PACKED) + len(other)
    assert impression_records(message) == [PACKED, other, PACKED]
    assert impression_records(impressions_message([])) == [FRAMED_MESSAGE]  # no record: bad


def test_a_json_lines_message_holds_one_or_more_records_one_a_line():
    other = pack_impressions("req-2", 1.7e9, 7, [101], [0.5], [[(9, 101)]])
    message = RECORD + b"\n" + other
    assert impression_records(message) == [RECORD, other]
    assert impression_records(RECORD) == [RECORD]  # a record alone, as other producers send
    assert impression_records(message + b"\n\n") == [RECORD, other]
    assert impression_records(None) == [None]
    assert impression_records(b"") == [b""]  # a message with no record: one bad record
    with pytest.raises(BadRecord, match="not_json"):
        impressions(impression_records(b"")[0])


@pytest.mark.parametrize(
    "cut",
    [
        lambda m: m[:-1],  # the last frame one byte short
        lambda m: m[: len(FRAMED_MESSAGE) + 2],  # a length cut in two
        lambda m: m + b"\xff\xff\xff\x7f{}",  # a length past the end
    ],
    ids=["short-frame", "cut-length", "long-length"],
)
def test_a_broken_frame_is_one_bad_record_after_the_good_ones(cut):
    whole = impressions_message([PACKED, PACKED])
    records = impression_records(cut(whole))
    good = [r for r in records if r == PACKED]
    assert len(records) == len(good) + 1 and records[: len(good)] == good
    with pytest.raises(BadRecord) as err:
        impressions(records[-1])
    assert err.value.reason == "bad_frame"


def _packed(head: bytes, n: int, rest: bytes) -> bytes:
    return b"\x01" + len(head).to_bytes(4, "little") + head + n.to_bytes(4, "little") + rest


HEAD = json.dumps(impressions_head("req-4", 1.7e9, 1, [101], [0.5])).encode()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x01\x00", "bad_frame"),  # no head length
        (b"\x01\xff\x00\x00\x00{}", "bad_frame"),  # a head past the end
        (_packed(HEAD, 3, b"\x00" * 8), "bad_frame"),  # 3 feasigns claimed, 1 sent
        (_packed(b"{oops", 1, b"\x00" * 14), "not_json"),
        (_packed(HEAD, 1, b"\x00" * 13), "bad_features"),  # a count of 3 bytes
        (_packed(HEAD, 1, b"\x00" * 10 + (2).to_bytes(4, "little")), "bad_features"),
        (_packed(HEAD, 1, b"\x00" * 8 + b"\x05\x00" + b"\x01\x00\x00\x00"), "bad_features"),
        (_packed(HEAD, 1, b"\x00" * 8 + b"\x00\x00" + b"\x01\x00\x00\x00"), None),  # good
    ],
)
def test_malformed_packed_records_are_refused_with_a_reason(data: bytes, reason: str | None):
    if reason is None:
        assert [m.features for m in impressions(data)] == ["0:101"]
        return
    with pytest.raises(BadRecord) as err:
        impressions(data)
    assert err.value.reason == reason


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


def test_serving_compression_is_one_librdkafka_knows():
    assert compression_type({}) == "none"
    assert compression_type({"FEEDBACK_COMPRESSION": "lz4"}) == "lz4"
    with pytest.raises(ValueError, match=r"FEEDBACK_COMPRESSION must be one of none, lz4, "):
        compression_type({"FEEDBACK_COMPRESSION": "brotli"})
