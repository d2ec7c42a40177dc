"""Inference for embedding in applications: a model traced once into a flat plan of backend calls.

``md.compile(model, example_input)`` returns a :class:`CompiledModel`: calling it runs the ops the
model ran on the example, in order, straight on the backend, with BatchNorm folded into the
convolution or linear layer before it and none of autograd's bookkeeping. See :mod:`.plan`.
"""

from .plan import CompiledModel, compile_model

__all__ = ["CompiledModel", "compile_model"]
