"""A response that reached the client whole is graded, whatever the client does next.

The openai SDK closes its connection as soon as it reads ``data: [DONE]``; some upstreams end
their body only later (llama.cpp's server, a proxy in front of vLLM). A stream is "answered"
when ``[DONE]`` was relayed, or when every requested choice relayed its ``finish_reason``
(servers that never send ``[DONE]``; a trailing ``include_usage`` chunk is not part of the
answer). Only a client that leaves before that is ``client_disconnected``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from grader.json import dumps
from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of

Client = TestClient[web.Request, web.Application]


def events(fixture: str) -> list[bytes]:
    """The SSE events of a recorded stream, each with its blank-line terminator."""
    return [part + b"\n\n" for part in wire(fixture).split(b"\n\n") if part.strip()]


def has_finish(event: bytes) -> bool:
    return b'"finish_reason":"' in event


@dataclass(frozen=True)
class Case:
    """A stream the backend sends in two parts, and when the client closes."""

    id: str
    fixture: str
    # Which events the backend sends before it pauses (the rest follows after the client left).
    first: Callable[[list[bytes]], list[bytes]]
    rest: Callable[[list[bytes]], list[bytes]]
    n: int | None
    graded: bool


def _upto_done(evs: list[bytes]) -> list[bytes]:
    return evs


def _without_done(evs: list[bytes]) -> list[bytes]:
    return [e for e in evs if not e.startswith(b"data: [DONE]")]


def _through_first_finish(evs: list[bytes]) -> list[bytes]:
    at = next(i for i, e in enumerate(evs) if has_finish(e))
    return evs[: at + 1]


def _after_first_finish(evs: list[bytes]) -> list[bytes]:
    at = next(i for i, e in enumerate(evs) if has_finish(e))
    return evs[at + 1 :]


def _before_first_finish(evs: list[bytes]) -> list[bytes]:
    at = next(i for i, e in enumerate(evs) if has_finish(e))
    return evs[:at]


def _from_first_finish(evs: list[bytes]) -> list[bytes]:
    at = next(i for i, e in enumerate(evs) if has_finish(e))
    return evs[at:]


def _nothing(evs: list[bytes]) -> list[bytes]:
    return []


CASES = [
    Case(
        "done_relayed_upstream_lingers", "openai_single_tool.sse", _upto_done, _nothing, None, True
    ),
    Case(
        "every_finish_reason_relayed_no_done",
        "openai_single_tool.sse",
        _without_done,
        _nothing,
        None,
        True,
    ),
    Case(
        "include_usage_client_leaves_before_usage_chunk",
        "openai_single_tool.sse",
        _through_first_finish,
        _after_first_finish,
        None,
        True,
    ),
    Case(
        "client_leaves_before_finish_reason",
        "openai_single_tool.sse",
        _before_first_finish,
        _from_first_finish,
        None,
        False,
    ),
    Case("n2_both_choices_and_done", "vllm_n2_text.sse", _upto_done, _nothing, 2, True),
    Case("n2_both_finished_no_done", "vllm_n2_text.sse", _without_done, _nothing, 2, True),
    Case(
        "n2_only_one_choice_finished",
        "vllm_n2_text.sse",
        _through_first_finish,
        _after_first_finish,
        2,
        False,
    ),
]


async def _read_then_close(client: Client, body: bytes, expect: int) -> None:
    """Read ``expect`` events of the relayed stream, then close the connection."""
    response = await client.post(
        "/v1/chat/completions", data=body, headers={"X-Grade-Task": "weather.single"}
    )
    assert response.status == 200
    for _ in range(expect):
        await response.content.readuntil(b"\n\n")
    response.close()


async def _wait_for(client: Client, predicate: Callable[[str], bool]) -> str:
    text = ""
    for _ in range(200):
        text = await (await client.get("/metrics")).text()
        if predicate(text):
            return text
        await asyncio.sleep(0.02)
    return text


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_answered_stream_is_graded_when_the_client_leaves(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path, case: Case
) -> None:
    evs = events(case.fixture)
    first, rest = case.first(evs), case.rest(evs)
    gate = asyncio.Event()
    head = b"".join(first)
    backend.replies.append(
        Reply(
            body=head + b"".join(rest),
            content_type=SSE,
            split_at=[len(head)] if rest else [],
            gate=gate if rest else None,
            tail_pause_s=0.0 if rest else 0.4,  # the upstream ends its body after the client left
        )
    )
    client = await make_proxy()
    request = {"model": "m", "stream": True, **({"n": case.n} if case.n else {})}
    await _read_then_close(client, dumps(request), len(first))
    await asyncio.sleep(0.05)
    gate.set()

    def settled(text: str) -> bool:
        graded = metric_value(text, "gradeproxy_grades_total") > 0
        left = metric_value(text, "gradeproxy_grading_skipped_total", reason="client_disconnected")
        return graded or left > 0

    metrics = await _wait_for(client, settled)
    rows = await rows_of(client, results_path)
    left = metric_value(metrics, "gradeproxy_grading_skipped_total", reason="client_disconnected")
    if case.graded:
        assert left == 0
        assert len(rows) == (case.n or 1)
        assert {r["task_id"] for r in rows} == {"weather.single"}
    else:
        assert left == 1
        assert rows == []


@pytest.mark.parametrize(
    ("cut", "graded"),
    [("after_completed", True), ("before_completed", False)],
    ids=["completed_relayed_upstream_lingers", "client_leaves_before_completed"],
)
async def test_responses_stream_is_graded_once_its_terminal_event_was_relayed(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    cut: str,
    graded: bool,
) -> None:
    evs = events("openai_responses_single_tool.sse")
    at = next(i for i, e in enumerate(evs) if b"response.completed" in e)
    first = evs if cut == "after_completed" else evs[:at]
    rest = [] if cut == "after_completed" else evs[at:]
    gate = asyncio.Event()
    head = b"".join(first)
    backend.replies.append(
        Reply(
            body=head + b"".join(rest),
            content_type=SSE,
            split_at=[len(head)] if rest else [],
            gate=gate if rest else None,
            tail_pause_s=0.0 if rest else 0.4,
        )
    )
    client = await make_proxy()
    response = await client.post(
        "/v1/responses",
        data=dumps({"model": "m", "stream": True}),
        headers={"X-Grade-Task": "weather.single"},
    )
    for _ in range(len(first)):
        await response.content.readuntil(b"\n\n")
    response.close()
    await asyncio.sleep(0.05)
    gate.set()

    def settled(text: str) -> bool:
        left = metric_value(text, "gradeproxy_grading_skipped_total", reason="client_disconnected")
        return metric_value(text, "gradeproxy_grades_total") > 0 or left > 0

    await _wait_for(client, settled)
    rows = await rows_of(client, results_path)
    assert [r["result"] for r in rows] == (["pass"] if graded else [])
