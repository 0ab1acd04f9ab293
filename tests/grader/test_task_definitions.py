"""A task holds check definitions; the engine builds the checks, once per process (issue 12).

Cases are the shipped tasks (config/tasks, config/tasks-judge) and small inline ones.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from grader import CheckDefinition, Task, built, grade, load_tasks, parse_task
from grader.checks import columns_of
from grader.checks._base import BaseCheck
from grader.engine import checks_of
from grader.json import dumps
from grader.toolcall.extract import call_from_value
from tests.support.paths import REPO

TASKS = [*load_tasks(REPO / "config" / "tasks"), *load_tasks(REPO / "config" / "tasks-judge")]
GRADED = [t for t in TASKS if t.checks]  # episode-only tasks have no per-answer checks
CALL = {"name": "route_ticket", "arguments": {"queue": "BILLING"}}
QUEUE = {
    "type": "string_check",
    "name": "queue",
    "operation": "eq",
    "input": "{{ sample.output_tools[0].function.arguments.queue }}",
    "reference": "BILLING",
}


def answer(tool: str, arguments: dict[str, Any]) -> str:
    call = {"type": "function", "function": {"name": tool, "arguments": dumps(arguments).decode()}}
    return dumps({"tool_calls": [call]}).decode()


def values(task: Task) -> list[object]:
    """Every value a task holds, nested containers opened."""
    found: list[object] = []
    stack: list[object] = [getattr(task, f.name) for f in dataclasses.fields(Task)]
    while stack:
        value = stack.pop()
        found.append(value)
        if isinstance(value, dict):
            stack += value.values()
        elif isinstance(value, tuple | list | frozenset):
            stack += value
        elif isinstance(value, CheckDefinition):
            stack += [value.definition, value.columns]
    return found


@pytest.mark.parametrize("task", GRADED, ids=lambda t: t.id)
def test_a_task_holds_definitions_and_no_built_check(task: Task) -> None:
    assert all(isinstance(d, CheckDefinition) for d in task.checks)
    assert not [v for v in values(task) if isinstance(v, BaseCheck)]


@pytest.mark.parametrize("task", GRADED, ids=lambda t: t.id)
def test_the_engine_builds_what_the_definitions_say(task: Task) -> None:
    built = checks_of(task)
    assert [(c.name, c.type, c.digest) for c in built] == [
        (d.name, d.type, d.digest) for d in task.checks
    ]
    assert [columns_of(c) for c in built] == [d.columns for d in task.checks]
    assert [c.needs_judge for c in built] == [d.needs_judge for d in task.checks]


@pytest.mark.parametrize("task", GRADED, ids=lambda t: t.id)
def test_a_loaded_task_is_never_built_again(task: Task, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader hands the checks it built to validate the task to the engine's cache."""
    monkeypatch.setattr("grader.built._BUILT", {})  # this process has built nothing yet
    loaded = parse_task(dict(task.raw), task.source)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a check was built on the grading path")

    monkeypatch.setattr("grader.built.build_check", refuse)
    monkeypatch.setattr("grader.built.default_check", refuse)
    first = checks_of(loaded)
    assert checks_of(loaded) is first
    call = loaded.expected_call
    assert grade(loaded, answer(call.name, call.arguments) if call else "").checks


@pytest.mark.parametrize("task", GRADED, ids=lambda t: t.id)
def test_a_pickled_task_builds_the_same_checks_on_the_other_side(task: Task) -> None:
    copy = pickle.loads(pickle.dumps(task))
    assert copy.checks == task.checks
    assert copy.checks_digest == task.checks_digest
    assert [c.digest for c in checks_of(copy)] == [c.digest for c in checks_of(task)]


@pytest.mark.parametrize(
    ("left", "right", "same"),
    [
        pytest.param({"id": "a"}, {"id": "b"}, True, id="id_is_not_part_of_it"),
        pytest.param({"metadata": {"note": 1}}, {"metadata": {"note": 2}}, True, id="annotations"),
        pytest.param(
            {}, {"expected": {**CALL, "arguments": {"queue": "SALES"}}}, False, id="expected_call"
        ),
        pytest.param({}, {"metadata": {"stale": {**CALL, "name": "route"}}}, False, id="stale"),
        pytest.param({}, {"checks": [QUEUE]}, False, id="checks_listed"),
        pytest.param(
            {"checks": [QUEUE]},
            {"checks": [{**QUEUE, "reference": "SALES"}]},
            False,
            id="a_definition",
        ),
        pytest.param(
            {"checks": [QUEUE]},
            {"checks": [QUEUE], "pass_rule": "queue"},
            True,
            id="pass_rule_builds_nothing",
        ),
    ],
)
def test_the_checks_digest_names_what_the_checks_are_built_from(
    left: dict[str, Any], right: dict[str, Any], same: bool
) -> None:
    base = {"id": "t", "expected": CALL}
    one, other = parse_task({**base, **left}), parse_task({**base, **right})
    assert (one.checks_digest == other.checks_digest) is same


def test_tasks_built_by_hand_are_built_afresh_not_shared() -> None:
    """Two hand-built tasks have no checks digest: neither may grade with the other's checks."""
    billing = Task("a", call_from_value(CALL))
    sales = Task("b", call_from_value({**CALL, "arguments": {"queue": "SALES"}}))
    right = answer("route_ticket", {"queue": "BILLING"})
    assert (grade(billing, right).result, grade(sales, right).result) == ("pass", "fail")
    assert checks_of(billing) is not checks_of(billing)


def test_a_bad_definition_is_refused_at_load_not_at_grading() -> None:
    with pytest.raises(ValueError, match=r"checks\[0\].*'operation'"):
        parse_task({"id": "t", "expected": CALL, "checks": [{**QUEUE, "operation": "is"}]})


def test_the_cache_is_bounded_and_an_evicted_task_is_built_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("grader.built._BUILT", {})
    monkeypatch.setattr("grader.built._BUILT_MAX", 2)
    references = ("BILLING", "SALES", "SUPPORT")
    tasks = [
        parse_task({"id": r, "expected": CALL, "checks": [{**QUEUE, "reference": r}]})
        for r in references
    ]
    assert list(built._BUILT) == [t.checks_digest for t in tasks[1:]]  # the oldest went out
    right = answer("route_ticket", {"queue": "BILLING"})
    assert [grade(t, right).result for t in tasks] == ["pass", "fail", "fail"]
    assert [c.digest for c in checks_of(tasks[0])] == [d.digest for d in tasks[0].checks]
