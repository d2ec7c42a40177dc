"""``mix64``, the bijective 64-bit scrambler of the minidl checksum (splitmix64's finaliser).

    z ^= z >> 30;  z *= 0xBF58476D1CE4E5B9;  z ^= z >> 27;  z *= 0x94D049BB133111EB;  z ^= z >> 31

with every product taken modulo 2**64. Each step is invertible (an xor with a right shift of
itself, a product with an odd number), so distinct words stay distinct, while the two multiplies
spread every input bit over the whole word.

The constants are written here and nowhere else. ``mix64`` is written once for uint64 values,
where multiplication wraps by itself: NumPy arrays (the reference in ``checksum.py``) and Numba's
scalars (the kernel in ``checksum_kernels.py``) run the same three lines. ``mix64_int`` is the
same function on one Python integer, which never wraps, hence its masks: it serves the
small-buffer path, where a NumPy call per word would cost more than the arithmetic.
"""

from __future__ import annotations

import numpy as np

# The 64-bit golden ratio, 2**64 / phi: it spreads word positions (see ``checksum.py``).
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
# splitmix64's multipliers and shifts.
MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
MIX_2 = np.uint64(0x94D049BB133111EB)
SHIFT_1, SHIFT_2, SHIFT_3 = np.uint64(30), np.uint64(27), np.uint64(31)

MASK_64 = 0xFFFFFFFFFFFFFFFF
_MIX_1, _MIX_2 = int(MIX_1), int(MIX_2)
_SHIFT_1, _SHIFT_2, _SHIFT_3 = int(SHIFT_1), int(SHIFT_2), int(SHIFT_3)


def mix64(z):
    """Scramble uint64 values bijectively: elementwise on a NumPy uint64 array, or one Numba
    uint64 scalar inside a compiled kernel."""
    z = (z ^ (z >> SHIFT_1)) * MIX_1
    z = (z ^ (z >> SHIFT_2)) * MIX_2
    return z ^ (z >> SHIFT_3)


def mix64_int(z: int) -> int:
    """``mix64`` on one Python integer from 0 to 2**64 - 1."""
    z = ((z ^ (z >> _SHIFT_1)) * _MIX_1) & MASK_64
    z = ((z ^ (z >> _SHIFT_2)) * _MIX_2) & MASK_64
    return z ^ (z >> _SHIFT_3)
