"""``minidl verify FILE``: check the header and every tensor checksum.

Exit status 0 when the file is sound; 1 with the reason on stderr otherwise.
"""

from __future__ import annotations

import sys

HELP = "check every checksum of a minidl file; exit 0 when sound, 1 with the reason otherwise"


def add_arguments(parser) -> None:
    from minidl.cli import add_key_argument

    parser.add_argument("file", help="a minidl file")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing when sound")
    add_key_argument(parser)


def run(args) -> int:
    from minidl.cli import printable, read_key
    from minidl.io import CheckpointError, verify_file

    try:
        info = verify_file(args.file, key=read_key(args))
    except (CheckpointError, OSError) as error:
        print(f"minidl verify: FAILED: {printable(error)}", file=sys.stderr)
        return 1
    if not args.quiet:
        total = sum(e.length for e in info.entries)
        print(f"{printable(info.path)}: OK ({info.kind}, version {info.version}, "
              f"{len(info.entries)} tensors, {total:,} bytes verified)")
    return 0
