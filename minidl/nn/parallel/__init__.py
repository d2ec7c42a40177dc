"""Parallel wrappers of modules: ``nn.parallel.DistributedDataParallel``."""

from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
