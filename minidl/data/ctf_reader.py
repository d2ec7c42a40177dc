"""``CTFReader``: dense and sparse streams streamed from a file in the CNTK text format (CTF).

A CTF line holds one sample: an optional sequence id, then ``|name entries...`` for each stream;
``|#...`` up to the next ``|`` is a comment. A dense stream lists all its values
(``|features 0 1 0``); a sparse stream lists only its non-zeros as ``index:value`` pairs with a
0-based index (``|labels 3:1`` is a one-hot vector with a 1 at index 3). Both come out as dense
arrays, one row per line.

Not supported: sequences. In CNTK, consecutive lines sharing a sequence id form one sequence of
samples; this reader reads the id but does not group by it, so every line is a sample of its own
and a multi-line sequence is read as that many independent samples.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .parse_status import ERROR_MESSAGES
from .parsing import parse_ctf
from .streaming import DEFAULT_CHUNK_BYTES, StreamingReader


STREAM_KEYS = {"dim", "sparse", "dtype"}


class StreamSpec(NamedTuple):
    """One declared stream: its name, dense width, NumPy dtype name, and how the file writes it."""

    name: str
    dim: int
    dtype: str
    sparse: bool  # True: the file lists index:value pairs; False: all ``dim`` values


def _stream_spec(name, spec) -> StreamSpec:
    """One entry of ``streams`` -> :class:`StreamSpec`; see :class:`CTFReader` for the forms."""
    if isinstance(spec, dict):
        unknown = set(spec) - STREAM_KEYS
        if unknown or "dim" not in spec:
            raise ValueError(f"streams: stream {name!r} is declared as {spec!r}; a dict takes "
                             f"'dim' and optionally 'sparse' and 'dtype'")
        dim, dtype, sparse = spec["dim"], spec.get("dtype", "float32"), spec.get("sparse", False)
        if not isinstance(sparse, bool):
            raise ValueError(f"streams: stream {name!r} has 'sparse': {sparse!r}, not a bool")
    elif isinstance(spec, (tuple, list)):
        if len(spec) != 2:
            raise ValueError(f"streams: stream {name!r} is declared as {spec!r}, expected "
                             f"(dim, dtype); a sparse stream is {{'dim': ..., 'sparse': True}}")
        (dim, dtype), sparse = spec, False
    else:
        dim, dtype, sparse = spec, "float32", False
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"streams: stream {name!r} needs a positive int dimension, got {dim!r}")
    if not isinstance(name, str) or not name or any(ch in name for ch in " \t|#\r\n"):
        raise ValueError(f"streams: {name!r} is not a valid CTF stream name")
    return StreamSpec(name, int(dim), np.dtype(dtype).name, sparse)


class CTFReader(StreamingReader):
    """Batches streamed from a CTF file: one array per stream, in the order of ``streams``.

    ``streams`` maps each stream name to one of

    - ``dim``: a dense float32 stream of ``dim`` values;
    - ``(dim, dtype)``: a dense stream of that dtype;
    - ``{"dim": dim, "sparse": True, "dtype": "float32"}``: ``sparse`` (default False) says the
      file writes the stream as ``index:value`` pairs; ``dtype`` defaults to float32.

    e.g. ``CTFReader(path, 32, streams={"features": 784, "labels": {"dim": 10, "sparse": True}})``
    yields ``(features float32 (B, 784), labels float32 (B, 10))`` from lines like
    ``|features 0 0.5 ... |labels 3:1``. Every stream must appear exactly once per line: a dense
    one with its declared number of values, a sparse one with any number of entries (none means
    all zeros), each index in ``0..dim-1`` at most once. A chunk of the file is parsed into a
    float64 matrix of every stream's dense width, so for a very wide sparse stream (a vocabulary
    of 100,000 words) choose a smaller ``chunk_bytes`` to bound that matrix.

    Every line is one sample: lines sharing a sequence id are not merged into a sequence (see the
    module docstring). The rest of the protocol -- byte-offset
    ``position``, ``shuffle_buffer``, ``rank``/``world_size``, ``prefetch``, errors naming the
    file and line -- is the one of :class:`CSVReader`.
    """

    kind = "CTFReader"

    def __init__(self, path, batch_size: int, streams: dict, shuffle_buffer: int = 0,
                 seed: int = 0, *, drop_last: bool = False, rank: int = 0, world_size: int = 1,
                 prefetch: int = 0, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self._init_common(path, batch_size, shuffle_buffer, seed, drop_last, rank, world_size,
                          chunk_bytes)
        if not isinstance(streams, dict) or not streams:
            raise ValueError("streams: expected a non-empty dict of name -> dimension")
        self.streams = [_stream_spec(name, spec) for name, spec in streams.items()]
        self._kernel_streams = [(s.name.encode(), s.dim, s.sparse) for s in self.streams]
        bounds = np.cumsum([0] + [s.dim for s in self.streams])
        self._column_ranges = list(zip(bounds[:-1], bounds[1:]))
        self.data_offset, self.data_line = 0, 1
        self._open_stream(prefetch)

    def _parse_rows(self, chunk: bytes, first_line: int):
        parsed = parse_ctf(chunk, self._kernel_streams)
        if parsed.error:
            message = ERROR_MESSAGES[parsed.error].format(
                names=[s.name for s in self.streams],
                dims={s.name: s.dim for s in self.streams},
                sparse=[s.name for s in self.streams if s.sparse],
                dense=[s.name for s in self.streams if not s.sparse])
            raise self._error(first_line + parsed.bad_line, message)
        arrays = tuple(parsed.values[:, a:b].astype(s.dtype)
                       for (a, b), s in zip(self._column_ranges, self.streams))
        return arrays, parsed.starts, parsed.lines

    def _settings(self) -> dict:
        settings = self._common_settings()
        # Dense streams keep the three-field entry that states have always had, so a state saved
        # before sparse streams existed still loads; only a sparse stream adds its marker.
        settings["streams"] = [[s.name, s.dim, s.dtype] + (["sparse"] if s.sparse else [])
                               for s in self.streams]
        return settings
