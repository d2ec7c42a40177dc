"""How ``fit`` turns each batch's loss into optimizer steps: gradient accumulation and clipping.

``accumulate_grad_batches=k`` (Lightning's name) sums the gradients of k batches before one
optimizer step: the effective batch is k times larger while memory holds one batch. Each loss
is divided by k before ``backward`` (so a full window's gradient is the mean over its k
batches, as one big batch would give), and an epoch's last batch always completes its window,
so no gradient crosses an epoch boundary. The scheduler steps with the optimizer.

``clip_grad_norm=c`` rescales the summed gradients so that their total L2 norm is at most c,
``clip_grad_value=v`` clamps every entry to [-v, v] (both right before the optimizer step, as
``nn.utils.clip_grad_norm_``/``clip_grad_value_`` would).

A checkpoint taken inside a window must carry the gradients summed so far, or the resumed run
would step on a partial sum: :class:`GradientSteps` is a checkpointed object, whose state is
the number of batches pending and, when there are some, their summed gradients.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..autograd.tensor import Tensor
from ..backend import get_backend
from ..nn.utils.clip_grad import clip_grad_norm_, clip_grad_value_


def _check_positive(name: str, value, integer: bool = False):
    kind = numbers.Integral if integer else numbers.Real
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0 \
            or not np.isfinite(value):
        what = "an integer >= 1" if integer else "a finite number > 0"
        raise ValueError(f"fit: {name} must be {what}, got {value!r}")
    return int(value) if integer else float(value)


class GradientSteps:
    """Backward, accumulation, clipping and the optimizer/scheduler step of one batch."""

    def __init__(self, optimizer, scheduler, accumulate_grad_batches: int = 1,
                 clip_grad_norm: float | None = None, clip_grad_value: float | None = None):
        self.optimizer, self.scheduler = optimizer, scheduler
        self.accumulate = _check_positive("accumulate_grad_batches", accumulate_grad_batches,
                                          integer=True)
        self.clip_norm = _check_positive("clip_grad_norm", clip_grad_norm)
        self.clip_value = _check_positive("clip_grad_value", clip_grad_value)
        self.pending = 0  # batches whose gradients are summed but not stepped yet

    @property
    def checkpointed(self) -> bool:
        """Whether a run's checkpoints must carry this object (only with accumulation)."""
        return self.accumulate > 1

    def _parameters(self) -> list:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def apply(self, loss, last_of_epoch: bool = True) -> None:
        """Backpropagate ``loss`` and step the optimizer when the window is full (or the epoch
        ends)."""
        if self.pending == 0:
            self.optimizer.zero_grad()
        (loss if self.accumulate == 1 else loss * (1.0 / self.accumulate)).backward()
        self.pending += 1
        if self.pending < self.accumulate and not last_of_epoch:
            return
        parameters = self._parameters()
        if self.clip_value is not None:
            clip_grad_value_(parameters, self.clip_value)
        if self.clip_norm is not None:
            clip_grad_norm_(parameters, self.clip_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.pending = 0

    def state_dict(self) -> dict:
        """``{"pending": n, "grads": [...]}``: the summed gradients (None for a parameter
        without one) while a window is open, an empty list otherwise."""
        grads = []
        if self.pending:
            for p in self._parameters():
                grad = p.grad
                grads.append(None if grad is None else
                             get_backend(grad.device).to_numpy(grad.data).copy())
        return {"pending": self.pending, "grads": grads}

    def load_state_dict(self, state: dict) -> None:
        """Put back an open window's gradients; ``ValueError`` naming what does not fit."""
        if not isinstance(state, dict):
            raise ValueError("gradient steps: state must be a dict")
        pending, grads = state.get("pending"), state.get("grads")
        if isinstance(pending, bool) or not isinstance(pending, int) \
                or not 0 <= pending < self.accumulate:
            raise ValueError(f"gradient steps: state field 'pending' is {pending!r}, expected "
                             f"0 to {self.accumulate - 1} (accumulate_grad_batches="
                             f"{self.accumulate})")
        parameters = self._parameters()
        if not isinstance(grads, list) or len(grads) != (len(parameters) if pending else 0):
            raise ValueError("gradient steps: state field 'grads' does not hold one gradient "
                             "per optimized parameter")
        for i, (p, grad) in enumerate(zip(parameters, grads)):
            if grad is not None and (not isinstance(grad, np.ndarray) or grad.shape != p.shape
                                     or grad.dtype != p.dtype):
                raise ValueError(f"gradient steps: state field 'grads'[{i}] must be a "
                                 f"{p.dtype} array of shape {p.shape}")
        for p, grad in zip(parameters, grads):
            p.grad = None if grad is None else Tensor(grad.copy(), device=p.device)
        self.pending = pending
