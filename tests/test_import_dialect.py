"""One import dialect inside the package: a module names its neighbours relatively
(``from ..io import read_file``), never through the package's own absolute name.

Relative imports say where a module stands among its neighbours, and keep working when the
package is vendored under another name. The one exception is ``minidl/__main__.py``, which
``python -m minidl`` runs as a script.
"""

import ast
from pathlib import Path

import minidl

PACKAGE = Path(minidl.__file__).parent
SCRIPTS = {PACKAGE / "__main__.py"}


def absolute_self_import_lines(source: str) -> list[int]:
    """The line of each import statement in ``source`` that names ``minidl`` absolutely, at
    module level or inside a function."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name.split(".")[0] == "minidl" for name in names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_package_imports_itself_only_relatively():
    found = [f"{path.relative_to(PACKAGE.parent).as_posix()}:{line}"
             for path in sorted(PACKAGE.rglob("*.py")) if path not in SCRIPTS
             for line in absolute_self_import_lines(path.read_text())]
    assert found == []


def test_the_check_sees_every_absolute_form_and_passes_relative_ones():
    source = ("from . import io\n"
              "from ..io.reader import read_file\n"
              "def f():\n"
              "    from minidl.io import read_file\n"
              "    import minidl.nn\n"
              "    import minidlx, numpy\n")
    assert absolute_self_import_lines(source) == [4, 5]
