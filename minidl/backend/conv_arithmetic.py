"""Shape arithmetic shared by ops and kernels: plain Python on the host, not a primitive.

An op needs the output size of a convolution before it calls any kernel (to check arguments and
to lay out the matrix product), and every backend's kernels need the same numbers; computing them
is arithmetic on Python ints, which no device should be asked to do.
"""

from __future__ import annotations


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Number of window positions along one axis of a convolution.

    A dilated kernel spans ``dilation*(kernel-1) + 1`` input cells; it fits in the padded length
    ``size + 2*padding`` at ``floor((padded - span) / stride) + 1`` positions.
    """
    span = dilation * (kernel - 1) + 1
    out = (size + 2 * padding - span) // stride + 1
    if out <= 0:
        raise ValueError(
            f"convolution output would be empty: input size {size}, kernel {kernel}, "
            f"stride {stride}, padding {padding}, dilation {dilation} give output size {out}"
        )
    return out
