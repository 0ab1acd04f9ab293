"""``gradeproxy replay``: grade recorded agent episodes against their tasks' grader records.

Each line of ``--episodes`` is one episode: ``task_id``, and its history as an OpenAI chat
``messages`` array, Responses API ``input`` items (``output`` items of the last response may
follow in ``output``), or plain ``events`` ``[{"name", "arguments", "result"}]`` with ``final``
(the answer text). ``episode_id``, ``role``, ``run``, ``model`` and ``meta`` are optional run
metadata, copied into the row. Rows are the proxy's episode rows (docs/episodes.md), as JSONL,
or Parquet when ``--out`` ends in ``.parquet`` (needs pyarrow: ``gradeproxy[parquet]``).

A line that cannot be graded (not JSON or cut off, an unknown task, a task without a grader
record, a malformed or incomplete history) becomes an ``error`` episode row in its place, with
an input reason code (grader/intake.py) and its ``file:line`` message; it is in no pass rate
and counted apart, by reason, in the report's ``input`` section. Exit 0 every line graded, 1
some were error rows, 2 nothing usable (grader/intake.py); ``--strict`` refuses the run at the
first bad line (exit 2, nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gradeproxy.cli._io import InputError, add_strict, jsonl_bytes, write_atomically
from gradeproxy.cli.parquet import is_parquet, require_pyarrow, write_table
from grader.checks import Judge
from grader.episodes.grade import episode_error_row, episode_row, judge_cause, needs_judge
from grader.episodes.log import EpisodeLog, from_chat, from_events, from_responses
from grader.episodes.report import EpisodeReport
from grader.intake import InputReason, Intake, Problem, UnusableInputError
from grader.json import dumps
from grader.loader import load_tasks
from grader.tasks import Task, TaskLoadError, TaskSet

_HISTORY = ("messages", "input", "events")
_META = ("run", "model", "meta")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "replay",
        help="grade recorded agent episodes against their grader records",
        description="Replay each episode's tool calls against its task's snapshot and print "
        "per-column pass rates.",
    )
    parser.add_argument("--tasks", required=True, type=Path, help="task file or folder")
    parser.add_argument("--episodes", required=True, type=Path, help="JSONL, one episode a line")
    parser.add_argument(
        "--out",
        type=Path,
        help="write one episode row per line: JSONL, or Parquet for a .parquet name "
        "(needs gradeproxy[parquet])",
    )
    parser.add_argument("--report", type=Path, help="write the report (JSON)")
    parser.add_argument(
        "--judge", type=Path, help="judge config (YAML/JSON) for a judge-form root_cause"
    )
    add_strict(parser, "line")
    parser.set_defaults(handler=run)


def episode_log(line: dict[str, Any], where: str) -> EpisodeLog:
    """The line's history as a log; :class:`InputError` unless exactly one shape is given."""
    given = [key for key in _HISTORY if key in line]
    if len(given) != 1 or not isinstance(line[given[0]], list):
        raise InputError(f"{where}: give exactly one of 'messages', 'input', 'events' (a list)")
    final = line.get("final")
    if final is not None and not isinstance(final, str):
        raise InputError(f"{where}: 'final' must be a string")
    if given[0] == "messages":
        log = from_chat(line["messages"])
    elif given[0] == "input":
        output = line.get("output", [])
        if not isinstance(output, list):
            raise InputError(f"{where}: 'output' must be a list of Responses output items")
        log = from_responses([*line["input"], *output])
    else:
        log = from_events(line["events"], final)
    if log.incomplete:  # never graded as if whole (docs/episodes.md)
        raise IncompleteHistoryError(
            f"{where}: incomplete history: a tool result whose call is not in it "
            "(a trimmed or summarised history is never graded as if whole)"
        )
    return log


class IncompleteHistoryError(InputError):
    """The history holds a tool result whose call is not in it."""


Episode = tuple[Task, EpisodeLog, dict[str, Any]]
# A line that cannot be graded: its problem, its task when known, the line when readable.
Refused = tuple[Problem, Task | None, dict[str, Any] | None]


def read_episodes(path: Path, tasks: TaskSet, intake: Intake) -> list[Episode | Refused]:
    """Every line in order: ready to grade, or refused with its problem (an error row)."""
    out: list[Episode | Refused] = []
    for lineno, line in intake.lines(path, unreadable=True):
        if isinstance(line, Problem):
            out.append((line, None, None))
            continue
        if not isinstance(line, dict):
            message = "expected an object with 'task_id' and a history"
            out.append((intake.problem(path, lineno, "not_an_object", message), None, None))
            continue
        task_id = line.get("task_id")
        task = tasks.get(task_id) if isinstance(task_id, str) else None
        refusal = _refusal(line, task, f"{path}:{lineno}")
        if isinstance(refusal, EpisodeLog) and task is not None:
            out.append((task, refusal, line))
            continue
        code, message = refusal if isinstance(refusal, tuple) else ("unknown_task", "")
        out.append((intake.problem(path, lineno, code, message), task, line))
    return out


