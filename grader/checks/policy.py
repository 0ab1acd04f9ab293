"""``policy``: seed 001's structured grader record for actions, one column per behaviour.

::

    {"type": "policy", "name": "refunds",
     "allowed_actions": {"create_refund": {"roles": ["support_lead"],
                                           "arguments": {"currency": {"enum": ["EUR", "USD"]},
                                                         "payment_id": {"pattern": "^pay_",
                                                                        "required": true}}},
                         "get_payment": {}},
     "forbidden_calls": ["delete_payment", {"name": "create_refund", "arguments": {"amount": 0}}],
     "required_links": [{"from": "create_refund.arguments.payment_id", "to": "item.payment_id"},
                        {"from": "notify.arguments.refund_ref",
                         "to": "create_refund.arguments.reference"}]}

Each configured behaviour is its own pass column, named ``<check name>.<behaviour>``:

* ``authority_ok`` — every call names an allowed action, its arguments meet that action's
  constraints (``enum``, ``const``, ``pattern`` searched as in JSON Schema, ``required``;
  paths relative to ``arguments``, dotted), and when the action lists ``roles``, ``item.role``
  is one of them (an item without ``role`` is an infrastructure error);
* ``no_forbidden_call`` — no call matches a forbidden entry (a name, or a name plus argument
  values compared canonically);
* ``links_ok`` — for every call of the ``from`` tool, its argument equals the ``to`` value: the
  same argument of *some* call of the ``to`` tool, or an item field. A link whose ``from`` tool
  was not called holds vacuously; a ``from`` call without the argument breaks it.

Calls are all the calls in the answer (``tool_calls``, or the one call a text answer carries).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import re2

from grader.canon import TooDeepError, canon
from grader.checks._base import (
    BaseCheck,
    CheckContext,
    CheckReasonCode,
    CheckResult,
    Sample,
    SampleCall,
    Spec,
    sample_calls,
)
from grader.patterns import PatternError, compile_pattern

BEHAVIOURS = ("authority_ok", "no_forbidden_call", "links_ok")
_TOOL_REF = re.compile(r"([A-Za-z0-9_\-]{1,64})\.arguments\.([^.\s][^\s]*)")
_ITEM_REF = re.compile(r"item\.([^.\s][^\s]*)")
_MISSING = object()

Verdict = tuple[bool | None, str, CheckReasonCode]


def _lookup(value: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _same(a: Any, b: Any) -> bool:
    try:
        return canon(a) == canon(b)
    except (TooDeepError, TypeError):
        return False


@dataclass(frozen=True, slots=True)
class Constraint:
    path: str
    enum: tuple[Any, ...] | None
    const: Any
    pattern: re2._Regexp[str] | None
    required: bool

    def violation(self, arguments: Mapping[str, Any]) -> str | None:
        value = _lookup(arguments, self.path)
        if value is _MISSING:
            return f"{self.path} is required" if self.required else None
        if self.enum is not None and not any(_same(value, e) for e in self.enum):
            return f"{self.path} is not one of the allowed values"
        if self.const is not _MISSING and not _same(value, self.const):
            return f"{self.path} is not the required value"
        if self.pattern is not None and (
            not isinstance(value, str) or self.pattern.search(value) is None
        ):
            return f"{self.path} does not match {self.pattern.pattern!r}"
        return None


@dataclass(frozen=True, slots=True)
class Action:
    roles: tuple[str, ...] | None
    constraints: tuple[Constraint, ...]


@dataclass(frozen=True, slots=True)
class Link:
    source_tool: str
    source_path: str
    target_tool: str | None  # None: the target is an item field
    target_path: str
    text: str


@dataclass(frozen=True, slots=True)
class PolicyCheck(BaseCheck):
    allowed: Mapping[str, Action] | None
    forbidden: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] | None
    links: tuple[Link, ...] | None

    @classmethod
    def build(cls, definition: Mapping[str, Any], where: str) -> PolicyCheck:
        spec = Spec(
            definition, where, frozenset({"allowed_actions", "forbidden_calls", "required_links"})
        )
        if not {"allowed_actions", "forbidden_calls", "required_links"} & set(definition):
            raise spec.error(
                "allowed_actions", "or 'forbidden_calls' or 'required_links' must be given"
            )
        allowed = (
            _actions(spec, definition["allowed_actions"])
            if ("allowed_actions" in definition)
            else None
        )
        forbidden = (
            _forbidden(spec, definition["forbidden_calls"])
            if ("forbidden_calls" in definition)
            else None
        )
        links = (
            _links(spec, definition["required_links"]) if ("required_links" in definition) else None
        )
        return cls(spec.name, "policy", spec.digest(), allowed, forbidden, links)

    @property
    def columns(self) -> tuple[str, ...]:
        configured = (self.allowed is not None, self.forbidden is not None, self.links is not None)
        return tuple(f"{self.name}.{b}" for b, on in zip(BEHAVIOURS, configured, strict=True) if on)

    def run(self, sample: Sample, item: Mapping[str, Any], context: CheckContext) -> CheckResult:
        calls = sample_calls(sample)
        verdicts: list[tuple[str, Verdict]] = []
        if self.allowed is not None:
            verdicts.append(("authority_ok", self._authority(self.allowed, calls, item)))
        if self.forbidden is not None:
            verdicts.append(("no_forbidden_call", self._no_forbidden(self.forbidden, calls)))
        if self.links is not None:
            verdicts.append(("links_ok", self._links(self.links, calls, item)))
        parts = tuple(
            CheckResult(
                f"{self.name}.{behaviour}",
                self.type,
                passed,
                None,
                reason,
                code,
                reason if passed is None else None,
                self.digest,
            )
            for behaviour, (passed, reason, code) in verdicts
        )
        states = [part.passed for part in parts]
        overall = None if None in states else all(states)
        reason = "; ".join(f"{p.name}: {p.reason}" for p in parts)
        first_bad = next((p for p in parts if p.passed is not True), None)
        code = first_bad.reason_code if first_bad is not None else "policy_ok"
        return replace(self.result(overall, reason, code), parts=parts)

    @staticmethod
    def _authority(
        allowed: Mapping[str, Action], calls: list[SampleCall], item: Mapping[str, Any]
    ) -> Verdict:
        for call in calls:
            action = allowed.get(call.name) if call.name is not None else None
            if action is None:
                return False, f"{call.name!r} is not an allowed action", "unauthorised_action"
            if action.roles is not None:
                role = item.get("role")
                if role is None:
                    return None, "item has no 'role' to check authority", "missing_item_field"
                if role not in action.roles:
                    return False, f"role {role!r} may not {call.name}", "role_not_authorised"
            for constraint in action.constraints:
                problem = (
                    "arguments are not a JSON object"
                    if call.arguments is None
                    else constraint.violation(call.arguments)
                )
                if problem is not None:
                    return False, f"{call.name}: {problem}", "argument_constraint"
        return True, f"{len(calls)} call(s) within authority", "policy_ok"

    @staticmethod
    def _no_forbidden(
        forbidden: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...], calls: list[SampleCall]
    ) -> Verdict:
        for call in calls:
            for name, arguments in forbidden:
                if call.name != name:
                    continue
                if all(
                    call.arguments is not None and _same(_lookup(call.arguments, path), value)
                    for path, value in arguments
                ):
                    return False, f"forbidden call {name!r}", "forbidden_call"
        return True, "no forbidden call", "policy_ok"

    @staticmethod
    def _links(
        links: tuple[Link, ...], calls: list[SampleCall], item: Mapping[str, Any]
    ) -> Verdict:
        for link in links:
            for call in calls:
                if call.name != link.source_tool:
                    continue
                value = _lookup(call.arguments or {}, link.source_path)
                if value is _MISSING:
                    return False, f"{link.text}: the argument is missing", "link_broken"
                if link.target_tool is None:
                    target = _lookup(item, link.target_path)
                    if target is _MISSING or target is None:
                        reason = f"{link.text}: item has no {link.target_path!r}"
                        return None, reason, "missing_item_field"
                    linked = _same(value, target)
                else:
                    linked = any(
                        other.name == link.target_tool
                        and _same(value, _lookup(other.arguments or {}, link.target_path))
                        for other in calls
                    )
                if not linked:
                    return False, f"{link.text}: values differ", "link_broken"
        return True, "all links hold", "policy_ok"


def _constraint(spec: Spec, action: str, path: str, raw: Any) -> Constraint:
    key = f"allowed_actions.{action}.arguments.{path}"
    if not isinstance(raw, dict) or set(raw) - {"enum", "const", "pattern", "required"}:
        raise spec.error(key, "must be an object of enum / const / pattern / required")
    enum = raw.get("enum")
    if enum is not None and (not isinstance(enum, list) or not enum):
        raise spec.error(key + ".enum", "must be a non-empty list")
    pattern = raw.get("pattern")
    compiled = None
    if pattern is not None:
        try:
            compiled = compile_pattern(pattern) if isinstance(pattern, str) else None
        except PatternError as exc:
            raise spec.error(key + ".pattern", str(exc)) from None
        if compiled is None:
            raise spec.error(key + ".pattern", "must be a string")
    required = raw.get("required", False)
    if not isinstance(required, bool):
        raise spec.error(key + ".required", "must be true or false")
    return Constraint(
        path,
        tuple(enum) if enum is not None else None,
        raw.get("const", _MISSING),
        compiled,
        required,
    )


def _actions(spec: Spec, raw: Any) -> Mapping[str, Action]:
    if not isinstance(raw, dict) or not raw:
        raise spec.error("allowed_actions", "must map action names to their constraints")
    actions: dict[str, Action] = {}
    for name, body in raw.items():
        if not isinstance(body, dict) or set(body) - {"arguments", "roles"}:
            raise spec.error(f"allowed_actions.{name}", "takes only 'arguments' and 'roles'")
        roles = body.get("roles")
        if roles is not None and (
            not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles)
        ):
            raise spec.error(f"allowed_actions.{name}.roles", "must be a list of role names")
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict):
            raise spec.error(f"allowed_actions.{name}.arguments", "must be an object")
        constraints = tuple(_constraint(spec, name, p, c) for p, c in arguments.items())
        actions[name] = Action(tuple(roles) if roles is not None else None, constraints)
    return actions


def _forbidden(spec: Spec, raw: Any) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    if not isinstance(raw, list) or not raw:
        raise spec.error("forbidden_calls", "must be a non-empty list")
    entries: list[tuple[str, tuple[tuple[str, Any], ...]]] = []
    for index, entry in enumerate(raw):
        if isinstance(entry, str) and entry:
            entries.append((entry, ()))
            continue
        name = entry.get("name") if isinstance(entry, dict) else None
        arguments = entry.get("arguments", {}) if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise spec.error(
                f"forbidden_calls[{index}]", "must be a name or {name, arguments: {path: value}}"
            )
        entries.append((name, tuple(arguments.items())))
    return tuple(entries)


def _links(spec: Spec, raw: Any) -> tuple[Link, ...]:
    if not isinstance(raw, list) or not raw:
        raise spec.error("required_links", "must be a non-empty list")
    links = []
    for index, entry in enumerate(raw):
        source = entry.get("from") if isinstance(entry, dict) else None
        target = entry.get("to") if isinstance(entry, dict) else None
        src = _TOOL_REF.fullmatch(source) if isinstance(source, str) else None
        tool_target = _TOOL_REF.fullmatch(target) if isinstance(target, str) else None
        item_target = _ITEM_REF.fullmatch(target) if isinstance(target, str) else None
        if src is None or (tool_target is None and item_target is None):
            raise spec.error(
                f"required_links[{index}]",
                "must be {from: '<tool>.arguments.<path>', "
                "to: '<tool>.arguments.<path>' | 'item.<field>'}",
            )
        text = f"{source} = {target}"
        if item_target is not None:
            links.append(Link(src.group(1), src.group(2), None, item_target.group(1), text))
        elif tool_target is not None:
            links.append(
                Link(src.group(1), src.group(2), tool_target.group(1), tool_target.group(2), text)
            )
    return tuple(links)
