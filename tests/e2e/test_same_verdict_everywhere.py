"""Five surfaces, one verdict: every task in config/tasks and config/tasks-judge, graded with a
set of answers each, on the Python API, ``gradeproxy grade``, ``POST /grading/v1/score`` (single
and batch), MCP and the live proxy over a real socket (JSON and streamed), must give identical
verdict fields, column by column.

Answers per task: the expected call (``right``), the same call as plain text (``right_text``),
the stale call, a wrong value, prose, a forbidden or extra call beside the right one, and every
fixture the task records. Judge checks run against one fake judge on every surface that can
take a judge (API, CLI, HTTP, proxy); MCP has none, so its judge columns must be ``error`` with
a reason naming how to configure one. The table proves it can fail: every column of every task
gets a passing and a non-passing answer, and a surface that skipped or added a check would
differ from the API's row in ``checks``.

All five surfaces run once, in one thread with its own event loop (module fixture ``runs``);
the parametrised tests then compare the rows case by case.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import shutil
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from mcp import Client, StdioServerParameters

from gradeproxy.cli import main
from grader import OFFLINE_FIELDS, Task, TaskSet, grade_run_async, load_tasks
from grader.checks import Judge, JudgeConfig, columns_of
from grader.checks.model_graded import NO_JUDGE
from grader.engine import checks_of
from grader.json import dumps, loads_exact
from grader.toolcall.extract import Call
from proxy.app import make_app
from proxy.config import load_config
from proxy.state import QUEUE, TASKS
from tests.support.backend import SSE, Reply, ScriptedBackend
from tests.support.paths import REPO

pytestmark = pytest.mark.timeout(600)

TASK_FILES = [
    # Episode tasks grade whole runs (tests/grader/episodes,
    # tests/proxy/pipeline/test_live_episodes.py).
    *sorted(p for p in (REPO / "config" / "tasks").glob("*.jsonl") if p.name != "episodes.jsonl"),
    REPO / "config" / "tasks-judge" / "examples.jsonl",
]
PROSE = "I'm sorry, I can't help with that request."
SURFACES = ("cli", "http", "http_batch", "mcp", "proxy", "proxy_stream")
# What the fake judge says "no" to: the judge fixtures' failing answers and the prose answer.
NEGATIVE = (
    PROSE,
    "Please contact your bank.",
    "Not our fault. Take it up with the courier.",
    "Just figure it out.",
)


# --- the table --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    id: str
    task_id: str
    answer: str  # exactly what the proxy hands the grader for the backend's message below
    message: dict[str, Any]  # the assistant message the fake backend answers with
    tools: list[dict[str, Any]] | None  # sent on the answers row offline (None: task's own)

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"task_id": self.task_id, "answer": self.answer}
        if self.tools is not None:
            row["tools"] = self.tools
        return row


def tool_calls(*calls: dict[str, Any]) -> list[dict[str, Any]]:
    """Calls in the wire shape a backend sends (arguments as JSON text)."""
    out = []
    for index, call in enumerate(calls):
        arguments = call.get("arguments", {})
        text = arguments if isinstance(arguments, str) else dumps(arguments).decode()
        out.append(
            {
                "id": f"call_{index}",
                "type": "function",
                "function": {"name": call["name"], "arguments": text},
            }
        )
    return out


def calls_case(case_id: str, task: Task, *calls: dict[str, Any], row_tools: bool = False) -> Case:
    wire = tool_calls(*calls)
    message = {"role": "assistant", "content": None, "tool_calls": wire}
    tools = task.tools if row_tools else None
    return Case(case_id, task.id, dumps({"tool_calls": wire}).decode(), message, tools)


def text_case(case_id: str, task: Task, text: str) -> Case:
    return Case(case_id, task.id, text, {"role": "assistant", "content": text}, None)


def plain(call: Call) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments}


def wrong(call: Call) -> dict[str, Any]:
    """The call with its last argument (canonical order) changed: one wrong value."""
    arguments = dict(call.arguments)
    if not arguments:
        return {"name": call.name, "arguments": {"unexpected": 1}}
    key = sorted(arguments)[-1]
    value = arguments[key]
    if isinstance(value, bool):
        arguments[key] = not value
    elif isinstance(value, int | float):
        arguments[key] = value + 1
    elif isinstance(value, str):
        arguments[key] = value + " (edited)"
    else:
        arguments[key] = "not the expected shape"
    return {"name": call.name, "arguments": arguments}


def one_letter_off(call: Call) -> dict[str, Any] | None:
    """The call with its longest string argument's last letter changed (a typo), if any."""
    strings = [k for k, v in call.arguments.items() if isinstance(v, str) and v]
    if not strings:
        return None
    key = max(strings, key=lambda k: len(call.arguments[k]))
    value = call.arguments[key]
    typo = value[:-1] + ("x" if value[-1] != "x" else "y")
    return {"name": call.name, "arguments": {**call.arguments, key: typo}}


