"""Reading a package's imports from its source: every import statement, at module level or
inside a function, with relative imports resolved to absolute module names."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Import:
    line: int
    module: str          # absolute module name
    names: tuple         # the names taken from it (``from m import a, b``); () for ``import m``


def module_name(path: Path, root: Path) -> str:
    """``minidl.io.reader`` for ``root/minidl/io/reader.py`` (a package for ``__init__.py``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool = False) -> list[Import]:
    """Every import in ``source``, the text of ``module``."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                absolute = ".".join(base + ([node.module] if node.module else []))
            else:
                absolute = node.module
            found.append(Import(node.lineno, absolute, tuple(a.name for a in node.names)))
    return found


def imports_in(directory: Path, root: Path, recursive: bool = False):
    """(path, Import) for every import of every module under ``directory``."""
    for path in sorted(directory.rglob("*.py") if recursive else directory.glob("*.py")):
        module = module_name(path, root)
        for found in imports_of(path.read_text(), module, path.name == "__init__.py"):
            yield path, found


def modules_named(found: Import, root: Path) -> list[str]:
    """The modules an import statement reaches: ``minidl.distributed`` for ``from minidl import
    distributed`` (a submodule), ``minidl`` for ``from minidl import __version__`` (a name)."""
    if not found.names:
        return [found.module]
    base = Path(root, *found.module.split("."))
    reached = []
    for name in found.names:
        is_submodule = (base / name).is_dir() or (base / f"{name}.py").exists()
        module = f"{found.module}.{name}" if is_submodule else found.module
        if module not in reached:
            reached.append(module)
    return reached
