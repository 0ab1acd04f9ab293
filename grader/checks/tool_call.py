"""``tool_call``: grading.md's tool-call grader as a check, with BFCL-style options.

``{"type": "tool_call", "name"}`` grades exactly as :func:`grader.match.match_call` does against
the task's ``expected`` (and ``metadata.stale``); a task without ``checks`` gets this check,
named ``tool_call``. Options:

* ``expected`` — a call to grade against instead of the task's (then no stale call applies);
* ``acceptable`` — ``{"arguments.<path>": [values...]}``: any listed value is accepted at that
  path (compared canonically, so ``"PT1H"`` accepts ``"PT60M"``);
* ``optional`` — ``["arguments.<path>", ...]``: the argument may be absent; when present it
  is graded as usual;
* ``parallel`` — a list of expected calls, matched in any order, one to one, against *all*
  calls in the answer's ``tool_calls`` (the options above apply to each);
* ``expect_no_call: true`` — passes only when the answer carries no call at all.

Paths are written as the grader reports them (``arguments.filters.status``): object keys only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from grader._json import dumps
from grader.canon import TooDeepError, canon
from grader.checks._base import (
    BaseCheck,
    CheckContext,
    CheckDefinitionError,
    CheckResult,
    Sample,
    SampleCall,
    Spec,
    sample_calls,
)
from grader.extract import Call, call_from_value, extract
from grader.match import match_call
from grader.verdict import Verdict

MAX_PARALLEL = 64
DEFAULT_DEFINITION: Mapping[str, Any] = {"name": "tool_call", "type": "tool_call"}
Path = tuple[str, ...]


def call_of(value: Any) -> Call | None:
    """A task-style call: an object (wrappers allowed) or a JSON string holding one."""
    return extract(value).call if isinstance(value, str) else call_from_value(value)


def _path(spec: Spec, key: str, text: Any) -> Path:
    if not isinstance(text, str) or not text.startswith("arguments.") or "" in text.split("."):
        raise spec.error(key, f"path {text!r} must look like 'arguments.<key>[.<key>...]'")
    return tuple(text.split(".")[1:])


def _lookup(arguments: Any, path: Path) -> tuple[bool, Any]:
    value = arguments
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


def _parent(arguments: Any, path: Path) -> dict[str, Any] | None:
    found, parent = _lookup(arguments, path[:-1])
    return parent if found and isinstance(parent, dict) else None


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class ToolCallCheck(BaseCheck):
    expected: Call | None
    stale: Call | None
    acceptable: tuple[tuple[Path, tuple[Any, ...]], ...] = ()
    optional: tuple[Path, ...] = ()
    parallel: tuple[Call, ...] = ()
    expect_no_call: bool = False
    _canon_acceptable: tuple[frozenset[Any], ...] = field(default=(), repr=False)

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
            frozenset({"expected", "acceptable", "optional", "parallel", "expect_no_call"}),
        )
        expected, stale = task_expected, task_stale
        if "expected" in definition:
            expected, stale = call_of(definition["expected"]), None
            if expected is None:
                raise spec.error("expected", "is not a usable call {name, arguments}")
        no_call = definition.get("expect_no_call", False)
        if not isinstance(no_call, bool):
            raise spec.error("expect_no_call", "must be true or false")
        acceptable = cls._acceptable(spec, definition.get("acceptable", {}))
        optional_raw = definition.get("optional", [])
        if not isinstance(optional_raw, list):
            raise spec.error("optional", "must be a list of argument paths")
        optional = tuple(_path(spec, "optional", p) for p in optional_raw)
        parallel = cls._parallel(spec, definition.get("parallel"))
        if no_call and (acceptable or optional or parallel or "expected" in definition):
            raise spec.error("expect_no_call", "cannot be combined with other options")
        if not no_call and not parallel and expected is None:
            raise spec.error(
                "expected", "is missing: give the task an 'expected' call or the check one"
            )
        try:
            canon_acc = tuple(frozenset(canon(v) for v in values) for _, values in acceptable)
        except (TooDeepError, TypeError) as exc:
            raise spec.error(
                "acceptable", f"holds a value the grader cannot compare: {exc}"
            ) from None
        return cls(
            spec.name,
            "tool_call",
            spec.digest(),
            expected,
            stale,
            acceptable,
            optional,
            parallel,
            no_call,
            canon_acc,
        )

    @staticmethod
    def _acceptable(spec: Spec, raw: Any) -> tuple[tuple[Path, tuple[Any, ...]], ...]:
        if not isinstance(raw, dict):
            raise spec.error("acceptable", "must map argument paths to lists of values")
        pairs = []
        for text, values in raw.items():
            if not isinstance(values, list) or not values:
                raise spec.error("acceptable", f"{text!r} needs a non-empty list of values")
            pairs.append((_path(spec, "acceptable", text), tuple(values)))
        return tuple(pairs)

    @staticmethod
    def _parallel(spec: Spec, raw: Any) -> tuple[Call, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_PARALLEL:
            raise spec.error("parallel", f"must be a list of 1 to {MAX_PARALLEL} calls")
        calls = []
        for index, value in enumerate(raw):
            call = call_of(value)
            if call is None:
                raise spec.error(f"parallel[{index}]", "is not a usable call {name, arguments}")
            calls.append(call)
        return tuple(calls)

    # --- grading ----------------------------------------------------------------------------

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        if self.expect_no_call:
            calls = sample_calls(sample)
            if calls:
                name = calls[0].name or "<unnamed>"
                return self.result(False, f"expected no call, got {name!r}", "unexpected_call")
            return self.result(True, "no call, as expected", "match")
        if self.parallel:
            return self._run_parallel(sample_calls(sample))
        if self.expected is None:  # build() refuses this; kept total for the type checker
            return self.result(None, "no expected call", "check_error", error="no expected call")
        return self._from_verdict(self._grade(self.expected, self.stale, sample.answer))

    def _grade(self, expected: Call, stale: Call | None, answer: str) -> Verdict:
        """:func:`match_call` against ``expected`` adjusted for the options."""
        if self.acceptable or self.optional:
            found = extract(answer).call
            if found is not None:
                expected = self._adjusted(expected, found.arguments)
        return match_call(expected, stale, answer)

    def _adjusted(self, expected: Call, got: Any) -> Call:
        """The expected call with absent optionals dropped and acceptable values taken over."""
        want = _copy(expected.arguments)
        for path in self.optional:
            parent = _parent(want, path)
            if not _lookup(got, path)[0] and parent is not None:
                parent.pop(path[-1], None)
        for (path, _values), accepted in zip(self.acceptable, self._canon_acceptable, strict=True):
            found, value = _lookup(got, path)
            parent = _parent(want, path)
            if found and parent is not None and _canonical(value) in accepted:
                parent[path[-1]] = value
        adjusted = call_from_value({"name": expected.name, "arguments": want})
        return adjusted if adjusted is not None else expected

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

    def _run_parallel(self, calls: list[SampleCall]) -> CheckResult:
        want = len(self.parallel)
        if len(calls) != want:
            return self.result(
                False,
                f"expected {want} parallel calls, got {len(calls)}",
                "parallel_count_mismatch",
            )
        answers = [
            dumps({"name": c.name, "arguments": c.arguments}).decode()
            if c.name is not None and c.arguments is not None
            else None
            for c in calls
        ]
        fits = [
            [a is not None and self._grade(exp, None, a).score == 1 for a in answers]
            for exp in self.parallel
        ]
        partner = _match(fits)
        for index, got in enumerate(partner):
            if got is None:
                exp = self.parallel[index]
                return self.result(
                    False,
                    f"expected call #{index} ({exp.name}) matches no call in the answer",
                    "parallel_unmatched",
                )
        return self.result(True, f"all {want} parallel calls matched", "match")


def _canonical(value: Any) -> Any:
    try:
        return canon(value)
    except (TooDeepError, TypeError):
        return None


def _match(fits: list[list[bool]]) -> list[int | None]:
    """Maximum one-to-one matching (Kuhn's augmenting paths); partner of each row or None."""
    owner: dict[int, int] = {}

    def augment(row: int, seen: set[int]) -> bool:
        for col, ok in enumerate(fits[row]):
            if ok and col not in seen:
                seen.add(col)
                if col not in owner or augment(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    for row in range(len(fits)):
        augment(row, set())
    partner: list[int | None] = [None] * len(fits)
    for col, row in owner.items():
        partner[row] = col
    return partner


def default_check(expected: Call | None, stale: Call | None, where: str = "") -> ToolCallCheck:
    """The check a task without ``checks`` gets: grading.md's tool-call grader."""
    try:
        return ToolCallCheck.build(DEFAULT_DEFINITION, where, expected, stale)
    except CheckDefinitionError:
        raise CheckDefinitionError(
            f"{where + ': ' if where else ''}a task without 'checks' needs an 'expected' call"
        ) from None
