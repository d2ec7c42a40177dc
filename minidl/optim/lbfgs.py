"""L-BFGS: a quasi-Newton method that re-evaluates the loss through a closure.

Newton's step is ``-H⁻¹g``. BFGS builds an approximation of ``H⁻¹`` from how the gradient
changed along the steps taken: each pair ``s = x_{k+1} - x_k``, ``y = g_{k+1} - g_k`` says "the
inverse Hessian maps y to s". L-BFGS (Nocedal, 1980) keeps only the last ``history_size``
pairs and applies the approximation to ``g`` with the *two-loop recursion*: a backward pass
``q ← q - α_i·y_i`` with ``α_i = ρ_i·s_iᵀq`` (ρ_i = 1/y_iᵀs_i), a scaling by
``γ = sᵀy/yᵀy`` (the last pair's curvature, as the initial ``H⁻¹``), and a forward pass
``r ← r + (α_i - ρ_i·y_iᵀr)·s_i``. That costs O(history·n) instead of BFGS's O(n²).

The step length comes from ``lr`` alone, or with ``line_search_fn="strong_wolfe"`` from a line
search that brackets and then zooms (cubic interpolation) onto a step satisfying the strong
Wolfe conditions: enough decrease, ``f(x + t·d) <= f(x) + c₁·t·gᵀd``, and a flattened slope,
``|g(x + t·d)ᵀd| <= c₂·|gᵀd|``.

This follows PyTorch's ``torch.optim.LBFGS`` (itself minFunc's) step for step, so the two
agree to rounding. The vector algebra runs on host copies of all parameters flattened into one
vector; the closure (forward and backward) runs on the parameters' device.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..autograd.grad_mode import enable_grad
from ..autograd.inplace import bump_version
from ..backend import get_backend
from ..validation import check_number

from .optimizer import Optimizer, _grad_array, _split_state_dict

__all__ = ["LBFGS"]

# Curvature pairs with sᵀy at or below this are skipped: they would make the approximation of
# H⁻¹ indefinite (PyTorch's threshold).
_MIN_CURVATURE = 1e-10

_VECTORS = ("d", "prev_flat_grad")
_HISTORY = ("old_dirs", "old_stps")
_NUMBERS = ("t", "H_diag", "prev_loss")


def cubic_minimum(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2, clipped
    to ``bounds`` (default: between the two points); their midpoint when the cubic has no
    minimum."""
    low, high = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1 ** 2 - g1 * g2
    if d2_square < 0:
        return (low + high) / 2.0
    d2 = np.sqrt(d2_square)
    if x1 <= x2:
        position = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        position = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(position, low), high)


def strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                 max_ls=25):
    """A step length along ``d`` satisfying the strong Wolfe conditions, from a first guess
    ``t``: ``(f_new, g_new, t, evaluations)``. ``evaluate(t)`` is the loss and flat gradient at
    ``x + t·d``; ``f``, ``g``, ``gtd`` are the loss, gradient and slope at ``x``."""
    d_norm = np.abs(d).max()
    f_new, g_new = evaluate(t)
    evaluations = 1
    gtd_new = g_new.dot(d)
    # Bracketing: grow the step until an interval is known to hold an acceptable point.
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    iteration = 0
    while iteration < max_ls:
        if f_new > f + c1 * t * gtd or (iteration > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        # Extrapolate: a cubic step, at least 1 % past t and at most 10 t.
        previous = t
        t = cubic_minimum(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                          bounds=(t + 0.01 * (t - t_prev), t * 10))
        t_prev, f_prev, g_prev, gtd_prev = previous, f_new, g_new.copy(), gtd_new
        f_new, g_new = evaluate(t)
        evaluations += 1
        gtd_new = g_new.dot(d)
        iteration += 1
    if iteration == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    # Zoom: shrink the bracket around the lower end until the conditions hold.
    insufficient_progress = False
    low, high = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and iteration < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = cubic_minimum(bracket[0], bracket_f[0], bracket_gtd[0],
                          bracket[1], bracket_f[1], bracket_gtd[1])
        # A trial too close to an end of the bracket makes little progress: after two such
        # (or one outside it), move it a tenth of the bracket inside.
        margin = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < margin:
            if insufficient_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - margin
                else:
                    t = min(bracket) + margin
                insufficient_progress = False
            else:
                insufficient_progress = True
        else:
            insufficient_progress = False
        f_new, g_new = evaluate(t)
        evaluations += 1
        gtd_new = g_new.dot(d)
        iteration += 1
        if f_new > f + c1 * t * gtd or f_new >= bracket_f[low]:
            # Not enough decrease: the trial becomes the high end.
            bracket[high], bracket_f[high] = t, f_new
            bracket_g[high], bracket_gtd[high] = g_new.copy(), gtd_new
            low, high = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high] - bracket[low]) >= 0:
                bracket[high], bracket_f[high] = bracket[low], bracket_f[low]
                bracket_g[high], bracket_gtd[high] = bracket_g[low], bracket_gtd[low]
            bracket[low], bracket_f[low] = t, f_new
            bracket_g[low], bracket_gtd[low] = g_new.copy(), gtd_new
    return bracket_f[low], bracket_g[low], bracket[low], evaluations


