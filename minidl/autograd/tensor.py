"""The Tensor: an array on a device, plus what autograd needs to differentiate through it.

A Tensor holds ``data`` (its backend's array: a NumPy ndarray on the CPU), its ``device``, whether
it ``requires_grad``, and — when it was produced by a recorded op — ``_node``, the
:class:`~minidl.autograd.function.Function` that made it. Leaves (tensors the user created) have no
node; ``backward`` accumulates their gradient in ``.grad``.

The operators and methods that compute (``+``, ``@``, ``x.sum()``, ``x.to(...)``, ``x.add_(y)``)
are ops, and ops are built on Tensor; so they are attached from the ops floor, by
:mod:`minidl.ops.tensor_methods` when :mod:`minidl.ops` is imported (``import minidl`` does). This
module only knows how a tensor is held and differentiated, and imports nothing above autograd.
"""

from __future__ import annotations

import math

import numpy as np

from ..backend import canonical_device, get_backend
from . import engine
from .hooks import GradientHooks, add_hook

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
float16 = np.dtype(np.float16)
int64 = np.dtype(np.int64)
int32 = np.dtype(np.int32)
uint8 = np.dtype(np.uint8)
bool_ = np.dtype(np.bool_)

_DEFAULT_FLOAT = float32

# PyTorch's legacy type names, which ``Tensor.type()`` reports and accepts.
_TYPE_NAMES = {float32: "FloatTensor", float64: "DoubleTensor", float16: "HalfTensor",
               int64: "LongTensor", int32: "IntTensor", np.dtype(np.int16): "ShortTensor",
               np.dtype(np.int8): "CharTensor", uint8: "ByteTensor", bool_: "BoolTensor"}



def cuda_device(device=None) -> str:
    """The CUDA device ``x.cuda(device)`` means: None -> "cuda" (the current one), an index N
    -> "cuda:N", else a CUDA device name."""
    if device is None:
        return "cuda"
    if isinstance(device, int) and not isinstance(device, bool):
        return f"cuda:{device}"
    if not str(device).startswith("cuda"):
        raise ValueError(f"cuda(): device must be a CUDA device (an index, 'cuda' or "
                         f"'cuda:N'), got {device!r}")
    return device


def device_and_dtype(device, dtype) -> tuple:
    """``to()``'s first argument read as PyTorch reads it: a device, another tensor (its device
    and dtype) or a dtype."""
    if isinstance(device, Tensor):
        return device.device, device.dtype if dtype is None else dtype
    if device is None or isinstance(device, str):
        return device, dtype
    try:
        as_dtype = np.dtype(device)
    except TypeError:
        return device, dtype  # not a dtype: let the device check name the problem
    if dtype is not None:
        raise TypeError(f"to(): got two dtypes, {as_dtype} and {dtype!r}")
    return None, as_dtype

