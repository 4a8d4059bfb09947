"""slot.conf parsing and its error messages."""

from __future__ import annotations

import pytest
from elasticctr_common.slotconf import SlotConfError, parse_slot_conf, read_slot_conf


def test_slot_ids_keep_file_order():
    assert parse_slot_conf("6048\n6002\n6145\n") == [6048, 6002, 6145]


def test_blank_lines_comments_and_spaces_are_ignored():
    text = "# ElasticCTR slots\n\n  6048  \n6002 # user age\n\t\n0\n"
    assert parse_slot_conf(text) == [6048, 6002, 0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\nabc\n", "slot.conf:2: slot id must be an integer, got 'abc'"),
        ("1\n2.5\n", "slot.conf:2: slot id must be an integer, got '2.5'"),
        ("-3\n", "slot.conf:1: slot id must be >= 0, got -3"),
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
        "conf/slot.txt:1: slot id must be an integer, got 'x'",
        "conf/slot.txt:3: slot id 1 repeats line 2",
        "conf/slot.txt:4: slot id must be >= 0, got -2",
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
