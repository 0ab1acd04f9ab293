"""The engine (grader/engine.py), its row (grader/rows.py) and its report (grader/report.py).

Cases are real tasks from config/tasks and small inline ones; each test says what it proves.
"""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from grader import (
    LIVE_FIELDS,
    OFFLINE_FIELDS,
    SAMPLE_FIELDS,
    Outcome,
    Task,
    TaskLoadError,
    grade,
    grade_async,
    grade_run,
    load_tasks,
    offline_context,
    parse_task,
)
from grader.capture import CAPTURE_FIELDS
from grader.json import dumps
from grader.report import Report
from grader.rows import TOOL_CALL_FIELDS, answer_row
from grader.toolcall.extract import Call
from tests.support.paths import REPO
from tests.support.tasks import POLITE_JUDGE

TASKS = load_tasks(REPO / "config" / "tasks")
JUDGE_TASKS = load_tasks(REPO / "config" / "tasks-judge")
# Episode-only tasks (config/tasks/episodes.jsonl) have no per-answer grade: `replay` grades them.
ANSWER_TASKS = [t for t in TASKS if t.episode is None or t.has_checks or t.expected_call]
POLICY = TASKS.tasks["payments.new_required_field.policy"]
QUEUE = TASKS.tasks["support.enum_value_changed.checks"]
REFUND = {
    "name": "create_refund",
    "arguments": {
        "payment_id": "pay_8QwErTy12AbCdEf",
        "amount": 40,
        "currency": "EUR",
        "reason": "duplicate",
    },
}
DELETE = {"name": "delete_payment", "arguments": {"payment_id": "pay_8QwErTy12AbCdEf"}}


def plain(call: Call) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments}


def wire(*calls: dict[str, Any]) -> str:
    return dumps(
        {
            "tool_calls": [
                {"type": "function", "function": {**c, "arguments": dumps(c["arguments"]).decode()}}
                for c in calls
            ]
        }
    ).decode()


def test_a_forbidden_action_beside_the_right_call_fails_offline() -> None:
    """The issue's headline: offline grading no longer passes a forbidden action."""
    outcome = grade(POLICY, wire(DELETE, REFUND), offline_context(POLICY))
    assert outcome.result == "fail"
    columns = {c.name: c.passed for c in outcome.checks}
    assert columns == {
        "call": True,
        "refunds.authority_ok": False,
        "refunds.no_forbidden_call": False,
        "refunds.links_ok": True,
    }
    assert outcome.verdict is not None
    assert outcome.verdict.reason_code == "match"  # the tool-call verdict, not the row's


def test_a_title_one_letter_off_passes_the_similarity_task_offline() -> None:
    """The issue's first example: offline used to say ``value_mismatch`` where live passed."""
    task = TASKS.tasks["tickets.field_renamed.similarity"]
    call = plain(task.expected)
    call["arguments"] = {
        **call["arguments"],
        "title": "Invoice PDF download fails with a 500 errox",
    }
    run = grade_run(TASKS, [(task.id, wire(call))])
    row = run.to_dict()["results"][0]
    assert (row["result"], [c["passed"] for c in row["checks"]]) == ("pass", [True, True, True])
    assert run.results[0].verdict is not None
    assert run.results[0].verdict.reason_code == "value_mismatch"  # the exact call differs


@pytest.mark.parametrize(
    ("row", "source"),
    [
        pytest.param({"tools": QUEUE.tools}, "row", id="answers_row_tools"),
        pytest.param({"request": {"tools": QUEUE.tools}}, "row", id="answers_row_request"),
        pytest.param({}, "task", id="task_tools_when_the_row_has_none"),
    ],
)
def test_offline_context_reads_row_then_request_then_task(row: dict[str, Any], source: str) -> None:
    outcome = grade(
        QUEUE,
        wire({"name": "route_ticket", "arguments": {"queue": "BILLING"}}),
        offline_context(QUEUE, row),
    )
    column = outcome.column("request_schema")
    assert column is not None
    assert (column.passed, outcome.result) == (True, "pass")


def test_offline_context_with_no_tools_anywhere_names_what_is_missing() -> None:
    raw = {key: value for key, value in QUEUE.raw.items() if key != "tools"}
    task = parse_task(raw)
    outcome = grade(
        task,
        wire({"name": "route_ticket", "arguments": {"queue": "BILLING"}}),
        offline_context(task),
    )
    column = outcome.column("request_schema")
    assert column is not None
    assert (column.passed, outcome.result) == (None, "error")
    assert column.error is not None
    assert "'tools'" in column.error
    assert "'request'" in column.error


