"""The optimizer base class: parameter groups, per-parameter state, and its checkpoint form.

An optimizer owns two things:

* ``param_groups``: a list of dicts. Each holds ``"params"`` (a list of Parameters) and the
  hyperparameters for them (``"lr"``, ``"momentum"``, ...). Groups let one model train its parts
  with different settings; a scheduler changes ``group["lr"]`` between steps.
* ``state``: for each Parameter that has been stepped, a dict of *slots* — arrays shaped like the
  parameter (momentum buffer, Adam's moment estimates) plus small scalars (Adam's step count).

A step walks the groups, skips parameters without a gradient, and hands each parameter, its
gradient and its slots to the device's backend primitive (``sgd_update``, ``adam_update``), which
updates the arrays in place. Parameters are never rebound, so the model sees the new values.

Checkpoint form (``state_dict``), the same layout as PyTorch's::

    {"state":        {0: {"step": 3, "exp_avg": ndarray, ...}, 1: {...}},
     "param_groups": [{"lr": 0.001, "betas": [0.9, 0.999], ..., "params": [0, 1]}]}

Parameters are named by their position across all groups (0, 1, 2, ... in group order), because
the objects themselves cannot be saved. ``"state"`` keys are ints; ``load_state_dict`` also
accepts their decimal strings ("0", "1", ...), for serializers that only write string keys. Slot
arrays are NumPy copies; everything else is plain data (int, float, bool, str, None, list, dict),
so the whole thing can be written with msgpack.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import numpy as np

from ..autograd.grad_mode import enable_grad
from ..autograd.inplace import bump_version
from ..autograd.tensor import Tensor
from ..backend import composed, get_backend
from ..io.state_tree import SCALAR_TYPES, check_tree, is_array, to_plain
from ..validation import check_non_negative_int

__all__ = ["Optimizer", "ParamState", "required"]


# Keys a parameter group may carry beyond its hyperparameters: a learning-rate scheduler
# records each group's starting rate as "initial_lr".
OPTIONAL_GROUP_KEYS = ("initial_lr",)

class _RequiredParameter:
    """Marks a hyperparameter that has no default and must be given (per group or globally)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


