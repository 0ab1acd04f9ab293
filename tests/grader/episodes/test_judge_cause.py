"""``cause_correct`` in its judge form: a label_model check (a rubric of facts) reads the final
answer; without a judge it is an error column, never a guess; with one it is the judge's verdict
with the check's own parse rules."""

from __future__ import annotations

from typing import Any

import pytest

from grader.checks import Judge, JudgeConfig
from grader.episodes.grade import episode_row, judge_cause
from grader.episodes.log import from_events
from grader.episodes.record import RecordError, parse_record

RUBRIC = {
    "type": "label_model",
    "name": "root_cause",
    "model": "judge-model-2024-08-06",
    "criterion": "The explanation says the customer was charged twice for order ord_7 and that "
    "pay_1002 duplicates pay_1001.",
    "pass_examples": ["ord_7 was charged twice: pay_1002 is a duplicate of pay_1001."],
    "fail_examples": ["The card expired.", "I fixed it."],
}
RECORD = parse_record({"schema_version": 1, "root_cause": {"judge": RUBRIC}})


class Scripted:
    """A JudgeClient that answers from a script and keeps what it was asked."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.asked: list[list[dict[str, str]]] = []

    async def complete(self, model: str, messages: list[dict[str, str]], temperature: float) -> str:
        self.asked.append(messages)
        return self.reply


def row_for(final: str | None) -> dict[str, Any]:
    return episode_row("t", RECORD, from_events([], final), tasks_digest="d")


def test_without_a_judge_the_column_is_an_error_not_a_verdict() -> None:
    row = row_for("pay_1002 duplicates pay_1001")
    assert (row["cause_correct"], row["result"]) == (None, "error")
    assert row["columns"][0]["reason_code"] == "judge_unavailable"


@pytest.mark.parametrize(
    ("reply", "passed", "result"),
    [
        pytest.param("PASS", True, "pass", id="judge_pass"),
        pytest.param("FAIL", False, "fail", id="judge_fail"),
        pytest.param("perhaps", None, "error", id="unparsable_is_an_error"),
    ],
)
async def test_the_judge_settles_the_column(reply: str, passed: bool | None, result: str) -> None:
    client = Scripted(reply)
    judge = Judge(client, JudgeConfig(retries=0))
    final = "Order ord_7 was charged twice: pay_1002 duplicates pay_1001."
    log = from_events([], final)
    row = await judge_cause(row_for(final), RECORD, log, judge, {"prompt": "Fix order ord_7."})
    assert (row["cause_correct"], row["result"]) == (passed, result)
    assert final in client.asked[0][-1]["content"]


async def test_no_final_answer_fails_without_asking_the_judge() -> None:
    client = Scripted("PASS")
    row = await judge_cause(
        row_for(None), RECORD, from_events([], None), Judge(client, JudgeConfig())
    )
    assert (row["cause_correct"], client.asked) == (False, [])


@pytest.mark.parametrize(
    ("cause", "message"),
    [
        pytest.param(
            {"judge": {"type": "string_check"}}, "must be a label_model", id="not_a_judge"
        ),
        pytest.param({"judge": RUBRIC, "any": ["x"]}, "not both", id="judge_and_phrases"),
        pytest.param(
            {"judge": {**RUBRIC, "model": "gpt-4o"}}, "episode.root_cause.judge", id="unpinned"
        ),
    ],
)
def test_bad_judge_forms_are_refused(cause: Any, message: str) -> None:
    with pytest.raises(RecordError) as caught:
        parse_record({"schema_version": 1, "root_cause": cause})
    assert message in str(caught.value)
