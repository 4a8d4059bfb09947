"""The feedback loop's contract (docs/feedback.md): what serving writes to the stream, what
clicks look like, how the joiner lays out its time partitions, and the environment that
names the stream. Serving, the joiner, the simulator, the client and the Pulumi program
use these names and these parsers; tests/infra/test_pod_contract.py checks both sides.

A click is one Kafka message, a JSON object, keyed by the request id. An impressions
message (no key) holds the records of one or more requests: serving sends what its
requests logged in the last few milliseconds as one message, as librdkafka's `produce`
and delivery report cost its event loop more CPU than the record itself
(docs/feedback.md). Two layouts, told apart by the first byte:

- framed (what serving writes, `impressions_message()`): `FRAMED_MESSAGE`, then each
  record as its length (uint32 little-endian) and its bytes;
- JSON Lines: one JSON record a line (a message of one record without a newline too), for
  producers of their own.

`impression_records()` splits either into records. A record is the impressions of one
request, one per instance, written whole or not at all, in either encoding:

- JSON: {"rid": str, "t": float, "v": int, "slots": [int], "s": [float|null], "f": str,
  "k": str, "c": str}: request id, serving's time (Unix seconds), model version, the
  model's slot ids (input order), each instance's score (the click probability; null
  when it failed), and the features as the trainer reads them, packed: "f" every feasign
  as sent (uint64 little-endian, base64), "k" the index in "slots" of each one's slot
  (uint16 LE, base64), "c" how many each instance has (uint32 LE, base64), instances in
  order.
- packed (what serving writes, `packed_impressions_record()`): `PACKED_RECORD`, the head
  (the JSON object above without "f", "k", "c") as its length (uint32 LE) and its compact
  JSON, the number of feasigns n (uint32 LE), then the three arrays as raw bytes: n
  feasigns (uint64 LE), n slot indices (uint16 LE), one count per score (uint32 LE).
  Nothing follows.

Arrays, not `<feasign>:<slot>` text, because serving builds the record on its request
path (docs/feedback.md); raw rather than base64 in serving's own records: a third fewer
bytes for the broker, and no encoding on the event loop. `impressions()` unpacks a
record into `Impression`s, whose `features` are the `<feasign>:<slot> ...` part of a
training line.
- click: {"rid": str, "i": int, "t": float}: request id, instance index, click time.

Partitions: `<dataset>/YYYYMMDD/HH` with 60-minute partitions (the hour directories the
trainer always read), `<dataset>/YYYYMMDD/HHMM` with N-minute ones (N divides 60), in UTC,
named by their start; ready once their `donefile` exists.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from . import secrets
from .contract import DONEFILE, HOUR_FORMAT

IMPRESSIONS_TOPIC: Final = "elasticctr-impressions"
CLICKS_TOPIC: Final = "elasticctr-clicks"
KAFKA_PORT: Final = 9092  # clients (PLAINTEXT in cluster)
KAFKA_CONTROLLER_PORT: Final = 9093  # KRaft controller, the broker's own pod only
JOINER_PORT: Final = 8012  # the joiner's /status, /metrics, /healthz
REQUEST_ID_HEADER: Final = "X-Request-Id"
CLICK_PATH: Final = "/click"
MINUTE_FORMAT: Final = "%Y%m%d/%H%M"
# Partition lengths a day divides into evenly, so every hour starts a partition.
PARTITION_MINUTES: Final = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 60)
MAX_REQUEST_ID = 64  # characters
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
# An impressions message in frames: this, then each record's length (uint32 LE) and bytes.
# Its NUL starts no JSON record.
FRAMED_MESSAGE: Final = b"\x00ECI"
PACKED_RECORD: Final = b"\x01"  # a packed record's first byte ("{" a JSON record's)
FRAME_BYTES: Final = 4  # a record's length before it, in a framed message
RECORD_SEPARATOR: Final = b"\n"  # between the records of a JSON Lines message


class FeedbackEnv:
    """Environment of serving (with feedback on) and of the joiner."""

    BOOTSTRAP: Final = "KAFKA_BOOTSTRAP_SERVERS"
    SECURITY_PROTOCOL: Final = "KAFKA_SECURITY_PROTOCOL"  # PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    SASL_MECHANISM: Final = "KAFKA_SASL_MECHANISM"  # PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    SASL_USERNAME: Final = "KAFKA_SASL_USERNAME"  # from a Secret
    SASL_PASSWORD: Final = "KAFKA_SASL_PASSWORD"  # from a Secret
    SSL_CA_LOCATION: Final = "KAFKA_SSL_CA_LOCATION"  # a mounted CA bundle (empty: system's)
    IMPRESSIONS_TOPIC: Final = "FEEDBACK_IMPRESSIONS_TOPIC"
    CLICKS_TOPIC: Final = "FEEDBACK_CLICKS_TOPIC"
    SAMPLE_RATE: Final = "FEEDBACK_SAMPLE_RATE"  # serving: share of requests logged
    BUFFER_RECORDS: Final = "FEEDBACK_BUFFER_RECORDS"  # serving: records held while undelivered
    COMPRESSION: Final = "FEEDBACK_COMPRESSION"  # serving: its producer's, COMPRESSIONS
    DATASET_URI: Final = "FEEDBACK_DATASET_URI"  # joiner: where partitions are written
    JOIN_WINDOW_SECONDS: Final = "FEEDBACK_JOIN_WINDOW_SECONDS"  # joiner
    PARTITION_MINUTES: Final = "FEEDBACK_PARTITION_MINUTES"  # joiner


SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# librdkafka's compression.type values (the broker stores what the producer sent).
COMPRESSIONS: Final = ("none", "lz4", "zstd", "gzip", "snappy")


class FeedbackConfigError(ValueError):
    """The feedback environment is incomplete or wrong; the message names the variable."""


def kafka_client_config(env: Mapping[str, str]) -> dict[str, str]:
    """librdkafka's settings for a client of the stack's Kafka, from FeedbackEnv."""
    servers = env.get(FeedbackEnv.BOOTSTRAP, "").strip()
    if not servers:
        raise FeedbackConfigError(f"{FeedbackEnv.BOOTSTRAP} is not set (host:port,...)")
    protocol = env.get(FeedbackEnv.SECURITY_PROTOCOL, "") or "PLAINTEXT"
    if protocol not in SECURITY_PROTOCOLS:
        raise FeedbackConfigError(
            f"{FeedbackEnv.SECURITY_PROTOCOL} must be one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"got {protocol!r}"
        )
    config = {"bootstrap.servers": servers, "security.protocol": protocol}
    if protocol.startswith("SASL"):
        mechanism = env.get(FeedbackEnv.SASL_MECHANISM, "") or "PLAIN"
        if mechanism not in SASL_MECHANISMS:
            raise FeedbackConfigError(
                f"{FeedbackEnv.SASL_MECHANISM} must be one of {', '.join(SASL_MECHANISMS)}, "
                f"got {mechanism!r}"
            )
        config["sasl.mechanism"] = mechanism
        for key, option in (
            (FeedbackEnv.SASL_USERNAME, "sasl.username"),
            (FeedbackEnv.SASL_PASSWORD, "sasl.password"),
        ):
            try:
                config[option] = secrets.read(key, env)
            except secrets.SecretError as error:
                raise FeedbackConfigError(str(error)) from None
            if not config[option]:
                raise FeedbackConfigError(
                    f"{key} (or {secrets.file_variable(key)}) is required with {protocol}"
                )
    if protocol.endswith("SSL") and env.get(FeedbackEnv.SSL_CA_LOCATION):
        config["ssl.ca.location"] = env[FeedbackEnv.SSL_CA_LOCATION]
    return config


def compression_type(env: Mapping[str, str]) -> str:
    """Serving's producer compression from FeedbackEnv (default "none")."""
    value = env.get(FeedbackEnv.COMPRESSION, "") or "none"
    if value not in COMPRESSIONS:
        raise FeedbackConfigError(
            f"{FeedbackEnv.COMPRESSION} must be one of {', '.join(COMPRESSIONS)}, got {value!r}"
        )
    return value


