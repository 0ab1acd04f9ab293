"""The one implementation of ``authority_ok`` and call ``links_ok`` (seed 001).

Both the ``policy`` check (the calls of one response) and the episode replay (every call of a
run) judge authority and argument links here, so a rule means the same thing on every surface.
Parsing takes an ``error(key, message)`` factory: the policy check names its check and field,
the episode record names its task and record path, and both end as ``file:line: …`` errors.

Verdicts are ``(passed, reason, reason_code)``; ``passed`` is None for an infrastructure error
(an authority rule that needs a role when no role was given). Nothing here raises on a call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import re2

from grader.patterns import PatternError, compile_pattern
from grader.toolcall.canon import TooDeepError, canon

RuleCode = Literal[
    "policy_ok",
    "unauthorised_action",
    "argument_constraint",
    "role_not_authorised",
    "link_broken",
    "missing_item_field",
]
Verdict = tuple[bool | None, str, RuleCode]
ErrorAt = Callable[[str, str], Exception]

TOOL_REF = re.compile(r"([A-Za-z0-9_\-]{1,64})\.arguments\.([^.\s][^\s]*)")
ITEM_REF = re.compile(r"item\.([^.\s][^\s]*)")
MISSING: Any = object()


class CallLike(Protocol):
    """A call as the rules read it: ``arguments`` is None when they are not a JSON object."""

    @property
    def name(self) -> str | None: ...

    @property
    def arguments(self) -> dict[str, Any] | None: ...


def lookup(value: Any, dotted: str) -> Any:
    """The value at a dotted path, or :data:`MISSING`."""
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return MISSING
        value = value[key]
    return value


def same(a: Any, b: Any) -> bool:
    """Canonical equality (grading.md's numbers and strings); unusable values never match."""
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
        value = lookup(arguments, self.path)
        if value is MISSING:
            return f"{self.path} is required" if self.required else None
        if self.enum is not None and not any(same(value, e) for e in self.enum):
            return f"{self.path} is not one of the allowed values"
        if self.const is not MISSING and not same(value, self.const):
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
    """``<tool>.arguments.<path>`` equals another call's argument or an item field."""

    source_tool: str
    source_path: str
    target_tool: str | None  # None: the target is an item field
    target_path: str
    text: str


def authority(
    allowed: Mapping[str, Action], calls: Sequence[CallLike], role: str | None
) -> Verdict:
    """Every call an allowed action, within its argument constraints, by a role holding it."""
    for call in calls:
        action = allowed.get(call.name) if call.name is not None else None
        if action is None:
            return False, f"{call.name!r} is not an allowed action", "unauthorised_action"
        if action.roles is not None:
            if role is None:
                return None, "no role given to check authority", "missing_item_field"
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


def call_links(
    links: Sequence[Link], calls: Sequence[CallLike], item: Mapping[str, Any]
) -> Verdict:
    """Every link holds for every call of its source tool, and is present at all.

    A link whose source tool was never called is *broken*, never vacuously true (issue 17):
    "the adjustment references the original payment" cannot hold when no adjustment was made.
    """
    for link in links:
        sources = [call for call in calls if call.name == link.source_tool]
        if not sources:
            return False, f"{link.text}: {link.source_tool} was not called", "link_broken"
        for call in sources:
            value = lookup(call.arguments or {}, link.source_path)
            if value is MISSING:
                return False, f"{link.text}: the argument is missing", "link_broken"
            if link.target_tool is None:
                target = lookup(item, link.target_path)
                if target is MISSING or target is None:
                    reason = f"{link.text}: item has no {link.target_path!r}"
                    return None, reason, "missing_item_field"
                linked = same(value, target)
            else:
                linked = any(
                    other.name == link.target_tool
                    and same(value, lookup(other.arguments or {}, link.target_path))
                    for other in calls
                )
            if not linked:
                return False, f"{link.text}: values differ", "link_broken"
    return True, "all links hold", "policy_ok"


def parse_constraint(error: ErrorAt, key: str, path: str, raw: Any) -> Constraint:
    if not isinstance(raw, dict) or set(raw) - {"enum", "const", "pattern", "required"}:
        raise error(key, "must be an object of enum / const / pattern / required")
    enum = raw.get("enum")
    if enum is not None and (not isinstance(enum, list) or not enum):
        raise error(key + ".enum", "must be a non-empty list")
    pattern = raw.get("pattern")
    compiled = None
    if pattern is not None:
        try:
            compiled = compile_pattern(pattern) if isinstance(pattern, str) else None
        except PatternError as exc:
            raise error(key + ".pattern", str(exc)) from None
        if compiled is None:
            raise error(key + ".pattern", "must be a string")
    required = raw.get("required", False)
    if not isinstance(required, bool):
        raise error(key + ".required", "must be true or false")
    return Constraint(
        path,
        tuple(enum) if enum is not None else None,
        raw.get("const", MISSING),
        compiled,
        required,
    )


def parse_actions(error: ErrorAt, raw: Any, key: str = "allowed_actions") -> Mapping[str, Action]:
    """``{action: {"roles": [...], "arguments": {path: constraint}}}``."""
    if not isinstance(raw, dict) or not raw:
        raise error(key, "must map action names to their constraints")
    actions: dict[str, Action] = {}
    for name, body in raw.items():
        if not isinstance(body, dict) or set(body) - {"arguments", "roles"}:
            raise error(f"{key}.{name}", "takes only 'arguments' and 'roles'")
        roles = body.get("roles")
        if roles is not None and (
            not isinstance(roles, list) or not roles or not all(isinstance(r, str) for r in roles)
        ):
            raise error(f"{key}.{name}.roles", "must be a list of role names")
        arguments = body.get("arguments", {})
        if not isinstance(arguments, dict):
            raise error(f"{key}.{name}.arguments", "must be an object")
        constraints = tuple(
            parse_constraint(error, f"{key}.{name}.arguments.{p}", p, c)
            for p, c in arguments.items()
        )
        actions[name] = Action(tuple(roles) if roles is not None else None, constraints)
    return actions


def parse_call_link(entry: Any) -> Link | None:
    """A ``{from: '<tool>.arguments.<path>', to: '<tool>.arguments.<path>' | 'item.<f>'}``
    link, or None when ``entry`` is not one."""
    source = entry.get("from") if isinstance(entry, dict) else None
    target = entry.get("to") if isinstance(entry, dict) else None
    src = TOOL_REF.fullmatch(source) if isinstance(source, str) else None
    tool_target = TOOL_REF.fullmatch(target) if isinstance(target, str) else None
    item_target = ITEM_REF.fullmatch(target) if isinstance(target, str) else None
    if src is None:
        return None
    text = f"{source} = {target}"
    if item_target is not None:
        return Link(src.group(1), src.group(2), None, item_target.group(1), text)
    if tool_target is not None:
        return Link(src.group(1), src.group(2), tool_target.group(1), tool_target.group(2), text)
    return None