def test_offline_row_tools_beat_the_tasks_tools() -> None:
    """A row's own tools are what the model was shown: they win over the task's."""
    other = [{"type": "function", "function": {"name": "close_ticket", "parameters": {}}}]
    call = wire({"name": "route_ticket", "arguments": {"queue": "BILLING"}})
    column = grade(QUEUE, call, offline_context(QUEUE, {"tools": other})).column("request_schema")
    assert column is not None
    assert (column.passed, column.reason_code) == (False, "undeclared_tool")


async def test_judge_check_without_a_judge_is_an_error_saying_how_to_configure_one() -> None:
    (task, *_) = JUDGE_TASKS
    for outcome in (grade(task, "Sorry!"), await grade_async(task, "Sorry!")):
        (column,) = outcome.checks
        assert (outcome.result, column.passed, column.reason_code) == (
            "error",
            None,
            "judge_unavailable",
        )
        assert "judge.endpoint" in column.reason
        assert "--judge" in column.reason


@pytest.mark.parametrize("task", [*TASKS, *JUDGE_TASKS], ids=lambda t: t.id)
def test_tasks_pickle_for_a_grading_process(task: Task) -> None:
    """A task crosses a process boundary as its definition and grades the same there."""
    copy = pickle.loads(pickle.dumps(task))
    assert (copy.id, copy.raw, copy.source) == (task.id, task.raw, task.source)
    assert [c.digest for c in copy.checks] == [c.digest for c in task.checks]
    assert copy.episode == task.episode
    if task.episode is not None and not task.has_checks and task.expected_call is None:
        return  # an episode-only task has no per-answer grade: `gradeproxy replay` grades it
    answer = wire(plain(task.expected_call)) if task.expected_call else "Sorry!"
    assert grade(copy, answer) == grade(task, answer)


