"""Sharded checkpoints: one file per rank for sharded state, committed by one index file.

A :class:`~minidl.optim.ZeroRedundancyOptimizer` holds 1/N of the optimizer state on each of N
ranks, so no rank can write it alone. A save of such a job is a collective in three steps:

1. every rank writes its *shard* -- ``<name>.shard-RRRRR-of-NNNNN.mdl``, a minidl file of kind
   ``checkpoint-shard`` holding that rank's ``sharded_state_dict()`` of each sharded object --
   atomically and durably (temporary file, fsync, rename), and computes its SHA-256;
2. the ranks exchange ``(file name, size, SHA-256)``; once that exchange completes, every
   shard is on disk;
3. only then rank 0 writes the *index*: the ordinary checkpoint file ``<name>`` (model,
   reader, RNG, ...) with ``checkpoint_format`` 2 and a ``shards`` field naming every shard
   with its size and checksum.

The index is the commit point. A crash before it is renamed into place leaves shards without
an index, which nobody reads (and the next manager removes); the previous complete
checkpoint stays the newest. Restoring reads the index, checks every shard against its
checksum, and joins the shards into the full state (:func:`~minidl.optim.zero.
merge_shard_states`), which any world size then splits its own way: restoring at another
world size reshards. :func:`merge_checkpoint` (``minidl merge``) writes that joined state as
one ordinary checkpoint (MindSpore's "integrated save").
"""

from __future__ import annotations

import hashlib
import os
import re

from .. import distributed as dist
from .formats import (
    CHECKPOINT_FORMAT, CHECKPOINT_KIND, SHARD_FORMAT, SHARD_KIND, SHARDED_CHECKPOINT_FORMAT)
from ..io.state_tree import from_storable, to_storable
from ..io.atomic import final_name_of_temp
from ..io.reader import open_regular_file
from ..io import (
    CheckpointError, CorruptFileError, MissingFileError, decode_value, encode_value, read_file,
    write_file)

# [0-9], not \d: \d also matches the digits of other scripts.
_SHARD_SUFFIX = re.compile(r"\.shard-([0-9]{5})-of-([0-9]{5})\.mdl")
_SHARD_NAME = re.compile(r"(?P<stem>.+)" + _SHARD_SUFFIX.pattern, re.DOTALL)


def is_sharded(obj) -> bool:
    """Whether a tracked object saves one shard per rank (it has ``sharded_state_dict``)."""
    return callable(getattr(obj, "sharded_state_dict", None))


def shard_path(index_path: str, rank: int, world_size: int) -> str:
    """``run-step00000010.mdl`` -> ``run-step00000010.shard-00001-of-00004.mdl``."""
    stem = index_path[:-len(".mdl")] if index_path.endswith(".mdl") else index_path
    return f"{stem}.shard-{rank:05d}-of-{world_size:05d}.mdl"


def shard_names_of(index_name: str, names) -> list[str]:
    """The names among ``names`` that are shards of the checkpoint ``index_name``."""
    stem = index_name[:-len(".mdl")] if index_name.endswith(".mdl") else index_name
    return [n for n in names if n.startswith(stem) and _SHARD_SUFFIX.fullmatch(n[len(stem):])]


def _size_and_sha256(path: str) -> tuple[int, str]:
    """The size and SHA-256 of the regular file ``path`` (a FIFO or a device named like a
    shard would block the reader or feed it endless bytes: refused as the reader refuses
    them, by :func:`~minidl.io.reader.open_regular_file`)."""
    digest = hashlib.sha256()
    with open_regular_file(path) as file:
        size = os.fstat(file.fileno()).st_size
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return size, digest.hexdigest()