def _loss_value(loss) -> float:
    return float(loss.item() if hasattr(loss, "item") else loss)


class LBFGS(Optimizer):
    """L-BFGS (see the module docstring), PyTorch's arguments and behaviour.

    ``step(closure)`` runs up to ``max_iter`` iterations (``max_eval`` loss evaluations,
    default ``max_iter * 5 // 4``); ``closure()`` must zero the gradients, compute the loss,
    call ``backward()`` and return the loss. It stops early when the largest gradient entry is
    at most ``tolerance_grad``, or the step or the change of the loss is below
    ``tolerance_change``. One parameter group only.

    State (under the first parameter's index, as PyTorch): ``func_evals``, ``n_iter``, the last
    direction ``d`` and step ``t``, the history ``old_dirs``/``old_stps`` (the y and s vectors,
    stacked as rows), ``ro``, ``H_diag``, ``prev_flat_grad`` and ``prev_loss``.
    """

    def __init__(self, params, lr: float = 1.0, max_iter: int = 20, max_eval: int | None = None,
                 tolerance_grad: float = 1e-7, tolerance_change: float = 1e-9,
                 history_size: int = 100, line_search_fn: str | None = None):
        if max_eval is None and isinstance(max_iter, numbers.Integral):
            max_eval = max_iter * 5 // 4
        defaults = dict(lr=lr, max_iter=max_iter, max_eval=max_eval,
                        tolerance_grad=tolerance_grad, tolerance_change=tolerance_change,
                        history_size=history_size, line_search_fn=line_search_fn)
        self._check_hyperparameters(defaults)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._lbfgs = {"func_evals": 0, "n_iter": 0}

    def _check_hyperparameters(self, group: dict) -> None:
        check_number("lr", group["lr"], low=0.0)
        for name in ("max_iter", "max_eval", "history_size"):
            check_number(name, group[name], low=1, integer=True)
        check_number("tolerance_grad", group["tolerance_grad"], low=0.0)
        check_number("tolerance_change", group["tolerance_change"], low=0.0)
        if group["line_search_fn"] not in (None, "strong_wolfe"):
            raise ValueError(f"line_search_fn must be None or 'strong_wolfe', got "
                             f"{group['line_search_fn']!r}")

    def add_param_group(self, param_group: dict) -> None:
        """Refused after the first group: L-BFGS keeps one flat vector of all parameters."""
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(param_group)

    # -- the parameters as one flat vector -----------------------------------------------------

    def _flat_grad(self) -> np.ndarray:
        parts = []
        for p in self._params:
            grad = _grad_array(p)
            parts.append(np.zeros(p.data.size, p.data.dtype) if grad is None
                         else get_backend(p.device).to_numpy(grad).reshape(-1))
        return np.concatenate(parts)

    def _values(self) -> list[np.ndarray]:
        return [get_backend(p.device).to_numpy(p.data).copy() for p in self._params]

    def _write(self, values) -> None:
        for p, value in zip(self._params, values):
            be = get_backend(p.device)
            be.assign_(p.data, be.from_numpy(np.ascontiguousarray(value)))
            bump_version(p)

    def _move(self, start, t, d) -> None:
        """Set the parameters to ``start + t·d`` (``start``: their values as a list)."""
        offset, moved = 0, []
        for value in start:
            moved.append(value + d[offset:offset + value.size].reshape(value.shape) * t)
            offset += value.size
        self._write(moved)

    # -- the step ------------------------------------------------------------------------------

    def step(self, closure=None):
        """Run up to ``max_iter`` L-BFGS iterations; returns the loss the closure gave first."""
        if closure is None:
            raise ValueError("LBFGS.step needs a closure that re-evaluates the loss")

        def evaluate():
            with enable_grad():
                return closure()

        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        state = self._lbfgs
        first_loss = evaluate()
        loss = _loss_value(first_loss)
        evaluations = 1
        state["func_evals"] += 1
        flat_grad = self._flat_grad()
        if np.abs(flat_grad).max() <= tolerance_grad:
            return first_loss
        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        h_diag, prev_flat_grad = state.get("H_diag"), state.get("prev_flat_grad")
        prev_loss = state.get("prev_loss")
        iteration = 0
        while iteration < max_iter:
            iteration += 1
            state["n_iter"] += 1
            if state["n_iter"] == 1:
                d, old_dirs, old_stps, ro, h_diag = -flat_grad, [], [], [], 1
            else:
                y, s = flat_grad - prev_flat_grad, d * t
                ys = y.dot(s)
                if ys > _MIN_CURVATURE:
                    if len(old_dirs) == group["history_size"]:  # forget the oldest pair
                        del old_dirs[0], old_stps[0], ro[0]
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    h_diag = ys / y.dot(y)
                d = self._two_loop(flat_grad, old_dirs, old_stps, ro, h_diag)
            prev_flat_grad, prev_loss = flat_grad.copy(), loss
            # The first step is scaled so that it moves by at most lr in the 1-norm.
            t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr if state["n_iter"] == 1 else lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:  # not a descent direction (any more)
                break
            used = 0
            if group["line_search_fn"] == "strong_wolfe":
                start = self._values()

                def at(step_length):
                    self._move(start, step_length, d)
                    value = _loss_value(evaluate())
                    gradient = self._flat_grad()
                    self._write(start)
                    return value, gradient

                loss, flat_grad, t, used = strong_wolfe(at, t, d, loss, flat_grad, gtd,
                                                        max_ls=max_eval - evaluations)
                self._move(self._values(), t, d)
                optimal = np.abs(flat_grad).max() <= tolerance_grad
            else:
                self._move(self._values(), t, d)
                optimal = False
                if iteration != max_iter:  # the last iteration's loss would go unused
                    loss = _loss_value(evaluate())
                    flat_grad = self._flat_grad()
                    optimal = np.abs(flat_grad).max() <= tolerance_grad
                    used = 1
            evaluations += used
            state["func_evals"] += used
            if iteration == max_iter or evaluations >= max_eval or optimal:
                break
            if np.abs(d * t).max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break
        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=h_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return first_loss

    @staticmethod
    def _two_loop(flat_grad, old_dirs, old_stps, ro, h_diag):
        """-H⁻¹·g by the two-loop recursion over the stored (y, s) pairs."""
        alphas = [0.0] * len(old_dirs)
        q = -flat_grad
        for i in range(len(old_dirs) - 1, -1, -1):
            alphas[i] = old_stps[i].dot(q) * ro[i]
            q = q - old_dirs[i] * alphas[i]
        r = q * h_diag
        for i in range(len(old_dirs)):
            beta = old_dirs[i].dot(r) * ro[i]
            r = r + old_stps[i] * (alphas[i] - beta)
        return r

    # -- checkpoints ---------------------------------------------------------------------------

    def state_dict(self) -> dict:
        """PyTorch's layout: the one group, and the global state under parameter index 0."""
        groups = super().state_dict()["param_groups"]
        saved = {"func_evals": self._lbfgs["func_evals"], "n_iter": self._lbfgs["n_iter"]}
        if "d" in self._lbfgs:
            state = self._lbfgs
            saved.update({name: np.array(state[name]) for name in _VECTORS})
            size = len(state["d"])
            saved.update({name: np.array(state[name]).reshape(len(state[name]), size)
                          for name in _HISTORY})
            saved.update({name: float(state[name]) for name in _NUMBERS})
            saved["ro"] = [float(r) for r in state["ro"]]
        return {"state": {0: saved}, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a ``state_dict()``, after checking every field against these parameters."""
        saved_groups, saved_state = _split_state_dict(state_dict)
        new_groups, _ = self._restored_groups(saved_groups)
        if not isinstance(saved_state, dict) or len(saved_state) > 1:
            raise ValueError("LBFGS state dict 'state' must hold one entry (index 0)")
        saved = next(iter(saved_state.values()), {"func_evals": 0, "n_iter": 0})
        restored = self._restored_lbfgs(saved)
        group = self.param_groups[0]
        params = group["params"]
        group.clear()
        group.update(new_groups[0])
        group["params"] = params
        self._lbfgs = restored

    def _restored_lbfgs(self, saved) -> dict:
        if not isinstance(saved, dict):
            raise ValueError("LBFGS state[0] must be a dict")
        size = sum(p.data.size for p in self._params)
        dtype = np.dtype(self._params[0].data.dtype)
        restored = {}
        for name in ("func_evals", "n_iter"):
            check_number(f"state[0][{name!r}]", saved.get(name), low=0, integer=True)
            restored[name] = int(saved[name])
        if "d" not in saved:
            return restored
        for name in _VECTORS:
            value = saved.get(name)
            if not isinstance(value, np.ndarray) or value.shape != (size,) or value.dtype != dtype:
                raise ValueError(f"state[0][{name!r}] must be a {dtype} array of shape ({size},)")
            restored[name] = value.copy()
        ro = saved.get("ro")
        if not isinstance(ro, list) or len(ro) > self.param_groups[0]["history_size"]:
            raise ValueError("state[0]['ro'] must be a list no longer than history_size")
        for name in _HISTORY:
            value = saved.get(name)
            if not isinstance(value, np.ndarray) or value.shape != (len(ro), size) \
                    or value.dtype != dtype:
                raise ValueError(f"state[0][{name!r}] must be a {dtype} array of shape "
                                 f"({len(ro)}, {size})")
            restored[name] = [row.copy() for row in value]
        for name in _NUMBERS:
            check_number(f"state[0][{name!r}]", saved.get(name))
            restored[name] = float(saved[name])
        for i, value in enumerate(ro):
            check_number(f"state[0]['ro'][{i}]", value)
        restored["ro"] = [float(r) for r in ro]
        return restored
