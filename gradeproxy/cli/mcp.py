"""``gradeproxy mcp``: the grader as an MCP server over stdio (the official ``mcp`` SDK).

Tools, each returning the same rows and reports as the Python API, the CLI, the HTTP routes and
the live proxy (every surface grades through :mod:`grader.engine`, on every check of a task):

    score(answer, task_id | task)   -> {"verdict": row}
    score_run(answers, tasks?)      -> {"results": [row, ...], "report": {... perMutationKind ...}}
    list_tasks()                    -> {"tasks_digest", "count", "tasks": [...]}
    validate_task(task)             -> {"valid", "error", "task_id", ...}

Arguments are read with :func:`grader.api.resolve_item`, like the HTTP routes, so a bad call
gets the same message naming the field, as an MCP tool error. ``answer`` is declared a string:
MCP is a typed wire, and a string-typed parameter also keeps the SDK from "helpfully" parsing
a JSON-looking answer into an object before the grader sees it. ``tools`` (the request's tool
definitions) is the offline context of a ``from_request`` schema; without it the task's own
``tools`` are used. MCP has no judge: a judge check's column is ``error`` and says so.

The ``mcp`` package is optional and imported only when the command runs, so ``grader`` and the
other commands never need it (and never import aiohttp). Also runnable as
``python -m gradeproxy.cli.mcp --tasks PATH``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grader.api import grade_all
from grader.loader import load_tasks, parse_task
from grader.score_requests import ScoreRequestError, request_digest, resolve_item, resolve_items
from grader.tasks import Task, TaskLoadError, TaskSet, build_task_set
from grader.version import GRADER_RULES_VERSION, __version__

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

SERVER_NAME = "gradeproxy"
INSTALL_HINT = "gradeproxy mcp needs the MCP SDK: pip install 'mcp>=2.3,<3'"

INSTRUCTIONS = """\
Grades LLM tool calls against tasks (an expected {"name", "arguments"} call, and optionally the
stale pre-migration call). score grades one raw answer string; score_run grades many and returns
a report with pass and staleSchemaUsed rates per mutation kind. list_tasks shows the loaded
task ids; validate_task checks a task definition before you use it inline.
"""


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "mcp",
        help="serve the grader to MCP clients over stdio",
        description="Run an MCP server on stdin/stdout exposing score, score_run, list_tasks "
        "and validate_task.",
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks",
        type=Path,
        default=None,
        help="task file or folder; without it only inline tasks can be scored",
    )


def run(args: argparse.Namespace) -> int:
    try:
        tasks = load_tasks(args.tasks) if args.tasks is not None else None
    except TaskLoadError as exc:
        print(f"gradeproxy mcp: error: {exc}", file=sys.stderr)
        return 2
    try:
        server = build_server(tasks)
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("mcp"):
            raise
        print(f"gradeproxy mcp: error: {INSTALL_HINT}", file=sys.stderr)
        return 2
    server.run("stdio")  # stdout is the protocol channel: nothing else may print there
    return 0


def _task_summary(task: Task) -> dict[str, Any]:
    description = task.metadata.get("description")
    return {
        "id": task.id,
        "mutationKind": task.mutation_kind,
        "tool": task.expected_call.name if task.expected_call is not None else None,
        "hasStale": task.stale is not None,
        "checks": [check.name for check in task.checks],
        "description": description if isinstance(description, str) else None,
    }


def validate_task_definition(task: object) -> dict[str, Any]:
    """What ``validate_task`` answers: never raises for a bad definition, it reports it.

    Validation is :func:`grader.parse_task`'s, which also builds the task's checks
    (docs/checks-contract.md), so a definition that loads here loads from a task file too.
    """
    try:
        parsed = parse_task(task, "task")
    except TaskLoadError as exc:
        return {"valid": False, "error": str(exc), "task_id": None, "task": None, "checks": None}
    return {
        "valid": True,
        "error": None,
        "task_id": parsed.id,
        "task": _task_summary(parsed),
        "checks": [{"name": c.name, "type": c.type, "digest": c.digest} for c in parsed.checks],
    }


def build_server(loaded: TaskSet | None) -> MCPServer:
    """The MCP server over the ``loaded`` task set (``None``: inline tasks only)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server: MCPServer = MCPServer(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )

    def request_error(error: ScoreRequestError) -> ToolError:
        param = f" (param: {error.param})" if error.param else ""
        return ToolError(f"{error.code}: {error.message}{param}")

    @server.tool()
    def score(
        answer: str,
        task_id: str = "",
        task: dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Grade one raw model answer against a loaded task (task_id) or an inline task
        definition (task: {"id", "expected", "metadata", "checks"?}), on every check.
        `tools`: the request's tool definitions, for a "from_request" schema check.
        Returns {"verdict": {result, passed, checks: [...], ...}}."""
        request: dict[str, Any] = {"answer": answer}
        if tools is not None:
            request["tools"] = tools
        if task is not None:
            request["task"] = task
        if task_id:  # "" is the schema's "not given"
            request["task_id"] = task_id
        try:
            pairs = [resolve_item(request, loaded)]
        except ScoreRequestError as error:
            raise request_error(error) from None
        return {"verdict": grade_all(pairs, request_digest(pairs, loaded)).results[0].to_dict()}

    @server.tool()
    def score_run(
        answers: list[dict[str, Any]], tasks: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Grade many answers, each {"task_id", "answer", "tools"?} (or {"task", "answer"}),
        against the loaded tasks or against `tasks` (a list of task definitions) when given.
        Returns one row per answer and a report with passRate, staleSchemaUsedRate,
        perMutationKind and perCheck."""
        task_set = loaded
        try:
            if tasks is not None:
                task_set = build_task_set(
                    parse_task(raw, f"tasks[{i}]") for i, raw in enumerate(tasks)
                )
            pairs = resolve_items(answers, task_set, where="answers")
        except TaskLoadError as exc:
            raise ToolError(f"invalid_task: {exc} (param: tasks)") from None
        except ScoreRequestError as error:
            raise request_error(error) from None
        return grade_all(pairs, request_digest(pairs, task_set)).to_dict()

    @server.tool()
    def list_tasks() -> dict[str, Any]:
        """The loaded task set: its digest and each task's id, mutation kind and tool."""
        if loaded is None:
            return {
                "tasks_digest": None,
                "count": 0,
                "tasks": [],
                "grader_rules_version": GRADER_RULES_VERSION,
            }
        return {
            "tasks_digest": loaded.digest,
            "count": len(loaded),
            "tasks": [_task_summary(t) for t in sorted(loaded, key=lambda t: t.id)],
            "grader_rules_version": GRADER_RULES_VERSION,
        }

    @server.tool()
    def validate_task(task: dict[str, Any]) -> dict[str, Any]:
        """Check a task definition (one JSONL line of a task file) without loading it.
        Returns {"valid": bool, "error": str | null, "task_id", "task", "checks"}."""
        return validate_task_definition(task)

    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gradeproxy mcp", description="Serve the grader to MCP clients over stdio."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
