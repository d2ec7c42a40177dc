"""``minidl verify FILE``: check the header and every tensor checksum.

The index of a sharded checkpoint is checked with every shard it names, as a restore checks
them: each shard's size and SHA-256 against the index, then its own checksums; each shard is
reported by name. Exit status 0 when everything is sound; 1 with the reasons on stderr
otherwise.
"""

from __future__ import annotations

import sys

HELP = "check every checksum of a minidl file; exit 0 when sound, 1 with the reason otherwise"


def add_arguments(parser) -> None:
    from . import add_key_argument

    parser.add_argument("file", help="a minidl file")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing when sound")
    add_key_argument(parser)


def run(args) -> int:
    from . import printable, read_key
    from ..io import CheckpointError, verify_file

    key = read_key(args)
    try:
        info = verify_file(args.file, key=key)
        shards = _verify_shards(info, key)
    except (CheckpointError, OSError) as error:
        print(f"minidl verify: FAILED: {printable(error)}", file=sys.stderr)
        return 1
    failed = [(name, error) for name, error in shards if error is not None]
    for name, error in failed:
        print(f"minidl verify: FAILED: shard {printable(name)}: {printable(error)}",
              file=sys.stderr)
    if not args.quiet:
        total = sum(e.length for e in info.entries)
        print(f"{printable(info.path)}: {'FAILED' if failed else 'OK'} ({info.kind}, version "
              f"{info.version}, {len(info.entries)} tensors, {total:,} bytes verified)")
        for name, error in shards:
            print(f"  shard {printable(name)}: {'FAILED' if error else 'OK'}")
    return 1 if failed else 0


def _verify_shards(info, key) -> list:
    """``[(shard name, None or its error)]`` when ``info`` is the index of a sharded
    checkpoint, else ``[]``."""
    if info.kind != "checkpoint" or "shards" not in info.metadata:
        return []
    from ..checkpoint.sharded import verify_shards

    return verify_shards(info.path, info.metadata, key=key)
