"""A hung grading process is ended: its job counts as a grading error, the rest are graded.

Red team, round 3: ``/readyz`` turned 503 ``queue_stuck`` after 30 s and stayed there; nothing
ended the process. Here the child is frozen with SIGSTOP (a hang it cannot answer from) while
jobs wait for it; with ``grading.job_deadline_s`` the parent kills it, counts the job it held in
``gradeproxy_grading_errors_total{kind="grader_deadline"}``, starts a new child and grades
every other job there: every answered request is a row or that one counted error.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from grader.json import dumps
from proxy.state import QUEUE
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.waits import until

Client = TestClient[web.Request, web.Application]
TAGGED = {"X-Grade-Task": "weather.schema"}
# A schema check always runs off the loop, so every one of these jobs goes to the child.
SCHEMA_TASK = {
    "id": "weather.schema",
    "expected": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
    "checks": [
        {"type": "tool_call", "name": "call"},
        {"type": "json_schema", "name": "schema", "schema": {"type": "object"}},
    ],
    "metadata": {"mutationKind": "none"},
}


@pytest.fixture
async def schema_tasks(tasks_file: Path) -> Path:
    with tasks_file.open("ab") as out:
        out.write(dumps(SCHEMA_TASK) + b"\n")
    return tasks_file


@pytest.mark.parametrize(
    ("workers", "jobs"), [(1, 1), (1, 12), (2, 12)], ids=["one_job", "a_batch", "two_workers"]
)
async def test_a_hung_grading_process_is_killed_restarted_and_the_rest_graded(
    make_proxy: ProxyFactory, schema_tasks: Path, results_path: Path, workers: int, jobs: int
) -> None:
    # 3 s: long enough that the restarted child, on a loaded CI machine, is not killed too
    client = await make_proxy(grading={"workers": workers, "job_deadline_s": 3.0})
    process = client.app[QUEUE].process
    assert process is not None
    assert process.pid is not None
    hung = process.pid
    os.kill(hung, signal.SIGSTOP)  # alive, holding its pipe, never answering
    answered = 0
    for _ in range(jobs):
        response = await client.post("/v1/chat/completions", data=b"{}", headers=TAGGED)
        assert response.status == 200  # the client never waits for grading
        await response.read()
        answered += 1
    rows = await rows_of(client, results_path)  # drains: needs the hung job settled
    await until(lambda: process.up, "a new child")
    assert process.pid != hung
    text = await (await client.get("/metrics")).text()
    missed = metric_value(text, "gradeproxy_grading_errors_total", kind="grader_deadline")
    assert missed == 1
    assert len(rows) + missed == answered
    assert [row["result"] for row in rows] == ["pass"] * (answered - 1)
    assert metric_value(text, "gradeproxy_grade_process_restarts_total") == 1
    assert metric_value(text, "gradeproxy_grading_errors_total", kind="grader_process") == 0
    assert (await client.get("/readyz")).status == 200
    response = await client.post("/v1/chat/completions", data=b"{}", headers=TAGGED)
    await response.read()
    assert [row["result"] for row in await rows_of(client, results_path)][-1] == "pass"


async def test_a_slow_but_answering_process_is_not_killed(
    make_proxy: ProxyFactory, schema_tasks: Path, results_path: Path
) -> None:
    """The deadline is per job: a child paused for less than it, jobs queued, loses none."""
    client = await make_proxy(grading={"workers": 1, "job_deadline_s": 5.0})
    process = client.app[QUEUE].process
    assert process is not None
    assert process.pid is not None
    os.kill(process.pid, signal.SIGSTOP)
    for _ in range(4):
        response = await client.post("/v1/chat/completions", data=b"{}", headers=TAGGED)
        await response.read()
    await until(lambda: bool(process._sent) and not process._outbox, "a job written")
    await asyncio.sleep(0.3)
    os.kill(process.pid, signal.SIGCONT)
    rows = await rows_of(client, results_path)
    assert len(rows) == 4
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grade_process_restarts_total") == 0
