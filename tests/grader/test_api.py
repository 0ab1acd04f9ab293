"""The Python API (``grader.api``, re-exported by ``grader``): score, grade_run, parse_task."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

from grader import (
    RunResult,
    TaskHasChecksError,
    TaskLoadError,
    TaskSet,
    UnknownTaskError,
    grade_run,
    load_tasks,
    parse_task,
    score,
)
from grader.api import digest_of, grade_all, request_digest
from tests.support.rows import without_row_id
from tests.support.surfaces import (
    CASE_IDS,
    CASES,
    CHECKS_ONLY_TASK,
    TASKS,
    TASKS_BY_ID,
    TICKET,
    Case,
    write_tasks,
)


@pytest.fixture(scope="module")
def task_set(tmp_path_factory: pytest.TempPathFactory) -> TaskSet:
    return load_tasks(write_tasks(tmp_path_factory.mktemp("api") / "tasks.jsonl"))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_score_gives_the_table_verdict(case: Case) -> None:
    """score() takes untyped JSON: strings are graded, anything else scores 0 not_a_string."""
    verdict = score(parse_task(TASKS_BY_ID[case.task_id]), case.answer)
    assert (verdict.score, verdict.stale_schema_used, verdict.reason_code, verdict.path) == (
        case.score,
        case.stale,
        case.reason_code,
        case.path,
    )


def test_grade_run_rows_follow_input_order_with_the_run_report(task_set: TaskSet) -> None:
    """One row per answer, in order; the report carries perMutationKind and the stale rate."""
    result = grade_run(task_set, [(case.task_id, case.answer) for case in CASES])
    assert isinstance(result, RunResult)
    assert len(result) == len(CASES)
    rows = result.to_dict()["results"]
    assert [(r["task_id"], r["score"], r["reason_code"]) for r in rows] == [
        (c.task_id, c.score, c.reason_code) for c in CASES
    ]
    report = result.to_dict()["report"]
    passed = sum(c.score for c in CASES)
    stale = sum(c.stale for c in CASES)
    assert (report["n"], report["passed"], report["staleSchemaUsed"]) == (len(CASES), passed, stale)
    assert report["staleSchemaUsedRate"] == stale / len(CASES)
    assert set(report["perMutationKind"]) == {"(none)", "enum_value_changed", "field_renamed"}
    renamed = [c for c in CASES if c.task_id == "tickets.field_renamed.01"]
    assert report["perMutationKind"]["field_renamed"] == {
        "n": len(renamed),
        "passed": sum(c.score for c in renamed),
        "passRate": sum(c.score for c in renamed) / len(renamed),
        "staleSchemaUsed": sum(c.stale for c in renamed),
        "staleSchemaUsedRate": sum(c.stale for c in renamed) / len(renamed),
        "errors": 0,
    }
    assert report["tasks_digest"] == task_set.digest


def test_grade_run_over_plain_tasks_matches_the_loaded_file(task_set: TaskSet) -> None:
    """An iterable of Task becomes a task set with the same digest the file gets."""
    answers = [(case.task_id, case.answer) for case in CASES]
    from_file = grade_run(task_set, answers)
    from_dicts = grade_run((parse_task(raw) for raw in TASKS), answers)
    assert without_row_id(from_dicts.to_dict()) == without_row_id(from_file.to_dict())


def test_unknown_task_id_raises_before_anything_is_graded(task_set: TaskSet) -> None:
    """The third answer names no task: UnknownTaskError says which answer and which id."""
    graded: list[Any] = []

    def answers() -> Any:
        for item in [(CASES[0].task_id, "a"), (CASES[1].task_id, "b"), ("no.such.task", "c")]:
            graded.append(item)
            yield item

    with pytest.raises(UnknownTaskError) as info:
        grade_run(task_set, answers())
    assert (
        str(info.value) == "answers[2]: unknown task id 'no.such.task' (the task set holds 3 tasks)"
    )
    assert (info.value.task_id, info.value.index) == ("no.such.task", 2)
    assert isinstance(info.value, LookupError)


def test_non_string_task_id_is_unknown(task_set: TaskSet) -> None:
    with pytest.raises(UnknownTaskError, match=r"answers\[0\]: unknown task id 7"):
        grade_run(task_set, [(7, "x")])  # type: ignore[list-item]


@pytest.mark.parametrize(("answer", "result"), [("BILLING", "pass"), ("billing", "fail")])
def test_a_task_with_only_checks_is_graded_on_its_checks(answer: str, result: str) -> None:
    """grade_run grades every check: a checks-only task has no tool-call verdict, only columns."""
    tasks = [parse_task(TASKS[0]), parse_task(CHECKS_ONLY_TASK)]
    run = grade_run(tasks, [(TASKS[0]["id"], "x"), ("route.checks_only.01", answer)])
    row = run.to_dict()["results"][1]
    assert (row["result"], [c["name"] for c in row["checks"]]) == (result, ["route"])
    assert run.results[1].verdict is None
    assert "score" not in row  # no top-level tool-call fields on a task with checks
    with pytest.raises(TaskHasChecksError, match=r"grade it with grader\.grade\(\)"):
        score(tasks[1], answer)


def test_duplicate_task_ids_in_a_plain_iterable_are_refused() -> None:
    with pytest.raises(TaskLoadError, match=r"duplicate task id 'tickets\.field_renamed\.01'"):
        grade_run([parse_task(TASKS[0]), parse_task(TASKS[0])], [])


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        pytest.param([], "a task must be a JSON object, got list", id="not_an_object"),
        pytest.param({"expected": TICKET}, "'id' must be a non-empty string", id="no_id"),
        pytest.param({"id": "t"}, "task 't' has no 'expected' call", id="no_expected"),
        pytest.param(
            {"id": "t", "expected": {"arguments": {}}},
            "task 't': 'expected' is not a usable call",
            id="expected_without_name",
        ),
        pytest.param(
            {"id": "t", "expected": TICKET, "metadata": {"stale": TICKET}},
            "'metadata.stale' equals 'expected'",
            id="stale_equals_expected",
        ),
        pytest.param(
            {"id": "t", "expected": TICKET, "metadata": {"mutationKind": 3}},
            "'metadata.mutationKind' must be a string",
            id="mutation_kind_not_a_string",
        ),
    ],
)
def test_parse_task_names_the_problem(definition: object, message: str) -> None:
    with pytest.raises(TaskLoadError, match=r"^<memory>: ") as info:
        parse_task(definition)
    assert message in str(info.value)


def test_parse_task_keeps_kind_and_stale() -> None:
    task = parse_task(TASKS[1], "inline")
    assert (task.id, task.mutation_kind, task.source) == (
        "weather.enum_value_changed.01",
        "enum_value_changed",
        "inline",
    )
    assert task.stale is not None


def test_inline_digest_ignores_copies_and_order(task_set: TaskSet) -> None:
    """digest_of the distinct definitions equals the digest of a file holding exactly them."""
    tasks = [parse_task(raw) for raw in TASKS]
    shuffled = [tasks[2], tasks[0], parse_task(TASKS[0]), tasks[1]]
    assert digest_of(shuffled) == task_set.digest
    assert digest_of(tasks[:1]) != task_set.digest


def test_request_digest_names_the_loaded_set_only_when_every_task_came_from_it(
    task_set: TaskSet,
) -> None:
    loaded = [(task, "x") for task in task_set]
    inline = [(parse_task(TASKS[0]), "x")]
    assert request_digest(loaded[:1], task_set) == task_set.digest
    assert request_digest(inline, task_set) == digest_of([inline[0][0]])
    assert request_digest(inline, task_set) != task_set.digest


def test_grade_all_stamps_every_row_with_the_digest(task_set: TaskSet) -> None:
    task = task_set.get("weather.enum_value_changed.01")
    assert task is not None
    result = grade_all([(task, "x"), (task, None)], "sha256:test")
    assert [row["tasks_digest"] for row in result.to_dict()["results"]] == ["sha256:test"] * 2
    assert result.to_dict()["report"]["tasks_digest"] == "sha256:test"
    assert [v.reason_code if v else None for v in result.verdicts] == ["no_call", "not_a_string"]


@pytest.mark.parametrize(
    "name",
    [
        "RunResult",
        "UnknownTaskError",
        "GradedAnswer",
        "grade_run",
        "grade_run_async",
    ],
)
def test_api_names_are_exported_from_the_package_root(name: str) -> None:
    import grader
    import grader.api

    assert name in grader.__all__
    assert getattr(grader, name) is getattr(grader.api, name)


@pytest.mark.parametrize(
    ("removed", "use"),
    [
        pytest.param("score_run", "grade_run", id="score_run"),
        pytest.param("task_from_dict", "parse_task", id="task_from_dict"),
        pytest.param("evaluate", "grade_async", id="evaluate"),
        pytest.param("evaluate_sync", "grade", id="evaluate_sync"),
        pytest.param("TaskOutcome", "Outcome", id="TaskOutcome"),
    ],
)
def test_one_name_per_concept(removed: str, use: str) -> None:
    """Issue 36: the synonyms are gone from the face and from the modules that held them."""
    import grader
    import grader.api
    import grader.engine

    assert use in grader.__all__
    assert removed not in grader.__all__
    assert not any(hasattr(module, removed) for module in (grader, grader.api, grader.engine))


def test_score_is_the_graders_own_function() -> None:
    import grader
    import grader.api

    score_module = importlib.import_module("grader.score")
    assert grader.api.score is score_module.score is grader.score


def test_load_tasks_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(TaskLoadError, match=r"bad\.jsonl:1: task 'x' has no 'expected' call"):
        load_tasks(bad)
