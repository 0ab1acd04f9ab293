"""``--workers``: a worker killed under load loses no row without a count, and is restarted.

Red team, round 3: SIGKILL of one worker under load left 31 answered requests without a row,
and the live page forgot the dead worker's counts. A worker answers first and grades after, so
a killed worker loses the jobs it had not settled (docs/operations.md, "A dead worker"): here
its grading is frozen (SIGSTOP of its grading process) so it holds such jobs for certain, then
it is killed with SIGKILL while requests keep arriving. Every answered request must then be a
row or a job counted in ``gradeproxy_worker_rows_lost_total`` (and on the live page), the slot
restarted, and the whole proxy drained cleanly at SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tests.support.backend import ScriptedBackend
from tests.support.workers import WAIT_S, supervised

Server = Callable[..., Awaitable[TestServer]]
TAGGED = {"X-Grade-Task": "weather.single"}
# Every job goes to the grading process (none graded inline), which the test can freeze.
EXTRA = "grading:\n  inline_max_bytes: 0\nshutdown:\n  drain_delay_s: 0.2\n  grace_period_s: 20\n"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its grading process is a grandchild: the fork server's)."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{parent}/task"):
                with open(f"/proc/{parent}/task/{task}/children") as children:
                    kids = [int(kid) for kid in children.read().split()]
                found += kids
                stack += kids
    return found


def rows_in(folder: Path) -> int:
    return sum(len(path.read_text().splitlines()) for path in folder.glob("grades.w*.jsonl*"))


@pytest.mark.slow
async def test_a_killed_worker_loses_no_row_without_a_count(
    tmp_path: Path, tasks_file: Path, backend: ScriptedBackend, aiohttp_server: Server
) -> None:
    upstream = await aiohttp_server(backend.app())
    async with supervised(tmp_path, str(upstream.make_url("/v1")), tasks_file, extra=EXTRA) as run:
        ready = run.event("workers_ready")
        assert ready is not None
        victim = ready["pids"][1]
        frozen = descendants(victim)
        assert frozen, "the victim's grading process"
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)  # it answers requests, grades none
        answered = failed = 0
        connector = aiohttp.TCPConnector(force_close=True)  # a connection each: both workers

        async def client(session: aiohttp.ClientSession, requests: int) -> None:
            nonlocal answered, failed
            for _ in range(requests):
                try:
                    url = f"{run.base}/v1/chat/completions"
                    async with session.post(url, data=b"{}", headers=TAGGED) as response:
                        await response.read()
                        if response.status == 200:
                            answered += 1
                        else:
                            failed += 1
                except aiohttp.ClientError:
                    failed += 1  # in flight on the victim when it died: never answered

        async with aiohttp.ClientSession(connector=connector) as session:
            await asyncio.gather(*(client(session, 10) for _ in range(4)))
            load = asyncio.gather(*(client(session, 15) for _ in range(4)))
            await asyncio.sleep(0.05)
            os.kill(victim, signal.SIGKILL)  # under load
            for pid in frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await load
            lost_event = await run.wait_event("worker_rows_lost", worker=1)
            await run.wait_event("worker_restarted", worker=1)
            await run.wait_status(1, 200)
            await asyncio.gather(*(client(session, 5) for _ in range(2)))
        lost = await run.samples(1, "gradeproxy_worker_rows_lost_total")
        assert lost == {(): lost_event["rows"]}
        board = await run.board(0)
        assert board["workers"]["restarts"] == 1
        assert board["workers"]["rows_lost"] == lost_event["rows"]
        run.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.process.wait(), WAIT_S) == 0
    rows = await asyncio.to_thread(rows_in, run.results.parent)
    assert lost_event["rows"] > 0  # the frozen worker held answered, ungraded jobs
    assert rows + lost_event["rows"] == answered
    assert answered + failed == 110
