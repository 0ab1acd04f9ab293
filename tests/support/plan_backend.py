"""A backend that answers from what the request asks, so two upstreams can be told apart.

The last user message is a *plan*, ``{"primary": "pass", "shadow": "stale"}``: each
:class:`PlanBackend` answers the ``weather.single`` task with the result its own ``name`` is
planned to get, in the wire format the request asks for (SSE when ``"stream": true``, else one
JSON body), so a mixed-up pair shows as a wrong pair outcome. It records every request and the
exact bytes it sent back.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from grader.json import dumps, loads_exact
from tests.support import responses_wire as rw

Mode = Literal["plan", "garbage", "status_500", "gated", "empty"]
SSE = "text/event-stream"

# weather.single expects {"city": "Zürich", "unit": "celsius"}; its stale call uses "units": "C".
ARGUMENTS = {
    "pass": {"city": "Zürich", "unit": "celsius"},
    "stale": {"city": "Zürich", "units": "C"},
    "fail": {"city": "Bern", "unit": "celsius"},
}


def plan_request(
    primary: str, shadow: str, *, stream: bool = False, model: str = "prod-model", **extra: Any
) -> bytes:
    """A chat-completions request body carrying the plan for both legs."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": dumps({"primary": primary, "shadow": shadow})
                      .decode()}],
        **extra,
    }  # fmt: skip
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": False}
    return dumps(body)


def plan_responses_request(primary: str, shadow: str, *, stream: bool = False) -> bytes:
    """The same plan as a Responses API (``/v1/responses``) request body."""
    plan = dumps({"primary": primary, "shadow": shadow}).decode()
    body: dict[str, Any] = {"model": "prod-model", "input": [{"role": "user", "content": plan}]}
    if stream:
        body["stream"] = True
    return dumps(body)


def completion_json(model: str, arguments: str) -> bytes:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": arguments}}  # fmt: skip
    return dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    "finish_reason": "tool_calls",
                }
            ],
        }
    )


def completion_sse(model: str, arguments: str) -> bytes:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        event = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
        return b"data: " + dumps(event) + b"\n\n"

    first = {"index": 0, "id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": ""}}  # fmt: skip
    half = len(arguments) // 2
    return b"".join(
        [
            chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[:half]}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]}),
            chunk({}, "tool_calls"),
            b"data: [DONE]\n\n",
        ]
    )


@dataclass
class Received:
    headers: CIMultiDictProxy[str]
    body: bytes


@dataclass
class PlanBackend:
    """An upstream named ``primary`` or ``shadow``; see the module docstring."""

    name: str
    mode: Mode = "plan"
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    received: asyncio.Event = field(default_factory=asyncio.Event)  # set at the first request
    seen: list[Received] = field(default_factory=list)
    sent: list[bytes] = field(default_factory=list)
    order: int = 0  # with `stagger`, answers are delayed by the request number mod 5 ticks
    stagger: bool = False

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/responses", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Received(CIMultiDictProxy(CIMultiDict(request.headers)), body))
        self.received.set()
        number = self.order
        self.order += 1
        if self.stagger:  # shuffle completion order between the two legs (no timing assumed)
            for _ in range(number % 5 if self.name == "primary" else 4 - number % 5):
                await asyncio.sleep(0)
        if self.mode == "gated":
            await self.gate.wait()
        if self.mode == "garbage":
            return self._sent(web.Response(body=b"\x00not json{", content_type="application/json"))
        if self.mode == "status_500":
            return self._sent(web.Response(status=500, body=b'{"error":{"message":"down"}}'))
        if self.mode == "empty":
            return self._sent(web.Response(body=b"", content_type="application/json"))
        payload = loads_exact(body.decode())
        responses = request.path == "/v1/responses"
        plan = loads_exact(payload["input" if responses else "messages"][-1]["content"])
        arguments = dumps(ARGUMENTS[plan[self.name]]).decode()
        model = payload.get("model", "unknown")
        case = rw.Case(self.name, (rw.Call("get_weather", arguments, "call_1", "fc_1"),))
        if payload.get("stream") is True:
            data = rw.stream(case) if responses else completion_sse(model, arguments)
            self.sent.append(data)
            response = web.StreamResponse(headers={"Content-Type": SSE})
            await response.prepare(request)
            for cut in range(0, len(data), 50):
                await response.write(data[cut : cut + 50])
            await response.write_eof()
            return response
        data = rw.body(case) if responses else completion_json(model, arguments)
        return self._sent(web.Response(body=data, content_type="application/json"))

    def _sent(self, response: web.Response) -> web.Response:
        assert isinstance(response.body, bytes)
        self.sent.append(response.body)
        return response
