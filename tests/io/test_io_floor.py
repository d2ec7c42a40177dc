"""The file format is the bottom floor: ``minidl/io`` imports nothing from minidl outside itself.

Read from the source (every import statement, module level or inside a function), so a lazy
import of ``minidl.nn`` or ``minidl.onnx`` in a corner of the package counts as much as one at
the top.
"""

import ast
from pathlib import Path

import minidl.io

IO_DIR = Path(minidl.io.__file__).parent


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``source``, a module of ``package``;
    relative imports are resolved against ``package``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.append((node.lineno, module))
    return found


def imports_from_above(directory: Path, package: str = "minidl.io") -> list[str]:
    """``file:line module`` for each import of a minidl module outside ``package``."""
    problems = []
    for path in sorted(directory.glob("*.py")):
        for line, module in imported_modules(path.read_text(), package):
            inside = module == package or module.startswith(package + ".")
            if (module == "minidl" or module.startswith("minidl.")) and not inside:
                problems.append(f"{path.name}:{line} {module}")
    return problems


def test_io_imports_nothing_from_the_floors_above():
    assert imports_from_above(IO_DIR) == []


def test_the_scan_sees_absolute_relative_and_lazy_imports(tmp_path):
    (tmp_path / "a.py").write_text(
        "import numpy\n"
        "from minidl.io.errors import CheckpointError\n"
        "from . import layout\n"
        "from ..nn import spec\n"
        "def load():\n"
        "    from minidl.onnx import import_model\n"
        "    import minidl.optim\n")
    assert imports_from_above(tmp_path) == [
        "a.py:4 minidl.nn", "a.py:6 minidl.onnx", "a.py:7 minidl.optim"]
