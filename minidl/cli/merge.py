"""``minidl merge CHECKPOINT OUT.mdl``: a sharded checkpoint as one ordinary checkpoint.

CHECKPOINT is the index file of a sharded save (the ``...-stepN.mdl`` beside its
``.shard-R-of-N.mdl`` files). Every shard is checked against the checksum the index recorded,
the shards are joined, and OUT is written atomically: a checkpoint that any world size, one
process included, restores. Exit status 0 on success, 1 with the reason otherwise.
"""

from __future__ import annotations

import sys

HELP = "join a sharded checkpoint (index + one shard per rank) into one ordinary checkpoint"


def add_arguments(parser) -> None:
    from . import add_key_argument

    parser.add_argument("checkpoint", help="index file of the sharded checkpoint")
    parser.add_argument("output", help="the ordinary checkpoint to write")
    add_key_argument(parser)


def run(args) -> int:
    from ..checkpoint import merge_checkpoint
    from . import printable, read_key
    from ..io import CheckpointError

    try:
        merge_checkpoint(args.checkpoint, args.output, key=read_key(args))
    except (CheckpointError, OSError) as exc:
        print(f"minidl merge: {printable(exc)}", file=sys.stderr)
        return 1
    print(f"wrote {printable(args.output)}")
    return 0
