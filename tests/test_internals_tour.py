"""The tour of the internals (docs/internals.md) still points at real code: every file it links
exists, and every function or class it names is defined in the file it names."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "docs" / "internals.md"

# [`label`](../relative/path): the label is `path.py:name`, or a bare `name` of the linked file.
LINK = re.compile(r"\[`([^`]+)`\]\(([^)#]+)\)|\[[^\]]+\]\(([^)#]+)\)")
REFERENCE = re.compile(r"`((?:minidl|tests)/[\w/]+\.py):([A-Za-z_][\w.]*)`")


def defined_names(path: Path) -> set[str]:
    """Module-level functions, classes and assigned names, and ``Class.method`` for methods."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}.{item.name}" for item in node.body
                      if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def broken_references(text: str, base: Path, root: Path) -> list[str]:
    """What the text names that does not exist: a linked file, or a name in its file."""
    problems = []
    for label, code_target, plain_target in LINK.findall(text):
        target = (base / (code_target or plain_target)).resolve()
        if not target.exists():
            problems.append(f"no file {code_target or plain_target}")
            continue
        if not label or target.suffix != ".py":
            continue
        named = REFERENCE.fullmatch(f"`{label}`")
        if named and (root / named.group(1)).resolve() != target:
            problems.append(f"{label} links {code_target}")
        name = named.group(2) if named else label
        if re.fullmatch(r"[A-Za-z_][\w.]*", name) and name not in defined_names(target):
            problems.append(f"{target.relative_to(root).as_posix()} defines no {name}")
    for path, name in REFERENCE.findall(text):
        if not (root / path).is_file():
            problems.append(f"no file {path}")
        elif name not in defined_names(root / path):
            problems.append(f"{path} defines no {name}")
    return sorted(set(problems))


def test_every_file_and_name_the_tour_points_at_exists():
    assert broken_references(TOUR.read_text(), TOUR.parent, ROOT) == []


def test_the_tour_is_a_short_read_linked_from_the_readme():
    assert len(TOUR.read_text().split()) < 3000            # about 15 minutes at 200 words/min
    assert "(docs/internals.md)" in (ROOT / "README.md").read_text()


def test_a_renamed_function_or_a_moved_file_is_reported(tmp_path):
    (tmp_path / "minidl").mkdir()
    (tmp_path / "minidl" / "engine.py").write_text(
        "def backward(root):\n    pass\n\nclass Tensor:\n    def backward(self):\n        pass\n")
    (tmp_path / "docs").mkdir()
    text = ("[`minidl/engine.py:backward`](../minidl/engine.py) "
            "[`Tensor.backward`](../minidl/engine.py) [`walk`](../minidl/engine.py) "
            "[`minidl/engine.py:Tensor.grad`](../minidl/engine.py) "
            "[the spec](../SPEC.md) `minidl/engine.py:forward` `minidl/gone.py:backward`")
    assert broken_references(text, tmp_path / "docs", tmp_path) == [
        "minidl/engine.py defines no Tensor.grad", "minidl/engine.py defines no forward",
        "minidl/engine.py defines no walk", "no file ../SPEC.md", "no file minidl/gone.py"]
