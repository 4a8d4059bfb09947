"""ElasticCTR line parsing, the dataset pipe command and its per-file report: bad lines
are counted, compressed files are read as their text, a file that is not text (or that
the pipe never reported on) fails."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from elasticctr_common.crosses import crossed_feasign, pair_seed
from elasticctr_common.datafiles import NOT_READ
from elasticctr_common.storage import open_store
from elasticctr_trainer.lines import MAX_SHOW, BadLine, LineParser, multislot_line
from elasticctr_trainer.pipe import convert
from elasticctr_trainer.staging import NO_REPORT, collect_reports, stage

from tests.support.compressors import compress
from tests.support.trainer import native_pipe_bin, trainer_env

SLOTS = [101, 102, 103]


def parser(sparse_dim: int = 1000) -> LineParser:
    return LineParser(SLOTS, sparse_dim)


def test_feasigns_map_into_sparse_dim_and_empty_slots_get_padding():
    example = parser().parse("3 1 1005:101 7:101 18446744073709551615:103")
    assert (example.show, example.click, example.label) == (3, 1, 1)
    assert example.keys == [[5, 7], [0], [18446744073709551615 % 1000]]


def test_a_line_may_come_with_its_line_end():
    for end in ("\n", "\r\n"):
        assert parser().parse(f"3 1 1005:101{end}").keys == [[5], [0], [0]]
    with pytest.raises(BadLine, match="control character"):
        parser().parse("3 1 1005:101\r")


def test_multislot_line_is_label_show_click_then_slots():
    example = parser().parse("2 0 1005:101 7:102 8:103")
    assert multislot_line(example) == "1 0 1 2 1 0 1 5 1 7 1 8"


def test_crosses_are_inputs_after_the_slots():
    crossing = LineParser(SLOTS, 1000, crosses=[[103, 101], [101, 102]])
    example = crossing.parse("1 1 1005:101 2005:101 3000:101 8:103")
    seed = pair_seed(103, 101)
    # 3000 is slot 101's padding key: no id to cross; slot 102 is empty: its cross is too.
    expected = [crossed_feasign(seed, 8, x) % 1000 for x in (1005, 2005)]
    assert example.keys == [[5, 5, 0], [0], [8], [k for k in expected if k] or [0], [0]]
    line = multislot_line(example)
    assert line.endswith(f" 1 8 {len(example.keys[3])} {' '.join(map(str, example.keys[3]))} 1 0")


def test_a_cross_of_slots_not_in_slot_conf_is_refused():
    with pytest.raises(ValueError, match=r"slot 104 is not in slot\.conf"):
        LineParser(SLOTS, 1000, crosses=[[101, 104]])


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
        # An example is at least one impression: the CTR accessor divides by show.
        ("0 0 7:101", "zero show"),
        ("0 1 7:101", "zero show"),
        (f"{MAX_SHOW + 1} 0 7:101", "show/click out of range"),
        ("1 0 5:101\r7:102", "control character"),  # a lone CR inside a line
        ("1 0 5:101\x0b7:102", "control character"),
        ("1 0 5:101 \u0667:102", "non-ASCII character"),  # an Arabic-Indic digit
        ("1_0 0 5:101", "non-integer show/click"),
        ("+1 0 5:101", "non-integer show/click"),
        ("1 0 5:1_01", "non-integer feasign or slot"),
    ],
)
def test_malformed_lines_name_their_reason(line, reason):
    with pytest.raises(BadLine) as err:
        parser().parse(line)
    assert err.value.reason == reason


def test_convert_skips_bad_lines_and_counts_them():
    text = b"1 0 5:101\n1 x 5:101\n\n1 1 6:102\n1 0 5:999\n"
    out = io.StringIO()
    report = convert(io.BytesIO(text), parser(), out)
    assert out.getvalue().splitlines() == ["1 0 1 1 1 0 1 5 1 0 1 0", "1 1 1 1 1 1 1 0 1 6 1 0"]
    assert report["lines"] == 4 and report["bad"] == 2 and report["failed"] is None
    assert report["reasons"] == {"non-integer show/click": 1, "unknown slot": 1}
    assert [n for n, _ in report["first_bad"]] == [2, 5]


def test_only_a_newline_ends_a_line():
    """A lone CR neither splits a line in two (Python's universal newlines would) nor
    passes as a separator; CRLF line ends are fine."""
    text = b"1 0 5:101\r\n1 0 5:101\r6:102\n2 1 7:103\r\n"
    out = io.StringIO()
    report = convert(io.BytesIO(text), parser(), out)
    assert out.getvalue().splitlines() == ["1 0 1 1 1 0 1 5 1 0 1 0", "1 1 1 2 1 1 1 0 1 0 1 7"]
    assert report["lines"] == 3 and report["reasons"] == {"control character": 1}
    assert report["first_bad"][0][0] == 2


def test_show_zero_lines_are_counted_not_trained():
    out = io.StringIO()
    report = convert(io.BytesIO(b"0 0 7:101\n1 0 7:101\n0 0 8:102\n"), parser(), out)
    assert out.getvalue().splitlines() == ["1 0 1 1 1 0 1 7 1 0 1 0"]
    assert report["reasons"] == {"zero show": 2} and report["failed"] is None


@pytest.mark.parametrize(
    ("data", "failed"),
    [
        (b"PK\x03\x04\x14\x00rest", f"a zip archive: {NOT_READ}"),
        (gzip.compress(b"1 0 5:101\n")[:-3], "gzip: truncated or corrupt data after line 1"),
        (b"1 0 5:101\n1 0 \xff\xfe:101\n1 0 5:101\n", "not UTF-8 text at line 2"),
        (b"1 0 5:101\n1 0 5\x00:101\n", "binary data (a NUL byte) at line 2"),
    ],
)
def test_a_file_that_is_not_text_fails_instead_of_counting_bad_lines(data, failed):
    out = io.StringIO()
    report = convert(io.BytesIO(data), parser(), out)
    assert report["failed"] == failed
    assert out.getvalue().count("\n") <= 1  # nothing after the first sign of it


def test_a_staged_file_without_a_report_is_failed(tmp_path):
    """A pipe that was killed (or never ran) writes no report: its file is not silently
    left out of the pass's accounting."""
    hour = tmp_path / "data" / "20191221" / "00"
    hour.mkdir(parents=True)
    for name in ("part-00000", "part-00001"):
        (hour / name).write_text("1 0 5:101\n")
    data = open_store(f"file://{tmp_path}/data")
    staged = stage(data, ["20191221/00/part-00000", "20191221/00/part-00001"], str(tmp_path / "s"))
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "a.json").write_text(json.dumps(
        {"path": str(hour / "part-00000"), "lines": 1, "bad": 0, "reasons": {}, "first_bad": [],
         "failed": None}
    ))  # fmt: skip
    by_file = {r["file"]: r for r in collect_reports(str(reports), staged)}
    assert by_file[data.uri("20191221/00/part-00000")]["failed"] is None
    assert by_file[data.uri("20191221/00/part-00001")]["failed"] == NO_REPORT


