"""Example lines in the two formats (docs/architecture.md, "Training data"): one reading
for every reader of them, the trainer, its pipe's reference and the client's `predict`.

- `elasticctr`, ElasticCTR's line: `<show> <click> <feasign>:<slot> ...`;
- `paddlerec`, PaddleRec's slot format: `click:<0|1> <dense>:<value> ... <slot>:<feasign> ...`,
  one `click`, each configured dense feature's values as `dim` tokens of its name (in
  order, anywhere in the line), the slots' ids; the show is 1.

A line is ASCII, its fields separated by spaces or tabs, with or without its line end
(`\\n`, or `\\r\\n`). Numbers are ASCII decimal digits with an optional `-`: Python's
`int()` alone would also take `+`, underscores and other Unicode digits (`'١٢'`), fail on
`'²'`, and refuse numbers of more than 4300 digits; here a number longer than any uint64 is
read as out of range without converting it. A dense value is a plain decimal
(`-?digits[.digits][e[-+]digits]`, or `.digits`): no `nan`, `inf`, `+`, `_` or hex, and
finite as a float32 (what the trainer's dataset reads it as). A line that is not an
example raises `BadLine` with a short, countable reason: a dense part missing, short,
long, non-numeric or non-finite makes a bad line, never a zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_FEASIGN = 2**64 - 1
# show and click reach Paddle as float32: above 2**24 they are no longer exact integers.
MAX_SHOW = 2**24
_BEYOND = 10**20  # > MAX_FEASIGN: what a number of more than 20 digits is read as
# ASCII control characters other than tab (a lone CR, vertical tab, form feed, NUL, DEL...).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_DECIMAL = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
# A decimal at or above this in magnitude rounds to infinity as a float32.
F32_OVERFLOW = 2.0**128 - 2.0**103
FORMATS = ("elasticctr", "paddlerec")
LABEL = "click"  # the slot format's label token
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_DENSE_DIM = 4096


class BadLine(ValueError):
    """A line that is not an ElasticCTR example; `reason` is a short, countable category."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def parse_int(text: str) -> int:
    """The integer `text` spells in ASCII decimal digits (an optional `-`); ValueError if
    it is not one."""
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"not a decimal integer: {text[:40]!r}")
    significant = digits.lstrip("0") or "0"
    value = int(significant) if len(significant) <= 20 else _BEYOND
    return -value if text.startswith("-") else value


@dataclass(frozen=True)
class DenseFeature:
    """A dense feature: `dim` float values written as `dim` tokens `<name>:<value>`."""

    name: str
    dim: int


def dense_feature_problems(features: tuple[DenseFeature, ...] | list[DenseFeature]) -> list[str]:
    """What is wrong with a list of dense features (empty: nothing)."""
    problems = []
    seen: set[str] = set()
    for feature in features:
        if not _NAME.fullmatch(feature.name) or feature.name == LABEL:
            problems.append(
                f"dense feature name {feature.name!r}: expected a name of letters, digits and "
                f"_ that does not start with a digit, other than {LABEL!r}"
            )
        elif feature.name in seen:
            problems.append(f"dense feature name {feature.name!r} is given twice")
        seen.add(feature.name)
        if not (isinstance(feature.dim, int) and 1 <= feature.dim <= MAX_DENSE_DIM):
            problems.append(
                f"dense feature {feature.name!r}: dim must be an integer within "
                f"[1, {MAX_DENSE_DIM}], got {feature.dim!r}"
            )
    return problems


@dataclass(frozen=True)
class Line:
    show: int
    click: int
    features: list[tuple[int, int]]  # (feasign, slot) in line order
    # The dense features' values as written (checked decimals), in the format's order.
    dense: tuple[str, ...] = ()

    @property
    def label(self) -> int:
        return 1 if self.click > 0 else 0


def _fields(line: str) -> tuple[str, list[str]]:
    """The line without its end, and its fields; BadLine for a character no line may hold."""
    if line.endswith("\n"):
        line = line[:-2] if line.endswith("\r\n") else line[:-1]
    if not line.isascii():
        raise BadLine("non-ASCII character", line[:80])
    if _CONTROL.search(line):
        raise BadLine("control character", repr(line[:80]))
    return line, line.split()


