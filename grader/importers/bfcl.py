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
an irrelevance entry, a call for a relevance one) is stored as a passing fixture, so
``validate-tasks`` can grade parallel and no-call tasks.

Categories (:data:`CATEGORIES`, docs/bfcl-conformance.md): the single-turn AST ones are imported;
``live_relevance`` entries pass when the answer calls a function (any function, any arguments:
BFCL's relevance check); ``irrelevance`` and ``live_irrelevance`` ones when it calls none. Java,
JavaScript, the multi-turn, memory, web-search and format-sensitivity files are refused with a
:class:`BfclImportError` naming what is unsupported (see :data:`REFUSED`). Every task keeps
BFCL's ``category``, ``bfcl_id`` and ``question`` in its metadata; an entry whose own possible
answer BFCL's checker cannot pass (:func:`reference_fails`) is flagged there
(``bfcl_reference_fails``) and still imported.
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


# BFCL's categories (bfcl-eval 2026.3.23's data files) and how each is imported.
AST_CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
NO_CALL_CATEGORIES = ("irrelevance", "live_irrelevance")
CALL_CATEGORIES = ("live_relevance",)
# Categories refused, with why: the importer writes single-answer tool-call tasks.
REFUSED = {
    "simple_java": "BFCL grades Java arguments as Java source strings (its own typing rules), "
    "not yet expressed by the tool_call check",
    "simple_javascript": "BFCL grades JavaScript arguments as JavaScript source strings (its own "
    "typing rules), not yet expressed by the tool_call check",
    "multi_turn_base": "multi-turn entries (a conversation graded on executed state) need agent "
    "episodes",
    "multi_turn_long_context": "multi-turn entries (a conversation graded on executed state) "
    "need agent episodes",
    "multi_turn_miss_func": "multi-turn entries (a conversation graded on executed state) need "
    "agent episodes",
    "multi_turn_miss_param": "multi-turn entries (a conversation graded on executed state) need "
    "agent episodes",
    "memory": "memory entries (an agent with a memory backend, graded on its final text) need "
    "agent episodes",
    "web_search": "web-search entries (an agent with a search tool, graded on its final text) "
    "need agent episodes",
}
CATEGORIES = (*AST_CATEGORIES, *NO_CALL_CATEGORIES, *CALL_CATEGORIES, *REFUSED)
_CATEGORY = re.compile(r"(.+?)_\d")


def category_of(entry_id: str) -> str:
    """BFCL's category of an entry id: ``live_simple_3-2-0`` -> ``live_simple``."""
    found = _CATEGORY.match(entry_id)
    return found.group(1) if found else entry_id


def refusal(category: str) -> str | None:
    """Why entries of ``category`` are not imported (None when they are)."""
    if category in REFUSED:
        return f"BFCL category {category!r} is not supported: {REFUSED[category]}"
    if category not in CATEGORIES:
        return (
            f"BFCL category {category!r} is unknown (supported: {', '.join(AST_CATEGORIES)}, "
            f"{', '.join(NO_CALL_CATEGORIES + CALL_CATEGORIES)})"
        )
    return None


def reference_fails(question: Mapping[str, Any], answer: Mapping[str, Any]) -> str | None:
    """Why BFCL's own checker fails every answer to this entry, its reference included (None
    when it does not): a parameter the doc requires without a possible value (BFCL then wants
    it present and accepts no value), or one the possible answer requires that the doc lacks
    (BFCL calls it unexpected). Five live entries of bfcl-eval 2026.3.23 are such; the task
    grades them as their possible answer says and flags them."""
    functions = list(question.get("function", []))
    for expected in answer["ground_truth"]:
        ((name, possible),) = expected.items()
        parameters = _doc(functions, name).get("parameters", {})
        properties = parameters.get("properties", {})
        for param in parameters.get("required", []):
            if not [v for v in possible.get(param, []) if v != ""]:
                return f"{name}: required parameter {param!r} has no possible value"
        for param, values in possible.items():
            if param not in properties and "" not in values:
                return f"{name}: parameter {param!r} is not in the function doc"
    return None


def convert(question: Mapping[str, Any], answer: Mapping[str, Any] | None) -> dict[str, Any]:
    """One BFCL entry (and its possible answer; None for relevance and irrelevance) as a task."""
    entry_id = question["id"]
    category = category_of(entry_id)
    refused = refusal(category)
    if refused is not None:
        raise BfclImportError(f"{entry_id}: {refused}")
    functions = list(question.get("function", []))
    tools = openai_tools(functions)
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        raise BfclImportError(f"{entry_id}: two functions share a tool name after rewriting dots")
    metadata: dict[str, Any] = {
        "source": "bfcl",
        "bfcl_id": entry_id,
        "category": category,
        "question": question.get("question"),
        "tools": tools,
    }
    if category in NO_CALL_CATEGORIES:
        check: dict[str, Any] = {"type": "tool_call", "name": "no_call", "expect_no_call": True}
        metadata["fixtures"] = [{"id": "reference", "answer": NO_CALL_ANSWER, "passes": True}]
        return {"id": entry_id, "checks": [check], "metadata": metadata}
    if category in CALL_CATEGORIES:
        if not names:
            raise BfclImportError(f"{entry_id}: a relevance entry needs at least one function")
        check = {"type": "tool_call", "name": "a_call", "expect_call": True}
        reference_call = [{"name": names[0], "arguments": {}}]
        metadata["fixtures"] = [
            {"id": "reference", "answer": _wire(reference_call), "passes": True}
        ]
        return {"id": entry_id, "checks": [check], "metadata": metadata}
    if answer is None:
        raise BfclImportError(f"{entry_id}: no possible answer (give --answers)")
    fails = reference_fails(question, answer)
    if fails is not None:
        metadata["bfcl_reference_fails"] = fails
    calls = []
    for expected in answer["ground_truth"]:
        ((name, possible),) = expected.items()
        calls.append(call_entry(name, possible, _doc(functions, name)))
    reference = [{"name": c["name"], "arguments": c["arguments"]} for c in calls]
    metadata["fixtures"] = [{"id": "reference", "answer": _wire(reference), "passes": True}]
    if "parallel" in category:
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
    """Every question as a task, its possible answer found by ``id``.

    An entry of an unexpected shape is a :class:`BfclImportError` naming it, never another
    exception: the command says what is wrong in one line."""
    by_id = {a["id"]: a for a in answers or [] if isinstance(a, Mapping) and "id" in a}
    for index, question in enumerate(questions):
        if not isinstance(question, Mapping) or not isinstance(question.get("id"), str):
            raise BfclImportError(f"entry {index + 1}: not a BFCL entry (an object with an 'id')")
        try:
            yield convert(question, by_id.get(question["id"]))
        except BfclImportError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise BfclImportError(
                f"{question['id']}: not a BFCL AST entry ({type(exc).__name__}: {exc})"
            ) from None
