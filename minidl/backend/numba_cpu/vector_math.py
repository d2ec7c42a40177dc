"""exp(-y) and the normal distribution's tail written so that LLVM can vectorise the loops using them.

Numba compiles ``math.exp`` and ``math.erfc`` to calls into the C library, one element at a
time: an exact GELU over a transformer's (batch·seq, 4·d) activations spent ~15 ns per element
there, most of an attention block's elementwise time. The functions below use only arithmetic,
comparisons (which become selects) and bit casts, so a loop calling them runs a whole vector
register of lanes per instruction.

Two precisions. :func:`exp_of_negative` computes in float64 with ~3e-13 relative error, for
the float32 softmax and recurrent cells, which accumulate exps in float64. The ``_float32``
functions compute in float32 -- twice the lanes, polynomials half as long -- for the float32
GELU, whose results they give within a few float32 ulps (the kernel tests measure the bound);
float64 arrays keep the C library.

Loops that call these must be compiled with ``error_model="numpy"``: under Numba's default
Python error model every division first tests for a zero divisor to raise
``ZeroDivisionError``, and that branch stops LLVM from vectorising the loop. They should also
pass ``fastmath=CONTRACT_TO_FMA`` so that the polynomials run as fused multiply-adds.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["exp_of_negative", "NORMAL_DENSITY_SCALE", "CONTRACT_TO_FMA",
           "scaled_exp_of_negative_float32", "scaled_normal_tail_float32", "EXP_SCALE_FLOAT32",
           "UNSCALE_FLOAT32"]

CONTRACT_TO_FMA = {"contract"}  # a set: Numba takes fastmath as a bool, set or dict
"""Numba ``fastmath`` flags for loops calling these functions: only the licence to fuse a·b + c
into one fused multiply-add. Without it LLVM keeps every Horner step as a multiply and an add
(two roundings, two instructions); with it the step is one FMA rounded once, never less
accurate. None of the other fast-math licences (reassociation, assuming no NaN or infinity,
approximate division) is given, so the evaluation order and the NaN/inf handling stay as
written. Measured on AVX-512 with the float64 GELU of an earlier version: forward 2.6 -> 1.7 ns
per element, backward 2.75 -> 1.8."""


@intrinsic
def _float64_from_bits(typingctx, bits):
    """The float64 whose IEEE-754 bit pattern is the int64 ``bits`` (a register move, no math)."""
    signature = types.float64(types.int64)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return signature, codegen


# ln 2 split in two (Cody and Waite): k·LN2_HIGH is exact for every k below 2^11, so
# y - k·ln2 keeps all its digits even where it nearly cancels.
_LN2_HIGH = 6.93147180369123816490e-01
_LN2_LOW = 1.90821492927058770002e-10
_LOG2_E = 1.0 / math.log(2.0)
# Below exp(-708) float64 loses normal precision; everything that small is 0 to a float32 result.
_LARGEST_EXPONENT = 708.0
# 1/n! for n = 10 down to 0: the Taylor coefficients of exp, highest power first.
_EXP_SERIES = tuple(1.0 / math.factorial(n) for n in range(10, -1, -1))


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def exp_of_negative(y):
    """exp(-y) for y >= 0 or NaN: 0 for y >= 708 (where float64 turns subnormal), NaN for NaN.

    exp(-y) = 2^-k · exp(r) with k = round(y / ln 2) and r = k·ln 2 - y in [-ln2/2, ln2/2].
    exp(r) is its Taylor series to r^10 (relative error below 3e-13 there), and 2^-k is built
    directly as a float64 bit pattern: exponent field 1023 - k, mantissa 0.
    """
    inside = y < _LARGEST_EXPONENT  # False for NaN too
    reduced = y if inside else 0.0  # keeps the integer conversion below defined
    k = math.floor(reduced * _LOG2_E + 0.5)
    r = (k * _LN2_HIGH - reduced) + k * _LN2_LOW
    series = _EXP_SERIES[0]  # Horner: (((c10 r + c9) r + c8) r + ...) r + c0
    for coefficient in _EXP_SERIES[1:]:
        series = series * r + coefficient
    power_of_two = _float64_from_bits((1023 - np.int64(k)) << 52)
    if inside:
        return series * power_of_two
    return 0.0 if y >= _LARGEST_EXPONENT else y  # y is NaN in the last case


NORMAL_DENSITY_SCALE = 1.0 / math.sqrt(2.0 * math.pi)
"""phi(v) = NORMAL_DENSITY_SCALE · exp(-v²/2), the standard normal density."""


# ---------------------------------------------------------------------------------------------
# float32: twice the lanes of float64 per instruction, and shorter polynomials, for float32 GELU.
#
# Everything below runs in float32 arithmetic, but the exponent's argument y is carried as an
# unevaluated sum y_high + y_low. An error e in y becomes a relative error e in exp(-y), and y
# reaches ~100 in GELU's tails, where one float32 rounding step is ~8e-6: a hundred ulps.
# For y = v²/2 the pair is exact: v² = high + low with low = fma(v, v, -high), the rounding
# error of the product, which a fused multiply-add returns exactly.
#
# Results as small as float32's subnormals (2^-149 ~ e^-103) must stay accurate to a few of
# their ulps after being multiplied by v, so exp(-y) is returned scaled by 2^64: normal in
# float32 for every y the functions accept, and unscaled by the caller with one exact
# power-of-two multiply at the very end, the result's only rounding where it is subnormal.

EXP_SCALE_FLOAT32 = np.float32(2.0 ** 64)
"""The factor by which the float32 functions' exponentials are returned too large."""
UNSCALE_FLOAT32 = np.float32(2.0 ** -64)
"""1 / :data:`EXP_SCALE_FLOAT32`: multiply a scaled result by it once, last."""


