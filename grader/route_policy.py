"""Route policies: enforce rules that apply by route, with no task header (docs/enforce.md).

A YAML (or JSON) file, ``enforce.path`` in the proxy's config::

    policies:
      - name: payments                 # names the policy in rows, logs and the metric
        models: ["gpt-4.1*"]           # globs on the request's model; default: every model
        apis: [chat_completions]       # default: chat_completions and responses
        checks:                        # check definitions, as in a task (docs/grading.md)
          - {type: policy, name: no_delete, forbidden_calls: ["delete_*"]}
          - {type: json_schema, name: request_schema, schema: from_request}
        enforce: {mode: block, budget_ms: 20, fail_closed: false}   # checks: default all

Every policy whose ``models`` and ``apis`` match a request applies to it, in file order. The
checks are built and validated here exactly as a task's are, and must be able to enforce
(:mod:`grader.enforce`): ``tool_call`` is refused (a route has no expected call), as is a
judge. Pure: reading the file is the only I/O; a bad file raises :class:`EnforceError` naming
the file, the policy and the check, and a running proxy keeps its last good policies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from grader.checks import Check, CheckDefinitionError, build_check
from grader.enforce import EnforceError, EnforceSpec, parse_enforce, resolve_targets
from grader.patterns import glob_match
from grader.toolcall.canon import canonical_json

__all__ = ["APIS", "RoutePolicies", "RoutePolicy", "load_policies", "parse_policies"]

APIS: Final = ("chat_completions", "responses")
_POLICY_KEYS: Final = ("name", "models", "apis", "checks", "enforce", "description")
ROUTE_PREFIX: Final = "route:"


@dataclass(frozen=True, slots=True)
class _CheckDef:
    """A built check seen through :class:`grader.enforce.Definition`."""

    name: str
    type: str
    definition: Mapping[str, Any]
    needs_judge: bool


@dataclass(frozen=True, slots=True)
class RoutePolicy:
    """One policy: where it applies and its enforced checks, built."""

    name: str
    models: tuple[str, ...]
    apis: tuple[str, ...]
    spec: EnforceSpec
    checks: Mapping[str, Check]

    @property
    def label(self) -> str:
        """How the policy is named where a task id would be (the metric's ``task``)."""
        return ROUTE_PREFIX + self.name

    def applies(self, api: str, model: str | None) -> bool:
        if api not in self.apis:
            return False
        return any(glob_match(glob, model or "") for glob in self.models)


@dataclass(frozen=True, slots=True)
class RoutePolicies:
    """The loaded policy file: its policies in file order and a digest of their text."""

    policies: tuple[RoutePolicy, ...]
    digest: str
    source: str = ""

    @property
    def reads_model(self) -> bool:
        """Whether any active policy is limited to some models (else no request's ``model``
        needs reading to know which policies apply)."""
        return any(p.spec.active and p.models != ("*",) for p in self.policies)

    def matching(self, api: str, model: str | None) -> tuple[RoutePolicy, ...]:
        return tuple(p for p in self.policies if p.spec.active and p.applies(api, model))


def _globs(raw: Any, key: str, label: str, default: tuple[str, ...]) -> tuple[str, ...]:
    if raw is None:
        return default
    if not isinstance(raw, list) or not raw or not all(isinstance(g, str) and g for g in raw):
        raise EnforceError(f"{label}: '{key}' must be a non-empty list of strings")
    return tuple(raw)


def _policy(raw: Any, index: int, source: str) -> RoutePolicy:
    where = f"{source}: policies[{index}]"
    if not isinstance(raw, Mapping):
        raise EnforceError(f"{where}: a policy must be a mapping {{name, checks, enforce}}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise EnforceError(f"{where}: 'name' must be a non-empty string")
    label = f"{source}: route policy {name!r}"
    unknown = sorted(set(raw) - set(_POLICY_KEYS))
    if unknown:
        raise EnforceError(
            f"{label}: unknown key {unknown[0]!r} (known: {', '.join(_POLICY_KEYS)})"
        )
    models = _globs(raw.get("models"), "models", label, ("*",))
    apis = _globs(raw.get("apis"), "apis", label, APIS)
    if bad := [a for a in apis if a not in APIS]:
        raise EnforceError(f"{label}: 'apis' entry {bad[0]!r} is not one of {', '.join(APIS)}")
    listed = raw.get("checks")
    if not isinstance(listed, list) or not listed:
        raise EnforceError(f"{label}: 'checks' must be a non-empty list of check definitions")
    built: dict[str, Check] = {}
    for i, definition in enumerate(listed):
        try:
            if isinstance(definition, Mapping) and definition.get("type") == "tool_call":
                raise CheckDefinitionError(
                    f"checks[{i}]: a tool_call check grades against a task's expected call, "
                    "which a route has none of"
                )
            check = build_check(definition, f"checks[{i}]")
        except CheckDefinitionError as exc:
            raise EnforceError(f"{label}: {exc}") from None
        if check.name in built:
            raise EnforceError(f"{label}: checks[{i}]: two checks are named {check.name!r}")
        built[check.name] = check
    entry = raw.get("enforce")
    if not isinstance(entry, Mapping):
        raise EnforceError(f"{label}: 'enforce' must be a mapping {{mode, budget_ms, ...}}")
    if "checks" not in entry:
        entry = {**entry, "checks": list(built)}
    spec = parse_enforce(entry, label)
    definitions = [
        _CheckDef(check.name, check.type, dict(definition), check.needs_judge)
        for check, definition in zip(built.values(), listed, strict=True)
    ]
    spec = resolve_targets(spec, definitions, label, has_stale=False, episode_authority=False)
    return RoutePolicy(name, models, apis, spec, built)


def parse_policies(raw: Any, source: str = "<memory>") -> RoutePolicies:
    """Validate a policy file's content, all or nothing."""
    if not isinstance(raw, Mapping) or set(raw) - {"policies"}:
        raise EnforceError(f"{source}: a policy file is a mapping with one key, 'policies'")
    listed = raw.get("policies")
    if not isinstance(listed, list):
        raise EnforceError(f"{source}: 'policies' must be a list")
    policies = tuple(_policy(entry, i, source) for i, entry in enumerate(listed))
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise EnforceError(f"{source}: two policies are named {twice!r}")
    try:
        text = canonical_json(raw)
    except (TypeError, ValueError) as exc:
        raise EnforceError(f"{source}: not plain data: {exc}") from None
    digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
    return RoutePolicies(policies, digest, source)


def load_policies(path: str | Path) -> RoutePolicies:
    """Read and validate a policy file; :class:`EnforceError` names the file on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EnforceError(f"{path}: cannot read the policy file: {exc}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EnforceError(f"{path}: not valid YAML: {exc}") from None
    return parse_policies(raw, str(path))
