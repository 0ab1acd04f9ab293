"""Fake servers on real loopback sockets: a scripted backend model, and a listener that
stands in for a remote host a hostile schema points at.

The backend replays exact bytes (recorded wire formats in tests/fixtures/wire), split into
chunks at chosen byte boundaries, with optional pauses, and records what it received.
"""

from __future__ import annotations

import asyncio
import http.server
import itertools
import socketserver
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from tests.support.paths import WIRE

SSE = "text/event-stream"
JSON = "application/json"


@dataclass
class Reply:
    """One scripted response."""

    body: bytes = b"{}"
    status: int = 200
    content_type: str = JSON
    headers: dict[str, str] = field(default_factory=dict)
    split_at: Sequence[int] = ()  # byte offsets where the body is cut into chunks
    pause_s: float = 0.0  # between chunks
    gate: asyncio.Event | None = None  # wait for it after the first chunk
    fail_after: int | None = None  # drop the connection after this many chunks
    chunked: bool = True  # no Content-Length: relayed as a stream
    tail_pause_s: float = 0.0  # after the last chunk, before the end of the body

    def parts(self) -> list[bytes]:
        cuts = [0, *sorted(c for c in self.split_at if 0 < c < len(self.body)), len(self.body)]
        return [self.body[a:b] for a, b in itertools.pairwise(cuts) if b > a]


@dataclass
class Seen:
    method: str
    path_qs: str
    headers: CIMultiDictProxy[str]
    body: bytes


class ScriptedBackend:
    """An upstream that answers from a script and remembers every request."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.default = Reply(body=(WIRE / "openai_single_tool.json").read_bytes())
        self.seen: list[Seen] = []
        self.hook: Callable[[web.Request], Awaitable[None]] | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(
            Seen(
                request.method,
                request.path_qs,
                CIMultiDictProxy(CIMultiDict(request.headers)),
                await request.read(),
            )
        )
        if self.hook is not None:
            await self.hook(request)
        reply = self.replies.pop(0) if self.replies else self.default
        headers = CIMultiDict(reply.headers)
        headers["Content-Type"] = reply.content_type
        if not reply.chunked:
            return web.Response(status=reply.status, body=reply.body, headers=headers)
        response = web.StreamResponse(status=reply.status, headers=headers)
        response.enable_chunked_encoding()
        await response.prepare(request)
        for number, part in enumerate(reply.parts()):
            if reply.fail_after is not None and number >= reply.fail_after:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write(part)
            if number == 0 and reply.gate is not None:
                await reply.gate.wait()
            if reply.pause_s:
                await asyncio.sleep(reply.pause_s)
        if reply.tail_pause_s:
            await asyncio.sleep(reply.tail_pause_s)
        await response.write_eof()
        return response


def wire(name: str) -> bytes:
    return (WIRE / name).read_bytes()


def awkward_cuts(body: bytes) -> list[int]:
    """Every 7th byte, plus inside the first multi-byte character and between CR and LF."""
    cuts = set(range(7, len(body), 7))
    for marker in ("ü".encode(), "°".encode(), b"\r\n"):
        at = body.find(marker)
        if at >= 0:
            cuts.add(at + 1)
    return sorted(cuts)


# serve_forever checks for shutdown() every poll_interval (0.5 s by default): each stop of a
# threaded test server cost half a second of idle waiting.
STOP_POLL_S = 0.01


def serve_in_thread(server: socketserver.BaseServer) -> threading.Thread:
    """Serve ``server`` from a daemon thread that ``server.shutdown()`` stops at once."""
    thread = threading.Thread(target=server.serve_forever, args=(STOP_POLL_S,), daemon=True)
    thread.start()
    return thread


class Listener:
    """A loopback HTTP server that records every request it receives."""

    def __init__(self) -> None:
        hits = self.hits = list[str]()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"type": "string"}')

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        serve_in_thread(self.server)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
