"""One reading of ElasticCTR lines for the trainer and the client, so that a line one
counts as bad cannot crash the other (the client's `predict` once crashed on feasigns the
trainer's parser counts as bad)."""

from __future__ import annotations

import pytest
from elasticctr_client.predict import parse_line
from elasticctr_common.lines import BadLine, DenseFeature, LineFormat, parse_int, split_line
from elasticctr_trainer.lines import LineParser

LINES = [
    ("1 0 5:101 7:102", None),
    ("1 0 \u00b2:101", "non-ASCII character"),  # a digit, but not a decimal one
    ("1 0 \u0661\u0662:101", "non-ASCII character"),  # Arabic-Indic 12
    ("1 0 1_0:101", "non-integer feasign or slot"),
    (f"1 0 {'9' * 5000}:101", "feasign out of uint64 range"),  # int() refuses > 4300 digits
    (f"1 0 {'0' * 5000}7:101", None),  # leading zeros are still 7
    ("1 0 18446744073709551615:101", None),
    ("1 0 18446744073709551616:101", "feasign out of uint64 range"),
    ("1 0 -5:101", "feasign out of uint64 range"),
    (f"{'1' * 5000} 0 5:101", "show/click out of range"),  # beyond float32's integers
    ("+1 0 5:101", "non-integer show/click"),
    ("0 0 5:101", "zero show"),
    ("1 0 5:101\r7:102", "control character"),  # a lone CR does not split the line
    ("\u00b2 0 5:101", "non-ASCII character"),
    ("1 0 5:\u00b9", "non-ASCII character"),
    ("1 0 5", "feasign without slot"),
    ("1 0", "no feasigns"),
    ("x", "missing show/click"),
]


@pytest.mark.parametrize(("line", "reason"), LINES)
def test_trainer_and_client_read_a_line_alike(line: str, reason: str | None) -> None:
    trainer = LineParser([101, 102], 1000)
    client = parse_line(line, 1, {"101", "102"})
    if reason is None:
        example = trainer.parse(line)
        assert not isinstance(client, str)
        flat = sorted(f % 1000 for feasigns in client.slots.values() for f in feasigns)
        assert flat == sorted(k for keys in example.keys for k in keys if k)
    else:
        with pytest.raises(BadLine) as bad:
            trainer.parse(line)
        assert bad.value.reason == reason == client


def test_numbers_are_ascii_decimal_integers() -> None:
    assert parse_int("7") == 7 and parse_int("-0012") == -12
    assert parse_int("9" * 30) > 2**64
    for text in ("", "+", "+7", "1_0", "1.5", " 1", "0x10", "\u00b2"):
        with pytest.raises(ValueError):
            parse_int(text)
    assert split_line("3 1 5:101").label == 1


SLOT_FORMAT = LineFormat("paddlerec", (DenseFeature("dense_feature", 3),))
SLOT_LINES = [
    ("click:1 dense_feature:0.5 dense_feature:0 dense_feature:2e3 101:5 102:7", None),
    ("click:0 dense_feature:.5 101:5 dense_feature:1. dense_feature:-3", None),  # any order
    ("click:0 dense_feature:1 dense_feature:2 101:5", "short dense feature"),
    ("click:0 101:5", "missing dense feature"),
    ("click:0 dense_feature:1 dense_feature:1 dense_feature:1 dense_feature:1", "long dense feature"),
    ("click:0 dense_feature:NaN dense_feature:1 dense_feature:1", "non-numeric dense value"),
    ("click:0 dense_feature:1e39 dense_feature:1 dense_feature:1", "non-finite dense value"),
    ("click:0 dense_feature:1 dense_feature:1 dense_feature:\u00b2", "non-ASCII character"),
    ("dense_feature:1 dense_feature:1 dense_feature:1 101:5", "missing click"),
    ("click:3 dense_feature:1 dense_feature:1 dense_feature:1", "show/click out of range"),
    ("click:0 dense_feature:1 dense_feature:1 dense_feature:1 age:5", "unknown feature name"),
    ("click:0 dense_feature:1 dense_feature:1 dense_feature:1 103:5", "unknown slot"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "reason"), SLOT_LINES)
def test_trainer_and_client_read_a_slot_format_line_alike(line: str, reason: str | None) -> None:
    trainer = LineParser([101, 102], 1000, SLOT_FORMAT)
    client = parse_line(line, 1, {"101", "102"}, SLOT_FORMAT)
    if reason is None:
        example = trainer.parse(line)
        assert not isinstance(client, str) and example.show == 1
        assert [float(v) for v in example.dense] == client.dense["dense_feature"]
        flat = sorted(f % 1000 for feasigns in client.slots.values() for f in feasigns)
        assert flat == sorted(k for keys in example.keys for k in keys if k)
    else:
        with pytest.raises(BadLine) as bad:
            trainer.parse(line)
        if reason == "unknown slot":
            assert bad.value.reason == reason and str(bad.value) == "unknown slot: 103:5"
            assert client == "unknown slot 103"
        else:
            assert bad.value.reason == reason == client


def test_dense_features_need_the_slot_format_and_plain_names() -> None:
    with pytest.raises(ValueError, match="dense features need the paddlerec format"):
        LineFormat("elasticctr", (DenseFeature("d", 1),))
    with pytest.raises(ValueError, match="expected one of elasticctr, paddlerec, got 'csv'"):
        LineFormat("csv")
    for name in ("click", "1d", "a-b", ""):
        with pytest.raises(ValueError, match="dense feature name"):
            LineFormat("paddlerec", (DenseFeature(name, 1),))
    with pytest.raises(ValueError, match="dim must be an integer within"):
        LineFormat("paddlerec", (DenseFeature("d", 0),))
    with pytest.raises(ValueError, match="given twice"):
        LineFormat("paddlerec", (DenseFeature("d", 1), DenseFeature("d", 2)))
