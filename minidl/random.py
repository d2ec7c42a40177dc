"""minidl's random number generators, with state that can be saved and restored exactly.

Every random draw in minidl (weight initialisation, dropout masks, anything else that is random)
comes from a :class:`Generator`. Unless a call is given its own generator, it draws from the one
global generator, seeded by :func:`manual_seed`. A generator's state is plain data (strings and
ints, msgpack-able), so a checkpoint can store it and a resumed run draws exactly the numbers the
uninterrupted run would have drawn.

Underneath is Philox4x32-10, a counter-based generator: sample block b of the stream is a pure
function of the key (the seed) and b. So the whole state is two integers, the seed and the number
of the next unused block, and every device computes the same stream: a draw for a tensor on a
device is made on that device by its backend's ``random_uniform`` / ``random_normal`` primitive
(see :mod:`minidl.backend.primitives`), with no host-to-device copy. Each draw starts at the
current counter and advances it by the blocks it used, so a draw never depends on how earlier
draws were split, and a restored counter continues the stream exactly.
"""

from __future__ import annotations

import numpy as np

from .backend import get_backend
from .backend.primitives import random_blocks

# PyTorch seeds its default generator with a fixed constant too: an unseeded program is still
# reproducible from run to run.
DEFAULT_SEED = 67280421310721

_STATE_KIND = "minidl.Generator/Philox4x32-10"
_WORD = 2 ** 32
_COUNTER_LIMIT = 2 ** 64  # the counter wraps here; msgpack integers hold up to 2**64 - 1


def _check_seed(seed, where: str) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not 0 <= seed < 2 ** 64:
        raise ValueError(f"{where}: seed must be an integer in [0, 2**64), got {seed!r}")
    return int(seed)


class Generator:
    """A seeded source of random numbers whose exact position can be saved and restored."""

    def __init__(self, seed: int = DEFAULT_SEED):
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> "Generator":
        """Restart the stream from ``seed`` (an integer in [0, 2**64))."""
        self._seed = _check_seed(seed, "manual_seed")
        self._counter = 0
        return self

    def initial_seed(self) -> int:
        """The seed last given to :meth:`manual_seed`."""
        return self._seed

    # -- drawing -------------------------------------------------------------------------------

    def _draw(self, distribution: str, shape, dtype, device):
        """Raw U[0, 1) or N(0, 1) samples on ``device``, advancing the counter past them."""
        backend = get_backend(device)
        shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
        if dtype.kind != "f":
            raise TypeError(f"random draws need a floating dtype, got {dtype}")
        key = (self._seed % _WORD, self._seed // _WORD)
        draw = backend.random_uniform if distribution == "uniform" else backend.random_normal
        values = draw(shape, dtype, key, self._counter)
        count = int(np.prod(shape, dtype=np.int64))
        self._counter = (self._counter + random_blocks(count, dtype, distribution)) \
            % _COUNTER_LIMIT
        return backend, values

    def uniform(self, low, high, shape, dtype=np.float32, device="cpu"):
        """Samples of U(low, high) of ``dtype``, as an array of ``device``'s backend."""
        backend, values = self._draw("uniform", shape, dtype, device)
        if (low, high) == (0.0, 1.0):
            return values
        return backend.add(backend.mul(values, float(high) - float(low)), float(low))

    def normal(self, mean, std, shape, dtype=np.float32, device="cpu"):
        """Samples of N(mean, std^2) of ``dtype``, as an array of ``device``'s backend."""
        backend, values = self._draw("normal", shape, dtype, device)
        if (mean, std) == (0.0, 1.0):
            return values
        return backend.add(backend.mul(values, float(std)), float(mean))

    def bernoulli(self, p_one: float, shape, device="cpu"):
        """A bool array of ``device``'s backend, each element True with probability ``p_one``."""
        backend, values = self._draw("uniform", shape, np.float32, device)
        return backend.less(values, float(p_one))

    def permutation(self, n: int) -> np.ndarray:
        """A random permutation of ``range(n)`` as an int64 NumPy array (drawn on the host)."""
        keys = self.uniform(0.0, 1.0, (int(n),), np.float64, device="cpu")
        return np.argsort(get_backend("cpu").to_numpy(keys), kind="stable").astype(np.int64)

    def integers(self, low: int, high: int, shape=()) -> np.ndarray:
        """Integers drawn uniformly from [low, high) as an int64 NumPy array (on the host).

        floor(u · (high - low)) from a 53-bit uniform u: unbiased to within 2**-53 relative,
        which is exact enough for any range below 2**32.
        """
        if high <= low:
            raise ValueError(f"integers: high ({high}) must be greater than low ({low})")
        u = get_backend("cpu").to_numpy(self.uniform(0.0, 1.0, shape, np.float64, "cpu"))
        return (low + np.floor(u * (high - low))).astype(np.int64)

    # -- state -----------------------------------------------------------------------------------

    def get_state(self) -> dict:
        """The generator's exact position as plain data: the seed (Philox's key) and the number
        of the next unused block (its counter), both below 2**64 so msgpack stores them."""
        return {"kind": _STATE_KIND, "seed": self._seed, "counter": self._counter}

    def set_state(self, state: dict) -> None:
        """Restore a position taken by :meth:`get_state`; raises ValueError if it is malformed.

        Everything is validated before the generator changes, so a bad state leaves it as it was.
        """
        if not isinstance(state, dict):
            raise ValueError(f"set_rng_state: expected a dict, got {type(state).__name__}")
        if state.get("kind") != _STATE_KIND:
            raise ValueError(
                f"set_rng_state: field 'kind' is {state.get('kind')!r}, expected {_STATE_KIND!r}")
        for field in ("seed", "counter"):
            value = state.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                    or not 0 <= value < _COUNTER_LIMIT:
                raise ValueError(f"set_rng_state: field {field!r} must be an integer in "
                                 f"[0, 2**64), got {value!r}")
        self._seed, self._counter = int(state["seed"]), int(state["counter"])


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the global generator (weight initialisation, dropout, ...)."""
    return default_generator.manual_seed(seed)


def initial_seed() -> int:
    """The seed of the global generator."""
    return default_generator.initial_seed()


def get_rng_state() -> dict:
    """The global generator's state, as msgpack-able plain data."""
    return default_generator.get_state()


def set_rng_state(state: dict) -> None:
    """Restore the global generator to a state from :func:`get_rng_state`."""
    default_generator.set_state(state)


def resolve(generator: Generator | None) -> Generator:
    """The generator a random op should draw from: the one it was given, else the global one."""
    return default_generator if generator is None else generator
