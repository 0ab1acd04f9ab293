"""Application state, typed through aiohttp's ``AppKey``."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
from aiohttp import web

from proxy.config import Config
from proxy.grading import GradeQueue
from proxy.metrics import ProxyMetrics
from proxy.pairs import PairTracker
from proxy.routing import Router
from proxy.shadow import ShadowRunner
from proxy.taskstore import TaskStore


@dataclass(slots=True)
class Lifecycle:
    """Where the process is in its life; read by /readyz and the request handler."""

    draining: bool = False  # readiness says 503; requests are still served
    refusing: bool = False  # past the drain delay: new requests get 503 server_draining


@dataclass(slots=True)
class QueueSlot:
    """The grade queue once it runs: the admin app, which shares this slot, reads its health."""

    queue: GradeQueue | None = None


CONFIG = web.AppKey("config", Config)
METRICS = web.AppKey("metrics", ProxyMetrics)
TASKS = web.AppKey("tasks", TaskStore)
QUEUE = web.AppKey("queue", GradeQueue)
QUEUE_SLOT = web.AppKey("queue_slot", QueueSlot)
SESSION = web.AppKey("session", aiohttp.ClientSession)
LIFECYCLE = web.AppKey("lifecycle", Lifecycle)
ROUTER = web.AppKey("router", Router)
PAIRS = web.AppKey("pairs", PairTracker)
SHADOWS = web.AppKey("shadows", ShadowRunner)
REQUEST_ID = web.RequestKey("request_id", str)
