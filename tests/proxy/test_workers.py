"""``gradeproxy serve --workers N``: real processes, one shared port, real signals.

The kernel picks the worker of each connection (SO_REUSEPORT), so no test asserts which worker
served what: sums over every worker's admin port and every worker's result file are exact.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp.test_utils import TestServer

from gradeproxy.cli._io import expand_globs
from gradeproxy.cli.parquet import with_rotations
from grader.json import loads_exact
from proxy.pipeline.record.results import worker_path
from proxy.supervisor import MAX_RESTARTS
from tests.support.backend import SSE, Reply, ScriptedBackend, wire
from tests.support.tasks import TASK_LINES
from tests.support.tasks import WEATHER_REQUEST as REQUEST
from tests.support.workers import WAIT_S, Supervised, free_ports, supervised, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
TAGGED = {"X-Grade-Task": "weather.single"}
Server = Callable[..., Awaitable[TestServer]]


def rows_in(folder: Path) -> dict[str, list[dict[str, object]]]:
    return {
        path.name: [loads_exact(line) for line in path.read_text().splitlines()]
        for path in sorted(folder.iterdir())
    }


@pytest.mark.parametrize(
    ("path", "index", "expected"),
    [
        ("results/grades.jsonl", 0, "results/grades.w0.jsonl"),
        ("results/grades.jsonl", 11, "results/grades.w11.jsonl"),
        ("grades", 1, "grades.w1"),
        ("/var/lib/gp/pod-a.rows.jsonl", 2, "/var/lib/gp/pod-a.rows.w2.jsonl"),
    ],
)
def test_worker_result_file_names(path: str, index: int, expected: str) -> None:
    assert worker_path(Path(path), index) == Path(expected)


async def test_workers_share_the_port_and_each_writes_its_own_file(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    sent = 12
    rotating = "  max_bytes: 1024\n  backups: 50\n"  # a row or two a file: rotations galore
    async with supervised(
        tmp_path, str(upstream.make_url("/v1")), tasks_file, results_options=rotating
    ) as run:
        for _ in range(sent):  # a client each: new connections, spread by the kernel
            async with openai.AsyncOpenAI(
                base_url=f"{run.base}/v1", api_key="sk-test", max_retries=0
            ) as client:
                answer = await client.chat.completions.create(extra_headers=TAGGED, **REQUEST)
            assert answer.choices[0].message.tool_calls is not None
        await wait_until(
            lambda: _equals(run.total("gradeproxy_grades_total"), sent), "every row graded"
        )
        assert await run.total("gradeproxy_requests_total", code="200") == sent
        for index in range(2):  # either worker's page shows the whole proxy, however spread

            async def whole(i: int = index) -> dict[str, Any] | None:
                board = await run.board(i)
                return board if board["rows_written"] == sent else None

            board = await wait_until(whole, f"worker {index}'s page counts every row")
            assert board["workers"] == {"count": 2, "missing": [], "restarts": 0, "rows_lost": 0}
            totals = [(t["variant"], t["graded"], t["pass"]) for t in board["totals"]]
            assert totals == [("primary", sent, sent)]
        run.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 0
    files = rows_in(run.results.parent)
    assert {"grades.w0.jsonl", "grades.w1.jsonl"} <= set(files)
    assert all(re.fullmatch(r"grades\.w[01]\.jsonl(\.\d+)?", name) for name in files), files
    assert any(name.endswith(".jsonl.1") for name in files)  # each rotates its own file
    rows = [row for found in files.values() for row in found]
    assert [(r["task_id"], r["result"]) for r in rows] == [("weather.single", "pass")] * sent
    # What the offline commands read for a quoted glob: every worker's file and its rotations.
    read = with_rotations(expand_globs([run.results.parent / "grades.w*.jsonl"]))
    assert sorted(p.name for p in read if isinstance(p, Path)) == sorted(files)


async def test_port_0_is_one_free_port_for_every_worker(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file, port=0) as run:
        assert run.port != 0
        listening = [e["url"] for e in run.events if e.get("event") == "listening"]
        assert listening == [f"{run.base}/v1"] * 2
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{run.base}/v1/chat/completions", data=b"{}", headers=TAGGED) as answer,
        ):
            assert answer.status == 200
        run.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 0


async def test_sighup_reloads_the_task_set_of_every_worker(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file) as run:
        for index in range(2):
            assert await run.samples(index, "gradeproxy_tasks_loaded") == {(): len(TASK_LINES)}
        await asyncio.to_thread(tasks_file.write_bytes, TASK_LINES[0] + b"\n")
        run.process.send_signal(signal.SIGHUP)
        for index in range(2):

            async def reloaded(i: int = index) -> bool:
                return await run.samples(i, "gradeproxy_tasks_loaded") == {(): 1.0}

            await wait_until(reloaded, f"worker {index} reloaded")
        run.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 0


async def test_sigterm_drains_every_worker_and_finishes_the_stream_in_flight(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    body = wire("openai_single_tool.sse")
    gate = asyncio.Event()  # the stream waits after its first chunk until the drain began
    backend.replies.append(Reply(body=body, content_type=SSE, split_at=[60], gate=gate))
    async with (
        supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file) as run,
        aiohttp.ClientSession() as session,
        session.post(f"{run.base}/v1/chat/completions", data=b"{}", headers=TAGGED) as response,
    ):
        first = await response.content.readexactly(60)
        run.process.send_signal(signal.SIGTERM)
        for index in range(2):
            await run.wait_event("draining", worker=index)
        gate.set()
        assert first + await response.read() == body
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 0
        for index in range(2):
            assert run.event("stopped", worker=index) is not None
    rows = [row for found in rows_in(run.results.parent).values() for row in found]
    assert [(r["task_id"], r["result"]) for r in rows] == [("weather.single", "pass")]


@pytest.mark.slow
async def test_a_worker_that_dies_is_restarted_on_its_own_admin_port(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file) as run:
        ready = run.event("workers_ready")
        assert ready is not None
        victim = ready["pids"][1]
        os.kill(victim, signal.SIGSTOP)  # a worker that does not answer is named, not zero
        try:
            board = await run.board(0)
        finally:
            os.kill(victim, signal.SIGCONT)
        assert board["workers"] == {"count": 2, "missing": [1], "restarts": 0, "rows_lost": 0}
        await asyncio.to_thread(_kill, victim)
        restarted = await run.wait_event("worker_restarted", worker=1)
        assert restarted["exitcode"] == -signal.SIGKILL
        await run.wait_status(1, 200)
        async with aiohttp.ClientSession() as session:
            for _ in range(4):
                async with session.post(
                    f"{run.base}/v1/chat/completions", data=b"{}", headers=TAGGED
                ) as response:
                    assert response.status == 200
        run.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 0


def _restarted(run: Supervised, times: int) -> bool:
    return sum(1 for event in run.events if event.get("event") == "worker_restarted") == times


async def _pid_of(run: Supervised, index: int) -> int:
    """Worker ``index``'s pid, as its own admin port reports it (it changes on a restart)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{run.admin(index)}/ui/failures.json") as response,
    ):
        pid: int = (await response.json())["process"]["pid"]
    return pid


