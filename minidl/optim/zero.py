"""``ZeroRedundancyOptimizer``: each rank keeps and updates 1/N of the optimizer state.

In plain data parallelism every rank holds the whole optimizer state (Adam: two arrays the
size of the model) and performs the same update. ZeRO stage 1 (Rajbhandari et al., 2020)
removes that redundancy: the parameters are *partitioned* among the ranks, each rank runs the
wrapped optimizer on its partition only (so it holds only that part of the state), and then
every rank broadcasts the parameters it updated, so all replicas again hold identical
weights. The gradients must already be averaged (``DistributedDataParallel`` does that);
the update of each parameter is then exactly the one the unsharded optimizer would make.

The partition is by whole parameters, greedy by size (largest first, to the rank with the
fewest elements so far, lowest rank on a tie), so it is a pure function of the parameter
shapes and the world size.

State comes in two forms:

* the **full** state -- exactly what the wrapped optimizer would return unsharded (parameter
  indices over all groups): ``load_state_dict`` accepts it at any world size and keeps its own
  part, which is how a checkpoint saved at one world size is *resharded* at another;
  ``state_dict`` returns it after ``consolidate_state_dict()`` (a collective, as in PyTorch);
* this rank's **shard** -- ``sharded_state_dict()``, the same layout restricted to the
  parameters this rank owns: what a sharded checkpoint writes, one file per rank, and what
  :func:`merge_shard_states` joins back into the full state.
"""

from __future__ import annotations

import numpy as np

from .. import distributed as dist
from ..distributed.agreement import check_same_on_all_ranks
from .optimizer import Optimizer, swap_group_hyperparameters


def partition(sizes: list[int], world_size: int) -> list[int]:
    """The owning rank of each parameter (by index): greedy, largest first, least loaded rank."""
    load = [0] * world_size
    owner = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(world_size), key=lambda r: (load[r], r))
        owner[index] = rank
        load[rank] += sizes[index]
    return owner


def merge_shard_states(shards: list[dict]) -> dict:
    """Join the ranks' ``sharded_state_dict()`` results into the full optimizer state."""
    if not shards:
        raise ValueError("merge_shard_states: no shards")
    state = {}
    for shard in shards:
        if not isinstance(shard, dict) or set(shard) != {"state", "param_groups"}:
            raise ValueError("a shard state must be a dict with the keys 'state' and "
                             "'param_groups'")
        for index, slots in shard["state"].items():
            if index in state:
                raise ValueError(f"parameter {index} has state in more than one shard")
            state[index] = slots
    return {"state": dict(sorted(state.items(), key=lambda item: int(item[0]))),
            "param_groups": shards[0]["param_groups"]}


