"""A small OTLP/HTTP receiver on loopback, decoding with ``opentelemetry-proto``: the second
receiver the failure modes and the log-event form need (Phoenix takes neither logs nor faults).

``mode`` says how it answers: ``ok`` (200), ``unavailable`` (503 to every request), or
``hang`` (reads the request, then never answers until the receiver closes). A refused port is
:func:`refused_port`: a port that was bound once and is closed again.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span

Mode = Literal["ok", "unavailable", "hang"]


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {pair.key: value_of(pair.value) for pair in pairs if isinstance(pair, KeyValue)}


@dataclass
class Receiver:
    mode: Mode = "ok"
    spans: list[Span] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    headers: list[dict[str, str]] = field(default_factory=list)  # of each export request
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # a request came in
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # spans or logs were added
    _release: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def traces(self, request: web.Request) -> web.Response:
        return await self._take(request, "traces")

    async def logs_route(self, request: web.Request) -> web.Response:
        return await self._take(request, "logs")

    async def _take(self, request: web.Request, signal: str) -> web.Response:
        body = await request.read()
        self.requests += 1
        self.headers.append({k.lower(): v for k, v in request.headers.items()})
        self.arrived.set()
        if self.mode == "hang":
            await self._release.wait()
            return web.Response(status=503)
        if self.mode == "unavailable":
            return web.Response(status=503)
        if signal == "traces":
            message = ExportTraceServiceRequest.FromString(body)
            for resource_spans in message.resource_spans:
                self.resources.append(attributes(resource_spans.resource.attributes))
                for scope in resource_spans.scope_spans:
                    self.spans.extend(scope.spans)
            self.changed.set()
            return web.Response(body=b"", content_type="application/x-protobuf")
        logs = ExportLogsServiceRequest.FromString(body)
        for resource_logs in logs.resource_logs:
            for scope_logs in resource_logs.scope_logs:
                self.logs.extend(scope_logs.log_records)
        self.changed.set()
        return web.Response(body=b"", content_type="application/x-protobuf")

    def span(self, name_prefix: str) -> list[Span]:
        return [s for s in self.spans if s.name.startswith(name_prefix)]

    async def until(self, spans: int = 0, logs: int = 0, timeout_s: float = 20.0) -> None:
        """Wait until at least this many spans and log records arrived (a test bound, not a
        timing assertion: a missing span fails the test by its count)."""
        async with asyncio.timeout(timeout_s):
            while len(self.spans) < spans or len(self.logs) < logs:
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def receiver(mode: Mode = "ok") -> AsyncIterator[Receiver]:
    state = Receiver(mode=mode)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", state.traces)
    app.router.add_post("/v1/logs", state.logs_route)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    state.port = server.sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        state._release.set()
        await runner.cleanup()


def refused_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
