"""No module imports a module that imports it back, directly or through others.

A circle means neither module can be read without the other; inside a floor the table of floors
allows it, so this test forbids it. Every import statement counts, lazy ones inside functions
too: a lazy import only hides a circle from Python's import machinery, not from the reader. The
circles that remain are named below with their reason; one that is gone must leave the list.
"""

from pathlib import Path

from import_scan import imports_in, module_name, modules_named

import minidl

ROOT = Path(minidl.__file__).parents[1]

# Each entry: the modules a remaining circle may run through (a package name covers its modules).
KNOWN_CIRCLES = {
    # ``Tensor.backward`` runs the graph walk, and the walk hands gradients back as Tensors: one
    # concept (differentiating a tensor) in two files of the autograd floor.
    "tensor and its graph walk": ("minidl.autograd.tensor", "minidl.autograd.engine"),
}


def import_graph(package: Path, root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (itself left out)."""
    modules = {module_name(path, root) for path in package.rglob("*.py")}
    graph = {module: set() for module in modules}
    for path, found in imports_in(package, root, recursive=True):
        importer = module_name(path, root)
        graph[importer] |= {module for module in modules_named(found, root)
                            if module in modules and module != importer}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset]:
    """The groups of modules that reach one another through imports (each of two or more)."""
    reach = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for module in graph[todo.pop()] - seen:
                seen.add(module)
                todo.append(module)
        reach[start] = seen
    groups = {frozenset({start} | {other for other in reach[start] if start in reach[other]})
              for start in graph}
    return sorted((group for group in groups if len(group) > 1), key=sorted)


def within(module: str, names) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def unexplained_circles(graph, known: dict[str, tuple]) -> tuple[list[list[str]], set[str]]:
    """(circles that no known entry covers, the known entries that no circle needs any more)."""
    found = circles(graph)
    unexplained = [sorted(group) for group in found
                   if not any(all(within(m, names) for m in group) for names in known.values())]
    needed = {reason for reason, names in known.items()
              if any(all(within(m, names) for m in group) for group in found)}
    return unexplained, set(known) - needed


def test_no_module_imports_one_that_imports_it_back():
    unexplained, stale = unexplained_circles(import_graph(ROOT / "minidl", ROOT), KNOWN_CIRCLES)
    assert unexplained == []
    assert stale == set(), "these circles are cut: remove them from KNOWN_CIRCLES"


def test_a_circle_through_a_lazy_import_and_a_third_module_is_found(tmp_path):
    package = tmp_path / "minidl" / "data"
    package.mkdir(parents=True)
    (package / "parsing.py").write_text("def parse():\n    from .kernels import run\n")
    (package / "kernels.py").write_text("from minidl.data import codes\n")
    (package / "codes.py").write_text("from minidl.data.parsing import OK\n")
    (package / "reader.py").write_text("from . import parsing\n")
    graph = import_graph(tmp_path / "minidl", tmp_path)
    assert circles(graph) == [frozenset(
        {"minidl.data.parsing", "minidl.data.kernels", "minidl.data.codes"})]
    assert unexplained_circles(graph, {"kernels": ("minidl.data",), "gone": ("minidl.io",)}) == (
        [], {"gone"})
