"""minidl: a small deep learning engine you can read, with checkpoints you can trust.

``import minidl as md`` gives tensors and autograd (``md.tensor``, ``md.no_grad``), the global
random generator (``md.manual_seed``), and the file functions (``md.save``, ``md.load``,
``md.save_model``, ``md.load_model``, ``md.export_onnx``, ``md.Checkpoint``). Heavy dependencies
(Numba, ONNX, cryptography) are imported only when first used.
"""

from .autograd.grad_mode import (
    enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled,
)
from .backend.threads import get_num_threads, set_num_threads
from .backend import Device as device  # noqa: E402  (md.device("cuda:0"), as torch.device)
from .autograd.tensor import (
    Tensor, as_tensor, bool_, float16, float32, float64, int32, int64, tensor, uint8,
)
from .ops.shape import cat, stack, where
# The ops as functions of the module too, as PyTorch's ``torch.max(x, 1)``, ``torch.exp(x)``.
# (These names shadow Python's max/min/sum/abs/pow/all/any inside this module only; nothing
# below uses the builtins.)
from .ops.elementwise import (  # noqa: E402,A004
    abs, add, clamp, div, eq, exp, floor_divide, ge, gelu, gt, le, log, lt, maximum, minimum,
    mul, ne, neg, pow, relu, remainder, sigmoid, sqrt, sub, tanh,
)
from .ops.linalg import matmul  # noqa: E402
from .nn.functional import log_softmax, softmax  # noqa: E402
from .ops.reduction import (  # noqa: E402,A004
    all, amax, amin, any, argmax, argmin, max, mean, min, std, sum, var,
)
from .ops.shape import (  # noqa: E402
    flatten, index_put, permute, reshape, squeeze, transpose, unsqueeze,
)
from .random import Generator, get_rng_state, initial_seed, manual_seed, set_rng_state
from .creation import arange, ones, ones_like, rand, randn, zeros, zeros_like, from_numpy
from . import nn, optim  # noqa: E402  (light: no kernels compile until used)
# Registers the ONNX graph layer so saved imported models load in a fresh process; the onnx
# package itself is imported only when a graph is exported or imported.
from . import onnx as _onnx  # noqa: E402,F401

from .version import __version__  # noqa: E402

from .io import (  # noqa: E402
    CheckpointError, ChecksumMismatchError, CorruptFileError, DecryptionError, MissingFileError,
    UnsafeFileError, UnsupportedVersionError, save,
)
from .model_files import load, load_model, save_model  # noqa: E402


def export_onnx(model, path, example_input, **options):
    """Export ``model`` to ONNX by tracing it on ``example_input`` (see :mod:`minidl.onnx`).

    The ONNX package is imported here, on first use, never by ``import minidl``.
    """
    from .onnx import export_onnx as _export_onnx
    return _export_onnx(model, path, example_input, **options)


def compile(model, example_input):  # noqa: A001  (torch.compile's name, in this namespace only)
    """Trace an eval-mode ``model`` on ``example_input`` into a fast inference callable: a flat
    plan of backend calls with BatchNorm folded in (see :mod:`minidl.inference`)."""
    from .inference import compile_model
    return compile_model(model, example_input)


# Loaded on first access so that ``import minidl`` stays light.
_LAZY = {
    "Checkpoint": ("minidl.checkpoint", "Checkpoint"),
    "CheckpointManager": ("minidl.checkpoint", "CheckpointManager"),
    "latest_checkpoint": ("minidl.checkpoint", "latest_checkpoint"),
    "fit": ("minidl.training", "fit"),
    "Trainer": ("minidl.training", "Trainer"),
    "CheckpointConfig": ("minidl.training", "CheckpointConfig"),
    "evaluate": ("minidl.training", "evaluate"),
    "predict": ("minidl.training", "predict"),
    "training": ("minidl.training", None),
    "cuda": ("minidl.cuda", None),
    "datasets": ("minidl.datasets", None),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module_name, attribute = _LAZY[name]
        module = importlib.import_module(module_name)
        value = module if attribute is None else getattr(module, attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'minidl' has no attribute {name!r}")