def write_shards(index_path: str, step: int, objects: dict, *, key: bytes | None = None) -> dict:
    """Steps 1 and 2 (a collective): write this rank's shard, wait until every rank has.

    Returns the index's ``shards`` field. Raises ``CheckpointError`` on every rank when any
    rank failed to write its shard.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    path = shard_path(index_path, rank, world)
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        states = {name: to_storable(obj.sharded_state_dict(), name, copy_arrays=False)
                  for name, obj in objects.items()}
        tree, tensors = encode_value({"objects": states})
        header = {"shard_format": SHARD_FORMAT, "step": int(step), "rank": rank,
                  "world_size": world, "objects": tree["objects"]}
        write_file(path, header, tensors, kind=SHARD_KIND, key=key)
        size, sha256 = _size_and_sha256(path)
        described = {"name": os.path.basename(path), "bytes": size, "sha256": sha256,
                     "error": None}
    except Exception as exc:  # every rank must learn of it, or the others would wait
        described = {"name": os.path.basename(path), "error": f"{type(exc).__name__}: {exc}"}
    everyone = dist.all_gather_object(described)
    failed = [f"rank {r}: {d['error']}" for r, d in enumerate(everyone) if d["error"]]
    if failed:
        raise CheckpointError(index_path, "a shard could not be written (" + "; ".join(failed)
                              + "); the previous checkpoint stays the newest")
    return {"world_size": world, "objects": list(objects),
            "files": [{k: d[k] for k in ("name", "bytes", "sha256")} for d in everyone]}


def placeholder(shards: dict) -> dict:
    """What the index stores in place of a sharded object's state."""
    return {"sharded_over": shards["world_size"]}


def _check_shards_field(path: str, shards) -> None:
    if not isinstance(shards, dict) or not isinstance(shards.get("files"), list) \
            or not isinstance(shards.get("objects"), list) or not shards["files"] \
            or shards.get("world_size") != len(shards["files"]):
        raise CorruptFileError(path, "field 'shards' must be a map with 'world_size', "
                                     "'objects' and one entry of 'files' per rank")
    objects = shards["objects"]
    if not all(isinstance(name, str) for name in objects) or len(set(objects)) != len(objects):
        raise CorruptFileError(path, "field 'shards': 'objects' must be a list of distinct "
                                     "object names")
    world = len(shards["files"])
    for rank, entry in enumerate(shards["files"]):
        # A shard is named by the index, which is untrusted: the only name ever opened is
        # the one this rank's shard of this index has (SPEC section 9), in the index's own
        # directory -- no other file, no path, no control characters.
        expected = os.path.basename(shard_path(path, rank, world))
        if not isinstance(entry, dict) or entry.get("name") != expected \
                or not isinstance(entry.get("sha256"), str) \
                or not isinstance(entry.get("bytes"), int) or entry["bytes"] < 0:
            raise CorruptFileError(path, f"shards.files[{rank}] is not a valid shard entry "
                                         f"(rank {rank}'s shard must be named {expected})")


def _checked_shard(path: str, shards: dict, rank: int, step, *, key, mmap: bool = False):
    """Read rank ``rank``'s shard of the index ``path`` once its size and SHA-256 match the
    index's record: ``(shard path, its objects' decoded states)``."""
    entry = shards["files"][rank]
    file = os.path.join(os.path.dirname(os.path.abspath(path)), entry["name"])
    try:
        size, sha256 = _size_and_sha256(file)
    except MissingFileError:
        raise MissingFileError(path, f"shard {entry['name']} is missing") from None
    except CheckpointError as exc:
        raise CorruptFileError(path, f"shard {entry['name']}: {exc.problem}") from None
    except OSError as exc:
        raise CheckpointError(path, f"shard {entry['name']}: cannot read: "
                                    f"{exc.strerror or exc}") from None
    if size != entry["bytes"] or sha256 != entry["sha256"]:
        raise CorruptFileError(path, f"shard {entry['name']} does not match the size and "
                                     "checksum the index recorded")
    metadata, tensors = read_file(file, key=key, kind=SHARD_KIND, mmap=mmap)
    expected = {"shard_format": SHARD_FORMAT, "rank": rank,
                "world_size": shards["world_size"], "step": step}
    wrong = [k for k, v in expected.items() if metadata.get(k) != v]
    if wrong or not isinstance(metadata.get("objects"), dict):
        raise CorruptFileError(file, "shard header does not fit its index "
                                     f"({', '.join(wrong) or 'objects'})")
    objects = decode_value(file, metadata["objects"], tensors)
    for name in shards["objects"]:
        if name not in objects:
            raise CorruptFileError(file, f"shard holds no state for {name!r}")
    return file, objects


