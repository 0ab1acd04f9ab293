"""``tool_call``: grading.md's tool-call grader as a check, with BFCL-style options.

``{"type": "tool_call", "name"}`` grades exactly as :func:`grader.toolcall.match.match_call` does
against the task's ``expected`` (and ``metadata.stale``); a task without ``checks`` gets this check,
named ``tool_call``. Options (matching semantics live in :mod:`grader.checks.call_match`,
what each rule means for a value in :mod:`grader.checks.call_rules`):

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
* ``expect_no_call: true`` — passes only when the answer carries no call at all;
* ``expect_call: true`` — passes when the answer carries a call, whatever its function and
  arguments (BFCL's relevance entries: the model should not refuse).

Paths are written as the grader reports them: ``arguments.filters.status``,
``arguments.items[0].qty``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from types import MappingProxyType
from typing import Any

from grader.checks._base import BaseCheck, CheckDefinitionError, CheckReasonCode, CheckResult, Spec
from grader.checks.call_answer import AnswerCall
from grader.checks.call_match import ExpectedCall, Mismatch
from grader.checks.call_options import (
    RULE_KEYS,
    compile_call,
    read_parallel,
    read_rules,
)
from grader.checks.call_options import call_of as call_of  # re-exported: build.py reads it
from grader.checks.call_sets import (
    answer_calls,
    max_matching,
    schema_numeric_mismatch,
    usable_depth,
)
from grader.checks.json_schema import FROM_REQUEST, request_schema
from grader.checks.sample import CheckContext, Sample
from grader.toolcall.extract import Call, call_from_value, extract
from grader.toolcall.match import match_call, no_call_verdict
from grader.values import value_type
from grader.verdict import REASON_CODES, ReasonCode, Verdict

# The details of a verdict without a path or stale call; read-only, since results that hold it
# are shared (ToolCallCheck._constant).
_NOT_STALE: Mapping[str, Any] = MappingProxyType({"path": None, "staleSchemaUsed": False})
_CONSTANT_VERDICTS = frozenset({"no_call", "too_deep"})
DEFAULT_DEFINITION: Mapping[str, Any] = {"name": "tool_call", "type": "tool_call"}
COUNTS = ("last", "exactly_one")
_OPTIONS = frozenset({"expected", "parallel", "expect_no_call", "expect_call", "count", *RULE_KEYS})
# A rule mismatch's code as a verdict's (grading.md's codes; a strict number is a type).
VERDICT_CODES: Mapping[str, ReasonCode] = {
    **{code: code for code in REASON_CODES},
    "numeric_type_mismatch": "type_mismatch",
}


# What names a result that never varies within a check: an outcome, or an outcome and a number
# (the expected call unmatched, the answer's call count).
ResultKey = str | tuple[str, int]


@value_type
class ToolCallCheck(BaseCheck):
    """A ``tool_call`` check built: the expected call(s) compiled with their rules (the
    options in this module's docstring), and the results that never vary, made once."""

    expected: Call | None
    stale: Call | None
    matcher: ExpectedCall | None = None  # the expected call with its rules, when any is set
    parallel: tuple[ExpectedCall, ...] = ()
    expect_no_call: bool = False
    count: str = "last"
    numbers_from_request: bool = False
    expect_call: bool = False
    # Results of outcomes that never vary (see _constant); not part of the check's identity.
    results: dict[ResultKey, CheckResult] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    @classmethod
    def build(
        cls,
        definition: Mapping[str, Any],
        where: str,
        task_expected: Call | None = None,
        task_stale: Call | None = None,
        parsed: bool = False,
    ) -> ToolCallCheck:
        """Validate and compile a definition; ``parsed``: it was read from JSON text by
        :mod:`grader.json` (a loaded task's), which its digest is written from directly."""
        spec = Spec(definition, where, _OPTIONS)
        expected, stale = task_expected, task_stale
        if "expected" in definition:
            expected, stale = call_of(definition["expected"]), None
            if expected is None:
                raise spec.error("expected", "is not a usable call {name, arguments}")
        no_call = definition.get("expect_no_call", False)
        if not isinstance(no_call, bool):
            raise spec.error("expect_no_call", "must be true or false")
        any_call = definition.get("expect_call", False)
        if not isinstance(any_call, bool):
            raise spec.error("expect_call", "must be true or false")
        if any_call and len(definition.keys() - {"name", "type", "expect_call"}) > 0:
            raise spec.error("expect_call", "cannot be combined with other options")
        count = definition.get("count", "last")
        if count not in COUNTS:
            raise spec.error("count", f"must be one of {', '.join(COUNTS)}")
        rules = read_rules(spec, definition, "")
        has_rules = not definition.keys().isdisjoint(RULE_KEYS)
        parallel = read_parallel(spec, definition.get("parallel"), rules)
        if no_call and (has_rules or parallel or "expected" in definition):
            raise spec.error("expect_no_call", "cannot be combined with other options")
        if parallel and "count" in definition:
            raise spec.error("count", "applies to the single-call form: 'parallel' is exact")
        if not no_call and not any_call and not parallel and expected is None:
            raise spec.error(
                "expected", "is missing: give the task an 'expected' call or the check one"
            )
        matcher = None
        if expected is not None and not parallel and (has_rules or count != "last"):
            matcher = compile_call(spec, "acceptable", expected, rules)
        return cls(
            spec.name,
            "tool_call",
            spec.digest(parsed),
            expected,
            stale,
            matcher,
            parallel,
            no_call,
            count,
            definition.get("numbers") == FROM_REQUEST,
            any_call,
        )

    # --- grading ----------------------------------------------------------------------------

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        return self.graded(sample, context)[0]

    def graded(self, sample: Sample, context: CheckContext) -> tuple[CheckResult, Verdict | None]:
        """The check's result and, for the single-call form, the tool-call verdict of the same
        match (None for the parallel and call/no-call forms): the engine fills the outcome's
        verdict from it instead of matching the answer a second time."""
        if self.expect_no_call or self.expect_call:
            return self._run_presence(sample), None
        if self.numbers_from_request and not context.request_tools:
            reason = "numbers is 'from_request' but the request declared no tools"
            error = self.result(None, reason, "no_request_tools", error=reason)
            return error, self.verdict(sample)
        tools = (context.request_tools or []) if self.numbers_from_request else None
        if self.parallel:
            return self._run_parallel(answer_calls(sample, remember=True), tools), None
        if self.expected is None:  # build() refuses this; kept total for the type checker
            error = self.result(None, "no expected call", "check_error", error="no expected call")
            return error, None
        if self.matcher is not None:
            return self._run_rules(self.matcher, self.expected, sample, tools)
        verdict = self._grade(self.expected, self.stale, sample.answer)
        return self._from_verdict(verdict), verdict

    def _run_presence(self, sample: Sample) -> CheckResult:
        """``expect_no_call`` and ``expect_call``: whether the answer carries a call at all."""
        name = _first_call_name(sample)
        if self.expect_call:
            if name is None:
                return self._constant(
                    "expected_call", False, "expected a call, got none", "no_call"
                )
            return self._constant("a_call", True, "a call, as expected", "match")
        if name is not None:
            return self.result(False, f"expected no call, got {name!r}", "unexpected_call")
        return self._constant("expected_no_call", True, "no call, as expected", "match")

    def _grade(self, expected: Call, stale: Call | None, answer: str) -> Verdict:
        """:func:`grader.toolcall.match.match_call` against ``expected``: grading.md's grader,
        unchanged (the options go through the matcher, ``_run_rules``)."""
        return match_call(expected, stale, answer)

    def _run_rules(
        self, matcher: ExpectedCall, expected: Call, sample: Sample, tools: list[Any] | None
    ) -> tuple[CheckResult, Verdict | None]:
        """The single-call form with options: the last usable call (or the only call).

        Calls are read once (``answer_calls``): a ``tool_calls`` answer is not re-serialised
        and re-extracted, and pre-parsed ``output_tools`` arguments are not parsed at all. A
        text answer is extracted once: without a call, its extraction gives the verdict.
        The verdict is this match's, options applied (:func:`_rules_verdict`).
        """
        found = None if sample.output_tools else extract(sample.answer)
        calls = answer_calls(sample, found)
        if self.count == "exactly_one" and len(calls) > 1:
            dup = _repeats(calls[0], calls[1:])
            code: CheckReasonCode = "duplicate_call" if dup else "extra_call"
            extra = self.result(False, f"expected exactly one call, got {len(calls)}", code)
            last = _last_usable(calls)
            if last is not None and self.stale is None:  # the verdict grades the last call
                ruled = _rules_verdict(last, matcher.mismatch(last) or _typed(last, tools))
                if ruled is not None:
                    return extra, ruled
            return extra, self.verdict(sample)
        got = _last_usable(calls)
        if got is None:
            if found is not None:  # text: extract's own no-call verdict
                verdict = no_call_verdict(found)
            else:
                verdict = self._grade(expected, None, sample.answer)
            return self._from_verdict(verdict), verdict
        miss = matcher.mismatch(got) or _typed(got, tools)
        if miss is None:
            return self._rules_result(None), _rules_verdict(got, None)
        if self.stale is not None:
            stale_found = call_from_value({"name": got.name, "arguments": got.arguments})
            if stale_found is not None and stale_found.canonical == self.stale.canonical:
                reason = "staleSchemaUsed: the call matches the pre-migration schema"
                stale = self.result(
                    False, reason, "stale_schema", details={"path": None, "staleSchemaUsed": True}
                )
                return stale, Verdict(0, True, reason, "stale_schema", None, _graded(got))
        ruled = _rules_verdict(got, miss)
        return self._rules_result(miss), ruled if ruled is not None else self.verdict(sample)

    def _rules_result(self, miss: Mismatch | None) -> CheckResult:
        if miss is None:
            return self._constant("match", True, "matches the expected call", "match", _NOT_STALE)
        return self.result(
            False,
            miss.reason,
            miss.code,
            details={"path": miss.path, "staleSchemaUsed": False},
        )

    @property
    def gives_verdict(self) -> bool:
        """Whether :meth:`graded` gives a verdict: the single-call form."""
        return not (self.expect_no_call or self.expect_call or self.parallel) and (
            self.expected is not None
        )

    def verdict(self, sample: Sample) -> Verdict | None:
        """grading.md's plain tool-call verdict of a single-call check, options not applied
        (None for parallel and call/no-call forms): :meth:`graded` gives it where a rule's
        outcome has no verdict code, or the task a stale call and several calls."""
        if not self.gives_verdict or self.expected is None:
            return None
        return self._grade(self.expected, self.stale, sample.answer)

    def _from_verdict(self, verdict: Verdict) -> CheckResult:
        if verdict.reason_code in _CONSTANT_VERDICTS:  # one reason, no path: the same result
            code = verdict.reason_code
            return self._constant(code, False, verdict.reason, code, _NOT_STALE)
        return self.result(
            verdict.score == 1,
            verdict.reason,
            verdict.reason_code,
            details={"path": verdict.path, "staleSchemaUsed": verdict.stale_schema_used},
        )

    def _run_parallel(self, answers: list[AnswerCall], tools: list[Any] | None) -> CheckResult:
        """The parallel form: every expected call matched to its own answer call. A failure's
        result depends only on the expected call unmatched or the answer's call count, so
        each is built once per check (:meth:`_constant`), as a pass is, and its reason is
        written only then (``known(key) or``: an answer met before formats nothing)."""
        want, got = len(self.parallel), len(answers)
        known = self.results.get
        if got < want:
            return known(("count", got)) or self._constant(
                ("count", got),
                False,
                f"expected {want} parallel calls, got {got}",
                "parallel_count_mismatch",
            )
        if tools is None:  # every answer call may be matched: its fits kept on the call
            fits = [call.fits for call in answers]
            partner = max_matching(self.parallel, answers, ExpectedCall.matches, True, fits)
        else:  # a call that breaks the request's schema matches nothing (fits of this answer)
            strict = {a for a in answers if _typed(a, tools) is not None}

            def typed_fit(exp: ExpectedCall, call: AnswerCall) -> bool:
                return call not in strict and exp.matches(call)

            partner = max_matching(self.parallel, answers, typed_fit, perfect=True)
        if None in partner:
            index = partner.index(None)
            return known(("unmatched", index)) or self._constant(
                ("unmatched", index),
                False,
                f"expected call #{index} ({self.parallel[index].name}) matches no call in the"
                " answer",
                "parallel_unmatched",
            )
        if got > want:  # every expected call matched: the answer calls left over are extra
            matched = [answers[col] for col in partner if col is not None]
            dup = False
            for col, call in enumerate(answers):
                if col not in partner and _repeats(call, matched):
                    dup = True
                    break
            code: CheckReasonCode = "duplicate_call" if dup else "extra_call"
            what = "a repeated call" if dup else "an extra call"
            return known((code, got)) or self._constant(
                (code, got), False, f"expected {want} parallel calls, got {got}: {what}", code
            )
        return known("match") or self._constant(
            "match", True, f"all {want} parallel calls matched", "match"
        )

    def _constant(
        self,
        key: ResultKey,
        passed: bool,
        reason: str,
        code: CheckReasonCode,
        details: Mapping[str, Any] | None = None,
    ) -> CheckResult:
        """A result that is the same for every answer with this outcome (a pass, a missing
        call), built once per check: a CheckResult is immutable, and building one is a good
        part of grading an answer. ``key`` names the outcome within this check (with the number
        the reason is written with, where it has one)."""
        found = self.results.get(key)
        if found is None:
            found = self.results[key] = self.result(passed, reason, code, details=details)
        return found


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


def _graded(call: AnswerCall) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments}