def split_line(line: str) -> Line:
    """An ElasticCTR line's show, click and (feasign, slot) pairs; BadLine if it is not one."""
    line, fields = _fields(line)
    if len(fields) < 2:
        raise BadLine("missing show/click", line[:80])
    try:
        show, click = parse_int(fields[0]), parse_int(fields[1])
    except ValueError:
        raise BadLine("non-integer show/click", " ".join(fields[:2])[:80]) from None
    if show == 0:
        # The CTR accessor divides each update by the key's show count: a key seen only in
        # such lines is driven to the sparse rule's bound.
        raise BadLine("zero show", " ".join(fields[:2]))
    if show < 0 or click < 0 or click > show or show > MAX_SHOW:
        raise BadLine("show/click out of range", f"show={show} click={click}")
    if len(fields) == 2:
        raise BadLine("no feasigns")
    features = []
    for token in fields[2:]:
        feasign_text, sep, slot_text = token.partition(":")
        if not sep:
            raise BadLine("feasign without slot", token[:80])
        features.append(_feature(feasign_text, slot_text, token))
    return Line(show, click, features)


def _feature(feasign_text: str, slot_text: str, token: str) -> tuple[int, int]:
    if feasign_text.isdigit() and slot_text.isdigit() and len(feasign_text) <= 20:
        feasign, slot = int(feasign_text), int(slot_text)  # the common case, inline
    else:
        try:
            feasign, slot = parse_int(feasign_text), parse_int(slot_text)
        except ValueError:
            raise BadLine("non-integer feasign or slot", token[:80]) from None
    if not 0 <= feasign <= MAX_FEASIGN:
        raise BadLine("feasign out of uint64 range", token[:80])
    return feasign, slot


def dense_value(text: str) -> float:
    """The float a dense value's text spells; ValueError naming why it is not one."""
    if not _DECIMAL.fullmatch(text):
        raise ValueError("non-numeric dense value")
    value = float(text)
    if abs(value) >= F32_OVERFLOW:
        raise ValueError("non-finite dense value")
    return value


def split_slot_line(line: str, dense: tuple[DenseFeature, ...] = ()) -> Line:
    """A PaddleRec slot-format line's click, (feasign, slot) pairs and dense values (show 1);
    BadLine if it is not one."""
    line, fields = _fields(line)
    click: int | None = None
    features = []
    values: dict[str, list[str]] = {feature.name: [] for feature in dense}
    for token in fields:
        name, sep, value = token.partition(":")
        if not sep:
            raise BadLine("token without name", token[:80])
        found = values.get(name)
        if found is not None:
            try:
                dense_value(value)
            except ValueError as err:
                raise BadLine(str(err), token[:80]) from None
            found.append(value)
        elif name == LABEL:
            if click is not None:
                raise BadLine("click given twice", line[:80])
            try:
                click = parse_int(value)
            except ValueError:
                raise BadLine("non-integer show/click", token[:80]) from None
            if click not in (0, 1):
                raise BadLine("show/click out of range", f"click={click}")
        elif name.isdigit() or name.startswith("-"):
            features.append(_feature(value, name, token))
        else:
            raise BadLine("unknown feature name", token[:80])
    if click is None:
        raise BadLine("missing click", line[:80])
    for feature in dense:
        got = len(values[feature.name])
        if got != feature.dim:
            reason = "missing" if not got else "short" if got < feature.dim else "long"
            raise BadLine(
                f"{reason} dense feature", f"{feature.name}: {got} of {feature.dim} values"
            )
    if not features and not dense:
        raise BadLine("no feasigns")
    return Line(1, click, features, tuple(v for f in dense for v in values[f.name]))


@dataclass(frozen=True)
class LineFormat:
    """How a data set's lines are written: ElasticCTR's, or PaddleRec's slot format with
    these dense features (none for ElasticCTR's, which has no place for them)."""

    name: str = "elasticctr"
    dense: tuple[DenseFeature, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in FORMATS:
            raise ValueError(
                f"line format: expected one of {', '.join(FORMATS)}, got {self.name!r}"
            )
        if self.dense and self.name != "paddlerec":
            raise ValueError(
                "dense features need the paddlerec format (ElasticCTR lines have no place for them)"
            )
        problems = dense_feature_problems(self.dense)
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def dense_dim(self) -> int:
        return sum(feature.dim for feature in self.dense)

    def split(self, line: str) -> Line:
        if self.name == "paddlerec":
            return split_slot_line(line, self.dense)
        return split_line(line)
