"""The file format is the bottom floor: ``minidl/io`` imports nothing from minidl outside itself.

Read from the source (every import statement, module level or inside a function), so a lazy
import of ``minidl.nn`` or ``minidl.onnx`` in a corner of the package counts as much as one at
the top.
"""

from pathlib import Path

from import_scan import imports_in

import minidl.io

IO_DIR = Path(minidl.io.__file__).parent


def imports_from_above(directory: Path, root: Path) -> list[str]:
    """``file:line module`` for each import of a minidl module outside ``minidl.io``."""
    problems = []
    for path, found in imports_in(directory, root):
        module = found.module
        inside = module == "minidl.io" or module.startswith("minidl.io.")
        if (module == "minidl" or module.startswith("minidl.")) and not inside:
            problems.append(f"{path.name}:{found.line} {module}")
    return problems


def test_io_imports_nothing_from_the_floors_above():
    assert imports_from_above(IO_DIR, IO_DIR.parents[1]) == []


def test_the_scan_sees_absolute_relative_and_lazy_imports(tmp_path):
    package = tmp_path / "minidl" / "io"
    package.mkdir(parents=True)
    (package / "a.py").write_text(
        "import numpy\n"
        "from minidl.io.errors import CheckpointError\n"
        "from . import layout\n"
        "from ..nn import spec\n"
        "def load():\n"
        "    from minidl.onnx import import_model\n"
        "    import minidl.optim\n")
    assert imports_from_above(package, tmp_path) == [
        "a.py:4 minidl.nn", "a.py:6 minidl.onnx", "a.py:7 minidl.optim"]
