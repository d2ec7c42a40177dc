"""The built-in layers, each registered so that model files can name it."""

from .activation import (  # noqa: F401
    ELU, GELU, Hardsigmoid, Hardswish, LeakyReLU, LogSoftmax, Mish, PReLU, ReLU, SiLU, Sigmoid,
    Softmax, Softplus, Tanh,
)
from .container import ModuleDict, ModuleList, Sequential  # noqa: F401
from .conv import Conv2d  # noqa: F401
from .dropout import Dropout  # noqa: F401
from .embedding import Embedding  # noqa: F401
from .linear import Flatten, Identity, Linear  # noqa: F401
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss  # noqa: F401
from .normalization import BatchNorm1d, BatchNorm2d, LayerNorm  # noqa: F401
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: F401
from .conv1d_and_transpose import Conv1d, ConvTranspose2d  # noqa: F401
from .instance_norms import GroupNorm, InstanceNorm1d, InstanceNorm2d  # noqa: F401
from .resampling import AdaptiveMaxPool2d, AvgPool1d, MaxPool1d, Upsample  # noqa: F401
from .attention import MultiheadAttention  # noqa: F401
from .transformer import (  # noqa: F401
    TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
)
from .recurrent import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell  # noqa: F401
from .distance_losses import (  # noqa: F401
    CosineEmbeddingLoss, HuberLoss, L1Loss, MarginRankingLoss, SmoothL1Loss, TripletMarginLoss,
)
from .likelihood_losses import BCELoss, CTCLoss, GaussianNLLLoss, KLDivLoss  # noqa: F401
from .composed_activations import (  # noqa: F401
    CELU, GLU, SELU, Hardtanh, LogSigmoid, ReLU6, Softmin, Softsign,
)
from .linear import Unflatten  # noqa: F401
from .channel_dropout import Dropout1d, Dropout2d  # noqa: F401
from .padding import (  # noqa: F401
    ConstantPad2d, PixelShuffle, ReflectionPad2d, ReplicationPad2d, ZeroPad2d,
)
from .embedding_bag import EmbeddingBag  # noqa: F401
from .parameter_containers import ParameterDict, ParameterList  # noqa: F401
from .transformer_model import Transformer  # noqa: F401

__all__ = [
    "GELU", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh", "ModuleDict", "ModuleList",
    "Sequential", "Conv2d", "Dropout", "Embedding", "Flatten", "Identity", "Linear",
    "BCEWithLogitsLoss", "CrossEntropyLoss", "MSELoss", "NLLLoss", "BatchNorm1d", "BatchNorm2d",
    "LayerNorm", "AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d",
    "ELU", "Hardsigmoid", "Hardswish", "LeakyReLU", "Mish", "PReLU", "SiLU", "Softplus",
    "Conv1d", "ConvTranspose2d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
    "AdaptiveMaxPool2d", "AvgPool1d", "MaxPool1d", "Upsample", "MultiheadAttention",
    "TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder",
    "TransformerDecoder", "RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell",
    "L1Loss", "SmoothL1Loss", "HuberLoss", "CosineEmbeddingLoss", "MarginRankingLoss",
    "TripletMarginLoss", "BCELoss", "KLDivLoss", "GaussianNLLLoss", "CTCLoss", "ReLU6",
    "Hardtanh", "SELU", "CELU", "GLU", "LogSigmoid", "Softsign", "Softmin", "Unflatten",
    "Dropout1d", "Dropout2d", "ZeroPad2d", "ConstantPad2d", "ReflectionPad2d",
    "ReplicationPad2d", "PixelShuffle", "EmbeddingBag", "ParameterList", "ParameterDict",
    "Transformer",
]
