"""``gradeproxy mcp``: the MCP server, driven by the official SDK's own client.

The end-to-end test spawns the server over stdio exactly as an MCP client config does; the
argument tables talk to the same server in-process (the SDK's ``Client(server)``), which runs
the same tool schemas and argument validation without a process per row.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from gradeproxy.cli import mcp as mcp_command
from grader import TaskSet, grade_run, load_tasks
from grader.api import digest_of
from grader.json import dumps
from grader.loader import parse_task
from tests.support.paths import REPO
from tests.support.rows import without_row_id
from tests.support.surfaces import (
    CHECKS_ONLY_TASK,
    FORECAST,
    FORECAST_STALE,
    TASKS,
    TASKS_BY_ID,
    TICKET,
    WIRE_CASES,
    write_tasks,
)

W = "weather.enum_value_changed.01"
TOOLS = {"score", "score_run", "list_tasks", "validate_task"}


@pytest.fixture(scope="module")
def tasks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("mcp") / "tasks.jsonl")


@pytest.fixture(scope="module")
def task_set(tasks_file: Path) -> TaskSet:
    return load_tasks(tasks_file)


def stdio_params(*args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "gradeproxy.cli.mcp", *args], cwd=str(REPO)
    )


@asynccontextmanager
async def in_process(tasks: TaskSet | None) -> AsyncIterator[Client]:
    async with Client(mcp_command.build_server(tasks)) as client:
        yield client


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.structured_content
    (content,) = result.content
    assert isinstance(content, TextContent)
    return content.text


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    content: dict[str, Any] | None = result.structured_content
    assert content is not None
    return content


async def test_stdio_server_serves_the_four_tools(tasks_file: Path, task_set: TaskSet) -> None:
    """Spawned as an MCP client config would; every tool answers what the Python API does."""
    async with Client(stdio_params("--tasks", str(tasks_file))) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == TOOLS
        schema = listed["score"].input_schema
        assert (schema["properties"]["answer"]["type"], schema["required"]) == (
            "string",
            ["answer"],
        )

        answer = dumps(FORECAST_STALE).decode()
        verdict = structured(await client.call_tool("score", {"task_id": W, "answer": answer}))
        expected = grade_run(task_set, [(W, answer)]).results[0].to_dict()
        assert without_row_id(verdict) == {"verdict": without_row_id(expected)}

        answers = [{"task_id": case.task_id, "answer": case.answer} for case in WIRE_CASES]
        run = structured(await client.call_tool("score_run", {"answers": answers}))
        api = grade_run(task_set, [(c.task_id, c.answer) for c in WIRE_CASES]).to_dict()
        assert without_row_id(run) == without_row_id(api)
        assert {"perMutationKind", "staleSchemaUsedRate"} <= run["report"].keys()

        listing = structured(await client.call_tool("list_tasks", {}))
        assert (listing["tasks_digest"], listing["count"]) == (task_set.digest, len(TASKS))
        assert [t["id"] for t in listing["tasks"]] == sorted(TASKS_BY_ID)

        valid = structured(await client.call_tool("validate_task", {"task": TASKS[1]}))
        assert (valid["valid"], valid["task_id"]) == (True, W)
        invalid = structured(await client.call_tool("validate_task", {"task": {"id": "x"}}))
        assert (invalid["valid"], invalid["error"]) == (
            False,
            "task: task 'x' has no 'expected' call",
        )

        unknown = await client.call_tool("score", {"task_id": "no.such", "answer": "x"})
        assert "unknown_task: unknown task id 'no.such'" in error_text(unknown)


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gradeproxy.cli.mcp", *args],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "no such task file or folder", id="missing_file"),
        pytest.param('{"id": "x"}\n', "task 'x' has no 'expected' call", id="invalid_task"),
    ],
)
def test_unusable_task_file_exits_2_before_serving(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "tasks.jsonl"
    if content is not None:
        path.write_text(content)
    done = run_command("--tasks", str(path))
    assert done.returncode == 2
    assert done.stdout == ""  # stdout is the protocol channel
    assert message in done.stderr


def test_register_adds_the_mcp_command() -> None:
    parser = argparse.ArgumentParser()
    mcp_command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["mcp", "--tasks", "t.jsonl"])
    assert (args.command, args.tasks, args.handler) == ("mcp", Path("t.jsonl"), mcp_command.run)


def test_gradeproxy_cli_knows_the_mcp_command() -> None:
    """``gradeproxy mcp`` is registered and routes to the MCP server."""
    from gradeproxy import cli

    args = cli._build_parser().parse_args(["mcp"])
    assert args.handler is mcp_command.run


async def test_a_json_looking_answer_is_graded_as_the_string_it_is(task_set: TaskSet) -> None:
    """The SDK parses JSON-looking strings for non-str parameters; answer must stay a str."""
    async with in_process(task_set) as client:
        answer = dumps(FORECAST).decode()
        result = structured(await client.call_tool("score", {"task_id": W, "answer": answer}))
    assert (result["verdict"]["score"], result["verdict"]["reason_code"]) == (1, "match")


async def test_inline_task_needs_no_task_file() -> None:
    task = {"id": "inline.1", "expected": TICKET}
    async with in_process(None) as client:
        result = structured(
            await client.call_tool("score", {"task": task, "answer": dumps(TICKET).decode()})
        )
        listing = structured(await client.call_tool("list_tasks", {}))
    assert result["verdict"]["score"] == 1
    assert result["verdict"]["tasks_digest"] == digest_of([parse_task(task)])
    assert (listing["count"], listing["tasks"], listing["tasks_digest"]) == (0, [], None)


async def test_score_run_over_inline_tasks_reports_their_digest(task_set: TaskSet) -> None:
    answers = [{"task_id": W, "answer": dumps(FORECAST).decode()}]
    async with in_process(None) as client:
        run = structured(await client.call_tool("score_run", {"answers": answers, "tasks": TASKS}))
    assert run["report"]["tasks_digest"] == task_set.digest
    assert run["results"][0]["reason_code"] == "match"


@pytest.mark.parametrize(
    ("tool", "arguments", "loaded", "fragment"),
    [
        pytest.param(
            "score",
            {"answer": "x"},
            True,
            "missing_required_parameter: missing required parameter: 'task_id'",
            id="score_without_task",
        ),
        pytest.param(
            "score",
            {"task_id": W, "answer": None},
            True,
            "answer\n  Input should be a valid string",
            id="score_null_answer",
        ),
        pytest.param(
            "score",
            {"task_id": W, "answer": {"name": "get_forecast"}},
            True,
            "answer\n  Input should be a valid string",
            id="score_object_answer",
        ),
        pytest.param(
            "score",
            {"task_id": W, "task": TASKS[0], "answer": "x"},
            True,
            "invalid_value: send either 'task_id' or 'task', not both (param: task)",
            id="score_task_id_and_task",
        ),
        pytest.param(
            "score",
            {"task_id": W, "answer": "x"},
            False,
            "no_task_set: 'task_id' needs a loaded task set",
            id="score_task_id_without_task_file",
        ),
        pytest.param(
            "score",
            {
                "task": {"id": "t", "expected": FORECAST, "metadata": {"stale": FORECAST}},
                "answer": "",
            },
            False,
            "invalid_task: task: task 't': 'metadata.stale' equals 'expected'",
            id="score_invalid_inline_task",
        ),
        pytest.param(
            "score_run",
            {"answers": [{"task_id": W, "answer": "x"}, {"task_id": W, "answer": None}]},
            True,
            "invalid_type: 'answers[1].answer' must be a string (the raw model output), not null "
            "(param: answers[1].answer)",
            id="score_run_null_answer",
        ),
        pytest.param(
            "score_run",
            {"answers": [{"task_id": "no.such", "answer": "x"}]},
            True,
            "unknown_task: unknown task id 'no.such' in 'answers[0].task_id'",
            id="score_run_unknown_task",
        ),
        pytest.param(
            "score_run",
            {"answers": [], "tasks": [TASKS[0], TASKS[0]]},
            False,
            "invalid_task: tasks[1]: duplicate task id 'tickets.field_renamed.01' "
            "(first at tasks[0])",
            id="score_run_duplicate_inline_tasks",
        ),
    ],
)
async def test_bad_arguments_are_tool_errors_naming_the_field(
    task_set: TaskSet, tool: str, arguments: dict[str, Any], loaded: bool, fragment: str
) -> None:
    async with in_process(task_set if loaded else None) as client:
        result = await client.call_tool(tool, arguments)
    assert fragment in error_text(result)


@pytest.mark.parametrize(
    ("task", "valid", "error"),
    [
        pytest.param(TASKS[0], True, None, id="valid_task"),
        pytest.param(CHECKS_ONLY_TASK, True, None, id="valid_checks_only_task"),
        pytest.param(
            {**CHECKS_ONLY_TASK, "checks": [{"type": "python", "name": "p", "source": ""}]},
            False,
            "check type 'python' is not supported",
            id="refused_check_type",
        ),
        pytest.param({"id": "t", "expected": "not json"}, False, "is not a usable call", id="bad"),
        pytest.param(
            {"id": "t", "expected": FORECAST, "metadata": {"mutationKind": 1}},
            False,
            "'metadata.mutationKind' must be a string",
            id="kind_not_string",
        ),
    ],
)
async def test_validate_task_reports_instead_of_raising(
    task: dict[str, Any], valid: bool, error: str | None
) -> None:
    async with in_process(None) as client:
        result = structured(await client.call_tool("validate_task", {"task": task}))
    assert result["valid"] is valid
    if error is None:
        assert result["error"] is None
        assert result["task"]["id"] == task["id"]
        names = [check["name"] for check in result["checks"]]
        assert names == [check["name"] for check in task.get("checks", [{"name": "tool_call"}])]
    else:
        assert error in result["error"]
        assert result["task"] is None
