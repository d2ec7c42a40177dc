"""minidl's random number generators, with state that can be saved and restored exactly.

Every random draw in minidl (weight initialisation, dropout masks, anything else that is random)
comes from a :class:`Generator`. Unless a call is given its own generator, it draws from the one
global generator, seeded by :func:`manual_seed`. A generator's state is plain data (strings and
ints, msgpack-able), so a checkpoint can store it and a resumed run draws exactly the numbers the
uninterrupted run would have drawn.

Underneath is NumPy's PCG64: small state (two 128-bit integers), fast, and its stream is fixed by
NumPy's stability policy for a given seed.
"""

from __future__ import annotations

import numpy as np

# PyTorch seeds its default generator with a fixed constant too: an unseeded program is still
# reproducible from run to run.
DEFAULT_SEED = 67280421310721

_STATE_KIND = "minidl.Generator/PCG64"


class Generator:
    """A seeded source of random numbers whose exact position can be saved and restored."""

    def __init__(self, seed: int = DEFAULT_SEED):
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> "Generator":
        """Restart the stream from ``seed`` (a non-negative int)."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"manual_seed: seed must be a non-negative integer, got {seed!r}")
        self._seed = int(seed)
        self._numpy = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def initial_seed(self) -> int:
        """The seed last given to :meth:`manual_seed`."""
        return self._seed

    @property
    def numpy_generator(self) -> np.random.Generator:
        """The underlying NumPy generator (draws from it advance this generator)."""
        return self._numpy

    # -- drawing -------------------------------------------------------------------------------

    def uniform(self, low, high, shape, dtype=np.float32) -> np.ndarray:
        """Samples of U(low, high) as a NumPy array of ``dtype``."""
        return self._numpy.uniform(low, high, size=shape).astype(dtype, copy=False)

    def normal(self, mean, std, shape, dtype=np.float32) -> np.ndarray:
        """Samples of N(mean, std^2) as a NumPy array of ``dtype``."""
        return self._numpy.normal(mean, std, size=shape).astype(dtype, copy=False)

    def bernoulli(self, p_one: float, shape) -> np.ndarray:
        """A boolean array, each element True with probability ``p_one``."""
        return self._numpy.random(size=shape) < p_one

    def permutation(self, n: int) -> np.ndarray:
        """A random permutation of ``range(n)`` as int64."""
        return self._numpy.permutation(n).astype(np.int64, copy=False)

    def integers(self, low, high, shape=None) -> np.ndarray:
        """Integers drawn uniformly from [low, high)."""
        return self._numpy.integers(low, high, size=shape)

    # -- state -----------------------------------------------------------------------------------

    def get_state(self) -> dict:
        """The generator's exact position as plain data.

        PCG64's two 128-bit words do not fit msgpack's 64-bit integers, so they are stored as
        hexadecimal strings.
        """
        state = self._numpy.bit_generator.state
        return {
            "kind": _STATE_KIND,
            "seed": self._seed,
            "state": format(state["state"]["state"], "x"),
            "inc": format(state["state"]["inc"], "x"),
            "has_uint32": int(state["has_uint32"]),
            "uinteger": int(state["uinteger"]),
        }

    def set_state(self, state: dict) -> None:
        """Restore a position taken by :meth:`get_state`; raises ValueError if it is malformed.

        Everything is validated before the generator changes, so a bad state leaves it as it was.
        """
        if not isinstance(state, dict):
            raise ValueError(f"set_rng_state: expected a dict, got {type(state).__name__}")
        if state.get("kind") != _STATE_KIND:
            raise ValueError(
                f"set_rng_state: field 'kind' is {state.get('kind')!r}, expected {_STATE_KIND!r}")
        try:
            words = {name: int(state[name], 16) for name in ("state", "inc")}
            has_uint32 = int(state["has_uint32"])
            uinteger = int(state["uinteger"])
            seed = int(state["seed"])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"set_rng_state: malformed state ({error!r})") from None
        if not all(0 <= w < 2**128 for w in words.values()) or has_uint32 not in (0, 1) \
                or not 0 <= uinteger < 2**32:
            raise ValueError("set_rng_state: a field of the state is out of range")
        bit_generator = np.random.PCG64()
        bit_generator.state = {
            "bit_generator": "PCG64",
            "state": words,
            "has_uint32": has_uint32,
            "uinteger": uinteger,
        }
        self._seed = seed
        self._numpy = np.random.Generator(bit_generator)


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
