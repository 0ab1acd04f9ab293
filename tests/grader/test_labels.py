"""Label rows (grader/labels.py): what makes one usable, which one is the latest, the split and
the review sample a row's id gives, the judge's verdict on a row, an edited call's check."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grader.labels import (
    LabelError,
    checked_expected,
    judge_verdict,
    label_problem,
    label_row,
    latest_labels,
    sampled,
    split_of,
)
from tests.support.review import TOOLS, rid

AT = "2026-12-04T18:00:00+00:00"


def label(**fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"kind": "label", "row_id": rid(100), "labels": rid(1), "draft": None}
    row.update({"verdict": "pass", "note": None, "reviewer": None, "at": AT})
    row.update(fields)
    return row


PROBLEMS = [
    pytest.param(label(), None, id="a_row_label"),
    pytest.param(label(labels=None, draft="d.1"), None, id="a_draft_label"),
    pytest.param(label(labels=None, draft="d.1", verdict="edit", expected=[{}]), None,
                 id="an_edit"),
    pytest.param(label(labels=None), "exactly one", id="neither_row_nor_draft"),
    pytest.param(label(draft="d.1"), "exactly one", id="both_row_and_draft"),
    pytest.param(label(labels=""), "non-empty", id="empty_row_id"),
    pytest.param(label(verdict="PASS"), "pass, fail or edit", id="verdict_case_matters"),
    pytest.param(label(verdict="edit", expected=[{}]), "only a draft", id="edit_of_a_row"),
    pytest.param(label(labels=None, draft="d", verdict="edit"), "non-empty list",
                 id="edit_without_expected"),
    pytest.param(label(labels=None, draft="d", verdict="edit", expected=[]), "non-empty list",
                 id="edit_of_no_calls"),
    pytest.param(label(note=3), "'note'", id="note_not_text"),
    pytest.param(label(at=None), "'at'", id="no_time"),
    pytest.param(label(reviewer=7), "'reviewer'", id="reviewer_not_text"),
]  # fmt: skip


@pytest.mark.parametrize(("row", "words"), PROBLEMS)
def test_what_makes_a_label_row_usable(row: dict[str, Any], words: str | None) -> None:
    problem = label_problem(row)
    assert (problem is None) if words is None else (words in (problem or ""))


def test_label_row_builds_the_interface_row_and_refuses_a_bad_one() -> None:
    row = label_row(labels=None, draft="d.1", verdict="edit", at=AT, expected=[{"name": "f"}])
    assert list(row) == [
        "kind", "row_id", "labels", "draft", "verdict", "expected", "note", "reviewer", "at",
        "row_schema_version",
    ]  # fmt: skip
    assert row["row_schema_version"] == 3
    assert "expected" not in label_row(labels=rid(1), draft=None, verdict="pass", at=AT)
    with pytest.raises(LabelError, match="exactly one"):
        label_row(labels=None, draft=None, verdict="pass", at=AT)


LATEST = [
    # (rows in file order, the verdict that wins for rid(1))
    pytest.param([label(verdict="pass"), label(verdict="fail")], "fail", id="later_in_the_file"),
    pytest.param([label(verdict="fail", at="2026-12-04T19:00:00+00:00"), label(verdict="pass")],
                 "fail", id="later_by_time_wins_over_file_order"),
    pytest.param([label(verdict="pass", at=AT), label(verdict="fail", at=AT)], "fail",
                 id="same_time_file_order"),
    pytest.param([label(verdict="fail"), label(verdict="pass", labels=None)], "fail",
                 id="an_unusable_later_label_is_passed_over"),
    pytest.param([label(verdict="fail"), {"kind": "answer", "labels": rid(1)}], "fail",
                 id="other_rows_are_passed_over"),
]  # fmt: skip


@pytest.mark.parametrize(("rows", "verdict"), LATEST)
def test_the_latest_label_wins(rows: list[dict[str, Any]], verdict: str) -> None:
    latest = latest_labels(rows)
    assert latest[("row", rid(1))]["verdict"] == verdict
    assert list(latest) == [("row", rid(1))]


def test_a_row_and_a_draft_of_the_same_name_are_two_items() -> None:
    rows = [label(labels="x"), label(labels=None, draft="x", verdict="fail")]
    assert {k: v["verdict"] for k, v in latest_labels(rows).items()} == {
        ("row", "x"): "pass",
        ("draft", "x"): "fail",
    }


@given(st.text(min_size=1))
def test_the_split_is_a_function_of_the_row_id(row_id: str) -> None:
    assert split_of(row_id) in ("train", "dev", "test")
    assert split_of(row_id) == split_of(row_id)


def test_the_split_is_20_40_40_and_fixed_forever() -> None:
    counts = Counter(split_of(rid(n)) for n in range(20000))
    assert {k: round(v / 20000, 2) for k, v in counts.items()} == {
        "train": 0.2,
        "dev": 0.4,
        "test": 0.4,
    }
    # Pinned: a change of the hash would move labels between the train and the sealed test split.
    assert {name: split_of(name) for name in "abcdefg"} == PINNED_SPLITS


PINNED_SPLITS = {"a": "test", "b": "dev", "c": "train", "d": "dev", "e": "dev", "f": "train",
                 "g": "train"}  # fmt: skip


@pytest.mark.parametrize(("rate", "share"), [(0.0, 0.0), (0.1, 0.1), (0.5, 0.5), (1.0, 1.0)])
def test_the_review_sample_takes_its_share_by_row_id(rate: float, share: float) -> None:
    taken = sum(sampled(rid(n), rate) for n in range(20000))
    assert round(taken / 20000, 2) == share


def test_the_review_sample_is_independent_of_the_split() -> None:
    """Sampling must not favour a split: the two hashes are salted apart."""
    picked = Counter(split_of(rid(n)) for n in range(20000) if sampled(rid(n), 0.5))
    total = sum(picked.values())
    assert round(picked["train"] / total, 1) == 0.2


def column(type_: str, passed: bool | None) -> dict[str, Any]:
    return {"name": "c", "type": type_, "passed": passed}


VERDICTS = [
    pytest.param({"checks": [column("label_model", True)]}, True, id="label_model_pass"),
    pytest.param({"checks": [column("score_model", False)]}, False, id="score_model_fail"),
    pytest.param({"checks": [column("tool_call", True)]}, None, id="no_judge"),
    pytest.param({"checks": [column("label_model", None)]}, None, id="judge_error"),
    pytest.param({"checks": [column("label_model", None), column("score_model", False)]}, False,
                 id="first_judge_with_a_verdict"),
    pytest.param({"checks": "x"}, None, id="checks_not_a_list"),
    pytest.param({}, None, id="no_checks"),
]  # fmt: skip


@pytest.mark.parametrize(("row", "verdict"), VERDICTS)
def test_the_judge_verdict_of_a_row(row: dict[str, Any], verdict: bool | None) -> None:
    assert judge_verdict(row) is verdict


EDITS = [
    pytest.param({"name": "create_ticket", "arguments": {"title": "t"}}, None, id="one_call"),
    pytest.param([{"name": "close_ticket", "arguments": {}}], None, id="a_list"),
    pytest.param({"name": "create_ticket", "arguments": {"title": "t"}, "x": 1},
                 "a call is an object", id="extra_key"),
    pytest.param({"name": "create_ticket"}, "a call is an object", id="no_arguments"),
    pytest.param({"name": 1, "arguments": {}}, "'name' must be a string", id="name_not_text"),
    pytest.param({"name": "create_ticket", "arguments": "{}"}, "'arguments' an object",
                 id="arguments_as_text"),
    pytest.param([{"name": "close_ticket", "arguments": {}}, {"name": "x", "arguments": {}}],
                 "expected[1]: no tool named 'x'", id="second_call_unknown"),
    pytest.param({"name": "create_ticket", "arguments": {"title": "t", "priority": "urgent"}},
                 "arguments.priority: 'urgent' is not one of", id="enum"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "words"), EDITS)
def test_an_edited_call_is_checked_against_the_tools(value: Any, words: str | None) -> None:
    if words is None:
        calls = checked_expected(value, TOOLS)
        assert calls == (value if isinstance(value, list) else [value])
    else:
        with pytest.raises(LabelError) as caught:
            checked_expected(value, TOOLS)
        assert words in str(caught.value)


def test_a_tool_schema_that_cannot_be_used_is_a_reason_not_a_crash() -> None:
    broken = [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]
    with pytest.raises(LabelError, match="the tool's schema cannot be used"):
        checked_expected({"name": "f", "arguments": {}}, broken)
