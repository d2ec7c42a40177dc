"""The ``minidl`` command line: ``minidl SUBCOMMAND ...``.

Each subcommand lives in its own module exposing ``HELP`` (one line), ``add_arguments
(parser)`` and ``run(args) -> int`` (the exit status).  ``COMMANDS`` maps command names
to those modules; adding a command is one new module and one line here.  Modules are
imported only when their command runs, so ``minidl --help`` stays quick.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from ..io.errors import printable  # noqa: F401  (the commands' one way to show names)

COMMANDS: dict[str, str] = {
    "inspect": "minidl.cli.inspect",
    "verify": "minidl.cli.verify",
    "diff": "minidl.cli.diff",
    "export-onnx": "minidl.cli.export_onnx",
    "merge": "minidl.cli.merge",
}

# One line of help per command, known without importing the command's module.
SUMMARIES: dict[str, str] = {
    "inspect": "show what a minidl file holds: kind, version, tensors, metadata",
    "verify": "check every checksum of a file; exit 0 when it is sound",
    "diff": "compare two files: which tensors and metadata differ, and by how much",
    "export-onnx": "export a minidl model file to ONNX",
    "merge": "join a sharded checkpoint into one ordinary checkpoint",
}


def _available_commands() -> dict[str, str]:
    available = {}
    for name, module in COMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            available[name] = module
    return available


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per available command."""
    from ..version import __version__

    parser = argparse.ArgumentParser(prog="minidl", description="Work with minidl files.")
    parser.add_argument("--version", action="version", version=f"minidl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in _available_commands().items():
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=getattr(module, "HELP", SUMMARIES.get(name)),
                                 description=getattr(module, "HELP", None))
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # e.g. `minidl inspect f | head`
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def add_key_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--key-file`` option shared by commands that may read encrypted files."""
    parser.add_argument("--key-file", metavar="PATH",
                        help="file holding the raw 16/24/32-byte AES key of an encrypted file")


def read_key(args) -> bytes | None:
    """The key named by ``--key-file``, if any."""
    if getattr(args, "key_file", None) is None:
        return None
    with open(args.key_file, "rb") as file:
        return file.read()
