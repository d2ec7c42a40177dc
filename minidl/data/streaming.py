"""Streaming line-oriented files (CSV, CTF) with a byte-offset position and a shuffle buffer.

The file is read in large chunks cut at a newline, and each chunk is parsed in one call (a Numba
kernel), so Python never loops over individual values. Rows wait in a *pending* block until they
are handed out; the reader's position is the byte offset of the first line not yet handed out
(or not yet pulled into the shuffle buffer), together with its line number (to name lines in
errors) and its data-line index (to keep sharding in step). Restoring seeks to that offset.

Shuffling a stream uses a buffer of ``shuffle_buffer`` rows. To make a batch of ``B`` rows, the
reader takes the next ``B`` rows of the file, pools them with the buffered rows, draws ``B`` of
the pool at random to hand out and keeps the rest in the buffer. The draw uses a generator
seeded by ``(seed, epoch, batch index)``, so no generator state needs saving; the buffer is
saved as the byte offsets of its rows, which are re-read and re-parsed on restore. Either way the
state stays bounded by the buffer size, however large the file.

With ``world_size > 1`` the data bytes are cut into ``world_size`` equal ranges, and a line
belongs to the rank whose range holds its first byte (:func:`byte_range`): each rank reads and
parses only its own part of the file. Its position is then a byte offset inside that part, so
the state differs per rank; a data-parallel checkpoint stores every rank's state and each rank
restores its own (at the same world size: another one cuts the file differently).
"""

from __future__ import annotations

import os

import numpy as np

from .protocol import BatchReader
from .sampling import epoch_generator
from .state import check_shard, file_fingerprint
from ..distributed.agreement import check_same_on_all_ranks
from ..distributed.process_group import get_rank, get_world_size
from ..validation import check_non_negative_int

DEFAULT_CHUNK_BYTES = 4 << 20