def beside(task: Task) -> Iterator[tuple[str, dict[str, Any]]]:
    """Forbidden calls from the task's policy checks, else one other tool it declares."""
    found = False
    for check in task.raw.get("checks", []):
        for index, forbidden in enumerate(check.get("forbidden_calls", [])):
            found = True
            if isinstance(forbidden, str):
                item = task.item
                yield f"forbidden_{index}", {"name": forbidden, "arguments": dict(item)}
            else:
                yield f"forbidden_{index}", forbidden
    if not found:
        names = [t["function"]["name"] for t in task.tools or [] if "function" in t]
        expected = task.expected_call.name if task.expected_call else None
        other = next((n for n in names if n != expected), None)
        if other is not None:
            yield "extra_call", {"name": other, "arguments": {}}


def fixture_cases(task: Task) -> Iterator[Case]:
    for index, fixture in enumerate(task.metadata.get("fixtures", [])):
        if "item" in fixture:  # a different dataset row: only validate-tasks can supply one
            continue
        name = f"fixture_{fixture.get('id', index)}"
        answer = fixture["answer"]
        if isinstance(answer, str):
            yield text_case(name, task, answer)
        elif isinstance(answer.get("tool_calls"), list):
            calls = [
                {"name": t["function"]["name"], "arguments": t["function"]["arguments"]}
                for t in answer["tool_calls"]
            ]
            yield calls_case(name, task, *calls)
        else:
            yield calls_case(name, task, answer)


def task_cases(task: Task) -> list[Case]:
    cases: list[Case] = [text_case("prose", task, PROSE)]
    if task.expected_call is not None:
        expected = plain(task.expected_call)
        cases += [
            calls_case("right", task, expected, row_tools=True),
            text_case("right_text", task, dumps(expected).decode()),
            calls_case("wrong", task, wrong(task.expected_call), row_tools=True),
        ]
        cases += [calls_case(name, task, call, expected) for name, call in beside(task)]
        typo = one_letter_off(task.expected_call)
        if typo is not None:
            cases.append(calls_case("one_letter_off", task, typo))
    if task.stale is not None:
        cases.append(calls_case("stale", task, plain(task.stale)))
    cases += fixture_cases(task)
    return [Case(f"{task.id}/{c.id}", c.task_id, c.answer, c.message, c.tools) for c in cases]


_FOLDER = load_tasks(TASK_FILES[0].parent)  # for building the table; the surfaces load a copy
TASK_SET = TaskSet(
    {t.id: t for t in _FOLDER if Path(t.source.split(":")[0]).name != "episodes.jsonl"},
    _FOLDER.digest,
)
JUDGE_SET = load_tasks(TASK_FILES[-1])
ALL_TASKS = [*TASK_SET, *JUDGE_SET]
CASES = [case for task in ALL_TASKS for case in task_cases(task)]
JUDGED = {task.id for task in JUDGE_SET}


# --- the fake judge ---------------------------------------------------------------------------


def judge_reply(model: str, messages: list[dict[str, Any]]) -> str:
    """One deterministic judge for every surface: the reply form each check type parses."""
    graded = messages[-1]["content"] if messages else ""
    negative = any(marker in str(graded) for marker in NEGATIVE)
    if model.startswith("claude"):
        return "FAIL" if negative else "PASS"
    if model.startswith("gemini"):
        return "hostile" if negative else "empathetic"
    return "2" if negative else "9"


class FakeJudge:
    """The Python API's judge: a :class:`~grader.checks.JudgeClient` in process."""

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        return judge_reply(model, list(messages))


