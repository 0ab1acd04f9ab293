"""string_check's seed-002 normalisation and the reversed-``like`` refusal (seeds 002, 003)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from pytest_aiohttp import AiohttpClient

from gradeproxy.cli import main
from grader.checks import CheckDefinitionError, build_check
from grader.checks.string_check import exact_match_normalize
from proxy.surfaces.scoring_http import PREFIX, add_scoring_routes
from tests.support.checks import run


def seed_normalize(text: str) -> str:
    """Seed 002's function, verbatim."""
    text = text.strip().lower()
    text = re.sub(r"[^\w\s.]", "", text)
    text = re.sub(r"\s+", " ", text)
    return text  # noqa: RET504 - the seed's function, verbatim


def eq(reference: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "string_check",
        "name": "em",
        "operation": "eq",
        "input": "{{sample.output_text}}",
        "reference": reference,
        "normalize": "exact_match",
        **extra,
    }


@pytest.mark.parametrize(
    ("reference", "answer", "passed"),
    [
        pytest.param("Paris", "  PARIS ", True, id="case_and_edges"),
        pytest.param("3.5", "3.5", True, id="dot_kept"),
        pytest.param("3.5", "35", False, id="dot_not_dropped"),
        pytest.param("3,500", "3500", True, id="comma_dropped"),
        pytest.param("snake_case", "snake_case", True, id="underscore_kept"),
        pytest.param("snake_case", "snakecase", False, id="underscore_matters"),
        pytest.param("U.S.A", "u.s.a!", True, id="bang_dropped"),
        pytest.param("new   york", "New York", True, id="whitespace_collapsed"),
        pytest.param("hi", "! hi", False, id="edge_punctuation_leaves_a_space_as_in_the_seed"),
        pytest.param("Paris", "Lyon", False, id="different"),
    ],
)
def test_exact_match_normalisation(reference: str, answer: str, passed: bool) -> None:
    assert run(eq(reference), answer).passed is passed
    assert (seed_normalize(answer) == seed_normalize(reference)) is passed


@given(st.text(max_size=60))
def test_normalize_is_the_seeds_function(text: str) -> None:
    assert exact_match_normalize(text) == seed_normalize(text)


def test_unknown_normalisation_is_refused() -> None:
    with pytest.raises(CheckDefinitionError, match="normalize"):
        build_check(eq("x", normalize="lower"))


def like(operation: str, input_: str, reference: str) -> dict[str, Any]:
    return {
        "type": "string_check",
        "name": "phrase",
        "operation": operation,
        "input": input_,
        "reference": reference,
    }


@pytest.mark.parametrize(
    ("definition", "refused"),
    [
        pytest.param(
            like("like", "may produce inaccurate results", "{{sample.output_text}}"),
            True,
            id="reversed_like",
        ),
        pytest.param(
            like("ilike", "account recovery", "{{sample.output_text}}"), True, id="reversed_ilike"
        ),
        pytest.param(
            like("like", "{{sample.output_text}}", "may produce inaccurate results"),
            False,
            id="like_the_right_way_round",
        ),
        pytest.param(
            like("like", "{{item.passage}}", "{{sample.output_text}}"),
            False,
            id="answer_as_a_span_of_the_item_is_allowed",
        ),
        pytest.param(like("eq", "Refund", "{{sample.output_text}}"), False, id="eq_is_symmetric"),
    ],
)
def test_reversed_like_is_refused(definition: dict[str, Any], refused: bool) -> None:
    if refused:
        with pytest.raises(CheckDefinitionError, match="occurs inside input"):
            build_check(definition)
    else:
        build_check(definition)


REVERSED = like("like", "may produce inaccurate results", "{{sample.output_text}}")


def test_validate_tasks_reports_a_reversed_like(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "disclosure", "checks": [REVERSED]}) + "\n")
    assert main(["validate-tasks", str(tasks)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("INVALID")
    assert "occurs inside input" in out


async def test_validate_endpoint_refuses_a_reversed_like(aiohttp_client: AiohttpClient) -> None:
    app = web.Application()
    add_scoring_routes(app, max_batch=8)
    client = await aiohttp_client(app)
    response = await client.post(f"{PREFIX}/graders/validate", json={"grader": REVERSED})
    body = await response.json()
    assert response.status == 400
    assert "occurs inside input" in body["error"]["message"]
