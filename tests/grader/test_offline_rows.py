"""Offline rows that join: answers-file fields carried, clashes refused, files 0644, judge
attempts kept one by one."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path
from typing import Any

import pytest

from gradeproxy.cli import main
from grader import grade_run, parse_task
from grader.checks import Judge, JudgeConfig
from grader.engine import grade_async
from grader.json import loads_exact
from grader.rowids import offline_row_id
from grader.rows import RESERVED_FIELDS
from tests.support.files import write_jsonl

TASK = {"id": "a", "expected": {"name": "f", "arguments": {"x": 1}}}
GOOD = '{"name": "f", "arguments": {"x": 1}}'


def grade_rows(tmp_path: Path, answers: list[dict[str, Any]], *flags: str) -> tuple[int, Path]:
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [TASK])
    answers_file = write_jsonl(tmp_path / "answers.jsonl", answers)
    out = tmp_path / "rows.jsonl"
    args = ["grade", *flags, "--tasks", str(tasks), "--answers", str(answers_file)]
    code = main([*args, "--out", str(out)])
    return code, out


CARRIED = [
    pytest.param({"sample_id": "s-1", "model": "m-2024-01-01", "run": "r1"}, id="ids"),
    pytest.param({"sample_id": 7, "attempt": 2}, id="integer_sample_id"),
    pytest.param({"sampling": {"temperature": 0.2, "top_p": [1, 0.9]}}, id="nested_sampling"),
    pytest.param({"my.field": None, "request_id": "client-side"}, id="odd_names_and_null"),
    pytest.param({"tools": [{"type": "function", "function": {"name": "f"}}]}, id="tools"),
]


@pytest.mark.parametrize("extra", CARRIED)
def test_every_answers_field_rides_into_its_row_unchanged(
    tmp_path: Path, extra: dict[str, Any]
) -> None:
    code, out = grade_rows(tmp_path, [{"task_id": "a", "answer": GOOD, **extra}])
    assert code == 0
    [row] = [loads_exact(line) for line in out.read_text().splitlines()]
    for key, value in extra.items():
        assert row[key] == value
    assert (row["answer"], row["truncated"], row["result"]) == (GOOD, False, "pass")
    assert row["sample_id"] == extra.get("sample_id")


@pytest.mark.parametrize("field", sorted(RESERVED_FIELDS - {"task_id"}))
def test_a_field_that_would_overwrite_a_result_field_is_refused_with_file_line(
    tmp_path: Path, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    answers: list[dict[str, Any]] = [
        {"task_id": "a", "answer": GOOD},
        {"task_id": "a", "answer": GOOD, field: 1},
    ]
    code, out = grade_rows(tmp_path, answers)
    assert code == 1  # an error row in its place since issue 37; --strict refuses the file
    rows = [loads_exact(line) for line in out.read_text().splitlines()]
    assert [(r["result"], r["reason_code"]) for r in rows] == [
        ("pass", "match"),
        ("error", "reserved_field"),
    ]
    assert (rows[1]["kind"], rows[1]["passed"], rows[1]["checks"]) == ("answer", None, [])
    assert f"answers.jsonl:2: field {field!r} would overwrite" in capsys.readouterr().err
    out.unlink()
    code, out = grade_rows(tmp_path, answers, "--strict")
    assert code == 2
    assert not out.exists()
    assert f"answers.jsonl:2: field {field!r} would overwrite" in capsys.readouterr().err


def test_output_files_get_the_usual_mode_under_umask_022(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        code, out = grade_rows(tmp_path, [{"task_id": "a", "answer": GOOD}])
    finally:
        os.umask(old)
    assert code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


class Replies:
    """A judge client that answers from a script, one reply (or exception) per call."""

    def __init__(self, *replies: str | Exception) -> None:
        self.replies = list(replies)

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


JUDGED = parse_task(
    {
        "id": "j",
        "item": {"prompt": "Say thanks"},
        "checks": [
            {
                "type": "label_model",
                "name": "polite",
                "model": "judge-2024-08-06",
                "criterion": "is polite",
                "pass_examples": ["Thanks!"],
                "fail_examples": ["Go away."],
            }
        ],
    }
)

ATTEMPTS = [
    pytest.param(("PASS",), ["ok"], True, id="first_reply_parses"),
    pytest.param(("pass.", "PASS"), ["judge_parse_error", "ok"], True, id="retry_after_parse"),
    pytest.param(
        (ConnectionError("reset"), "FAIL"), ["judge_error", "ok"], False, id="retry_after_error"
    ),
    pytest.param(
        ("x" * 5000, "maybe", "no"),
        ["judge_parse_error"] * 3,
        None,
        id="every_attempt_fails",
    ),
]


@pytest.mark.parametrize(("replies", "outcomes", "passed"), ATTEMPTS)
async def test_each_judge_attempt_is_kept_in_order_and_never_overwritten(
    replies: tuple[str | Exception, ...], outcomes: list[str], passed: bool | None
) -> None:
    judge = Judge(Replies(*replies), JudgeConfig(retries=2))
    outcome = await grade_async(JUDGED, "Thank you!", judge=judge)
    [column] = outcome.checks
    assert column.passed is passed
    assert column.details is not None
    log = column.details["attempt_log"]
    assert [a["outcome"] for a in log] == outcomes
    for attempt, reply in zip(log, replies, strict=False):
        if isinstance(reply, str):
            assert attempt["reply"] == reply[:2000]
            assert attempt["reply_truncated"] is (len(reply) > 2000)
        else:
            assert attempt["reply"] is None
            assert "reset" in attempt["error"]
        assert attempt["latency_s"] >= 0


def test_the_python_api_carries_answers_fields_the_same_way() -> None:
    task = parse_task(TASK)
    answers: list[tuple[str, object] | dict[str, Any]] = [
        {"task_id": "a", "answer": GOOD, "sample_id": "s1", "sampling": {"temperature": 0}},
        ("a", GOOD),  # a bare pair has nothing to carry
    ]
    carried, bare = (r.to_dict() for r in grade_run([task], answers).results)
    assert (carried["sample_id"], carried["sampling"], carried["answer"]) == (
        "s1",
        {"temperature": 0},
        GOOD,
    )
    assert "sample_id" not in bare
    with pytest.raises(ValueError, match=r"answers\[0\]: field 'passed' would overwrite"):
        grade_run([task], [{"task_id": "a", "answer": GOOD, "passed": True}])


def test_offline_row_ids_are_random_version_4_uuids() -> None:
    """The same ids uuid4 gives: canonical text, version 4, RFC 4122 variant, every variant
    nibble reached, every other digit drawn (each of the sixteen seen), and no two alike."""
    ids = [offline_row_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for text in ids:
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
    assert {text[19] for text in ids} == set("89ab")
    assert len({text[14] for text in ids}) == 1
    drawn = [at for at in range(36) if at not in (8, 13, 14, 18, 23)]  # not a dash or the 4
    assert all(len({text[at] for text in ids}) == 16 for at in drawn if at != 19)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("taken_before_fork", [0, 1, 255, 256])
def test_a_forked_child_never_repeats_its_parents_row_ids(taken_before_fork: int) -> None:
    """Ids are drawn in batches: a child forked with ids left in the batch (``gradeproxy grade
    --jobs``) draws its own instead of handing out the parent's."""
    for _ in range(taken_before_fork):
        offline_row_id()
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent, then out without cleanup
        try:
            os.write(writer, "\n".join(offline_row_id() for _ in range(300)).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        theirs = set(pipe.read().decode().split("\n"))
    os.waitpid(pid, 0)
    ours = {offline_row_id() for _ in range(300)}
    assert len(theirs) == 300
    assert not ours & theirs
