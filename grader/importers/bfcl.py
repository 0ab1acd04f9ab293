"""BFCL question and possible-answer files to gradeproxy tasks (``gradeproxy import bfcl``).

Each BFCL entry becomes one task whose ``tool_call`` check expresses the possible answer
exactly as BFCL's AST checker (bfcl-eval 2026.3.23) reads it:

* a parameter's list of possible values: the first is ``expected``, all of them ``acceptable``;
  ``""`` in the list makes the parameter ``optional`` unless the function doc lists it in
  ``required`` (BFCL checks ``required`` from the doc first, so a required parameter is never
  optional whatever the answer file says);
* a dict value (``{"key": [values...]}``) is expanded into every dict it accepts (each key's
  values, ``""`` meaning absent) and listed whole under ``acceptable``;
* strings compare in ``bfcl`` mode (BFCL's ``standardize_string``); an ``integer`` parameter
  whose possible values are integers is strict (``5.0`` fails, as in BFCL), a ``float`` one
  accepts any number (BFCL converts ``5`` to ``5.0``); inside an array of ``integer`` or
  ``float`` items each element is strict both ways (``numbers: {"arguments.xs[*]": ...}``), as
  BFCL's nested type check does not convert;
* simple and multiple entries grade one call with ``count: exactly_one``; parallel entries use
  ``parallel`` (exact count, any order); irrelevance entries ``expect_no_call``.

Dotted function names (``math.factorial``) are not valid OpenAI tool names
(``^[a-zA-Z0-9_-]{1,64}$``), so every ``.`` becomes ``_`` in the tools and the expected calls:
BFCL's checker does the same when a model's ``underscore_to_dot`` flag is set.

The reference answer (every first possible value, in the proxy's wire shape; a refusal text for
an irrelevance entry) is stored as a passing fixture, so ``validate-tasks`` can grade parallel
and no-call tasks.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from grader.errors import GraderError
from grader.json import dumps

MAX_EXPANSIONS = 512  # dicts one dict-valued possible answer may expand into
NO_CALL_ANSWER = "None of the available functions can answer this request."
TYPE_MAP = {
    "integer": "integer",
    "number": "number",
    "float": "number",
    "string": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "dict": "object",
    "object": "object",
    "tuple": "array",
    "any": "string",
}
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class BfclImportError(GraderError, ValueError):
    """An entry that cannot be converted; the message names the entry."""


def tool_name(name: str) -> str:
    """The OpenAI tool name for a BFCL function name (``.`` -> ``_``), validated."""
    rewritten = name.replace(".", "_")
    if not _TOOL_NAME.fullmatch(rewritten):
        raise BfclImportError(f"function name {name!r} cannot be an OpenAI tool name")
    return rewritten


def openai_schema(schema: Any) -> Any:
    """A BFCL parameter schema in JSON Schema terms (``dict`` -> ``object``, ``float`` -> ...)."""
    if isinstance(schema, list):
        return [openai_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out[key] = TYPE_MAP.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {k: openai_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = openai_schema(value)
        else:
            out[key] = value
    return out


def openai_tools(functions: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs as chat-completions tools, names rewritten."""
    tools = []
    for doc in functions:
        function = {
            "name": tool_name(doc["name"]),
            "description": doc.get("description", ""),
            "parameters": openai_schema(doc.get("parameters", {"type": "object"})),
        }
        tools.append({"type": "function", "function": function})
    return tools


def _expand(value: Any) -> list[Any]:
    """Every plain value a BFCL possible value accepts (dicts of value lists expanded)."""
    if isinstance(value, dict):
        keys = sorted(value)
        choices = []
        for key in keys:
            options = value[key] if isinstance(value[key], list) else [value[key]]
            choices.append([o for v in options for o in ([_ABSENT] if v == "" else _expand(v))])
        out = []
        for combo in itertools.islice(itertools.product(*choices), MAX_EXPANSIONS):
            out.append({k: v for k, v in zip(keys, combo, strict=True) if v is not _ABSENT})
        return out
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        parts = [_expand(v) for v in value]
        return [list(c) for c in itertools.islice(itertools.product(*parts), MAX_EXPANSIONS)]
    return [value]


_ABSENT = object()


_PYTHON_TYPE = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}


