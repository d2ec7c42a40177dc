"""Size arguments of windowed ops, as PyTorch accepts them.

``kernel_size``, ``stride``, ``padding``, ``dilation`` and ``output_size`` are given either as
one int for every spatial axis or as one int per axis; ops and the layers that store them both
turn them into the per-axis form here, so a bad argument is refused with the same message
whether it reaches ``nn.Conv2d(...)`` or ``F.conv2d(...)``.
"""

from __future__ import annotations


def single_int(value, op: str, name: str) -> int:
    """A 1-D size argument (an int, or a 1-tuple as PyTorch also accepts) as an int; ValueError
    naming ``op`` and ``name`` otherwise."""
    if isinstance(value, (tuple, list)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{op}: {name} must be an int (or a 1-tuple), got {value!r}")
    return value


def int_pair(value, op: str, name: str) -> tuple[int, int]:
    """A 2-D size argument (an int for both axes, or a pair of ints) as ``(height, width)``;
    ValueError naming ``op`` and ``name`` otherwise."""
    pair = (value, value) if isinstance(value, int) else tuple(value)
    # Two explicit tests rather than all(...) over a generator: every convolution and pooling
    # call reads three or four of these, so their cost is per op.
    if len(pair) != 2 or not (isinstance(pair[0], int) and isinstance(pair[1], int)):
        raise ValueError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    return pair


def pool_window(op: str, kernel_size, stride, padding) -> tuple:
    """A 2-D pooling window's ``(kernel_size, stride, padding)``, each as a pair; the stride
    defaults to the kernel size (windows side by side), as in PyTorch."""
    kernel_size = int_pair(kernel_size, op, "kernel_size")
    stride = kernel_size if stride is None else int_pair(stride, op, "stride")
    return kernel_size, stride, int_pair(padding, op, "padding")
