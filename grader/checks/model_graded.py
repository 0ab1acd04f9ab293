"""``label_model`` and ``score_model``: the LLM-judge checks (rules in ``grader.checks.judge``).

* OpenAI's ``label_model``: ``model``, ``input`` messages (templates), ``labels``,
  ``passing_labels``; the judge must reply with one label exactly.
* OpenAI's ``score_model``: ``model``, ``input``, ``range`` (default ``[0, 1]``) and our
  ``pass_threshold`` (default: the top of the range, so only a full score passes unless told);
  the reply must be one number inside the range, which becomes the ``score``.
* Our binary criterion form (``label_model`` with ``criterion`` instead of ``input``):
  ``criterion``, ``pass_examples`` and ``fail_examples`` (both mandatory: few-shot anchors keep
  the judge on the calibrated labels), ``task`` (default ``{{item.prompt}}``), ``response``
  (default: the answer as received), optional ``model`` (default: the judge config's). The
  prompt is seed 002's template; the reply must be exactly ``PASS`` or ``FAIL``.

For the OpenAI forms a first system message states the output contract (one label, or one
number), since a chat completion has no structured-output channel here. ``sampling_params``
other than ``temperature: 0`` are accepted for compatibility and not forwarded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from grader.checks._base import BaseCheck, CheckResult, Spec
from grader.checks.judge import (
    JUDGE_PROMPT,
    Judge,
    JudgeParseError,
    family_warning,
    pinned_problem,
)
from grader.checks.sample import CheckContext, Sample
from grader.checks.templates import Template, TemplateError, parse_template, unresolved
from grader.values import value_type

# The reason of a judge column on a surface without a judge: how to configure one.
NO_JUDGE = (
    "this check needs an LLM judge and none is configured here: Python "
    "grader.grade_async(task, answer, judge=Judge(client, JudgeConfig(...))); CLI "
    "gradeproxy grade --judge CONFIG; proxy and /grading/v1 routes: judge.endpoint in the proxy "
    "config (MCP has no judge)"
)

# --- the checks -------------------------------------------------------------------------------


def _pass_fail(reply: str) -> bool:
    verdict = reply.strip()
    if verdict not in ("PASS", "FAIL"):
        raise JudgeParseError(f"unparseable judge verdict: {reply[:40]!r}")
    return verdict == "PASS"


def _label_parser(labels: tuple[str, ...]) -> Callable[[str], str]:
    def parse(reply: str) -> str:
        label = reply.strip()
        if label not in labels:
            raise JudgeParseError(f"judge reply {reply[:40]!r} is not one of the labels")
        return label

    return parse


def _score_parser(low: float, high: float) -> Callable[[str], float]:
    def parse(reply: str) -> float:
        try:
            value = float(reply.strip())
        except ValueError:
            raise JudgeParseError(f"judge reply {reply[:40]!r} is not a number") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise JudgeParseError(f"judge score {value!r} is outside [{low:g}, {high:g}]")
        return value

    return parse


def _examples(spec: Spec, key: str) -> tuple[str, ...]:
    raw = spec.definition.get(key)
    if not isinstance(raw, list) or not raw or not all(isinstance(x, str) and x for x in raw):
        raise spec.error(key, "must be a non-empty list of example strings (few-shot is mandatory)")
    return tuple(raw)


def _messages(spec: Spec) -> tuple[tuple[str, Template], ...]:
    raw = spec.definition.get("input")
    if not isinstance(raw, list) or not raw:
        raise spec.error("input", "must be a non-empty list of messages {role, content}")
    messages = []
    for index, message in enumerate(raw):
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, dict) and content.get("type") in ("input_text", "text"):
            content = content.get("text")
        if role not in ("system", "developer", "user", "assistant") or not isinstance(content, str):
            raise spec.error(f"input[{index}]", "must be {role, content: <text template>}")
        messages.append((str(role), parse_template(content, spec.where)))
    if not any("sample" in t.namespaces for _, t in messages):
        raise spec.error("input", "never reads the answer: add a {{sample.*}} template")
    return tuple(messages)


def _model(spec: Spec, required: bool) -> str | None:
    model = spec.definition.get("model")
    if model is None and not required:
        return None
    if not isinstance(model, str):
        raise spec.error("model", "must be a pinned model id")
    problem = pinned_problem(model)
    if problem is not None:
        raise spec.error("model", problem)
    return model


def _sampling(spec: Spec) -> None:
    params = spec.definition.get("sampling_params", {})
    if not isinstance(params, dict):
        raise spec.error("sampling_params", "must be an object")
    if params.get("temperature", 0) != 0:
        raise spec.error("sampling_params", "temperature must be 0: judges run deterministic")


@value_type
class JudgeCheck(BaseCheck):
    """``label_model`` (OpenAI's shape, or our binary criterion form) and ``score_model``."""

    model: str | None
    messages: tuple[tuple[str, Template], ...] = ()  # OpenAI form
    labels: tuple[str, ...] = ()
    passing: tuple[str, ...] = ()
    score_range: tuple[float, float] | None = None  # score_model
    threshold: float = 0.0
    criterion: str | None = None  # criterion form
    pass_examples: tuple[str, ...] = ()
    fail_examples: tuple[str, ...] = ()
    task: Template | None = None
    response: Template | None = None

    @property
    def needs_judge(self) -> bool:
        return True

    @property
    def templates(self) -> tuple[Template, ...]:
        found = [t for _, t in self.messages]
        found += [t for t in (self.task, self.response) if t is not None]
        return tuple(found)

    @classmethod
    def build(cls, definition: Mapping[str, Any], where: str) -> JudgeCheck:
        kind = definition.get("type")
        if kind == "score_model":
            return cls._build_score(definition, where)
        if "criterion" in definition:
            return cls._build_criterion(definition, where)
        spec = Spec(
            definition,
            where,
            frozenset({"model", "input", "labels", "passing_labels", "sampling_params"}),
        )
        labels = definition.get("labels")
        passing = definition.get("passing_labels")
        if (
            not isinstance(labels, list)
            or len(labels) < 2
            or not all(isinstance(x, str) and x for x in labels)
        ):
            raise spec.error("labels", "must list two or more label strings")
        if not isinstance(passing, list) or not passing or not set(passing) <= set(labels):
            raise spec.error("passing_labels", "must be a non-empty subset of 'labels'")
        _sampling(spec)
        return cls(
            spec.name,
            "label_model",
            spec.digest(),
            _model(spec, True),
            _messages(spec),
            tuple(labels),
            tuple(passing),
        )

    @classmethod
    def _build_score(cls, definition: Mapping[str, Any], where: str) -> JudgeCheck:
        spec = Spec(
            definition,
            where,
            frozenset({"model", "input", "range", "pass_threshold", "sampling_params"}),
        )
        bounds = definition.get("range", [0, 1])
        if (
            not isinstance(bounds, list)
            or len(bounds) != 2
            or not all(isinstance(b, int | float) and not isinstance(b, bool) for b in bounds)
            or not bounds[0] < bounds[1]
        ):
            raise spec.error("range", "must be [low, high] with low < high")
        low, high = float(bounds[0]), float(bounds[1])
        threshold = spec.number("pass_threshold", high)
        if not low <= threshold <= high:
            raise spec.error("pass_threshold", "must lie inside 'range'")
        _sampling(spec)
        return cls(
            spec.name,
            "score_model",
            spec.digest(),
            _model(spec, True),
            _messages(spec),
            score_range=(low, high),
            threshold=threshold,
        )

    @classmethod
    def _build_criterion(cls, definition: Mapping[str, Any], where: str) -> JudgeCheck:
        spec = Spec(
            definition,
            where,
            frozenset({"model", "criterion", "pass_examples", "fail_examples", "task", "response"}),
        )
        criterion = spec.str_("criterion")
        if not criterion.strip():
            raise spec.error("criterion", "must not be empty")
        task = parse_template(spec.str_("task", "{{item.prompt}}"), spec.where)
        response = None
        if "response" in definition:
            response = parse_template(spec.str_("response"), spec.where)
            if "sample" not in response.namespaces:
                raise spec.error("response", "never reads the answer: use a {{sample.*}} template")
        return cls(
            spec.name,
            "label_model",
            spec.digest(),
            _model(spec, False),
            labels=("PASS", "FAIL"),
            passing=("PASS",),
            criterion=criterion,
            pass_examples=_examples(spec, "pass_examples"),
            fail_examples=_examples(spec, "fail_examples"),
            task=task,
            response=response,
        )

    def render(self, sample: Sample, item: Mapping[str, Any]) -> list[dict[str, str]]:
        """The judge's messages for this answer; raise TemplateError when a template misses."""
        if self.criterion is not None and self.task is not None:
            prompt = JUDGE_PROMPT.format(
                criterion=self.criterion,
                few_shot_pass_examples="\n".join(f"- {x}" for x in self.pass_examples),
                few_shot_fail_examples="\n".join(f"- {x}" for x in self.fail_examples),
                task=self.task.render(sample, item),
                response=sample.answer
                if self.response is None
                else self.response.render(sample, item),
            )
            return [{"role": "user", "content": prompt}]
        if self.score_range is not None:
            low, high = self.score_range
            contract = f"Reply with only a number from {low:g} to {high:g}, and nothing else."
        else:
            contract = "Reply with exactly one of these labels, and nothing else: " + ", ".join(
                self.labels
            )
        rendered = [{"role": role, "content": t.render(sample, item)} for role, t in self.messages]
        return [{"role": "system", "content": contract}, *rendered]

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        return self.result(None, NO_JUDGE, "judge_unavailable", error=NO_JUDGE)

    async def arun(
        self,
        sample: Sample,
        item: Mapping[str, Any],
        context: CheckContext,
        judge: Judge | None,
    ) -> CheckResult:
        if judge is None:
            return self.run(sample, item, context)
        model = self.model or judge.config.model
        if model is None:
            reason = "no judge model: set 'model' on the check or in the judge config"
            return self.result(None, reason, "judge_unavailable", error=reason)
        try:
            messages = self.render(sample, item)
        except TemplateError as exc:
            return unresolved(self, exc)
        warning = family_warning(model, context.model)
        parse: Callable[[str], Any]
        if self.score_range is not None:
            parse = _score_parser(*self.score_range)
        elif self.criterion is not None:
            parse = _pass_fail
        else:
            parse = _label_parser(self.labels)
        answer = await judge.ask(model, messages, parse)
        details = {
            "judge_model": model,
            "attempts": answer.attempts,
            "attempt_log": list(answer.log),
        }
        if answer.failure is not None:
            reason = f"judge left this ungraded after {answer.attempts} attempt(s): {answer.error}"
            return self.result(
                None, reason, answer.failure, error=answer.error, details=details, warning=warning
            )
        if self.score_range is not None:
            value = float(answer.value)
            passed = value >= self.threshold
            reason = f"judge score {value:g} {'>=' if passed else '<'} {self.threshold:g}"
            return self.result(
                passed, reason, "judge_score", score=value, details=details, warning=warning
            )
        passed = answer.value is True or answer.value in self.passing
        label = (
            "PASS" if answer.value is True else "FAIL" if answer.value is False else answer.value
        )
        return self.result(
            passed,
            f"judge said {label}",
            "judge_pass" if passed else "judge_fail",
            details=details,
            warning=warning,
        )
