"""Pairing the two graded legs of a shadowed request, in memory, bounded in size and time.

Every shadowed request has a ``pair_id`` and two legs, ``primary`` and ``shadow``, graded
independently and in either order. Each leg reports exactly once: its results per choice when
it was graded, or ``None`` when it was not (upstream error, client gone, queue full, response
not readable...). When both legs have reported, the pair is settled: each choice graded on both
sides counts once in ``gradeproxy_shadow_pairs_total{task, primary, shadow}``; a pair with an
ungraded leg counts once in ``gradeproxy_shadow_unpaired_total{reason="ungraded"}``.

The pending map only holds pairs whose second leg is still on its way. It is bounded
(``grading.pair_max_pending``: the oldest pending pair is dropped as ``overflow``) and
time-limited (``grading.pair_ttl_s``: a pair older than that is dropped as ``expired``, swept
whenever a leg reports, so no background task is needed). It never holds response bodies, only
one result string per choice.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from proxy.pipeline.record.metrics import ProxyMetrics

Variant = Literal["primary", "shadow"]
Results = Mapping[int, str]  # choice index -> pass | fail | stale


@dataclass(slots=True)
class _Pending:
    task_id: str
    since: float
    legs: dict[str, Results | None] = field(default_factory=dict)


class PairTracker:
    """Settles pairs as their second leg reports; see the module docstring."""

    def __init__(
        self,
        metrics: ProxyMetrics,
        max_pending: int,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.max_pending = max_pending
        self.ttl_s = ttl_s
        self.clock = clock
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self.settled = 0  # pairs settled either way, for tests and logs

    def __len__(self) -> int:
        return len(self._pending)

    def leg(self, pair_id: str, variant: Variant, task_id: str, results: Results | None) -> None:
        """Record one leg: its graded results per choice, or None when it was not graded."""
        now = self.clock()
        self._sweep(now)
        entry = self._pending.get(pair_id)
        if entry is None:
            if len(self._pending) >= self.max_pending:
                self._pending.popitem(last=False)
                self.metrics.shadow_unpaired.labels("overflow").inc()
            self._pending[pair_id] = _Pending(task_id, now, {variant: results})
            return
        if variant in entry.legs:  # a leg reports once; a second report is a bug upstream
            return
        del self._pending[pair_id]
        entry.legs[variant] = results
        self._settle(entry)

    def _settle(self, entry: _Pending) -> None:
        self.settled += 1
        primary, shadow = entry.legs.get("primary"), entry.legs.get("shadow")
        if primary is None or shadow is None:
            self.metrics.shadow_unpaired.labels("ungraded").inc()
            return
        for choice in sorted(primary.keys() & shadow.keys()):
            self.metrics.shadow_pairs.labels(entry.task_id, primary[choice], shadow[choice]).inc()

    def _sweep(self, now: float) -> None:
        while self._pending:
            pair_id, entry = next(iter(self._pending.items()))
            if now - entry.since < self.ttl_s:
                return
            del self._pending[pair_id]
            self.metrics.shadow_unpaired.labels("expired").inc()
