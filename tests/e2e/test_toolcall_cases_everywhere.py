"""grading.md's tool-call cases on four surfaces: the same answer gets the same verdict row and
the same run report from the Python API, ``gradeproxy grade``, ``POST /grading/v1/score`` and MCP.

The API's row is the reference; every surface must equal it field for field (reason text, graded
call with its exact 23-digit integer, digest and rules version included), and the API row must
hold the table's verdict. The typed wires (HTTP, MCP) refuse a non-string answer instead: the
error names ``answer`` and nothing is graded. ``gradeproxy grade`` reads untyped JSONL, so it
grades one by rule 11 exactly as the API does (issue 37). (Tasks with checks, checks-only tasks,
judge checks and the live proxy: tests/e2e/test_same_verdict_everywhere.py.)
"""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from aiohttp import web
from mcp import Client, StdioServerParameters
from mcp.types import TextContent
from pytest_aiohttp import AiohttpClient

from gradeproxy.cli import main
from grader import TaskSet, grade_run, load_tasks
from grader.json import dumps, loads_exact
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.state import TASKS
from proxy.surfaces.scoring_http import PREFIX, add_scoring_routes
from proxy.taskstore import TaskStore
from tests.support.paths import REPO
from tests.support.rows import without_row_id
from tests.support.surfaces import (
    CASE_IDS,
    CASES,
    WIRE_CASES,
    Case,
    verdict_fields,
    write_answers,
    write_tasks,
)

Surface = Literal["api", "cli", "http", "mcp"]
SURFACES: list[Surface] = ["api", "cli", "http", "mcp"]


@dataclass(frozen=True, slots=True)
class Refused:
    """A typed wire refused the request; ``text`` is its error message."""

    text: str


Outcome = dict[str, Any] | Refused


@dataclass(frozen=True, slots=True)
class Runs:
    """What the batch surfaces produced, by case id, plus their report over the wire cases."""

    rows: dict[str, Outcome]
    report: dict[str, Any]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("surfaces")


@pytest.fixture(scope="module")
def tasks_file(workdir: Path) -> Path:
    return write_tasks(workdir / "tasks.jsonl")


@pytest.fixture(scope="module")
def task_set(tasks_file: Path) -> TaskSet:
    return load_tasks(tasks_file)


@pytest.fixture(scope="module")
def api(task_set: TaskSet) -> Runs:
    rows: dict[str, Outcome] = {
        case.id: grade_run(task_set, [(case.task_id, case.answer)]).results[0].to_dict()
        for case in CASES
    }
    report = grade_run(task_set, [(c.task_id, c.answer) for c in WIRE_CASES]).report.to_dict()
    return Runs(rows, report)


def cli_grade(tasks_file: Path, workdir: Path, name: str, cases: list[Case]) -> tuple[Any, Any]:
    answers = write_answers(workdir / f"{name}.answers.jsonl", cases)
    out, report = workdir / f"{name}.rows.jsonl", workdir / f"{name}.report.json"
    args = ["grade", "--tasks", str(tasks_file), "--answers", str(answers)]
    assert main([*args, "--out", str(out), "--report", str(report), "--no-progress"]) == 0
    rows = [loads_exact(line) for line in out.read_text("utf-8").splitlines()]
    return rows, loads_exact(report.read_text("utf-8"))


@pytest.fixture(scope="module")
def cli(tasks_file: Path, workdir: Path) -> Runs:
    """Every case's row from one answers file (non-string answers too: rule 11); the report over
    the wire cases, as the other surfaces report them."""
    rows, _ = cli_grade(tasks_file, workdir, "all", CASES)
    _, report = cli_grade(tasks_file, workdir, "wire", WIRE_CASES)
    # The CLI's report adds the input section (docs/offline.md, "Bad rows"): here every row read.
    assert report.pop("input") == {
        "rows": len(WIRE_CASES),
        "problem_rows": 0,
        "reasons": {},
        "problems": [],
    }
    outcomes: dict[str, Outcome] = dict(zip((c.id for c in CASES), rows, strict=True))
    return Runs(outcomes, report)


