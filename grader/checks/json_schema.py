"""``json_schema``: every call's arguments validated against a JSON Schema (seed 002).

``{"type": "json_schema", "name", "schema": {...} | "from_request"}``

With a literal schema, the arguments of every call in the answer must validate against it.
With ``"from_request"``, each call is validated against the ``parameters`` of the tool of
the same name in the request's own ``tools`` list (``CheckContext.request_tools``): the schema
the model was actually shown. There, a call to a tool the request did not declare is a model
fail (``undeclared_tool``); a request without tools is an infrastructure error
(``no_request_tools``), because nothing was there to validate against.

An answer without a call fails (``no_call``); arguments that are not a JSON object fail
(``invalid_arguments``). ``format`` keywords are annotations, not assertions (the JSON Schema
2020-12 default), so a verdict never depends on which optional format libraries are installed.

``"target": "answer"`` validates the answer's *text* instead (seed 002's schema compliance of
a structured reply such as ``{"action", "arguments"}``): the whole completion (``output_text``)
is parsed as JSON, as the seed's ``json.loads(completion)`` does, so a fenced or prose-wrapped
JSON fails (``not_json``); with ``"extract": true`` the last top-level ``{...}`` in the text that
parses is validated instead. ``from_request`` does not apply there (request tools describe
calls, not replies).

Validators come from ``grader.checks._schema``: a ``$ref`` resolves only inside the schema
(nothing is fetched: ``schema_ref_unresolvable``) and patterns run on RE2 in linear time (a
pattern it refuses is ``pattern_refused``); both are ``error`` columns for a request's schema,
and a task's literal schema with a refused pattern fails to load.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from grader.checks._base import BaseCheck, CheckContext, CheckResult, Sample, Spec, sample_calls
from grader.json import JSONError, loads_exact
from grader.toolcall.canon import TooDeepError, canonical_json
from grader.toolcall.extract import top_level_object_spans
from grader.values import value_type

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

FROM_REQUEST = "from_request"
_NO_PARAMETERS: Mapping[str, Any] = {"type": "object"}
_SHOWN = 200  # characters of a validation message kept in a reason (it can quote the value)
_CACHE_SIZE = 256  # validators for request schemas: requests repeat the same tools


_SCHEMA: Any = None


def _schema() -> Any:
    """:mod:`grader.checks._schema` (and jsonschema), imported on first use: jsonschema is a
    good part of ``gradeproxy``'s start-up, and most task sets have no json_schema check."""
    global _SCHEMA
    if _SCHEMA is None:
        from grader.checks import _schema as module

        _SCHEMA = module
    return _SCHEMA


def _validator(schema: Any) -> Validator:
    """A validator for ``schema``; raise ``SchemaError`` when the schema is invalid and
    ``PatternError`` when one of its patterns cannot be matched in bounded time."""
    validator: Validator = _schema().safe_validator(schema)
    return validator


class _ValidatorCache:
    """A small LRU of validators keyed by canonical schema text.

    Locked: the proxy may grade in worker threads, and an ``OrderedDict`` reordered by two
    threads at once can lose or double-evict entries.
    """

    def __init__(self) -> None:
        self._items: OrderedDict[str, Validator] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, schema: Any) -> Validator:
        key = canonical_json(schema)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        validator = _validator(schema)
        with self._lock:
            self._items[key] = validator
            if len(self._items) > _CACHE_SIZE:
                self._items.popitem(last=False)
        return validator


_REQUEST_VALIDATORS = _ValidatorCache()


def request_schema(tools: list[Any], name: str) -> Any | None:
    """The ``parameters`` schema of the named tool in a request's ``tools``; None if absent."""
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        declared = function if isinstance(function, dict) else tool
        if declared.get("name") == name:
            parameters = declared.get("parameters")
            return parameters if parameters is not None else _NO_PARAMETERS
    return None


def arguments_problem(schema: Any, arguments: Any) -> str | None:
    """Why ``arguments`` do not match a tool's ``parameters`` ``schema`` (``arguments.x: ...``),
    or None: the same validators (bounded patterns, no fetched refs) a ``json_schema`` check
    uses; an unusable schema raises (``SchemaError``, ``PatternError``, ...)."""
    error = _schema().schema_errors(_REQUEST_VALIDATORS.get(schema), arguments)
    if error is None:
        return None
    message = error.message[:_SHOWN] + ("…" if len(error.message) > _SHOWN else "")
    return f"{error.json_path.replace('$', 'arguments', 1)}: {message}"


TARGETS = ("calls", "answer")