def _rules_verdict(call: AnswerCall, miss: Mismatch | None) -> Verdict | None:
    """The verdict of a rules match, options applied: a pass, or the mismatch where its code
    is a verdict's (None otherwise: the caller falls back to the plain verdict)."""
    if miss is None:
        return Verdict(1, False, "matches the expected call", "match", None, _graded(call))
    code = VERDICT_CODES.get(miss.code)
    return None if code is None else Verdict(0, False, miss.reason, code, miss.path, _graded(call))


def _typed(call: AnswerCall, tools: list[Any] | None) -> Mismatch | None:
    """With ``numbers: "from_request"``: an ``integer`` of the request's tool schema written
    as ``5.0`` (a tool the request lacks adds nothing: matching decides that call)."""
    if tools is None or call.name is None:
        return None
    schema = request_schema(tools, call.name)
    return None if schema is None else schema_numeric_mismatch(call.arguments, schema)


def _same(a: AnswerCall, b: AnswerCall) -> bool:
    """Whether two answer calls are the same call (canonically: ``1`` and ``1.0`` are)."""
    if a.name != b.name:
        return False
    if _identical(a.arguments, b.arguments):  # a repeated call is usually written identically
        return True
    return a.canonical("exact") == b.canonical("exact")


def _repeats(call: AnswerCall, others: list[AnswerCall]) -> bool:
    """Whether ``call`` is the same call as one of ``others`` (:func:`_same`)."""
    return any(_same(call, other) for other in others)


def _identical(a: Any, b: Any) -> bool:
    """The same JSON value, types included (Python's ``True == 1`` does not count): identical
    values have identical canonical forms, so only a False needs the canonical comparison."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        return a.keys() == b.keys() and all(_identical(v, b[k]) for k, v in a.items())
    if kind is list:
        return len(a) == len(b) and all(_identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _last_usable(calls: list[AnswerCall]) -> AnswerCall | None:
    """grading.md's graded call: the last one with a name and usable arguments."""
    for call in reversed(calls):
        if call.name is None or call.arguments is None:
            continue
        if call.shallow or usable_depth(call):  # shallow: read from its text, no walk
            return call
    return None


def default_check(expected: Call | None, stale: Call | None, where: str = "") -> ToolCallCheck:
    """The check a task without ``checks`` gets: grading.md's tool-call grader."""
    try:
        return ToolCallCheck.build(DEFAULT_DEFINITION, where, expected, stale)
    except CheckDefinitionError:
        raise CheckDefinitionError(
            f"{where + ': ' if where else ''}a task without 'checks' needs an 'expected' call"
        ) from None
