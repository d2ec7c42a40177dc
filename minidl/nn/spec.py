"""Describing a module tree as plain data, and rebuilding it from that description.

A spec is ``{"type": name, "args": {...}, "children": [[name, spec], ...]}``: the registered type
name, the constructor arguments from ``get_config()`` (plain data only), and the child modules in
order. ``module_from_spec`` checks every field, looks the type up in the closed registry and calls
the class's ``from_config`` — it never imports or evaluates anything named by the data.
"""

from __future__ import annotations

from ..io.state_tree import check_tree
from .module import Module
from .registry import module_class

# Bounds that keep a hostile description cheap to reject.
MAX_DEPTH = 64
MAX_ARG_DEPTH = 8


def module_to_spec(module: Module) -> dict:
    """The plain-data description of ``module`` and its children."""
    name = getattr(type(module), "_registered_name", None)
    if name is None or module_class(name) is not type(module):
        raise TypeError(f"{type(module).__name__} is not registered; call "
                        f"minidl.nn.register_module({type(module).__name__}) to describe it")
    args = module.get_config()
    check_tree(args, "args of " + name, max_depth=MAX_ARG_DEPTH)
    return {"type": name, "args": dict(args),
            "children": [[child_name, module_to_spec(child)]
                         for child_name, child in module.named_children()]}


def module_from_spec(spec, _depth: int = 0, _path: str = "model") -> Module:
    """Rebuild a module tree from :func:`module_to_spec`'s output.

    Raises ValueError, TypeError or KeyError naming the offending place (e.g. "model.0.args").
    """
    if _depth > MAX_DEPTH:
        raise ValueError(f"{_path}: module tree deeper than {MAX_DEPTH} levels")
    if not isinstance(spec, dict) or set(spec) != {"type", "args", "children"}:
        raise ValueError(f"{_path}: a module spec is a dict with exactly 'type', 'args' and "
                         f"'children', got {sorted(spec) if isinstance(spec, dict) else type(spec).__name__}")
    type_name, args, children = spec["type"], spec["args"], spec["children"]
    if not isinstance(type_name, str):
        raise TypeError(f"{_path}.type: expected a string, got {type(type_name).__name__}")
    if not isinstance(args, dict):
        raise TypeError(f"{_path}.args: expected a dict, got {type(args).__name__}")
    check_tree(args, f"{_path}.args", max_depth=MAX_ARG_DEPTH)
    if not isinstance(children, list):
        raise TypeError(f"{_path}.children: expected a list, got {type(children).__name__}")
    built_children = []
    for index, entry in enumerate(children):
        if (not isinstance(entry, (list, tuple)) or len(entry) != 2
                or not isinstance(entry[0], str)):
            raise ValueError(f"{_path}.children[{index}]: expected [name, spec]")
        child_path = f"{_path}.{entry[0]}"
        built_children.append((entry[0], module_from_spec(entry[1], _depth + 1, child_path)))
    names = [name for name, _ in built_children]
    if len(set(names)) != len(names):
        raise ValueError(f"{_path}.children: duplicate child names in {names}")
    cls = module_class(type_name)
    try:
        module = cls.from_config(dict(args), built_children)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{_path}: cannot build {type_name} from args {args}: {error}") from None
    # Modules that build their own children (not containers) must have built the same tree.
    built = [(name, type(child)) for name, child in module.named_children()]
    expected = [(name, type(child)) for name, child in built_children]
    if built != expected:
        raise ValueError(f"{_path}: {type_name} built children {[n for n, _ in built]} but the "
                         f"spec lists {names}")
    return module
