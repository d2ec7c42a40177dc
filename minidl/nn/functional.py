"""The functional forms of the layers, with PyTorch's names and signatures (``nn.functional``)."""

from ..ops.conv import conv2d  # noqa: F401
from ..ops.elementwise import gelu, relu, sigmoid, tanh  # noqa: F401
from ..ops.linalg import linear  # noqa: F401
from ..ops.nn_ops import (  # noqa: F401
    batch_norm, binary_cross_entropy_with_logits, cross_entropy, dropout, embedding, layer_norm,
    mse_loss, nll_loss,
)
from ..ops.nn_ops import log_softmax as _log_softmax
from ..ops.nn_ops import softmax as _softmax
from ..ops.pool import adaptive_avg_pool2d, avg_pool2d, max_pool2d  # noqa: F401
from ..ops.shape import flatten  # noqa: F401
from ..ops.activations import (  # noqa: F401
    elu, hardsigmoid, hardswish, leaky_relu, mish, prelu, silu, softplus,
)
from ..ops.conv1d import avg_pool1d, conv1d, max_pool1d  # noqa: F401
from ..ops.conv_transpose import conv_transpose2d  # noqa: F401
from ..ops.instance_norms import group_norm, instance_norm  # noqa: F401
from ..ops.resample import adaptive_max_pool2d, interpolate  # noqa: F401
from ..ops.attention import scaled_dot_product_attention  # noqa: F401


def softmax(x, dim: int = -1, axis: int | None = None):
    """softmax along ``dim`` (alias ``axis``)."""
    return _softmax(x, axis if axis is not None else dim)


def log_softmax(x, dim: int = -1, axis: int | None = None):
    """log_softmax along ``dim`` (alias ``axis``)."""
    return _log_softmax(x, axis if axis is not None else dim)


from ..ops.losses import (  # noqa: F401,E402
    binary_cross_entropy, cosine_embedding_loss, gaussian_nll_loss, huber_loss, kl_div, l1_loss,
    margin_ranking_loss, pairwise_distance, smooth_l1_loss, triplet_margin_loss,
)
from ..ops.ctc import ctc_loss  # noqa: F401,E402
from ..ops.composed_activations import (  # noqa: F401,E402
    celu, glu, hardtanh, logsigmoid, relu6, selu, softmin, softsign,
)
from ..ops.padding import pad, pixel_shuffle  # noqa: F401,E402
from ..ops.channel_dropout import channel_dropout as _channel_dropout  # noqa: E402


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, L) or (C, L) ``input`` with probability ``p``."""
    return _channel_dropout(input, p, training, 1)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of (N, C, H, W) or (C, H, W) ``input`` with probability ``p``."""
    return _channel_dropout(input, p, training, 2)
