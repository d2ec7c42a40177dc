"""Containers: Sequential, ModuleList, ModuleDict."""

from __future__ import annotations

from collections import OrderedDict

from ..module import Module
from ..registry import register_module


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
        modules = list(self._modules.values())
        if isinstance(index, slice):
            return Sequential(*modules[index])
        return modules[index]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self._modules)), module)
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

    def __getitem__(self, index):
        return list(self._modules.values())[index]

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

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

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