def byte_range(file, data_offset: int, file_size: int, rank: int, world_size: int,
               data_line: int) -> tuple[int, int, int]:
    """``(begin, end, line)``: rank ``rank``'s bytes ``[begin, end)`` and the line number at
    ``begin``.

    The data bytes are split evenly; a cut inside a line moves forward to the start of the next
    line, so every line starts in exactly one rank's range. The line number at ``begin`` (for
    error messages) is found by counting newlines, a byte scan far cheaper than parsing.
    """
    def line_start_at_or_after(nominal: int) -> int:
        if nominal <= data_offset:
            return data_offset
        if nominal >= file_size:
            return file_size
        file.seek(nominal - 1)
        file.readline()  # ends just after the newline of the line holding byte nominal - 1
        return min(file.tell(), file_size)

    span = file_size - data_offset
    begin = line_start_at_or_after(data_offset + span * rank // world_size)
    end = line_start_at_or_after(data_offset + span * (rank + 1) // world_size)
    line, offset = data_line, data_offset
    file.seek(offset)
    while offset < begin:
        block = file.read(min(DEFAULT_CHUNK_BYTES, begin - offset))
        line += block.count(b"\n")
        offset += len(block)
    return begin, end, line


class _Rows:
    """A block of parsed rows: the user's arrays plus, per row, where it came from."""

    def __init__(self, arrays, starts, lines, data_index):
        self.arrays = tuple(arrays)   # what a batch is made of
        self.starts = starts          # byte offset of the row's line
        self.lines = lines            # 1-based line number
        self.data_index = data_index  # index among the file's data lines

    def __len__(self):
        return len(self.starts)

    def columns(self):
        return self.arrays + (self.starts, self.lines, self.data_index)

    @classmethod
    def from_columns(cls, columns, user_arrays):
        return cls(columns[:user_arrays], *columns[user_arrays:])

    def slice(self, start, stop):
        return _Rows.from_columns([c[start:stop] for c in self.columns()], len(self.arrays))

    @staticmethod
    def concat(blocks, user_arrays):
        columns = [np.concatenate(parts) for parts in zip(*(b.columns() for b in blocks))]
        return _Rows.from_columns(columns, user_arrays)


class _StreamCursor:
    """Reads, shards, buffers and batches the rows of one file; see the module docstring."""

    def __init__(self, reader):
        self.reader = reader
        self.path = reader.path
        self.batch_size = reader.batch_size
        self.drop_last = reader.drop_last
        self.capacity = reader.shuffle_buffer
        self.seed = reader.seed
        self.rank = reader.rank
        self.world_size = reader.world_size
        self.chunk_bytes = reader.chunk_bytes
        self.file = open(self.path, "rb")
        self.begin, self.end, self.begin_line = byte_range(
            self.file, reader.data_offset, reader.file_size, self.rank, self.world_size,
            reader.data_line)
        self._start_epoch(0)

    # -- reading the file ----------------------------------------------------------------------

    def _start_epoch(self, epoch):
        self.epoch = epoch
        self.batch_index = 0
        self.file_offset = self.begin
        self.file_line = self.begin_line
        self.file_data_index = 0
        self.at_end = False
        self.pending = None          # _Rows of this worker not handed out yet
        self.next_row = 0            # first row of `pending` not handed out yet
        self.buffer = None           # _Rows held by the shuffle buffer

    def _pending_left(self):
        return 0 if self.pending is None else len(self.pending) - self.next_row

    def _read_chunk(self):
        """Parse the next chunk of whole lines and append this worker's rows to ``pending``."""
        self.file.seek(self.file_offset)
        # This rank's range ends at a line start (or the end of the file): reading up to it
        # ends on a whole line.
        limit = self.end - self.file_offset
        data = self.file.read(min(self.chunk_bytes, limit))
        at_end = len(data) >= limit or len(data) < min(self.chunk_bytes, limit)
        if not at_end:
            cut = data.rfind(b"\n")
            while cut < 0:  # a line longer than a chunk: keep reading until it ends
                more = self.file.read(min(self.chunk_bytes, limit - len(data)))
                if not more:
                    at_end = True
                    break
                data += more
                cut = data.rfind(b"\n")
            if not at_end:
                data = data[:cut + 1]
        if at_end and not data:
            self.at_end = True
            return
        arrays, starts, lines = self.reader._parse_rows(data, self.file_line)
        rows = len(starts)
        data_index = self.file_data_index + np.arange(rows, dtype=np.int64)
        block = _Rows(arrays, self.file_offset + starts, self.file_line + lines, data_index)
        self.file_offset += len(data)
        self.file_line += data.count(b"\n")
        self.file_data_index += rows
        self.at_end = at_end
        if self._pending_left():
            leftover = self.pending.slice(self.next_row, None)
            block = _Rows.concat([leftover, block], len(arrays))
        self.pending = block
        self.next_row = 0

    def _ensure_pending(self, count):
        while self._pending_left() < count and not self.at_end:
            self._read_chunk()

    def _take(self, count):
        """Up to ``count`` rows in file order (fewer only at the end of the file)."""
        self._ensure_pending(count)
        stop = self.next_row + min(count, self._pending_left())
        if self.pending is None:
            return None
        rows = self.pending.slice(self.next_row, stop)
        self.next_row = stop
        return rows

    # -- making batches ------------------------------------------------------------------------

    def _buffered(self):
        return 0 if self.buffer is None else len(self.buffer)

    def _batch_possible(self):
        need = self.batch_size if self.drop_last else 1
        if self._buffered() >= need:
            return True
        self._ensure_pending(need - self._buffered())
        return self._buffered() + self._pending_left() >= need

    def produce(self):
        if not self._batch_possible():
            raise ValueError(
                f"{self.path}: an epoch holds no batch for this reader (no data lines for rank "
                f"{self.rank} of {self.world_size}, or fewer than batch_size={self.batch_size} "
                f"with drop_last)")
        if self.capacity == 0:
            batch = self._take(self.batch_size).arrays
        else:
            batch = self._shuffled_batch()
        self.batch_index += 1
        if not self._batch_possible():
            self._start_epoch(self.epoch + 1)
        return batch

    def _shuffled_batch(self):
        missing = self.capacity - self._buffered()
        if missing > 0:
            fill = self._take(missing)
            if fill is not None and len(fill):
                blocks = [b for b in (self.buffer, fill) if b is not None]
                self.buffer = _Rows.concat(blocks, len(fill.arrays))
        incoming = self._take(self.batch_size)
        buffer = self.buffer
        k = len(buffer)
        m = 0 if incoming is None else len(incoming)
        emit = min(self.batch_size, k + m)
        # Draw `emit` of the k + m pooled rows, in random order: pool index i < k is buffer slot
        # i, pool index k + j is incoming row j.
        chosen = epoch_generator(self.seed, self.epoch, self.batch_index).choice(
            k + m, size=emit, replace=False)
        from_buffer = chosen < k
        out = []
        for b_col, i_col in zip(buffer.columns(), incoming.columns() if m else buffer.columns()):
            column = np.empty((emit,) + b_col.shape[1:], dtype=b_col.dtype)
            column[from_buffer] = b_col[chosen[from_buffer]]
            if m:
                column[~from_buffer] = i_col[chosen[~from_buffer] - k]
            out.append(column)
        # Incoming rows that were not drawn move into the freed buffer slots; at the end of the
        # file fewer rows arrive than leave, and the remaining holes are closed up.
        freed = np.sort(chosen[from_buffer])
        if m:
            kept_incoming = np.setdiff1d(np.arange(m), chosen[~from_buffer] - k)
        else:
            kept_incoming = np.empty(0, dtype=np.int64)
        refill = freed[:len(kept_incoming)]
        holes = freed[len(kept_incoming):]
        columns = list(buffer.columns())
        for c, column in enumerate(columns):
            if len(refill):
                column[refill] = incoming.columns()[c][kept_incoming]
            if len(holes):
                columns[c] = np.delete(column, holes, axis=0)
        self.buffer = _Rows.from_columns(columns, len(buffer.arrays))
        return tuple(out[:len(buffer.arrays)])

    # -- position ------------------------------------------------------------------------------

    def progress(self):
        if self._pending_left():
            r = self.next_row
            offset = int(self.pending.starts[r])
            line = int(self.pending.lines[r])
            data_index = int(self.pending.data_index[r])
        else:
            offset, line, data_index = self.file_offset, self.file_line, self.file_data_index
        buffer = self.buffer
        return {
            "epoch": self.epoch,
            "position": offset,
            "line": line,
            "data_index": data_index,
            "batch_index": self.batch_index,
            "buffer_positions": [] if buffer is None else buffer.starts.tolist(),
            "buffer_lines": [] if buffer is None else buffer.lines.tolist(),
        }

    def seek(self, progress):
        epoch = check_non_negative_int("state field 'epoch'", progress["epoch"])
        offset = check_non_negative_int("state field 'position'", progress["position"])
        if not self.begin <= offset <= self.end:
            raise ValueError(
                f"state field 'position' is {offset}, outside the data of {self.path} this "
                f"rank reads (bytes {self.begin}..{self.end})")
        positions = [check_non_negative_int("state field 'buffer_positions'", p)
                     for p in progress["buffer_positions"]]
        lines = [check_non_negative_int("state field 'buffer_lines'", n, minimum=1)
                 for n in progress["buffer_lines"]]
        if len(positions) != len(lines) or len(positions) > self.capacity:
            raise ValueError("state fields 'buffer_positions'/'buffer_lines' do not describe a "
                             f"buffer of at most {self.capacity} rows")
        self._start_epoch(epoch)
        self.batch_index = check_non_negative_int("state field 'batch_index'",
                                                  progress["batch_index"])
        self.file_offset = offset
        self.file_line = check_non_negative_int("state field 'line'", progress["line"], minimum=1)
        self.file_data_index = check_non_negative_int("state field 'data_index'",
                                                      progress["data_index"])
        if positions:
            self.buffer = self._reread(positions, lines)

    def _reread(self, positions, lines):
        """Parse again the lines that were in the shuffle buffer, in the same slots."""
        texts = []
        for offset in positions:
            self.file.seek(offset)
            texts.append(self.file.readline().rstrip(b"\r\n"))
        arrays, starts, rel_lines = self.reader._parse_rows(b"\n".join(texts) + b"\n", 0)
        if len(starts) != len(positions):
            raise ValueError(f"{self.path}: the shuffle buffer of the state does not point at "
                             "data lines; was the file changed?")
        lines = np.asarray(lines, dtype=np.int64)
        return _Rows(arrays, np.asarray(positions, dtype=np.int64), lines,
                     np.zeros(len(lines), dtype=np.int64))

    def close(self):
        self.file.close()


class StreamingReader(BatchReader):
    """Base of the readers that stream a text file; subclasses define how a chunk is parsed.

    Subclasses set ``self.data_offset`` / ``self.data_line`` (where the data lines start) before
    calling ``_open_stream`` and implement ``_parse_rows(chunk, first_line)`` returning
    ``(arrays, row starts, row line offsets)`` -- raising ``ValueError`` naming the file and line.
    ``position`` is a byte offset into the file.
    """

    progress_fields = ("epoch", "position", "line", "data_index", "batch_index",
                       "buffer_positions", "buffer_lines")

    def _init_common(self, path, batch_size, shuffle_buffer, seed, drop_last, rank, world_size,
                     chunk_bytes):
        self.path = os.fspath(path)
        self.batch_size = check_non_negative_int("batch_size", batch_size, minimum=1)
        self.shuffle_buffer = check_non_negative_int("shuffle_buffer", shuffle_buffer)
        self.seed = check_non_negative_int("seed", seed)
        self.drop_last = bool(drop_last)
        self.rank, self.world_size = check_shard(rank, world_size)
        self.chunk_bytes = check_non_negative_int("chunk_bytes", chunk_bytes, minimum=1)
        self.file_size, self.fingerprint = file_fingerprint(self.path)
        if self.world_size > 1 and self.world_size == get_world_size():
            # The same file (size and fingerprint) and settings on every rank, each its own rank.
            settings = dict(self._common_settings(), rank_is_process_rank=self.rank == get_rank())
            del settings["rank"]
            check_same_on_all_ranks(type(self).__name__, settings)

    def _open_stream(self, prefetch):
        super().__init__(_StreamCursor(self), prefetch)

    def _common_settings(self):
        return {
            "batch_size": self.batch_size,
            "shuffle_buffer": self.shuffle_buffer,
            "seed": self.seed,
            "drop_last": self.drop_last,
            "rank": self.rank,
            "world_size": self.world_size,
            "file_size": self.file_size,
            "fingerprint": self.fingerprint,
        }

    @property
    def rank_local_state(self) -> bool:
        """Whether the state differs per rank (a data-parallel checkpoint then stores every
        rank's, under ``"per_rank"``)."""
        return self.world_size > 1

    def load_state_dict(self, state):
        """Continue from ``state``; a state taken on a different file raises ``ValueError``.

        A data-parallel checkpoint's ``{"per_rank": [state, ...]}`` gives this rank its own
        entry; it must come from a job of the same world size.
        """
        if isinstance(state, dict) and "per_rank" in state:
            states = state["per_rank"]
            if not isinstance(states, list) or len(states) != self.world_size:
                saved = len(states) if isinstance(states, list) else "?"
                raise ValueError(f"state field 'per_rank' holds {saved} rank states; this reader "
                                 f"is rank {self.rank} of {self.world_size} (a streaming reader "
                                 "resumes only at the world size it was saved at)")
            state = states[self.rank]
        if isinstance(state, dict) and state.get("kind") == self.kind and (
                state.get("file_size") != self.file_size
                or state.get("fingerprint") != self.fingerprint):
            raise ValueError(
                f"state was taken on a different file than {self.path}: state field "
                f"'file_size'/'fingerprint' is {state.get('file_size')}/{state.get('fingerprint')}"
                f", the file has {self.file_size}/{self.fingerprint}")
        super().load_state_dict(state)

    def _error(self, line, message):
        return ValueError(f"{self.path}, line {line}: {message}")

    def close(self):
        """Stop prefetching and close the file; the reader cannot be used afterwards."""
        super().close()
        self._cursor.close()