class ParamState(MutableMapping):
    """The optimizer's per-parameter state, keyed by the Parameter *object*.

    Tensors compare elementwise (``a == b`` is a tensor), so they cannot be ordinary dict keys;
    this mapping uses object identity instead: ``state[p]`` is the slot dict of exactly ``p``.
    """

    def __init__(self):
        self._by_id: dict[int, tuple[object, dict]] = {}

    def __getitem__(self, param) -> dict:
        return self._by_id[id(param)][1]

    def __setitem__(self, param, slots: dict) -> None:
        # Keeping ``param`` alive alongside its slots guarantees its id is never reused.
        self._by_id[id(param)] = (param, slots)

    def __delitem__(self, param) -> None:
        del self._by_id[id(param)]

    def __contains__(self, param) -> bool:
        return id(param) in self._by_id

    def __iter__(self):
        return (param for param, _ in self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def __repr__(self) -> str:
        return f"ParamState({len(self)} parameters)"


def _grad_array(param):
    """The gradient of ``param`` as a backend array, or None when it has none."""
    grad = param.grad
    if grad is None or isinstance(grad, np.ndarray):
        return grad
    return grad.data


class Optimizer:
    """Base class of all optimizers.

    ``params`` is an iterable of Parameters, or of dicts (parameter groups) each with a
    ``"params"`` entry and optional per-group hyperparameters overriding ``defaults``.
    Subclasses define the hyperparameters (``_check_hyperparameters``), the slots they keep
    (``_check_param_state``) and the update itself (``_update``).
    """

    def __init__(self, params, defaults: dict):
        if isinstance(params, (Tensor, dict, set)):
            raise TypeError("params must be an iterable of Parameters or of dicts (parameter "
                            f"groups), got {type(params).__name__}")
        self.defaults = dict(defaults)
        self.param_groups: list[dict] = []
        self.state = ParamState()
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # -- hooks for subclasses ------------------------------------------------------------------

    def _check_hyperparameters(self, group: dict) -> None:
        """Raise ValueError naming the first invalid hyperparameter of ``group``."""

    def _check_param_state(self, slots: dict, param, group: dict, where: str) -> None:
        """Raise ValueError if ``slots`` (already shape-checked) is not a valid state for ``param``."""

    def _update(self, param, grad, slots: dict, group: dict, backend) -> None:
        """Update ``param.data`` (and ``slots``) in place from ``grad``."""
        raise NotImplementedError

    def _update_group(self, updates: list, group: dict) -> None:
        """Update every ``(param, grad, slots)`` of ``updates`` (one parameter group's, in
        order): one ``_update`` each, unless the optimizer hands the whole group to a
        multi-tensor primitive of the backend (SGD, Adam: one launch on a GPU)."""
        for param, grad, slots in updates:
            self._update(param, grad, slots, group, get_backend(param.device))

    # -- parameter groups ----------------------------------------------------------------------

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters, filling its missing hyperparameters from ``defaults``."""
        if not isinstance(param_group, dict):
            raise TypeError(f"a parameter group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        if "params" not in group:
            raise ValueError("a parameter group needs a 'params' entry")
        params = group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("parameter group 'params' must be an ordered sequence, not a set "
                            "(the order defines the state dict's parameter indices)")
        params = list(params)
        index = len(self.param_groups)
        for i, param in enumerate(params):
            if not isinstance(param, Tensor):
                raise TypeError(f"param_groups[{index}]['params'][{i}] is a "
                                f"{type(param).__name__}, not a Parameter")
            if not param.is_leaf:
                raise ValueError(f"param_groups[{index}]['params'][{i}] is not a leaf tensor; "
                                 "only leaves (Parameters) can be optimized")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for i, param in enumerate(params):
            if id(param) in seen:
                raise ValueError(f"param_groups[{index}]['params'][{i}] appears more than once "
                                 "among the optimizer's parameters")
            seen.add(id(param))
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group {index} does not specify required "
                                 f"hyperparameter {name!r}")
            group.setdefault(name, default)
        self._check_hyperparameters(group)
        self.param_groups.append(group)

    def _all_params(self):
        return [param for group in self.param_groups for param in group["params"]]

    # -- the step ------------------------------------------------------------------------------

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient: drop it (default), or fill it with zeros in place."""
        for param in self._all_params():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                composed.fill_(get_backend(param.device), _grad_array(param), 0)

    def step(self, closure=None):
        """Update every parameter that has a gradient. ``closure`` re-evaluates and returns the loss."""
        loss = None
        if closure is not None:
            # The closure re-runs forward and backward, so it needs gradients recorded even when
            # step() itself is called under no_grad.
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            with_grads = [(param, _grad_array(param)) for param in group["params"]]
            with_grads = [(param, grad) for param, grad in with_grads if grad is not None]
            for param, grad in with_grads:  # (all checked before any is updated)
                if grad.shape != param.data.shape:
                    raise ValueError(f"gradient of shape {grad.shape} for a parameter of shape "
                                     f"{param.data.shape}")
            self._update_group([(param, grad, self.state.setdefault(param, {}))
                                for param, grad in with_grads], group)
            for param, _ in with_grads:
                # The update wrote the parameter in place: a graph built before it that kept
                # the old values must not be differentiated any more (see autograd/inplace.py).
                bump_version(param)
        return loss

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """The optimizer's state: slot arrays as NumPy arrays, everything else plain data.

        On the CPU the slot arrays are the live storage, as in PyTorch and as
        ``Module.state_dict`` (no copy per call: a checkpoint copies once, when it stages a
        background save, and not at all when it writes synchronously). Copy them if they must
        not follow later steps.
        """
        index_of: dict[int, int] = {}
        groups = []
        for g, group in enumerate(self.param_groups):
            packed = {key: to_plain(value, f"param_groups[{g}][{key!r}]")
                      for key, value in group.items() if key != "params"}
            packed["params"] = [index_of.setdefault(id(p), len(index_of)) for p in group["params"]]
            groups.append(packed)
        state = {}
        for param in self._all_params():
            slots = self.state.get(param)
            if not slots:
                continue
            backend = get_backend(param.device)
            state[index_of[id(param)]] = {
                name: (backend.to_numpy(value) if is_array(value)
                       else to_plain(value, f"state[{index_of[id(param)]}][{name!r}]"))
                for name, value in slots.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a snapshot made by ``state_dict``, after checking all of it.

        Nothing changes unless the whole snapshot is valid: the number of groups and of
        parameters per group, every hyperparameter, and every slot's shape and dtype against its
        parameter. Arrays are copied in, so the caller's arrays are never aliased.
        """
        saved_groups, saved_state = _split_state_dict(state_dict)
        new_groups, param_of = self._restored_groups(saved_groups)
        new_state = self._restored_state(saved_state, param_of, new_groups)
        # Only now, with everything checked, change the optimizer: two single assignments,
        # so a Ctrl-C at any bytecode leaves it whole (old groups, or new groups beside the
        # old state), never a group without its params, and a rollback always works.
        swap_group_hyperparameters(self.param_groups, new_groups)
        self.state = new_state

    # The steps of load_state_dict; none of them changes the optimizer.

    def _restored_groups(self, saved_groups) -> tuple[list[dict], dict]:
        """Each group's restored hyperparameters, and where each saved parameter index points:
        ``{index: (param, group number, position in the group)}``."""
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"state dict has {len(saved_groups)} parameter groups, the optimizer "
                             f"has {len(self.param_groups)}")
        param_of: dict[int, tuple[object, int, int]] = {}
        new_groups = []
        for g, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            if not isinstance(saved, dict) or not isinstance(saved.get("params"), (list, tuple)):
                raise ValueError(f"param_groups[{g}] must be a dict with a 'params' list")
            _index_params(saved["params"], group["params"], g, param_of)
            new_groups.append(self._restored_hyperparameters(saved, group, g))
        return new_groups, param_of

    def _restored_hyperparameters(self, saved: dict, group: dict, g: int) -> dict:
        """Group ``g``'s hyperparameters from ``saved``, checked as the optimizer checks its own."""
        # The group's own keys, less the optional ones the saved group does not carry: a
        # state is then restored exactly (a rollback to a snapshot taken before a scheduler
        # added 'initial_lr' removes it again).
        hyper = {key: value for key, value in group.items()
                 if key != "params" and (key not in OPTIONAL_GROUP_KEYS or key in saved)}
        known = set(hyper) | set(self.defaults) | set(OPTIONAL_GROUP_KEYS)
        for key, value in saved.items():
            if key == "params":
                continue
            # Only keys a group of this optimizer can have: anything else would be merged
            # in, outlive a rollback, and could be whatever a file chose ("__class__").
            if key not in known:
                raise ValueError(f"param_groups[{g}] has unknown key {key!r} (known: "
                                 f"{', '.join(map(repr, sorted(known, key=str)))})")
            check_tree(value, f"param_groups[{g}][{key!r}]", key_types=(str, int))
            # Tuples (betas) travel as lists; give them back their original form.
            if isinstance(hyper.get(key), tuple) and isinstance(value, (list, tuple)):
                value = tuple(value)
            hyper[key] = value
        try:
            self._check_hyperparameters(hyper)
        except ValueError as error:
            raise ValueError(f"param_groups[{g}]: {error}") from None
        return hyper

    def _restored_state(self, saved_state, param_of: dict, new_groups: list[dict]) -> ParamState:
        """The per-parameter slots of ``saved_state``, copied onto each parameter's device."""
        if not isinstance(saved_state, dict):
            raise ValueError("state dict 'state' must be a dict")
        new_state = ParamState()
        for key, slots in saved_state.items():
            index = _parse_index(key)
            if index is None or index not in param_of:
                raise ValueError(f"state dict 'state' has an entry for {key!r}, which is not the "
                                 "index of any parameter in 'param_groups'")
            param, g, i = param_of[index]
            where = f"state[{index}] (param_groups[{g}]['params'][{i}])"
            copied = _restored_slots(slots, param, where)
            self._check_param_state(copied, param, new_groups[g], where)
            new_state[param] = copied
        return new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for g, group in enumerate(self.param_groups):
            lines.append(f"  group {g}: {len(group['params'])} params")
            lines += [f"    {key}: {value!r}" for key, value in sorted(group.items())
                      if key != "params"]
        return "\n".join(lines + [")"])


def swap_group_hyperparameters(param_groups: list[dict], hyperparameters: list[dict]) -> None:
    """Give group ``g`` of ``param_groups`` the hyperparameters ``hyperparameters[g]``, its
    params kept.

    The new groups are built aside and put in place by one slice assignment, which no
    KeyboardInterrupt can split (clearing a group and refilling it in place could be cut
    between the two, leaving a group without ``"params"``). The list itself stays the same
    object: whoever holds ``optimizer.param_groups`` sees the new groups.
    """
    param_groups[:] = [{**hyper, "params": group["params"]}
                       for group, hyper in zip(param_groups, hyperparameters)]


def _split_state_dict(state_dict) -> tuple[list, dict]:
    """The two parts of an optimizer state dict, once its outer layout is right."""
    if not isinstance(state_dict, dict) or set(state_dict) != {"state", "param_groups"}:
        raise ValueError("an optimizer state dict must be a dict with exactly the keys "
                         "'state' and 'param_groups'")
    if not isinstance(state_dict["param_groups"], (list, tuple)):
        raise ValueError("state dict 'param_groups' must be a list")
    return state_dict["param_groups"], state_dict["state"]


def _index_params(saved_params, params: list, g: int, param_of: dict) -> None:
    """Record which parameter each saved index of group ``g`` names; each index once."""
    if len(saved_params) != len(params):
        raise ValueError(f"param_groups[{g}] has {len(saved_params)} parameters in the "
                         f"state dict, {len(params)} in the optimizer")
    for i, (index, param) in enumerate(zip(saved_params, params)):
        index = check_non_negative_int(f"param_groups[{g}]['params'][{i}]", index)
        if index in param_of:
            raise ValueError(f"param_groups[{g}]['params'][{i}]: index {index} is used twice")
        param_of[index] = (param, g, i)


def _restored_slots(slots, param, where: str) -> dict:
    """Private copies of a parameter's saved slots on its device: arrays of exactly its shape
    and dtype, plain scalars (a step count) as they are."""
    if not isinstance(slots, dict):
        raise ValueError(f"{where} must be a dict of slots")
    backend = get_backend(param.device)
    shape, dtype = tuple(param.data.shape), np.dtype(param.data.dtype)
    copied = {}
    for name, value in slots.items():
        if not isinstance(name, str):
            raise ValueError(f"{where} has a non-string slot name {name!r}")
        if isinstance(value, np.ndarray):
            if value.shape != shape:
                raise ValueError(f"{where} slot {name!r} has shape {value.shape}, the "
                                 f"parameter has shape {shape}")
            if value.dtype != dtype:
                raise ValueError(f"{where} slot {name!r} has dtype {value.dtype}, the "
                                 f"parameter has dtype {dtype}")
            copied[name] = backend.from_numpy(np.array(value, dtype=dtype, order="C", copy=True))
        elif isinstance(value, SCALAR_TYPES):
            copied[name] = value
        else:
            raise ValueError(f"{where} slot {name!r} must be a NumPy array or a plain "
                             f"scalar, got {type(value).__name__}")
    return copied


def _parse_index(key) -> int | None:
    """A state key as an int: non-negative ints as they are, decimal strings (ASCII digits
    only: ``int`` would also read other scripts' digits) parsed; None if neither."""
    if isinstance(key, str):
        return int(key) if key.isascii() and key.isdigit() else None
    try:
        return check_non_negative_int("state key", key)
    except ValueError:
        return None
