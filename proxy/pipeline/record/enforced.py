"""Recording what enforce mode did with an answer: its counters and the row's ``enforcement``.

Counted once per answer, after the relay: ``gradeproxy_enforced_total{task, check, action}``
for every call a policy acted on or (``observe``) would have, and
``gradeproxy_enforce_failures_total{kind, outcome}`` when the answer could not be judged.
Labels are bounded like every other: ``task`` is a loaded task's id or ``route:<policy>`` of
the loaded policy file, ``check`` one of their check names (or the failure kind of a
fail-closed decision), ``action`` a closed set. The row's ``enforcement`` field
(docs/rows.md) is built here too, so the row and the counters cannot disagree.
"""

from __future__ import annotations

from typing import Any

from proxy.pipeline.enforce.decision import Enforced
from proxy.pipeline.enforce.judge import Plan
from proxy.pipeline.record.metrics import ProxyMetrics

__all__ = ["count_enforced", "enforcement_record"]

_ACTED = ("block", "strip", "observe")


def _label_of(plan: Plan, check: str | None) -> str:
    """The metric's ``task`` for a check: the first (strictest) policy that has it."""
    for source in plan.sources:
        if any(target.check == check for target in source.spec.targets):
            return source.label
    return plan.sources[0].label


def count_enforced(metrics: ProxyMetrics, plan: Plan) -> None:
    """Count the plan's decisions and failure, once per answer."""
    for outcome in plan.outcomes:
        decision = outcome.decision
        if decision.action in _ACTED:
            check = decision.check or "none"
            metrics.enforced.labels(_label_of(plan, check), check, decision.action).inc()
    if plan.failure is not None:
        metrics.enforce_failures.labels(plan.failure, "closed" if plan.closes else "open").inc()


def _call(outcome: Enforced) -> dict[str, Any]:
    d = outcome.decision
    return {"name": outcome.name, "action": d.action, "check": d.check, "reason": d.reason}


def enforcement_record(plan: Plan, changed: bool, halted: bool = False) -> dict[str, Any]:
    """The row's ``enforcement``: the mode, the first action taken (``pass`` when none), its
    check and reason, what the client received, every call judged and any failure.

    ``halted``: a fail-closed stream was ended early with an in-band error, so the client got
    neither the original nor a rewritten answer, only its beginning (``received: halted``)."""
    fired = next((o.decision for o in plan.outcomes if o.decision.action != "pass"), None)
    if halted:
        received = "halted"
    elif not changed:
        received = "original"
    else:
        received = "blocked" if fired is not None and fired.action == "block" else "stripped"
    return {
        "mode": plan.mode,
        "policies": [source.label for source in plan.sources],
        "action": fired.action if fired is not None else "pass",
        "check": fired.check if fired is not None else None,
        "reason": fired.reason if fired is not None else None,
        "received": received,
        "calls": [_call(outcome) for outcome in plan.outcomes],
        "failure": plan.failure,
        "fail_closed": plan.closes,
    }
