"""Enforce mode's rules (docs/enforce.md): which checks may act on an answer, and how.

A task (or a route policy, :mod:`grader.route_policy`) may carry an ``enforce`` entry::

    "enforce": {"mode": "block", "checks": ["no_delete", "request_schema"],
                "budget_ms": 20, "fail_closed": false}

The proxy then judges each tool call of an answer with the named checks *before* the client
gets it, and blocks, strips or (``observe``) only counts what fires. Only checks that decide
one call deterministically, with no judge and no other call, may enforce:

* a ``tool_call`` check, through its stale-schema flag alone (the call matches the task's
  pre-migration ``metadata.stale``): a mere mismatch with ``expected`` is a grade, not a reason
  to withhold a call;
* a ``policy`` check's ``no_forbidden_call`` and ``authority_ok`` (the check's name enforces
  those of the two it configures; ``<name>.<behaviour>`` names one); ``links_ok`` compares
  calls with each other and cannot judge one call alone;
* a ``json_schema`` check with ``"schema": "from_request"`` (arguments against the request's
  own declared tool);
* ``episode.authority_ok``: the task's episode record's ``allowed_actions``, per turn.

Everything else is refused when the task loads, with the task and the check named: a judge
check (``label_model``, ``score_model``) above all, since a judge never blocks.

Pure: this module parses and validates; the proxy runs the checks (proxy/pipeline/enforce/).
It imports no check code (``grader.tasks`` holds an :class:`EnforceSpec`, and a task holds
check definitions only), so what it reads of a check is the :class:`Definition` protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, Protocol, get_args

from grader.errors import GraderError
from grader.values import value_type

__all__ = [
    "BUDGET_MS_DEFAULT",
    "ENFORCE_KEYS",
    "MODES",
    "Definition",
    "EnforceError",
    "EnforceSpec",
    "Mode",
    "Target",
    "parse_enforce",
    "resolve_targets",
]

Mode = Literal["off", "observe", "block", "strip"]
MODES: Final[tuple[Mode, ...]] = get_args(Mode)
ENFORCE_KEYS: Final = ("mode", "checks", "budget_ms", "fail_closed")
BUDGET_MS_DEFAULT: Final = 20
BUDGET_MS_MAX: Final = 10_000
EPISODE_AUTHORITY: Final = "episode.authority_ok"
# What a target runs: the stale flag of a tool_call check, policy behaviours, a from_request
# schema, the episode record's authority.
TargetKind = Literal["stale", "policy", "request_schema", "episode_authority"]
_ENFORCING_BEHAVIOURS: Final = ("authority_ok", "no_forbidden_call")
_CONFIGURED_BY: Final = ("allowed_actions", "forbidden_calls")  # the policy key of each


class EnforceError(GraderError, ValueError):
    """An ``enforce`` entry (or a route policy) that cannot be used; the message names the
    task or route and the check."""


class Definition(Protocol):
    """What validation reads of a check definition (``grader.tasks.CheckDefinition``)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def definition(self) -> Mapping[str, Any]: ...
    @property
    def needs_judge(self) -> bool: ...


@value_type
class Target:
    """One enforced check, resolved: ``check`` is the name reported (in the header, the row
    and the metric), ``source`` the task check it runs (empty for the episode record), and
    ``behaviours`` the policy columns that act (policy targets only)."""

    kind: TargetKind
    check: str
    source: str = ""
    behaviours: tuple[str, ...] = ()


@value_type
class EnforceSpec:
    """A validated ``enforce`` entry; ``targets`` are its checks, resolved against the task's
    (or the route policy's) check definitions."""

    mode: Mode = "off"
    checks: tuple[str, ...] = ()
    budget_ms: int = BUDGET_MS_DEFAULT
    fail_closed: bool = False
    targets: tuple[Target, ...] = ()

    @property
    def active(self) -> bool:
        """Whether anything is enforced or observed (``off`` is today's behaviour)."""
        return self.mode != "off" and bool(self.targets)


