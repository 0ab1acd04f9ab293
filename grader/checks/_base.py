"""The values every check shares: the sample it reads, its result, its digest, its protocol.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

from grader._json import JSONError, dumps, loads_exact
from grader.errors import GraderError
from grader.toolcall.canon import canonical_json
from grader.toolcall.extract import call_from_value, extract
from grader.verdict import ReasonCode
from grader.version import GRADER_RULES_VERSION

if TYPE_CHECKING:
    from grader.checks.judge import Judge

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


class CheckDefinitionError(GraderError, ValueError):
    """A check definition is unusable; the message names the check and the field."""


@dataclass(frozen=True, slots=True)
class Sample:
    """What a check reads from one answer, in the shape OpenAI's grader templates name.

    ``output_tools`` elements are ``{"type": "function", "function": {"name", "arguments"}}``
    (``arguments`` as sent: normally a JSON string). ``raw`` is the answer string itself,
    kept so the tool-call grader reads exactly what ``grader.score`` would.
    """

    output_text: str
    output_json: Any | None = None
    output_tools: list[dict[str, Any]] = field(default_factory=list)
    raw: str | None = None

    @classmethod
    def from_answer(cls, answer_text: str) -> Sample:
        """Build the sample from the answer string the proxy hands the grader.

        ``'{"tool_calls": [...]}'`` gives ``output_tools`` (and the text ``content`` beside
        it, if any); any other text is ``output_text``, and ``output_json`` when that text is
        one JSON object or array.
        """
        stripped = answer_text.strip()
        value: Any = None
        if stripped[:1] in ("{", "["):
            try:
                value = loads_exact(stripped)
            except JSONError:
                value = None
        if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
            tools = [_as_tool(t) for t in value["tool_calls"] if isinstance(t, dict)]
            content = value.get("content")
            return cls(content if isinstance(content, str) else "", None, tools, answer_text)
        json_value = value if isinstance(value, dict | list) else None
        return cls(answer_text, json_value, [], answer_text)

    @property
    def answer(self) -> str:
        """The answer string: as received, or rebuilt from the fields of a derived sample."""
        if self.raw is not None:
            return self.raw
        if self.output_tools:
            return dumps({"tool_calls": self.output_tools}).decode()
        return self.output_text


def _as_tool(element: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_calls`` element in wire shape; a bare ``{"name", "arguments"}`` is wrapped."""
    if isinstance(element.get("function"), dict):
        return element
    return {"type": "function", "function": element}


@dataclass(frozen=True, slots=True)
class SampleCall:
    """One call in the answer: ``arguments`` is None when they are not a JSON object."""

    name: str | None
    arguments: dict[str, Any] | None


def sample_calls(sample: Sample) -> list[SampleCall]:
    """Every call in the answer: each ``output_tools`` element, else the one extracted call.

    Text answers can carry a call in prose (grading.md), so a text answer yields the call the
    tool-call grader would grade, if any.
    """
    calls: list[SampleCall] = []
    for tool in sample.output_tools:
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        call = call_from_value({"function": function})
        if call is None:
            calls.append(SampleCall(name if isinstance(name, str) else None, None))
        else:
            calls.append(SampleCall(call.name, call.arguments))
    if not sample.output_tools:
        found = extract(sample.answer).call
        if found is not None:
            calls.append(SampleCall(found.name, found.arguments))
    return calls


def chat_tools(tools: list[Any]) -> list[Any]:
    """Request tools in chat completions' shape, whichever API declared them.

    The Responses API declares a function tool flat, ``{"type": "function", "name",
    "parameters"}``; chat completions nests it under ``function``. Checks and templates read
    one shape, so a flat function tool is nested here and every other entry (a chat tool, a
    built-in tool such as ``web_search``) is kept as it is.
    """
    nested: list[Any] = []
    for tool in tools:
        flat = (
            isinstance(tool, dict)
            and tool.get("type") == "function"
            and "function" not in tool
            and isinstance(tool.get("name"), str)
        )
        if flat:
            function = {key: value for key, value in tool.items() if key != "type"}
            nested.append({"type": "function", "function": function})
        else:
            nested.append(tool)
    return nested


@dataclass(frozen=True, slots=True)
class CheckContext:
    """What the request adds: its own ``tools`` list and the model that answered.

    Live, both come from the proxied request. Offline (``grader.engine.offline_context``) the
    tools come from the answers row or the task, and ``missing_tools`` says what to add when
    there are none, so a ``from_request`` column names it in its ``error``. ``request_tools`` is
    normalised to chat completions' shape (:func:`chat_tools`) on construction, so no check has
    to know which API the request came through.
    """

    request_tools: list[dict[str, Any]] | None = None
    model: str | None = None
    missing_tools: str | None = None
    # The request's role header (X-Grade-Role): the policy check's authority reads it over
    # ``item.role``, so one task serves agents of different roles (docs/episodes.md).
    role: str | None = None

    def __post_init__(self) -> None:
        if self.request_tools is not None:
            object.__setattr__(self, "request_tools", chat_tools(self.request_tools))


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One result column for one answer.

    ``passed`` is None for an infrastructure error: the check could not reach a verdict, so
    the row stays out of every pass-rate denominator. ``score`` is set by graded checks
    (similarity, score_model, multi); binary checks leave it None. ``parts`` holds the
    per-behaviour columns of a check that yields several (policy): :func:`evaluate` reports
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
        if self.details is not None:
            row["details"] = dict(self.details)
        if self.advisory:
            row["advisory"] = True
        return row


class JudgeClient(Protocol):
    """Sends one chat completion to the judge model and returns the reply text.

    The proxy plugs in an aiohttp implementation; ``grader.cli.judge_http`` has a stdlib
    one for the CLI. Raise on transport errors: the judge counts them as infrastructure errors.
    """

    async def complete(
        self, model: str, messages: list[dict[str, str]], temperature: float
    ) -> str: ...


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


def check_digest(definition: Mapping[str, Any]) -> str:
    """sha256 of the definition's canonical JSON plus the rules version: results graded by
    different definitions, or under different rules, never share a digest."""
    text = GRADER_RULES_VERSION + "\n" + canonical_json(dict(definition))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
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
        return CheckResult(
            self.name,
            self.type,
            passed,
            score,
            reason,
            reason_code,
            error,
            self.digest,
            warning=warning,
            details=details,
        )


# --- reading definitions ----------------------------------------------------------------------


class Spec:
    """A check definition being validated; every error names the check and the field."""

    def __init__(self, definition: Mapping[str, Any], where: str, allowed: frozenset[str]):
        self.definition = definition
        name = definition.get("name")
        label = name if isinstance(name, str) and name else "<unnamed>"
        self.where = f"{where}: check {label!r}" if where else f"check {label!r}"
        unknown = sorted(set(definition) - allowed - {"type", "name", "description"})
        if unknown:
            known = ", ".join(sorted(allowed | {"type", "name", "description"}))
            raise self.error(unknown[0], f"unknown field (this type takes: {known})")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise self.error(
                "name", "must be 1-128 printable characters, not starting or ending with a space"
            )
        self.name = name

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

    def digest(self) -> str:
        try:
            return check_digest(self.definition)
        except (TypeError, ValueError) as exc:
            raise self.error("definition", f"is not plain JSON data: {exc}") from None
