"""The GEMM kernel: C = A @ B, register-blocked, with double-buffered shared memory.

Why tiles. Computing C (M x N) from A (M x K) and B (K x N) reads each element of A N times and
each element of B M times. Straight from global memory (the GPU's DRAM, hundreds of cycles away)
that traffic, not the arithmetic, would set the speed. So a thread block takes a BM x BN tile of
C and walks along K in steps of BK: at each step the block copies a BM x BK slab of A and a
BK x BN slab of B into **shared memory** (on-chip, visible to the whole block) once, and every
thread then reads them from there many times.

Why each thread computes an 8 x 8 patch. Shared memory has a bandwidth limit too. A thread
computing a TM x TN patch of C keeps its 64 sums in registers and, per k, reads TM values of A
and TN of B from shared memory for TM·TN multiply-adds: 16 reads for 64 FMAs at 8 x 8 (4 x 4
patches did 8 for 16). 256 threads with 8 x 8 patches cover a 128 x 128 tile.

The layout in shared memory. The A slab is stored k-major (a_slab[k][m]), like B's
(b_slab[k][n]), so that at step k a thread's TM values of A are consecutive and load as vectors
(``ld.shared.v4``, :mod:`.vector_loads`). A thread's patch is two 4 x 4 halves BM/2 rows (and
BN/2 columns) apart rather than 8 neighbouring rows: then the eight threads that share one
memory transaction read eight consecutive 16-byte vectors, all 32 banks once, with no conflict.
Each slab row is padded by 4 elements: the A slab is written transposed (a thread's 4 loaded k
values go to 4 rows), and without the padding threads of a warp would hit the same bank in
different rows.

Double buffering. There are two slabs of each. While the block multiplies from one, each thread
has already fetched its share of the next step's slabs from global memory into registers; after
the multiply it stores them into the other slab, and one ``syncthreads`` per step separates the
steps (the slab being written is the one everybody finished reading a step ago). The global
loads' latency then overlaps with the arithmetic instead of stalling it.

Global loads. Each thread fetches 4 neighbouring elements of each operand per step, along the
operand's contiguous axis (a row of a plain operand, a column of a transposed one), as one
16-byte vector load when the host has checked that every such group starts 16-byte aligned
(leading dimension, offsets and the contiguous extent multiples of 4), else as 4 bounds-checked
scalar loads. Elements outside A or B load as 0, so edge tiles need no special case in the
multiply.

Compile-time shapes. Tile sizes, transpose flags, the alignment promise and the index width are
Python constants closed over by the kernel, so every loop over them has a constant trip count and
is unrolled by the compiler (the k loop, whose body is too long for that, is written out eight
steps at a time), local arrays become registers, and the multiplications by a stride of 1
vanish. Offsets inside a matrix are 32-bit integers when the host has checked that every offset
fits (the GPU's 64-bit multiply is several instructions): each product is cast to int32 as it
is formed, which is what lets the compiler keep it 32-bit (numba computes in 64 bits otherwise).
The per-block bases of the batch stay 64-bit, and the position of the next slabs is counted
along rather than divided out of the step number.

The batch. blockIdx.z counts the batch (up to three axes, decomposed once per block; each operand
has its own stride along each, 0 when one matrix is shared), and a summed batch axis (a
convolution's weight gradient sums over the images) is one more loop around k accumulating in
the same registers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import cuda, from_dtype, int32, int64

from .device import SIMULATED
from .vector_loads import load4

VECTOR = 4
"""Elements a thread fetches at once along an operand's contiguous axis."""
PADDING = 4
"""Elements added to each shared slab row (see the module's docstring)."""


