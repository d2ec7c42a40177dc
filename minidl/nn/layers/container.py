"""Containers: Sequential, ModuleList, ModuleDict.

Indexing follows PyTorch: ``seq[i] = layer`` replaces a child under its name, ``del seq[i]``
removes one, and a slice is a new container of the same children that keeps their names (so
``model[:2].state_dict()`` uses the names ``model.state_dict()`` uses). ModuleList renumbers its
children after a deletion, since its names are positions.
"""

from __future__ import annotations

from collections import OrderedDict

from ..module import Module
from ..registry import register_module


def _child_name(container: Module, index) -> str:
    """The name of the child at position ``index`` (negative counts from the end)."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"{type(container).__name__} indices must be integers or slices, got "
                        f"{type(index).__name__}")
    names = list(container._modules)
    if not -len(names) <= index < len(names):
        raise IndexError(f"index {index} is out of range for {type(container).__name__} of "
                         f"length {len(names)}")
    return names[index]


@register_module
class Sequential(Module):
    """Applies its children in order; children are named "0", "1", ... (or by an OrderedDict)."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for index, module in enumerate(modules):
                self.add_module(str(index), module)

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Sequential(OrderedDict(list(self._modules.items())[index]))
        return self._modules[_child_name(self, index)]

    def __setitem__(self, index, module: Module) -> None:
        self.add_module(_child_name(self, index), module)

    def __delitem__(self, index) -> None:
        names = list(self._modules)[index] if isinstance(index, slice) \
            else [_child_name(self, index)]
        for name in names:
            del self._modules[name]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules) -> "Sequential":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        """Put ``module`` before position ``index``; children are renumbered "0", "1", ..."""
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._modules.clear()
        for position, child in enumerate(modules):
            self.add_module(str(position), child)
        return self

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config, children):
        # Children keep their names: "0", "1", ... or the user's OrderedDict keys.
        if config:
            raise ValueError(f"Sequential takes no arguments, got {sorted(config)}")
        return cls(OrderedDict(children))


@register_module
class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ..."""

    def __init__(self, modules=()):
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules) -> "ModuleList":
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._renumber(modules)

    def _renumber(self, modules) -> None:
        self._modules.clear()
        for module in modules:
            self.append(module)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return ModuleList(list(self._modules.values())[index])
        return self._modules[_child_name(self, index)]

    def __setitem__(self, index, module: Module) -> None:
        self.add_module(_child_name(self, index), module)

    def __delitem__(self, index) -> None:
        modules = list(self._modules.values())
        del modules[index if isinstance(index, slice) else list(self._modules).index(
            _child_name(self, index))]
        self._renumber(modules)

    def __iadd__(self, modules) -> "ModuleList":
        return self.extend(modules)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config, children):
        if config:
            raise ValueError(f"ModuleList takes no arguments, got {sorted(config)}")
        names = [name for name, _ in children]
        if names != [str(i) for i in range(len(children))]:
            raise ValueError(f"ModuleList children must be named 0, 1, ..., got {names}")
        return cls(module for _, module in children)


@register_module
class ModuleDict(Module):
    """A dict of modules, registered as children under their keys."""

    def __init__(self, modules=None):
        super().__init__()
        for name, module in (modules or {}).items():
            self.add_module(name, module)

    def __getitem__(self, name):
        return self._modules[name]

    def __setitem__(self, name, module):
        self.add_module(name, module)

    def __delitem__(self, name) -> None:
        del self._modules[name]

    def __contains__(self, name) -> bool:
        return name in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def pop(self, name) -> Module:
        return self._modules.pop(name)

    def update(self, modules) -> None:
        for name, module in (modules.items() if hasattr(modules, "items") else modules):
            self.add_module(name, module)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config, children):
        if config:
            raise ValueError(f"ModuleDict takes no arguments, got {sorted(config)}")
        return cls(OrderedDict(children))