def topics(env: Mapping[str, str]) -> tuple[str, str]:
    """(impressions, clicks) topic names: the environment's, else the defaults."""
    return (
        env.get(FeedbackEnv.IMPRESSIONS_TOPIC) or IMPRESSIONS_TOPIC,
        env.get(FeedbackEnv.CLICKS_TOPIC) or CLICKS_TOPIC,
    )


# Records ----------------------------------------------------------------------------------


class BadRecord(ValueError):
    """A stream record that is not an impression or click; `reason` is countable."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def valid_request_id(text: object) -> bool:
    return isinstance(text, str) and _REQUEST_ID.fullmatch(text) is not None


@dataclass(frozen=True)
class Impression:
    """One instance answered (an example once the joiner labels it)."""

    request_id: str
    index: int
    time: float
    version: int
    score: float | None
    features: str  # "<feasign>:<slot> ..." as in a training line

    @property
    def key(self) -> tuple[str, int]:
        return (self.request_id, self.index)


def impressions_head(
    request_id: str,
    time: float,
    version: int,
    slots: list[int] | tuple[int, ...],
    scores: list[float | None],
) -> dict[str, Any]:
    """A request's record without its arrays (JSON-ready): `packed_impressions_record` or
    `json_impressions_record` adds them."""
    return {
        "rid": request_id,
        "t": time,
        "v": version,
        "slots": list(slots),
        "s": [None if s is None or not math.isfinite(s) else s for s in scores],
    }


def packed_impressions_record(
    head: bytes, feasigns: bytes, slot_indices: bytes, counts: bytes
) -> bytes:
    """The impressions of one request as a packed record: `head`, the compact JSON of
    `impressions_head` (any encoder's), and the arrays as bytes: uint64 LE feasigns,
    uint16 LE slot indices, uint32 LE counts per instance."""
    if not head.startswith(b"{"):
        raise ValueError(f"head must be a JSON object, got {head[:60]!r}")
    return b"".join(
        (
            PACKED_RECORD, len(head).to_bytes(4, "little"), head,
            (len(feasigns) // 8).to_bytes(4, "little"), feasigns, slot_indices, counts,
        )
    )  # fmt: skip


def json_impressions_record(
    head: bytes, feasigns: bytes, slot_indices: bytes, counts: bytes
) -> bytes:
    """The same as a JSON record: the arrays base64-encoded into `head` (spliced, not
    encoded again with it)."""
    if not head.endswith(b"}"):
        raise ValueError(f"head must be a JSON object, got {head[:60]!r}")
    return b"".join(
        (
            head[:-1], b',"f":"', base64.b64encode(feasigns), b'","k":"',
            base64.b64encode(slot_indices), b'","c":"', base64.b64encode(counts), b'"}',
        )
    )  # fmt: skip


def pack_impressions(
    request_id: str,
    time: float,
    version: int,
    slots: list[int],
    scores: list[float | None],
    features: list[list[tuple[int, int]]],
    *,
    packed: bool = False,
) -> bytes:
    """A request's record from (feasign, slot id) pairs per instance, JSON unless `packed`:
    for producers and tests (serving packs its arrays directly)."""
    feasigns = b"".join(f.to_bytes(8, "little") for inst in features for f, _ in inst)
    index = {s: i for i, s in enumerate(slots)}
    kinds = b"".join(index[s].to_bytes(2, "little") for inst in features for _, s in inst)
    counts = b"".join(len(inst).to_bytes(4, "little") for inst in features)
    head = impressions_head(request_id, time, version, slots, scores)
    record = packed_impressions_record if packed else json_impressions_record
    return record(json.dumps(head, separators=(",", ":")).encode(), feasigns, kinds, counts)


@dataclass(frozen=True)
class Click:
    request_id: str
    index: int
    time: float

    @property
    def key(self) -> tuple[str, int]:
        return (self.request_id, self.index)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"rid": self.request_id, "i": self.index, "t": self.time}, separators=(",", ":")
        ).encode()


def _object(data: bytes | None) -> dict[str, Any]:
    if data is None:
        raise BadRecord("empty", "no value")
    try:
        record = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise BadRecord("not_json", repr(data[:60])) from None
    if not isinstance(record, dict):
        raise BadRecord("not_object", repr(data[:60]))
    return record


def _common(record: dict[str, Any]) -> tuple[str, int, float]:
    rid, index, time = record.get("rid"), record.get("i"), record.get("t")
    if not valid_request_id(rid):
        raise BadRecord("bad_request_id", repr(rid)[:80])
    if type(index) is not int or index < 0:
        raise BadRecord("bad_instance", repr(index)[:40])
    if not isinstance(time, int | float) or isinstance(time, bool):
        raise BadRecord("bad_time", repr(time)[:40])
    if not math.isfinite(time) or time <= 0:
        raise BadRecord("bad_time", repr(time)[:40])
    assert isinstance(rid, str) and isinstance(index, int)
    return rid, index, float(time)


_WIDTHS: Final = {8: "Q", 2: "H", 4: "I"}


def _values(data: bytes, key: str, width: int) -> tuple[int, ...]:
    if len(data) % width:
        raise BadRecord("bad_features", f"{key!r}: {len(data)} bytes, not {width}-byte values")
    return struct.unpack(f"<{len(data) // width}{_WIDTHS[width]}", data)


def _unb64(record: dict[str, Any], key: str) -> bytes:
    text = record.get(key)
    if not isinstance(text, str):
        raise BadRecord("bad_features", f"{key!r} is not a base64 string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise BadRecord("bad_features", f"{key!r} is not base64") from None


def _unpack(data: bytes) -> tuple[dict[str, Any], bytes, bytes, bytes]:
    """A packed record's head and its arrays' bytes (feasigns, slot indices, counts)."""
    end = 5 + int.from_bytes(data[1:5], "little")
    if len(data) < 5 or end + 4 > len(data):
        raise BadRecord("bad_frame", f"a packed record of {len(data)} bytes, its head cut off")
    record = _object(data[5:end])
    n = int.from_bytes(data[end : end + 4], "little")
    kinds_at = end + 4 + 8 * n
    counts_at = kinds_at + 2 * n
    if counts_at > len(data):
        raise BadRecord("bad_frame", f"{n} feasigns claimed, {len(data) - end - 4} bytes follow")
    return record, data[end + 4 : kinds_at], data[kinds_at:counts_at], data[counts_at:]


def impression_records(value: bytes | None) -> list[bytes | None]:
    """The records of one impressions message, in order (a JSON Lines message's blank
    lines skipped). What cannot be a record is one bad record: a message with no record,
    a framed message's rest from a frame past its end (given with the framed prefix, which
    `impressions()` refuses as bad_frame)."""
    if value is None:
        return [None]
    if not value.startswith(FRAMED_MESSAGE):
        found: list[bytes | None] = [r for r in value.split(RECORD_SEPARATOR) if r.strip()]
        return found or [value]
    records: list[bytes | None] = []
    at = len(FRAMED_MESSAGE)
    while at < len(value):
        end = at + FRAME_BYTES + int.from_bytes(value[at : at + FRAME_BYTES], "little")
        if at + FRAME_BYTES > len(value) or end > len(value):
            records.append(FRAMED_MESSAGE + value[at:])
            break
        records.append(value[at + FRAME_BYTES : end])
        at = end
    return records or [value]


def impressions_message(records: Sequence[bytes]) -> bytes:
    """Records (serving's packed ones, `pack_impressions`') as one framed message."""
    parts = [FRAMED_MESSAGE]
    for record in records:
        parts += (len(record).to_bytes(FRAME_BYTES, "little"), record)
    return b"".join(parts)


def impressions(data: bytes | None) -> list[Impression]:
    """The impressions of one request's record (JSON or packed), in instance order;
    BadRecord (with a countable reason) if any part of it is wrong: none of it is taken
    then."""
    if data is not None and data.startswith(FRAMED_MESSAGE[:1]):
        raise BadRecord("bad_frame", f"not a whole frame: {data[:60]!r}")
    packed = data is not None and data.startswith(PACKED_RECORD)
    if packed:
        assert data is not None
        record, f, k, c = _unpack(data)
    else:
        record = _object(data)
        f, k, c = b"", b"", b""  # decoded once the head is known good
    rid, _, time = _common({"rid": record.get("rid"), "i": 0, "t": record.get("t")})
    version, slots, scores = record.get("v"), record.get("slots"), record.get("s")
    if type(version) is not int or version < 0:
        raise BadRecord("bad_version", repr(version)[:40])
    if not isinstance(slots, list) or not slots or any(type(s) is not int or s < 0 for s in slots):
        raise BadRecord("bad_slots", repr(slots)[:60])
    if not isinstance(scores, list) or not scores:
        raise BadRecord("bad_score", repr(scores)[:60])
    for score in scores:
        if score is not None and (type(score) not in (int, float) or not 0 <= score <= 1):
            raise BadRecord("bad_score", repr(score)[:40])
    if not packed:
        f, k, c = _unb64(record, "f"), _unb64(record, "k"), _unb64(record, "c")
    feasigns, kinds, counts = _values(f, "f", 8), _values(k, "k", 2), _values(c, "c", 4)
    if len(counts) != len(scores) or sum(counts) != len(feasigns) or len(kinds) != len(feasigns):
        raise BadRecord(
            "bad_features",
            f"{len(scores)} scores, {len(counts)} counts, {len(feasigns)} feasigns, "
            f"{len(kinds)} slot indices",
        )
    if any(k >= len(slots) for k in kinds) or 0 in counts:
        raise BadRecord("bad_features", "a slot index past the slots, or an empty instance")
    names = [f":{s}" for s in slots]
    out = []
    at = 0
    for i, (n, score) in enumerate(zip(counts, scores, strict=True)):
        features = " ".join(f"{feasigns[j]}{names[kinds[j]]}" for j in range(at, at + n))
        at += n
        value = None if score is None else float(score)
        out.append(Impression(rid, i, time, version, value, features))
    return out


def parse_click(data: bytes | None) -> Click:
    return Click(*_common(_object(data)))


# Partitions -------------------------------------------------------------------------------


def check_minutes(minutes: int) -> int:
    if minutes not in PARTITION_MINUTES:
        allowed = ", ".join(map(str, PARTITION_MINUTES))
        raise ValueError(f"partition minutes must divide an hour ({allowed}), got {minutes}")
    return minutes


def partition_format(minutes: int) -> str:
    return HOUR_FORMAT if check_minutes(minutes) == 60 else MINUTE_FORMAT


def format_partition(start: datetime, minutes: int) -> str:
    return start.strftime(partition_format(minutes))


def parse_partition(text: str, minutes: int) -> datetime:
    """A partition's start (naive, UTC) from its name; with N-minute partitions a bare
    YYYYMMDD/HH (a stack's start hour) is the hour's first partition."""
    # By length too: strptime reads "20191221/23" as 02:03 with %H%M.
    for fmt, length in ((partition_format(minutes), 13), (HOUR_FORMAT, 11)):
        if len(text) != (11 if fmt == HOUR_FORMAT else length):
            continue
        try:
            start = datetime.strptime(text, fmt)
        except ValueError:
            continue
        if start.minute % minutes:
            raise ValueError(f"{text!r} is not the start of a {minutes}-minute partition")
        return start
    shape = "YYYYMMDD/HH" if minutes == 60 else "YYYYMMDD/HHMM (or YYYYMMDD/HH)"
    raise ValueError(f"expected {shape}, got {text!r}")


def partition_of(timestamp: float, minutes: int) -> str:
    """The partition holding Unix time `timestamp`."""
    moment = datetime.fromtimestamp(timestamp, UTC).replace(tzinfo=None)
    start = moment.replace(second=0, microsecond=0, minute=moment.minute - moment.minute % minutes)
    return format_partition(start, minutes)


def partition_bounds(name: str, minutes: int) -> tuple[float, float]:
    """[start, end) of a partition as Unix times."""
    start = parse_partition(name, minutes).replace(tzinfo=UTC)
    return start.timestamp(), (start + timedelta(minutes=minutes)).timestamp()


def next_partition(name: str, minutes: int) -> str:
    return format_partition(parse_partition(name, minutes) + timedelta(minutes=minutes), minutes)


def partition_done(name: str) -> str:
    return f"{name}/{DONEFILE}"


def is_partition_name(text: str, minutes: int) -> bool:
    try:
        return format_partition(parse_partition(text, minutes), minutes) == text
    except ValueError:
        return False


def freshness(
    closed_at: Mapping[str, float],
    trained: Mapping[int, Sequence[str]],
    switched_at: Mapping[int, float],
) -> list[dict[str, Any]]:
    """Per partition, seconds from its donefile (`closed_at`, the manifest's) to serving's
    switch to a version trained on it (`trained`: version -> the partitions of its pass;
    `switched_at`: serving's status history). Online training is cumulative, and cube skips
    to the newest version built when versions come faster than it rolls them out, so the
    first version served at or after the first one trained on the partition counts.
    Partitions not trained yet, or whose version is not served yet, are left out."""
    found = []
    for part in sorted(closed_at):
        versions = [v for v, parts in trained.items() if part in parts]
        if not versions:
            continue
        first = min(versions)
        later = [v for v in switched_at if v >= first]
        if not later:
            continue
        served = min(later, key=lambda v: switched_at[v])
        found.append(
            {
                "partition": part,
                "version": first,
                "served_version": served,
                "seconds": round(switched_at[served] - closed_at[part], 1),
            }
        )
    return found
