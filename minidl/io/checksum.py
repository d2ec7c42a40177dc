"""The per-tensor and header checksum of the minidl format.

The checksum is a *sum of mixed words*:

    words  = the bytes, zero-padded to a multiple of 8, read as little-endian uint64
    acc    = sum over i of mix64(words[i] XOR (i * GOLDEN))          (mod 2**64)
    digest = mix64(acc XOR nbytes)

``mix64`` is a bijective 64-bit scrambler (the splitmix64 finaliser, in ``mix64.py``).
Because each word is scrambled together with its position, moving or changing any word changes its
term, and because the terms are *added*, the sum can be computed in any order: blocks
can be hashed independently (in parallel, or one chunk at a time while streaming) and
the partial sums simply added.  Nothing here is cryptographic; it detects accidents
(bit rot, truncation, torn writes), while encryption (AES-GCM) detects tampering.

This module holds the plain-NumPy reference, which is short enough to reimplement from
``SPEC.md`` in any language.  ``checksum_kernels`` holds the Numba version used for
large buffers; a test checks that the two agree.
"""

from __future__ import annotations

import numpy as np

from .mix64 import GOLDEN, MASK_64, mix64, mix64_int

# Below this size the NumPy reference is fast enough and avoids compiling the kernel
# (which costs about a second the first time a process ever uses it).
KERNEL_THRESHOLD_BYTES = 1 << 20


def as_byte_view(data) -> np.ndarray:
    """Any contiguous buffer (bytes, memoryview, ndarray) as a flat uint8 array, no copy."""
    if isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            raise ValueError("checksums are defined over contiguous bytes")
        return data.reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


def partial_sum_reference(words: np.ndarray, first_index: int) -> int:
    """Sum of mix64(word ^ position * GOLDEN) for ``words`` starting at word ``first_index``."""
    with np.errstate(over="ignore"):
        positions = np.arange(first_index, first_index + len(words), dtype=np.uint64) * GOLDEN
        terms = mix64(words ^ positions)
        return int(np.add.reduce(terms, dtype=np.uint64)) if len(terms) else 0


def finish(acc: int, nbytes: int) -> int:
    """Turn the running sum of a buffer of ``nbytes`` bytes into its digest."""
    return int(mix64(np.array([(acc ^ nbytes) & MASK_64], dtype=np.uint64))[0])


def checksum_reference(data) -> int:
    """The digest of a contiguous buffer, in plain NumPy (the definition)."""
    raw = as_byte_view(data)
    nbytes = len(raw)
    padded = np.zeros((nbytes + 7) // 8 * 8, dtype=np.uint8)
    padded[:nbytes] = raw
    words = padded.view("<u8")
    return finish(partial_sum_reference(words, 0), nbytes)


def _partial_sum(words: np.ndarray, first_index: int) -> int:
    """Partial sum over aligned words, using the compiled kernel for large inputs."""
    if words.nbytes < KERNEL_THRESHOLD_BYTES:
        return partial_sum_reference(words, first_index)
    from .checksum_kernels import partial_sum_parallel

    return partial_sum_parallel(words, first_index)


class StreamingChecksum:
    """Digest of a byte stream fed in pieces of any size (the pieces need not be 8-aligned).

    Bytes that do not complete a word yet are carried over to the next ``update``; the
    word position keeps counting across pieces, so the result equals ``checksum(whole)``.
    """

    def __init__(self) -> None:
        self._acc = 0
        self._nbytes = 0
        self._carry = b""

    def update(self, data) -> None:
        """Add the next piece of the stream."""
        raw = as_byte_view(data)
        if len(raw) == 0:
            return
        if self._carry:
            need = 8 - len(self._carry)
            self._carry += raw[:need].tobytes()
            raw = raw[need:]
            if len(self._carry) < 8:
                return
            self._add_words(np.frombuffer(self._carry, dtype="<u8"))
            self._carry = b""
        whole = len(raw) // 8 * 8
        if whole:
            self._add_words(raw[:whole].view("<u8"))
        self._carry = raw[whole:].tobytes()

    def _add_words(self, words: np.ndarray) -> None:
        first_index = self._nbytes // 8
        self._acc = (self._acc + _partial_sum(words, first_index)) & MASK_64
        self._nbytes += 8 * len(words)

    def digest(self) -> int:
        """The digest of everything fed so far."""
        acc, nbytes = self._acc, self._nbytes
        if self._carry:
            last = np.frombuffer(self._carry.ljust(8, b"\0"), dtype="<u8")
            acc = (acc + partial_sum_reference(last, nbytes // 8)) & MASK_64
            nbytes += len(self._carry)
        return finish(acc, nbytes)


# Below this size plain Python integers beat NumPy's per-call overhead: files with many
# small tensors (and every index entry's descriptor) take this path.
SMALL_BYTES = 256
_GOLDEN = int(GOLDEN)


def _checksum_small(raw: bytes) -> int:
    nbytes = len(raw)
    padded = raw + bytes(-nbytes % 8)
    acc = 0
    for index in range(len(padded) // 8):
        word = int.from_bytes(padded[8 * index:8 * index + 8], "little")
        acc += mix64_int(word ^ ((index * _GOLDEN) & MASK_64))
    return mix64_int((acc & MASK_64) ^ nbytes)


def checksum(data) -> int:
    """The digest of a contiguous buffer (fast paths for small and for large buffers)."""
    if isinstance(data, (bytes, bytearray, memoryview)) and len(data) <= SMALL_BYTES:
        return _checksum_small(bytes(data))
    stream = StreamingChecksum()
    stream.update(data)
    return stream.digest()


def tensor_checksum(data_checksum: int, name: str, dtype: str, shape) -> int:
    """An index entry's checksum (format version 2): the stored bytes' checksum bound to
    the name, dtype and shape that say what those bytes mean.

    ``descriptor = UTF-8(name + "\\0" + dtype + "\\0" + dims joined by ",")`` and the result
    is ``mix64(data_checksum XOR checksum(descriptor))``: a header whose dtype was changed
    from ``float32`` to ``int32`` (same bytes, header checksum recomputed) no longer matches
    its tensor, so the bytes can never be read as something they are not.
    """
    descriptor = "\0".join([name, dtype, ",".join(str(int(d)) for d in shape)])
    return mix64_int(data_checksum ^ checksum(descriptor.encode("utf-8")))