class Tensor:
    """A multi-dimensional array that can record the ops applied to it and differentiate them."""

    # _version_cell: a one-element list counting in-place edits of this memory, shared by the
    # tensors that view it; _view_version: for a view recorded in a graph, the count when it was
    # taken; _consumers: weak references to the recorded nodes that read this tensor (see
    # autograd/inplace.py for all three).
    # _grad_hooks: None, or the tensor's hooks and retain_grad flag (autograd/hooks.py).
    __slots__ = ("data", "device", "requires_grad", "grad", "_node", "_grad_hooks",
                 "_version_cell", "_view_version", "_consumers", "__weakref__")
    # NumPy defers binary operators to us (np_array * tensor -> Tensor.__rmul__).
    __array_priority__ = 1000

    def __init__(self, data, dtype=None, device="cpu", requires_grad: bool = False):
        if isinstance(data, Tensor):
            data = data.numpy()
        was_array = isinstance(data, np.ndarray)
        array = np.asarray(data)
        if dtype is None and array.dtype.kind == "f" and not was_array:
            dtype = _DEFAULT_FLOAT  # Python floats and lists of them: float32, as PyTorch
        if dtype is None and array.dtype.kind in "iu" and not was_array:
            dtype = int64
        if dtype is not None:
            array = array.astype(np.dtype(dtype), copy=False)
        # isbuiltin 2: a dtype registered by an extension (ml_dtypes' float8_e5m2 reports kind
        # 'f' like float32, but NumPy's ufuncs compute it wrongly, as for the other float8s).
        if array.dtype.kind not in "biuf" or array.dtype.isbuiltin == 2:
            raise TypeError(f"tensor: unsupported dtype {array.dtype} (expected bool, integer or "
                            f"floating point data of NumPy's own types; float8, bfloat16 and "
                            f"other extension types are not supported)")
        self.device = canonical_device(device)
        self.data = get_backend(self.device).from_numpy(array)
        self.grad = None
        self._node = None
        self._grad_hooks = None
        self._version_cell = [0]
        self._view_version = None
        self._consumers = None
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _wrap(cls, data, device: str, requires_grad: bool = False) -> "Tensor":
        """Wrap a backend array produced by an op, without copying or converting it."""
        # Every op's output is made here, so the fields are set inline (no second call).
        tensor = object.__new__(Tensor)
        # NumPy's ufuncs give a 0-d result as a scalar, which cannot be edited in place
        # (x += 1 on a 0-d tensor): a tensor holds an array
        tensor.data = np.asarray(data) if isinstance(data, np.generic) else data
        tensor.device = device
        tensor.requires_grad = requires_grad
        tensor.grad = tensor._node = tensor._grad_hooks = None
        tensor._version_cell = [0]
        tensor._view_version = tensor._consumers = None
        return tensor

    def _hold(self, data, device: str, requires_grad: bool) -> None:
        """Make this tensor, made without ``__init__`` (a subclass's constructor), hold
        ``data`` as :meth:`_wrap`'s tensor would."""
        wrapped = Tensor._wrap(data, device, requires_grad)
        for slot in Tensor.__slots__:
            if slot != "__weakref__":
                setattr(self, slot, getattr(wrapped, slot))

    # -- what it is --------------------------------------------------------------------------------

    @property
    def backend(self):
        return get_backend(self.device)

    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return len(self.data.shape)

    def size(self, dim: int | None = None):
        """The shape (PyTorch's ``size()``), or the length of axis ``dim``."""
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        """Number of elements."""
        return int(math.prod(self.data.shape))  # exact, and cheaper than np.prod per call

    def dim(self) -> int:
        return self.ndim

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def _version(self) -> int:
        """How many times this memory was edited in place (PyTorch's ``_version``)."""
        return self._version_cell[0]

    @property
    def grad_fn(self):
        """The op that produced this tensor (None for leaves)."""
        return self._node

    @property
    def is_floating_point(self) -> bool:
        return self.dtype.kind == "f"

    # -- conversion --------------------------------------------------------------------------------

    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (shares memory on the CPU; copy it before mutating)."""
        return self.backend.to_numpy(self.data)

    def __state_array__(self) -> np.ndarray:
        """The array that stands for this tensor in a state tree (a state_dict, a checkpoint,
        ``md.save``): its values, as ``numpy()``.  The protocol of
        :mod:`minidl.io.state_tree`, by which the file layer recognises a tensor without
        importing this class."""
        return self.numpy()

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self.numel() != 1:
            raise ValueError(f"item: only one-element tensors can be converted to a Python "
                             f"scalar, this one has shape {self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor with shape {self.shape} is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self.dtype.kind not in "iu" or self.numel() != 1:
            raise TypeError("only integer tensors of one element can be used as an index")
        return int(self.item())

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device=None, non_blocking: bool = False) -> "Tensor":
        """This tensor on the current CUDA device, or on ``device`` (an index or "cuda:N")."""
        return self.to(cuda_device(device), non_blocking=non_blocking)

    @property
    def is_cuda(self) -> bool:
        """Whether the tensor is on a CUDA device."""
        return self.device.startswith("cuda")

    def float(self) -> "Tensor":
        return self.to(dtype=float32)

    def double(self) -> "Tensor":
        return self.to(dtype=float64)

    def long(self) -> "Tensor":
        return self.to(dtype=int64)

    def int(self) -> "Tensor":  # noqa: A003
        """As int32 (PyTorch's ``int()``; floats are truncated toward zero)."""
        return self.to(dtype=int32)

    def half(self) -> "Tensor":
        """As float16."""
        return self.to(dtype=float16)

    def bool(self) -> "Tensor":  # noqa: A003
        """As bool: True where non-zero."""
        return self.to(dtype=bool_)

    def type(self, dtype=None):  # noqa: A003
        """With no argument, the type's name as PyTorch spells it ("minidl.FloatTensor");
        with a dtype or such a name, this tensor cast to it."""
        if dtype is None:
            return "minidl." + _TYPE_NAMES.get(self.dtype, f"{self.dtype.name}Tensor")
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            by_name = {name: kind for kind, name in _TYPE_NAMES.items()}
            name = dtype.rsplit(".", 1)[-1]
            if name not in by_name:
                raise ValueError(f"type: unknown tensor type {dtype!r} (expected one of "
                                 f"{sorted(by_name)})")
            dtype = by_name[name]
        return self.to(dtype=dtype)

    def astype(self, dtype) -> "Tensor":
        return self.to(dtype=dtype)

    # -- autograd ----------------------------------------------------------------------------------

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Mark a leaf as needing a gradient (floating point tensors only)."""
        if requires_grad and self.dtype.kind != "f":
            raise TypeError(f"requires_grad: only floating point tensors can require gradients, "
                            f"this one is {self.dtype}")
        if not requires_grad and self._node is not None:
            raise RuntimeError("requires_grad_(False) on a non-leaf tensor; use .detach()")
        self.requires_grad = bool(requires_grad)
        return self

    def retain_grad(self) -> None:
        """Also keep ``.grad`` for this non-leaf tensor after backward (a no-op on a leaf, which
        keeps it anyway). It is filled after the tensor's hooks ran, with their result."""
        if not self.requires_grad:
            raise RuntimeError("retain_grad: the tensor does not require grad, so no gradient "
                               "will reach it")
        if self._node is not None:
            self._hooks_table().retains_grad = True

    @property
    def retains_grad(self) -> bool:
        """Whether :meth:`retain_grad` was called on this non-leaf tensor."""
        return self._grad_hooks is not None and self._grad_hooks.retains_grad

    def register_hook(self, hook):
        """Call ``hook(grad)`` with this tensor's gradient during every backward pass, before
        the gradient is used; a returned tensor replaces it (None keeps it). Returns a handle
        whose ``remove()`` unregisters the hook. Hooks are not state: ``state_dict`` and
        checkpoints do not see them."""
        if not self.requires_grad:
            raise RuntimeError("register_hook: cannot register a hook on a tensor that does not "
                               "require grad")
        return add_hook(self._hooks_table().hooks, hook)

    def _hooks_table(self):
        if self._grad_hooks is None:
            self._grad_hooks = GradientHooks()
        return self._grad_hooks

    def backward(self, gradient=None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs=None, *, grad=None) -> None:
        """Accumulate d(self)/d(leaf) into ``.grad`` of every leaf that requires a gradient
        (of the tensors in ``inputs`` only, when given).

        ``gradient`` (alias ``grad``) weights a non-scalar output. ``create_graph=True``
        records the pass, so ``.grad`` can itself be differentiated; ``retain_graph`` (by
        default ``create_graph``) keeps the graph for another pass. PyTorch's semantics.
        """
        if grad is not None and gradient is not None:
            raise TypeError("backward: give gradient or its alias grad, not both")
        engine.backward(self, gradient if gradient is not None else grad,
                        retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    def _accumulate_grad(self, grad, exclusive: bool = False) -> None:
        """Add ``grad`` into ``.grad``; ``exclusive`` means no one else holds that array."""
        backend = self.backend
        converted = backend.astype(grad, self.dtype)
        if self.grad is None:
            # .grad must own its array (users may scale it in place), so share only an array
            # nobody else can see and that is its own memory (the backend knows which arrays are
            # views); copy anything else.
            keep = exclusive and converted is grad and backend.owns_memory(grad)
            self.grad = Tensor._wrap(grad if keep else backend.copy(converted), self.device)
        else:
            self.grad = Tensor._wrap(self.backend.add(self.grad.data, grad), self.device)

    def detach(self) -> "Tensor":
        """The same data, cut off from the graph (shares memory, and so the version counter)."""
        out = Tensor._wrap(self.data, self.device)
        out._version_cell = self._version_cell
        return out

    def detach_(self) -> "Tensor":
        self._node = None
        self.requires_grad = False
        return self

    # -- printing --------------------------------------------------------------------------------

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", precision=4, threshold=50,
                               prefix="tensor(")
        extras = []
        if self.device != "cpu":
            extras.append(f"device='{self.device}'")
        if self.dtype not in (float32, int64, bool_):
            extras.append(f"dtype={self.dtype}")
        if self._node is not None:
            extras.append(f"grad_fn=<{self._node.name}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + ", ".join([body] + extras) + ")"

    __hash__ = object.__hash__


def tensor(data, dtype=None, device="cpu", requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data``.

    As ``torch.tensor``: Python floats (and lists of them) become float32, while a NumPy array
    or scalar keeps its dtype (a float64 array stays float64).
    """
    keeps_dtype = isinstance(data, (Tensor, np.ndarray, np.generic))
    if isinstance(data, Tensor):
        data = data.numpy()
    array = np.array(data, copy=True)
    if dtype is None and array.dtype.kind == "f" and not keeps_dtype:
        dtype = _DEFAULT_FLOAT
    return Tensor(array, dtype=dtype, device=device, requires_grad=requires_grad)


def as_tensor(value, like: Tensor | None = None) -> Tensor:
    """``value`` as a Tensor; scalars take ``like``'s dtype and device (so ``x * 2`` stays float32)."""
    if isinstance(value, Tensor):
        return value
    if like is not None:
        array = np.asarray(value)
        if array.ndim == 0 and (array.dtype.kind in "biuf"):
            dtype = like.dtype if (like.dtype.kind == "f" or array.dtype.kind != "f") \
                else _DEFAULT_FLOAT
            if like.dtype.kind in "b" and array.dtype.kind != "b":
                dtype = array.dtype if array.dtype.kind == "f" else int64
            # A scalar is made where it is used, filled by the device (the value travels as a
            # kernel argument): no host-to-device copy for the 2 in ``x * 2``.
            return Tensor._wrap(like.backend.full((), array.item(), dtype), like.device)
        return Tensor(array, device=like.device)
    return Tensor(value)
