"""Strategies for values minidl can store, and for damaging the files that hold them.

* ``arrays()``: every allowed dtype, 0-d and size-0 shapes, and the layouts that the
  writer must normalise (big-endian, Fortran order, strided views).
* ``values()``: nested dicts/lists/tuples of arrays and msgpack scalars.
* ``mutations()``: bit flips, truncations, insertions and overwrites of a file's bytes;
  a sound loader either raises ``CheckpointError`` or returns exactly the original.
* ``as_saved(value)``: what ``load`` returns for ``value`` (tuples become lists, NumPy
  scalars 0-d arrays); ``assert_same_value`` compares bit for bit, NaN included.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ..io.dtypes import ALLOWED_DTYPES

DTYPE_NAMES = tuple(ALLOWED_DTYPES)


@st.composite
def arrays(draw, dtypes=DTYPE_NAMES, max_dims: int = 3, max_side: int = 4):
    """Arrays of allowed dtypes in any memory layout (C, Fortran, big-endian, strided)."""
    dtype = np.dtype(draw(st.sampled_from(dtypes)))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=max_side))
    array = draw(hnp.arrays(dtype, shape))
    layout = draw(st.sampled_from(["c", "fortran", "big-endian", "strided"]))
    if layout == "fortran":
        array = np.asfortranarray(array)
    elif layout == "big-endian" and dtype.itemsize > 1:
        array = array.astype(dtype.newbyteorder(">"))
    elif layout == "strided" and array.ndim:
        doubled = np.repeat(array, 2, axis=0)
        array = doubled[::2]
    return array


def scalars():
    """msgpack scalars: str, int (64-bit range), float (NaN/inf too), bool, None, bytes."""
    return st.one_of(
        st.text(max_size=8), st.integers(-(1 << 63), (1 << 64) - 1),
        st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
        st.binary(max_size=8))


def values(max_leaves: int = 12):
    """Nested dicts (str keys), lists and tuples of arrays and scalars."""
    leaves = st.one_of(scalars(), arrays())
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.tuples(children, children),
            st.dictionaries(st.text(max_size=6), children, max_size=4)),
        max_leaves=max_leaves)


def as_saved(value):
    """The value ``load`` returns for a saved ``value`` (tuples -> lists, scalars -> 0-d)."""
    if isinstance(value, dict):
        return {k: as_saved(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_saved(v) for v in value]
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, bytearray):
        return bytes(value)
    if not isinstance(value, np.ndarray) and callable(getattr(value, "numpy", None)):
        return np.asarray(value.numpy())
    return value


def assert_same_value(actual, expected, where: str = "value") -> None:
    """Assert two loaded values are identical: types, dtypes, shapes and every bit."""
    if isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{where}: expected an array, got {type(actual)}"
        assert actual.dtype.name == expected.dtype.name, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
        canonical = ALLOWED_DTYPES[expected.dtype.name]
        assert (np.ascontiguousarray(actual, dtype=canonical).tobytes()
                == np.ascontiguousarray(expected, dtype=canonical).tobytes()), f"{where}: data differs"
        return
    assert type(actual) is type(expected), f"{where}: {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{where}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_same_value(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, list):
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same_value(a, e, f"{where}[{i}]")
    elif isinstance(expected, float):
        # Compare the bits, so NaN equals NaN and -0.0 differs from 0.0.
        assert struct.pack("<d", actual) == struct.pack("<d", expected), f"{where}: {actual} != {expected}"
    else:
        assert actual == expected, f"{where}: {actual!r} != {expected!r}"


@dataclass(frozen=True)
class Mutation:
    """One way of damaging a file; ``apply`` returns the damaged bytes."""

    kind: str          # "flip", "truncate", "insert" or "overwrite"
    position: float    # where, as a fraction of the file length
    payload: bytes = b""
    bit: int = 0

    def apply(self, data: bytes) -> bytes:
        at = min(len(data), math.floor(self.position * len(data)))
        if self.kind == "flip":
            if not data:
                return data
            at = min(at, len(data) - 1)
            return data[:at] + bytes([data[at] ^ (1 << self.bit)]) + data[at + 1:]
        if self.kind == "truncate":
            return data[:at]
        if self.kind == "insert":
            return data[:at] + self.payload + data[at:]
        if self.kind == "overwrite":
            return data[:at] + self.payload + data[at + len(self.payload):]
        raise ValueError(f"unknown mutation {self.kind!r}")


def mutations():
    """Bit flips, truncations, insertions and overwrites anywhere in a file."""
    position = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
    return st.one_of(
        st.builds(Mutation, st.just("flip"), position, st.just(b""), st.integers(0, 7)),
        st.builds(Mutation, st.just("truncate"), position),
        st.builds(Mutation, st.just("insert"), position, st.binary(min_size=1, max_size=16)),
        st.builds(Mutation, st.just("overwrite"), position, st.binary(min_size=1, max_size=16)))
