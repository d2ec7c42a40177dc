"""``CSVReader``: float32 features and an int64 label per line, streamed from a CSV file."""

from __future__ import annotations

import numpy as np

from .parse_status import ERROR_MESSAGES
from .parsing import parse_delimited
from .streaming import DEFAULT_CHUNK_BYTES, StreamingReader

# Bytes read at construction to find the header and the number of columns.
_SNIFF_BYTES = 1 << 20


class CSVReader(StreamingReader):
    """Batches ``(features float32 (B, F), labels int64 (B,))`` streamed from a CSV file.

    The file may be far larger than memory: it is read in chunks of ``chunk_bytes``, and the
    reader's ``position`` is the byte offset of the first line not handed out yet (rows held by
    the shuffle buffer are saved separately, by their offsets). ``label_column`` picks the label
    (negative counts from the end; ``None`` yields ``(features,)`` only); ``header=True`` skips the
    first line. ``shuffle_buffer=N`` shuffles through a buffer of N rows (0: file order);
    ``rank``/``world_size`` read only the rank's share of the bytes; ``prefetch=N`` parses up to N
    batches ahead on a background thread. A malformed line raises ``ValueError`` naming the file
    and its 1-based line number.
    """

    kind = "CSVReader"

    def __init__(self, path, batch_size: int, label_column: int | None = -1, header: bool = True,
                 shuffle_buffer: int = 0, seed: int = 0, delimiter: str = ",", *,
                 drop_last: bool = False, rank: int = 0, world_size: int = 1, prefetch: int = 0,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self._init_common(path, batch_size, shuffle_buffer, seed, drop_last, rank, world_size,
                          chunk_bytes)
        self.delimiter = delimiter
        delimiter_bytes = delimiter.encode() if isinstance(delimiter, str) else bytes(delimiter)
        if len(delimiter_bytes) != 1 or delimiter_bytes in b"\r\n":
            raise ValueError(f"delimiter must be one character other than a newline, got "
                             f"{delimiter!r}")
        self._delimiter = delimiter_bytes
        self.header = bool(header)
        self.width = self._sniff_layout()
        if label_column is None:
            self.label_column = None
        else:
            if not -self.width <= label_column < self.width:
                raise ValueError(f"label_column {label_column} is outside the {self.width} "
                                 f"columns of {self.path}")
            self.label_column = label_column % self.width
        self._feature_columns = np.array(
            [c for c in range(self.width) if c != self.label_column], dtype=np.int64)
        self._open_stream(prefetch)

    def _sniff_layout(self) -> int:
        """Find where the data lines start and how many columns they have."""
        with open(self.path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
        lines = head.split(b"\n")
        self.data_offset, self.data_line = 0, 1
        if self.header:
            if len(lines) < 2 and len(head) == _SNIFF_BYTES:
                raise ValueError(f"{self.path}: header line longer than {_SNIFF_BYTES} bytes")
            self.data_offset, self.data_line = len(lines[0]) + 1, 2
            if not lines[0].strip():
                raise ValueError(f"{self.path}, line 1: the header line is empty")
            return len(lines[0].split(self._delimiter))
        for number, line in enumerate(lines[:-1] if len(lines) > 1 else lines, start=1):
            if line.strip(b" \t\r"):
                return len(line.split(self._delimiter))
        raise ValueError(f"{self.path}: no data line in the first {_SNIFF_BYTES} bytes to "
                         "count the columns of (is the file empty?)")

    def _parse_rows(self, chunk: bytes, first_line: int):
        parsed = parse_delimited(chunk, self.width, self._delimiter)
        if parsed.error:
            message = ERROR_MESSAGES[parsed.error].format(width=self.width)
            raise self._error(first_line + parsed.bad_line, message)
        features = parsed.values[:, self._feature_columns].astype(np.float32)
        if self.label_column is None:
            return (features,), parsed.starts, parsed.lines
        raw = parsed.values[:, self.label_column]
        labels = raw.astype(np.int64)
        bad = np.flatnonzero(~np.isfinite(raw) | (labels != raw))
        if bad.size:
            raise self._error(first_line + parsed.lines[bad[0]],
                              f"label {raw[bad[0]]!r} is not an integer")
        return (features, labels), parsed.starts, parsed.lines

    def _settings(self) -> dict:
        settings = self._common_settings()
        settings.update(label_column=self.label_column, header=self.header,
                        delimiter=self._delimiter.decode("latin-1"))
        return settings
