"""Watching the ranks of a group, so that no wait on it outlives a rank that is gone.

The driver sees its local workers' processes (their exit status and output) and, for every rank, what the rank
writes to the rendezvous store (group.open_store). Per rank r:
  tinyllm/ready/r   r has loaded its model and is joining the group
  tinyllm/exit/r    why r stopped (its error's first sentence, or "shut down"), written just before it exits
  tinyllm/beat/r    a counter r adds 1 to every BEAT_S from a thread of its own: for a rank started elsewhere
                    (another machine, torchrun) the only sign of life the driver has
The heartbeat also ends a worker whose driver is gone, whatever it is waiting for: the driver serves the store.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass

from ..errors import TinyLLMError

BEAT_S = 0.2  # a worker's heartbeat period
SETTLE_S = 1.0  # after a failed collective: a rank whose heartbeat stays still this long is called silent
POLL_S = 0.05


def ready_key(rank: int) -> str:
    return f"tinyllm/ready/{rank}"


def exit_key(rank: int) -> str:
    return f"tinyllm/exit/{rank}"


def beat_key(rank: int) -> str:
    return f"tinyllm/beat/{rank}"


def cause(exc: BaseException) -> str:
    """The first sentence of an error, without gloo's source location: 'RuntimeError: Read error ...'."""
    text = str(exc).split("\n")[0]
    text = re.sub(r"^\[[^\]]*\] ", "", text).split(". ")[0]
    return f"{type(exc).__name__}: {text or 'no message'}"


def leave_note(store, rank: int, why: str) -> None:
    """Tell the driver why this rank stops (best effort: the store may be gone with the driver)."""
    with contextlib.suppress(Exception):
        store.set(exit_key(rank), why)


class Heartbeat:
    """A worker's pulse: a daemon thread adds 1 to the rank's counter every BEAT_S. When the store stops
    answering, the driver has exited or been killed, and the thread ends this process."""

    def __init__(self, store, rank: int):
        self.store, self.rank = store, rank
        threading.Thread(target=self._run, name=f"tinyllm-heartbeat-{rank}", daemon=True).start()

    def _run(self) -> None:
        key = beat_key(self.rank)
        while True:
            try:
                self.store.add(key, 1)
            except Exception as exc:
                print(f"tinyllm worker rank {self.rank}: the driver is gone ({cause(exc)})", file=sys.stderr)
                sys.stderr.flush()
                os._exit(1)
            time.sleep(BEAT_S)


@dataclass
class Stop:
    """A rank that stopped: what the driver saw ("exited with code 1", "went silent ..."), its note, its output."""

    rank: int
    what: str
    note: str | None = None
    output: str = ""

    def summary(self) -> str:
        return f"rank {self.rank} {self.what}" + (f" ({self.note})" if self.note else "")


def summary(stops: list[Stop]) -> str:
    """The ranks that left no word first (killed, crashed, silent: the likely cause), then the others."""
    return "; ".join(s.summary() for s in sorted(stops, key=lambda s: (s.note is not None, s.rank)))


def outputs(stops: list[Stop], noted: bool = True) -> str:
    """The last lines each local worker wrote, indented under its rank ('' when none wrote any); with
    noted=False, only of those that left no note (a peer's loss, say, is told by the note alone)."""
    parts = []
    for s in sorted(stops, key=lambda s: s.rank):
        if s.output and (noted or s.note is None):
            lines = "\n".join("    " + line for line in s.output.splitlines())
            parts.append(f"\nrank {s.rank}'s last output:\n{lines}")
    return "".join(parts)


