"""Finding out which rank is missing from a collective, and why.

A rank waiting for the others only knows that *someone* is late: the meeting before each
collective (:func:`~minidl.distributed.process_group.wait_for_all`) completes when every rank
has arrived, and says nothing before. Three kinds of lateness call for three answers:

- **dead**: a rank's process is gone. Ranks on the same host see it at once (its process id
  no longer exists), so the others raise within a second instead of waiting out the timeout;
  the launcher (``mpiexec``, ``srun``) usually ends the job too.
- **elsewhere**: a rank took another branch and waits in another collective. Ranks that wait
  answer *roll calls* on a side channel, so when the timeout expires the others learn where it
  is: "rank 2 waits in all_reduce, its collective #13".
- **busy**: a rank is computing (or hangs) and answers nothing; after the timeout the others
  say so. A slow rank is thus never taken for a dead one before the timeout.

The side channel is a duplicate of the group's communicator: its messages can never be
confused with the data of a collective. A question is one byte; an answer is a short text,
``"<collective number> <name>"``.
"""

from __future__ import annotations

import os
import socket
import time
import zlib

import numpy as np

ASK, ANSWER = 1, 2
ANSWER_BYTES = 128
ROLL_CALL_SECONDS = 2.0   # how long a timed-out rank waits for the others' answers


def host_key() -> int:
    """A number naming this host (ranks with the same one can see each other's processes)."""
    return zlib.crc32(socket.gethostname().encode())


def is_alive(pid: int) -> bool:
    """Whether process ``pid`` (on this host) exists and has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, someone else's
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True   # no /proc (macOS): existence is all we can know


class RollCall:
    """This rank's side of the roll calls: answering the others, asking them."""

    def __init__(self, comm, peers: list[tuple[int, int]], rank: int):
        self.comm = comm            # the side channel
        self.peers = peers          # (host key, pid) of every rank
        self.rank = rank
        self.sends = []             # answers and questions still in flight
        self.same_host = [r for r, (host, _) in enumerate(peers)
                          if host == peers[rank][0] and r != rank]

    def dead_ranks(self) -> list[int]:
        """Ranks on this host whose process is gone."""
        return [r for r in self.same_host if not is_alive(self.peers[r][1])]

    def answer(self, where: str) -> None:
        """Answer every roll call that has arrived: this rank waits at ``where``."""
        from mpi4py import MPI
        status = MPI.Status()
        while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=ASK, status=status):
            self.comm.Recv(np.empty(1, np.uint8), source=status.Get_source(), tag=ASK)
            self._send(where, status.Get_source(), ANSWER)
        self.sends = [request for request in self.sends if not request.Test()]

    def ask(self, where: str) -> dict[int, str]:
        """Ask every other rank where it waits; ``{rank: answer}`` of those that answered
        within ``ROLL_CALL_SECONDS`` (a rank that computes, hangs or died answers nothing)."""
        from mpi4py import MPI
        others = [r for r in range(len(self.peers)) if r != self.rank]
        for other in others:
            self._send("?", other, ASK)
        answers: dict[int, str] = {}
        status = MPI.Status()
        deadline = time.monotonic() + ROLL_CALL_SECONDS
        while len(answers) < len(others) and time.monotonic() < deadline:
            self.answer(where)  # two ranks that time out together ask each other
            while self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=ANSWER, status=status):
                buffer = np.zeros(ANSWER_BYTES, np.uint8)
                self.comm.Recv(buffer, source=status.Get_source(), tag=ANSWER)
                answers[status.Get_source()] = buffer.tobytes().rstrip(b"\0").decode(
                    errors="replace")
            time.sleep(1e-3)
        return answers

    def _send(self, text: str, dest: int, tag: int) -> None:
        data = np.zeros(ANSWER_BYTES if tag == ANSWER else 1, np.uint8)
        raw = text.encode()[:len(data)] if tag == ANSWER else b"?"
        data[:len(raw)] = np.frombuffer(raw, np.uint8)
        self.sends.append(self.comm.Isend(data, dest=dest, tag=tag))


def describe_missing(answers: dict[int, str], dead: list[int], where: str, world: int,
                     rank: int) -> str:
    """Which ranks did not arrive at ``where`` and why, from a roll call's ``answers``."""
    parts = []
    for other in range(world):
        if other == rank or answers.get(other) == where:
            continue
        if other in dead:
            parts.append(f"rank {other} has died")
        elif other in answers:
            number, _, name = answers[other].partition(" ")
            parts.append(f"rank {other} waits in {name} (its collective #{number})")
        else:
            parts.append(f"rank {other} did not answer (it is computing, hangs, or died on "
                         "another host)")
    return "; ".join(parts) or "every rank answered from here: a rank was only slow"