def test_a_gz_file_reaches_the_pipe_as_it_is(tmp_path):
    """Paddle would put zcat in front of the pipe for a `.gz` path (the report could then
    not name the file, and zcat's errors go nowhere): it is staged under another name, and
    the pipe decompresses it itself."""
    hour = tmp_path / "data" / "20191221" / "00"
    hour.mkdir(parents=True)
    (hour / "part-00000.gz").write_bytes(gzip.compress(b"1 0 5:101\n"))
    data = open_store(f"file://{tmp_path}/data")
    staged = stage(data, ["20191221/00/part-00000.gz"], str(tmp_path / "s"))
    (local,) = staged.local_paths
    assert not local.endswith(".gz")
    assert Path(local).read_bytes() == (hour / "part-00000.gz").read_bytes()
    assert staged.uri_of[str(hour / "part-00000.gz")] == data.uri("20191221/00/part-00000.gz")


def run_pipe(
    slot_conf: Path, data: Path, reports: Path, native: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The trainer's pipe as Paddle runs it, `(cmd) < file`, for slot_conf and sparse_dim
    1000: the Python one, or the native one at `native`."""
    if native:
        slots = ",".join(slot_conf.read_text().split())
        command = [native, "--slots", slots]
    else:
        command = [sys.executable, "-m", "elasticctr_trainer.pipe", "--slot-conf", str(slot_conf)]
    command += ["--sparse-dim", "1000", "--report-dir", str(reports)]
    with open(data, "rb") as stdin:
        return subprocess.run(command, stdin=stdin, capture_output=True, env=trainer_env())


def test_pipe_command_names_the_file_it_reads(tmp_path):
    """Paddle runs the pipe as `(cmd) < file`: the report names the data file."""
    (tmp_path / "slot.conf").write_text("101\n102\n103\n")
    data = tmp_path / "part-00000"
    data.write_text("1 0 5:101\nbroken\n")
    reports = tmp_path / "reports"
    out = run_pipe(tmp_path / "slot.conf", data, reports)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.decode() == "1 0 1 1 1 0 1 5 1 0 1 0\n"
    (report_file,) = reports.glob("*.json")
    report = json.loads(report_file.read_text())
    assert report["path"] == str(data) and report["bad"] == 1 and report["lines"] == 2
    assert report["failed"] is None


def test_pipe_command_reads_a_gzip_file(tmp_path):
    """An hour file of 20,000 examples written by gzip, once read as 0 lines and before
    that as 9,168 bad ones: both pipes read it as its 20,000 examples."""
    (tmp_path / "slot.conf").write_text("101\n102\n103\n")
    data = tmp_path / "part-00000"
    text = "".join(f"{1 + i % 5} {i % 2} {i}:101 {7 * i}:103\n" for i in range(20_000))
    data.write_bytes(compress("gzip", text.encode()))
    for pipe in ("python", "native"):
        reports = tmp_path / f"reports-{pipe}"
        out = run_pipe(
            tmp_path / "slot.conf", data, reports, native_pipe_bin() if pipe == "native" else None
        )
        assert out.returncode == 0, out.stderr.decode()
        (report_file,) = reports.glob("*.json")
        report = json.loads(report_file.read_text())
        assert (report["lines"], report["bad"], report["failed"]) == (20_000, 0, None), pipe
        converted = out.stdout.decode().splitlines()
        assert len(converted) == 20_000 and converted[-1] == "1 1 1 5 1 1 1 999 1 0 1 993"


def test_pipe_command_that_fails_still_reports(tmp_path):
    reports = tmp_path / "reports"
    command = [
        sys.executable, "-m", "elasticctr_trainer.pipe", "--slot-conf",
        str(tmp_path / "missing.conf"), "--sparse-dim", "1000", "--report-dir", str(reports),
    ]  # fmt: skip
    out = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, env=trainer_env())
    assert out.returncode != 0
    (report_file,) = reports.glob("*.json")
    assert json.loads(report_file.read_text())["failed"].startswith("the pipe command failed:")
