"""minidl: a small deep learning engine you can read, with checkpoints you can trust.

``import minidl as md`` gives tensors and autograd (``md.tensor``, ``md.no_grad``), the global
random generator (``md.manual_seed``), and the file functions (``md.save``, ``md.load``,
``md.save_model``, ``md.load_model``, ``md.export_onnx``, ``md.Checkpoint``). Heavy dependencies
(Numba, ONNX, cryptography) are imported only when first used.
"""

from .autograd.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .autograd.tensor import (
    Tensor, as_tensor, bool_, float16, float32, float64, int32, int64, tensor, uint8,
)
from .ops.shape import cat, stack, where
from .random import Generator, get_rng_state, initial_seed, manual_seed, set_rng_state
from .creation import arange, ones, ones_like, rand, randn, zeros, zeros_like, from_numpy
from . import nn, optim  # noqa: E402  (light: no kernels compile until used)

__version__ = "0.1.0"
