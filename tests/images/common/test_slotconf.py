"""slot.conf parsing and its error messages."""

from __future__ import annotations

import pytest
from elasticctr_common.slotconf import SlotConfError, parse_slot_conf, read_slot_conf

OUT_OF_RANGE = "slot id must be an integer from 0 to 18446744073709551615, got"


def test_slot_ids_keep_file_order():
    assert parse_slot_conf("6048\n6002\n6145\n") == [6048, 6002, 6145]


def test_the_largest_slot_id_is_the_largest_uint64():
    assert parse_slot_conf(f"0\n{2**64 - 1}\n") == [0, 2**64 - 1]


def test_blank_lines_comments_and_spaces_are_ignored():
    text = "# ElasticCTR slots\n\n  6048  \n6002 # user age\n\t\n0\n"
    assert parse_slot_conf(text) == [6048, 6002, 0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\nabc\n", f"slot.conf:2: {OUT_OF_RANGE} 'abc'"),
        ("1\n2.5\n", f"slot.conf:2: {OUT_OF_RANGE} '2.5'"),
        ("-3\n", f"slot.conf:1: {OUT_OF_RANGE} '-3'"),
        # int() would read these as 1, 10 and 1; no data line spells a slot so.
        ("+1\n", f"slot.conf:1: {OUT_OF_RANGE} '+1'"),
        ("1_0\n", f"slot.conf:1: {OUT_OF_RANGE} '1_0'"),
        ("\u0661\n", f"slot.conf:1: {OUT_OF_RANGE} '\u0661'"),
        ("18446744073709551616\n", f"slot.conf:1: {OUT_OF_RANGE} '18446744073709551616'"),
        ("9" * 5000, f"slot.conf:1: {OUT_OF_RANGE} '{'9' * 30}'... (5000 characters)"),
        ("7\n8\n7\n", "slot.conf:3: slot id 7 repeats line 1"),
        ("", "slot.conf: no slot ids (one integer per line expected)"),
        ("# only comments\n\n", "slot.conf: no slot ids"),
    ],
)
def test_errors_name_the_line(text, message):
    with pytest.raises(SlotConfError) as err:
        parse_slot_conf(text)
    assert message in str(err.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(SlotConfError) as err:
        parse_slot_conf("x\n1\n1\n-2\n", source="conf/slot.txt")
    assert str(err.value).splitlines() == [
        f"conf/slot.txt:1: {OUT_OF_RANGE} 'x'",
        "conf/slot.txt:3: slot id 1 repeats line 2",
        f"conf/slot.txt:4: {OUT_OF_RANGE} '-2'",
    ]


def test_slot_conf_error_is_a_value_error():
    assert issubclass(SlotConfError, ValueError)


def test_read_slot_conf_names_the_file(tmp_path):
    good = tmp_path / "slot.conf"
    good.write_text("1\n2\n", encoding="utf-8")
    assert read_slot_conf(good) == [1, 2]
    bad = tmp_path / "bad.conf"
    bad.write_text("1\nfoo\n", encoding="utf-8")
    with pytest.raises(SlotConfError, match=f"{bad}:2: "):
        read_slot_conf(bad)


def test_read_slot_conf_of_a_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_slot_conf(tmp_path / "absent.conf")


def test_a_bom_is_read_as_the_program_reads_it(tmp_path):
    path = tmp_path / "slot.conf"
    path.write_bytes(b"\xef\xbb\xbf101\n102\n")
    assert read_slot_conf(path) == [101, 102]
