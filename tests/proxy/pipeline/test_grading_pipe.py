"""The pipe to the grading process: bodies cross as raw frames, rows come back reduced.

A body is cut into slices the event loop writes one at a time (``proxy.pipeline.child.frame``)
and a job's rows come back as JSONL pieces with their counts (``Recording``). What must hold:
the frames carry the bytes exactly, in order; large and many-choice responses grade to the same
rows and the same metrics as in the grading thread; and a child killed with a frame half
written leaves nothing half-read for the next one.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.collector import GC_YOUNG_THRESHOLD
from grader.json import dumps
from proxy.pipeline import child
from proxy.pipeline.child import HEADER, frames
from proxy.pipeline.offload import GradingProcess
from proxy.state import QUEUE, TASKS
from tests.support.backend import Reply, ScriptedBackend, wire
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.workers import wait_until

TAGGED = {"X-Grade-Task": "weather.single"}
CALL = wire("openai_single_tool.json")


BODIES = st.lists(st.lists(st.binary(max_size=40), max_size=12), min_size=1, max_size=5)


@given(bodies=BODIES, cut=st.integers(1, 32))
def test_frames_are_their_parts_behind_their_lengths_in_bounded_pieces(
    bodies: list[list[bytes]], cut: int
) -> None:
    old = child.SLICE_BYTES
    child.SLICE_BYTES = cut
    try:
        pieces = frames(bodies)
    finally:
        child.SLICE_BYTES = old
    data = b"".join(bytes(piece) for piece in pieces)
    assert data == b"".join(HEADER.pack(sum(map(len, b))) + b"".join(b) for b in bodies)
    assert all(0 < len(piece) < 2 * max(cut, HEADER.size) for piece in pieces)


def test_a_batch_of_small_jobs_is_one_write() -> None:
    assert len(frames([[b"message"], [CALL], [CALL, CALL]])) == 1


def choices(count: int) -> bytes:
    """The recorded tool-call answer, ``count`` times (``n`` > 1)."""
    body: dict[str, Any] = orjson.loads(CALL)
    one = body["choices"][0]
    body["choices"] = [{**one, "index": n} for n in range(count)]
    return dumps(body)


def long_text(chars: int) -> bytes:
    """A text answer of ``chars`` characters with the call's JSON at its end."""
    call = {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}
    content = "Let me think. " * (chars // 14) + dumps(call).decode()
    message = {"role": "assistant", "content": content}
    return dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


def many_chunks(count: int) -> bytes:
    """A stream whose call's arguments arrive one character a chunk, ``count`` chunks long."""
    head = {"id": "s", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + dumps(chunk) + b"\n\n"

    arguments = '{"city": "Zürich", "unit": "celsius"' + " " * count + "}"
    call = {"index": 0, "id": "call_1", "type": "function"}
    out = [
        event(
            {
                "role": "assistant",
                "tool_calls": [{**call, "function": {"name": "get_weather", "arguments": ""}}],
            }
        )
    ]
    out += [
        event({"tool_calls": [{"index": 0, "function": {"arguments": ch}}]}) for ch in arguments
    ]
    out.append(event({}, "tool_calls"))
    return b"".join(out) + b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    ("body", "content_type", "rows_wanted"),
    [
        pytest.param(choices(300), "application/json", 300, id="three_hundred_choices"),
        pytest.param(long_text(3_000_000), "application/json", 1, id="a_3_MB_answer"),
        pytest.param(many_chunks(3000), "text/event-stream", 1, id="a_stream_of_3000_chunks"),
    ],
)
async def test_large_responses_grade_the_same_in_the_process_as_in_the_thread(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    results_path: Path,
    body: bytes,
    content_type: str,
    rows_wanted: int,
) -> None:
    seen: dict[str, tuple[list[dict[str, Any]], list[float]]] = {}
    for isolation in ("thread", "process"):
        backend.replies.append(Reply(body=body, content_type=content_type))
        client = await make_proxy(grading={"isolation": isolation, "inline_max_bytes": 0})
        response = await client.post("/v1/chat/completions", data=b"{}", headers=TAGGED)
        assert await response.read() == body  # relayed as sent, whatever grading does
        rows = (await rows_of(client, results_path))[-rows_wanted:]
        text = await (await client.get("/metrics")).text()
        counts = [
            metric_value(text, "gradeproxy_grades_total", result="pass"),
            metric_value(text, "gradeproxy_check_results_total", result="pass"),
            metric_value(text, "gradeproxy_grading_errors_total"),
        ]
        seen[isolation] = (rows, counts)
        await client.close()
        await asyncio.to_thread(results_path.unlink)
    varying = {"request_id", "row_id", "time", "timings"}
    (thread_rows, thread_counts), (process_rows, process_counts) = seen.values()
    assert len(process_rows) == rows_wanted
    assert all(row["result"] == "pass" for row in process_rows)
    assert [{k: v for k, v in r.items() if k not in varying} for r in thread_rows] == [
        {k: v for k, v in r.items() if k not in varying} for r in process_rows
    ]
    assert thread_counts == process_counts == [rows_wanted, rows_wanted, 0]


async def test_a_child_killed_with_a_frame_half_written_leaves_the_next_child_a_clean_pipe(
    make_proxy: ProxyFactory, backend: ScriptedBackend, results_path: Path
) -> None:
    client = await make_proxy(grading={"inline_max_bytes": 0})
    process = client.app[QUEUE].process
    assert isinstance(process, GradingProcess)
    await wait_until(lambda: process.up, "the child up")
    first = process.pid
    assert first is not None
    os.kill(first, signal.SIGSTOP)  # it reads nothing: the big frame stays half written
    backend.replies.append(Reply(body=long_text(8_000_000)))
    response = await client.post("/v1/chat/completions", data=b"{}", headers=TAGGED)
    await response.read()
    await wait_until(lambda: bool(process._out), "a frame waiting behind a full pipe")
    os.kill(first, signal.SIGKILL)
    await wait_until(lambda: process.up and process.pid != first, "a new child")
    backend.replies.append(Reply(body=CALL))
    await client.post("/v1/chat/completions", data=b"{}", headers=TAGGED)
    rows = await rows_of(client, results_path)
    assert [row["result"] for row in rows] == ["pass"]  # the new child read whole frames
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grading_errors_total", kind="grader_process") == 1


async def test_the_grading_process_keeps_its_long_lived_heap_frozen(
    make_proxy: ProxyFactory, tasks_file: Path
) -> None:
    """Like the proxy's process: full collections never walk the modules and task sets again,
    and a reload freezes the new set too."""
    client = await make_proxy()
    process = client.app[QUEUE].process
    assert isinstance(process, GradingProcess)
    await wait_until(lambda: process.up, "the child up")
    frozen = await process.call(gc.get_freeze_count)
    assert frozen > 10_000  # the grader's modules, at least
    assert (await process.call(gc.get_threshold))[0] == GC_YOUNG_THRESHOLD
    store = client.app[TASKS]
    with tasks_file.open("ab") as out:
        out.write(b'{"id":"later","expected":{"name":"f","arguments":{}}}\n')
    assert await store.reload()
    assert store.current is not None
    digest = store.current.digest
    await wait_until(lambda: process.holds(digest), "the new set in the child")
    assert await process.call(gc.get_freeze_count) > frozen
