"""Processes the proxy benchmark starts: a fast fake backend and a minimal pass-through.

Run as ``python bench/_servers.py backend PORT`` or ``python bench/_servers.py passthrough PORT
UPSTREAM [reuse_port]`` (several pass-throughs on one port: the floor for N workers).
The pass-through is the baseline: the least an aiohttp reverse proxy can do (read the body,
forward it, relay the answer), with no header hygiene, metrics or grading.
``passthrough-pool`` is the same relay with gradeproxy's upstream client
(proxy/pipeline/upstream/) in place of aiohttp's ``ClientSession``: bench/upstream_bench.py
compares the two clients alone.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import aiohttp
from aiohttp import web

CALL_BODY = (
    b'{"id":"chatcmpl-bench","object":"chat.completion","created":1746900990,"model":"bench-model",'
    b'"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1",'
    b'"type":"function","function":{"name":"get_weather","arguments":"{\\"city\\":\\"Zurich\\",'
    b'\\"unit\\":\\"celsius\\"}"}}]},"finish_reason":"tool_calls"}],'
    b'"usage":{"prompt_tokens":80,"completion_tokens":20,"total_tokens":100}}'
)
STREAM_FIRST = (
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1746900990,'
    b'"model":"bench-model","choices":[{"index":0,"delta":{"role":"assistant","content":null,'
    b'"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather",'
    b'"arguments":""}}]},"finish_reason":null}]}\n\n'
)
STREAM_REST = [
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1746900990,'
    b'"model":"bench-model","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":'
    b'{"arguments":"' + part + b'"}}]},"finish_reason":null}]}\n\n'
    for part in (b'{\\"city\\":', b'\\"Zurich\\",', b'\\"unit\\":', b'\\"celsius\\"}')
] + [
    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1746900990,'
    b'"model":"bench-model","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}\n\n',
    b"data: [DONE]\n\n",
]
STREAM_PAUSE_S = 0.02  # after the first chunk: a chunk held back by a proxy would show in TTFB


async def backend(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    if b'"stream":true' not in body:
        return web.Response(body=CALL_BODY, content_type="application/json")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(STREAM_FIRST)
    await asyncio.sleep(STREAM_PAUSE_S)
    for chunk in STREAM_REST:
        await response.write(chunk)
    await response.write_eof()
    return response


def passthrough_app(upstream: str) -> web.Application:
    session: aiohttp.ClientSession | None = None

    async def start(app: web.Application) -> None:
        nonlocal session
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))

    async def stop(app: web.Application) -> None:
        assert session is not None
        await session.close()

    async def handle(request: web.Request) -> web.StreamResponse:
        assert session is not None
        body = await request.read()
        async with session.request(
            request.method,
            upstream + request.path_qs[3:],
            data=body,
            headers={"Content-Type": "application/json"},
        ) as up:
            if up.content_type != "text/event-stream":
                return web.Response(
                    status=up.status, body=await up.read(), content_type=up.content_type
                )
            response = web.StreamResponse(
                status=up.status, headers={"Content-Type": "text/event-stream"}
            )
            await response.prepare(request)
            async for chunk in up.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("*", "/v1/{tail:.*}", handle)
    return app


def pool_passthrough_app(upstream: str) -> web.Application:
    from multidict import CIMultiDict

    from proxy.pipeline.upstream import Origin, Timeouts, UpstreamPool

    origin, timeouts = Origin.of(upstream), Timeouts(connect_s=10, idle_s=300)
    pools: list[UpstreamPool] = []

    async def start(app: web.Application) -> None:
        pools.append(UpstreamPool(300))

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = CIMultiDict({"Content-Type": "application/json"})
        path = origin.base_path + request.path_qs[3:]
        up = await pools[0].request(request.method, origin, path, headers, body, timeouts)
        try:
            if up.content_type != "text/event-stream":
                data = await up.read()
                return web.Response(status=up.status, body=data, content_type=up.content_type)
            response = web.StreamResponse(
                status=up.status, headers={"Content-Type": "text/event-stream"}
            )
            await response.prepare(request)
            while chunk := await up.chunk():
                await response.write(chunk)
            await response.write_eof()
            return response
        finally:
            up.close()

    app = web.Application()
    app.on_startup.append(start)
    app.router.add_route("*", "/v1/{tail:.*}", handle)
    return app


def main() -> None:
    kind, port = sys.argv[1], int(sys.argv[2])
    if kind == "backend":
        app = web.Application()
        app.router.add_route("*", "/v1/{tail:.*}", backend)
    elif kind == "passthrough-pool":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        app = pool_passthrough_app(sys.argv[3])
    else:
        app = passthrough_app(sys.argv[3])
    reuse = sys.argv[4:] == ["reuse_port"]
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, reuse_port=reuse)


if __name__ == "__main__":
    main()