@intrinsic
def _float32_from_bits(typingctx, bits):
    """The float32 whose IEEE-754 bit pattern is the int32 ``bits``."""
    signature = types.float32(types.int32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())
    return signature, codegen


@intrinsic
def _fused_multiply_add(typingctx, a, b, c):
    """a·b + c for float32 values, rounded once (LLVM's ``fma``; one instruction with FMA3)."""
    signature = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, sig, args):
        return builder.fma(*args)
    return signature, codegen


# exp(-y)·2^64 < 2^-120 for y >= 128: below float32's smallest subnormal even after the
# callers' factors (at most ~2^30) and the unscaling; and 2^(64-k) stays a normal float32.
_FLOAT32_LARGEST_EXPONENT = np.float32(128.0)
# ln 2 in float32 halves: ln2_high has 16 significant bits, so k·ln2_high is exact for k < 256.
_LN2_HIGH_FLOAT32 = np.float32(0.693145751953125)
_LN2_LOW_FLOAT32 = np.float32(math.log(2.0) - 0.693145751953125)
_LOG2_E_FLOAT32 = np.float32(_LOG2_E)
# Adding then subtracting 1.5·2^23 rounds a float32 below 2^22 to the nearest integer: the sum's
# last mantissa bit is worth 1. (Valid because no fast-math licence lets LLVM cancel the pair.)
_ROUNDER_FLOAT32 = np.float32(1.5 * 2.0 ** 23)
# 1/n! for n = 7 down to 0: on |r| <= ln2/2 the series' remainder is below 6e-9 relative,
# a tenth of a float32 ulp.
_EXP_SERIES_FLOAT32 = tuple(np.float32(1.0 / math.factorial(n)) for n in range(7, -1, -1))
_ZERO_FLOAT32 = np.float32(0.0)
_HALF_FLOAT32 = np.float32(0.5)


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def scaled_exp_of_negative_float32(y_high, y_low):
    """exp(-(y_high + y_low))·2^64 in float32, for y_high >= 0 or NaN and |y_low| at most about
    one float32 ulp of y_high: 0 for y_high >= 128, NaN for NaN.

    exp(-y) = 2^-k · exp(r) as in :func:`exp_of_negative`: k = round(y_high / ln 2),
    r = k·ln2_high - y_high (exact: both have few bits and nearly cancel) + k·ln2_low - y_low,
    exp(r) by its Taylor series to r^7 (relative error ~1 ulp, from r's last rounding), and
    2^(64-k) built as float32 bits: exponent field 127 + 64 - k, mantissa 0.
    """
    inside = y_high < _FLOAT32_LARGEST_EXPONENT  # False for NaN too
    high = y_high if inside else _ZERO_FLOAT32
    k = (high * _LOG2_E_FLOAT32 + _ROUNDER_FLOAT32) - _ROUNDER_FLOAT32
    r = _fused_multiply_add(k, _LN2_HIGH_FLOAT32, -high)
    r = _fused_multiply_add(k, _LN2_LOW_FLOAT32, r) - y_low
    series = _EXP_SERIES_FLOAT32[0]  # Horner from the top (starting from 0 costs an FMA)
    for coefficient in _EXP_SERIES_FLOAT32[1:]:
        series = series * r + coefficient
    power_of_two = _float32_from_bits((np.int32(127 + 64) - np.int32(k)) << np.int32(23))
    if inside:
        return series * power_of_two
    return _ZERO_FLOAT32 if y_high >= _FLOAT32_LARGEST_EXPONENT else y_high


