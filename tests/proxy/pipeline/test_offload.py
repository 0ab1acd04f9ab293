"""The grading process (``grading.isolation: process``): what a child must never change.

A crashed child is restarted and counted, and the job it died on is an infrastructure error,
never a model failure; jobs queued in the child are all written when the proxy drains; a reload
reaches the child; judge columns are graded in the parent, the others in the child; a full
queue still drops and counts; and both isolation modes write the same rows.

Nothing here waits on a clock: a child is paused with SIGSTOP (its pipe still takes the jobs)
and killed with SIGKILL, and each step waits for the state it needs, bounded by a poll count.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from grader.json import dumps
from proxy.pipeline import offload
from proxy.pipeline.offload import GradingProcess
from proxy.state import QUEUE, TASKS
from tests.support.backend import Reply, ScriptedBackend, wire
from tests.support.judge import judge_app
from tests.support.metrics import metric_value
from tests.support.proxy import ProxyFactory, rows_of
from tests.support.tasks import POLITE_JUDGE
from tests.support.waits import until

Client = TestClient[web.Request, web.Application]
ROOT = Path(__file__).resolve().parents[3]
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
JUDGED_AND_LOCAL = {
    "id": "reply.judged_and_local",
    "prompt": "Reply to a customer asking about the weather.",
    "checks": [
        {
            "type": "string_check",
            "name": "mentions_zurich",
            "operation": "ilike",
            "input": "{{ sample.output_text }}",
            "reference": "zürich",
        },
        POLITE_JUDGE,
    ],
    "metadata": {"mutationKind": "judge"},
}


@pytest.fixture
async def schema_tasks(tasks_file: Path) -> Path:
    with tasks_file.open("ab") as out:
        out.write(dumps(SCHEMA_TASK) + b"\n" + dumps(JUDGED_AND_LOCAL) + b"\n")
    return tasks_file


def process_of(client: Client) -> GradingProcess:
    process = client.app[QUEUE].process
    assert process is not None
    assert process.pid is not None
    return process


async def post(client: Client, headers: dict[str, str] = TAGGED) -> None:
    response = await client.post("/v1/chat/completions", data=b"{}", headers=headers)
    assert response.status == 200
    await response.read()


@pytest.mark.parametrize(
    ("job_in_flight", "rows_after", "process_errors"),
    [(False, 1, 0), (True, 1, 1)],
    ids=["killed_while_idle", "killed_with_a_job_in_flight"],
)
async def test_a_crashed_child_is_restarted_and_counted(
    make_proxy: ProxyFactory,
    schema_tasks: Path,
    results_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    job_in_flight: bool,
    rows_after: int,
    process_errors: int,
) -> None:
    client = await make_proxy()
    process = process_of(client)
    first_pid = process.pid
    assert first_pid is not None
    release = asyncio.Event()
    real_spawn = GradingProcess._spawn

    async def held_spawn(self: GradingProcess, attempt: int) -> None:
        await release.wait()  # the test looks at the proxy while no child runs
        await real_spawn(self, attempt)

    monkeypatch.setattr(GradingProcess, "_spawn", held_spawn)
    if job_in_flight:
        os.kill(first_pid, signal.SIGSTOP)  # the job reaches its pipe, never an answer
        await post(client)
        await until(lambda: bool(process._sent) and not process._outbox, "the job written")
    os.kill(first_pid, signal.SIGKILL)
    await until(lambda: not process.up, "the child seen gone")
    health = await client.get("/healthz/grading")
    assert (health.status, (await health.json())["status"]) == (503, "grader_down")
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grading_healthy") == 0
    release.set()
    await until(lambda: process.up, "a new child")
    assert process.pid != first_pid
    await post(client)
    rows = await rows_of(client, results_path)
    assert [row["result"] for row in rows] == ["pass"] * rows_after
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grade_process_restarts_total") == 1
    errors = metric_value(text, "gradeproxy_grading_errors_total", kind="grader_process")
    assert errors == process_errors
    assert metric_value(text, "gradeproxy_grades_total", result="fail") == 0
    assert (await client.get("/healthz/grading")).status == 200


@pytest.mark.parametrize("jobs", [1, 12], ids=["one_job", "twelve_jobs"])
async def test_jobs_queued_in_the_child_are_all_written_at_shutdown(
    make_proxy: ProxyFactory,
    schema_tasks: Path,
    results_path: Path,
    jobs: int,
) -> None:
    """The drain SIGTERM starts (the app's cleanup) waits for every job: in the child's pipe
    and in the queue behind it."""
    client = await make_proxy(grading={"workers": 1})
    process = process_of(client)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGSTOP)
    for _ in range(jobs):
        await post(client)
    queue = client.app[QUEUE]
    # One job in the child's pipe (the worker's batch), the rest in the bounded queue behind it.
    await until(lambda: len(process._sent) == 1 and not process._outbox, "a job in the pipe")
    assert queue.health().depth == jobs - 1
    os.kill(process.pid, signal.SIGCONT)
    await client.close()  # the cleanup a SIGTERM runs: drain, then stop the child
    rows = await asyncio.to_thread(results_path.read_text)
    assert rows.count('"result":"pass"') == jobs
    assert process._process is not None
    assert not process._process.is_alive()


@pytest.mark.parametrize("how", ["reload", "watch"])
async def test_a_reloaded_task_grades_in_the_child(
    make_proxy: ProxyFactory,
    tasks_file: Path,
    results_path: Path,
    how: str,
) -> None:
    client = await make_proxy(tasks={"watch": how == "watch", "watch_interval_s": 0.05})
    process = process_of(client)
    store = client.app[TASKS]
    assert store.current is not None
    old = store.current.digest
    # The set reaches the child once it has started: on a loaded machine after make_proxy returns.
    await until(lambda: process.holds(old), "the first set in the child")
    renamed = {**SCHEMA_TASK, "id": "weather.schema_added_later"}
    with tasks_file.open("ab") as out:
        out.write(dumps(renamed) + b"\n")
    if how == "reload":  # what SIGHUP runs
        assert await store.reload()
    await until(lambda: store.current is not None and store.current.digest != old, "reloaded")
    assert store.current is not None
    new = store.current.digest
    await until(lambda: process.holds(new), "the new set in the child")
    inlined = process.tasks_inlined
    await post(client, {"X-Grade-Task": "weather.schema_added_later"})
    [row] = await rows_of(client, results_path)
    assert (row["task_id"], row["result"], row["tasks_digest"]) == (
        "weather.schema_added_later",
        "pass",
        new,
    )
    assert process.tasks_inlined == inlined  # graded from the set sent on reload
    assert process.jobs_sent == 1


@pytest.mark.parametrize(
    ("reply", "result", "columns"),
    [
        ("PASS", "pass", {"mentions_zurich": True, "polite": True}),
        ("FAIL", "fail", {"mentions_zurich": True, "polite": False}),
    ],
    ids=["judge_passes", "judge_fails"],
)
async def test_judge_columns_are_graded_in_the_parent_the_rest_in_the_child(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    schema_tasks: Path,
    results_path: Path,
    aiohttp_server: Callable[..., Awaitable[TestServer]],
    monkeypatch: pytest.MonkeyPatch,
    reply: str,
    result: str,
    columns: dict[str, bool],
) -> None:
    from grader import engine

    seen: list[Any] = []
    judge = await aiohttp_server(judge_app([reply], seen))
    backend.replies.append(Reply(body=wire("openai_text.json")))
    client = await make_proxy(
        judge={"endpoint": str(judge.make_url("/v1"))}, grading={"inline_max_bytes": 0}
    )
    parent_runs: list[str] = []
    real_run_check = engine.run_check

    def spy(check: Any, *args: Any) -> Any:
        parent_runs.append(check.name)
        return real_run_check(check, *args)

    monkeypatch.setattr(engine, "run_check", spy)  # in this process only, not the child's
    await post(client, {"X-Grade-Task": "reply.judged_and_local"})
    [row] = await rows_of(client, results_path)
    assert row["result"] == result
    assert {c["name"]: c["passed"] for c in row["checks"]} == columns
    assert len(seen) == 1  # the judge was called, from this process
    assert parent_runs == []  # the string check ran in the child
    assert process_of(client).jobs_sent == 1


async def test_a_full_queue_drops_and_counts_while_the_child_is_busy(
    make_proxy: ProxyFactory, schema_tasks: Path, results_path: Path
) -> None:
    client = await make_proxy(grading={"queue_size": 2, "workers": 1, "batch_max": 1})
    process = process_of(client)
    assert process.pid is not None
    os.kill(process.pid, signal.SIGSTOP)
    for _ in range(6):  # one held by the worker (in the child's pipe), two queued, three dropped
        await post(client)
    text = await (await client.get("/metrics")).text()
    assert metric_value(text, "gradeproxy_grading_skipped_total", reason="queue_full") == 3
    os.kill(process.pid, signal.SIGCONT)
    rows = await rows_of(client, results_path)
    assert [row["result"] for row in rows] == ["pass"] * 3


ROUGE = {
    "type": "text_similarity",
    "name": "r",
    "input": "{{ sample.output_text }}",
    "reference": "the weather in zurich is sunny",
    "evaluation_metric": "rouge_l",
    "pass_threshold": 0.5,
}


@pytest.mark.parametrize(
    ("route", "payload", "passed", "calls_in_child"),
    [
        # /score answers with plain values (grade_all_dict): graded once, in the child.
        ("/grading/v1/score", {"task_id": "weather.schema", "answer": "no call"}, False, 1),
        (
            "/grading/v1/graders/run",
            {"grader": ROUGE, "model_sample": "the weather in zurich is sunny"},
            True,
            1,
        ),
        (  # a check holding a compiled validator cannot be pickled: graded in a thread
            "/grading/v1/graders/run",
            {
                "grader": {"type": "json_schema", "name": "s", "schema": {}, "target": "answer"},
                "model_sample": '{"a": 1}',
            },
            True,
            0,
        ),
    ],
    ids=["score", "graders_run_similarity", "graders_run_schema_in_a_thread"],
)
async def test_the_scoring_apis_heavy_checks_run_in_the_grading_process(
    make_proxy: ProxyFactory,
    schema_tasks: Path,
    route: str,
    payload: dict[str, Any],
    passed: bool,
    calls_in_child: int,
) -> None:
    client = await make_proxy(scoring={"enabled": True})
    response = await client.post(route, data=dumps(payload))
    assert response.status == 200, await response.text()
    body = await response.json()
    verdict = body["verdict"]["passed"] if "verdict" in body else body["reward"] == 1.0
    assert verdict is passed
    assert process_of(client).calls_sent == calls_in_child
    assert client.app[QUEUE].heavy_in_thread == 1 - calls_in_child  # never graded twice


@pytest.mark.parametrize(
    ("task", "body"),
    [
        ("weather.single", "openai_single_tool.json"),
        ("weather.schema", "openai_single_tool.json"),
        ("weather.schema", "openai_text.json"),
        ("weather.single", "openai_single_tool.sse"),
    ],
    ids=["inline_pass", "schema_pass", "schema_fail", "stream_pass"],
)
async def test_both_isolation_modes_write_the_same_rows(
    make_proxy: ProxyFactory,
    backend: ScriptedBackend,
    schema_tasks: Path,
    results_path: Path,
    task: str,
    body: str,
) -> None:
    rows: dict[str, dict[str, Any]] = {}
    for isolation in ("thread", "process"):
        content_type = "text/event-stream" if body.endswith(".sse") else "application/json"
        backend.replies.append(Reply(body=wire(body), content_type=content_type))
        client = await make_proxy(grading={"isolation": isolation, "inline_max_bytes": 0})
        await post(client, {"X-Grade-Task": task})
        rows[isolation] = (await rows_of(client, results_path))[-1]
        await client.close()
        assert (client.app[QUEUE].process is None) == (isolation == "thread")
    varying = {"request_id", "row_id", "time", "timings"}
    thread, process = ({k: v for k, v in r.items() if k not in varying} for r in rows.values())
    assert thread == process
    assert offload.context().get_start_method() in ("forkserver", "spawn")


def children(pid: int) -> list[int]:
    """A process's children, forked by any of its threads (Linux's /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(part) for part in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def grading_child(serve_pid: int) -> int | None:
    """The grading process: the fork server's child (or, with spawn, the server's own)."""
    for pid in children(serve_pid):
        grand = children(pid)
        if grand:
            return grand[0]
    return None


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
@pytest.mark.parametrize("group_signal", [False, True], ids=["sigterm_to_serve", "sigterm_to_both"])
async def test_sigterm_drains_the_jobs_queued_in_the_child(
    tmp_path: Path,
    schema_tasks: Path,
    backend_server: TestServer,
    group_signal: bool,
) -> None:
    """`gradeproxy serve` gets SIGTERM while its grading process holds jobs it has not started
    (the child is paused): the process exits 0 once every job is graded and written. A SIGTERM
    to the child as well (a signal to the process group) changes nothing."""
    import sys

    import aiohttp

    from tests.support.process import free_port

    port, results = free_port(), tmp_path / "results.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"upstream:\n  url: {backend_server.make_url('/v1')}\nlisten:\n  port: {port}\n"
        f"tasks:\n  path: {schema_tasks}\nresults:\n  path: {results}\n"
        "grading:\n  workers: 1\n"
        "shutdown:\n  drain_delay_s: 0\n  grace_period_s: 60\nlogging:\n  level: warning\n"
    )
    serve = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "gradeproxy.cli", "serve", "--config", str(config)),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    base, jobs = f"http://127.0.0.1:{port}", 8
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(600):
                try:
                    # Ready means the tasks are loaded too: /healthz/grading alone is 200
                    # before they are, and a first job would then be skipped (unknown_task).
                    async with session.get(f"{base}/readyz") as ready:
                        body = await ready.json() if ready.status == 200 else {}
                        if body.get("grading", {}).get("status") == "ok":
                            break
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the proxy never became ready")
            child = grading_child(serve.pid)
            assert child is not None
            os.kill(child, signal.SIGSTOP)
            for _ in range(jobs):
                url = f"{base}/v1/chat/completions"
                async with session.post(url, data=b"{}", headers=TAGGED) as response:
                    assert response.status == 200
                    await response.read()
        serve.send_signal(signal.SIGTERM)
        if group_signal:
            os.kill(child, signal.SIGTERM)
        os.kill(child, signal.SIGCONT)
        assert await asyncio.wait_for(serve.wait(), 60) == 0
    finally:
        if serve.returncode is None:
            serve.kill()
            await serve.wait()
    text = await asyncio.to_thread(results.read_text)
    assert text.count('"result":"pass"') == jobs


@pytest.mark.parametrize(
    ("environ", "isolation"),
    [
        ({}, "process"),
        ({"GRADEPROXY_GRADING_ISOLATION": "thread"}, "thread"),
        ({"GRADEPROXY_GRADING_ISOLATION": "process"}, "process"),
        (
            {"GRADEPROXY_GRADING_ISOLATION": "fork"},
            "grading.isolation: must be one of process|thread",
        ),
    ],
    ids=["default", "thread_from_environment", "process_from_environment", "fork_refused"],
)
def test_isolation_is_configured_like_every_key(environ: dict[str, str], isolation: str) -> None:
    from proxy.config import ConfigError, load_config

    overrides = {"upstream": {"url": "http://127.0.0.1:8000/v1"}}
    found: str
    try:
        found = load_config(None, overrides, environ=environ).grading.isolation
    except ConfigError as exc:
        found = str(exc)
    assert found.startswith(isolation)
