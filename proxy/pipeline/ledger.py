"""A worker's job ledger: what a worker killed mid-flight left ungraded, counted by its parent.

With ``listen.workers`` > 1, a worker answers a request and grades its captured response later
(proxy/pipeline/queue.py); rows are appended per batch with no buffer, so a worker that is
killed (SIGKILL, out of memory) loses exactly the jobs it had taken and not yet settled: those
in its grade queue and in its grading process, at most ``grading.queue_size`` plus what is being
graded. Nothing in the dead process can count them, so each worker slot has three integers in
shared memory that outlive it (a ``multiprocessing`` ``RawArray`` the supervisor creates and
hands to every generation of that slot):

* ``SUBMITTED``: jobs handed to the grade queue (each answered request that is graded);
* ``SETTLED``: jobs whose rows were written, or that were skipped or counted as errors;
* ``LOST``: jobs lost by the slot's earlier generations, ``RESTARTS``: how many there were.

The supervisor, seeing a worker exit, adds ``SUBMITTED - SETTLED`` to ``LOST``, logs it
(``worker_rows_lost``), zeroes the two and starts the next generation, which reports ``LOST``
as ``gradeproxy_worker_rows_lost_total`` and on the live page. Only the worker's event loop
writes ``SUBMITTED`` and ``SETTLED`` (one store each a job), only the supervisor the rest, and
only while that worker is gone. Never a lock here: it is two integer stores on the hot path.
"""

from __future__ import annotations

from typing import Any

SUBMITTED, SETTLED, LOST, RESTARTS = range(4)
SLOTS = 4


def new_slot(context: Any) -> Any:
    """A slot's shared integers (``context``: the supervisor's ``spawn`` context)."""
    return context.RawArray("q", SLOTS)


class Ledger:
    """One worker's view of its slot (or, in a single process, plain integers)."""

    __slots__ = ("_slot",)

    def __init__(self, slot: Any | None = None) -> None:
        self._slot = slot if slot is not None else [0] * SLOTS

    def submitted(self) -> None:
        self._slot[SUBMITTED] += 1

    def settled(self) -> None:
        self._slot[SETTLED] += 1

    @property
    def open_jobs(self) -> int:
        """Jobs submitted and not settled yet: what a death now would lose."""
        return int(self._slot[SUBMITTED] - self._slot[SETTLED])

    @property
    def lost(self) -> int:
        return int(self._slot[LOST])

    @property
    def restarts(self) -> int:
        return int(self._slot[RESTARTS])


def close_generation(slot: Any) -> int:
    """The supervisor's part when a worker exited: its unsettled jobs become ``LOST``;
    returns how many (0 for a worker that drained)."""
    lost = max(int(slot[SUBMITTED] - slot[SETTLED]), 0)
    slot[LOST] += lost
    slot[SUBMITTED] = slot[SETTLED] = 0
    return lost
