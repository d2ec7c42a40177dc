"""The default CPU backend: the NumPy reference with Numba kernels where they pay.

:class:`NumbaCpuBackend` extends :class:`~minidl.backend.reference.ReferenceBackend` and replaces
only the primitives listed in its body. Everything else — most elementwise math, reductions,
indexing, matrix products — is inherited from the reference unchanged: NumPy's ufuncs are
vectorised C and its matmul is BLAS, so a Numba rewrite would not be faster on one thread (the
commonest elementwise passes, add/sub/mul/less/where/ReLU, go to Numba's threads when large: see
:mod:`.elementwise`; so do bias gradients' sums and embedding gradients: see :mod:`.reductions`).
Numba takes over the primitives that NumPy can only express with Python loops or many temporary
arrays: im2col/col2im, pooling, fused softmax-cross-entropy, GELU, the ReLU gradient, layer norm,
batch norm (:mod:`.batch_norm`), the LSTM and GRU cells, the optimizer updates and the Philox
random stream. Each kernel is jitted with ``cache=True`` and compiled on its first call, never
at import. :mod:`.vector_math` holds exp(-y) and the normal tail in a form LLVM can vectorise (the
C library's ``exp``/``erfc`` go one element per call), used by the float32 GELU, softmax and
recurrent cells.

Numba itself is imported when the first kernel is needed, not with this module, and a process's
first few small calls of four primitives run NumPy stand-ins that give the same values: see
:mod:`.loading` (a small model's first forward pass then never waits for Numba).

Threads: the matrix products run on BLAS's thread pool; between them, kernels on large inputs split
their work over Numba's pool in fixed chunks (the optimizer updates, im2col/col2im, pooling, batch
norm, GELU, the LSTM and GRU cells, random draws, through :mod:`.row_threads` softmax and layer
norm, through :mod:`.elementwise` and :mod:`.reductions` the elementwise passes and bias-gradient
sums), so results are bitwise the same at any thread count. ``md.set_num_threads`` sizes both
pools; the process-wide settings that make them get along live in :mod:`.process_settings`.
"""

from .. import composed
from ..reference import ReferenceBackend
from . import elementwise, loading, plan_steps, reductions
from .loading import Kernel, load_kernels
from .process_settings import apply_process_settings

__all__ = ["NumbaCpuBackend", "load_kernels"]


class NumbaCpuBackend(ReferenceBackend):
    """NumPy arrays on the host; the reference's primitives, with these replaced by Numba kernels
    (each a :class:`~.loading.Kernel`: its module is imported on first use)."""

    name = "numba"

    def __init__(self):
        # Process-wide, so applied when the backend is first used rather than at import.
        apply_process_settings()

    im2col = Kernel("conv", stand_in=loading.im2col)
    col2im = Kernel("conv")
    max_pool2d_forward = Kernel("pool", stand_in=loading.max_pool2d_forward)
    max_pool2d_backward = Kernel("pool")
    avg_pool2d_forward = Kernel("pool")
    avg_pool2d_backward = Kernel("pool")
    softmax = Kernel("row_threads")
    softmax_backward = Kernel("row_threads")
    log_softmax = Kernel("row_threads")
    softmax_cross_entropy_forward = Kernel("row_threads")
    softmax_cross_entropy_backward = Kernel("row_threads")
    add = staticmethod(elementwise.add)  # NumPy, or Numba's threads for large arrays
    sub = staticmethod(elementwise.sub)
    mul = staticmethod(elementwise.mul)
    less = staticmethod(elementwise.less)
    where = staticmethod(elementwise.where)
    relu = staticmethod(elementwise.relu)
    relu_backward = staticmethod(elementwise.relu_backward)
    sum = staticmethod(reductions.sum)  # NumPy, or Numba's threads for large leading-axes sums
    index_add = staticmethod(reductions.index_add)  # and for embedding gradients
    math_function = staticmethod(elementwise.math_function)  # erf compiled; the others NumPy's
    gelu_forward = Kernel("nn_kernels")
    gelu_backward = Kernel("nn_kernels")
    layer_norm_forward = Kernel("row_threads")
    layer_norm_backward = Kernel("row_threads")
    batch_norm_forward = Kernel("batch_norm", stand_in=loading.batch_norm_forward)
    batch_norm_backward = Kernel("batch_norm")
    lstm_cell_forward = Kernel("rnn_kernels")
    lstm_cell_backward = Kernel("rnn_kernels")
    gru_cell_forward = Kernel("rnn_kernels")
    gru_cell_backward = Kernel("rnn_kernels")
    sgd_update = Kernel("optim_kernels")
    adam_update = Kernel("optim_kernels")
    random_uniform = Kernel("random_kernels", stand_in=loading.random_uniform)
    random_normal = Kernel("random_kernels")
    # md.compile's steps, on buffers they own (plan_steps.py)
    plan_conv2d = composed.OfTheBackendClass(plan_steps.plan_conv2d, "plan_conv2d")
    plan_max_pool2d = composed.OfTheBackendClass(plan_steps.plan_max_pool2d, "plan_max_pool2d")
    plan_linear = composed.OfTheBackendClass(plan_steps.plan_linear, "plan_linear")