class Watch:
    """The driver's view of ranks 1 .. world_size - 1; `workers` are the local ones (launcher.LocalWorker)."""

    def __init__(self, store, world_size: int, workers: list):
        self.store, self.ranks = store, range(1, world_size)
        self.workers = {w.rank: w for w in workers}
        self._beats: dict[int, tuple[int, float]] = {}  # rank: (count, when the driver saw it change)

    def wait_ready(self, startup_s: float, silent_s: float) -> None:
        """Return once every rank has loaded its model. Raise TinyLLMError as soon as one has stopped (or its
        heartbeat stood still for silent_s), or naming those not ready after startup_s."""
        deadline, size = time.monotonic() + startup_s, len(self.ranks) + 1
        while waiting := [r for r in self.ranks if not self.store.check([ready_key(r)])]:
            if stops := self.stopped(silent_s):
                raise TinyLLMError(
                    f"the tensor-parallel group of {size} ranks failed to start: {summary(stops)}{outputs(stops)}"
                )
            if time.monotonic() > deadline:
                late = [Stop(r, "did not start", None, self._output(r)) for r in waiting]
                names = ("rank " if len(waiting) == 1 else "ranks ") + ", ".join(str(r) for r in waiting)
                raise TinyLLMError(
                    f"the tensor-parallel group of {size} ranks failed to start: {names} not ready "
                    f"within {startup_s:g} s{outputs(late)}"
                )
            time.sleep(POLL_S)

    def stopped(self, silent_s: float) -> list[Stop]:
        """The ranks known to have stopped: a local worker that exited, another rank that left a note, or any
        whose heartbeat stood still for silent_s (a rank that has not beaten yet is still starting)."""
        stops, now = [], time.monotonic()
        for rank in self.ranks:
            stop = self._gone(rank)
            if stop is None and (silence := self._silence(rank, now)) >= silent_s:
                stop = Stop(rank, f"went silent (no heartbeat for {silence:.1f} s)", None, self._output(rank))
            if stop is not None:
                stops.append(stop)
        return stops

    def account(self) -> list[Stop]:
        """After a failed collective: the ranks that stopped. Each is watched until it has exited, left a note
        or beaten again (it lives), or for SETTLE_S, after which a still heartbeat counts as silent."""
        start, first = time.monotonic(), {r: self._count(r) for r in self.ranks}
        while True:
            elapsed, stops, undecided = time.monotonic() - start, [], False
            for rank in self.ranks:
                stop = self._gone(rank)
                if stop is None and self._count(rank) == first[rank]:
                    if elapsed < SETTLE_S:
                        undecided = True
                        continue
                    stop = Stop(rank, f"went silent (no heartbeat for {elapsed:.1f} s)", None, self._output(rank))
                if stop is not None:
                    stops.append(stop)
            if not undecided:
                return stops
            time.sleep(POLL_S)

    def wait_stopped(self, grace_s: float) -> None:
        """After a Shutdown: wait up to grace_s until every rank has exited (a local one) or said it stops."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(self._gone(r) is None for r in self.ranks):
            time.sleep(POLL_S)

    def _gone(self, rank: int) -> Stop | None:
        """A local worker that exited (with its note, if it left one), or another rank's note."""
        worker = self.workers.get(rank)
        if worker is not None:
            what = worker.exit_text()
            return None if what is None else Stop(rank, what, self._note(rank), worker.last_output())
        note = self._note(rank)
        return None if note is None else Stop(rank, "stopped", note)

    def _note(self, rank: int) -> str | None:
        try:
            if self.store.check([exit_key(rank)]):
                return self.store.get(exit_key(rank)).decode(errors="replace")
        except Exception:
            pass
        return None

    def _count(self, rank: int) -> int:
        try:
            return self.store.add(beat_key(rank), 0)  # reads the counter without waiting for it
        except Exception:
            return -1

    def _silence(self, rank: int, now: float) -> float:
        count = self._count(rank)
        if count <= 0:
            return 0.0
        seen, since = self._beats.get(rank, (None, now))
        if count != seen:
            self._beats[rank] = (count, now)
            return 0.0
        return now - since

    def _output(self, rank: int) -> str:
        worker = self.workers.get(rank)
        return worker.last_output() if worker is not None else ""