def _is_variable(declared: Any, first: Any) -> bool:
    """BFCL's ``is_variable``: a possible value of another type than the declared one (a
    variable name such as ``"data['sales']"`` for an array). BFCL then compares it exactly,
    without ``standardize_string``, so the importer marks that path ``exact``."""
    python = _PYTHON_TYPE.get(declared) if isinstance(declared, str) else None
    return python is not None and type(first) is not python


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def call_entry(
    name: str, possible: Mapping[str, list[Any]], doc: Mapping[str, Any]
) -> dict[str, Any]:
    """One expected call with its ``acceptable``/``optional``/``numbers`` rules."""
    parameters = doc.get("parameters", {})
    properties = parameters.get("properties", {})
    required = set(parameters.get("required", []))
    arguments: dict[str, Any] = {}
    acceptable: dict[str, list[Any]] = {}
    optional: list[str] = []
    numbers: dict[str, str] = {}
    strings: dict[str, str] = {}
    for param, values in possible.items():
        path = f"arguments.{param}"
        present = [v for v in values if v != ""]
        if "" in values and param not in required:
            optional.append(path)
            if param not in properties:
                continue  # BFCL refuses a parameter its doc lacks: absent is the only pass
        if not present:
            continue
        declared = properties.get(param, {}).get("type")
        if _is_variable(declared, present[0]):
            strings[path] = "exact"
        expanded = [e for v in present for e in _expand(v)]
        arguments[param] = expanded[0]
        if len(expanded) > 1:
            acceptable[path] = expanded
        if declared == "integer" and all(_is_int(v) for v in present):
            numbers[path] = "integer"
        elif declared == "float" and all(isinstance(v, int | float) for v in present):
            numbers[path] = "number"  # BFCL converts a top-level int to float
        elif declared in ("array", "tuple"):
            item = properties.get(param, {}).get("items", {}).get("type")
            lists = [v for v in present if isinstance(v, list)]
            if lists and len(lists) == len(present):
                elements = [e for v in lists for e in v]
                # BFCL's nested type check: no int-to-float conversion inside arrays.
                if item == "integer" and all(_is_int(e) for e in elements):
                    numbers[f"{path}[*]"] = "integer"
                elif item == "float" and all(isinstance(e, float) for e in elements):
                    numbers[f"{path}[*]"] = "float"
    entry: dict[str, Any] = {"name": tool_name(name), "arguments": arguments}
    rules = (
        ("acceptable", acceptable),
        ("optional", optional),
        ("numbers", numbers),
        ("strings", strings),
    )
    for key, rule in rules:
        if rule:
            entry[key] = rule
    return entry


def _doc(functions: list[Mapping[str, Any]], name: str) -> Mapping[str, Any]:
    for doc in functions:
        if doc.get("name") == name:
            return doc
    raise BfclImportError(f"no function doc named {name!r}")


def _wire(calls: list[dict[str, Any]]) -> str:
    wire = [
        {
            "type": "function",
            "function": {"name": c["name"], "arguments": dumps(c["arguments"]).decode()},
        }
        for c in calls
    ]
    return dumps({"tool_calls": wire}).decode()


def convert(question: Mapping[str, Any], answer: Mapping[str, Any] | None) -> dict[str, Any]:
    """One BFCL entry (and its possible answer; None for irrelevance) as a task."""
    entry_id = question["id"]
    functions = list(question.get("function", []))
    tools = openai_tools(functions)
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise BfclImportError(f"{entry_id}: two functions share a tool name after rewriting dots")
    metadata: dict[str, Any] = {"source": "bfcl", "bfcl_id": entry_id, "tools": tools}
    if answer is None or "irrelevance" in entry_id:
        check: dict[str, Any] = {"type": "tool_call", "name": "no_call", "expect_no_call": True}
        metadata["fixtures"] = [{"id": "reference", "answer": NO_CALL_ANSWER, "passes": True}]
        return {"id": entry_id, "checks": [check], "metadata": metadata}
    calls = []
    for expected in answer["ground_truth"]:
        ((name, possible),) = expected.items()
        calls.append(call_entry(name, possible, _doc(functions, name)))
    reference = [{"name": c["name"], "arguments": c["arguments"]} for c in calls]
    metadata["fixtures"] = [{"id": "reference", "answer": _wire(reference), "passes": True}]
    if "parallel" in entry_id:
        check = {"type": "tool_call", "name": "calls", "strings": "bfcl", "parallel": calls}
        return {"id": entry_id, "checks": [check], "metadata": metadata}
    if len(calls) != 1:
        raise BfclImportError(f"{entry_id}: a non-parallel entry needs exactly one expected call")
    (call,) = calls
    check = {"type": "tool_call", "name": "call", "strings": "bfcl", "count": "exactly_one"}
    check.update({k: v for k, v in call.items() if k not in ("name", "arguments")})
    check["strings"] = {"default": "bfcl", **call.get("strings", {})}
    return {"id": entry_id, "expected": reference[0], "checks": [check], "metadata": metadata}


def convert_all(
    questions: Iterable[Mapping[str, Any]], answers: Iterable[Mapping[str, Any]] | None
) -> Iterator[dict[str, Any]]:
    """Every question as a task, its possible answer found by ``id``."""
    by_id = {a["id"]: a for a in answers or []}
    for question in questions:
        yield convert(question, by_id.get(question["id"]))
