"""The default CPU backend: the NumPy reference with Numba kernels where they pay.

:class:`NumbaCpuBackend` extends :class:`~minidl.backend.reference.ReferenceBackend` and replaces
only the primitives listed in its body. Everything else — elementwise math, reductions, indexing,
matrix products — is inherited from the reference unchanged: NumPy's ufuncs are vectorised C and
its matmul is BLAS, so a Numba rewrite would not be faster. Numba takes over the primitives that
NumPy can only express with Python loops or many temporary arrays: im2col/col2im, pooling, fused
softmax-cross-entropy, GELU, the ReLU gradient, layer norm, the LSTM and GRU cells, the
optimizer updates and the Philox random stream. Each kernel is jitted with ``cache=True`` and compiled on its first call, never at
import. :mod:`.vector_math` holds exp(-y) and the normal tail in a form LLVM can vectorise (the
C library's ``exp``/``erfc`` go one element per call), used by the float32 GELU.

Threads: the matrix products own the cores (BLAS runs its own thread pool), so most kernels run
on the calling thread; only the optimizer updates and large im2col/col2im use Numba threads. The
process-wide settings that make the two pools get along live in :mod:`.process_settings`.
"""

from ..reference import ReferenceBackend
from . import conv, nn_kernels, optim_kernels, pool, random_kernels, rnn_kernels
from .process_settings import apply_process_settings


class NumbaCpuBackend(ReferenceBackend):
    """NumPy arrays on the host; the reference's primitives, with these replaced by Numba kernels."""

    name = "numba"

    def __init__(self):
        # Process-wide, so applied when the backend is first used rather than at import.
        apply_process_settings()

    im2col = staticmethod(conv.im2col)
    col2im = staticmethod(conv.col2im)
    max_pool2d_forward = staticmethod(pool.max_pool2d_forward)
    max_pool2d_backward = staticmethod(pool.max_pool2d_backward)
    avg_pool2d_forward = staticmethod(pool.avg_pool2d_forward)
    avg_pool2d_backward = staticmethod(pool.avg_pool2d_backward)
    softmax = staticmethod(nn_kernels.softmax)
    softmax_backward = staticmethod(nn_kernels.softmax_backward)
    log_softmax = staticmethod(nn_kernels.log_softmax)
    softmax_cross_entropy_forward = staticmethod(nn_kernels.softmax_cross_entropy_forward)
    softmax_cross_entropy_backward = staticmethod(nn_kernels.softmax_cross_entropy_backward)
    relu_backward = staticmethod(nn_kernels.relu_backward)
    gelu_forward = staticmethod(nn_kernels.gelu_forward)
    gelu_backward = staticmethod(nn_kernels.gelu_backward)
    layer_norm_forward = staticmethod(nn_kernels.layer_norm_forward)
    layer_norm_backward = staticmethod(nn_kernels.layer_norm_backward)
    batch_norm_forward = staticmethod(nn_kernels.batch_norm_forward)
    batch_norm_backward = staticmethod(nn_kernels.batch_norm_backward)
    lstm_cell_forward = staticmethod(rnn_kernels.lstm_cell_forward)
    lstm_cell_backward = staticmethod(rnn_kernels.lstm_cell_backward)
    gru_cell_forward = staticmethod(rnn_kernels.gru_cell_forward)
    gru_cell_backward = staticmethod(rnn_kernels.gru_cell_backward)
    sgd_update = staticmethod(optim_kernels.sgd_update)
    adam_update = staticmethod(optim_kernels.adam_update)
    random_uniform = staticmethod(random_kernels.random_uniform)
    random_normal = staticmethod(random_kernels.random_normal)
