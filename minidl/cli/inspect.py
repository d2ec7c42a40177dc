"""``minidl inspect FILE``: what a file holds, read from its header only (fast at any size)."""

from __future__ import annotations

import json
import sys

import numpy as np

HELP = "show what a minidl file holds: kind, version, tensors (name, dtype, shape), metadata"


def add_arguments(parser) -> None:
    from . import add_key_argument

    parser.add_argument("file", help="a minidl file")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--full", action="store_true",
                        help="print every tensor and every metadata value (default: long lists "
                             "summarised)")
    add_key_argument(parser)


def _plain(node):
    """Metadata made printable: tensor references and bytes shown as short strings."""
    from ..io import TensorRef

    if isinstance(node, TensorRef):
        return f"<tensor {node.name}>"
    if isinstance(node, bytes):
        return f"<{len(node)} bytes>"
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, float) and not np.isfinite(node):
        return str(node)
    return node


def describe(info) -> dict:
    """A plain-data summary of a validated file header."""
    return {
        "file": info.path, "kind": info.kind, "version": info.version,
        "encrypted": info.encrypted, "size": info.file_size,
        "tensors": [{"name": e.name, "dtype": e.dtype.name, "shape": list(e.shape),
                     "bytes": e.nbytes} for e in info.entries],
        "metadata": _plain(info.metadata),
    }


def run(args) -> int:
    from . import printable, read_key
    from ..io import CheckpointError, read_header

    try:
        info = read_header(args.file, key=read_key(args))
    except (CheckpointError, OSError) as error:
        print(f"minidl inspect: {printable(error)}", file=sys.stderr)
        return 1
    summary = describe(info)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"file:      {printable(summary['file'])}")
    print(f"kind:      {printable(summary['kind'])}")
    print(f"version:   {summary['version']}{'  (encrypted)' if info.encrypted else ''}")
    total = sum(t["bytes"] for t in summary["tensors"])
    print(f"tensors:   {len(summary['tensors'])} ({total:,} bytes)")
    from .compact import format_tree, limit_lines

    names = [printable(t["name"]) for t in summary["tensors"]]
    width = max([len(name) for name in names] + [4])
    rows = []
    for name, t in zip(names, summary["tensors"]):
        shape = "(" + ", ".join(map(str, t["shape"])) + ("," if len(t["shape"]) == 1 else "") + ")"
        rows.append(f"  {name:<{width}}  {t['dtype']:<8}  {shape}")
    for row in rows if args.full else limit_lines(rows, "tensors"):
        print(row)
    print("metadata:")
    lines = (json.dumps(summary["metadata"], indent=2, default=str).splitlines() if args.full
             else format_tree(summary["metadata"]))
    for line in lines:
        print(f"  {printable(line)}")
    return 0