class ZeroRedundancyOptimizer(Optimizer):
    """``ZeroRedundancyOptimizer(params, optim.Adam, lr=1e-3)``: shard ``optimizer_class``'s
    state over the ranks (PyTorch's name and arguments). In a group of one it behaves exactly
    like ``optimizer_class`` itself."""

    def __init__(self, params, optimizer_class, **defaults):
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, Optimizer)):
            raise TypeError(f"optimizer_class must be an Optimizer class, got {optimizer_class!r}")
        # The wrapped class over every parameter validates the groups and fills in its own
        # defaults; it allocates no state (optimizers create slots at their first step).
        full = optimizer_class(params, **defaults)
        self.optimizer_class = optimizer_class
        self.defaults = full.defaults
        self.param_groups = full.param_groups
        self.state = full.state  # stays empty: the state lives in the local optimizer
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        # Every rank steps its shard with these settings: they must be the same everywhere.
        check_same_on_all_ranks("ZeroRedundancyOptimizer", dict(
            {f"{g}/{name}": value if isinstance(value, (bool, int, float, str, type(None)))
             else repr(value) for g, group in enumerate(self.param_groups)
             for name, value in self._hyperparameters(group).items()},
            optimizer_class=optimizer_class.__name__,
            parameters_per_group=[len(group["params"]) for group in self.param_groups]))
        everything = self._all_params()
        self.owner = partition([p.numel() for p in everything], self.world_size)
        self._local_groups: dict[int, int] = {}  # group index -> local optimizer's group index
        local = []
        index = 0
        for g, group in enumerate(self.param_groups):
            mine = []
            for param in group["params"]:
                if self.owner[index] == self.rank:
                    mine.append(param)
                index += 1
            if mine:
                self._local_groups[g] = len(local)
                local.append({**self._hyperparameters(group), "params": mine})
        self._local_indices = [i for i, owner in enumerate(self.owner) if owner == self.rank]
        self.optim = optimizer_class(local, **defaults) if local else None
        self._consolidated: dict | None = None

    @staticmethod
    def _hyperparameters(group: dict) -> dict:
        return {key: value for key, value in group.items() if key != "params"}

    # -- the step ------------------------------------------------------------------------------

    def step(self, closure=None):
        """Update this rank's partition, then give every rank every updated parameter."""
        loss = None
        if closure is not None:
            from ..autograd.grad_mode import enable_grad
            with enable_grad():
                loss = closure()
        if self.optim is not None:
            # Schedulers change the hyperparameters of the full groups; the local ones follow.
            for g, local_g in self._local_groups.items():
                params = self.optim.param_groups[local_g]["params"]
                self.optim.param_groups[local_g].update(self._hyperparameters(self.param_groups[g]))
                self.optim.param_groups[local_g]["params"] = params
            self.optim.step()
        self._broadcast_parameters()
        self._consolidated = None
        return loss

    def _broadcast_parameters(self) -> None:
        """Each rank in turn broadcasts the parameters it owns, one flat buffer per dtype."""
        if self.world_size == 1:
            return
        everything = self._all_params()
        for rank in range(self.world_size):
            owned = [p for p, owner in zip(everything, self.owner) if owner == rank]
            for dtype in sorted({p.dtype.str for p in owned}):
                group = [p for p in owned if p.dtype.str == dtype]
                flat = (np.concatenate([np.ravel(p.numpy()) for p in group]) if rank == self.rank
                        else np.empty(sum(p.numel() for p in group), np.dtype(dtype)))
                dist.broadcast(flat, src=rank)
                if rank == self.rank:
                    continue
                start = 0
                for param in group:
                    values = flat[start:start + param.numel()].reshape(param.shape)
                    if param.device == "cpu":
                        param.data[...] = values
                    else:
                        param.data = param.backend.from_numpy(values.copy())
                    start += param.numel()

    # -- state ---------------------------------------------------------------------------------

    def sharded_state_dict(self) -> dict:
        """This rank's part of the full state: slots of the parameters it owns (full indices)."""
        groups = Optimizer.state_dict(self)["param_groups"]  # every group, full indices
        state = {}
        if self.optim is not None:
            local = self.optim.state_dict()["state"]
            state = {self._local_indices[int(k)]: slots for k, slots in local.items()}
        return {"state": state, "param_groups": groups}

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Collect the full state on rank ``to`` (a collective: every rank must call it)."""
        shards = []
        for rank in range(self.world_size):
            shards.append(self._receive_shard(rank) if self.world_size > 1
                          else self.sharded_state_dict())
        self._consolidated = merge_shard_states(shards) if self.rank == to else None

    def _receive_shard(self, rank: int) -> dict:
        """Rank ``rank``'s shard on every rank: the plain parts as one message, the arrays
        concatenated per dtype."""
        mine = self.sharded_state_dict() if rank == self.rank else None
        arrays = []
        plain = None
        if mine is not None:
            plain = {"param_groups": mine["param_groups"], "state": []}
            for index, slots in mine["state"].items():
                entry = {}
                for name, value in slots.items():
                    if isinstance(value, np.ndarray):
                        entry[name] = ["array", list(value.shape), value.dtype.str]
                        arrays.append(value)
                    else:
                        entry[name] = ["plain", value]
                plain["state"].append([int(index), entry])
        plain = dist.broadcast_object(plain, src=rank)
        described = [(index, name, spec) for index, entry in plain["state"]
                     for name, spec in entry.items() if spec[0] == "array"]
        received = {}
        for dtype in sorted({spec[2] for _, _, spec in described}):
            parts = [(index, name, spec) for index, name, spec in described if spec[2] == dtype]
            flat = (np.concatenate([np.ravel(a) for a in arrays if a.dtype.str == dtype])
                    if mine is not None else
                    np.empty(sum(int(np.prod(spec[1])) for _, _, spec in parts), np.dtype(dtype)))
            dist.broadcast(flat, src=rank)
            start = 0
            for index, name, spec in parts:
                size = int(np.prod(spec[1]))
                received[(index, name)] = flat[start:start + size].reshape(spec[1]).copy()
                start += size
        state = {index: {name: received[(index, name)] if spec[0] == "array" else spec[1]
                         for name, spec in entry.items()} for index, entry in plain["state"]}
        return {"state": state, "param_groups": plain["param_groups"]}

    def state_dict(self) -> dict:
        """The full state, as the wrapped optimizer unsharded would give it.

        In a group of several ranks call ``consolidate_state_dict(to=r)`` on every rank first;
        rank ``r`` then gets the full state here (until the next step).
        """
        if self.world_size == 1:
            return self.sharded_state_dict()
        if self._consolidated is None:
            raise RuntimeError(f"ZeroRedundancyOptimizer.state_dict on rank {self.rank}: the "
                               "state is sharded; call consolidate_state_dict(to=...) on every "
                               "rank first, and read it on that rank (or save it through a "
                               "CheckpointManager, which writes one shard per rank)")
        return self._consolidated

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a full state (from ``state_dict``, a merged sharded checkpoint, or the wrapped
        optimizer unsharded) saved at any world size; keep this rank's part.

        Everything is checked against every parameter before anything changes.
        """
        groups = [{**self._hyperparameters(g), "params": list(g["params"])}
                  for g in self.param_groups]
        check = self.optimizer_class(groups)
        check.load_state_dict(state_dict)  # validates all of it, on a scratch optimizer
        # The scratch optimizer's own state dict numbers the parameters as the full one does,
        # with every slot array brought to the host.
        full_state = check.state_dict()["state"]
        local_state = {local_index: full_state[index]
                       for local_index, index in enumerate(self._local_indices)
                       if index in full_state}
        if self.optim is not None:
            local_groups = []
            for g, local_g in sorted(self._local_groups.items(), key=lambda item: item[1]):
                packed = self._hyperparameters(check.param_groups[g])
                count = len(self.optim.param_groups[local_g]["params"])
                start = sum(len(self.optim.param_groups[i]["params"]) for i in range(local_g))
                packed["params"] = list(range(start, start + count))
                local_groups.append(packed)
            self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})
        swap_group_hyperparameters(self.param_groups,
                                   [self._hyperparameters(g) for g in check.param_groups])
        self._consolidated = None

    def __repr__(self) -> str:
        return (f"ZeroRedundancyOptimizer({self.optimizer_class.__name__}, rank {self.rank} of "
                f"{self.world_size}, owns {len(self._local_indices)} of {len(self.owner)} "
                "parameters)")
