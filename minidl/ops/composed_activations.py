"""Activations written in a few existing ops: the bounded ones (ReLU6, Hardtanh), the scaled
exponential ones (SELU, CELU), the gated one (GLU) and the smooth ones (LogSigmoid, Softsign,
Softmin).

Unlike :mod:`minidl.ops.activations`, none of these is its own op: each is short enough in
``clamp``/``where``/``exp``/... that their chain rule is the gradient, and an exported model
writes those ops to ONNX with no new mapping. The formula is in each docstring.
"""

from __future__ import annotations

from ..autograd.tensor import Tensor
from . import elementwise as ew
from .activations import elu
from .nn_ops import softmax
from ._util import normalize_axis

# SELU's constants (Klambauer et al. 2017), as PyTorch writes them: with them, activations of
# a suitably initialised network keep mean 0 and variance 1 from layer to layer.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """x clipped to [min_val, max_val] (gradient 1 inside, 0 outside)."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not exceed max_val ({max_val})")
    return ew.clamp(x, min=min_val, max=max_val)


def relu6(x: Tensor) -> Tensor:
    """min(max(0, x), 6): ReLU capped so activations stay in a fixed-point friendly range."""
    return ew.clamp(x, min=0.0, max=6.0)


def selu(x: Tensor) -> Tensor:
    """scale·(x for x > 0, alpha·(eˣ - 1) otherwise): a scaled ELU."""
    return elu(x, SELU_ALPHA) * SELU_SCALE


def celu(x: Tensor, alpha: float = 1.0) -> Tensor:
    """x for x > 0, alpha·(e^(x/alpha) - 1) otherwise, i.e. alpha·ELU(x/alpha): unlike ELU its
    derivative is continuous at 0 for every alpha."""
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0")
    return elu(x * (1.0 / alpha), 1.0) * alpha


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """a·σ(b), where a and b are the two halves of x along ``dim``: a gate learned from the
    input itself (gated linear unit)."""
    axis = normalize_axis("glu", dim, x.ndim)
    size = x.shape[axis]
    if size % 2:
        raise ValueError(f"glu: dimension {dim} of size {size} must be even, to halve it")
    head = (slice(None),) * axis
    first, second = x[head + (slice(0, size // 2),)], x[head + (slice(size // 2, size),)]
    return first * ew.sigmoid(second)


def logsigmoid(x: Tensor) -> Tensor:
    """log σ(x) = min(x, 0) - log(1 + e^-|x|): the exponent is never positive, so no overflow
    (and no log of an underflowed 0) at any x."""
    return ew.minimum(x, 0.0) - ew.log(ew.exp(-ew.abs(x)) + 1.0)


def softsign(x: Tensor) -> Tensor:
    """x / (1 + |x|): like tanh in shape, but approaching ±1 polynomially, not exponentially."""
    return x / (ew.abs(x) + 1.0)


def softmin(x: Tensor, dim: int = -1) -> Tensor:
    """softmax(-x) along ``dim``: weights that favour the smallest entries."""
    return softmax(-x, dim)
