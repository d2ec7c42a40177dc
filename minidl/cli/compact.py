"""Compact printing for ``inspect`` and ``diff``: shapes and summaries, not one number a line.

A training checkpoint's metadata holds long lists (a metric per epoch, optimizer settings per
group, a reader's state); printed one value per line they bury what a reader came for. By
default long lists are summarised (count, min and max), short ones stay on one line, and long
listings stop after ``LIMIT`` entries with a count of the rest; ``--full`` prints everything.
"""

from __future__ import annotations

import json
import math
import re

LIMIT = 40         # entries shown of a long listing before "... N more"
INLINE = 8         # lists of at most this many scalars are printed whole, on one line
WIDTH = 88         # a container is printed on one line when it fits in this many characters


def _scalar(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return json.dumps(value, default=str)


def _is_scalar(value) -> bool:
    return not isinstance(value, (dict, list))


def _list_summary(values: list) -> str:
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) == len(values) and numbers:
        finite = [v for v in numbers if math.isfinite(v)]
        span = f", {min(finite):.6g} .. {max(finite):.6g}" if finite else ""
        kind = "ints" if all(isinstance(v, int) for v in numbers) else "numbers"
        return f"[{len(values)} {kind}{span}]"
    return f"[{len(values)} values: {', '.join(_scalar(v) for v in values[:3])}, ...]"


def _inline(node) -> str | None:
    """The one-line form of ``node``, or None when it is too long or too deep for one line."""
    if _is_scalar(node):
        return _scalar(node)
    if isinstance(node, list):
        if all(_is_scalar(v) for v in node):
            text = "[" + ", ".join(_scalar(v) for v in node) + "]"
            return text if len(node) <= INLINE and len(text) <= WIDTH else _list_summary(node)
        return None
    if all(_is_scalar(v) for v in node.values()):
        text = "{" + ", ".join(f"{_scalar(str(k))}: {_scalar(v)}" for k, v in node.items()) + "}"
        return text if len(text) <= WIDTH else None
    return None


def short(node) -> str:
    """``node`` on one line: whole when short, else summarised (``[12 numbers, 0.1 .. 2]``)."""
    one_line = _inline(node)
    if one_line is not None:
        return one_line
    if isinstance(node, list):
        return f"[{len(node)} items]"
    return "{" + f"{len(node)} keys: " + ", ".join(map(str, list(node)[:5])) + \
        (", ..." if len(node) > 5 else "") + "}"


def format_tree(node, indent: str = "") -> list[str]:
    """Lines showing ``node`` (plain data) compactly, JSON-like."""
    one_line = _inline(node)
    if one_line is not None:
        return [indent + one_line]
    if isinstance(node, dict):  # a map: its entries with their keys, as {key: value, ...}
        entries = [(f"{_scalar(str(key))}: ", value) for key, value in node.items()]
        brackets, noun = "{}", "keys"
    else:
        entries, brackets, noun = [("", value) for value in node], "[]", "items"
    lines = [indent + brackets[0]]
    shown = entries[:LIMIT]
    for number, (head, value) in enumerate(shown):
        inner = format_tree(value, indent + "  ")
        inner[0] = f"{indent}  {head}{inner[0].lstrip()}"
        if number < len(shown) - 1:
            inner[-1] += ","
        lines.extend(inner)
    if len(entries) > LIMIT:
        lines.append(f"{indent}  ... {len(entries) - LIMIT} more {noun} (--full shows all)")
    lines.append(indent + brackets[1])
    return lines


def limit_lines(lines: list[str], what: str) -> list[str]:
    """The first ``LIMIT`` of ``lines``, and a count of the rest."""
    if len(lines) <= LIMIT:
        return lines
    return lines[:LIMIT] + [f"... {len(lines) - LIMIT} more {what} (--full shows all)"]


_INDEXED = re.compile(r"^(metadata \S*)/(\d+): (.*)$")


def group_list_differences(lines: list[str], examples: int = 3) -> list[str]:
    """Differences inside one list, ``metadata /a/loss/3: 0.5 != 0.4`` and its siblings, as
    one line: ``metadata /a/loss: 12 items differ ([3]: 0.5 != 0.4, ...)``."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for line in lines:
        match = _INDEXED.match(line)
        key = match.group(1) if match else line
        entry = f"[{match.group(2)}]: {match.group(3)}" if match else ""
        groups.setdefault(key, []).append((entry, line))
    out = []
    for key, entries in groups.items():
        if len(entries) == 1:
            out.append(entries[0][1])
            continue
        shown = ", ".join(e for e, _ in entries[:examples])
        more = ", ..." if len(entries) > examples else ""
        out.append(f"{key}: {len(entries)} items differ ({shown}{more})")
    return out
