"""ParameterList and ParameterDict: parameters held by position or by key, registered with the
module so that ``parameters()``, ``state_dict()`` and optimizers find them (a plain Python list
of Parameters would hide them)."""

from __future__ import annotations

import numpy as np

from ..module import Module
from ..parameter import Parameter
from ..registry import register_module


def _as_parameter(value) -> Parameter:
    return value if isinstance(value, Parameter) else Parameter(value)


class _ParameterContainer(Module):
    """What both share: a saved model rebuilds them from their parameters' shapes and dtypes
    (zeros), and the file's weights are loaded into them afterwards."""

    def get_config(self):
        return {"names": list(self._parameters),
                "shapes": [list(p.shape) for p in self._parameters.values()],
                "dtypes": [str(p.dtype) for p in self._parameters.values()]}

    @classmethod
    def _zeros(cls, config):
        return [Parameter(np.zeros(shape, dtype)) for shape, dtype in
                zip(config["shapes"], config["dtypes"])]

    def forward(self, *args):
        raise RuntimeError(f"{type(self).__name__} holds parameters and is not called")

    def __len__(self) -> int:
        return len(self._parameters)


@register_module
class ParameterList(_ParameterContainer):
    """Parameters named "0", "1", ... by position, as PyTorch's."""

    def __init__(self, values=None):
        super().__init__()
        for value in values or ():
            self.append(value)

    def append(self, value) -> "ParameterList":
        """Add ``value`` (a Parameter, or an array made into one) at the end."""
        self.register_parameter(str(len(self)), _as_parameter(value))
        return self

    def extend(self, values) -> "ParameterList":
        """Append each of ``values``."""
        for value in values:
            self.append(value)
        return self

    def __getitem__(self, index: int) -> Parameter:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"ParameterList indices must be integers, got {index!r}")
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for ParameterList of length "
                             f"{len(self)}")
        return self._parameters[str(index % len(self))]

    def __setitem__(self, index: int, value) -> None:
        self[index]  # checks the index
        self.register_parameter(str(index % len(self)), _as_parameter(value))

    def __iter__(self):
        return iter(list(self._parameters.values()))

    @classmethod
    def from_config(cls, config, children):
        return cls(cls._zeros(config))


@register_module
class ParameterDict(_ParameterContainer):
    """Parameters by string key, in insertion order, as PyTorch's."""

    def __init__(self, parameters=None):
        super().__init__()
        for key, value in dict(parameters or {}).items():
            self[key] = value

    def __getitem__(self, key: str) -> Parameter:
        try:
            return self._parameters[key]
        except KeyError:
            raise KeyError(f"ParameterDict has no parameter {key!r}") from None

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        self[key]  # KeyError naming it
        del self._parameters[key]

    def __contains__(self, key) -> bool:
        return key in self._parameters

    def __iter__(self):
        return iter(list(self._parameters))

    def keys(self):
        """The keys, in insertion order."""
        return list(self._parameters)

    def values(self):
        """The parameters, in insertion order."""
        return list(self._parameters.values())

    def items(self):
        """(key, parameter) pairs, in insertion order."""
        return list(self._parameters.items())

    def update(self, parameters) -> None:
        """Add or replace each (key, parameter) of a dict or pairs."""
        for key, value in dict(parameters).items():
            self[key] = value

    @classmethod
    def from_config(cls, config, children):
        return cls(dict(zip(config["names"], cls._zeros(config))))
