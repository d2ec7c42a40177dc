"""Text to numbers, a chunk of lines at a time: plain-Python reference and Numba dispatch.

Two formats:

- *delimited* (CSV): every non-blank line has exactly ``width`` numeric fields;
- *CTF* (CNTK text format): ``[sequence id] |name v v v |name i:v i:v ...``; every named stream
  must appear once per line. A *dense* stream holds exactly its declared number of values; a
  *sparse* stream holds any number of ``index:value`` entries (0-based index below the declared
  dimension, each index at most once) and every index not named is 0, so ``|labels 3:1`` with
  dimension 5 reads as ``0 0 0 1 0``. ``|#...`` up to the next ``|`` is a comment.

Both parsers take a ``bytes`` chunk made of whole lines and return :class:`ParsedLines`: a float64
matrix (one row per non-blank line), where each row starts in the chunk, and which line of the
chunk it came from -- what a streaming reader needs to know its byte position and to name the
line of an error. A bad line does not raise here; its index and an error code come back so the
caller can name the file and the absolute line number.

``parse_delimited`` / ``parse_ctf`` run the Numba kernels of ``parse_kernels`` (compiled on first
use); the ``*_reference`` functions do the same with Python string methods and NumPy's own
text-to-float conversion, and exist to be read and to test the kernels against.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .parse_status import (
    BAD_INDEX, MISSING_STREAM, NO_STREAM, NOT_A_NUMBER, NOT_INDEX_VALUE, OK, REPEATED_INDEX,
    REPEATED_STREAM, SPARSE_IN_DENSE, UNKNOWN_STREAM, WRONG_FIELD_COUNT, WRONG_VALUE_COUNT,
)


class ParsedLines(NamedTuple):
    """The rows parsed from a chunk; when ``error != OK`` the rows stop before ``bad_line``."""

    values: np.ndarray   # (rows, width) float64
    starts: np.ndarray   # (rows,) int64, byte offset of each row's line within the chunk
    lines: np.ndarray    # (rows,) int64, 0-based index of each row's line within the chunk
    bad_line: int        # 0-based line index within the chunk of the first bad line, or -1
    error: int           # OK or one of the error codes of parse_status


def _lines_with_starts(buf: bytes):
    """Split ``buf`` into lines (without ``\\n`` and a trailing ``\\r``) and their byte offsets."""
    lines = buf.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the chunk ended with a newline: no line after it
    lengths = np.array([len(line) + 1 for line in lines], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return [line[:-1] if line.endswith(b"\r") else line for line in lines], starts


def _to_floats(tokens) -> np.ndarray | None:
    """Convert byte strings to float64 with NumPy, or ``None`` when one is not a number."""
    try:
        return np.array(tokens, dtype=np.bytes_).astype(np.float64)
    except ValueError:
        return None


def _collect(rows, starts, lines, width, bad_line=-1, error=OK) -> ParsedLines:
    values = np.array(rows, dtype=np.float64).reshape(len(rows), width)
    return ParsedLines(values, np.array(starts, dtype=np.int64), np.array(lines, dtype=np.int64),
                       bad_line, error)


def parse_delimited_reference(buf: bytes, width: int, delimiter: bytes) -> ParsedLines:
    """Reference parser for delimited lines of ``width`` numbers (see ``parse_delimited``)."""
    rows, starts, lines = [], [], []
    text_lines, line_starts = _lines_with_starts(buf)
    for index, line in enumerate(text_lines):
        if not line.strip(b" \t"):
            continue
        fields = line.split(delimiter)
        if len(fields) != width:
            return _collect(rows, starts, lines, width, index, WRONG_FIELD_COUNT)
        numbers = _to_floats([field.strip(b" \t") for field in fields])
        if numbers is None:
            return _collect(rows, starts, lines, width, index, NOT_A_NUMBER)
        rows.append(numbers)
        starts.append(line_starts[index])
        lines.append(index)
    return _collect(rows, starts, lines, width)


def ctf_layout(streams):
    """``(name, dim)`` or ``(name, dim, sparse)`` tuples -> names, dims, sparse flags, columns.

    Stream ``s`` owns the columns ``column_starts[s]:column_starts[s + 1]`` of a parsed row.
    """
    names = [stream[0] for stream in streams]
    dims = [int(stream[1]) for stream in streams]
    sparse = [bool(stream[2]) if len(stream) > 2 else False for stream in streams]
    column_starts = np.concatenate([[0], np.cumsum(dims)]).astype(np.int64)
    return names, dims, sparse, column_starts


def _dense_values_reference(tokens, out) -> int:
    """Write one value per token into ``out``, which must be filled exactly; an error code."""
    for count, token in enumerate(tokens):
        if count >= len(out):
            return WRONG_VALUE_COUNT
        number = _to_floats([token])
        if number is None:
            return SPARSE_IN_DENSE if b":" in token else NOT_A_NUMBER
        out[count] = number[0]
    return OK if len(tokens) == len(out) else WRONG_VALUE_COUNT


def _sparse_values_reference(tokens, out) -> int:
    """Zero ``out``, then write each ``index:value`` token at its index; an error code."""
    out[:] = 0.0
    seen = set()
    for token in tokens:
        index_text, colon, value_text = token.partition(b":")
        if not colon:
            return NOT_INDEX_VALUE
        # isdigit() on bytes is ASCII-only; int() alone would also take "+3", "-1" and "1_0".
        if not index_text.isdigit() or int(index_text) >= len(out):
            return BAD_INDEX
        index = int(index_text)
        if index in seen:
            return REPEATED_INDEX
        seen.add(index)
        number = _to_floats([value_text])
        if number is None:
            return NOT_A_NUMBER
        out[index] = number[0]
    return OK


def parse_ctf_reference(buf: bytes, streams) -> ParsedLines:
    """Reference parser for CTF lines; ``streams`` as in :func:`parse_ctf`."""
    names, dims, sparse, column_starts = ctf_layout(streams)
    index_of = {name: s for s, name in enumerate(names)}
    width = int(column_starts[-1])
    rows, starts, lines = [], [], []
    text_lines, line_starts = _lines_with_starts(buf)
    for index, line in enumerate(text_lines):
        if not line.strip(b" \t"):
            continue
        parts = line.split(b"|")
        if len(parts) == 1:
            return _collect(rows, starts, lines, width, index, NO_STREAM)
        row = np.empty(width)
        seen = set()
        for part in parts[1:]:  # parts[0] is the optional sequence id
            name, _, text = part.replace(b"\t", b" ").partition(b" ")
            if name.startswith(b"#"):
                continue
            if name not in index_of:
                return _collect(rows, starts, lines, width, index, UNKNOWN_STREAM)
            s = index_of[name]
            if s in seen:
                return _collect(rows, starts, lines, width, index, REPEATED_STREAM)
            seen.add(s)
            fill = _sparse_values_reference if sparse[s] else _dense_values_reference
            error = fill(text.split(), row[column_starts[s]:column_starts[s + 1]])
            if error != OK:
                return _collect(rows, starts, lines, width, index, error)
        if len(seen) != len(streams):
            return _collect(rows, starts, lines, width, index, MISSING_STREAM)
        rows.append(row)
        starts.append(line_starts[index])
        lines.append(index)
    return _collect(rows, starts, lines, width)


def _output_arrays(buf: bytes, width: int):
    # A chunk has at most one row per newline, plus a last line without one.
    capacity = buf.count(b"\n") + 1
    return (np.empty((capacity, width), dtype=np.float64), np.empty(capacity, dtype=np.int64),
            np.empty(capacity, dtype=np.int64))


def parse_delimited(buf: bytes, width: int, delimiter: bytes) -> ParsedLines:
    """Parse delimiter-separated lines of ``width`` numbers with the Numba kernel.

    Blank lines are skipped; fields may be surrounded by spaces or tabs; numbers are decimal
    (``-1.5e3``), ``nan`` or ``inf``.
    """
    from .parse_kernels import parse_delimited_kernel  # compiles on first use

    if len(delimiter) != 1:
        raise ValueError(f"delimiter must be a single byte, got {delimiter!r}")
    values, starts, lines = _output_arrays(buf, width)
    rows, bad_line, error = parse_delimited_kernel(
        np.frombuffer(buf, dtype=np.uint8), delimiter[0], values, starts, lines)
    return ParsedLines(values[:rows], starts[:rows], lines[:rows], int(bad_line), int(error))


def parse_ctf(buf: bytes, streams) -> ParsedLines:
    """Parse CTF lines with the Numba kernel.

    ``streams`` lists ``(name: bytes, dim)`` for dense streams and ``(name: bytes, dim, True)``
    for sparse ones; the ``dim`` values of stream ``s`` land in the columns after those of
    streams ``0..s-1``, so a parsed row is every stream's dense vector side by side.
    """
    from .parse_kernels import parse_ctf_kernel  # compiles on first use

    names, _, sparse, column_starts = ctf_layout(streams)
    name_bytes = np.frombuffer(b"".join(names), dtype=np.uint8)
    name_starts = np.concatenate([[0], np.cumsum([len(n) for n in names])]).astype(np.int64)
    values, starts, lines = _output_arrays(buf, int(column_starts[-1]))
    rows, bad_line, error = parse_ctf_kernel(
        np.frombuffer(buf, dtype=np.uint8), name_bytes, name_starts, column_starts,
        np.array(sparse, dtype=np.bool_), values, starts, lines)
    return ParsedLines(values[:rows], starts[:rows], lines[:rows], int(bad_line), int(error))
