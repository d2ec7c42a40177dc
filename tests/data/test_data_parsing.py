"""The Numba text parsers agree with their plain-Python references, values and errors alike."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minidl.data import parsing
from minidl.data.parsing import (NOT_A_NUMBER, OK, WRONG_FIELD_COUNT, parse_ctf,
                                 parse_ctf_reference, parse_delimited,
                                 parse_delimited_reference)

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
number_text = st.one_of(
    finite.map(repr),
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(lambda v: f"{v:.6g}"),
    st.integers(-10**12, 10**12).map(str),
    st.sampled_from(["nan", "-inf", "inf", "+1.5", "1.", ".5", "-0", "1E3", "2e-3", "007"]),
)


def assert_agree(got, expected):
    assert (got.bad_line, got.error) == (expected.bad_line, expected.error)
    np.testing.assert_array_equal(got.starts, expected.starts)
    np.testing.assert_array_equal(got.lines, expected.lines)
    # Correct rounding may differ in the last bit of float64 for long mantissas.
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-15, atol=0)
    with np.errstate(over="ignore"):  # huge float64 values become inf in float32, on both sides
        np.testing.assert_array_equal(got.values.astype(np.float32),
                                      expected.values.astype(np.float32))


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.lists(number_text, min_size=3, max_size=3), max_size=8),
       blank_every=st.integers(0, 3), crlf=st.booleans(), final_newline=st.booleans(),
       delimiter=st.sampled_from([",", ";", "\t"]))
def test_delimited_kernel_agrees_with_reference(rows, blank_every, crlf, final_newline,
                                                delimiter):
    newline = "\r\n" if crlf else "\n"
    lines = []
    for i, row in enumerate(rows):
        if blank_every and i % blank_every == 0:
            lines.append("  ")
        lines.append(delimiter.join(row))
    text = newline.join(lines) + (newline if final_newline else "")
    buf = text.encode()
    assert_agree(parse_delimited(buf, 3, delimiter.encode()),
                 parse_delimited_reference(buf, 3, delimiter.encode()))


@pytest.mark.parametrize("line, error", [
    ("1,2", WRONG_FIELD_COUNT), ("1,2,3,4", WRONG_FIELD_COUNT), ("1,,3", NOT_A_NUMBER),
    ("1,x,3", NOT_A_NUMBER), ("1,2e,3", NOT_A_NUMBER), ("1,--2,3", NOT_A_NUMBER),
    ("1,2 3,4", NOT_A_NUMBER), ("1,.,3", NOT_A_NUMBER), ("1,nanx,3", NOT_A_NUMBER),
    ("1, 2 ,3", OK),
])
def test_delimited_errors_agree_and_point_at_the_line(line, error):
    buf = f"0,0,0\n\n{line}\n9,9,9\n".encode()
    got = parse_delimited(buf, 3, b",")
    assert_agree(got, parse_delimited_reference(buf, 3, b","))
    assert got.error == error
    assert got.bad_line == (-1 if error == OK else 2)


def test_numbers_parse_to_the_correctly_rounded_float32():
    values = np.random.default_rng(0).standard_normal(2000).astype(np.float32)
    values *= np.float32(10.0) ** np.random.default_rng(1).integers(-30, 30, 2000).astype(
        np.float32)
    text = "\n".join(f"{v!r},{v:.9g}" for v in values.astype(np.float64).tolist()).encode()
    parsed = parse_delimited(text, 2, b",")
    np.testing.assert_array_equal(parsed.values[:, 0].astype(np.float32), values)
    np.testing.assert_array_equal(parsed.values[:, 1].astype(np.float32), values)


STREAMS = [(b"features", 3), (b"labels", 1)]
ctf_value = st.one_of(st.integers(-1000, 1000).map(str), finite.map(repr))


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(ctf_value, min_size=3, max_size=3), ctf_value,
                               st.booleans(), st.booleans(), st.booleans()), max_size=6))
def test_ctf_kernel_agrees_with_reference(rows):
    lines = []
    for i, (features, label, with_id, labels_first, comment) in enumerate(rows):
        parts = [f"|features {' '.join(features)}", f"|labels\t{label}"]
        if labels_first:
            parts.reverse()
        if comment:
            parts.insert(1, "|# a comment")
        lines.append((f"{i} " if with_id else "") + " ".join(parts))
    buf = ("\n".join(lines) + "\n").encode()
    assert_agree(parse_ctf(buf, STREAMS), parse_ctf_reference(buf, STREAMS))


@pytest.mark.parametrize("line, error", [
    ("0 1 0 1", parsing.NO_STREAM), ("|features 0 1 0 |label 1", parsing.UNKNOWN_STREAM),
    ("|features 0 1 0 |features 0 1 0 |labels 1", parsing.REPEATED_STREAM),
    ("|features 0 1 |labels 1", parsing.WRONG_VALUE_COUNT),
    ("|features 0 1 0 1 |labels 1", parsing.WRONG_VALUE_COUNT),
    ("|features 0 1 0", parsing.MISSING_STREAM),
    ("|features 0 1:1 0 |labels 1", parsing.SPARSE_IN_DENSE),
    ("|features 0 1 x |labels 1", NOT_A_NUMBER),
])
def test_ctf_errors_agree(line, error):
    buf = f"|features 1 2 3 |labels 0\n{line}\n".encode()
    got = parse_ctf(buf, STREAMS)
    assert_agree(got, parse_ctf_reference(buf, STREAMS))
    assert (got.bad_line, got.error) == (1, error)


# A dense stream, then a sparse one of dimension 6 written as index:value pairs.
SPARSE_STREAMS = [(b"features", 2), (b"words", 6, True)]


def test_sparse_entries_land_at_their_index_and_the_rest_is_zero():
    buf = b"|features 1 2 |words 3:1\n7 |words 0:0.5 5:-2 |features 3 4\n|features 5 6 |words\n"
    expected = [[1, 2, 0, 0, 0, 1, 0, 0], [3, 4, 0.5, 0, 0, 0, 0, -2], [5, 6, 0, 0, 0, 0, 0, 0]]
    for parse in (parse_ctf, parse_ctf_reference):
        parsed = parse(buf, SPARSE_STREAMS)
        assert parsed.error == OK
        np.testing.assert_array_equal(parsed.values, expected)


# Entries of the sparse stream: mostly valid pairs, sometimes one of every kind of mistake, so
# that the agreement covers the error codes as well as the values.
sparse_entry = st.one_of(
    st.tuples(st.integers(0, 5), ctf_value).map(lambda p: f"{p[0]}:{p[1]}"),
    st.sampled_from(["6:1", "-1:1", "+1:1", "3", "a:1", "2:x", "2:", ":1", "1:2:3", "01:1",
                     "99999999999999999999999:1", "1.0:1"]),
)


# Values of the dense stream: numbers, now and then a sparse entry or a word where a number
# belongs, and between 1 and 3 of them where 2 are declared.
dense_entry = st.one_of(ctf_value, ctf_value, st.sampled_from(["1:1", "x", "0:"]))


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(dense_entry, min_size=1, max_size=3),
                               st.lists(sparse_entry, max_size=4), st.booleans(), st.booleans()),
                     max_size=6))
def test_ctf_kernel_agrees_with_reference_on_sparse_streams(rows):
    lines = []
    for features, entries, sparse_first, crlf in rows:
        parts = [f"|features {' '.join(features)}", f"|words {' '.join(entries)}"]
        if sparse_first:
            parts.reverse()
        lines.append(" ".join(parts) + ("\r" if crlf else ""))
    buf = ("\n".join(lines) + "\n").encode()
    assert_agree(parse_ctf(buf, SPARSE_STREAMS), parse_ctf_reference(buf, SPARSE_STREAMS))


@pytest.mark.parametrize("entries, error", [
    ("6:1", parsing.BAD_INDEX), ("-1:1", parsing.BAD_INDEX), ("x:1", parsing.BAD_INDEX),
    ("1.5:1", parsing.BAD_INDEX), ("2", parsing.NOT_INDEX_VALUE),
    ("0:1 2", parsing.NOT_INDEX_VALUE), ("2:x", NOT_A_NUMBER), ("2:", NOT_A_NUMBER),
    ("1:1 1:2", parsing.REPEATED_INDEX), ("0:1\t5:2", OK), ("", OK),
])
def test_sparse_errors_agree_and_point_at_the_line(entries, error):
    buf = f"|features 1 2 |words 0:1\n\n|features 1 2 |words {entries}\n".encode()
    got = parse_ctf(buf, SPARSE_STREAMS)
    assert_agree(got, parse_ctf_reference(buf, SPARSE_STREAMS))
    assert (got.bad_line, got.error) == ((-1, OK) if error == OK else (2, error))


# Each case drives one step of parse_number: blanks, sign, the special words, digits before and
# after the point (beyond the 18 kept in the mantissa too), the exponent and its cap, scaling.
NUMBER_CASES = ["0", "-0", "+1.5", "1.", ".5", "007", "1e3", "1E+3", "2e-3", " 3.25\t",
                "123456789012345678901234", "0.000000000000000000000000123456789",
                "1" + "0" * 30 + ".5", "1.23456789012345678901234567", "1e308", "1e309",
                "1e-400", "4.9e-324", "2.5e-310", "1e99999999999", "-1e-99999999999",
                "0e999999", "1e" + "9" * 30, "5e-" + "9" * 30, "00000000000000000000123.25",
                "1e22", "1e23", "1e-22", "1e-23", "3e45", "3e-45",
                "nan", "NaN", "-inf", "+Infinity", "INF"]
NOT_NUMBERS = ["", "  ", "-", "+", ".", "e5", ".e5", "1e", "1e+", "1.5.2", "1x", "--1", "+-1",
               "nanx", "in", "infinit", "1 2", "0x10", "1_000", "1e5.5"]


@pytest.mark.parametrize("text", NUMBER_CASES)
def test_parse_number_reads_what_python_reads(text):
    from minidl.data.parse_kernels import parse_number

    ok, value = parse_number(np.frombuffer(text.encode(), np.uint8), 0, len(text))
    expected = float(text)
    assert ok
    if np.isnan(expected):
        assert np.isnan(value)
        return
    assert np.signbit(value) == np.signbit(expected)  # -0 and -1e-99999 keep their sign
    # Mantissas longer than 18 digits may differ from correct rounding in float64's last bit.
    np.testing.assert_allclose(value, expected, rtol=1e-15, atol=0)
    with np.errstate(over="ignore"):  # 1e308 is inf in float32, on both sides
        assert np.float32(value) == np.float32(expected)


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_parse_number_refuses_what_is_not_a_decimal_number(text):
    from minidl.data.parse_kernels import parse_number

    ok, _ = parse_number(np.frombuffer(text.encode(), np.uint8), 0, len(text))
    assert not ok


def test_parse_number_reads_only_its_range():
    from minidl.data.parse_kernels import parse_number

    buf = np.frombuffer(b"12,-3.5e1,x", np.uint8)
    assert parse_number(buf, 3, 9) == (True, -35.0)
    assert parse_number(buf, 0, 1) == (True, 1.0)
    assert parse_number(buf, 9, 9)[0] is False
