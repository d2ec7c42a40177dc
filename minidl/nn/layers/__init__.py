"""The built-in layers, each registered so that model files can name it."""

from .activation import GELU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh  # noqa: F401
from .container import ModuleDict, ModuleList, Sequential  # noqa: F401
from .conv import Conv2d  # noqa: F401
from .dropout import Dropout  # noqa: F401
from .embedding import Embedding  # noqa: F401
from .linear import Flatten, Identity, Linear  # noqa: F401
from .loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss  # noqa: F401
from .normalization import BatchNorm1d, BatchNorm2d, LayerNorm  # noqa: F401
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: F401

__all__ = [
    "GELU", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh", "ModuleDict", "ModuleList",
    "Sequential", "Conv2d", "Dropout", "Embedding", "Flatten", "Identity", "Linear",
    "BCEWithLogitsLoss", "CrossEntropyLoss", "MSELoss", "NLLLoss", "BatchNorm1d", "BatchNorm2d",
    "LayerNorm", "AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d",
]
