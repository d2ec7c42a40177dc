"""Recompute the polynomial behind minidl.backend.numba_cpu.vector_math.normal_tail.

    python scripts/fit_normal_tail.py [--degree 12]

Q(t) = erfc(a) · exp(a²) / t with t = 2 / (2 + a) is fitted by least squares in Chebyshev form
at 400 Chebyshev points of [0, 1], Q evaluated to 40 significant digits, then converted to
powers of t. Prints the coefficients (lowest power first) and the largest relative error on a
fine grid. Needs mpmath (``pip install mpmath``), which the library itself never imports.
"""

from __future__ import annotations

import argparse

import mpmath
import numpy as np


def scaled_tail(t):
    """Q(t) to the working precision; Q(0) = 1 / (2 sqrt(pi)) is the limit a -> inf."""
    t = mpmath.mpf(t)
    if t == 0:
        return 1 / (2 * mpmath.sqrt(mpmath.pi))
    a = 2 / t - 2
    return mpmath.erfc(a) * mpmath.exp(a * a) / t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--degree", type=int, default=12)
    args = parser.parse_args()
    mpmath.mp.dps = 40
    count = 400
    nodes = [(1 + mpmath.cos(mpmath.pi * (k + 0.5) / count)) / 2 for k in range(count)]
    t = np.array([float(node) for node in nodes])
    q = np.array([float(scaled_tail(node)) for node in nodes])
    fit = np.polynomial.chebyshev.Chebyshev.fit(t, q, args.degree, domain=[0, 1])
    powers = fit.convert(kind=np.polynomial.Polynomial, domain=[0, 1], window=[0, 1]).coef
    grid = np.linspace(0, 1, 5001)
    exact = np.array([float(scaled_tail(value)) for value in grid])
    error = np.max(np.abs(np.polynomial.polynomial.polyval(grid, powers) / exact - 1))
    print("coefficients:", ", ".join(repr(float(c)) for c in powers))
    print(f"largest relative error on [0, 1]: {error:.2g}")


if __name__ == "__main__":
    main()