@dataclass(frozen=True)
class Tiles:
    """One blocking of the product: a block computes ``rows x columns`` of C walking along k in
    steps of ``depth``; each thread a ``patch_rows x patch_columns`` patch."""

    rows: int
    columns: int
    depth: int
    patch_rows: int
    patch_columns: int

    @property
    def threads(self) -> int:
        return (self.rows // self.patch_rows) * (self.columns // self.patch_columns)

    def check(self) -> None:
        """The divisibility the kernel's mapping relies on."""
        for name, value in (("rows", self.rows), ("columns", self.columns),
                            ("depth", self.depth), ("patch_rows", self.patch_rows),
                            ("patch_columns", self.patch_columns)):
            if value % VECTOR:
                raise ValueError(f"Tiles.{name}={value} must be a multiple of {VECTOR}")
        if self.depth % 8:
            raise ValueError(f"Tiles.depth={self.depth} must be a multiple of 8 (the k loop is "
                             f"written out 8 steps at a time)")
        for slab in (self.rows * self.depth, self.depth * self.columns):
            if slab % (VECTOR * self.threads):
                raise ValueError(f"{self}: a slab of {slab} elements does not split into "
                                 f"{VECTOR}-element groups over {self.threads} threads")


if SIMULATED:
    # The simulator runs every thread as Python: the same mapping with 4 threads a block.
    LARGE = Tiles(16, 16, 8, 8, 8)
    SMALL = Tiles(8, 8, 8, 4, 4)
else:
    LARGE = Tiles(128, 128, 8, 8, 8)   # 256 threads, 2·2·8·132·4 B = 16.5 KiB shared (float32)
    SMALL = Tiles(64, 64, 16, 4, 4)    # 256 threads, for small or skinny products

_kernels: dict = {}


def gemm_kernel(tiles: Tiles, dtype, transpose_a: bool, transpose_b: bool, aligned_a: bool,
                aligned_b: bool, narrow: bool):
    """The GEMM for one blocking, dtype and pair of transpose flags; ``aligned_*``: the host
    promises 16-byte aligned groups of 4 along that operand's contiguous axis; ``narrow``: every
    offset inside a matrix fits in 32 bits."""
    dtype = np.dtype(dtype)
    key = (tiles, dtype, transpose_a, transpose_b, aligned_a, aligned_b, narrow)
    if key not in _kernels:
        tiles.check()
        _kernels[key] = _compile(tiles, dtype, transpose_a, transpose_b, aligned_a, aligned_b,
                                 narrow)
    return _kernels[key]


def _compile(tiles, dtype, transpose_a, transpose_b, aligned_a, aligned_b, narrow):
    BM, BN, BK = tiles.rows, tiles.columns, tiles.depth
    TM, TN = tiles.patch_rows, tiles.patch_columns
    THREADS = tiles.threads
    THREAD_COLUMNS = BN // TN
    # A thread's patch rows: VECTOR neighbours, then the next VECTOR rows ROW_GAP further on.
    ROW_GAP, COLUMN_GAP = BM // (TM // VECTOR), BN // (TN // VECTOR)
    A_ROW, B_ROW = BM + PADDING, BN + PADDING          # padded slab rows (one per k)
    A_SLAB, B_SLAB = BK * A_ROW, BK * B_ROW
    A_SLABS, B_SLABS = 2 * A_SLAB, 2 * B_SLAB          # double buffered
    A_GROUPS = BM * BK // (VECTOR * THREADS)           # groups of 4 each thread fetches
    B_GROUPS = BK * BN // (VECTOR * THREADS)
    numba_type = from_dtype(dtype)
    zero = dtype.type(0)
    index = int32 if narrow else int64
    alignment = None if SIMULATED else 16              # (the simulator takes no alignment)

    @cuda.jit(device=True, inline=True)
    def fetch(source, start, ld, rows, columns, row0, column0, along_rows, per_line, groups,
              aligned, t, registers):
        """This thread's groups of 4 of the (rows x columns) operand's next slab, into
        ``registers``: group g is the (t + g·THREADS)-th of the slab's groups, ``per_line`` to
        a line along its contiguous axis (a row when ``along_rows``, else a column)."""
        for g in range(groups):
            e = t + g * THREADS
            line, first = e // per_line, (e % per_line) * VECTOR
            if along_rows:
                r, c = line, first
            else:
                r, c = first, line
            if aligned:
                if row0 + r < rows and column0 + c < columns:
                    if along_rows:
                        at = start + index(index(row0 + r) * ld) + index(column0 + c)
                    else:
                        at = start + index(index(column0 + c) * ld) + index(row0 + r)
                    v0, v1, v2, v3 = load4(source, at)
                    registers[g, 0] = v0
                    registers[g, 1] = v1
                    registers[g, 2] = v2
                    registers[g, 3] = v3
                else:
                    for j in range(VECTOR):
                        registers[g, j] = zero
            else:
                for j in range(VECTOR):
                    rj = r if along_rows else r + j
                    cj = c + j if along_rows else c
                    value = zero
                    if row0 + rj < rows and column0 + cj < columns:
                        if along_rows:
                            value = source[start + index(index(row0 + rj) * ld)
                                            + index(column0 + cj)]
                        else:
                            value = source[start + index(index(column0 + cj) * ld)
                                            + index(row0 + rj)]
                    registers[g, j] = value

    @cuda.jit(device=True, inline=True)
    def multiply(a_slabs, a_at, b_slabs, b_at, a_fragment, b_fragment, patch):
        """One k of the block's slabs: the patch += (its TM values of A) ⊗ (its TN of B), both
        read as 16-byte vectors."""
        for h in range(TM // VECTOR):
            v0, v1, v2, v3 = load4(a_slabs, a_at + h * ROW_GAP)
            a_fragment[h * VECTOR] = v0
            a_fragment[h * VECTOR + 1] = v1
            a_fragment[h * VECTOR + 2] = v2
            a_fragment[h * VECTOR + 3] = v3
        for h in range(TN // VECTOR):
            v0, v1, v2, v3 = load4(b_slabs, b_at + h * COLUMN_GAP)
            b_fragment[h * VECTOR] = v0
            b_fragment[h * VECTOR + 1] = v1
            b_fragment[h * VECTOR + 2] = v2
            b_fragment[h * VECTOR + 3] = v3
        for i in range(TM):
            for j in range(TN):
                patch[i, j] += a_fragment[i] * b_fragment[j]

    # Eight k steps written out (the compiler leaves a loop with a body this long rolled; written
    # out, every shared-memory address is a constant offset and no loop counter is kept).
    multiply_8 = _twice(_twice(_twice(multiply, A_ROW, B_ROW), 2 * A_ROW, 2 * B_ROW),
                        4 * A_ROW, 4 * B_ROW)

    @cuda.jit
    def gemm(a, b, c, m, n, k, a_ld, b_ld, c_ld, batch_shape, a_batch, b_batch, c_batch,
             sums, a_sum, b_sum, first_batch):
        a_slabs = cuda.shared.array(A_SLABS, numba_type, alignment=alignment)
        b_slabs = cuda.shared.array(B_SLABS, numba_type, alignment=alignment)
        patch = cuda.local.array((TM, TN), numba_type)
        a_fragment = cuda.local.array(TM, numba_type)
        b_fragment = cuda.local.array(TN, numba_type)
        a_next = cuda.local.array((A_GROUPS, VECTOR), numba_type)
        b_next = cuda.local.array((B_GROUPS, VECTOR), numba_type)

        t = cuda.threadIdx.x
        row0 = cuda.blockIdx.y * BM
        col0 = cuda.blockIdx.x * BN
        patch_row = (t // THREAD_COLUMNS) * VECTOR
        patch_col = (t % THREAD_COLUMNS) * VECTOR
        z = first_batch + cuda.blockIdx.z
        z2 = z % batch_shape[2]
        z = z // batch_shape[2]
        z1 = z % batch_shape[1]
        z0 = z // batch_shape[1]
        a_base = z0 * a_batch[0] + z1 * a_batch[1] + z2 * a_batch[2]
        b_base = z0 * b_batch[0] + z1 * b_batch[1] + z2 * b_batch[2]
        c_base = z0 * c_batch[0] + z1 * c_batch[1] + z2 * c_batch[2]

        for i in range(TM):
            for j in range(TN):
                patch[i, j] = zero
        total = sums * ((k + BK - 1) // BK)
        # Where the next slabs start (the summed batch's matrix, its k): counted along, not
        # divided out of the step number (a 64-bit division and multiply per step).
        a_start, b_start, k0 = a_base, b_base, 0

        for step in range(total + 1):
            if step < total:
                # Fetch step's slabs into registers (the previous step's multiply is queued
                # ahead of these loads' latency on the first pass through the loop).
                if transpose_a:   # stored (k x m): contiguous along m
                    fetch(a, a_start, a_ld, m, k, row0, k0, False, BM // VECTOR,
                          A_GROUPS, aligned_a, t, a_next)
                else:
                    fetch(a, a_start, a_ld, m, k, row0, k0, True, BK // VECTOR,
                          A_GROUPS, aligned_a, t, a_next)
                if transpose_b:   # stored (n x k): contiguous along k
                    fetch(b, b_start, b_ld, k, n, k0, col0, False, BK // VECTOR,
                          B_GROUPS, aligned_b, t, b_next)
                else:
                    fetch(b, b_start, b_ld, k, n, k0, col0, True, BN // VECTOR,
                          B_GROUPS, aligned_b, t, b_next)
                k0 += BK
                if k0 >= k:
                    k0 = 0
                    a_start += a_sum
                    b_start += b_sum
            if step > 0:
                # Multiply from the slabs stored at the end of the previous pass.
                a_at = (A_SLAB if (step - 1) & 1 else 0) + patch_row
                b_at = (B_SLAB if (step - 1) & 1 else 0) + patch_col
                for q8 in range(0, BK, 8):
                    multiply_8(a_slabs, a_at + q8 * A_ROW, b_slabs, b_at + q8 * B_ROW,
                               a_fragment, b_fragment, patch)
            if step < total:
                # Store the fetched groups into the other slabs: A k-major (transposed when it
                # was fetched along its rows), B as it lies.
                a_at = A_SLAB if step & 1 else 0
                b_at = B_SLAB if step & 1 else 0
                for g in range(A_GROUPS):
                    e = t + g * THREADS
                    for j in range(VECTOR):
                        if transpose_a:
                            q, r = e // (BM // VECTOR), (e % (BM // VECTOR)) * VECTOR + j
                        else:
                            r, q = e // (BK // VECTOR), (e % (BK // VECTOR)) * VECTOR + j
                        a_slabs[a_at + q * A_ROW + r] = a_next[g, j]
                for g in range(B_GROUPS):
                    e = t + g * THREADS
                    for j in range(VECTOR):
                        if transpose_b:
                            s2, q = e // (BK // VECTOR), (e % (BK // VECTOR)) * VECTOR + j
                        else:
                            q, s2 = e // (BN // VECTOR), (e % (BN // VECTOR)) * VECTOR + j
                        b_slabs[b_at + q * B_ROW + s2] = b_next[g, j]
            cuda.syncthreads()

        for i in range(TM):
            row = row0 + patch_row + (i // VECTOR) * ROW_GAP + i % VECTOR
            if row < m:
                for j in range(TN):
                    col = col0 + patch_col + (j // VECTOR) * COLUMN_GAP + j % VECTOR
                    if col < n:
                        c[c_base + index(index(row) * c_ld) + index(col)] = patch[i, j]

    return gemm


def _twice(step, a_rows, b_rows):
    """A device function doing ``step`` at the given slab offsets and again ``a_rows``/``b_rows``
    further on: applied three times, eight k steps in a row."""
    @cuda.jit(device=True, inline=True)
    def twice(a_slabs, a_at, b_slabs, b_at, a_fragment, b_fragment, patch):
        step(a_slabs, a_at, b_slabs, b_at, a_fragment, b_fragment, patch)
        step(a_slabs, a_at + a_rows, b_slabs, b_at + b_rows, a_fragment, b_fragment, patch)
    return twice


__all__ = ["Tiles", "LARGE", "SMALL", "gemm_kernel"]
