"""Checkpoints of a data-parallel job: rank 0 writes, every rank restores the same file.

Under ``mpiexec`` every rank runs the same script, builds the same
:class:`~minidl.checkpoint.CheckpointManager` and calls ``save`` at the same step. The model,
the optimizer (unless it is sharded) and the data reader's global state are the same on every
rank, so rank 0's copy is the job's; only the random generators differ per rank (each rank
draws its own dropout masks). A save is therefore a collective:

1. every rank hands its generator state to rank 0 (``rank_rng`` in the file, one per rank);
2. rank 0 writes the file, atomically, as in a single-process run;
3. rank 0 tells every rank the committed path -- or its error, which every rank then raises.

So a save returns on every rank with the same path, and only after the file is committed: a
rank killed at any moment leaves the previous complete checkpoint as the newest. Restoring
is not a collective: each rank reads the file and takes the rank-0 state and its own
generator state. The directory must be shared by every rank (one file system).
"""

from __future__ import annotations

from .. import distributed as dist
from .. import random as md_random
from ..io import CheckpointError


def writer_rank(is_writer) -> bool:
    """Whether this process writes the directory: rank 0 unless ``is_writer`` says otherwise
    (which a multi-process job may not: its saves are collectives led by rank 0)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if is_writer is None:
        return rank == 0
    if world > 1 and bool(is_writer) != (rank == 0):
        raise ValueError(f"is_writer={is_writer!r} on rank {rank}: in a job of {world} ranks "
                         "rank 0 writes the checkpoints; leave is_writer unset")
    return bool(is_writer)


def gather_rank_rng() -> list | None:
    """Every rank's global generator state, in rank order (None in a group of one)."""
    if dist.get_world_size() == 1:
        return None
    return dist.all_gather_object(md_random.get_rng_state())


def gather_rank_local_states(objects: dict) -> dict | None:
    """Every rank's state of the objects whose state differs per rank (``rank_local_state``,
    e.g. a streaming reader's byte position in its own part of the file), by name (collective;
    None in a group of one or when there are none)."""
    names = [name for name, obj in objects.items() if getattr(obj, "rank_local_state", False)]
    if dist.get_world_size() == 1 or not names:
        return None
    mine = {name: objects[name].state_dict() for name in names}
    everyone = dist.all_gather_object(mine)
    return {name: [states[name] for states in everyone] for name in names}


def share_outcome(path: str | None, error: BaseException | None = None, *,
                  directory: str = "") -> str | None:
    """Rank 0 tells every rank the committed path, or that the save failed (collective)."""
    if dist.get_world_size() == 1:
        return path
    outcome = dist.broadcast_object(
        {"path": path, "error": None if error is None else f"{type(error).__name__}: {error}"})
    if outcome["error"] is not None and error is None:
        raise CheckpointError(directory, f"rank 0 failed to save the checkpoint: "
                                         f"{outcome['error']}")
    return outcome["path"]


def rng_for_this_rank(path: str, header: dict):
    """The generator state this rank restores: its own from ``rank_rng`` when the file has
    one, else the file's ``rng``.

    Resumed at another world size, rank ``r`` continues saved stream ``r mod saved ranks``.
    """
    rank_rng = header.get("rank_rng")
    if rank_rng is None:
        return header["rng"]
    if not isinstance(rank_rng, list) or not rank_rng:
        raise CheckpointError(path, "checkpoint field 'rank_rng' must be a non-empty list")
    return rank_rng[dist.get_rank() % len(rank_rng)]


def check_same_step(directory: str, step: int | None, error: BaseException | None = None) -> None:
    """Every rank must have restored the same checkpoint (collective). A rank that failed
    (``error``) makes every rank raise, rather than leaving the others waiting for it."""
    outcomes = dist.all_gather_object(
        [step, None if error is None else f"{type(error).__name__}: {error}"])
    failed = [f"rank {r}: {e}" for r, (_, e) in enumerate(outcomes) if e is not None]
    if failed:
        if error is not None:
            return  # this rank raises its own error
        raise CheckpointError(directory, "restoring failed on another rank (" + "; ".join(failed)
                              + ")")
    steps = [s for s, _ in outcomes]
    if any(s != steps[0] for s in steps):
        described = ", ".join(f"rank {r}: {'nothing' if s is None else f'step {s}'}"
                              for r, s in enumerate(steps))
        raise CheckpointError(directory, f"the ranks restored different checkpoints ({described});"
                                         " every rank must see the same checkpoint directory")