async def mcp_runs(tasks_file: Path) -> Runs:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gradeproxy.cli.mcp", "--tasks", str(tasks_file)],
        cwd=str(REPO),
    )
    rows: dict[str, Outcome] = {}
    async with Client(params) as client:
        for case in CASES:
            result = await client.call_tool(
                "score", {"task_id": case.task_id, "answer": case.answer}
            )
            if result.is_error:
                (content,) = result.content
                assert isinstance(content, TextContent)
                rows[case.id] = Refused(content.text)
            else:
                assert result.structured_content is not None
                rows[case.id] = result.structured_content["verdict"]
        answers = [{"task_id": c.task_id, "answer": c.answer} for c in WIRE_CASES]
        run = await client.call_tool("score_run", {"answers": answers})
        assert run.structured_content is not None, run.content
        report: dict[str, Any] = run.structured_content["report"]
    return Runs(rows, report)


@pytest.fixture(scope="module")
def mcp(tasks_file: Path) -> Runs:
    """One stdio server for the whole table, spawned the way an MCP client config does.

    Its own thread and event loop: the async test that first asks for it already runs one.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, mcp_runs(tasks_file)).result()


async def http_client(aiohttp_client: AiohttpClient, tasks_file: Path) -> Any:
    store = TaskStore(tasks_file, ProxyMetrics())
    assert await store.reload()
    app = web.Application()
    app[TASKS] = store
    add_scoring_routes(app, max_batch=len(CASES))
    return await aiohttp_client(app)


async def http_post(client: Any, body: Any) -> tuple[int, Any]:
    response = await client.post(f"{PREFIX}/score", data=dumps(body))
    return response.status, loads_exact(await response.text())


async def outcome(
    surface: Surface,
    case: Case,
    request: pytest.FixtureRequest,
    aiohttp_client: AiohttpClient,
    tasks_file: Path,
) -> Outcome:
    if surface == "http":
        client = await http_client(aiohttp_client, tasks_file)
        status, body = await http_post(client, {"task_id": case.task_id, "answer": case.answer})
        if status == 400:
            assert body["error"]["param"] == "answer"
            return Refused(body["error"]["message"])
        assert status == 200, body
        verdict: dict[str, Any] = body["verdict"]
        return verdict
    runs: Runs = request.getfixturevalue(surface)
    return runs.rows[case.id]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("surface", SURFACES)
async def test_same_verdict_everywhere(
    surface: Surface,
    case: Case,
    request: pytest.FixtureRequest,
    aiohttp_client: AiohttpClient,
    tasks_file: Path,
    api: Runs,
) -> None:
    reference = api.rows[case.id]
    assert isinstance(reference, dict)
    assert verdict_fields(reference) == case.expected()
    got = await outcome(surface, case, request, aiohttp_client, tasks_file)
    if surface in ("http", "mcp") and not case.on_wire:
        assert isinstance(got, Refused), f"{surface} graded a non-string answer: {got}"
        assert "answer" in got.text
        return
    assert isinstance(got, dict)
    if surface == "cli":  # the offline row also keeps the answers row's (string) answer and ids
        if case.on_wire:
            assert (got.pop("answer"), got.pop("truncated")) == (case.answer, False)
        assert "answer" not in got
        assert got.pop("sample_id") is None
    assert without_row_id(got) == without_row_id(reference)  # each build's own id


@pytest.mark.parametrize("surface", SURFACES)
async def test_same_report_everywhere(
    surface: Surface,
    request: pytest.FixtureRequest,
    aiohttp_client: AiohttpClient,
    tasks_file: Path,
    task_set: TaskSet,
    api: Runs,
) -> None:
    """The run report over the same answers: perMutationKind and staleSchemaUsedRate included."""
    if surface == "http":
        client = await http_client(aiohttp_client, tasks_file)
        items = [{"task_id": c.task_id, "answer": c.answer} for c in WIRE_CASES]
        status, body = await http_post(client, {"items": items})
        assert status == 200, body
        report = body["report"]
    else:
        report = request.getfixturevalue(surface).report
    assert report == api.report
    stale = sum(case.stale for case in WIRE_CASES)
    assert report["staleSchemaUsedRate"] == stale / len(WIRE_CASES)
    assert set(report["perMutationKind"]) == {"(none)", "enum_value_changed", "field_renamed"}
    assert report["tasks_digest"] == task_set.digest