def judge_app() -> web.Application:
    async def complete(request: web.Request) -> web.Response:
        body = await request.json()
        content = judge_reply(body["model"], body["messages"])
        return web.json_response(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", complete)
    return app


# --- the surfaces -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Runs:
    api: dict[str, dict[str, Any]]
    surfaces: dict[str, dict[str, dict[str, Any]]]
    task_set: TaskSet


def backend_reply(case: Case, stream: bool) -> Reply:
    message = case.message
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    if not stream:
        body = {
            "id": "chatcmpl-parity",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        return Reply(body=dumps(body), chunked=False)
    delta: dict[str, Any] = {"role": "assistant"}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **t} for i, t in enumerate(message["tool_calls"])]
    else:
        delta["content"] = message["content"]
    chunks = [
        {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
    ]
    events = b"".join(
        b"data: "
        + dumps({"id": "chatcmpl-parity", "object": "chat.completion.chunk", "model": "m", **c})
        + b"\n\n"
        for c in chunks
    )
    return Reply(body=events + b"data: [DONE]\n\n", content_type=SSE)


async def proxy_rows(
    client: TestClient[web.Request, web.Application], backend: ScriptedBackend, results: Path
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every case through the proxy, JSON then streamed; rows keyed by case id."""
    tasks = {task.id: task for task in ALL_TASKS}
    for stream in (False, True):
        for case in CASES:
            task = tasks[case.task_id]
            body: dict[str, Any] = {
                "model": "m",
                "messages": [{"role": "user", "content": task.raw.get("prompt", "x")}],
                "stream": stream,
            }
            if task.tools:
                body["tools"] = task.tools
            backend.replies.append(backend_reply(case, stream))
            response = await client.post(
                "/v1/chat/completions",
                data=dumps(body),
                headers={
                    "Content-Type": "application/json",
                    "X-Grade-Task": case.task_id,
                    "x-request-id": ("stream:" if stream else "json:") + case.id,
                },
            )
            await response.read()
            assert response.status == 200, case.id
    assert await client.app[QUEUE].drain(60)
    text = await asyncio.to_thread(results.read_text, "utf-8")
    rows = [loads_exact(line) for line in text.splitlines()]
    by_id: dict[str, dict[str, dict[str, Any]]] = {"json": {}, "stream": {}}
    for row in rows:
        kind, case_id = row["request_id"].split(":", 1)
        by_id[kind][case_id] = row
    return by_id["json"], by_id["stream"]


async def http_rows(
    client: TestClient[web.Request, web.Application],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    single: dict[str, dict[str, Any]] = {}
    for case in CASES:
        response = await client.post("/grading/v1/score", data=dumps(case.row()))
        assert response.status == 200, await response.text()
        single[case.id] = loads_exact(await response.text())["verdict"]
    response = await client.post(
        "/grading/v1/score", data=dumps({"items": [case.row() for case in CASES]})
    )
    assert response.status == 200, await response.text()
    batch = loads_exact(await response.text())["results"]
    return single, {case.id: row for case, row in zip(CASES, batch, strict=True)}


def cli_rows(tasks_dir: Path, judge_url: str, workdir: Path) -> dict[str, dict[str, Any]]:
    answers, out = workdir / "answers.jsonl", workdir / "rows.jsonl"
    answers.write_bytes(b"".join(dumps(case.row()) + b"\n" for case in CASES))
    judge = workdir / "judge.yaml"
    judge.write_text(f"endpoint: {judge_url}\n", encoding="utf-8")
    args = ["grade", "--tasks", str(tasks_dir), "--answers", str(answers), "--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()):
        assert main([*args, "--judge", str(judge), "--no-progress"]) == 0
    rows = [loads_exact(line) for line in out.read_text("utf-8").splitlines()]
    return {case.id: row for case, row in zip(CASES, rows, strict=True)}


async def mcp_rows(tasks_dir: Path) -> dict[str, dict[str, Any]]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gradeproxy.cli.mcp", "--tasks", str(tasks_dir)],
        cwd=REPO,
    )
    async with Client(params) as client:
        run = await client.call_tool("score_run", {"answers": [c.row() for c in CASES]})
        assert run.structured_content is not None, run.content
        rows = run.structured_content["results"]
    return {case.id: row for case, row in zip(CASES, rows, strict=True)}


def copy_tasks(tasks_dir: Path) -> None:
    tasks_dir.mkdir()
    for index, path in enumerate(TASK_FILES):
        shutil.copy(path, tasks_dir / f"{index}-{path.name}")


async def collect(workdir: Path) -> Runs:
    tasks_dir = workdir / "tasks"
    await asyncio.to_thread(copy_tasks, tasks_dir)
    task_set = load_tasks(tasks_dir)
    judge = TestServer(judge_app())
    backend = ScriptedBackend()
    upstream = TestServer(backend.app())
    await judge.start_server()
    await upstream.start_server()
    results = workdir / "grades.jsonl"
    config = load_config(
        None,
        {
            "upstream": {"url": str(upstream.make_url("/v1")), "idle_timeout_s": 5.0},
            "tasks": {"path": str(tasks_dir)},
            "results": {"path": str(results)},
            "judge": {"endpoint": str(judge.make_url("/v1"))},
            "scoring": {"enabled": True, "max_batch": len(CASES)},
            "shutdown": {"drain_delay_s": 0.0, "grace_period_s": 5.0},
        },
        environ={},
    )
    client = TestClient(TestServer(make_app(config)))
    await client.start_server()
    try:
        for _ in range(500):
            if client.app[TASKS].ready:
                break
            await asyncio.sleep(0.01)
        api_run = await grade_run_async(
            task_set, [case.row() for case in CASES], judge=Judge(FakeJudge(), JudgeConfig())
        )
        api = {c.id: r for c, r in zip(CASES, api_run.to_dict()["results"], strict=True)}
        cli = await asyncio.to_thread(cli_rows, tasks_dir, str(judge.make_url("/v1")), workdir)
        http, http_batch = await http_rows(client)
        mcp = await mcp_rows(tasks_dir)
        proxy, proxy_stream = await proxy_rows(client, backend, results)
    finally:
        await client.close()
        await upstream.close()
        await judge.close()
    surfaces = {
        "cli": cli,
        "http": http,
        "http_batch": http_batch,
        "mcp": mcp,
        "proxy": proxy,
        "proxy_stream": proxy_stream,
    }
    return Runs(api, surfaces, task_set)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    workdir = tmp_path_factory.mktemp("parity")
    with ThreadPoolExecutor(max_workers=1) as pool:  # its own loop: tests may run one already
        return pool.submit(asyncio.run, collect(workdir)).result()


# --- the assertions ---------------------------------------------------------------------------


def stable(column: dict[str, Any]) -> dict[str, Any]:
    """A column without the judge attempts' latencies (timing, not verdict)."""
    details = column.get("details")
    if not isinstance(details, dict) or "attempt_log" not in details:
        return column
    log = [{k: v for k, v in a.items() if k != "latency_s"} for a in details["attempt_log"]]
    return {**column, "details": {**details, "attempt_log": log}}


def verdict(row: dict[str, Any]) -> dict[str, Any]:
    # row_id is each row's own (an offline UUID, a live id derived from the request): not a verdict
    out = {key: row[key] for key in OFFLINE_FIELDS if key in row and key != "row_id"}
    if "checks" in out:
        out["checks"] = [stable(c) for c in out["checks"]]
    return out


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_same_verdict_everywhere(runs: Runs, case: Case, surface: str) -> None:
    reference = runs.api[case.id]
    task = runs.task_set.tasks[case.task_id]
    expected_columns = [c for check in checks_of(task) for c in columns_of(check)]
    assert [c["name"] for c in reference["checks"]] == expected_columns
    got = runs.surfaces[surface][case.id]
    if surface == "mcp" and case.task_id in JUDGED:  # no judge on MCP: error, saying so
        assert got["result"] == "error"
        assert all(c["reason"] == NO_JUDGE for c in got["checks"])
        return
    for index, column in enumerate(reference["checks"]):
        assert stable(got["checks"][index]) == stable(column), (
            f"{surface}: column {column['name']} differs"
        )
    assert len(got["checks"]) == len(reference["checks"]), f"{surface} graded other columns"
    assert verdict(got) == verdict(reference)
    if surface.startswith("proxy"):  # the live row is the offline row plus live fields
        # (offline rows carry the answers row's `tools`; live rows keep the request's only when
        # a from_request check read them)
        assert set(reference) - {"tools"} <= set(got)
        assert got["answer"] == case.answer


@pytest.mark.parametrize("task", ALL_TASKS, ids=lambda t: t.id)
def test_every_column_gets_a_passing_and_a_failing_answer(runs: Runs, task: Task) -> None:
    """Without this the table could agree on columns nobody ever made fail."""
    seen: dict[str, set[bool | None]] = {}
    for case in CASES:
        if case.task_id == task.id:
            for column in runs.api[case.id]["checks"]:
                seen.setdefault(column["name"], set()).add(column["passed"])
    assert seen
    for name, states in seen.items():
        assert {True, False} <= states, f"{task.id}: column {name} only ever {states}"
