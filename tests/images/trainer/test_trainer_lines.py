"""ElasticCTR line parsing, the dataset pipe command and its per-file report."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from elasticctr_trainer.lines import BadLine, LineParser, multislot_line
from elasticctr_trainer.pipe import convert

from tests.images.trainer.trainertest import trainer_env

SLOTS = [101, 102, 103]


def parser(sparse_dim: int = 1000) -> LineParser:
    return LineParser(SLOTS, sparse_dim)


def test_feasigns_map_into_sparse_dim_and_empty_slots_get_padding():
    example = parser().parse("3 1 1005:101 7:101 18446744073709551615:103")
    assert (example.show, example.click, example.label) == (3, 1, 1)
    assert example.keys == [[5, 7], [0], [18446744073709551615 % 1000]]


def test_multislot_line_is_label_show_click_then_slots():
    example = parser().parse("2 0 1005:101 7:102 8:103")
    assert multislot_line(example) == "1 0 1 2 1 0 1 5 1 7 1 8"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("1", "missing show/click"),
        ("1 x 5:101", "non-integer show/click"),
        ("1 2 5:101", "show/click out of range"),
        ("-1 0 5:101", "show/click out of range"),
        ("1 0", "no feasigns"),
        ("1 0 5-101", "feasign without slot"),
        ("1 0 abc:101", "non-integer feasign or slot"),
        ("1 0 5:1x", "non-integer feasign or slot"),
        ("1 0 18446744073709551616:101", "feasign out of uint64 range"),
        ("1 0 -5:101", "feasign out of uint64 range"),
        ("1 0 5:999", "unknown slot"),
    ],
)
def test_malformed_lines_name_their_reason(line, reason):
    with pytest.raises(BadLine) as err:
        parser().parse(line)
    assert err.value.reason == reason


def test_convert_skips_bad_lines_and_counts_them():
    text = "1 0 5:101\n1 x 5:101\n\n1 1 6:102\n1 0 5:999\n"
    out = io.StringIO()
    report = convert(io.StringIO(text), parser(), out)
    assert out.getvalue().splitlines() == ["1 0 1 1 1 0 1 5 1 0 1 0", "1 1 1 1 1 1 1 0 1 6 1 0"]
    assert report["lines"] == 4 and report["bad"] == 2
    assert report["reasons"] == {"non-integer show/click": 1, "unknown slot": 1}
    assert [n for n, _ in report["first_bad"]] == [2, 5]


def test_pipe_command_names_the_file_it_reads(tmp_path):
    """Paddle runs the pipe as `(cmd) < file`: the report names the data file."""
    (tmp_path / "slot.conf").write_text("101\n102\n103\n")
    data = tmp_path / "part-00000"
    data.write_text("1 0 5:101\nbroken\n")
    reports = tmp_path / "reports"
    command = [
        sys.executable, "-m", "elasticctr_trainer.pipe", "--slot-conf",
        str(tmp_path / "slot.conf"), "--sparse-dim", "1000", "--report-dir", str(reports),
    ]  # fmt: skip
    with open(data, "rb") as stdin:
        out = subprocess.run(command, stdin=stdin, capture_output=True, env=trainer_env())
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode() == "1 0 1 1 1 0 1 5 1 0 1 0\n"
    (report_file,) = reports.glob("*.json")
    report = json.loads(report_file.read_text())
    assert report["path"] == str(data) and report["bad"] == 1 and report["lines"] == 2
