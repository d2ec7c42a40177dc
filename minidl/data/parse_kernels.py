"""Numba kernels that turn raw text bytes into a float64 matrix, one pass over the bytes.

Imported only when a streaming reader parses its first chunk, so ``import minidl`` never starts
the compiler; ``cache=True`` keeps the compiled code on disk for later runs. ``nogil=True`` lets a
prefetch thread parse while the main thread trains. Each kernel has a plain-Python twin in
``parsing.py`` and a test checks that the two agree.

Conventions shared by both kernels: lines end with ``\\n`` (a ``\\r`` before it is ignored);
lines holding only spaces and tabs are skipped; the kernels never raise, they return the 0-based
index of the first bad line and an error code (see ``parse_status``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEWLINE, CR, SPACE, TAB = 10, 13, 32, 9
PLUS, MINUS, DOT, BAR, HASH, COLON = 43, 45, 46, 124, 35, 58
ZERO, NINE = 48, 57
LOWER_E, LOWER_I, LOWER_N = 101, 105, 110

# Exact powers of ten: every 10**k with k <= 22 is representable in float64, so
# mantissa / 10**k is then a single correctly rounded operation.
POWERS_OF_TEN = np.array([10.0 ** k for k in range(23)])
# A signed 64-bit integer holds any 18-digit mantissa; later digits cannot change a float32.
MAX_MANTISSA_DIGITS = 18
# Any written exponent past this gives 0 or inf for every mantissa (float64 ends near 1e308).
MAX_WRITTEN_EXPONENT = 100000
# Special values, spelled in lower case as uint8 arrays (Numba freezes global arrays as constants).
NAN_WORD = np.frombuffer(b"nan", dtype=np.uint8).copy()
INF_WORD = np.frombuffer(b"inf", dtype=np.uint8).copy()
INFINITY_WORD = np.frombuffer(b"infinity", dtype=np.uint8).copy()

from .parse_status import (  # noqa: E402  (the codes the reference returns too)
    BAD_INDEX, MISSING_STREAM, NO_STREAM, NOT_A_NUMBER, NOT_INDEX_VALUE, OK, REPEATED_INDEX,
    REPEATED_STREAM, SPARSE_IN_DENSE, UNKNOWN_STREAM, WRONG_FIELD_COUNT, WRONG_VALUE_COUNT,
)


@njit(cache=True, nogil=True)
def _is_blank(byte):
    return byte == SPACE or byte == TAB


@njit(cache=True, nogil=True)
def _skip_blanks(buf, start, end):
    while start < end and _is_blank(buf[start]):
        start += 1
    return start


@njit(cache=True, nogil=True)
def _lower(byte):
    # ASCII letters differ from their lower case only in bit 0x20.
    return byte | 0x20


@njit(cache=True, nogil=True)
def _matches_word(buf, start, end, word):
    if end - start != len(word):
        return False
    for k in range(len(word)):
        if _lower(buf[start + k]) != word[k]:
            return False
    return True


# parse_number and the steps of its hot path are inlined (``inline="always"``, Numba's own
# inlining) into the kernels' loops: as separate calls the same code parses about 10% slower
# (benchmarks/bench_data.py measures the kernels).
@njit(cache=True, nogil=True, inline="always")
def parse_number(buf, start, end):
    """Parse ``buf[start:end]`` (surrounding blanks allowed) as a decimal float.

    Returns ``(ok, value)``. The text is read in the order it is written — sign, digits with an
    optional point, exponent — into an integer mantissa and a power of ten,
    ``value = mantissa * 10**exponent``; only the last step rounds.
    """
    while start < end and _is_blank(buf[start]):
        start += 1
    while end > start and _is_blank(buf[end - 1]):
        end -= 1
    if start >= end:
        return False, 0.0
    sign, start = _read_sign(buf, start)
    if start < end and _starts_a_word(buf[start]):
        return _parse_special_value(buf, start, end, sign)
    i, mantissa, exponent, digits = _read_mantissa(buf, start, end)
    if digits == 0:
        return False, 0.0  # ".", "-", ".e5": no digit at all
    if i < end and _lower(buf[i]) == LOWER_E:
        i, ok, written = _read_exponent(buf, i + 1, end)
        if not ok:
            return False, 0.0
        exponent += written
    if i != end:
        return False, 0.0  # something follows the number
    return True, sign * _scale_by_power_of_ten(mantissa, exponent)


@njit(cache=True, nogil=True)
def _read_sign(buf, start):
    """``(sign, position after it)``: an optional ``+`` or ``-``."""
    if buf[start] == MINUS:
        return -1.0, start + 1
    if buf[start] == PLUS:
        return 1.0, start + 1
    return 1.0, start


@njit(cache=True, nogil=True)
def _starts_a_word(byte):
    """``n`` or ``i`` in either case: the text can only be nan, inf or infinity (or bad)."""
    return _lower(byte) == LOWER_N or _lower(byte) == LOWER_I


@njit(cache=True, nogil=True)
def _parse_special_value(buf, start, end, sign):
    """``nan``, ``inf`` or ``infinity`` in any case (NaN carries no sign), else not a number."""
    if _matches_word(buf, start, end, NAN_WORD):
        return True, np.nan
    if _matches_word(buf, start, end, INF_WORD) or _matches_word(buf, start, end, INFINITY_WORD):
        return True, sign * np.inf
    return False, 0.0


@njit(cache=True, nogil=True, inline="always")
def _read_mantissa(buf, i, end):
    """Digits with an optional point, as ``(i, mantissa, exponent, digits read)``.

    Only the first MAX_MANTISSA_DIGITS significant digits (leading zeros are not significant)
    enter the mantissa, so it cannot overflow. Each digit kept after the point divides the value
    by 10 (exponent - 1); a digit dropped before the point still multiplies it by 10
    (exponent + 1); a digit dropped after the point changes nothing a float could hold.
    """
    mantissa = 0
    significant = 0
    exponent = 0
    digits = 0
    while i < end and ZERO <= buf[i] <= NINE:
        digits += 1
        if significant < MAX_MANTISSA_DIGITS:
            mantissa = mantissa * 10 + (buf[i] - ZERO)
            if mantissa > 0:
                significant += 1
        else:
            exponent += 1
        i += 1
    if i < end and buf[i] == DOT:
        i += 1
        while i < end and ZERO <= buf[i] <= NINE:
            digits += 1
            if significant < MAX_MANTISSA_DIGITS:
                mantissa = mantissa * 10 + (buf[i] - ZERO)
                if mantissa > 0:
                    significant += 1
                exponent -= 1
            i += 1
    return i, mantissa, exponent, digits


@njit(cache=True, nogil=True, inline="always")
def _read_exponent(buf, i, end):
    """The signed integer after ``e``: ``(i, ok, value)``; ``ok`` is False when no digit follows.

    The value is capped at MAX_WRITTEN_EXPONENT: any larger power of ten already makes every
    mantissa 0 or inf, and the cap keeps a long run of digits from overflowing.
    """
    exponent_sign = 1
    if i < end and (buf[i] == MINUS or buf[i] == PLUS):
        if buf[i] == MINUS:
            exponent_sign = -1
        i += 1
    if i >= end or not (ZERO <= buf[i] <= NINE):
        return i, False, 0
    written = 0
    while i < end and ZERO <= buf[i] <= NINE:
        if written < MAX_WRITTEN_EXPONENT:
            written = written * 10 + (buf[i] - ZERO)
        i += 1
    return i, True, exponent_sign * written


@njit(cache=True, nogil=True, inline="always")
def _scale_by_power_of_ten(mantissa, exponent):
    """``mantissa * 10**exponent`` as a float64.

    With ``|exponent| <= 22`` this is one multiplication or division by an exact power of ten,
    so a single rounding; beyond, the power is applied in exact steps of 10**22 first.
    """
    value = float(mantissa)
    if mantissa == 0:
        return value  # 0e99999 needs no scaling (and no loop over its exponent)
    while exponent > 22:
        value *= POWERS_OF_TEN[22]
        exponent -= 22
    while exponent < -22:
        value /= POWERS_OF_TEN[22]
        exponent += 22
    if exponent >= 0:
        return value * POWERS_OF_TEN[exponent]
    return value / POWERS_OF_TEN[-exponent]


@njit(cache=True, nogil=True)
def _line_end(buf, start):
    end = start
    while end < len(buf) and buf[end] != NEWLINE:
        end += 1
    return end


@njit(cache=True, nogil=True)
def _content_end(buf, start, end):
    if end > start and buf[end - 1] == CR:
        return end - 1
    return end


@njit(cache=True, nogil=True)
def _is_blank_line(buf, start, stop):
    for k in range(start, stop):
        if not _is_blank(buf[k]):
            return False
    return True


@njit(cache=True, nogil=True)
def parse_delimited_kernel(buf, delimiter, values, starts, lines):
    """Fill ``values[row, column]`` from delimiter-separated lines; see ``parsing.parse_delimited``.

    Returns ``(rows, bad_line, error_code)``.
    """
    width = values.shape[1]
    row = 0
    line = 0
    pos = 0
    while pos < len(buf):
        end = _line_end(buf, pos)
        stop = _content_end(buf, pos, end)
        if not _is_blank_line(buf, pos, stop):
            column = 0
            field_start = pos
            while True:
                field_end = field_start
                while field_end < stop and buf[field_end] != delimiter:
                    field_end += 1
                if column >= width:
                    return row, line, WRONG_FIELD_COUNT
                ok, value = parse_number(buf, field_start, field_end)
                if not ok:
                    return row, line, NOT_A_NUMBER
                values[row, column] = value
                column += 1
                if field_end >= stop:
                    break
                field_start = field_end + 1
            if column != width:
                return row, line, WRONG_FIELD_COUNT
            starts[row] = pos
            lines[row] = line
            row += 1
        line += 1
        pos = end + 1
    return row, -1, OK


@njit(cache=True, nogil=True)
def _find_stream(buf, start, end, names, name_starts):
    for s in range(len(name_starts) - 1):
        a, b = name_starts[s], name_starts[s + 1]
        if b - a == end - start:
            same = True
            for k in range(b - a):
                if names[a + k] != buf[start + k]:
                    same = False
                    break
            if same:
                return s
    return -1


@njit(cache=True, nogil=True)
def _token_end(buf, start, end):
    while start < end and not _is_blank(buf[start]):
        start += 1
    return start


@njit(cache=True, nogil=True)
def _find_colon(buf, start, end):
    """Position of the first ``:`` in ``buf[start:end]``, or -1."""
    for p in range(start, end):
        if buf[p] == COLON:
            return p
    return -1


@njit(cache=True, nogil=True)
def _parse_index(buf, start, end, dim):
    """``buf[start:end]`` as an index in ``0..dim-1`` (ASCII digits only), or -1."""
    if start >= end:
        return -1
    index = 0
    for p in range(start, end):
        if not ZERO <= buf[p] <= NINE:
            return -1
        index = index * 10 + (buf[p] - ZERO)
        if index >= dim:  # also stops a long run of digits before it overflows int64
            return -1
    return index


@njit(cache=True, nogil=True)
def _fill_dense(buf, start, end, out):
    """Parse the blank-separated values of ``buf[start:end]`` into ``out``; an error code.

    ``out`` is one stream's slice of a row: it must receive exactly ``len(out)`` values.
    """
    count = 0
    q = _skip_blanks(buf, start, end)
    while q < end:
        token_end = _token_end(buf, q, end)
        if count >= len(out):
            return WRONG_VALUE_COUNT
        ok, value = parse_number(buf, q, token_end)
        if not ok:
            # Only a token that is not a number is searched for ':', so well-formed dense
            # values pay nothing for the friendlier message about index:value entries.
            if _find_colon(buf, q, token_end) >= 0:
                return SPARSE_IN_DENSE
            return NOT_A_NUMBER
        out[count] = value
        count += 1
        q = _skip_blanks(buf, token_end, end)
    return OK if count == len(out) else WRONG_VALUE_COUNT


@njit(cache=True, nogil=True)
def _fill_sparse(buf, start, end, out, written_on_line, line):
    """Zero ``out``, then write each ``index:value`` of ``buf[start:end]`` at its index.

    A sparse vector is all zeros except the entries named, so the row slice is cleared first;
    any number of entries (none included) is valid. ``written_on_line[i] == line`` marks index
    ``i`` as already written on this line: comparing with the line number instead of clearing a
    set per line keeps a repeated index an O(1) check.
    """
    out[:] = 0.0
    q = _skip_blanks(buf, start, end)
    while q < end:
        token_end = _token_end(buf, q, end)
        colon = _find_colon(buf, q, token_end)
        if colon < 0:
            return NOT_INDEX_VALUE
        index = _parse_index(buf, q, colon, len(out))
        if index < 0:
            return BAD_INDEX
        if written_on_line[index] == line:
            return REPEATED_INDEX
        written_on_line[index] = line
        ok, value = parse_number(buf, colon + 1, token_end)
        if not ok:
            return NOT_A_NUMBER
        out[index] = value
        q = _skip_blanks(buf, token_end, end)
    return OK


@njit(cache=True, nogil=True)
def parse_ctf_kernel(buf, names, name_starts, column_starts, sparse, values, starts, lines):
    """Fill ``values`` from CNTK text format lines; see ``parsing.parse_ctf``.

    Stream ``s`` is named ``names[name_starts[s]:name_starts[s + 1]]``, owns the columns
    ``column_starts[s]:column_starts[s + 1]`` and holds ``index:value`` entries when
    ``sparse[s]``, plain values otherwise. Returns ``(rows, bad_line, error_code)``.
    """
    streams = len(name_starts) - 1
    seen = np.zeros(streams, dtype=np.bool_)
    written_on_line = np.full(values.shape[1], -1, dtype=np.int64)
    row = 0
    line = 0
    pos = 0
    while pos < len(buf):
        end = _line_end(buf, pos)
        stop = _content_end(buf, pos, end)
        if not _is_blank_line(buf, pos, stop):
            p = pos
            while p < stop and buf[p] != BAR:  # an optional sequence id comes first
                p += 1
            if p >= stop:
                return row, line, NO_STREAM
            seen[:] = False
            while p < stop:
                p += 1  # past the '|'
                name_start = p
                while p < stop and buf[p] != BAR and not _is_blank(buf[p]):
                    p += 1
                name_end = p
                while p < stop and buf[p] != BAR:
                    p += 1
                values_end = p
                if name_end > name_start and buf[name_start] == HASH:
                    continue  # "|#..." is a comment up to the next '|'
                s = _find_stream(buf, name_start, name_end, names, name_starts)
                if s < 0:
                    return row, line, UNKNOWN_STREAM
                if seen[s]:
                    return row, line, REPEATED_STREAM
                seen[s] = True
                a, b = column_starts[s], column_starts[s + 1]
                if sparse[s]:
                    error = _fill_sparse(buf, name_end, values_end, values[row, a:b],
                                         written_on_line[a:b], line)
                else:
                    error = _fill_dense(buf, name_end, values_end, values[row, a:b])
                if error != OK:
                    return row, line, error
            for s in range(streams):
                if not seen[s]:
                    return row, line, MISSING_STREAM
            starts[row] = pos
            lines[row] = line
            row += 1
        line += 1
        pos = end + 1
    return row, -1, OK
