"""The closed registry of module types that files may name.

A model file describes its layers by type name. Loading looks each name up here — it never imports
a module or calls anything else the file names — so a file can only build what this process
already trusts: the built-in layers, plus classes the user registered in their own code.
"""

from __future__ import annotations

_REGISTRY: dict[str, type] = {}


def register_module(cls=None, *, name: str | None = None):
    """Allow ``cls`` to be rebuilt from files, under ``name`` (default: the class name).

    Usable as ``register_module(MyLayer)`` or as a ``@register_module`` decorator. The class must
    implement ``get_config()`` returning its constructor arguments as plain data.
    """
    def register(klass):
        from .module import Module
        if not (isinstance(klass, type) and issubclass(klass, Module)):
            raise TypeError(f"register_module: {klass!r} is not a Module subclass")
        key = name or klass.__name__
        existing = _REGISTRY.get(key)
        if existing is not None and existing is not klass:
            raise ValueError(f"register_module: the name {key!r} is already registered for "
                             f"{existing.__module__}.{existing.__qualname__}")
        _REGISTRY[key] = klass
        klass._registered_name = key
        return klass

    return register if cls is None else register(cls)


def unregister_module(name: str) -> None:
    """Remove a user registration (built-ins can be removed too; mostly for tests)."""
    _REGISTRY.pop(name, None)


def module_class(name: str) -> type:
    """The registered class for ``name``; KeyError naming it if there is none."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise KeyError(f"module type {name!r} is not registered; if it is your own layer, call "
                       f"minidl.nn.register_module(YourClass) before loading") from None


def registered_names() -> list[str]:
    return sorted(_REGISTRY)
