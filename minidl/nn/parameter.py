"""Parameter: a tensor that a Module registers as trainable."""

from __future__ import annotations

import numpy as np

from ..autograd.tensor import Tensor
from .init import Placeholder


class Parameter(Tensor):
    """A leaf Tensor that requires a gradient and is found by ``Module.parameters()``.

    Optimizers update ``data`` in place, so every view of the array (``state_dict()`` included)
    sees the new values.
    """

    __slots__ = ()

    def __init__(self, data, requires_grad: bool = True):
        if isinstance(data, Tensor):
            # A copy made where the tensor lives: no trip through the host.
            if data.dtype.kind != "f":
                raise TypeError(f"Parameter: data must be floating point, got {data.dtype}")
            self._hold(data.backend.copy(data.data), data.device, False)
            self.requires_grad_(requires_grad)
            return
        device = "cpu"
        if isinstance(data, Placeholder):
            array = data.view(np.ndarray)  # stays a placeholder (init.skip_init): no copy
        else:
            # np.array(order="C") rather than np.ascontiguousarray, which turns 0-d arrays
            # into 1-d; always a private copy.
            array = np.array(data, copy=True, order="C")
        if array.dtype.kind != "f":
            raise TypeError(f"Parameter: data must be floating point, got {array.dtype}")
        super().__init__(array, dtype=array.dtype, device=device,
                         requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
