"""BFCL conformance: our tool_call check and BFCL's AST checker agree on BFCL's own data.

Gated on the disagreement set itself: it must equal
``tests/conformance/bfcl_disagreements.json`` (each entry says who is right and why), and the
same entries must be listed in docs/bfcl-conformance.md. A
new disagreement or a vanished one fails. Without bfcl-eval the test skips locally and fails
under ``CI=true`` (scripts/install-bfcl.sh installs it).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from grader.checks import Sample
from grader.checks.call_sets import answer_calls
from grader.checks.tool_call import ToolCallCheck
from grader.engine import checks_of
from tests.support.bfcl import Conformance, disagreements
from tests.support.bfcl_checker import BfclMissingError
from tests.support.paths import REPO
from tests.support.tools import unavailable

LISTED = REPO / "tests" / "conformance" / "bfcl_disagreements.json"
DOC = REPO / "docs" / "bfcl-conformance.md"
GOAL = 0.999
KEY = ("id", "kind", "case", "bfcl", "ours")


def checker() -> Conformance:
    try:
        return Conformance()
    except BfclMissingError as exc:
        unavailable(f"the BFCL checker: {exc}")


@pytest.fixture(scope="module")
def measured() -> tuple[int, list[dict[str, Any]], dict[str, list[int]]]:
    conformance = checker()
    return disagreements(conformance)


def _keys(entries: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    return {tuple(entry[k] for k in KEY) for entry in entries}


def test_disagreements_are_exactly_the_listed_ones(
    measured: tuple[int, list[dict[str, Any]], dict[str, list[int]]],
) -> None:
    _, found, _ = measured
    listed = json.loads(LISTED.read_text(encoding="utf-8"))
    new = _keys(found) - _keys(listed)
    vanished = _keys(listed) - _keys(found)
    assert not new, f"new disagreements with BFCL (explain each in {LISTED.name}): {sorted(new)}"
    assert not vanished, f"listed disagreements no longer occur: {sorted(vanished)}"


def test_agreement_meets_the_goal(
    measured: tuple[int, list[dict[str, Any]], dict[str, list[int]]],
) -> None:
    total, found, per_kind = measured
    assert total > 15_000, "the mutation corpus shrank: the figures in the docs no longer hold"
    assert set(per_kind) == {
        "canonical", "acceptable", "optional_omitted", "required_omitted", "wrong_value",
        "int_float", "case_change", "wrong_name", "calls", "extra_param",
    }  # fmt: skip
    assert 1 - len(found) / total >= GOAL


def test_every_listed_disagreement_says_who_is_right_and_is_in_the_docs() -> None:
    listed = json.loads(LISTED.read_text(encoding="utf-8"))
    doc = DOC.read_text(encoding="utf-8")
    for entry in listed:
        assert entry["right"] in ("ours", "bfcl"), entry
        assert len(entry["why"]) > 40, entry
        assert f"| {entry['id']} | {entry['kind']} | {entry['case']} |" in doc, entry


def test_fast_and_explained_matching_agree_on_the_corpus() -> None:
    """ExpectedCall.matches (the yes/no used per pair) and mismatch (the walk that names the
    first difference) must give the same verdict for every (expected, answer call) pair."""
    conformance = checker()
    pairs = 0
    for case in conformance.cases():
        (check,) = checks_of(conformance.task(case.item))
        assert isinstance(check, ToolCallCheck)
        expected = check.parallel or ((check.matcher,) if check.matcher is not None else ())
        for answer in answer_calls(Sample.from_answer(case.wire)):
            for exp in expected:
                pairs += 1
                assert exp.matches(answer) == (exp.mismatch(answer) is None), (case, exp.name)
    assert pairs > 20_000
