"""``tool_call``: grading.md's tool-call grader as a check, with BFCL-style options.

``{"type": "tool_call", "name"}`` grades exactly as :func:`grader.toolcall.match.match_call` does
against the task's ``expected`` (and ``metadata.stale``); a task without ``checks`` gets this check,
named ``tool_call``. Options (matching semantics live in :mod:`grader.checks.call_match`):

* ``expected`` — a call to grade against instead of the task's (then no stale call applies);
* ``acceptable`` — ``{"arguments.<path>": [values...]}``: any listed value is accepted at that
  path (compared canonically, so ``"PT1H"`` accepts ``"PT60M"``);
* ``optional`` — ``["arguments.<path>", ...]``: the argument may be absent; when present it
  is graded as usual;
* ``strings`` — ``"exact"`` (default), ``"casefold"`` or ``"bfcl"``, or an object mapping
  ``"default"`` and argument paths to modes;
* ``numbers`` — ``{"arguments.<path>": "integer" | "number"}``: strict numeric types (opt-in:
  without them ``4550 == 4550.0``);
* ``count`` — single form only: ``"last"`` (default, grading.md: the last usable call is
  graded, earlier ones ignored) or ``"exactly_one"`` (a second call fails: ``extra_call`` or
  ``duplicate_call``);
* ``parallel`` — a list of expected calls, matched in any order, one to one, against *all*
  calls in the answer's ``tool_calls``, with an exact count (an extra call fails, a repeated
  one with ``duplicate_call``). Each entry may carry its own ``acceptable``, ``optional``,
  ``strings`` and ``numbers`` beside ``name`` and ``arguments``; check-level options apply to
  every entry, an entry's own ones are added to them;
* ``expect_no_call: true`` — passes only when the answer carries no call at all.

Paths are written as the grader reports them: ``arguments.filters.status``,
``arguments.items[0].qty``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from grader.checks._base import BaseCheck, CheckDefinitionError, CheckReasonCode, CheckResult, Spec
from grader.checks.call_match import (
    EVERY,
    NUMBER_TYPES,
    STRING_MODES,
    AnswerCall,
    ExpectedCall,
    Mismatch,
    NumberType,
    Path,
    PathError,
    Rules,
    StringMode,
    parse_path,
)
from grader.checks.call_sets import (
    answer_calls,
    max_matching,
    schema_numeric_mismatch,
    usable_depth,
)
from grader.checks.json_schema import FROM_REQUEST, request_schema
from grader.checks.sample import CheckContext, Sample
from grader.toolcall.extract import Call, call_from_value, extract
from grader.toolcall.match import match_call
from grader.verdict import Verdict

MAX_PARALLEL = 64
DEFAULT_DEFINITION: Mapping[str, Any] = {"name": "tool_call", "type": "tool_call"}
COUNTS = ("last", "exactly_one")
_RULE_KEYS = ("acceptable", "optional", "strings", "numbers")
_ENTRY_KEYS = frozenset({"name", "arguments", "function", "type", "id", *_RULE_KEYS})


def call_of(value: Any) -> Call | None:
    """A task-style call: an object (wrappers allowed) or a JSON string holding one."""
    return extract(value).call if isinstance(value, str) else call_from_value(value)


def _path(spec: Spec, key: str, text: Any) -> Path:
    try:
        path = parse_path(text)
    except PathError as exc:
        raise spec.error(key, str(exc)) from None
    every = [i for i, step in enumerate(path) if step == EVERY]
    if every and (not key.endswith("numbers") or every != [len(path) - 1]):
        raise spec.error(key, f"path {text!r}: '[*]' is allowed only at the end of a numbers path")
    return path


def _rules(spec: Spec, raw: Mapping[str, Any], where: str, base: Rules | None = None) -> Rules:
    """Read ``acceptable``/``optional``/``strings``/``numbers`` from ``raw`` over ``base``."""
    acceptable = dict(base.acceptable) if base else {}
    acc_raw = raw.get("acceptable", {})
    if not isinstance(acc_raw, dict):
        raise spec.error(f"{where}acceptable", "must map argument paths to lists of values")
    for text, values in acc_raw.items():
        if not isinstance(values, list) or not values:
            raise spec.error(f"{where}acceptable", f"{text!r} needs a non-empty list of values")
        acceptable[_path(spec, f"{where}acceptable", text)] = tuple(values)
    opt_raw = raw.get("optional", [])
    if not isinstance(opt_raw, list):
        raise spec.error(f"{where}optional", "must be a list of argument paths")
    optional = set(base.optional) if base else set()
    optional.update(_path(spec, f"{where}optional", p) for p in opt_raw)
    strings: StringMode = base.strings if base else "exact"
    string_paths = dict(base.string_paths) if base else {}
    str_raw = raw.get("strings")
    if isinstance(str_raw, str):
        str_raw = {"default": str_raw}
    if str_raw is not None:
        if not isinstance(str_raw, dict):
            raise spec.error(f"{where}strings", f"must be one of {STRING_MODES} or an object")
        for text, mode in str_raw.items():
            if mode not in STRING_MODES:
                raise spec.error(f"{where}strings", f"{mode!r} is not one of {STRING_MODES}")
            if text == "default":
                strings = mode
            else:
                string_paths[_path(spec, f"{where}strings", text)] = mode
    numbers: dict[Path, NumberType] = dict(base.numbers) if base else {}
    num_raw = raw.get("numbers", {})
    if num_raw == FROM_REQUEST and not where:
        num_raw = {}  # the check's numbers_from_request flag; read by build()
    if not isinstance(num_raw, dict):
        raise spec.error(f"{where}numbers", "must map argument paths to 'integer' or 'number'")
    for text, kind in num_raw.items():
        if kind not in NUMBER_TYPES:
            raise spec.error(f"{where}numbers", f"{kind!r} is not one of {NUMBER_TYPES}")
        numbers[_path(spec, f"{where}numbers", text)] = kind
    return Rules(acceptable, frozenset(optional), strings, string_paths, numbers)


def _compile(spec: Spec, key: str, call: Call, rules: Rules) -> ExpectedCall:
    try:
        return ExpectedCall(call.name, call.arguments, rules)
    except (ValueError, TypeError) as exc:
        raise spec.error(key, f"holds a value the grader cannot compare: {exc}") from None


@dataclass(frozen=True, slots=True)
class ToolCallCheck(BaseCheck):
    expected: Call | None
    stale: Call | None
    matcher: ExpectedCall | None = None  # the expected call with its rules, when any is set
    parallel: tuple[ExpectedCall, ...] = ()
    expect_no_call: bool = False
    count: str = "last"
    numbers_from_request: bool = False

    @classmethod
    def build(
        cls,
        definition: Mapping[str, Any],
        where: str,
        task_expected: Call | None = None,
        task_stale: Call | None = None,
    ) -> ToolCallCheck:
        spec = Spec(
            definition,
            where,
            frozenset({"expected", "parallel", "expect_no_call", "count", *_RULE_KEYS}),
        )
        expected, stale = task_expected, task_stale
        if "expected" in definition:
            expected, stale = call_of(definition["expected"]), None
            if expected is None:
                raise spec.error("expected", "is not a usable call {name, arguments}")
        no_call = definition.get("expect_no_call", False)
        if not isinstance(no_call, bool):
            raise spec.error("expect_no_call", "must be true or false")
        count = definition.get("count", "last")
        if count not in COUNTS:
            raise spec.error("count", f"must be one of {', '.join(COUNTS)}")
        rules = _rules(spec, definition, "")
        has_rules = any(key in definition for key in _RULE_KEYS)
        parallel = cls._parallel(spec, definition.get("parallel"), rules)
        if no_call and (has_rules or parallel or "expected" in definition):
            raise spec.error("expect_no_call", "cannot be combined with other options")
        if parallel and "count" in definition:
            raise spec.error("count", "applies to the single-call form: 'parallel' is exact")
        if not no_call and not parallel and expected is None:
            raise spec.error(
                "expected", "is missing: give the task an 'expected' call or the check one"
            )
        matcher = None
        if expected is not None and not parallel and (has_rules or count != "last"):
            matcher = _compile(spec, "acceptable", expected, rules)
        return cls(
            spec.name,
            "tool_call",
            spec.digest(),
            expected,
            stale,
            matcher,
            parallel,
            no_call,
            count,
            definition.get("numbers") == FROM_REQUEST,
        )

    @staticmethod
    def _parallel(spec: Spec, raw: Any, rules: Rules) -> tuple[ExpectedCall, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_PARALLEL:
            raise spec.error("parallel", f"must be a list of 1 to {MAX_PARALLEL} calls")
        calls = []
        for index, value in enumerate(raw):
            own: Mapping[str, Any] = {}
            unknown = sorted(set(value) - _ENTRY_KEYS) if isinstance(value, dict) else []
            if unknown:
                known = ", ".join(sorted(_ENTRY_KEYS))
                raise spec.error(
                    f"parallel[{index}]", f"has unknown field {unknown[0]!r} ({known})"
                )
            if isinstance(value, dict) and any(key in value for key in _RULE_KEYS):
                own = value
                value = {k: v for k, v in value.items() if k not in _RULE_KEYS}
            call = call_of(value)
            if call is None:
                raise spec.error(f"parallel[{index}]", "is not a usable call {name, arguments}")
            entry_rules = _rules(spec, own, f"parallel[{index}].", rules) if own else rules
            calls.append(_compile(spec, f"parallel[{index}]", call, entry_rules))
        return tuple(calls)

    # --- grading ----------------------------------------------------------------------------

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        if self.expect_no_call:
            name = _first_call_name(sample)
            if name is not None:
                return self.result(False, f"expected no call, got {name!r}", "unexpected_call")
            return self.result(True, "no call, as expected", "match")
        if self.numbers_from_request and not context.request_tools:
            reason = "numbers is 'from_request' but the request declared no tools"
            return self.result(None, reason, "no_request_tools", error=reason)
        tools = (context.request_tools or []) if self.numbers_from_request else None
        if self.parallel:
            return self._run_parallel(answer_calls(sample), tools)
        if self.expected is None:  # build() refuses this; kept total for the type checker
            return self.result(None, "no expected call", "check_error", error="no expected call")
        if self.matcher is not None:
            return self._run_rules(self.matcher, sample, tools)
        return self._from_verdict(self._grade(self.expected, self.stale, sample.answer))

    def _grade(self, expected: Call, stale: Call | None, answer: str) -> Verdict:
        """:func:`grader.toolcall.match.match_call` against ``expected``: grading.md's grader,
        unchanged (the options go through the matcher, ``_run_rules``)."""
        return match_call(expected, stale, answer)

    def _run_rules(
        self, matcher: ExpectedCall, sample: Sample, tools: list[Any] | None
    ) -> CheckResult:
        """The single-call form with options: the last usable call (or the only call).

        Calls are read once (``answer_calls``): a ``tool_calls`` answer is not re-serialised
        and re-extracted, and pre-parsed ``output_tools`` arguments are not parsed at all.
        """
        calls = answer_calls(sample)
        if self.count == "exactly_one" and len(calls) > 1:
            dup = any(_same(calls[0], c) for c in calls[1:])
            code: CheckReasonCode = "duplicate_call" if dup else "extra_call"
            return self.result(False, f"expected exactly one call, got {len(calls)}", code)
        got = next((c for c in reversed(calls) if c.name is not None and usable_depth(c)), None)
        if got is None:
            return self._from_verdict(self._grade(matcher_call(matcher), None, sample.answer))
        miss = matcher.mismatch(got) or _typed(got, tools)
        if miss is None:
            return self._rules_result(None)
        if self.stale is not None:
            found = call_from_value({"name": got.name, "arguments": got.arguments})
            if found is not None and found.canonical == self.stale.canonical:
                return self.result(
                    False,
                    "staleSchemaUsed: the call matches the pre-migration schema",
                    "stale_schema",
                    details={"path": None, "staleSchemaUsed": True},
                )
        return self._rules_result(miss)

    def _rules_result(self, miss: Mismatch | None) -> CheckResult:
        if miss is None:
            return self.result(
                True,
                "matches the expected call",
                "match",
                details={"path": None, "staleSchemaUsed": False},
            )
        return self.result(
            False,
            miss.reason,
            miss.code,
            details={"path": miss.path, "staleSchemaUsed": False},
        )

    def verdict(self, sample: Sample) -> Verdict | None:
        """The tool-call verdict of a single-call check (None for parallel and no-call forms)."""
        if self.expect_no_call or self.parallel or self.expected is None:
            return None
        return self._grade(self.expected, self.stale, sample.answer)

    def _from_verdict(self, verdict: Verdict) -> CheckResult:
        return self.result(
            verdict.score == 1,
            verdict.reason,
            verdict.reason_code,
            details={"path": verdict.path, "staleSchemaUsed": verdict.stale_schema_used},
        )

    def _run_parallel(self, answers: list[AnswerCall], tools: list[Any] | None) -> CheckResult:
        want = len(self.parallel)
        if len(answers) < want:
            return self.result(
                False,
                f"expected {want} parallel calls, got {len(answers)}",
                "parallel_count_mismatch",
            )
        typed = [_typed(a, tools) is None for a in answers]
        expected = self.parallel

        def fit(row: int, col: int) -> bool:
            return typed[col] and expected[row].matches(answers[col])

        partner = max_matching(want, len(answers), fit, perfect=True)
        for index, got in enumerate(partner):
            if got is None:
                exp = self.parallel[index]
                return self.result(
                    False,
                    f"expected call #{index} ({exp.name}) matches no call in the answer",
                    "parallel_unmatched",
                )
        if len(answers) > want:
            used = {p for p in partner if p is not None}
            extra = [i for i in range(len(answers)) if i not in used]
            dup = any(_same(answers[i], answers[j]) for i in extra for j in used)
            code: CheckReasonCode = "duplicate_call" if dup else "extra_call"
            what = "a repeated call" if dup else "an extra call"
            return self.result(
                False, f"expected {want} parallel calls, got {len(answers)}: {what}", code
            )
        return self.result(True, f"all {want} parallel calls matched", "match")


def _first_call_name(sample: Sample) -> str | None:
    """The name of the answer's first call (``"<unnamed>"`` if it has none), or None when it
    carries no call: any ``tool_calls`` element is a call, usable or not, so no arguments are
    parsed to decide."""
    if sample.output_tools:
        function = sample.output_tools[0].get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) and name else "<unnamed>"
    found = extract(sample.answer).call
    return None if found is None else found.name or "<unnamed>"


def _typed(call: AnswerCall, tools: list[Any] | None) -> Mismatch | None:
    """With ``numbers: "from_request"``: an ``integer`` of the request's tool schema written
    as ``5.0`` (a tool the request lacks adds nothing: matching decides that call)."""
    if tools is None or call.name is None:
        return None
    schema = request_schema(tools, call.name)
    return None if schema is None else schema_numeric_mismatch(call.arguments, schema)


def _same(a: AnswerCall, b: AnswerCall) -> bool:
    return a.name == b.name and a.canonical("exact") == b.canonical("exact")


def matcher_call(matcher: ExpectedCall) -> Call:
    """The plain call of a compiled expected call (for grading.md's no-call verdicts)."""
    call = call_from_value({"name": matcher.name, "arguments": matcher.arguments})
    if call is None:  # pragma: no cover - built from a usable call
        raise AssertionError("compiled expected call is not usable")
    return call


def default_check(expected: Call | None, stale: Call | None, where: str = "") -> ToolCallCheck:
    """The check a task without ``checks`` gets: grading.md's tool-call grader."""
    try:
        return ToolCallCheck.build(DEFAULT_DEFINITION, where, expected, stale)
    except CheckDefinitionError:
        raise CheckDefinitionError(
            f"{where + ': ' if where else ''}a task without 'checks' needs an 'expected' call"
        ) from None
