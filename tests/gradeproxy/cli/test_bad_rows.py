"""One bad row never costs the others their grades (issue 37), for every offline batch command.

Each table puts one bad row of each kind between good ones: the grading commands write a row
for every input row (the bad one an ``error`` row with its reason code), the reading commands
skip it and count it, every command exits 1 and names it on stderr with ``file:line``; under
``--strict`` each refuses the run (exit 2) and writes nothing. Rule 11 through the CLI gives
exactly ``score()``'s verdicts, and those rows are model failures, not input errors (exit 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gradeproxy.cli import main
from grader import score
from grader.engine import grade
from grader.json import dumps, loads_exact
from grader.loader import load_tasks
from tests.support.episodes import GOOD_BILLING, GOOD_BILLING_FINAL, chat
from tests.support.files import write_jsonl
from tests.support.paths import REPO

TASKS = [
    {
        "id": "a",
        "expected": {"name": "f", "arguments": {"x": 1}},
        "metadata": {"stale": {"name": "f", "arguments": {"y": 1}}, "mutationKind": "renamed"},
    },
    {
        "id": "c",
        "expected": {"name": "f", "arguments": {"x": 1}},
        "checks": [
            {"type": "tool_call", "name": "call"},
            {
                "type": "string_check",
                "name": "calls_f",
                "operation": "eq",
                "input": "{{ sample.output_tools[0].function.name }}",
                "reference": "f",
            },
        ],
    },
]
GOOD = '{"name": "f", "arguments": {"x": 1}}'


def lines_file(path: Path, before: list[Any], bad: bytes, after: list[Any]) -> Path:
    """Good rows, the bad line as raw bytes, good rows: the bad one is line len(before) + 1."""
    path.write_bytes(
        b"".join(dumps(r) + b"\n" for r in before)
        + bad
        + b"\n"
        + b"".join(dumps(r) + b"\n" for r in after)
    )
    return path


def raw(value: Any) -> bytes:
    return dumps(value)


# (the bad line, its reason code, what stderr says about it): shared by the JSON-reading tables.
UNREADABLE = [
    pytest.param(
        b'{"task_id": "a", "answer": "{\\"na',
        "line_unreadable",
        "the line ends inside a string (truncated?)",
        id="cut_inside_a_string",
    ),
    pytest.param(
        b'{"task_id": "a", "answer": ""',
        "line_unreadable",
        "the line ends before the object opened at column 1 is closed",
        id="cut_before_the_closing_brace",
    ),
    pytest.param(
        b'{"task_id": "a", "answer": "\xff"}',
        "line_unreadable",
        "the line is not UTF-8 text (byte 0xff",
        id="not_utf8",
    ),
    pytest.param(
        b'{"task_id": "a"}{"task_id": "a"}',
        "line_unreadable",
        "not JSON at column 17: a second JSON value starts here",
        id="two_lines_run_together",
    ),
    pytest.param(b"[1, 2]", "not_an_object", "expected", id="not_an_object"),
]

GRADE_BAD = [
    *UNREADABLE,
    pytest.param(raw({"answer": GOOD}), "missing_field", "'task_id' must be", id="no_task_id"),
    pytest.param(
        raw({"task_id": 7, "answer": GOOD}), "bad_field", "'task_id' must be", id="task_id_int"
    ),
    pytest.param(
        raw({"task_id": "zzz", "answer": GOOD}),
        "unknown_task",
        "unknown task id 'zzz'",
        id="unknown_task",
    ),
    pytest.param(raw({"task_id": "a"}), "missing_field", "no 'answer' field", id="no_answer"),
    pytest.param(
        raw({"task_id": "a", "answer": GOOD, "tools": {}}),
        "bad_field",
        "'tools' must be a JSON list",
        id="tools_not_a_list",
    ),
    pytest.param(
        raw({"task_id": "a", "answer": GOOD, "score": 1}),
        "reserved_field",
        "field 'score' would overwrite",
        id="reserved_field",
    ),
    pytest.param(
        raw({"task_id": "a", "answer": GOOD, "sample_id": {"n": 1}}),
        "bad_field",
        "'sample_id' must be",
        id="sample_id_object",
    ),
]


@pytest.fixture
def tasks_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "tasks.jsonl", TASKS)


@pytest.mark.parametrize(("bad", "code", "message"), GRADE_BAD)
def test_grade_writes_an_error_row_in_place_of_a_bad_row(
    tmp_path: Path,
    tasks_file: Path,
    capsys: pytest.CaptureFixture[str],
    bad: bytes,
    code: str,
    message: str,
) -> None:
    good = [{"task_id": "a", "answer": GOOD, "sample_id": "s1"}]
    after = [{"task_id": "c", "answer": "no call", "sample_id": "s3"}]
    answers = lines_file(tmp_path / "answers.jsonl", good, bad, after)
    out, report = tmp_path / "rows.jsonl", tmp_path / "report.json"
    args = ["grade", "--tasks", str(tasks_file), "--answers", str(answers), "--out", str(out)]
    assert main([*args, "--report", str(report)]) == 1
    err = capsys.readouterr()
    assert f"answers.jsonl:2: {message}" in err.err
    rows = [loads_exact(line) for line in out.read_text().splitlines()]
    assert [(r["result"], r.get("reason_code"), r["sample_id"]) for r in rows] == [
        ("pass", "match", "s1"),
        ("error", code, None),
        ("fail", None, "s3"),
    ]
    assert rows[1]["passed"] is None
    assert rows[1]["checks"] == []
    assert rows[1]["reason"].endswith("answers.jsonl:2: " + rows[1]["reason"].split(":2: ")[1])
    data = loads_exact(report.read_text())
    assert (data["n"], data["passed"], data["errors"]) == (2, 1, 0)  # out of every denominator
    assert data["input"]["reasons"] == {code: 1}
    assert [(p["line"], p["reason_code"]) for p in data["input"]["problems"]] == [(2, code)]
    assert f"1 error row (in no pass rate): {code} 1" in err.out

    out.unlink()
    assert main([*args, "--strict"]) == 2
    assert "answers.jsonl:2:" in capsys.readouterr().err
    assert not out.exists()


RULE_11 = [
    pytest.param(None, id="null_as_a_tool_call_completion_sends"),
    pytest.param(7, id="integer"),
    pytest.param(1.5, id="float"),
    pytest.param(True, id="boolean"),
    pytest.param({"name": "f", "arguments": {"x": 1}}, id="the_right_call_as_an_object"),
    pytest.param([GOOD], id="array_of_the_right_text"),
]


@pytest.mark.parametrize("answer", RULE_11)
def test_non_string_answers_through_the_cli_are_score_verdicts_not_input_errors(
    tmp_path: Path, tasks_file: Path, capsys: pytest.CaptureFixture[str], answer: Any
) -> None:
    """grading.md rule 11: scored 0 with ``not_a_string``, exactly as ``score()`` does, and a
    model failure (in the pass rate), so the run exits 0."""
    answers = write_jsonl(
        tmp_path / "answers.jsonl",
        [{"task_id": "a", "answer": answer}, {"task_id": "c", "answer": answer}],
    )
    out, report = tmp_path / "rows.jsonl", tmp_path / "report.json"
    args = ["grade", "--tasks", str(tasks_file), "--answers", str(answers), "--out", str(out)]
    assert main([*args, "--report", str(report)]) == 0
    plain, checked = [loads_exact(line) for line in out.read_text().splitlines()]
    tasks = load_tasks(tasks_file)
    verdict = score(tasks.tasks["a"], answer)
    assert (plain["score"], plain["reason_code"], plain["reason"], plain["staleSchemaUsed"]) == (
        verdict.score,
        verdict.reason_code,
        verdict.reason,
        verdict.stale_schema_used,
    )
    assert (plain["result"], plain["reason_code"]) == ("fail", "not_a_string")
    outcome = grade(tasks.tasks["c"], answer)
    assert checked["result"] == outcome.result == "fail"
    assert [(c["name"], c["reason_code"]) for c in checked["checks"]] == [
        (c.name, c.reason_code) for c in outcome.checks
    ]
    data = loads_exact(report.read_text())
    assert (data["n"], data["passed"], data["input"]["problem_rows"]) == (2, 0, 0)
    assert "2 model failures (not_a_string 2)" in capsys.readouterr().out
    assert main([*args, "--strict"]) == 0  # not an input error, so --strict grades it too


# ---- replay -------------------------------------------------------------------------------------

CAUSE = {"task_id": "episodes.cause", "events": [], "final": "the card expired"}
BILLING = {
    "task_id": "billing.duplicate_charge.episode",
    "messages": chat(GOOD_BILLING, GOOD_BILLING_FINAL),
}
TRIMMED = [
    {"role": "user", "content": "refund the duplicate"},
    {"role": "tool", "tool_call_id": "call_gone", "content": "{}"},
]

REPLAY_BAD = [
    *UNREADABLE,
    pytest.param(
        raw({"task_id": "nope", "events": []}), "unknown_task", "unknown task id", id="unknown"
    ),
    pytest.param(
        raw({"task_id": "payments.new_required_field.policy", "events": []}),
        "no_grader_record",
        "task 'payments.new_required_field.policy' has no grader record",
        id="no_grader_record",
    ),
    pytest.param(
        raw({"task_id": "episodes.cause"}),
        "history_malformed",
        "give exactly one of",
        id="no_history",
    ),
    pytest.param(
        raw({"task_id": "episodes.cause", "events": [], "final": 3}),
        "history_malformed",
        "'final' must be a string",
        id="final_not_a_string",
    ),
    pytest.param(
        raw({"task_id": "billing.duplicate_charge.episode", "messages": TRIMMED}),
        "history_incomplete",
        "incomplete history",
        id="trimmed_history",
    ),
    pytest.param(raw({**CAUSE, "episode_id": 5}), "bad_field", "'episode_id' must be", id="bad_id"),
]


@pytest.mark.parametrize(("bad", "code", "message"), REPLAY_BAD)
def test_replay_writes_an_error_episode_row_in_place_of_a_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: bytes, code: str, message: str
) -> None:
    episodes = lines_file(tmp_path / "episodes.jsonl", [BILLING], bad, [CAUSE])
    out, report = tmp_path / "rows.jsonl", tmp_path / "report.json"
    tasks = REPO / "config" / "tasks"
    args = ["replay", "--tasks", str(tasks), "--episodes", str(episodes), "--out", str(out)]
    assert main([*args, "--report", str(report)]) == 1
    assert f"episodes.jsonl:2: {message}" in capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["result"], r.get("reason_code")) for r in rows] == [
        ("pass", None),
        ("error", code),
        (rows[2]["result"], None),
    ]
    error = rows[1]
    assert error["columns"] == []
    assert error["passed"] is None
    flat = [name for name in ("end_state_ok", "authority_ok", "cause_correct") if name in error]
    assert flat
    assert all(error[name] is False for name in flat)  # every column false
    data = json.loads(report.read_text())
    assert data["episodes"] == 2  # the error row is in no pass rate
    assert data["results"]["error"] == 0
    assert data["input"]["reasons"] == {code: 1}

    out.unlink()
    assert main([*args, "--strict"]) == 2
    assert "episodes.jsonl:2:" in capsys.readouterr().err
    assert not out.exists()


# ---- regrade ------------------------------------------------------------------------------------

RESULT_BAD = [
    *UNREADABLE,
    pytest.param(
        raw({"result": "pass"}),
        "missing_field",
        "expected a result row with a string 'task_id'",
        id="no_task_id",
    ),
    pytest.param(
        raw({"task_id": "a", "result": "pass", "checks": {"x": 1}}),
        "bad_field",
        "'checks' must be",
        id="checks_not_a_list",
    ),
]


def graded_rows(tmp_path: Path, tasks_file: Path) -> list[dict[str, Any]]:
    answers = write_jsonl(
        tmp_path / "answers.jsonl",
        [{"task_id": "a", "answer": GOOD, "sample_id": 1}, {"task_id": "a", "answer": "x"}],
    )
    out = tmp_path / "graded.jsonl"
    args = ["grade", "--tasks", str(tasks_file), "--answers", str(answers), "--out", str(out)]
    assert main(args) == 0
    return [loads_exact(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize(("bad", "code", "message"), RESULT_BAD)
def test_regrade_writes_an_input_error_line_for_a_bad_row(
    tmp_path: Path,
    tasks_file: Path,
    capsys: pytest.CaptureFixture[str],
    bad: bytes,
    code: str,
    message: str,
) -> None:
    first, second = graded_rows(tmp_path, tasks_file)
    results = lines_file(tmp_path / "results.jsonl", [first], bad, [second])
    out = tmp_path / "diff.jsonl"
    args = ["regrade", "--results", str(results), "--tasks", str(tasks_file), "--out", str(out)]
    capsys.readouterr()
    assert main([*args, "--json"]) == 1
    captured = capsys.readouterr()
    assert f"results.jsonl:2: {message}" in captured.err
    summary = loads_exact(captured.out)
    assert (summary["rows"], summary["regraded"]) == (2, 2)
    assert summary["input"]["reasons"] == {code: 1}
    [line] = [loads_exact(text) for text in out.read_text().splitlines()]
    assert (line["change"], line["reason_code"], line["result_after"]) == (
        "input_error",
        code,
        "error",
    )

    out.unlink()
    assert main([*args, "--strict"]) == 2
    assert not out.exists()


# ---- export -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("bad", "code", "message"), UNREADABLE)
def test_export_skips_and_counts_a_bad_row(
    tmp_path: Path,
    tasks_file: Path,
    capsys: pytest.CaptureFixture[str],
    bad: bytes,
    code: str,
    message: str,
) -> None:
    import pyarrow.parquet as pq

    first, second = graded_rows(tmp_path, tasks_file)
    results = lines_file(tmp_path / "results.jsonl", [first], bad, [second])
    out = tmp_path / "rows.parquet"
    args = ["export", "--results", str(results), "--parquet", str(out)]
    capsys.readouterr()
    assert main(args) == 1
    captured = capsys.readouterr()
    assert f"results.jsonl:2: {message}" in captured.err
    assert f"1 skipped row (in no pass rate): {code} 1" in captured.out
    assert pq.read_table(out).num_rows == 2

    out.unlink()
    assert main([*args, "--strict"]) == 2
    assert not out.exists()


# ---- compare and the gate -----------------------------------------------------------------------


def pair_rows(n: int) -> list[dict[str, Any]]:
    return [
        {"task_id": "a", "result": "pass", "pair_id": f"p{i}", "variant": variant}
        for i in range(n)
        for variant in ("primary", "shadow")
    ]


COMPARE_BAD = [
    *UNREADABLE,
    pytest.param(
        raw({"task_id": "a", "result": "pass", "variant": "canary"}),
        "bad_field",
        "'variant' must be",
        id="unknown_variant",
    ),
    pytest.param(
        raw({"task_id": "a", "result": "pass", "choice": "0"}),
        "bad_field",
        "'choice' must be an integer",
        id="choice_not_an_integer",
    ),
]


@pytest.mark.parametrize(("bad", "code", "message"), COMPARE_BAD)
def test_compare_skips_and_counts_a_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: bytes, code: str, message: str
) -> None:
    rows = pair_rows(3)
    results = lines_file(tmp_path / "results.jsonl", rows[:2], bad, rows[2:])
    args = ["compare", "--results", str(results)]
    assert main([*args, "--json"]) == 1
    captured = capsys.readouterr()
    assert f"results.jsonl:3: {message}" in captured.err
    data = loads_exact(captured.out)
    assert (data["rows"], data["pairs"]) == (6, 3)
    assert data["input"]["reasons"] == {code: 1}
    assert main(args) == 1
    assert f"1 skipped row (in no pass rate): {code} 1" in capsys.readouterr().out
    assert main([*args, "--strict", "--json"]) == 2
    assert capsys.readouterr().out == ""


GATE = {
    "drift_budget": {"noise_tolerance_pts": 1, "hard_fail_threshold_pts": 5},
    "suites": [{"name": "core", "task_ids": ["a"]}],
}


@pytest.mark.parametrize(("bad", "code", "message"), UNREADABLE)
@pytest.mark.parametrize(
    ("fails", "decision", "clean_exit"),
    [
        pytest.param(0, "pass", 0, id="would_pass"),
        pytest.param(40, "hard_fail", 1, id="would_hard_fail"),
    ],
)
def test_a_gate_run_with_a_bad_row_cannot_decide(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    bad: bytes,
    code: str,
    message: str,
    fails: int,
    decision: str,
    clean_exit: int,
) -> None:
    """Rows the gate could not read might have moved any suite: exit 3 unless ``--strict``."""
    base = [{"task_id": "a", "result": "pass", "sample_id": f"s{i}"} for i in range(400)]
    cand = [{**r, "result": "fail" if i < fails else "pass"} for i, r in enumerate(base)]
    gate = tmp_path / "gate.yaml"
    gate.write_text(yaml.safe_dump(GATE))
    baseline = write_jsonl(tmp_path / "a.jsonl", base)
    clean = write_jsonl(tmp_path / "b.jsonl", cand)
    dirty = lines_file(tmp_path / "c.jsonl", cand[:1], bad, cand[1:])
    args = ["compare", "--gate", str(gate), "--baseline", str(baseline), "--json"]
    assert main([*args, "--candidate", str(clean)]) == clean_exit
    capsys.readouterr()
    assert main([*args, "--candidate", str(dirty)]) == 3
    captured = capsys.readouterr()
    assert f"c.jsonl:2: {message}" in captured.err
    data = loads_exact(captured.out)
    assert data["suites"][0]["decision"] == decision
    assert (data["exit_code"], data["input"]["reasons"]) == (3, {code: 1})
    assert main([*args, "--candidate", str(dirty), "--strict"]) == 2


# ---- calibrate ----------------------------------------------------------------------------------

LABELS = [
    {"judge": j, "human": h, "split": "test"}
    for j, h in [(True, True), (True, True), (False, False), (False, False), (True, False)]
]
CALIBRATE_BAD = [
    *UNREADABLE,
    pytest.param(
        raw({"judge": True}),
        "missing_field",
        """expected an object {"judge", "human"}: no 'human' label""",
        id="no_human",
    ),
    pytest.param(
        raw({"judge": "pass", "human": True, "split": "test"}),
        "bad_field",
        "'judge' must be",
        id="lower_case_label",
    ),
    pytest.param(
        raw({"judge": True, "human": True, "split": "holdout"}),
        "bad_field",
        "'split' must be train, dev or test",
        id="unknown_split",
    ),
]


@pytest.mark.parametrize(("bad", "code", "message"), CALIBRATE_BAD)
def test_calibrate_skips_and_counts_a_bad_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: bytes, code: str, message: str
) -> None:
    labels = lines_file(tmp_path / "labels.jsonl", LABELS[:2], bad, LABELS[2:])
    out = tmp_path / "calibration.json"
    args = ["calibrate", "--judge-model", "judge-2024-08-06", "--labels", str(labels)]
    assert main([*args, "--json", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert f"labels.jsonl:3: {message}" in captured.err
    record = loads_exact(out.read_text())
    assert (record["n"], record["tp"], record["fp"]) == (5, 2, 1)
    assert record["input"]["reasons"] == {code: 1}
    out.unlink()
    assert main([*args, "--strict", "--out", str(out)]) == 2
    assert not out.exists()


# ---- nothing usable -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        pytest.param(["grade", "--tasks", "TASKS"], "--answers", id="grade"),
        pytest.param(["replay", "--tasks", "TASKS"], "--episodes", id="replay"),
        pytest.param(["regrade", "--tasks", "TASKS", "--out", "OUT"], "--results", id="regrade"),
        pytest.param(["export", "--parquet", "OUT"], "--results", id="export"),
        pytest.param(["compare"], "--results", id="compare"),
        pytest.param(["calibrate", "--judge-model", "judge-2024-08-06"], "--labels", id="calib"),
    ],
)
@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "cannot read", id="no_such_file"),
        pytest.param(b"\x1f\x8b\x08\x00\xff\xfe binary\n", "not JSONL", id="binary"),
        pytest.param(
            b'{\n  "task_id": "a",\n  "answer": ""\n}\n', "not JSONL", id="pretty_printed_json"
        ),
    ],
)
def test_nothing_usable_exits_2_and_writes_nothing(
    tmp_path: Path,
    tasks_file: Path,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
    flag: str,
    content: bytes | None,
    message: str,
) -> None:
    source = tmp_path / "input.jsonl"
    if content is not None:
        source.write_bytes(content)
    out = tmp_path / "out.file"
    swap = {"TASKS": str(tasks_file), "OUT": str(out)}
    args = [swap.get(arg, arg) for arg in command]
    assert main([*args, flag, str(source)]) == 2
    err = capsys.readouterr().err
    assert f"input.jsonl: {message}" in err
    assert "Traceback" not in err
    assert not out.exists()
