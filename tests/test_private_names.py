"""A private name stays in its package: no minidl module imports ``_name`` (or from a ``_module``)
of another package.  A helper that two packages need gets a public home and a true name, as
``minidl.ops.size_arguments.int_pair`` did for the convolution module's ``_pair``."""

from pathlib import Path

from import_scan import imports_in

import minidl

ROOT = Path(minidl.__file__).parents[1]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _owner(module: str, name: str, root: Path) -> str:
    """The package ``name`` belongs to: ``module`` itself when the name is one of its
    submodules (``from minidl.ops import conv``), else ``module``'s package."""
    base = Path(root, *module.split("."))
    if (base / name).is_dir() or (base / f"{name}.py").exists():
        return module
    return module.rsplit(".", 1)[0]


def private_imports_across_packages(directory: Path, root: Path) -> list[str]:
    problems = []
    for path, found in imports_in(directory, root, recursive=True):
        if not found.module or not found.module.startswith("minidl"):
            continue
        importer = ".".join(path.relative_to(root).parent.parts)
        module_is_private = any(_private(part) for part in found.module.split("."))
        for name in found.names:
            if (_private(name) or module_is_private) and \
                    _owner(found.module, name, root) != importer:
                problems.append(f"{path.relative_to(root)}:{found.line} {found.module}.{name}")
    return problems


def test_no_private_name_is_imported_from_another_package():
    assert private_imports_across_packages(ROOT / "minidl", ROOT) == []


def test_the_scan_finds_a_private_import_across_packages(tmp_path):
    (tmp_path / "minidl" / "nn").mkdir(parents=True)
    (tmp_path / "minidl" / "ops").mkdir()
    (tmp_path / "minidl" / "ops" / "conv.py").write_text("def _pair(v): return v\n")
    (tmp_path / "minidl" / "ops" / "pool.py").write_text("from .conv import _pair\n")
    (tmp_path / "minidl" / "nn" / "conv.py").write_text(
        "from ..ops.conv import _pair\nfrom minidl.ops._util import check\n")
    assert private_imports_across_packages(tmp_path / "minidl", tmp_path) == [
        "minidl/nn/conv.py:1 minidl.ops.conv._pair", "minidl/nn/conv.py:2 minidl.ops._util.check"]
