"""``minidl diff A B``: which tensors and metadata differ between two files, and by how much.

Exit status 0 when the contents are identical, 1 when they differ, 2 when a file cannot
be read (the same convention as the Unix ``diff``).
"""

from __future__ import annotations

import sys

import numpy as np

HELP = "compare two minidl files: differing tensors (max abs diff) and metadata"

# Tensors are compared a slice at a time so that diffing huge files needs little memory.
COMPARE_ELEMENTS = 1 << 20


def add_arguments(parser) -> None:
    from . import add_key_argument

    parser.add_argument("a", help="first minidl file")
    parser.add_argument("b", help="second minidl file")
    parser.add_argument("--full", action="store_true",
                        help="list every differing list item (default: grouped per list) and "
                             "every differing tensor")
    add_key_argument(parser)


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| over same-shaped arrays, in float64; NaN where only one side is NaN."""
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    worst = 0.0
    for start in range(0, flat_a.size, COMPARE_ELEMENTS):
        x = flat_a[start:start + COMPARE_ELEMENTS].astype(np.float64)
        y = flat_b[start:start + COMPARE_ELEMENTS].astype(np.float64)
        both_nan = np.isnan(x) & np.isnan(y)
        same_inf = np.isinf(x) & (x == y)
        with np.errstate(invalid="ignore"):
            gap = np.where(both_nan | same_inf, 0.0, np.abs(x - y))
        if np.isnan(gap).any():
            return float("nan")
        if gap.size:
            worst = max(worst, float(gap.max()))
    return worst


def metadata_differences(a, b, path: str = "", show=repr) -> list[str]:
    """Paths (``/a/0/b``) where two metadata trees differ; values are shown with ``show``."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in list(a) + [k for k in b if k not in a]:
            where = f"{path}/{key}"
            if key not in b:
                out.append(f"{where}: only in A")
            elif key not in a:
                out.append(f"{where}: only in B")
            else:
                out.extend(metadata_differences(a[key], b[key], where, show))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b))
                for d in metadata_differences(x, y, f"{path}/{i}", show)]
    same = (a == b) or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)
    return [] if same and type(a) is type(b) else [f"{path or '/'}: {show(a)} != {show(b)}"]


def run(args) -> int:
    from . import printable, read_key
    from ..io import CheckpointError, read_contents

    key = read_key(args)
    try:
        info_a, tensors_a = read_contents(args.a, mmap=True, verify=True, key=key)
        info_b, tensors_b = read_contents(args.b, mmap=True, verify=True, key=key)
    except (CheckpointError, OSError) as error:
        print(f"minidl diff: {printable(error)}", file=sys.stderr)
        return 2
    lines = []
    if info_a.kind != info_b.kind:
        lines.append(f"kind: {info_a.kind!r} != {info_b.kind!r}")
    from .compact import short
    show = repr if args.full else short
    lines += [f"metadata {d}"
              for d in metadata_differences(info_a.metadata, info_b.metadata, show=show)]
    for name, a in tensors_a.items():
        if name not in tensors_b:
            lines.append(f"tensor {name}: only in A")
            continue
        b = tensors_b[name]
        if a.dtype != b.dtype or a.shape != b.shape:
            lines.append(f"tensor {name}: {a.dtype.name}{list(a.shape)} != {b.dtype.name}{list(b.shape)}")
        elif not np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)):
            lines.append(f"tensor {name}: max abs diff {max_abs_diff(a, b):.6g}")
    lines += [f"tensor {name}: only in B" for name in tensors_b if name not in tensors_a]
    if not args.full:
        from .compact import group_list_differences, limit_lines
        lines = limit_lines(group_list_differences(lines), "differences")
    for line in lines:
        print(printable(line))
    if not lines:
        print("identical")
    return 1 if lines else 0
