"""``nn.utils``: helpers used around a training step (gradient clipping), as in PyTorch."""

from .clip_grad import clip_grad_norm_, clip_grad_value_

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
