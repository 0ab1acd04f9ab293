"""validate-tasks: the mutation test finds disconnected checks; exit codes 0 / 1 / 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader.json import dumps, loads_exact
from tests.support.checks import call
from tests.support.paths import REPO

ROUTE = call("route_ticket", queue="BILLING")


def text_task(
    check: dict[str, Any], fixtures: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {
        "id": "t",
        "prompt": "p",
        "checks": [check],
        "metadata": {"fixtures": fixtures},
        **extra,
    }


def string(operation: str, reference: str, name: str = "s") -> dict[str, Any]:
    return {
        "type": "string_check",
        "name": name,
        "operation": operation,
        "input": "{{sample.output_text}}",
        "reference": reference,
    }


@pytest.mark.parametrize(
    ("task", "column", "level", "code"),
    [
        pytest.param(
            text_task(string("eq", "BILLING"), [{"answer": "BILLING", "passes": True}]),
            "s",
            "ok",
            0,
            id="eq_connected",
        ),
        pytest.param(
            text_task(string("ne", "secret"), [{"answer": "All good.", "passes": True}]),
            "s",
            "disconnected",
            1,
            id="ne_secret_trap_disconnected",
        ),
        pytest.param(
            text_task(
                string("like", "{{item.phrase}}"),
                [{"answer": "anything", "passes": True}],
                item={"phrase": ""},
            ),
            "s",
            "disconnected",
            1,
            id="like_empty_reference_disconnected",
        ),
        pytest.param(
            text_task(
                string("ilike", "account recovery"),
                [{"answer": "Go to Account Recovery.", "passes": True}],
            ),
            "s",
            "ok",
            0,
            id="ilike_connected",
        ),
        pytest.param(
            {
                "id": "t",
                "expected": ROUTE,
                "checks": [
                    {
                        "type": "string_check",
                        "name": "q",
                        "operation": "eq",
                        "reference": "billing",
                        "input": "{{sample.output_tools[0].function.arguments.queue}}",
                    }
                ],
            },
            "q",
            "reference_fails",
            1,
            id="reference_fails",
        ),
        pytest.param(
            text_task(
                string("eq", "BILLING"),
                [
                    {"answer": "BILLING", "passes": True},
                    {"id": "lower", "answer": "billing", "passes": True},
                ],
            ),
            "s",
            "fixture_mismatch",
            1,
            id="fixture_expectation_wrong",
        ),
        pytest.param(
            text_task(string("eq", "BILLING"), [{"answer": "BILLING"}]),
            "-",
            "invalid",
            1,
            id="fixture_without_passes",
        ),
        pytest.param(
            text_task(string("eq", "BILLING"), [{"answer": "x", "passes": False}]),
            "-",
            "invalid",
            1,
            id="no_reference_answer",
        ),
        pytest.param(
            text_task(
                {"type": "tool_call", "name": "quiet", "expect_no_call": True},
                [{"answer": "Hello!", "passes": True}],
            ),
            "quiet",
            "ok",
            0,
            id="expect_no_call_connected",
        ),
        pytest.param(
            {
                "id": "t",
                "expected": ROUTE,
                "item": {"q": "BILLING"},
                "checks": [
                    {
                        "type": "policy",
                        "name": "p",
                        "required_links": [
                            {"from": "route_ticket.arguments.queue", "to": "item.q"}
                        ],
                    }
                ],
            },
            "p.links_ok",
            "ok",
            0,
            id="policy_link_auto_mutation",
        ),
    ],
)
def test_findings(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    task: dict[str, Any],
    column: str,
    level: str,
    code: int,
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(dumps(task).decode() + "\n")
    assert main(["validate-tasks", str(path), "--json"]) == code
    findings = [loads_exact(line) for line in capsys.readouterr().out.splitlines()]
    assert {"task": "t", "column": column, "level": level} in [
        {k: f[k] for k in ("task", "column", "level")} for f in findings
    ]


def test_string_variants_are_reported_as_info(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        dumps(
            text_task(string("ilike", "billing"), [{"answer": "BILLING", "passes": True}])
        ).decode()
        + "\n"
    )
    assert main(["validate-tasks", str(path)]) == 0
    info = [line for line in capsys.readouterr().out.splitlines() if line.startswith("INFO")]
    assert len(info) == 1
    assert "wrong_case(sample.output_text): pass" in info[0]
    assert "extra_text(sample.output_text): pass" in info[0]


def test_examples_and_sample_suite_validate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate-tasks", str(REPO / "config" / "tasks"), "--quiet"]) == 0
    assert capsys.readouterr().out == ""


def test_judge_examples_are_skipped_without_judge(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate-tasks", str(REPO / "config" / "tasks-judge")]) == 0
    assert capsys.readouterr().out.count("SKIPPED") == 3


@pytest.mark.parametrize(
    ("content", "args", "code", "stream", "message"),
    [
        pytest.param(None, [], 2, "err", "no such file or folder", id="missing_path"),
        pytest.param(
            '{"id": "a", "checks": [{"type": "string_check"}]}\n',
            [],
            1,
            "out",
            "INVALID  ",
            id="invalid_task_file",
        ),
        pytest.param(
            '{"id": "a", "item": {"q": "X"}, "checks": [{"type": "string_check", "name": "q", '
            '"operation": "eq", "reference": "{{item.q}}", '
            '"input": "{{sample.output_tools[0].function.argument.q}}"}]}\n',
            [],
            1,
            "out",
            "can never resolve: a function has name, arguments, not 'argument'",
            id="template_path_that_can_never_resolve",
        ),
        pytest.param(
            '{"id": "a", "expected": {"name": "f", "arguments": {}}, "target_state": {}}\n',
            [],
            1,
            "out",
            "'target_state' is a grader-record key (seed 001): it is graded inside the task's",
            id="key_not_graded_yet",
        ),
        pytest.param(
            '{"id": "a", "expected": {"name": "f"}}\n',
            ["--judge", "JUDGE"],
            2,
            "err",
            "not pinned",
            id="unpinned_judge_config",
        ),
    ],
)
def test_exit_codes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | None,
    args: list[str],
    code: int,
    stream: str,
    message: str,
) -> None:
    path = tmp_path / "tasks.jsonl"
    if content is not None:
        path.write_text(content)
    judge = tmp_path / "judge.yaml"
    judge.write_text("endpoint: http://127.0.0.1:9/v1\nmodel: gpt-4o\n")
    argv = [a if a != "JUDGE" else str(judge) for a in args]
    assert main(["validate-tasks", str(path), *argv]) == code
    captured = capsys.readouterr()
    assert message in (captured.err if stream == "err" else captured.out)


def test_examples_cover_every_check_type() -> None:
    types: set[str] = set()
    for name in ("tasks/checks-examples.jsonl", "tasks-judge/examples.jsonl"):
        for line in (REPO / "config" / name).read_text().splitlines():
            for check in loads_exact(line)["checks"]:
                types.add(check["type"])
                types.update(sub["type"] for sub in check.get("graders", {}).values())
    assert types == {
        "string_check",
        "text_similarity",
        "label_model",
        "score_model",
        "multi",
        "tool_call",
        "json_schema",
        "policy",
    }
