"""``CTFReader``: dense streams streamed from a file in the CNTK text format (CTF).

A CTF line holds one sample: an optional sequence id, then ``|name values...`` for each stream,
e.g. ``0 |features 0 1 0 |labels 1``; ``|#...`` up to the next ``|`` is a comment. This reader
treats every line as one sample (lines sharing a sequence id are not merged into sequences) and
reads dense values only.
"""

from __future__ import annotations

import numpy as np

from minidl.data.parsing import ERROR_MESSAGES, parse_ctf
from minidl.data.streaming import DEFAULT_CHUNK_BYTES, StreamingReader


def _stream_spec(name, spec):
    """``dim`` or ``(dim, dtype)`` -> ``(name, dim, dtype name)``."""
    dim, dtype = (spec, "float32") if not isinstance(spec, (tuple, list)) else spec
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise ValueError(f"streams: stream {name!r} needs a positive int dimension, got {dim!r}")
    if not name or any(ch in name for ch in " \t|#\r\n"):
        raise ValueError(f"streams: {name!r} is not a valid CTF stream name")
    return name, int(dim), np.dtype(dtype).name


class CTFReader(StreamingReader):
    """Batches streamed from a CTF file: one array per stream, in the order of ``streams``.

    ``streams`` maps each stream name to its dimension, or to ``(dimension, dtype)``; the
    default dtype is float32, e.g. ``CTFReader(path, 32, streams={"features": 3, "labels": 1})``
    yields ``(features float32 (B, 3), labels float32 (B, 1))``. Every stream must appear exactly
    once per line with its declared number of values. The rest of the protocol -- byte-offset
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
        self._kernel_streams = [(name.encode(), dim) for name, dim, _ in self.streams]
        bounds = np.cumsum([0] + [dim for _, dim, _ in self.streams])
        self._column_ranges = list(zip(bounds[:-1], bounds[1:]))
        self.data_offset, self.data_line = 0, 1
        self._open_stream(prefetch)

    def _parse_rows(self, chunk: bytes, first_line: int):
        parsed = parse_ctf(chunk, self._kernel_streams)
        if parsed.error:
            message = ERROR_MESSAGES[parsed.error].format(
                names=[name for name, _, _ in self.streams],
                dims={name: dim for name, dim, _ in self.streams})
            raise self._error(first_line + parsed.bad_line, message)
        arrays = tuple(parsed.values[:, a:b].astype(dtype)
                       for (a, b), (_, _, dtype) in zip(self._column_ranges, self.streams))
        return arrays, parsed.starts, parsed.lines

    def _settings(self) -> dict:
        settings = self._common_settings()
        settings["streams"] = [[name, dim, dtype] for name, dim, dtype in self.streams]
        return settings
