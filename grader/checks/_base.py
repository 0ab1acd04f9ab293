"""The values every check shares: its result, its digest, its protocol, its definition reader.

What a check *reads* (the :class:`Sample`, its calls, the request's :class:`CheckContext`) is
``grader/checks/sample.py``, re-exported here for the modules that import it from ``_base``.

A check is built once from its definition (validated, digested) and then run on many samples.
Running never raises for any answer: a model's failure is ``passed=False``, and anything that
stops a check from reaching a verdict (an unresolved template, an unusable judge reply, a
request without tools) is an *infrastructure error*, ``passed=None``, which callers keep out
of every pass-rate denominator.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Literal, Protocol, get_args

from grader.checks.judge import Judge, JudgeClient
from grader.checks.sample import CheckContext, Sample, SampleCall, chat_tools, sample_calls
from grader.errors import GraderError
from grader.toolcall.canon import canonical_json, canonical_json_parsed
from grader.values import value_type
from grader.verdict import ReasonCode
from grader.version import GRADER_RULES_VERSION

__all__ = [  # the sample's names are re-exported: checks import them from here
    "CHECK_REASON_CODES",
    "BaseCheck",
    "Check",
    "CheckContext",
    "CheckDefinitionError",
    "CheckReasonCode",
    "CheckResult",
    "JudgeClient",
    "Sample",
    "SampleCall",
    "Spec",
    "chat_tools",
    "check_digest",
    "sample_calls",
]


CheckReasonCode = Literal[
    ReasonCode,
    # string_check and text_similarity
    "string_match",
    "string_mismatch",
    "above_threshold",
    "below_threshold",
    "input_too_large",
    # tool_call options
    "unexpected_call",
    "parallel_count_mismatch",
    "parallel_unmatched",
    "duplicate_call",
    "extra_call",
    "numeric_type_mismatch",
    # json_schema
    "schema_valid",
    "schema_invalid",
    "not_json",
    "invalid_arguments",
    "undeclared_tool",
    "no_request_tools",
    "request_schema_invalid",
    "schema_ref_unresolvable",
    "pattern_refused",
    # policy behaviours
    "policy_ok",
    "unauthorised_action",
    "argument_constraint",
    "role_not_authorised",
    "forbidden_call",
    "link_broken",
    "missing_item_field",
    # multi
    "formula",
    "formula_error",
    "sub_check_error",
    # judge
    "judge_pass",
    "judge_fail",
    "judge_score",
    "judge_parse_error",
    "judge_timeout",
    "judge_error",
    "judge_unavailable",
    # templates: a sample-side path the answer does not have is the model's failure
    "sample_value_missing",
    # shared infrastructure errors
    "template_unresolved",
    "check_error",
]
CHECK_REASON_CODES: tuple[CheckReasonCode, ...] = get_args(CheckReasonCode)

# Names become result columns and metric label values: OpenAI allows free text ("Example string
# check"), so any printable text is accepted, bounded in length so a label value stays small.
_NAME = re.compile(r"[^\x00-\x1f\x7f\s](?:[^\x00-\x1f\x7f]{0,126}[^\x00-\x1f\x7f\s])?")


@lru_cache(maxsize=1024)
def _usable_name(name: str) -> bool:
    """Whether ``name`` is a usable check name; remembered, since a task set's checks share a
    few names (one a task kind), each matched once instead of once a task."""
    return _NAME.fullmatch(name) is not None


class CheckDefinitionError(GraderError, ValueError):
    """A check definition is unusable; the message names the check and the field."""


@value_type
class CheckResult:
    """One result column for one answer.

    ``passed`` is None for an infrastructure error: the check could not reach a verdict, so
    the row stays out of every pass-rate denominator. ``score`` is set by graded checks
    (similarity, score_model, multi); binary checks leave it None. ``parts`` holds the
    per-behaviour columns of a check that yields several (policy): :func:`grader.grade` reports
    the parts in its place.
    """

    name: str
    type: str
    passed: bool | None
    score: float | None
    reason: str
    reason_code: CheckReasonCode
    error: str | None
    digest: str
    warning: str | None = None
    details: Mapping[str, Any] | None = None
    parts: tuple[CheckResult, ...] = ()
    advisory: bool = False  # shown, but out of the verdict and every pass rate

    @property
    def reward(self) -> float | None:
        """OpenAI's ``/graders/run`` reward: the score, else 1.0 or 0.0; None when ungraded."""
        if self.score is not None:
            return self.score
        if self.passed is None:
            return None
        return 1.0 if self.passed else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The result-row form of this column (plain JSON data)."""
        row: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "passed": self.passed,
            "score": self.score,
            "reason": self.reason,
            "reason_code": self.reason_code,
            "error": self.error,
            "digest": self.digest,
        }
        if self.warning is not None:
            row["warning"] = self.warning
        details = self.details
        if details is not None:
            # A shared result's read-only view is copied by its own ``copy`` (the dict it
            # shows): ``dict()`` of a view reads it key by key, half of what this form cost.
            # A view over another mapping copies to that mapping's type: made a dict then.
            if isinstance(details, MappingProxyType):
                copied = details.copy()
                row["details"] = copied if type(copied) is dict else dict(copied)
            else:
                row["details"] = dict(details)
        if self.advisory:
            row["advisory"] = True
        return row


class Check(Protocol):
    """A built, validated check: run it on samples (``arun`` for checks that need the judge)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def digest(self) -> str: ...
    @property
    def needs_judge(self) -> bool: ...

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        """Grade synchronously; a judge check returns ``judge_unavailable`` here."""
        ...

    async def arun(
        self,
        sample: Sample,
        item: Mapping[str, Any],
        context: CheckContext,
        judge: Judge | None,
    ) -> CheckResult:
        """Grade, calling the judge if this check needs one."""
        ...


