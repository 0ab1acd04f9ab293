"""The deploy files' paths, the metric contract, and a small
PromQL scanner: shared by the dashboard lint and the Prometheus rules' checks (tests/deploy).

grafana/dashboard-linter and a PromQL parser are not installable here, so the scanner reads
just enough PromQL (selectors, matchers, ranges, wrapped counters) to lint expressions offline;
promtool, where installed, has the last word on syntax.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from tests.support.paths import REPO

DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "gradeproxy.json"
BUILDER = DEPLOY / "grafana" / "build_dashboard.py"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
PROVIDERS = DEPLOY / "grafana" / "provisioning" / "dashboards" / "gradeproxy.yaml"
CONTRACT = DEPLOY / "metrics.json"
RECORDING = DEPLOY / "prometheus" / "rules" / "recording.yml"
PROMETHEUS_YML = DEPLOY / "prometheus" / "prometheus.yml"
COMPOSE = DEPLOY / "compose.yaml"
ARCHITECTURE = REPO / "docs" / "architecture.md"

DS = {"type": "prometheus", "uid": "${datasource}"}
TARGET_LABELS = frozenset({"job", "instance"})
Json = dict[str, Any]


# --- the metric contract --------------------------------------------------------------------


@cache
def contract() -> Json:
    data: Json = json.loads(CONTRACT.read_text(encoding="utf-8"))
    return data


@cache
def recording_rules() -> dict[str, frozenset[str]]:
    """Recording rule name -> the labels it keeps (its top-level `sum by (...)`)."""
    rules: dict[str, frozenset[str]] = {}
    for group in yaml.safe_load(RECORDING.read_text(encoding="utf-8"))["groups"]:
        for rule in group["rules"]:
            match = re.match(r"\s*sum by \(([^)]*)\)", rule["expr"])
            labels = match.group(1) if match else ""
            rules[rule["record"]] = frozenset(x.strip() for x in labels.split(",") if x.strip())
    return rules


@dataclass(frozen=True)
class Known:
    """What an expression may say about one series name."""

    labels: frozenset[str]
    values: dict[str, frozenset[str]]


def resolve(name: str) -> Known | None:
    """The labels a series name carries, or None when it is not part of the contract."""
    metrics: dict[str, Json] = contract()["metrics"]
    if name in metrics:
        spec = metrics[name]
        labels = frozenset(spec["labels"]) | frozenset(spec.get("planned_labels", []))
        values = {k: frozenset(v) for k, v in spec.get("label_values", {}).items()}
        return Known(labels | TARGET_LABELS, values)
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and metrics.get(base, {}).get("type") == "histogram":
            known = resolve(base)
            assert known is not None
            extra = frozenset({"le"}) if suffix == "_bucket" else frozenset()
            return Known(known.labels | extra, known.values)
    if name in recording_rules():
        return Known(recording_rules()[name], {})
    if name in contract()["prometheus_synthetic"]:
        return Known(TARGET_LABELS, {})
    return None


# --- a small PromQL scanner -----------------------------------------------------------------
# Enough PromQL for our own expressions: string literals are masked first, so nothing inside a
# label value is mistaken for syntax.

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_SELECTOR = re.compile(r"(?<![\w:.$])(?P<name>[a-zA-Z_:][\w:]*)\s*(?P<block>\{[^}]*\})?")
_MATCHER = re.compile(r'(?P<label>[a-zA-Z_]\w*)\s*(?P<op>=~|!~|!=|=)\s*"(?P<index>\d+)"')
_WRAPPED = re.compile(
    r"\b(?:rate|irate|increase)\(\s*(?P<name>[a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*\["
)
KEYWORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
        "offset", "bool", "inf", "nan", "atan2",
        "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
        "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str


@dataclass(frozen=True)
class Selector:
    name: str
    matchers: tuple[Matcher, ...]

    def matcher(self, label: str) -> Matcher | None:
        return next((m for m in self.matchers if m.label == label), None)


def _mask(expr: str) -> tuple[str, list[str]]:
    strings: list[str] = []

    def keep(match: re.Match[str]) -> str:
        strings.append(match.group(0)[1:-1])
        return f'"{len(strings) - 1}"'

    return _STRING.sub(keep, expr), strings


def selectors(expr: str) -> list[Selector]:
    """Every series selector in `expr`, with its matchers (string values unmasked)."""
    masked, strings = _mask(expr)
    masked = _RANGE.sub(" ", _CLAUSE.sub(r"\1", masked))
    found: list[Selector] = []
    for match in _SELECTOR.finditer(masked):
        name, block = match.group("name"), match.group("block")
        if name in KEYWORDS:
            continue
        if block is None and masked[match.end() :].lstrip().startswith("("):
            continue  # a function call
        matchers = tuple(
            Matcher(m.group("label"), m.group("op"), strings[int(m.group("index"))])
            for m in _MATCHER.finditer(block or "")
        )
        found.append(Selector(name, matchers))
    return found


def ranges(expr: str) -> list[str]:
    masked, _ = _mask(expr)
    return [r[1:-1] for r in _RANGE.findall(masked)]


def unwrapped_counters(expr: str) -> list[str]:
    """Counters (`*_total`) used outside rate()/irate()/increase()."""
    masked, _ = _mask(expr)
    wrapped = [m.group("name") for m in _WRAPPED.finditer(masked)]
    problems: list[str] = []
    for sel in selectors(expr):
        if sel.name.endswith("_total"):
            if sel.name in wrapped:
                wrapped.remove(sel.name)
            else:
                problems.append(sel.name)
    return problems


def contract_problems(expr: str) -> list[str]:
    """Metric names, label names and closed label values that the contract does not know."""
    problems: list[str] = []
    for sel in selectors(expr):
        known = resolve(sel.name)
        if known is None:
            problems.append(f"{sel.name}: not in deploy/metrics.json nor a recording rule")
            continue
        for m in sel.matchers:
            if m.label not in known.labels:
                problems.append(f"{sel.name}: no label {m.label!r}")
            elif m.label in known.values and "$" not in m.value:
                if m.op in ("=", "!="):
                    wanted = {m.value}
                elif re.fullmatch(r"[\w|]+", m.value):
                    wanted = set(m.value.split("|"))
                else:
                    continue
                unknown = wanted - known.values[m.label]
                if unknown:
                    problems.append(f"{sel.name}: {m.label} has no value {sorted(unknown)}")
    return problems


def dashboard_matcher_problems(expr: str) -> list[str]:
    """dashboard-linter's target-job/instance rules, plus task/model for graded metrics."""
    problems: list[str] = []
    for sel in selectors(expr):
        known = resolve(sel.name)
        wanted = ["job", "instance"] + [
            label for label in ("task", "model") if known and label in known.labels
        ]
        for label in wanted:
            m = sel.matcher(label)
            if m is None or (m.op, m.value) != ("=~", f"${label}"):
                problems.append(f'{sel.name}: needs {label}=~"${label}"')
    return problems


def promql_for_promtool(expr: str) -> str:
    """A Grafana expression as plain PromQL (the variables replaced by valid stand-ins)."""
    return expr.replace("$__rate_interval", "5m")
