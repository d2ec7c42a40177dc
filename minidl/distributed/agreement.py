"""Checking at the start that every rank set up the same run.

Data-parallel training is N copies of one program that must agree on everything that decides
how many steps there are and what each step does: the data set's length and the batch size
(else the ranks run out of batches at different steps and the job hangs at the first
collective one rank never reaches), the shuffle seed (else the ranks' blocks overlap and
miss samples), the model and the optimizer's settings (else the replicas drift apart). A
mismatch is a bug in the launch (a file that differs between hosts, a seed taken from the
rank); it is cheapest to find before the first step, with the values side by side.
"""

from __future__ import annotations

from .collectives import all_gather_object
from .process_group import DistributedError, get_rank, get_world_size


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_same_on_all_ranks(what: str, settings: dict) -> None:
    """Raise :class:`DistributedError` on every rank unless every rank passes equal
    ``settings`` (msgpack-able plain data by name); a collective (nothing in a group of one).

    The message names ``what`` was set up, every setting that differs and each rank's value.
    """
    if get_world_size() == 1:
        return
    everyone = all_gather_object(settings)
    names = list(dict.fromkeys(name for ranks_settings in everyone for name in ranks_settings))
    missing = object()
    differing = [name for name in names
                 if any(s.get(name, missing) != everyone[0].get(name, missing) for s in everyone)]
    if not differing:
        return
    lines = [f"{name}: " + ", ".join(
        f"rank {rank} {_shown(s[name]) if name in s else '(not set)'}"
        for rank, s in enumerate(everyone)) for name in differing[:5]]
    more = f" (and {len(differing) - 5} more)" if len(differing) > 5 else ""
    raise DistributedError(
        f"{what}: the ranks were set up differently (this is rank {get_rank()}); every rank "
        f"must run the same program on the same data:\n  " + "\n  ".join(lines) + more)
