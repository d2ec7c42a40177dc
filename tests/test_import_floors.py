"""Dependencies point one way: the README's table of floors ("How it is built") is the rule, and
this test reads it from there, so the table and the test cannot drift apart.

A module may import from its own floor and the floors below it. Every import statement counts,
at module level or inside a function, so a lazy ``import minidl.nn`` in a corner of the package
counts as much as one at the top. The few imports that point up are listed by name under the
table; one that is listed but no longer happens fails too, so the list stays true.
"""

import re
from pathlib import Path

from import_scan import imports_in, module_name, modules_named

import minidl

ROOT = Path(minidl.__file__).parents[1]
README = ROOT / "README.md"


def section(text: str, heading: str) -> str:
    """The text of the README section that starts with ``## heading``."""
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def as_module(entry: str) -> str:
    """``minidl.nn`` for ``minidl/nn``, ``minidl.placement`` for ``minidl/placement.py``, and
    ``minidl`` for ``minidl/__init__.py``."""
    module = entry.removesuffix(".py").replace("/", ".")
    return module.removesuffix(".__init__")


def floors_of(text: str) -> list[list[str]]:
    """The table's rows, highest first, as the module names each row holds."""
    floors = []
    for row in re.findall(r"^\| (`minidl[^|]*)\|", text, flags=re.M):
        floors.append([as_module(entry) for entry in re.findall(r"`(minidl[^`]*)`", row)])
    return floors


def upward_imports_of(text: str) -> set[tuple[str, str]]:
    """The named exceptions: ``(importing file, module of a higher floor)`` for each bullet
    "- `importer` → `imported`: why"."""
    pairs = re.findall(r"^- `(minidl/[^`]+\.py)` → `(minidl[^`]*)`:", text, flags=re.M)
    return {(importer, as_module(imported)) for importer, imported in pairs}


def place_of(module: str, floors: list[list[str]]) -> tuple[int, str] | None:
    """(row index, entry) of the table entry holding ``module``: the longest entry that contains
    it; the package root ``minidl`` holds only itself."""
    found = [(index, entry) for index, entries in enumerate(floors) for entry in entries
             if module == entry or (entry != "minidl" and module.startswith(entry + "."))]
    return max(found, key=lambda place: len(place[1]), default=None)


def floor_violations(package: Path, root: Path, floors, allowed) -> tuple[list[str], set]:
    """(problems, the allowed exceptions that were used): ``file:line module`` for each import of
    a higher floor, and each file or imported module that no row names."""
    problems, used = [], set()
    for path in sorted(package.rglob("*.py")):
        if place_of(module_name(path, root), floors) is None:
            problems.append(f"{path.relative_to(root).as_posix()} is on no floor of the table")
    for path, found in imports_in(package, root, recursive=True):
        if not (found.module == "minidl" or found.module.startswith("minidl.")):
            continue
        importer = path.relative_to(root).as_posix()
        own = place_of(module_name(path, root), floors)
        for module in modules_named(found, root):
            target = place_of(module, floors)
            if target is None:
                problems.append(f"{importer}:{found.line} {module} is on no floor of the table")
            elif own is not None and target[0] < own[0]:
                if (importer, target[1]) in allowed:
                    used.add((importer, target[1]))
                else:
                    problems.append(f"{importer}:{found.line} {module}")
    return problems, used


def test_every_import_keeps_to_the_readme_table_of_floors():
    text = section(README.read_text(), "How it is built")
    floors, allowed = floors_of(text), upward_imports_of(text)
    problems, used = floor_violations(ROOT / "minidl", ROOT, floors, allowed)
    assert problems == []
    assert allowed - used == set(), "listed under the table but no longer imported: remove them"


def test_the_table_names_every_package_once():
    floors = floors_of(section(README.read_text(), "How it is built"))
    entries = [entry for row in floors for entry in row]
    assert len(entries) == len(set(entries))
    assert {"minidl", "minidl.io", "minidl.backend", "minidl.autograd", "minidl.ops",
            "minidl.nn", "minidl.checkpoint", "minidl.cli"} <= set(entries)
    assert floors[-1] == ["minidl.io"]   # the file format is the bottom floor


TABLE = """\
| package | what it holds |
| --- | --- |
| `minidl/nn`, `minidl/optim` | layers |
| `minidl/ops` | ops |
| `minidl/io` | files |

- `minidl/ops/shape.py` → `minidl/nn`: a named exception.
"""


def _scanned(tmp_path, files: dict[str, str]) -> tuple[list[str], set]:
    for name, source in files.items():
        path = tmp_path / "minidl" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return floor_violations(tmp_path / "minidl", tmp_path, floors_of(TABLE),
                            upward_imports_of(TABLE))


def test_the_scan_sees_absolute_relative_and_lazy_imports_of_higher_floors(tmp_path):
    problems, _ = _scanned(tmp_path, {
        "io/__init__.py": "",
        "io/a.py": ("import numpy\n"
                    "from minidl.io.errors import CheckpointError\n"
                    "from . import layout\n"
                    "from ..nn import spec\n"
                    "def load():\n"
                    "    from minidl.ops import conv\n"
                    "    import minidl.optim\n"),
        "nn/b.py": "from ..ops import conv\nfrom minidl import optim\nfrom minidl.io import a\n",
        "ops/conv.py": "from minidl import nn\n",
        "optim/__init__.py": "",
    })
    assert problems == ["minidl/io/a.py:4 minidl.nn", "minidl/io/a.py:6 minidl.ops.conv",
                        "minidl/io/a.py:7 minidl.optim", "minidl/ops/conv.py:1 minidl.nn"]


def test_the_scan_honours_a_named_exception_and_reports_its_use(tmp_path):
    problems, used = _scanned(tmp_path, {"ops/shape.py": "def f():\n    from ..nn import spec\n"})
    assert problems == []
    assert used == {("minidl/ops/shape.py", "minidl.nn")}


def test_the_scan_refuses_a_file_and_an_import_that_no_row_names(tmp_path):
    problems, _ = _scanned(tmp_path, {"cli/main.py": "", "ops/x.py": "import minidl.cli\n"})
    assert problems == ["minidl/cli/main.py is on no floor of the table",
                        "minidl/ops/x.py:1 minidl.cli is on no floor of the table"]