def read_shard_states(path: str, header: dict, *, key: bytes | None = None) -> dict:
    """Every sharded object's full state, joined from the shards the index ``path`` names.

    Each shard is checked against the size and SHA-256 in the index before it is parsed.
    """
    from ..optim.zero import merge_shard_states

    shards = header.get("shards")
    _check_shards_field(path, shards)
    per_object: dict[str, list] = {name: [] for name in shards["objects"]}
    for rank in range(len(shards["files"])):
        file, objects = _checked_shard(path, shards, rank, header.get("step"), key=key)
        for name, states in per_object.items():
            try:
                states.append(from_storable(objects[name]))
            except ValueError as exc:
                raise CorruptFileError(file, f"state of {name!r}: {exc}") from None
    try:
        return {name: merge_shard_states(states) for name, states in per_object.items()}
    except ValueError as exc:
        raise CorruptFileError(path, f"shards do not join: {exc}") from None


def verify_shards(path: str, header: dict, *, key: bytes | None = None) -> list:
    """Check every shard the index ``path`` names, as a restore would: ``[(shard name,
    None or the CheckpointError that refuses it), ...]`` in rank order (``minidl verify``)."""
    shards = header.get("shards")
    _check_shards_field(path, shards)
    outcome = []
    for rank, entry in enumerate(shards["files"]):
        try:
            _checked_shard(path, shards, rank, header.get("step"), key=key, mmap=True)
            outcome.append((entry["name"], None))
        except CheckpointError as exc:
            outcome.append((entry["name"], exc))
    return outcome


def merge_checkpoint(index_path, output_path, *, key: bytes | None = None) -> str:
    """Write the sharded checkpoint ``index_path`` as one ordinary checkpoint at
    ``output_path`` (the shards joined; a plain checkpoint is copied as it is). Returns the
    output path."""
    index_path, output_path = os.fspath(index_path), os.fspath(output_path)
    header, tensors = read_file(index_path, key=key, kind=CHECKPOINT_KIND)
    if not isinstance(header.get("objects"), dict):
        raise CorruptFileError(index_path, "checkpoint field 'objects' must be a map")
    try:
        header, tensors = _joined(index_path, header, tensors, key)
    except CheckpointError:
        raise
    except (TypeError, ValueError) as exc:  # as restore promises: nothing else escapes
        raise CorruptFileError(index_path, f"cannot merge: {type(exc).__name__}: {exc}") from None
    write_file(output_path, header, tensors, kind=CHECKPOINT_KIND, key=key)
    return output_path


def _joined(index_path: str, header: dict, tensors: dict, key) -> tuple[dict, dict]:
    """The header and tensors of the format-1 checkpoint equivalent to an index's."""
    if "shards" in header:
        merged = read_shard_states(index_path, header, key=key)
        decoded = decode_value(index_path, {"metadata": header.get("metadata", {}),
                                            "objects": header["objects"]}, tensors)
        metadata, objects = decoded["metadata"], decoded["objects"]
        for name, state in merged.items():
            objects[name] = to_storable(state, name, copy_arrays=False)
        tree, tensors = encode_value({"metadata": metadata, "objects": objects})
        header = {**header, "checkpoint_format": CHECKPOINT_FORMAT,
                  "metadata": tree["metadata"], "objects": tree["objects"]}
        del header["shards"]
    return header, tensors


def remove_checkpoint(path: str) -> None:
    """Delete a checkpoint and its shards (index first: a half-deleted one is never read)."""
    directory, name = os.path.split(path)
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    try:
        names = os.listdir(directory or ".")
    except FileNotFoundError:
        return
    for shard in shard_names_of(name, names):
        try:
            os.remove(os.path.join(directory, shard))
        except FileNotFoundError:
            pass


def leftover_shards(names: list[str], is_checkpoint) -> list[str]:
    """Shards among ``names`` left by a save that never committed: temporary shard files, and
    shards whose index is not there. ``is_checkpoint(name)`` tells an index name of this run."""
    leftovers = []
    for name in names:
        final = final_name_of_temp(name) or name
        match = _SHARD_NAME.fullmatch(final)
        if match is None:
            continue
        index = match["stem"] + ".mdl"
        if is_checkpoint(index) and (final != name or index not in names):
            leftovers.append(name)
    return leftovers


__all__ = ["merge_checkpoint", "read_shard_states", "verify_shards", "write_shards", "is_sharded",
           "shard_path", "remove_checkpoint", "leftover_shards", "SHARD_KIND",
           "SHARDED_CHECKPOINT_FORMAT", "CheckpointError"]
