"""Schemas and patterns from clients can neither reach another host nor stall grading.

A listening server stands in for the target of every remote reference: whatever the schema
says (``$ref`` to http or ``file://``, a remote ``$schema`` or ``$id``), nothing arrives there,
through the check, the live proxy and the scoring API alike. Catastrophic-backtracking patterns
run on RE2: with Python's ``re`` these cases would not finish before pytest's timeout, so a
regression fails the test instead of passing slowly.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpClient

from grader.checks import CheckContext, CheckDefinitionError, Sample, build_check
from grader.json import dumps
from grader.patterns import PatternError, compile_pattern, search
from proxy.surfaces.scoring_http import PREFIX, add_scoring_routes
from tests.support.backend import Listener

EVIL = "a" * 64 + "!"  # against ^(a+)+$, Python's re takes ~2**64 steps


def hostile_schemas(url: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """(id, schema for the ``city`` argument's object, the reason code expected)."""
    return [
        ("remote_ref", {"$ref": f"{url}/schema.json"}, "schema_ref_unresolvable"),
        (
            "nested_remote_ref",
            {"type": "object", "properties": {"city": {"$ref": f"{url}/city.json"}}},
            "schema_ref_unresolvable",
        ),
        ("file_ref", {"$ref": "file:///etc/passwd"}, "schema_ref_unresolvable"),
        (
            "remote_id_and_schema_fetch_nothing",
            {"$id": f"{url}/id.json", "$schema": f"{url}/meta.json", "type": "object"},
            "schema_valid",
        ),
        (
            "ref_inside_the_schema_resolves",
            {
                "$defs": {"city": {"type": "string"}},
                "type": "object",
                "properties": {"city": {"$ref": "#/$defs/city"}},
            },
            "schema_valid",
        ),
    ]


def call(**arguments: Any) -> str:
    return dumps({"name": "get_weather", "arguments": arguments}).decode()


@pytest.mark.parametrize("case", range(5), ids=[c[0] for c in hostile_schemas("u")])
@pytest.mark.parametrize("where", ["literal", "from_request"])
def test_no_reference_is_ever_fetched(listener: Listener, case: int, where: str) -> None:
    _, schema, code = hostile_schemas(listener.url)[case]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    definition = {
        "type": "json_schema",
        "name": "s",
        "schema": schema if where == "literal" else "from_request",
    }
    result = build_check(definition).run(
        Sample.from_answer(call(city="Zürich")), {}, CheckContext(request_tools=tools)
    )
    assert result.reason_code == code
    assert result.passed is (True if code == "schema_valid" else None)
    assert listener.hits == []


PATTERNS = [
    pytest.param({"pattern": "^(a+)+$"}, EVIL, False, id="nested_quantifier"),
    pytest.param({"pattern": "^(a|aa)+$"}, EVIL, False, id="alternation_overlap"),
    pytest.param({"pattern": "^(a|a?)+$"}, EVIL, False, id="optional_overlap"),
    pytest.param({"pattern": "^(a+)+$"}, "a" * 64, True, id="nested_quantifier_match"),
    pytest.param({"patternProperties": {"^(a+)+$": {"type": "integer"}}}, None, True, id="pp"),
]


@pytest.mark.parametrize(("keyword", "value", "valid"), PATTERNS)
def test_backtracking_patterns_run_in_linear_time(
    keyword: dict[str, Any], value: str | None, valid: bool
) -> None:
    if "patternProperties" in keyword:
        schema: dict[str, Any] = {
            "type": "object",
            **keyword,
            "additionalProperties": False,
        }
        arguments: dict[str, Any] = {EVIL: 1}  # matches no pattern: an additional property
        valid = False
    else:
        schema = {"type": "object", "properties": {"city": {"type": "string", **keyword}}}
        arguments = {"city": value}
    check = build_check({"type": "json_schema", "name": "s", "schema": schema})
    result = check.run(Sample.from_answer(call(**arguments)), {}, CheckContext())
    assert result.passed is valid


REFUSED = "only linear-time RE2 patterns run"
INVALID = "not a valid JSON Schema"


@pytest.mark.parametrize(
    ("pattern", "message", "code"),
    [
        pytest.param(r"(a)\1", REFUSED, "pattern_refused", id="backreference"),
        pytest.param(r"^(?=a)a$", REFUSED, "pattern_refused", id="lookahead"),
        pytest.param(r"(?<!a)b", REFUSED, "pattern_refused", id="lookbehind"),
        pytest.param("a" * 5000, "longer than", "pattern_refused", id="too_long"),
        pytest.param("[", INVALID, "request_schema_invalid", id="not_a_pattern"),
    ],
)
def test_patterns_re2_cannot_bound_are_refused(pattern: str, message: str, code: str) -> None:
    with pytest.raises(PatternError):
        compile_pattern(pattern)
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}
    with pytest.raises(CheckDefinitionError, match=message):
        build_check({"type": "json_schema", "name": "s", "schema": schema})
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
    result = build_check({"type": "json_schema", "name": "s", "schema": "from_request"}).run(
        Sample.from_answer(call(x="a")), {}, CheckContext(request_tools=tools)
    )
    assert (result.passed, result.reason_code) == (None, code)


def test_unevaluated_with_pattern_properties_is_refused() -> None:
    schema = {"patternProperties": {"^a": {}}, "unevaluatedProperties": False}
    with pytest.raises(CheckDefinitionError, match="bounded time"):
        build_check({"type": "json_schema", "name": "s", "schema": schema})


@pytest.mark.parametrize(
    ("pattern", "text", "found"),
    [("é+", "café", True), (r"\d{3}", "ab12", False), ("^PT1H$", "PT1H", True)],
)
def test_search_keeps_json_schema_semantics(pattern: str, text: str, found: bool) -> None:
    assert search(pattern, text) is found


async def test_no_fetch_through_the_scoring_api(
    listener: Listener, aiohttp_client: AiohttpClient
) -> None:
    app = web.Application()
    add_scoring_routes(app, max_batch=8)
    client = await aiohttp_client(app)
    grader = {"type": "json_schema", "name": "s", "schema": {"$ref": f"{listener.url}/x.json"}}
    response = await client.post(
        f"{PREFIX}/graders/run", data=dumps({"grader": grader, "model_sample": call(city="Z")})
    )
    assert response.status == 200
    body = await response.json()
    print(body)
    assert body["metadata"]["errors"]["other_error"] is True
    assert listener.hits == []
