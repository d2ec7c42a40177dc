"""``md.cuda``: is there a CUDA device, and how many (as ``torch.cuda``).

Asking never compiles anything and never fails: without the ``numba-cuda`` package or a GPU the
answers are False and 0. Tensors go to a GPU with ``x.to("cuda:0")`` / ``x.cuda()``, modules with
``model.to("cuda")``; numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) counts as one device.
"""

from __future__ import annotations

__all__ = ["is_available", "device_count"]


def is_available() -> bool:
    """Whether tensors can be put on ``"cuda"``: numba-cuda is installed and finds a GPU (or
    runs its simulator)."""
    from .backend.cuda_availability import is_available as available
    return available()


def device_count() -> int:
    """The number of CUDA devices (``"cuda:0"`` ... ``"cuda:N-1"``); 0 without CUDA."""
    from .backend.cuda_availability import device_count as count
    return count()