def answer_json(text: str, extract: bool) -> tuple[bool, Any]:
    """(parsed, value): the whole text as JSON, or with ``extract`` the last top-level object
    in it that parses."""
    try:
        return True, loads_exact(text)
    except JSONError:
        if not extract:
            return False, None
    spans, _too_deep = top_level_object_spans(text)
    for start, end in reversed(spans):
        try:
            return True, loads_exact(text[start:end])
        except JSONError:
            continue
    return False, None


@value_type
class JsonSchemaCheck(BaseCheck):
    """A ``json_schema`` check built: its schema's validator (or the request's) and target."""

    schema: Any  # the literal schema, or None for "from_request"
    validator: Validator | None
    target: str = "calls"
    extract: bool = False

    @classmethod
    def build(cls, definition: Mapping[str, Any], where: str) -> JsonSchemaCheck:
        spec = Spec(definition, where, frozenset({"schema", "target", "extract"}))
        schema = definition.get("schema")
        target = definition.get("target", "calls")
        if target not in TARGETS:
            raise spec.error("target", f"must be one of {', '.join(TARGETS)}")
        extract = definition.get("extract", False)
        if not isinstance(extract, bool):
            raise spec.error("extract", "must be true or false")
        if extract and target != "answer":
            raise spec.error("extract", "applies to 'target': 'answer' only")
        if schema == FROM_REQUEST:
            if target == "answer":
                raise spec.error("schema", "'from_request' describes calls: give a literal schema")
            return cls(spec.name, "json_schema", spec.digest(), None, None)
        if not isinstance(schema, dict | bool):
            raise spec.error("schema", f"must be a JSON Schema object or {FROM_REQUEST!r}")
        try:
            validator = _validator(schema)
        except _schema().SchemaError as exc:
            raise spec.error("schema", f"is not a valid JSON Schema: {exc.message}") from None
        except _schema().PatternError as exc:
            raise spec.error("schema", str(exc)) from None
        return cls(spec.name, "json_schema", spec.digest(), schema, validator, target, extract)

    def _run_answer(self, validator: Validator, sample: Sample) -> CheckResult:
        parsed, value = answer_json(sample.output_text, self.extract)
        if not parsed:
            how = "holds no JSON object" if self.extract else "is not JSON as a whole"
            return self.result(False, f"the answer {how}", "not_json")
        try:
            error = _schema().schema_errors(validator, value)
        except _schema().UnresolvableRefError as exc:
            reason = f"{exc} (references are never fetched)"
            return self.result(None, reason, "schema_ref_unresolvable", error=str(exc))
        if error is not None:
            where = error.json_path.replace("$", "answer", 1)
            message = error.message[:_SHOWN] + ("…" if len(error.message) > _SHOWN else "")
            return self.result(False, f"{where}: {message}", "schema_invalid")
        return self.result(True, "the answer is valid", "schema_valid")

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        if self.target == "answer" and self.validator is not None:
            return self._run_answer(self.validator, sample)
        calls = sample_calls(sample)
        if not calls:
            return self.result(False, "answer has no call to validate", "no_call")
        tools = context.request_tools
        if self.validator is None and not tools:
            reason = "schema is 'from_request' but the request declared no tools"
            return self.result(None, reason, "no_request_tools", error=reason)
        for index, call in enumerate(calls):
            label = f"call #{index} ({call.name or '<unnamed>'})"
            if call.name is None or call.arguments is None:
                return self.result(
                    False, f"{label}: arguments are not a JSON object", "invalid_arguments"
                )
            validator = self.validator
            if validator is None:
                schema = request_schema(tools or [], call.name)
                if schema is None:
                    return self.result(
                        False, f"{label}: the request declared no such tool", "undeclared_tool"
                    )
                try:
                    validator = _REQUEST_VALIDATORS.get(schema)
                except (_schema().SchemaError, TooDeepError, TypeError) as exc:
                    reason = f"{label}: the request's parameters schema is invalid"
                    return self.result(None, reason, "request_schema_invalid", error=str(exc))
                except _schema().PatternError as exc:
                    reason = f"{label}: {exc}"
                    return self.result(None, reason, "pattern_refused", error=str(exc))
            try:
                error = _schema().schema_errors(validator, call.arguments)
            except _schema().UnresolvableRefError as exc:
                reason = f"{label}: {exc} (references are never fetched)"
                return self.result(None, reason, "schema_ref_unresolvable", error=str(exc))
            if error is not None:
                where = error.json_path.replace("$", "arguments", 1)
                message = error.message[:_SHOWN] + ("…" if len(error.message) > _SHOWN else "")
                return self.result(False, f"{label}: {where}: {message}", "schema_invalid")
        return self.result(True, f"{len(calls)} call(s) valid", "schema_valid")
