"""The Numba checksum kernel must agree with the NumPy reference that defines it."""

import re
from pathlib import Path

import numpy as np
import pytest

from minidl.io import checksum as ck
from minidl.io.checksum_kernels import partial_sum_kernel, partial_sum_parallel
from minidl.io.mix64 import mix64, mix64_int


def test_known_digests_are_stable():
    # Pinned so that files written today stay readable (SPEC.md quotes these values).
    assert ck.checksum_reference(b"") == 0
    assert ck.checksum_reference(b"minidl") == ck.checksum(b"minidl")
    assert ck.checksum_reference(b"minidl") == 0x28B35F7E49309365


@pytest.mark.parametrize("n_words,first", [(0, 0), (1, 0), (7, 3), (1000, 12345), (70_001, 2**40)])
def test_kernel_agrees_with_reference(n_words, first):
    words = np.random.default_rng(n_words).integers(0, 2**64, n_words, dtype=np.uint64)
    expected = ck.partial_sum_reference(words, first)
    assert partial_sum_kernel(words, first) == expected
    assert partial_sum_parallel(words, first) == expected


def test_parallel_blocks_agree_with_one_pass(monkeypatch):
    from minidl.io import checksum_kernels
    monkeypatch.setattr(checksum_kernels, "BLOCK_WORDS", 1000)
    words = np.random.default_rng(0).integers(0, 2**64, 10_007, dtype=np.uint64)
    assert partial_sum_parallel(words, 5) == ck.partial_sum_reference(words, 5)


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 1000, (1 << 20) + 13])
def test_fast_checksum_agrees_with_reference(size):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    assert ck.checksum(data) == ck.checksum_reference(data)


def test_streaming_in_odd_pieces_equals_one_shot():
    data = np.random.default_rng(1).integers(0, 256, 3_000_003, dtype=np.uint8)
    stream = ck.StreamingChecksum()
    cuts = [0, 1, 2, 9, 17, 100_001, 1_200_000, 2_999_999, len(data)]
    for a, b in zip(cuts, cuts[1:]):
        stream.update(data[a:b])
    assert stream.digest() == ck.checksum_reference(data)


def test_checksum_detects_swapped_words_and_length():
    a = np.arange(16, dtype=np.uint64)
    b = a.copy()
    b[[3, 4]] = b[[4, 3]]
    assert ck.checksum(a) != ck.checksum(b)
    assert ck.checksum(b"abc") != ck.checksum(b"abc\0")


def test_mix64_on_python_integers_agrees_with_mix64_on_arrays():
    # Pinned: a changed constant or shift in either version changes these.
    values = [0, 1, 2**63, 2**64 - 1, *np.random.default_rng(1).integers(0, 2**64, 50,
                                                                         dtype=np.uint64)]
    assert [mix64_int(int(v)) for v in values] == \
        [int(z) for z in mix64(np.array(values, dtype=np.uint64))]
    assert mix64_int(0) == 0
    assert mix64_int(1) == 0x5692161D100B05E5


def test_the_mixing_constants_are_written_once():
    package = Path(ck.__file__).parents[1]
    holders = sorted(path.relative_to(package).as_posix() for path in package.rglob("*.py")
                     if re.search(r"0x(BF58476D1CE4E5B9|94D049BB133111EB|9E3779B97F4A7C15)",
                                  path.read_text(), flags=re.I))
    assert holders == ["io/mix64.py"]
