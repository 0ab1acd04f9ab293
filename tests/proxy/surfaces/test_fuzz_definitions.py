"""Fuzzing the scoring API with task and check definitions a caller controls.

Whatever a caller posts to ``/grading/v1/graders/run``, ``/graders/validate`` and ``/score`` —
definitions of every check type with arbitrary keys and values, lone surrogates, huge numbers,
odd indices, hostile patterns and references — the answer is a verdict or a 4xx in OpenAI's
error shape, never a 500, and the server keeps answering. The server is a real aiohttp app on a
loopback socket, in a thread of its own, so hypothesis drives plain blocking requests.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.json import dumps
from proxy.surfaces.scoring_http import PREFIX, add_scoring_routes

CHECK_TYPES = [
    "string_check",
    "text_similarity",
    "tool_call",
    "json_schema",
    "policy",
    "multi",
    "label_model",
    "score_model",
    "python",
    "nonsense",
]
KEYS = [
    "name",
    "operation",
    "input",
    "reference",
    "evaluation_metric",
    "pass_threshold",
    "schema",
    "acceptable",
    "optional",
    "parallel",
    "allowed_actions",
    "graders",
    "calculate_output",
    "model",
    "criterion",
    "pattern",
    "$ref",
]
TEXT = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)
HOSTILE = st.sampled_from(
    [
        "^(a+)+$",
        "(a)\\1",
        "{{ sample.output_tools[99999999999999999999].function }}",
        "{{ item." + "a." * 200 + "b }}",
        "http://127.0.0.1:9/schema.json",
        "file:///etc/passwd",
        "from_request",
        "\ud800",
        "1e400",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
    | HOSTILE
)
VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | TEXT, children, max_size=4)
    ),
    max_leaves=10,
)
DEFINITIONS = st.fixed_dictionaries(
    {"type": st.sampled_from(CHECK_TYPES)},
    optional=dict.fromkeys(KEYS, VALUES),
)


class Server:
    """The scoring routes on a loopback port, served from a thread's own event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        assert self.ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        add_scoring_routes(app, max_batch=8)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self.ready.set()
        self.loop.run_forever()

    def post(self, path: str, body: bytes) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, json.loads(response.read())
        finally:
            connection.close()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server()
    yield running
    running.close()


def assert_answered(status: int, body: Any) -> None:
    assert status in (200, 400, 413), (status, body)
    if status != 200:
        error = body["error"]
        assert isinstance(error["message"], str)
        assert error["type"] == "invalid_request_error"


FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(definition=DEFINITIONS, sample=TEXT | HOSTILE, item=VALUES)
def test_graders_run_answers_every_definition(
    server: Server, definition: dict[str, Any], sample: str, item: Any
) -> None:
    body = dumps({"grader": definition, "model_sample": sample, "item": item})
    assert_answered(*server.post(f"{PREFIX}/graders/run", body))
    assert_answered(*server.post(f"{PREFIX}/graders/validate", dumps({"grader": definition})))


@FUZZ
@given(
    checks=st.lists(DEFINITIONS, max_size=3),
    expected=VALUES,
    extra=st.dictionaries(st.sampled_from(["item", "pass_rule", "metadata", "tools"]), VALUES),
    answer=TEXT | HOSTILE | VALUES,
)
def test_score_answers_every_inline_task(
    server: Server, checks: list[Any], expected: Any, extra: dict[str, Any], answer: Any
) -> None:
    task = {"id": "fuzz", "expected": expected, "checks": checks, **extra}
    assert_answered(*server.post(f"{PREFIX}/score", dumps({"task": task, "answer": answer})))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"grader": {"type": "string_check", "name": "\\ud800"}, "model_sample": "x"}',
        b'{"grader": {"type": "json_schema", "name": "s", "schema": {"maxLength": 1e400}}}',
        b"\xff\xfe not utf-8",
        b'{"grader": ' * 5000,
        b"[]",
    ],
    ids=["lone_surrogate_name", "overflowing_number", "not_utf8", "deep_nesting", "array_body"],
)
def test_raw_bodies_are_request_errors_or_verdicts(server: Server, raw: bytes) -> None:
    assert_answered(*server.post(f"{PREFIX}/graders/run", raw))
