"""``gradeproxy validate-tasks``: schema validation plus seed 003's fixture mutation test.

Loads the task files (every check definition validated, errors as ``file:line``), then for every
column of every check grades the reference answer and its mutations
(``grader.mutation``). Judge checks are skipped unless ``--judge CONFIG`` names a judge
(a YAML or JSON file with the ``JudgeConfig`` keys); then they call it.

Exit 0 when every column is connected; 1 when a task is invalid or any column is
``disconnected``, ``reference_fails`` or ``fixture_mismatch``; 2 on unusable input (no such
path, an unreadable or invalid judge config).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from grader.checks.judge import Judge, JudgeConfig
from grader.json import dumps
from grader.loader import load_tasks
from grader.mutation import PROBLEMS, Finding, analyse_task
from grader.tasks import TaskLoadError, TaskSet

_SHOWN = {"ok", "info", "skipped"} | set(PROBLEMS)


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "validate-tasks",
        help="validate task files and prove every check reads the answer",
        description="Validate task files, then grade each check's reference answer and its "
        "mutations (empty, unrelated, per-value changes, fixtures); a check whose verdict no "
        "mutation changes is reported DISCONNECTED.",
    )
    parser.add_argument("path", type=Path, help="task file or folder")
    parser.add_argument("--judge", type=Path, help="judge config (YAML/JSON) to run judge checks")
    parser.add_argument("--json", action="store_true", help="print findings as JSONL")
    parser.add_argument("--quiet", action="store_true", help="print only problems")
    parser.set_defaults(handler=run)


def load_judge(path: Path) -> Judge:
    """The judge a config file names, over ``proxy.judge_client`` (aiohttp, imported only
    here, when a command is given ``--judge``); raise ``ValueError`` with a clear message."""
    import yaml  # lazily too: only a judge config is YAML

    from proxy.judge_client import AiohttpJudgeClient  # lazily: the one judge client

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read judge config: {exc}") from None
    if isinstance(raw, dict) and isinstance(raw.get("judge"), dict):
        raw = raw["judge"]
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: judge config must be a mapping of JudgeConfig keys")
    try:
        config = JudgeConfig.from_mapping(raw)
        return Judge(AiohttpJudgeClient.from_config(config), config)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


async def analyse(tasks: TaskSet, judge: Judge | None) -> list[Finding]:
    findings: list[Finding] = []
    for task in tasks:
        findings += await analyse_task(task, judge)
    return findings


def run(args: argparse.Namespace) -> int:
    if not args.path.exists():
        print(
            f"gradeproxy validate-tasks: error: {args.path}: no such file or folder",
            file=sys.stderr,
        )
        return 2
    judge = None
    if args.judge is not None:
        try:
            judge = load_judge(args.judge)
        except ValueError as exc:
            print(f"gradeproxy validate-tasks: error: {exc}", file=sys.stderr)
            return 2
    try:
        tasks = load_tasks(args.path)
    except TaskLoadError as exc:
        print(f"INVALID  {exc}")
        return 1
    import asyncio

    findings = asyncio.run(analyse(tasks, judge))
    problems = [f for f in findings if f.level in PROBLEMS]
    for finding in findings:
        if args.quiet and finding.level not in PROBLEMS:
            continue
        if args.json:
            print(
                dumps(
                    {
                        "task": finding.task_id,
                        "column": finding.column,
                        "level": finding.level,
                        "message": finding.message,
                    }
                ).decode()
            )
        else:
            print(
                f"{finding.level.upper():<16} {finding.task_id}  {finding.column}: "
                f"{finding.message}"
            )
    columns = {(f.task_id, f.column) for f in findings if f.level != "info"}
    summary = (
        f"{len(tasks)} task(s), {len(columns)} column(s): "
        f"{len(problems)} problem(s), "
        f"{sum(f.level == 'skipped' for f in findings)} skipped"
    )
    print(summary, file=sys.stderr)
    return 1 if problems else 0