@pytest.mark.slow
async def test_a_worker_that_keeps_dying_stops_the_supervisor_after_max_restarts(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    """Restarts are bounded (MAX_RESTARTS within RESTART_WINDOW_S): a worker that crashes in a
    loop ends the whole service with status 1, for systemd or Kubernetes to see, instead of
    restarting forever."""
    upstream = await aiohttp_server(backend.app())
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file) as run:
        await run.wait_status(1, 200)
        for death in range(MAX_RESTARTS + 1):
            pid = await _pid_of(run, 1)
            await asyncio.to_thread(_kill, pid)
            if death < MAX_RESTARTS:
                await wait_until(partial(_restarted, run, death + 1), f"restart {death + 1}")
                await run.wait_status(1, 200)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 1
        failing = await run.wait_event("workers_failing", worker=1)
        assert failing["restarts"] == MAX_RESTARTS
        await run.wait_status(0, None)  # the other worker was stopped too


@pytest.mark.slow
async def test_a_worker_that_does_not_drain_in_time_is_killed_and_the_exit_says_so(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    short = "shutdown:\n  drain_delay_s: 0\n  grace_period_s: 1\n"
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file, extra=short) as run:
        ready = run.event("workers_ready")
        assert ready is not None
        stuck = ready["pids"][0]
        os.kill(stuck, signal.SIGSTOP)  # a stopped process cannot drain: only a kill ends it
        run.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 1
        killed = await run.wait_event("worker_killed")
        assert killed["worker"] == 0
        assert run.event("stopped", worker=1) is not None


@pytest.mark.parametrize("taken", ["traffic", "admin"])
async def test_a_port_taken_fails_start_up_in_one_line(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server, taken: str
) -> None:
    upstream = await aiohttp_server(backend.app())
    port, admin = free_ports(1), free_ports(2)
    busy = port if taken == "traffic" else admin + 1
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", busy))
        holder.listen()
        async with supervised(
            tmp_path, str(upstream.make_url("/v1")), tasks_file, port, admin, wait_ready=False
        ) as run:
            assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 1
    worker = "" if taken == "traffic" else "worker 1: "
    lines = run.stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"gradeproxy serve: {worker}cannot listen on http://127.0.0.1:{busy}"
    )


async def test_workers_drain_themselves_when_the_supervisor_is_killed(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file) as run:
        run.process.kill()
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == -signal.SIGKILL
        for index in range(2):
            await run.wait_event("stopped", worker=index)
            await run.wait_status(index, None)


@pytest.mark.parametrize(
    ("presses", "status", "said"),
    [
        pytest.param(1, 0, b"stopping every worker", id="first_skips_the_drain_delay"),
        pytest.param(2, 130, b"second Ctrl-C, exiting now", id="second_exits_at_once"),
    ],
)
async def test_ctrl_c_reaches_every_worker_once(
    tmp_path: Path,
    tasks_file: Path,
    backend: ScriptedBackend,
    aiohttp_server: Server,
    presses: int,
    status: int,
    said: bytes,
) -> None:
    upstream = await aiohttp_server(backend.app())
    gate = asyncio.Event()  # never set: the stream hangs after its first chunk
    body = wire("openai_single_tool.sse")
    backend.replies.append(Reply(body=body, content_type=SSE, split_at=[60], gate=gate))
    long = "shutdown:\n  drain_delay_s: 600\n  grace_period_s: 600\n"  # never slept through
    async with (
        supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file, extra=long) as run,
        aiohttp.ClientSession() as session,
    ):
        if presses == 2:  # a stream that never ends keeps its worker draining
            response = await session.post(
                f"{run.base}/v1/chat/completions", data=b"{}", headers=TAGGED
            )
            await response.content.readexactly(60)
        run.process.send_signal(signal.SIGINT)
        if presses == 2:
            for index in range(2):
                await run.wait_event("draining", worker=index)
            run.process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == status
        for index in range(2):
            await run.wait_status(index, None)
        gate.set()
    assert said in run.stderr


async def _equals(value: Awaitable[object], expected: object) -> bool:
    return await value == expected


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
