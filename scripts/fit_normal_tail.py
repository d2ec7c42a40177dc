"""Recompute the polynomial behind minidl.backend.numba_cpu.vector_math.scaled_normal_tail_float32.

    python scripts/fit_normal_tail.py [--degree 8]

Q(t) = erfc(a) · exp(a²) / t with a = |v| / sqrt 2 and t = c / (c + |v|), c = 2 sqrt 2 rounded
to float32, is fitted on t in [c / (c + 16), 1] (|v| <= 16, beyond which the kernel's
exponential is 0) by least squares in relative error at
300 Chebyshev points, Q evaluated to 30 significant digits. The coefficients are then fixed
from the highest power down: each is rounded to float32 and the lower ones are refitted, so
they absorb its rounding. Prints the coefficients (lowest power first) and the largest
relative error on a fine grid, of the polynomial and of its float32 Horner evaluation. Needs
mpmath (``pip install mpmath``), which the library itself never imports.
"""

from __future__ import annotations

import argparse

import mpmath
import numpy as np


SCALE = float(np.float32(2 * np.sqrt(2)))  # c: t = c / (c + |v|) is 2 / (2 + a) up to c's rounding


def scaled_tail(t):
    """Q(t) to the working precision."""
    t = mpmath.mpf(t)
    a = (SCALE / t - SCALE) / mpmath.sqrt(2)
    return mpmath.erfc(a) * mpmath.exp(a * a) / t


def float32_horner(coefficients, t):
    """The polynomial at float32 ``t``, each fused multiply-add rounded to float32 once."""
    total = np.zeros_like(t)
    for coefficient in coefficients[::-1]:
        total = (total.astype(np.float64) * t + np.float64(coefficient)).astype(np.float32)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degree", type=int, default=8)
    args = parser.parse_args()
    mpmath.mp.dps = 30
    lowest, count = SCALE / (SCALE + 16), 300
    nodes = [lowest + (1 - lowest) * (1 + mpmath.cos(mpmath.pi * (k + 0.5) / count)) / 2
             for k in range(count)]
    t = np.array([float(node) for node in nodes])
    q = np.array([float(scaled_tail(node)) for node in nodes])
    powers = np.vander(t, args.degree + 1, increasing=True)
    coefficients = np.zeros(args.degree + 1)
    for power in range(args.degree, -1, -1):  # relative least squares for the free powers
        remainder = q - powers[:, power + 1:] @ coefficients[power + 1:]
        fit = np.linalg.lstsq(powers[:, :power + 1] / q[:, None], remainder / q, rcond=None)[0]
        coefficients[power] = np.float32(fit[power])
    grid = np.linspace(lowest, 1, 5001)
    exact = np.array([float(scaled_tail(value)) for value in grid])
    error = np.max(np.abs(np.polynomial.polynomial.polyval(grid, coefficients) / exact - 1))
    in_float32 = float32_horner(coefficients.astype(np.float32), grid.astype(np.float32))
    print("coefficients:", ", ".join(repr(float(c)) for c in coefficients))
    print(f"largest relative error: {error:.2g}, evaluated in float32: "
          f"{np.max(np.abs(in_float32 / exact - 1)):.2g}")


if __name__ == "__main__":
    main()