def parse_enforce(raw: Any, label: str) -> EnforceSpec:
    """The entry's shape (targets unresolved); ``label`` names its owner (``task 'x'``)."""
    if not isinstance(raw, Mapping):
        raise EnforceError(f"{label}: 'enforce' must be an object {{mode, checks, ...}}")
    unknown = sorted(set(raw) - set(ENFORCE_KEYS))
    if unknown:
        raise EnforceError(
            f"{label}: 'enforce.{unknown[0]}' is unknown (known: {', '.join(ENFORCE_KEYS)})"
        )
    mode = raw.get("mode", "off")
    if mode not in MODES:
        raise EnforceError(f"{label}: 'enforce.mode' must be one of {', '.join(MODES)}")
    checks = raw.get("checks")
    if (
        not isinstance(checks, list)
        or not checks
        or not all(isinstance(c, str) and c for c in checks)
    ):
        raise EnforceError(f"{label}: 'enforce.checks' must be a non-empty list of check names")
    if len(set(checks)) != len(checks):
        raise EnforceError(f"{label}: 'enforce.checks' names a check twice")
    budget = raw.get("budget_ms", BUDGET_MS_DEFAULT)
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= BUDGET_MS_MAX:
        raise EnforceError(
            f"{label}: 'enforce.budget_ms' must be a whole number of milliseconds, "
            f"1 to {BUDGET_MS_MAX}"
        )
    fail_closed = raw.get("fail_closed", False)
    if not isinstance(fail_closed, bool):
        raise EnforceError(f"{label}: 'enforce.fail_closed' must be true or false")
    return EnforceSpec(mode, tuple(checks), budget, fail_closed)


def resolve_targets(
    spec: EnforceSpec,
    definitions: Sequence[Definition],
    label: str,
    has_stale: bool,
    episode_authority: bool,
) -> EnforceSpec:
    """``spec`` with its targets: each named check resolved against ``definitions`` and
    refused unless it may enforce. ``has_stale``: the task has a ``metadata.stale`` call;
    ``episode_authority``: its episode record has ``allowed_actions``."""
    by_name = {d.name: d for d in definitions}
    targets = [
        _target(name, by_name, f"{label}: enforce.checks[{i}]", has_stale, episode_authority)
        for i, name in enumerate(spec.checks)
    ]
    return EnforceSpec(spec.mode, spec.checks, spec.budget_ms, spec.fail_closed, tuple(targets))


def _target(
    name: str,
    by_name: Mapping[str, Definition],
    where: str,
    has_stale: bool,
    episode_authority: bool,
) -> Target:
    if name == EPISODE_AUTHORITY:
        if not episode_authority:
            raise EnforceError(
                f"{where}: check {name!r} needs the task's 'episode' record with 'allowed_actions'"
            )
        return Target("episode_authority", name)
    check_name, behaviour = name, ""
    if name not in by_name and "." in name:
        check_name, _, behaviour = name.rpartition(".")
    definition = by_name.get(check_name)
    if definition is None:
        known = ", ".join(sorted(by_name)) or "none"
        raise EnforceError(
            f"{where}: check {name!r} is not a check of this task (its checks: {known}; "
            f"or {EPISODE_AUTHORITY!r})"
        )
    if definition.needs_judge:
        raise EnforceError(
            f"{where}: check {name!r} is a judge check ({definition.type}): a judge never "
            "enforces; only deterministic checks may (docs/enforce.md)"
        )
    kind = definition.type
    if kind == "tool_call" and not behaviour:
        if not has_stale:
            raise EnforceError(
                f"{where}: check {name!r} (tool_call) enforces only its stale-schema flag, and "
                "the task has no 'metadata.stale' call"
            )
        return Target("stale", name, name)
    if kind == "json_schema" and not behaviour:
        if definition.definition.get("schema") != "from_request":
            raise EnforceError(
                f"{where}: check {name!r} (json_schema) may enforce only with "
                "'schema': 'from_request' (the request's declared tools)"
            )
        return Target("request_schema", name, name)
    if kind == "policy":
        configured = tuple(
            b
            for b, key in zip(_ENFORCING_BEHAVIOURS, _CONFIGURED_BY, strict=True)
            if key in definition.definition
        )
        if behaviour:
            if behaviour not in configured:
                raise EnforceError(
                    f"{where}: column {name!r} cannot enforce: a policy enforces "
                    f"{' or '.join(_ENFORCING_BEHAVIOURS)} when configured (links_ok compares "
                    "calls with each other, never one call alone)"
                )
            return Target("policy", name, check_name, (behaviour,))
        if not configured:
            raise EnforceError(
                f"{where}: check {name!r} (policy) has neither 'allowed_actions' nor "
                "'forbidden_calls': nothing it could enforce (links_ok never does)"
            )
        return Target("policy", name, name, configured)
    what = f"column {name!r}" if behaviour else f"check {name!r} ({kind})"
    raise EnforceError(
        f"{where}: {what} cannot enforce: only a tool_call check's stale flag, policy "
        "checks, json_schema with 'from_request' and episode.authority_ok decide one call "
        "deterministically"
    )
