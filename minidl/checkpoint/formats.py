"""What a checkpoint file says it is: the header ``kind`` and format numbers (SPEC section 9).

A plain checkpoint and the index of a sharded one are both of kind ``"checkpoint"`` and tell
themselves apart by ``checkpoint_format``; each rank's shard is a file of its own kind. Writing
and reading, plain (``checkpoint.py``) and sharded (``sharded.py``), name them from here, so
neither of those modules needs the other for a constant.
"""

CHECKPOINT_KIND = "checkpoint"
CHECKPOINT_FORMAT = 1
"""``checkpoint_format`` of a checkpoint that holds every object's state itself."""
SHARDED_CHECKPOINT_FORMAT = 2
"""``checkpoint_format`` of a sharded checkpoint's index: it also names its shard files."""

SHARD_KIND = "checkpoint-shard"
SHARD_FORMAT = 1
"""``shard_format`` of one rank's shard file."""
