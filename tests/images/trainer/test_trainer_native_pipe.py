"""The native pipe (images/trainer/pipe, what the image runs) against the Python pipe (its
reference): on the same files, byte for byte the same MultiSlot output and the same
report, for good lines, every kind of bad one, random hostile ones, files that are not
text, and compressed files (each compression, concatenated streams, truncated): written by
the real tools. The Rust crate's own tests (`cargo test`) check its parts."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from elasticctr_common.trainer_json import load_config
from elasticctr_trainer.pipe import NATIVE_PIPE_ENV, build_native_pipe
from elasticctr_trainer.trainer import pipe_command

from tests.support.compressors import READ, compress, concatenated
from tests.support.trainer import trainer_env, write_config

SLOTS = [101, 102, 103, 7]
SPARSE_DIM = 1000

GOOD = [
    "1 0 1005:101 7:102", "3 1 18446744073709551615:103 5:101 5:101", "2\t0  9:7\t",
    "1 -0 5:101", f"1 0 {'0' * 30}5:101",  # -0 and leading zeros are numbers
]  # fmt: skip
BAD = [
    "1", "1 x 5:101", "1 2 5:101", "-1 0 5:101", "1 0", "1 0 5-101", "1 0 abc:101",
    "1 0 5:1x", "1 0 18446744073709551616:101", "1 0 -5:101", "1 0 5:999", "0 0 7:101",
    "0 1 7:101", "16777217 0 7:101", "1 0 5:101\r7:102", "1 0 5:101\x0b7:102",
    "1 0 5:101 \u0667:102", "1_0 0 5:101", "+1 0 5:101", "1 0 5:1_01", "1 0 :101",
    "-0 0 5:101", "1 0 5:999 x:101", "1 0 5::101", "1 0 5:101:102",
    f"1 0 5:{'9' * 25}", f"1 0 5:-{'9' * 25}", "é 0 5:101",
    "1 0 5:101\x7f", "1 0 'a\"b\\:101\x01", "1 0 'x':101\x1f", f"1 {'2' * 30} 5:101",
    "1 0 " + "5:101 " * 40 + "x" * 200,
]  # fmt: skip
PIECES = [
    "0", "1", "7", "101", "102", "103", "999", "-", "+", "_", ":", ":", " ", " ", " ", "\t",
    "\r", "\x0b", "\x0c", "\x1c", "\x7f", "é", "\u0667", "²", "'", '"', "\\", "18446744073709551615",
    "18446744073709551616", "00000000000000000000042", "9" * 21,
]  # fmt: skip


def random_line(rng: random.Random) -> str:
    if rng.random() < 0.4:  # mostly well-formed, with one piece changed
        show = rng.randint(1, 5)
        tokens = [f"{rng.randint(0, 2**64 - 1)}:{rng.choice(SLOTS)}" for _ in range(6)]
        line = f"{show} {rng.randint(0, show)} {' '.join(tokens)}"
        at = rng.randrange(len(line))
        return line[:at] + rng.choice(PIECES) + line[at + 1 :]
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30)))


@pytest.fixture(scope="module")
def native() -> str:
    return str(build_native_pipe())


def run_both(
    native: str, tmp_path: Path, data: bytes, form: list[str] | None = None
) -> tuple[tuple, tuple]:
    """(stdout, report) of the Python and the native pipe, each run as Paddle runs it;
    `form`: the format's and crosses' arguments (default: ElasticCTR lines, no cross)."""
    (tmp_path / "slot.conf").write_text("".join(f"{s}\n" for s in SLOTS))
    path = tmp_path / "part-00000"
    path.write_bytes(data)
    results: list[tuple[bytes, dict]] = []
    for name, command in (
        ("python", [sys.executable, "-m", "elasticctr_trainer.pipe",
                    "--slot-conf", str(tmp_path / "slot.conf")]),
        ("native", [native, "--slots", ",".join(map(str, SLOTS))]),
    ):  # fmt: skip
        reports = tmp_path / f"reports-{name}"
        shutil.rmtree(reports, ignore_errors=True)  # a test may run both more than once
        command += ["--sparse-dim", str(SPARSE_DIM), "--report-dir", str(reports), *(form or [])]
        with open(path, "rb") as stdin:
            done = subprocess.run(command, stdin=stdin, capture_output=True, env=trainer_env())
        assert done.returncode == 0, (name, done.stderr.decode())
        (report,) = reports.glob("*.json")
        results.append((done.stdout, json.loads(report.read_text())))
    return results[0], results[1]


def test_same_output_and_report_for_every_kind_of_line(native, tmp_path):
    lines = GOOD + BAD + GOOD
    python, ours = run_both(native, tmp_path, "\n".join(lines).encode() + b"\r\n\n \t\n")
    assert ours == python
    assert python[1]["lines"] == len(lines) and python[1]["bad"] == len(BAD)
    assert len(python[0].splitlines()) == 2 * len(GOOD)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_output_and_report_for_random_hostile_lines(native, tmp_path, seed):
    rng = random.Random(seed)
    lines = [random_line(rng) for _ in range(3000)]
    data = "".join(line + rng.choice(["\n", "\r\n", "\n"]) for line in lines).encode()
    python, ours = run_both(native, tmp_path, data)
    assert ours[1] == python[1]  # counts, reasons, first bad lines and their details
    assert ours[0] == python[0]
    good = len(python[0].splitlines())
    assert 100 < good < 2900 and len(python[1]["reasons"]) >= 5  # the corpus is mixed


SLOT_FORMAT = ["--format", "paddlerec", "--dense", "d:2", "--dense", "age:1"]
SLOT_GOOD = [
    "click:1 d:0.5 age:30 d:-1e3 101:1005 103:7 101:8", "click:0 d:0 d:0 age:.5",
    "d:1. d:2 7:5 click:0 age:-0", f"click:1 101:{'0' * 30}5 d:{'1' * 30} d:1e-400 age:3",
    "click:-0\td:1E+3  d:2e-0 age:0.000 102:18446744073709551615",
]  # fmt: skip
SLOT_BAD = [
    "click:1 d:0.5 101:5 age:3", "click:1 d:0.5 d:1 d:2 101:5 age:3", "click:1 101:5 age:3",
    "click:1 d:x d:1 101:5 age:3", "click:1 d:nan d:1 101:5 age:3", "click:1 d:inf d:1 age:3",
    "click:1 d:1e39 d:1 101:5 age:3", "click:1 d:1 d:1 101:5 age:3 999:5", "d:1 d:1 age:3",
    "click:2 d:1 d:1 age:3", "click:0 click:0 d:1 d:1 age:3", "click:0 d:1 d:1 age:3 x:5",
    "click:0 d:1 d:1 age:3 5", "click:0 d:1 d:1 age:3 101:x", "click:x d:1 d:1 age:3",
    "click:0 d:1 d:1 age:3 101:18446744073709551616", "click:0 d:1 d:1 age:3 101:-5",
    "click:0 d:+1 d:1 age:3", "click:0 d:1_0 d:1 age:3", "click:0 d:0x1 d:1 age:3",
    "click:0 d: d:1 age:3", "click:0 d:- d:1 age:3", "click:0 d:1e d:1 age:3",
    f"click:0 d:1 d:1 age:3 {'9' * 25}:5", f"click:0 d:1 d:1 age:3 -{'9' * 25}:5",
    "click:0 d:1 d:1 age:3 :5", "click:0 d:1 d:1 age:3 101::5", "click:0 d:1\r d:1 age:3",
    "click:0 d:1 d:1 age:3 101:5:5", "click:0 d:\u0667 d:1 age:3", "click:0 D:1 d:1 d:1 age:3",
    "click:0 d:3.4028236e38 d:1 age:3", "click:0 d:-3.4028236e38 d:1 age:3",
]  # fmt: skip
SLOT_PIECES = [
    "click", "d", "age", "101", "102", "7", "999", ":", ":", ":", " ", " ", "\t", ".", "e",
    "E", "-", "+", "0", "1", "5", "nan", "inf", "1e39", "\r", "é", "_", "9" * 21,
]  # fmt: skip


def random_slot_line(rng: random.Random) -> str:
    if rng.random() < 0.5:  # mostly well-formed, with one piece changed
        dense = [f"d:{rng.uniform(-9, 9):.{rng.randint(0, 8)}g}" for _ in range(2)]
        tokens = [f"{rng.choice(SLOTS)}:{rng.randint(0, 2**64 - 1)}" for _ in range(5)]
        parts = [f"click:{rng.randint(0, 1)}", *dense, f"age:{rng.randint(0, 99)}", *tokens]
        rng.shuffle(parts)
        line = " ".join(parts)
        at = rng.randrange(len(line))
        return line[:at] + rng.choice(SLOT_PIECES) + line[at + 1 :]
    return "".join(rng.choice(SLOT_PIECES) for _ in range(rng.randint(1, 30)))


def test_same_output_and_report_for_every_kind_of_slot_format_line(native, tmp_path):
    lines = SLOT_GOOD + SLOT_BAD + SLOT_GOOD
    data = "\n".join(lines).encode() + b"\n"
    python, ours = run_both(native, tmp_path, data, SLOT_FORMAT)
    assert ours == python
    assert python[1]["lines"] == len(lines) and python[1]["bad"] == len(SLOT_BAD)
    assert python[0].splitlines()[0] == b"1 1 1 1 1 1 2 5 8 1 0 1 7 1 0 2 0.5 -1e3 1 30"
    reasons = python[1]["reasons"]
    for reason in ("missing dense feature", "short dense feature", "long dense feature",
                   "non-numeric dense value", "non-finite dense value"):  # fmt: skip
        assert reason in reasons, reasons


@pytest.mark.parametrize("seed", [1, 2])
def test_same_output_and_report_for_random_hostile_slot_format_lines(native, tmp_path, seed):
    rng = random.Random(seed)
    lines = [random_slot_line(rng) for _ in range(3000)]
    data = "".join(line + rng.choice(["\n", "\r\n"]) for line in lines).encode()
    python, ours = run_both(native, tmp_path, data, SLOT_FORMAT)
    assert ours[1] == python[1]
    assert ours[0] == python[0]
    assert 50 < len(python[0].splitlines()) < 2950 and len(python[1]["reasons"]) >= 5


CROSSES = ["--cross", "101:102", "--cross", "7:101", "--cross", "103:7"]
CROSS_GOOD = [
    "1 0 5:101 7:102 9:7 11:103",  # single-hot: one key per cross
    "2 1 " + " ".join(f"{f}:101" for f in range(11, 18)) + " "
    + " ".join(f"{f}:102" for f in (1000, 21, 22, 23, 24, 25)) + " 9:7",  # more than 4: capped
    "1 1 5:101 5:101 7:102 7:102 9:7",  # repeated ids cross as often as given
    "1 0 1000:101 2000:101 7:102 9:7",  # a side of padding keys only: the cross is empty
    "1 0 9:103", "3 0 18446744073709551615:101 18446744073709551615:102 1:7",
]  # fmt: skip


def test_same_output_and_report_with_crosses(native, tmp_path):
    lines = CROSS_GOOD + GOOD + BAD + CROSS_GOOD
    python, ours = run_both(native, tmp_path, "\n".join(lines).encode() + b"\n", CROSSES)
    assert ours == python
    out = python[0].splitlines()
    assert len(out) == 2 * len(CROSS_GOOD) + len(GOOD)
    assert out[0].startswith(b"1 0 1 1 1 0 1 5 1 7 1 11 1 9 1 ")  # then the 3 crosses
    assert out[1].split()[-24] == b"16"  # 4 x 4 keys (of 7 and 5 ids), 4 x 1, none


@pytest.mark.parametrize("seed", [4, 5])
def test_same_output_and_report_for_random_hostile_lines_with_crosses(native, tmp_path, seed):
    rng = random.Random(seed)
    lines = [random_line(rng) for _ in range(3000)]
    data = "".join(line + "\n" for line in lines).encode()
    python, ours = run_both(native, tmp_path, data, CROSSES)
    assert ours == python


def test_same_output_for_slot_format_lines_with_crosses(native, tmp_path):
    rng = random.Random(6)
    lines = SLOT_GOOD + [random_slot_line(rng) for _ in range(2000)]
    data = "".join(line + "\n" for line in lines).encode()
    python, ours = run_both(native, tmp_path, data, SLOT_FORMAT + CROSSES)
    assert ours == python
    assert python[0].splitlines()[0] == (
        b"1 1 1 1 1 1 2 5 8 1 0 1 7 1 0 1 0 1 0 1 0 2 0.5 -1e3 1 30"
    )


@pytest.mark.parametrize(
    "cross", ["101:101", "101:999", "101", "101:x", "101:+102", "101:102 --cross 102:101"]
)
def test_both_refuse_a_bad_cross(native, tmp_path, cross):
    """The Python pipe fails (its report says why), the native one refuses its arguments:
    neither converts a line."""
    (tmp_path / "slot.conf").write_text("".join(f"{s}\n" for s in SLOTS))
    crosses = [arg for c in cross.split(" --cross ") for arg in ("--cross", c)]
    for command in (
        [sys.executable, "-m", "elasticctr_trainer.pipe", "--slot-conf", str(tmp_path / "slot.conf")],
        [native, "--slots", ",".join(map(str, SLOTS))],
    ):  # fmt: skip
        command += ["--sparse-dim", str(SPARSE_DIM), "--report-dir", str(tmp_path / "r"), *crosses]
        done = subprocess.run(command, input=b"1 0 5:101\n", capture_output=True, env=trainer_env())
        assert done.returncode != 0 and done.stdout == b"", (command, done.stderr.decode())


@pytest.mark.parametrize(
    "data",
    [
        b"\xfd7zXZ\x00rest",  # an xz header and no more
        b"\x1f\x8b",
        b"PK\x03\x04rest",
        b"\x04\x22\x4d\x18\x64\x40\xa7rest",  # lz4
        b"PAR1\x15\x04rest",
        b"BZh91AY&SY" + bytes(range(256)),  # bzip2's magic, then noise
        b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd",  # a skippable zstd frame alone
        bytes(random.Random(22).randbytes(5000)),
        b"1 0 5:101\n1 0 \xff\xfe:101\n1 0 5:101\n",
        b"1 0 5:101\n1 0 5\x00:101\n",
        b"1 0 5:101\n\xed\xa0\x80\n",  # a UTF-16 surrogate: not UTF-8
        b"",
        b"1 0 5:101",  # no line end at the end of the file
        b"1 0 5:101\r",  # a lone CR at the end
        b"\n\n\n",
    ],
)
def test_same_verdict_on_files_that_are_not_text_and_on_edges(native, tmp_path, data):
    python, ours = run_both(native, tmp_path, data)
    assert ours == python


def mixed_text(count: int) -> bytes:
    rng = random.Random(count)
    lines = [rng.choice(GOOD) if rng.random() < 0.9 else rng.choice(BAD) for _ in range(count)]
    return "".join(f"{line}\n" for line in lines).encode()


@pytest.mark.parametrize("tool", sorted(READ))
def test_same_output_and_report_for_compressed_files(native, tmp_path, tool):
    """Whole and concatenated streams (zero padding between and after them) read as the
    text itself; bytes after the last stream that are none, or data cut short at any
    point: both read the same lines and fail the file alike."""
    text = mixed_text(4000)
    plain = run_both(native, tmp_path, text)[0]
    cut = text.index(b"\n", len(text) // 3) + 1
    data = compress(tool, text)
    padded = concatenated(tool, text[:cut], b"") + bytes(7) + compress(tool, text[cut:]) + bytes(5)
    for whole in (data, padded):
        python, ours = run_both(native, tmp_path, whole)
        assert ours == python == plain
    assert plain[1]["lines"] == 4000 and plain[1]["failed"] is None
    python, ours = run_both(native, tmp_path, data + b"1 0 5:101\n")  # not a stream: not ignored
    assert ours == python
    assert python[1]["failed"] == f"{READ[tool]}: truncated or corrupt data after line 4000"
    for end in (len(data) - 1, len(data) // 2, 13):
        python, ours = run_both(native, tmp_path, data[:end])
        assert ours == python, end
        assert python[1]["failed"].startswith(f"{READ[tool]}: truncated or corrupt data ")
        assert plain[0].startswith(python[0])
        assert python[1]["lines"] == len(python[0].splitlines()) + python[1]["bad"]


@pytest.mark.parametrize("tool", sorted(READ))
def test_both_fail_a_damaged_compressed_file(native, tmp_path, tool):
    """Both fail it for the same compression; how many lines each decoder hands out before
    it notices the damage depends on its buffers, so only the verdict is compared."""
    data = bytearray(compress(tool, mixed_text(4000)))
    for at in range(len(data) // 2, len(data) // 2 + 8):
        data[at] ^= 0x55
    python, ours = run_both(native, tmp_path, bytes(data))
    for _, report in (python, ours):
        assert report["failed"].startswith(f"{READ[tool]}: "), report["failed"]


def test_the_trainer_runs_the_native_pipe_where_the_image_installed_it(
    native, tmp_path, monkeypatch
):
    (tmp_path / "slot.conf").write_text("101\n102\n")
    uri = f"file://{tmp_path}"
    config = load_config(write_config(tmp_path / "trainer.json", {
        "train_data_uri": uri, "model_uri": uri, "checkpoint_uri": uri,
        "start_date_hr": "20191221/00", "end_date_hr": "20191221/00", "slot_conf": str(tmp_path / "slot.conf"),
    }, {"sparse_dim": 77}))  # fmt: skip
    monkeypatch.delenv(NATIVE_PIPE_ENV, raising=False)
    assert "-m elasticctr_trainer.pipe" in pipe_command(config, [101, 102], "/r")
    monkeypatch.setenv(NATIVE_PIPE_ENV, native)
    command = pipe_command(config, [101, 102], "/r")
    assert command == f"{native} --slots 101,102 --sparse-dim 77 --report-dir /r"
    slot_format = load_config(write_config(tmp_path / "slot.json", {
        **config.runner.__dict__, "data_format": "paddlerec",
    }, {"sparse_dim": 77, "dense_features": [{"name": "dense_feature", "dim": 13}],
        "crosses": [[102, 101]]}))  # fmt: skip
    command = pipe_command(slot_format, [101, 102], "/r")
    assert command == (
        f"{native} --slots 101,102 --sparse-dim 77 --report-dir /r --format paddlerec "
        "--dense dense_feature:13 --cross 102:101"
    )
    monkeypatch.delenv(NATIVE_PIPE_ENV)
    assert pipe_command(slot_format, [101, 102], "/r").endswith("--cross 102:101")
    monkeypatch.setenv(NATIVE_PIPE_ENV, native)
    monkeypatch.setenv(NATIVE_PIPE_ENV, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match=f"{NATIVE_PIPE_ENV}=.*missing"):
        pipe_command(config, [101, 102], "/r")