def _refusal(
    line: dict[str, Any], task: Task | None, where: str
) -> EpisodeLog | tuple[InputReason, str]:
    """The line's log, or why it cannot be graded (a reason code and the message)."""
    task_id = line.get("task_id")
    if task is None:
        return "unknown_task", f"unknown task id {task_id!r}"
    if task.episode is None:
        return "no_grader_record", f"task {task_id!r} has no grader record ('episode')"
    for key in ("episode_id", "role"):
        if line.get(key) is not None and not isinstance(line[key], str):
            return "bad_field", f"{key!r} must be a string"
    try:
        return episode_log(line, where)
    except IncompleteHistoryError as exc:
        return "history_incomplete", str(exc).removeprefix(f"{where}: ")
    except InputError as exc:
        return "history_malformed", str(exc).removeprefix(f"{where}: ")


def grade_line(task: Task, log: EpisodeLog, line: dict[str, Any], digest: str) -> dict[str, Any]:
    assert task.episode is not None  # read_episodes refused tasks without a record
    row = episode_row(
        task.id,
        task.episode,
        log,
        tasks_digest=digest,
        item=_item(task),
        role=line.get("role"),
        episode_id=line.get("episode_id"),
    )
    row.update({key: line[key] for key in _META if key in line})
    return row


def _item(task: Task) -> dict[str, Any] | None:
    item = task.raw.get("item")
    return item if isinstance(item, dict) else None


async def judge_rows(
    episodes: list[tuple[Task, EpisodeLog, dict[str, Any]]],
    rows: list[dict[str, Any]],
    judge: Judge,
) -> None:
    """Settle judge-form ``cause_correct`` columns, concurrently within the judge's limit."""
    import asyncio

    await asyncio.gather(
        *(
            judge_cause(row, task.episode, log, judge, task.item)
            for (task, log, _), row in zip(episodes, rows, strict=True)
            if task.episode is not None
        )
    )


def parquet_table(rows: list[dict[str, Any]]) -> Any:
    """The rows as an Arrow table: scalar fields as typed columns (join them to run metadata),
    nested ones (``columns``, ``replay_problems``, ``meta``) as their JSON text, so rows whose
    nested shapes differ still share one schema."""
    import pyarrow as pa  # optional: gradeproxy[parquet]

    flat = [
        {k: dumps(v).decode() if isinstance(v, dict | list) else v for k, v in row.items()}
        for row in rows
    ]
    # Every field any row has (from_pylist would take the first row's keys alone).
    keys = list(dict.fromkeys(key for row in flat for key in row))
    return pa.Table.from_pydict({key: [row.get(key) for row in flat] for key in keys})


def run(args: argparse.Namespace) -> int:
    judge = None
    intake = Intake("replay", strict=args.strict, what="error row")
    try:
        if args.out is not None and is_parquet(args.out):
            require_pyarrow()  # refused before any episode is replayed, as grade's
        if args.judge is not None:
            from gradeproxy.cli.validate import load_judge  # the aiohttp judge, as validate-tasks'

            judge = load_judge(args.judge)
        tasks = load_tasks(args.tasks)
        entries = read_episodes(args.episodes, tasks, intake)
    except (TaskLoadError, InputError, UnusableInputError, ValueError) as exc:
        print(f"gradeproxy replay: error: {exc}", file=sys.stderr)
        return 2
    episodes = [e for e in entries if not isinstance(e[0], Problem)]
    graded = [grade_line(task, log, line, tasks.digest) for task, log, line in episodes]
    if judge is not None and any(
        task.episode is not None and needs_judge(task.episode, log) for task, log, _ in episodes
    ):
        import asyncio

        asyncio.run(judge_rows(episodes, graded, judge))
    report = EpisodeReport(tasks.digest)
    report.extend(graded)
    done = iter(graded)
    rows = [
        next(done) if not isinstance(e[0], Problem) else _error_row(e, tasks.digest)
        for e in entries
    ]
    try:
        if args.out is not None and is_parquet(args.out):
            write_table(args.out, parquet_table(rows))
        elif args.out is not None:
            write_atomically(args.out, jsonl_bytes(rows))
        if args.report is not None:
            data = {**report.to_dict(), "input": intake.to_dict()}
            write_atomically(args.report, [dumps(data) + b"\n"])
    except OSError as exc:
        print(f"gradeproxy replay: error: cannot write output: {exc}", file=sys.stderr)
        return 2
    print(intake.summary(f"{len(graded)} graded"))
    print(report.render_table())
    intake.warn()
    return intake.exit_code()


def _error_row(entry: Episode | Refused, digest: str) -> dict[str, Any]:
    problem, task, line = entry
    assert isinstance(problem, Problem)
    line = line if isinstance(line, dict) else {}
    task_id, episode_id, role = (line.get(k) for k in ("task_id", "episode_id", "role"))
    row = episode_error_row(
        task_id if isinstance(task_id, str) else None,
        task.episode if isinstance(task, Task) else None,
        problem.reason_code,
        problem.text(),
        tasks_digest=digest,
        episode_id=episode_id if isinstance(episode_id, str) else None,
        role=role if isinstance(role, str) else None,
    )
    row.update({key: line[key] for key in _META if key in line})
    return row
