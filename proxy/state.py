"""Application state, typed through aiohttp's ``AppKey``."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from proxy.config import Config
from proxy.pipeline.forward import Relay
from proxy.pipeline.queue import GradeQueue
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.pairs import PairTracker
from proxy.pipeline.route import Router
from proxy.pipeline.watchdog import Watchdog
from proxy.shadow.runner import ShadowRunner
from proxy.taskstore import TaskStore

if TYPE_CHECKING:
    from proxy.telemetry.export import Telemetry


@dataclass(slots=True)
class Lifecycle:
    """Where the process is in its life; read by /readyz and the request handler."""

    draining: bool = False  # readiness says 503; requests are still served
    refusing: bool = False  # past the drain delay: new requests get 503 server_draining
    # Relays in flight, by handler task: at the end of the grace period shutdown cuts them
    # itself (an in-band error, a reason of their own) before aiohttp cancels what is left.
    relays: dict[asyncio.Task[object], Relay] = field(default_factory=dict)

    def abandon(self, task: asyncio.Task[object]) -> None:
        """The client of ``task`` closed its connection: stop a relay that has not sent its
        response headers yet (nobody will read them, and the upstream need not run on); one
        that has is left to notice on its next write (a complete answer is still graded)."""
        relay = self.relays.get(task)
        if relay is not None and not relay.headers_sent and relay.cut is None:
            relay.client_disconnected = True
            task.cancel()

    def cut_relays(self, reason: str) -> int:
        """Stop every relay still in flight; return how many were cut."""
        for task, relay in list(self.relays.items()):
            relay.cut = reason
            task.cancel()
        return len(self.relays)


@dataclass(slots=True)
class QueueSlot:
    """The grade queue once it runs: the admin app, which shares this slot, reads its health."""

    queue: GradeQueue | None = None


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """This process's place among ``listen.workers`` server processes (proxy/supervisor.py):
    the live page sums every worker's counts, read from their admin ports."""

    index: int
    count: int
    admin_ports: tuple[int, ...]  # every worker's, this one's included, by index
    # This slot's shared job ledger (proxy/pipeline/ledger.py), outliving each generation.
    ledger: Any = None


CONFIG = web.AppKey("config", Config)
METRICS = web.AppKey("metrics", ProxyMetrics)
TASKS = web.AppKey("tasks", TaskStore)
QUEUE = web.AppKey("queue", GradeQueue)
QUEUE_SLOT = web.AppKey("queue_slot", QueueSlot)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
ROUTER = web.AppKey("router", Router)
PAIRS = web.AppKey("pairs", PairTracker)
SHADOWS = web.AppKey("shadows", ShadowRunner)
WATCHDOG = web.AppKey("watchdog", Watchdog)
WORKER = web.AppKey("worker", WorkerInfo)
REQUEST_ID = web.RequestKey("request_id", str)
# Set only while tracing is on (proxy/telemetry/export.py imports the `otel` extra).
TELEMETRY: web.AppKey[Telemetry] = web.AppKey("telemetry")