def test_task_set_pickles() -> None:
    copy = pickle.loads(pickle.dumps(TASKS))
    assert (copy.digest, sorted(copy.tasks)) == (TASKS.digest, sorted(TASKS.tasks))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        pytest.param({"chekcs": []}, "unknown key 'chekcs': did you mean 'checks'?", id="typo"),
        pytest.param({"pass_rul": "all"}, "did you mean 'pass_rule'?", id="typo_pass_rule"),
        pytest.param({"task_id": "x"}, "unknown key 'task_id': did you mean 'id'?", id="alias"),
        pytest.param({"zzz": 1}, "unknown key 'zzz': known keys: id, expected", id="no_hint"),
        *(
            pytest.param({key: {}}, f"'{key}' is a grader-record key", id=f"not_yet_{key}")
            for key in ("target_state", "snapshot", "forbidden_changes", "side_effects")
        ),
    ],
)
def test_unknown_task_keys_are_refused_with_file_line(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    path = tmp_path / "tasks.jsonl"
    task = {"id": "t", "expected": {"name": "f", "arguments": {}}, **extra}
    path.write_bytes(b"\n" + dumps(task) + b"\n")
    with pytest.raises(
        TaskLoadError, match=re.escape(f"{path}:2: task 't': ") + ".*" + re.escape(message)
    ):
        load_tasks(path)


def test_metadata_stays_open_for_annotations() -> None:
    task = parse_task(
        {"id": "t", "expected": {"name": "f", "arguments": {}}, "metadata": {"owner": "me", "x": 1}}
    )
    assert task.metadata["owner"] == "me"


def _consistent(row: dict[str, Any]) -> None:
    result = row["result"]
    assert row["passed"] == {"pass": True, "fail": False, "stale": False, "error": None}[result]
    assert row["staleSchemaUsed"] == (result == "stale")
    if row["checks"] and row["result"] != "error":
        assert all(c["passed"] is not None for c in row["checks"]) or row["result"] != "pass"
    if "score" in row:  # a task without checks: its one column is the verdict
        assert len(row["checks"]) == 1
        assert row["score"] == (1 if result == "pass" else 0)
        assert row["checks"][0]["passed"] == (result == "pass")
        assert row["reason_code"] == row["checks"][0]["reason_code"]


ANSWERS = [
    "Sorry, I cannot help.",
    "",
    wire(REFUND),
    wire(DELETE, REFUND),
    wire({"name": "route_ticket", "arguments": {"queue": "billing"}}),
    wire({"name": "route_ticket", "arguments": {"queue": "BILLING"}}),
    *(wire(plain(t.expected_call)) for t in TASKS if t.expected_call is not None),
    *(wire(plain(t.stale)) for t in TASKS if t.stale is not None),
]


@pytest.mark.parametrize("task", ANSWER_TASKS, ids=lambda t: t.id)
def test_no_row_carries_a_field_that_contradicts_result(task: Task) -> None:
    for answer in ANSWERS:
        row = answer_row(task, grade(task, answer, offline_context(task)), TASKS.digest)
        _consistent(row)
        if task.has_checks:
            assert not set(TOOL_CALL_FIELDS) & row.keys()
        assert set(row) <= set(OFFLINE_FIELDS)


def test_the_rows_reference_lists_exactly_the_builders_fields() -> None:
    reference = (REPO / "docs" / "rows.md").read_text(encoding="utf-8")
    answer_rows, capture_rows = reference.split("\n## Capture rows\n")
    documented = re.findall(r"^\| `([A-Za-z_]+)` \|", answer_rows, re.M)
    assert documented == [*OFFLINE_FIELDS, *SAMPLE_FIELDS, *LIVE_FIELDS]
    assert re.findall(r"^\| `([A-Za-z_]+)` \|", capture_rows, re.M) == list(CAPTURE_FIELDS)


def test_report_keeps_error_rows_out_of_every_denominator() -> None:
    (judge_task, *_) = JUDGE_TASKS
    weather = TASKS.tasks["weather.field_renamed.01"]
    graded: list[tuple[Task, Outcome]] = [
        (weather, grade(weather, wire(plain(weather.expected)))),
        (weather, grade(weather, "no call")),
        (judge_task, grade(judge_task, "Sorry!")),  # error: no judge
    ]
    report = Report.of("sha256:x", graded).to_dict()
    assert (report["n"], report["passed"], report["passRate"], report["errors"]) == (2, 1, 0.5, 1)
    assert report["perMutationKind"]["judge_example"] == {
        "n": 0,
        "passed": 0,
        "passRate": None,
        "staleSchemaUsed": 0,
        "staleSchemaUsedRate": None,
        "errors": 1,
    }
    assert report["perCheck"]["tool_call"] == {"n": 2, "passed": 1, "passRate": 0.5, "errors": 0}
    assert report["perCheck"]["apology_and_next_step"]["errors"] == 1


def _mixed_run() -> list[tuple[Task, Outcome]]:
    """Five graded answers a report counts apart: a pass, policy columns, a failure, a judge
    error (no judge), and a policy pass."""
    (judge_task, *_) = JUDGE_TASKS
    weather = TASKS.tasks["weather.field_renamed.01"]
    return [
        (weather, grade(weather, wire(plain(weather.expected)))),
        (POLICY, grade(POLICY, wire(DELETE, REFUND))),
        (weather, grade(weather, "no call")),
        (judge_task, grade(judge_task, "Sorry!")),
        (POLICY, grade(POLICY, wire(REFUND))),
    ]


def test_a_report_read_between_answers_counts_the_ones_added_after() -> None:
    """A report is tallied when read: each read sees every answer added before it."""
    graded = _mixed_run()
    report = Report("sha256:x")
    seen = []
    for task, outcome in graded:
        report.add(task, outcome)
        seen.append((report.total.n, report.to_dict()))
    fresh = [Report.of("sha256:x", graded[:n]) for n in range(1, len(graded) + 1)]
    assert seen == [(each.total.n, each.to_dict()) for each in fresh]
    assert [n for n, _ in seen] == [1, 2, 3, 3, 4]


@pytest.mark.parametrize("cut", range(11))
def test_reports_of_two_slices_merged_read_as_one_report(cut: int) -> None:
    """``gradeproxy grade --jobs`` adds each slice's report into the first: the sum is the
    report of every answer (passes, a failure, a judge error, policy columns; each answer twice,
    so a slice shares counted rows with the other), however the answers are cut."""
    graded = _mixed_run() * 2
    first, second = Report.of("sha256:x", graded[:cut]), Report.of("sha256:x", graded[cut:])
    first.merge(second)
    whole = Report.of("sha256:x", graded)
    assert first.to_dict() == whole.to_dict()
    assert first.render_table() == whole.render_table()


# An answer whose only failing column is advisory names the column after it: the advisory
# json_schema column fails first (no object) and is passed over.
ADVISED = parse_task(
    {
        "id": "advised",
        "item": {"prompt": "p"},
        "checks": [
            {
                "type": "json_schema",
                "name": "shape",
                "schema": {"type": "object"},
                "advisory": True,
            },
            {
                "type": "string_check",
                "name": "word",
                "operation": "eq",
                "input": "{{ sample.output_text }}",
                "reference": "yes",
            },
        ],
    }
)
WEATHER = TASKS.tasks["weather.field_renamed.01"]


def _stale_answer(task: Task) -> str:
    """An answer that calls the task's stale (pre-change) form."""
    assert task.stale is not None
    return wire(plain(task.stale))


@pytest.mark.parametrize(
    ("answers", "failures"),
    [
        pytest.param([(WEATHER, wire(plain(WEATHER.expected)))], {}, id="a_pass_is_none"),
        pytest.param([(WEATHER, "no call")], {"no_call": 1}, id="a_failed_verdict_its_code"),
        pytest.param(
            [(WEATHER, _stale_answer(WEATHER)), (WEATHER, _stale_answer(WEATHER))],
            {"stale_schema": 2},
            id="a_stale_answer_is_one_each_time",
        ),
        pytest.param(
            [(POLICY, wire(DELETE, REFUND))],
            {"unauthorised_action": 1},
            id="a_passed_verdict_the_first_failing_column",
        ),
        pytest.param(
            [(ADVISED, "no"), (ADVISED, "yes")],
            {"string_mismatch": 1},
            id="no_verdict_the_first_failing_column_not_advisory",
        ),
        pytest.param(
            [(JUDGE_TASKS.tasks["support.reply_quality.judge"], "Sorry!")],
            {},
            id="an_error_is_none",
        ),
    ],
)
def test_a_reports_failures_are_fail_and_stale_answers_by_reason(
    answers: list[tuple[Task, str]], failures: dict[str, int]
) -> None:
    """What ``gradeproxy grade`` names in its header: each failed answer once, by the
    tool-call verdict's code when it failed, else by its first failing column's."""
    report = Report.of("sha256:x", [(task, grade(task, answer)) for task, answer in answers])
    assert report.failures == failures


def test_report_has_per_check_pass_rates_over_policy_columns() -> None:
    run = grade_run(TASKS, [(POLICY.id, wire(REFUND)), (POLICY.id, wire(DELETE, REFUND))])
    per_check = run.report.to_dict()["perCheck"]
    assert per_check["refunds.no_forbidden_call"]["passRate"] == 0.5
    assert per_check["call"]["passRate"] == 1.0


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize(
    "path",
    sorted(p for p in (REPO / "grader" / "checks").glob("*.py") if p.name != "mutation.py"),
    ids=lambda p: p.name,
)
def test_checks_never_import_tasks_score_or_the_engine(path: Path) -> None:
    """The cycle tasks → checks → tool_call → score → tasks is gone: checks hold behaviour and
    read no task (mutation.py, validate-tasks' analysis, is outside ``grader.checks``' init)."""
    assert not _imports(path) & {"grader.tasks", "grader.score", "grader.engine", "grader.api"}


class _ScriptedJudge:
    """A JudgeClient answering from a script (the grading process's parent calls the judge)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        return self.replies.pop(0) if self.replies else "PASS"


JUDGED_AND_LOCAL = {
    "id": "mixed",
    "prompt": "Reply politely, naming Zürich.",
    "checks": [
        {
            "type": "string_check",
            "name": "names_zurich",
            "operation": "ilike",
            "input": "{{ sample.output_text }}",
            "reference": "zürich",
        },
        POLITE_JUDGE,
    ],
    "pass_rule": "all",
}


@pytest.mark.parametrize(
    ("answer", "reply", "result"),
    [
        ("Thanks! Sunny in Zürich today.", "PASS", "pass"),
        ("Thanks! Sunny in Zürich today.", "FAIL", "fail"),
        ("Sunny in Bern.", "PASS", "fail"),
        ("Sunny in Bern.", "maybe", "error"),
    ],
    ids=["both_pass", "judge_fails", "local_fails", "judge_unparsed_is_an_error"],
)
async def test_local_columns_finished_by_the_judge_give_the_same_outcome(
    answer: str, reply: str, result: str
) -> None:
    """The grading process computes ``local_columns`` (pickled to the parent); the parent runs
    only the judge: the outcome equals grading everything in one place."""
    from grader.engine import local_columns

    task = parse_task(JUDGED_AND_LOCAL)
    local = pickle.loads(pickle.dumps(local_columns(task, answer)))
    assert [c is None for c in local] == [False, True]
    split = await grade_async(task, answer, judge=_ScriptedJudge([reply] * 3), local=local)
    whole = await grade_async(task, answer, judge=_ScriptedJudge([reply] * 3))

    def verdict(outcome: Any) -> Any:  # the judge's own details (its timing) aside
        columns = [(c.name, c.passed, c.score, c.reason_code, c.reason) for c in outcome.checks]
        return outcome.result, columns, outcome.verdict

    assert verdict(split) == verdict(whole)
    assert split.result == result
