"""The native request-body parser (../parser/, Rust, loaded with ctypes; docs/serving.md).

It parses, in one pass and without creating Python objects, the JSON subset that
well-formed requests use; for any other body it says "not mine" and instances.py parses
it with orjson and the Python code, which gives the same answer or names the problem.
Serving works without the library (every body then takes the Python path, ~10x slower
at 64 instances per request) and says which parser it uses in /status.

The library is found at $ELASTICCTR_SERVING_PARSER_LIB (the image sets it), then next to
this package, then in the cargo build output (images/serving/parser/target/release/),
which `build_parser()` produces for the tests and the benchmark.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path

import numpy as np
from elasticctr_common.cargo import cargo_build
from numpy.typing import NDArray

log = logging.getLogger("elasticctr_serving.native")
PARSER_DIR = Path(__file__).resolve().parent.parent / "parser"
LIBRARY_NAME = "libelasticctr_parser.so"
BAIL = -1


def library_path() -> Path | None:
    explicit = os.environ.get("ELASTICCTR_SERVING_PARSER_LIB")
    if explicit:
        return Path(explicit)
    for candidate in (
        Path(__file__).resolve().parent / LIBRARY_NAME,
        PARSER_DIR / "target" / "release" / LIBRARY_NAME,
    ):
        if candidate.exists():
            return candidate
    return None


def build_parser(offline: bool = False) -> Path:
    """`cargo build --release --locked` of the parser (incremental, cached in target/)."""
    return cargo_build(PARSER_DIR, LIBRARY_NAME, "the native request parser", offline)


_u8 = ctypes.c_char_p
_ptr = ctypes.c_void_p


class _Scratch:
    """Output arrays reused from call to call (allocating and pinning fresh ones costs
    more than the parse of a small body)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.raw = np.empty(cap, dtype=np.uint64)
        self.slots = np.empty(cap, dtype=np.int32)
        self.rows = np.empty(cap, dtype=np.int32)
        self.pointers = (self.raw.ctypes.data, self.slots.ctypes.data, self.rows.ctypes.data)
        self.count = ctypes.c_int64(0)
        self.count_ref = ctypes.byref(self.count)


KEEP_SCRATCH = 1 << 20  # entries (16 MB); a larger body gets arrays of its own


class NativeParser:
    """One loaded library. `parse` runs with the GIL held (PyDLL): it takes ~1 µs per
    instance, less than handing the GIL to another thread and waiting to get it back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        library = ctypes.PyDLL(str(path))
        function = library.elasticctr_parse  # fails if it is not ours
        function.argtypes = [_u8, ctypes.c_size_t, _u8, ctypes.c_size_t, ctypes.c_int32,
                             ctypes.c_int64, _ptr, _ptr, _ptr, ctypes.c_size_t,
                             ctypes.POINTER(ctypes.c_int64)]  # fmt: skip
        function.restype = ctypes.c_int64
        self._parse = function
        self._local = threading.local()
        self._unique = library.elasticctr_unique
        self._unique.argtypes = [_ptr, ctypes.c_size_t, _ptr, _ptr]
        self._unique.restype = ctypes.c_int64
        self._pool = library.elasticctr_pool
        self._pool.argtypes = [_ptr, ctypes.c_size_t, ctypes.c_size_t, _ptr, _ptr, _ptr,
                               ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, _ptr]  # fmt: skip
        self._pool.restype = ctypes.c_int64

    def parse(
        self, body: bytes, names: bytes, plain: bool, max_instances: int
    ) -> tuple[int, NDArray[np.uint64], NDArray[np.int32], NDArray[np.int32]] | None:
        """(instances, raw uint64 feasigns, int32 slot index, int32 instance index), or
        None when the body is not in the parser's subset (the Python code decides)."""
        cap = len(body) // 2 + 1  # every feasign takes a digit and a separator
        scratch: _Scratch | None = getattr(self._local, "scratch", None)
        if scratch is None or scratch.cap < cap:
            scratch = _Scratch(max(cap, 4096))
            if scratch.cap <= KEEP_SCRATCH:
                self._local.scratch = scratch
        raw, slots, rows = scratch.pointers
        n = self._parse(body, len(body), names, len(names), int(plain), max_instances,
                        raw, slots, rows, scratch.cap, scratch.count_ref)  # fmt: skip
        if n < 0:
            if n != BAIL:
                raise RuntimeError(f"{self.path}: elasticctr_parse returned {n}")
            return None
        return (
            scratch.count.value,
            scratch.raw[:n].copy(),
            scratch.slots[:n].copy(),
            scratch.rows[:n].copy(),
        )

    def unique(self, keys: NDArray[np.uint64]) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """(distinct keys in order of first appearance, int64 position of each key among
        them): what np.unique(keys, return_inverse=True) says, in another order, faster."""
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        unique = np.empty(len(keys), dtype=np.uint64)
        inverse = np.empty(len(keys), dtype=np.int64)
        m = self._unique(keys.ctypes.data, len(keys), unique.ctypes.data, inverse.ctypes.data)
        if m < 0:
            raise RuntimeError(f"{self.path}: elasticctr_unique returned {m}")
        return unique[:m], inverse

    def pool(
        self,
        values: NDArray[np.float32],
        inverse: NDArray[np.int64],
        slots: NDArray[np.int32],
        rows: NDArray[np.int32],
        slot_count: int,
        count: int,
    ) -> NDArray[np.float32]:
        """batcher.pool(values[inverse], slots, rows, slot_count, count), bit for bit."""
        values = np.ascontiguousarray(values, dtype=np.float32)
        inverse = np.ascontiguousarray(inverse, dtype=np.int64)
        slots = np.ascontiguousarray(slots, dtype=np.int32)
        rows = np.ascontiguousarray(rows, dtype=np.int32)
        dim = values.shape[1]
        out = np.empty((slot_count, count, dim), dtype=np.float32)
        status = self._pool(values.ctypes.data, len(values), dim, inverse.ctypes.data,
                            slots.ctypes.data, rows.ctypes.data, len(inverse), slot_count,
                            count, out.ctypes.data)  # fmt: skip
        if status != 0:
            raise RuntimeError(f"{self.path}: elasticctr_pool returned {status}")
        return out


_loaded: NativeParser | None = None
_tried = False


def parser() -> NativeParser | None:
    """The native parser, loaded once; None (and one warning) when it is not there."""
    global _loaded, _tried
    if not _tried:
        _tried = True
        path = library_path()
        if path is None:
            log.warning("native parser %s not found: parsing in Python (slower)", LIBRARY_NAME)
        else:
            try:
                _loaded = NativeParser(path)
            except (OSError, AttributeError) as err:
                log.warning("native parser %s cannot be loaded (%s): parsing in Python", path, err)
    return _loaded
