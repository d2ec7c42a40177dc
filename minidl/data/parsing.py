"""Text to numbers, a chunk of lines at a time: plain-Python reference and Numba dispatch.

Two formats:

- *delimited* (CSV): every non-blank line has exactly ``width`` numeric fields;
- *CTF* (CNTK text format): ``[sequence id] |name v v v |name v ...``; every named stream must
  appear once per line with exactly its declared number of dense values; ``|#...`` is a comment.

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

OK, WRONG_FIELD_COUNT, NOT_A_NUMBER, NO_STREAM, UNKNOWN_STREAM, REPEATED_STREAM, \
    WRONG_VALUE_COUNT, MISSING_STREAM = range(8)

ERROR_MESSAGES = {
    WRONG_FIELD_COUNT: "expected {width} fields",
    NOT_A_NUMBER: "a value is not a number",
    NO_STREAM: "no '|name' stream on the line",
    UNKNOWN_STREAM: "a stream name is not one of {names}",
    REPEATED_STREAM: "a stream appears twice",
    WRONG_VALUE_COUNT: "a stream does not have its declared number of values {dims}",
    MISSING_STREAM: "a stream is missing (expected all of {names})",
}


class ParsedLines(NamedTuple):
    """The rows parsed from a chunk; when ``error != OK`` the rows stop before ``bad_line``."""

    values: np.ndarray   # (rows, width) float64
    starts: np.ndarray   # (rows,) int64, byte offset of each row's line within the chunk
    lines: np.ndarray    # (rows,) int64, 0-based index of each row's line within the chunk
    bad_line: int        # 0-based line index within the chunk of the first bad line, or -1
    error: int           # OK or one of the error codes above


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


def parse_ctf_reference(buf: bytes, streams) -> ParsedLines:
    """Reference parser for CTF lines; ``streams`` is a list of ``(name: bytes, dim: int)``."""
    dims = [dim for _, dim in streams]
    column_starts = np.concatenate([[0], np.cumsum(dims)]).astype(np.int64)
    index_of = {name: s for s, (name, _) in enumerate(streams)}
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
            tokens = text.split()
            if len(tokens) != dims[s]:
                return _collect(rows, starts, lines, width, index, WRONG_VALUE_COUNT)
            numbers = _to_floats(tokens)
            if numbers is None:
                return _collect(rows, starts, lines, width, index, NOT_A_NUMBER)
            row[column_starts[s]:column_starts[s + 1]] = numbers
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
    from minidl.data.parse_kernels import parse_delimited_kernel  # compiles on first use

    if len(delimiter) != 1:
        raise ValueError(f"delimiter must be a single byte, got {delimiter!r}")
    values, starts, lines = _output_arrays(buf, width)
    rows, bad_line, error = parse_delimited_kernel(
        np.frombuffer(buf, dtype=np.uint8), delimiter[0], values, starts, lines)
    return ParsedLines(values[:rows], starts[:rows], lines[:rows], int(bad_line), int(error))


def parse_ctf(buf: bytes, streams) -> ParsedLines:
    """Parse CTF lines with the Numba kernel; ``streams`` is a list of ``(name: bytes, dim)``.

    The values of stream ``s`` land in the columns after those of streams ``0..s-1``.
    """
    from minidl.data.parse_kernels import parse_ctf_kernel  # compiles on first use

    names = np.frombuffer(b"".join(name for name, _ in streams), dtype=np.uint8)
    name_starts = np.concatenate([[0], np.cumsum([len(n) for n, _ in streams])]).astype(np.int64)
    column_starts = np.concatenate([[0], np.cumsum([d for _, d in streams])]).astype(np.int64)
    values, starts, lines = _output_arrays(buf, int(column_starts[-1]))
    rows, bad_line, error = parse_ctf_kernel(
        np.frombuffer(buf, dtype=np.uint8), names, name_starts, column_starts, values, starts,
        lines)
    return ParsedLines(values[:rows], starts[:rows], lines[:rows], int(bad_line), int(error))
