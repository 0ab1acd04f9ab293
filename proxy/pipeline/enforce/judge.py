"""The enforce judge: which policies cover a request, and a :data:`CallJudge` that applies them.

A request is covered by its task's ``enforce`` entry (grader/enforce.py) and by every route
policy (grader/route_policy.py) whose models and APIs match it. :func:`plan_for` gathers them
into a :class:`Plan` (None when nothing is active: ``off`` costs one attribute read and, with a
policy file loaded, the parse of the request's ``model``); the plan is the request's
:data:`CallJudge`. It judges one call at a time with the enforced checks, the strictest
policy's checks first, and answers with the first that fires.

Budget and failure (docs/enforce.md, "Budget and fail-open"): the plan's budget is the
smallest ``budget_ms`` of its policies, for the whole answer. A check that raises, or judging
that overruns the budget, is an infrastructure failure, never a verdict: the call goes through
(fail-open), unless a policy that acts says ``fail_closed: true`` (then it is withheld). The
failure is recorded on the plan (:attr:`Plan.failure`) and counted apart from what fired.
:func:`enforce_answer` runs a non-streamed body in a worker thread under a hard deadline, so an
overrun never holds the answer past the budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import orjson

from grader.checks import Check, CheckContext, Sample
from grader.checks.sample import SampleCall
from grader.enforce import EnforceSpec, Target
from grader.engine import checks_of
from grader.json import JSONError, loads_exact
from grader.route_policy import RoutePolicies
from grader.tasks import Task, TaskSet
from grader.toolcall.rules import Action as AllowedAction
from grader.toolcall.rules import authority
from proxy.logs import get_logger
from proxy.pipeline.enforce.answer import enforce_body
from proxy.pipeline.enforce.decision import PASS, Decision, Enforced

__all__ = ["FailureKind", "Plan", "Source", "enforce_answer", "plan_for", "warm"]

log = get_logger("gradeproxy.enforce")

Mode = Literal["observe", "block", "strip"]
FailureKind = Literal["budget", "grader_error", "unreadable"]
FAILURE_KINDS: Final[tuple[FailureKind, ...]] = ("budget", "grader_error", "unreadable")
_STRICTNESS: Final = {"block": 0, "strip": 1, "observe": 2}
_APIS: Final = {"chat_completions": "chat", "responses": "responses"}


@dataclass(frozen=True, slots=True)
class Source:
    """One active policy: a task's entry or a route policy, with its checks built.

    ``label`` is the task id, or ``route:<name>`` for a route policy (the metric's ``task``).
    """

    label: str
    spec: EnforceSpec
    checks: Mapping[str, Check]
    item: Mapping[str, Any]
    episode_actions: Mapping[str, AllowedAction] | None = None


def _short(result_reason: str) -> str:
    """A check's reason on one line, short enough for a header-sized text."""
    line = result_reason.splitlines()[0] if result_reason else "failed"
    return line[:200]


@dataclass(slots=True)
class Plan:
    """The policies covering one request; calling it judges one call (a :data:`CallJudge`)."""

    sources: tuple[Source, ...]
    context: CheckContext
    mode: Mode
    budget_s: float
    fail_closed: bool
    failure: FailureKind | None = None
    failure_error: str | None = None
    spent_s: float = 0.0
    outcomes: tuple[Enforced, ...] = field(default_factory=tuple)

    def __call__(self, name: str, arguments: str) -> Decision:
        """One call's decision; never raises (a failure becomes the fail-open/closed one)."""
        if self.failure is not None:
            return self.fallback()  # the budget is the answer's: once over, all fall back
        started = time.perf_counter()
        try:
            decision = self._decide(name, arguments)
        except Exception as exc:  # a bug in a check must never reach the relay
            self.failed("grader_error", repr(exc)[:300])
            return self.fallback()
        self.spent_s += time.perf_counter() - started
        if self.spent_s > self.budget_s:
            self.failed("budget", f"{self.spent_s * 1000:.1f} ms spent judging")
            return self.fallback()
        return decision

    def failed(self, kind: FailureKind, error: str) -> None:
        """Record an infrastructure failure (the first one is kept)."""
        if self.failure is None:
            self.failure, self.failure_error = kind, error
            log.warning("enforce_failed", kind=kind, error=error, fail_closed=self.closes)

    @property
    def closes(self) -> bool:
        """Whether a failure withholds the call (fail_closed, in a mode that acts)."""
        return self.fail_closed and self.mode != "observe"

    def fallback(self) -> Decision:
        """The decision after a failure: pass (fail-open), or withhold (fail-closed)."""
        if not self.closes:
            return PASS
        what = {
            "budget": f"the enforced checks overran budget_ms ({self.budget_s * 1000:g} ms)",
            "grader_error": "the enforced checks failed",
            "unreadable": "the answer could not be read",
        }[self.failure or "grader_error"]
        return Decision(self.mode, self.failure, f"{what}; failing closed")

    def _decide(self, name: str, arguments: str) -> Decision:
        tool = {"type": "function", "function": {"name": name, "arguments": arguments}}
        sample = Sample("", None, [tool])
        for source in self.sources:
            for target in source.spec.targets:
                reason = self._fires(source, target, sample, name, arguments)
                if reason is None:
                    continue
                mode = source.spec.mode
                if mode == "observe":
                    return Decision("observe", target.check, reason, would="block")
                return Decision("block" if mode == "block" else "strip", target.check, reason, None)
        return PASS

    def _fires(
        self, source: Source, target: Target, sample: Sample, name: str, arguments: str
    ) -> str | None:
        """The reason ``target`` withholds the call, or None when it lets it pass."""
        if target.kind == "episode_authority":
            actions = source.episode_actions or {}
            call = SampleCall(name, _arguments(arguments))
            role = self.context.role or source.item.get("role")
            passed, reason, _ = authority(actions, [call], role if isinstance(role, str) else None)
            return _short(reason) if passed is False else None
        result = source.checks[target.source].run(sample, source.item, self.context)
        if target.kind == "stale":
            return _short(result.reason) if result.reason_code == "stale_schema" else None
        if target.kind == "policy":
            wanted = {f"{target.source}.{b}" for b in target.behaviours}
            bad = next((p for p in result.parts if p.name in wanted and p.passed is False), None)
            return _short(bad.reason) if bad is not None else None
        return _short(result.reason) if result.passed is False else None


def _arguments(text: str) -> dict[str, Any] | None:
    try:
        value = loads_exact(text)
    except JSONError:
        return None
    return value if isinstance(value, dict) else None


def _request(body: bytes) -> dict[str, Any]:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    return payload if isinstance(payload, dict) else {}


def plan_for(
    api: str | None,
    task: Task | None,
    policies: RoutePolicies | None,
    body: bytes,
    role: str | None,
) -> Plan | None:
    """The request's plan, or None when no active entry or policy covers it (``off``)."""
    if api not in _APIS:
        return None
    task_active = task is not None and task.enforce is not None and task.enforce.active
    if not task_active and (policies is None or not policies.policies):
        return None
    # The body is parsed only when a policy is limited to some models or a check reads the
    # request's tools: a multi-megabyte conversation is not parsed for nothing.
    request = _request(body) if policies is not None and policies.reads_model else None
    model = request.get("model") if request is not None else None
    model = model if isinstance(model, str) else None
    sources: list[Source] = []
    if task_active:
        assert task is not None
        assert task.enforce is not None
        episode = task.episode
        sources.append(
            Source(
                task.id,
                task.enforce,
                {check.name: check for check in checks_of(task)} if task.checks else {},
                task.item,
                episode.allowed_actions if episode is not None else None,
            )
        )
    if policies is not None:
        for policy in policies.matching(api, model):
            sources.append(Source(policy.label, policy.spec, policy.checks, {}))
    if not sources:
        return None
    sources.sort(key=lambda s: _STRICTNESS[s.spec.mode])
    if request is None:
        reads_tools = any(t.kind == "request_schema" for s in sources for t in s.spec.targets)
        request = _request(body) if reads_tools else {}
    tools = request.get("tools")
    context = CheckContext(
        request_tools=[t for t in tools if isinstance(t, dict)]
        if isinstance(tools, list)
        else None,
        model=model,
        role=role,
    )
    mode: Mode = sources[0].spec.mode  # type: ignore[assignment]  # active: never "off"
    return Plan(
        tuple(sources),
        context,
        mode,
        min(s.spec.budget_ms for s in sources) / 1000,
        any(s.spec.fail_closed for s in sources if s.spec.mode != "observe"),
    )


_WARM_TOOL: Final = {
    "type": "function",
    "function": {"name": "warm", "parameters": {"type": "object", "properties": {}}},
}
WARM_TASKS: Final = 8  # tasks warmed per load: the point is the imports and caches, not each task


def warm(tasks: TaskSet | None, policies: RoutePolicies | None) -> None:
    """Judge one made-up call with each route policy and a few enforcing tasks, off the event
    loop when a set loads: the first real answer must not pay for lazy imports (jsonschema,
    RE2) and first-use caches, which alone overrun a 20 ms budget and fall open. Never raises."""
    body = orjson.dumps({"model": "", "tools": [_WARM_TOOL]})
    enforcing = [t for t in tasks or () if t.enforce is not None and t.enforce.active]
    for api in ("chat_completions",):
        plans = [plan_for(api, None, policies, body, None)]
        plans += [plan_for(api, task, None, body, None) for task in enforcing[:WARM_TASKS]]
        for plan in plans:
            if plan is None:
                continue
            plan.budget_s = float("inf")  # no overrun to log: nothing waits on this
            try:
                plan._decide("warm", "{}")
            except Exception as exc:  # a check that raises shows on the first real answer
                log.warning("enforce_warm_failed", error=repr(exc)[:300])


@dataclass(frozen=True, slots=True)
class Answer:
    """What the client gets for an enforced non-streamed body."""

    body: bytes
    outcomes: tuple[Enforced, ...]
    changed: bool


async def enforce_answer(plan: Plan, api: str, body: bytes) -> Answer:
    """Judge ``body`` in a worker thread within the plan's budget. Over the budget the answer
    goes through as it came (fail-open), or every call in it is withheld (fail-closed)."""
    wire: Literal["chat", "responses"] = "responses" if api == "responses" else "chat"
    started = time.perf_counter()
    work = asyncio.ensure_future(asyncio.to_thread(enforce_body, wire, body, plan, plan.mode))
    try:
        new, outcomes = await asyncio.wait_for(asyncio.shield(work), plan.budget_s)
    except TimeoutError:
        # The thread finishes on its own; its answer is not waited for (nor used).
        work.add_done_callback(_forget)
        plan.failed("budget", f"no decision within {plan.budget_s * 1000:g} ms")
        return _fallen_back(plan, wire, body)
    except Exception as exc:  # enforce_body itself failed: never the relay's problem
        plan.failed("grader_error", repr(exc)[:300])
        return _fallen_back(plan, wire, body)
    plan.spent_s = max(plan.spent_s, time.perf_counter() - started)
    plan.outcomes = outcomes
    return Answer(new, outcomes, new is not body)


def _forget(work: asyncio.Future[Any]) -> None:
    if not work.cancelled():
        work.exception()  # retrieved, so a late failure is not logged as never retrieved


def _fallen_back(plan: Plan, wire: Literal["chat", "responses"], body: bytes) -> Answer:
    """After a failure: the body as it came (fail-open), or with every call withheld."""
    if not plan.closes:
        return Answer(body, (), False)
    new, outcomes = enforce_body(wire, body, lambda _n, _a: plan.fallback(), plan.mode)
    plan.outcomes = outcomes
    return Answer(new, outcomes, new is not body)
