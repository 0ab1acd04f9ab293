"""text_similarity: each metric against values computed by hand, thresholds, refused metrics."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from grader.checks import CheckDefinitionError, build_check
from grader.checks.similarity import bleu, fuzzy_match, rouge_l
from tests.support.checks import run

CAT = "the cat sat on the mat"
CAT_REF = "the cat is on the mat"


@pytest.mark.parametrize(
    ("metric", "candidate", "reference", "value"),
    [
        # InDel: LCS("kitten", "sitting") = "ittn" (4); distance 6 + 7 - 2*4 = 5; 1 - 5/13.
        pytest.param(fuzzy_match, "kitten", "sitting", 8 / 13, id="fuzzy_kitten_sitting"),
        pytest.param(fuzzy_match, "BILLING", "BILLING", 1.0, id="fuzzy_identical"),
        pytest.param(fuzzy_match, "abc", "xyz", 0.0, id="fuzzy_disjoint"),
        # Case counts: "Ab" vs "ab" share only "b": 1 - (2 + 2 - 2) / 4.
        pytest.param(fuzzy_match, "Ab", "ab", 0.5, id="fuzzy_case_sensitive"),
        # p1 = 5/6, p2 = (3+1)/(5+1), p3 = (1+1)/(4+1), p4 = (0+1)/(3+1); BP = 1.
        pytest.param(bleu, CAT, CAT_REF, (5 / 6 * 4 / 6 * 2 / 5 * 1 / 4) ** 0.25, id="bleu_cat"),
        pytest.param(bleu, "BILLING", "billing", 1.0, id="bleu_one_word_case_folded"),
        # c = 2, r = 4: BP = exp(1 - 2); p1 = 1, p2 = 2/2, p3 = p4 = 1/1.
        pytest.param(bleu, "the cat", "the cat is here", math.exp(-1), id="bleu_brevity"),
        pytest.param(bleu, "dog", "the cat", 0.0, id="bleu_no_unigram_match"),
        pytest.param(bleu, "", "", 1.0, id="bleu_both_empty"),
        pytest.param(bleu, "", "x", 0.0, id="bleu_empty_candidate"),
        # LCS "the cat on the mat" = 5 of 6 both ways.
        pytest.param(rouge_l, CAT, CAT_REF, 5 / 6, id="rouge_l_cat"),
        # LCS 2: P = 1, R = 1/2, F = 2 * 1/2 / 1.5.
        pytest.param(rouge_l, "the cat", "the cat is here", 2 / 3, id="rouge_l_short"),
        # Order matters: "b a" vs "a b" has LCS 1: P = R = F = 1/2.
        pytest.param(rouge_l, "b a", "a b", 0.5, id="rouge_l_order"),
        pytest.param(rouge_l, "Hello, World!", "hello world", 1.0, id="rouge_l_punctuation"),
        pytest.param(rouge_l, "x", "", 0.0, id="rouge_l_empty_reference"),
    ],
)
def test_metric_values(
    metric: Callable[[str, str], float], candidate: str, reference: str, value: float
) -> None:
    assert metric(candidate, reference) == pytest.approx(value)


def definition(metric: str = "fuzzy_match", threshold: Any = 0.8, **extra: Any) -> dict[str, Any]:
    return {
        "type": "text_similarity",
        "name": "close",
        "input": "{{sample.output_text}}",
        "reference": "{{item.answer}}",
        "evaluation_metric": metric,
        "pass_threshold": threshold,
        **extra,
    }


@pytest.mark.parametrize(
    ("metric", "threshold", "answer", "passed"),
    [
        pytest.param("fuzzy_match", 0.6, "kitten", True, id="fuzzy_above"),
        pytest.param("fuzzy_match", 0.62, "kitten", False, id="fuzzy_below"),
        pytest.param("fuzzy_match", 8 / 13, "kitten", True, id="fuzzy_equal_threshold_passes"),
        pytest.param("rouge_l", 1.0, "Sitting!", True, id="rouge_ignores_case_and_punctuation"),
        pytest.param("bleu", 0.1, "standing", False, id="bleu_unrelated"),
    ],
)
def test_threshold(metric: str, threshold: float, answer: str, passed: bool) -> None:
    result = run(definition(metric, threshold), answer, {"answer": "sitting"})
    assert result.passed is passed
    assert result.score is not None
    assert 0.0 <= result.score <= 1.0
    assert result.reward == result.score


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        pytest.param(
            definition("meteor"), "OpenAI metric gradeproxy does not implement", id="meteor"
        ),
        pytest.param(definition("rouge_1"), "supported: fuzzy_match, bleu, rouge_l", id="rouge_1"),
        pytest.param(definition("levenshtein"), "not a known metric", id="unknown_metric"),
        pytest.param(definition(threshold=1.5), "between 0 and 1", id="threshold_above_one"),
        pytest.param(definition(threshold="0.8"), "must be a number", id="threshold_string"),
        pytest.param(definition(threshold=True), "must be a number", id="threshold_bool"),
        pytest.param(
            definition(reference="{{sample.output_text}}"), "with itself", id="self_comparison"
        ),
    ],
)
def test_refused_definitions(bad: dict[str, Any], message: str) -> None:
    with pytest.raises(CheckDefinitionError, match=message):
        build_check(bad)


def test_missing_reference_is_ungraded() -> None:
    result = run(definition(), "anything", {})
    assert (result.passed, result.score, result.reward) == (None, None, None)


WORDS_1000 = " ".join(f"w{i}" for i in range(1000))  # 1,000 tokens
WORDS_1001 = WORDS_1000 + " extra"


@pytest.mark.parametrize(
    ("metric", "answer", "reference", "code"),
    [
        # 1,000 x 1,000 token pairs is the rouge_l cap itself: scored.
        pytest.param("rouge_l", WORDS_1000, WORDS_1000, "above_threshold", id="rouge_l_at_cap"),
        pytest.param("rouge_l", WORDS_1001, WORDS_1000, "input_too_large", id="rouge_l_over_cap"),
        pytest.param("bleu", WORDS_1001, WORDS_1000, "above_threshold", id="bleu_linear_no_cap"),
        pytest.param("fuzzy_match", "a" * 200_001, "a", "input_too_large", id="fuzzy_over_chars"),
        pytest.param("bleu", "a " * 100_001, "a", "input_too_large", id="bleu_over_chars"),
    ],
)
def test_inputs_over_a_metric_cap_are_errors_never_cut(
    metric: str, answer: str, reference: str, code: str
) -> None:
    """A pair over the cap is an ``error`` column with the sizes, not a score of a cut text."""
    result = run(definition(metric, 0.5), answer, {"answer": reference})
    assert result.reason_code == code
    if code == "input_too_large":
        assert result.passed is None
        assert "over the cap" in result.reason