def check_digest(definition: Mapping[str, Any], *, parsed: bool = False) -> str:
    """sha256 of the definition's canonical JSON plus the rules version: results graded by
    different definitions, or under different rules, never share a digest. ``parsed``: the
    definition was read from JSON text by :mod:`grader.json` (a loaded task's), so its text is
    written without reading orjson's back (:func:`canonical_json_parsed`); the same digest."""
    if parsed:
        text = canonical_json_parsed(definition)
    else:
        text = canonical_json(dict(definition)).encode()
    return "sha256:" + hashlib.sha256(_DIGEST_HEAD + text).hexdigest()


_DIGEST_HEAD = (GRADER_RULES_VERSION + "\n").encode()


@value_type
class BaseCheck(ABC):
    """Common fields and the synchronous-check ``arun``; subclasses implement ``run``."""

    name: str
    type: str
    digest: str

    @property
    def needs_judge(self) -> bool:
        return False

    @property
    def columns(self) -> tuple[str, ...]:
        """The result columns this check yields, in order."""
        return (self.name,)

    @abstractmethod
    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        """Grade one sample: every check type says what it compares."""

    async def arun(
        self,
        sample: Sample,
        item: Mapping[str, Any],
        context: CheckContext,
        judge: Judge | None,
    ) -> CheckResult:
        return self.run(sample, item, context)

    def result(
        self,
        passed: bool | None,
        reason: str,
        reason_code: CheckReasonCode,
        *,
        score: float | None = None,
        error: str | None = None,
        details: Mapping[str, Any] | None = None,
        warning: str | None = None,
    ) -> CheckResult:
        # Positional: keywords to a class make a dict per call (a result per failing answer).
        return CheckResult(
            self.name,
            self.type,
            passed,
            score,
            reason,
            reason_code,
            error,
            self.digest,
            warning,
            details,
        )


# --- reading definitions ----------------------------------------------------------------------


_EVERY_TYPE = frozenset({"type", "name", "description"})  # the fields every check type takes
# Each check type's fields with those: the few types' sets, made once, not a pass per definition.
_KNOWN: dict[frozenset[str], frozenset[str]] = {}


class Spec:
    """A check definition being validated; every error names the check and the field."""

    def __init__(self, definition: Mapping[str, Any], where: str, allowed: frozenset[str]):
        self.definition = definition
        self._place = where
        name = definition.get("name")
        known = _KNOWN.get(allowed)
        if known is None:  # a check type's first definition
            known = _KNOWN[allowed] = allowed | _EVERY_TYPE
        if not known.issuperset(definition):
            unknown = min(key for key in definition if key not in known)
            listed = ", ".join(sorted(known))
            raise self.error(unknown, f"unknown field (this type takes: {listed})")
        if not isinstance(name, str) or not _usable_name(name):
            raise self.error(
                "name", "must be 1-128 printable characters, not starting or ending with a space"
            )
        self.name = name

    @property
    def where(self) -> str:
        """The check's place and name, as errors name it (written only when one is raised)."""
        name = self.definition.get("name")
        label = name if isinstance(name, str) and name else "<unnamed>"
        return f"{self._place}: check {label!r}" if self._place else f"check {label!r}"

    def error(self, key: str, message: str) -> CheckDefinitionError:
        return CheckDefinitionError(f"{self.where}: '{key}' {message}")

    def str_(self, key: str, default: str | None = None) -> str:
        value = self.definition.get(key, default)
        if not isinstance(value, str):
            raise self.error(key, "must be a string")
        return value

    def number(self, key: str, default: float | None = None) -> float:
        value = self.definition.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(key, "must be a number")
        return float(value)

    def digest(self, parsed: bool = False) -> str:
        """The definition's :func:`check_digest` (``parsed``: see there)."""
        try:
            return check_digest(self.definition, parsed=parsed)
        except (TypeError, ValueError) as exc:
            raise self.error("definition", f"is not plain JSON data: {exc}") from None