# erfc(a) = t · Q(t) · exp(-a²) with t = 2 / (2 + a), a >= 0 (the substitution of Numerical
# Recipes' erfc): t maps a in [0, inf) onto (0, 1] and makes Q smooth there (Q(1) = 1,
# Q(0) = 1/(2 sqrt(pi))), so one polynomial fits it. With a = |v| / sqrt 2, t is
# c / (c + |v|), c = 2 sqrt 2: taking c rounded to float32 as the definition of t (the fit uses
# the same c) leaves two roundings in t, where 2 / (2 + |v|·sqrt ½) has three, and each is
# amplified up to 2.3 times in t·Q(t). For float32: degree 8, fitted on t in [0.1502, 1] only
# (|v| <= 16, where the exponential below is still nonzero) by least squares in relative error,
# each coefficient rounded to float32 and the lower ones refitted to absorb its rounding.
# Largest relative error of the float32 coefficients: 5.2e-8; evaluated in float32 by Horner's
# rule, 1.4e-7 (about one ulp of Q; degree 9 only brings that to 1.3e-7).
# scripts/fit_normal_tail.py --degree 8 recomputes them. Stored halved (exactly: a power of
# two), so that the series is Q/2 and t · series · exp(-a²) the tail erfc(a)/2 itself.
_HALF_TAIL_SERIES_FLOAT32 = tuple(np.float32(c) * _HALF_FLOAT32 for c in (
    0.2820817232131958, 0.2824658751487732, 0.2423868030309677, 0.20574574172496796,
    -0.03435216471552849, 0.28995630145072937, -0.49813586473464966, 0.2900976836681366,
    -0.06024615094065666,
)[::-1])
_TAIL_SCALE_FLOAT32 = np.float32(2.0 * math.sqrt(2.0))  # c


@njit(cache=True, inline="always", error_model="numpy", fastmath=CONTRACT_TO_FMA)
def scaled_normal_tail_float32(v):
    """(Phi(-|v|)·2^64, exp(-v²/2)·2^64) for a float32 ``v``, in float32: the standard normal's
    smaller tail beyond |v|, and its density up to the factor :data:`NORMAL_DENSITY_SCALE`
    (shared, since both need the same exp). NaN gives NaN; |v| >= 16 gives (0, 0).

    Phi(-|v|) = erfc(a) / 2 with a = |v| / sqrt 2 and erfc(a) = t · Q(t) · exp(-a²), a² = v²/2.
    The tail is computed directly, never as 1 - Phi(|v|), so it keeps its relative accuracy
    however small it gets. Phi(v) is the tail for v < 0 and 1 - tail otherwise.
    """
    t = _TAIL_SCALE_FLOAT32 / (_TAIL_SCALE_FLOAT32 + abs(v))
    half_q = _HALF_TAIL_SERIES_FLOAT32[0]
    for coefficient in _HALF_TAIL_SERIES_FLOAT32[1:]:
        half_q = half_q * t + coefficient
    square = v * v
    square_error = _fused_multiply_add(v, v, -square)  # v² = square + square_error exactly
    gaussian = scaled_exp_of_negative_float32(_HALF_FLOAT32 * square,
                                              _HALF_FLOAT32 * square_error)
    return t * half_q * gaussian, gaussian
