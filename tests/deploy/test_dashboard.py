"""The Grafana dashboard and its provisioning, linted offline.

grafana/dashboard-linter is not installable here, so its rules are re-implemented as pytest
checks: one `datasource` variable used by every panel and target, `$__rate_interval` in every
range, counters only inside rate()/increase(), job/instance matchers on every selector, and a
title, description and unit on every panel. On top of the linter: every metric and label an
expression names belongs to the metric contract (deploy/metrics.json, which mirrors
docs/architecture.md), and every expression parses as PromQL (promtool).

The scanner, the tool lookup and the contract readers are tests/support/deploy.py's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path

import pytest
import yaml

from tests.support.deploy import (
    ARCHITECTURE,
    BUILDER,
    COMPOSE,
    DASHBOARD,
    DATASOURCES,
    DS,
    PROMETHEUS_YML,
    PROVIDERS,
    Json,
    contract,
    contract_problems,
    dashboard_matcher_problems,
    promql_for_promtool,
    ranges,
    selectors,
    unwrapped_counters,
)
from tests.support.tools import require_tool, run_tool

# --- the dashboard --------------------------------------------------------------------------


@cache
def dashboard() -> Json:
    data: Json = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def all_panels(panels: list[Json]) -> Iterator[Json]:
    for panel in panels:
        yield panel
        yield from all_panels(panel.get("panels", []))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


PANELS = list(all_panels(dashboard()["panels"]))
VISUAL = [p for p in PANELS if p["type"] != "row"]
PANEL_PARAMS = [pytest.param(p, id=f"{p['id']}-{_slug(p['title'])}") for p in PANELS]
VISUAL_PARAMS = [pytest.param(p, id=f"{p['id']}-{_slug(p['title'])}") for p in VISUAL]
TARGET_PARAMS = [
    pytest.param(t["expr"], id=f"{p['id']}{t['refId']}-{_slug(p['title'])}")
    for p in VISUAL
    for t in p["targets"]
]
VARIABLES: list[Json] = dashboard()["templating"]["list"]


def test_regenerating_the_dashboard_gives_identical_bytes() -> None:
    """The committed JSON is exactly what build_dashboard.py writes (edit the script, not it)."""
    built = subprocess.run(
        [sys.executable, str(BUILDER), "--stdout"], capture_output=True, check=True, timeout=60
    )
    assert built.stdout == DASHBOARD.read_bytes(), "run deploy/grafana/build_dashboard.py"


DASHBOARD_RULES: list[tuple[str, Callable[[Json, str], bool]]] = [
    ("stable-uid", lambda d, _: d.get("uid") == "gradeproxy-overview"),
    ("no-numeric-id", lambda d, _: d.get("id") is None),
    ("no-__inputs", lambda d, _: "__inputs" not in d and "__requires" not in d),
    ("no-DS-placeholders", lambda _, text: "${DS_" not in text and "$DS_" not in text),
    ("has-title", lambda d, _: bool(d.get("title"))),
    ("schema-version", lambda d, _: isinstance(d.get("schemaVersion"), int)),
    ("tagged", lambda d, _: "gradeproxy" in d.get("tags", [])),
]


@pytest.mark.parametrize("check", [pytest.param(check, id=name) for name, check in DASHBOARD_RULES])
def test_dashboard_level_rule(check: Callable[[Json, str], bool]) -> None:
    assert check(dashboard(), DASHBOARD.read_text(encoding="utf-8"))


def test_exactly_one_datasource_variable_named_datasource() -> None:
    """dashboard-linter template-datasource-rule."""
    datasource_vars = [v for v in VARIABLES if v["type"] == "datasource"]
    assert [(v["name"], v["query"]) for v in datasource_vars] == [("datasource", "prometheus")]


@pytest.mark.parametrize(
    ("name", "label_values_of"),
    [
        pytest.param("job", "gradeproxy_build_info", id="job"),
        pytest.param("instance", "gradeproxy_build_info", id="instance"),
        pytest.param("task", "gradeproxy_task_info", id="task"),
        pytest.param("model", "gradeproxy_grades_total", id="model"),
    ],
)
def test_query_variable(name: str, label_values_of: str) -> None:
    """dashboard-linter template-job/instance rules, and the task and model filters."""
    (var,) = [v for v in VARIABLES if v["name"] == name]
    assert var["type"] == "query"
    assert var["datasource"] == DS
    query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
    assert re.fullmatch(rf"label_values\({label_values_of}(\{{[^}}]*\}})?, {name}\)", query)
    assert var["includeAll"]
    assert var["multi"]
    assert not contract_problems(query.removeprefix("label_values(").rsplit(",", 1)[0])


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in PANELS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize("panel", PANEL_PARAMS)
def test_panel_has_title_and_description(panel: Json) -> None:
    """dashboard-linter panel-title-description-rule (rows included)."""
    assert panel.get("title", "").strip()
    assert panel.get("description", "").strip()


@pytest.mark.parametrize("panel", VISUAL_PARAMS)
def test_panel_has_unit(panel: Json) -> None:
    """dashboard-linter panel-units-rule."""
    assert panel["fieldConfig"]["defaults"].get("unit")


@pytest.mark.parametrize("panel", VISUAL_PARAMS)
def test_panel_and_targets_use_the_datasource_variable(panel: Json) -> None:
    """dashboard-linter panel-datasource-rule, for the panel and each of its targets."""
    assert panel["datasource"] == DS
    assert panel["targets"], "a panel without queries"
    assert [t["datasource"] for t in panel["targets"]] == [DS] * len(panel["targets"])


@pytest.mark.parametrize("panel", VISUAL_PARAMS)
def test_panel_fits_the_grid(panel: Json) -> None:
    pos = panel["gridPos"]
    assert pos["x"] >= 0
    assert 0 < pos["w"] <= 24 - pos["x"]
    assert pos["h"] > 0


def test_checks_row_is_live_and_reads_the_check_metrics() -> None:
    """Per-check grading shipped: no "empty until" note on the Checks row or its panels."""
    (row,) = [p for p in PANELS if p["type"] == "row" and p["title"] == "Checks"]
    assert row["panels"], "the row has no panels"
    for panel in [row, *row["panels"]]:
        assert "Empty until" not in panel["description"], panel["title"]
    names = {s.name for p in row["panels"] for t in p["targets"] for s in selectors(t["expr"])}
    assert names == {"gradeproxy_check_results_total", "gradeproxy_grader_info"}


SHADOW_METRICS = {
    "gradeproxy_grades_total",
    "gradeproxy_stale_schema_total",
    "gradeproxy_shadow_requests_total",
    "gradeproxy_shadow_pairs_total",
    "gradeproxy_shadow_unpaired_total",
    "gradeproxy_variant_request_duration_seconds_bucket",
    "gradeproxy_variant_ttfb_seconds_bucket",
}


def test_shadow_row_is_live_and_reads_only_stable_shadow_metrics() -> None:
    """The primary-vs-shadow row shipped: no "empty until" note, every series stable."""
    (row,) = [p for p in PANELS if p["type"] == "row" and p["title"] == "Primary vs shadow"]
    assert len(row["panels"]) >= 6
    for panel in [row, *row["panels"]]:
        assert "Empty until" not in panel["description"], panel["title"]
    names = {s.name for p in row["panels"] for t in p["targets"] for s in selectors(t["expr"])}
    assert names == SHADOW_METRICS
    stable = {n for n, spec in contract()["metrics"].items() if spec["status"] == "stable"}
    assert {n.removesuffix("_bucket") for n in names} <= stable


@pytest.mark.parametrize(
    ("title", "metric"),
    [
        pytest.param("Requests per second by route and code", "gradeproxy_requests_total",
                     id="traffic"),
        pytest.param("Error rate (5xx share of responses)", "gradeproxy_requests_total",
                     id="error-rate"),
        pytest.param("Request duration quantiles (graded routes)",
                     "gradeproxy:request_duration_seconds_bucket:rate5m", id="latency"),
        pytest.param("Upstream time to first byte quantiles (graded routes)",
                     "gradeproxy:upstream_ttfb_seconds_bucket:rate5m", id="ttfb"),
        pytest.param("Proxy overhead quantiles (graded routes)",
                     "gradeproxy:overhead_seconds_bucket:rate5m", id="overhead"),
        pytest.param("Pass rate by task and model", "gradeproxy:grades:rate5m", id="pass-rate"),
        pytest.param("Stale-schema rate by task", "gradeproxy:stale_schema:rate5m",
                     id="stale-by-task"),
        pytest.param("Stale-schema rate by mutation kind",
                     "gradeproxy:stale_schema_by_mutation_kind:rate5m", id="stale-by-kind"),
        pytest.param("Grading skipped per second by reason", "gradeproxy_grading_skipped_total",
                     id="skipped"),
        pytest.param("Grading infrastructure errors per second by kind",
                     "gradeproxy_grading_errors_total", id="infra-errors"),
        pytest.param("Grade queue depth", "gradeproxy_grade_queue_depth", id="queue-depth"),
        pytest.param("Check results per second by check", "gradeproxy_check_results_total",
                     id="checks"),
        pytest.param("Pass rate: primary vs shadow by task", "gradeproxy_grades_total",
                     id="primary-vs-shadow"),
        pytest.param("Paired pass rate: primary vs shadow by task",
                     "gradeproxy_shadow_pairs_total", id="paired-pass-rate"),
        pytest.param("Shadow wins and losses per second by task",
                     "gradeproxy_shadow_pairs_total", id="wins-losses"),
        pytest.param("Shadow requests per second by result", "gradeproxy_shadow_requests_total",
                     id="shadow-requests"),
        pytest.param("Upstream duration by variant (p50, p95)",
                     "gradeproxy_variant_request_duration_seconds_bucket",
                     id="variant-latency"),
    ],
)  # fmt: skip
def test_required_panel_exists(title: str, metric: str) -> None:
    """The panels the dashboard promises, each reading the metric it is about."""
    (panel,) = [p for p in VISUAL if p["title"] == title]
    names = {s.name for t in panel["targets"] for s in selectors(t["expr"])}
    assert metric in names


def test_p99_quantile_is_drawn_for_every_latency_panel() -> None:
    latency = [p for p in VISUAL if "quantiles" in p["title"]]
    assert len(latency) == 4
    for panel in latency:
        legends = [t["legendFormat"] for t in panel["targets"]]
        assert legends == ["p50", "p90", "p99"], panel["title"]
        assert "histogram_quantile(0.99," in panel["targets"][2]["expr"]


@pytest.mark.parametrize("expr", TARGET_PARAMS)
def test_target_ranges_use_rate_interval(expr: str) -> None:
    """dashboard-linter target-rate-interval-rule: no fixed windows in the dashboard."""
    assert all(r == "$__rate_interval" for r in ranges(expr)), ranges(expr)


@pytest.mark.parametrize("expr", TARGET_PARAMS)
def test_target_counters_only_inside_rate_or_increase(expr: str) -> None:
    """dashboard-linter target-counter-agg-rule."""
    assert unwrapped_counters(expr) == []


@pytest.mark.parametrize("expr", TARGET_PARAMS)
def test_target_selectors_carry_the_variables(expr: str) -> None:
    """dashboard-linter target-job/instance rules; graded metrics also follow task and model."""
    assert dashboard_matcher_problems(expr) == []


@pytest.mark.parametrize("expr", TARGET_PARAMS)
def test_target_names_only_contract_metrics(expr: str) -> None:
    assert selectors(expr), "no series in the expression"
    assert contract_problems(expr) == []


def test_every_target_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses every dashboard expression (as a recording rule's expr)."""
    promtool = require_tool("promtool")
    rules = [
        {
            "record": f"dashboard:panel_{p['id']}_{t['refId']}",
            "expr": promql_for_promtool(t["expr"]),
        }
        for p in VISUAL
        for t in p["targets"]
    ]
    path = tmp_path / "dashboard_exprs.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_tool(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# --- the linter helpers can fail ------------------------------------------------------------

BASE = 'job=~"$job", instance=~"$instance"'


@pytest.mark.parametrize(
    ("check", "expr"),
    [
        pytest.param(ranges, f"rate(gradeproxy_requests_total{{{BASE}}}[5m])",
                     id="fixed-window"),
        pytest.param(unwrapped_counters, f"sum(gradeproxy_requests_total{{{BASE}}})",
                     id="bare-counter"),
        pytest.param(unwrapped_counters,
                     f"rate(gradeproxy_requests_total{{{BASE}}}[1m])"
                     f" / gradeproxy_requests_total{{{BASE}}}", id="second-use-bare"),
        pytest.param(contract_problems, f"rate(gradeproxy_request_total{{{BASE}}}[1m])",
                     id="unknown-metric"),
        pytest.param(contract_problems,
                     f'rate(gradeproxy_grades_total{{{BASE}, taks="a"}}[1m])', id="unknown-label"),
        pytest.param(contract_problems,
                     f'rate(gradeproxy_grades_total{{{BASE}, result="passed"}}[1m])',
                     id="unknown-value"),
        pytest.param(contract_problems,
                     f'rate(gradeproxy_grades_total{{{BASE}, variant=~"primary|canary"}}[1m])',
                     id="unknown-value-in-alternation"),
        pytest.param(contract_problems, f"gradeproxy_tasks_loaded{{{BASE}, le=\"1\"}}",
                     id="le-on-a-gauge"),
        pytest.param(contract_problems, "gradeproxy:grades:rate1m", id="unknown-recording-rule"),
        pytest.param(dashboard_matcher_problems, 'gradeproxy_tasks_loaded{job=~"$job"}',
                     id="missing-instance"),
        pytest.param(dashboard_matcher_problems,
                     f"gradeproxy:grades:rate5m{{{BASE}, task=~\"$task\"}}", id="missing-model"),
        pytest.param(dashboard_matcher_problems,
                     f"gradeproxy:grades:rate5m{{{BASE}}} * on (job, instance, task)"
                     " group_left (mutation_kind) gradeproxy_task_info", id="bare-join"),
    ],
)  # fmt: skip
def test_lint_helpers_flag_bad_expressions(check: Callable[[str], list[str]], expr: str) -> None:
    """Each rule above really rejects the mistake it exists for."""
    found = check(expr)
    if check is ranges:
        assert found != ["$__rate_interval"] * len(found)
    else:
        assert found


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        pytest.param('sum by (le) (rate(a_bucket{x="{y}", b="c"}[5m] offset 1h))', ["a_bucket"],
                     id="strings-and-offset"),
        pytest.param("histogram_quantile(0.9, sum by (le) (b:c:rate5m))", ["b:c:rate5m"],
                     id="recording-rule"),
        pytest.param("a * on (job, task) group_left (kind) b", ["a", "b"], id="join"),
        pytest.param("absent(up{job=\"x\"}) == 1 or up == 0", ["up", "up"], id="functions"),
        pytest.param("1e3 * x > 0.5", ["x"], id="numbers"),
    ],
)  # fmt: skip
def test_selector_scanner(expr: str, names: list[str]) -> None:
    assert [s.name for s in selectors(expr)] == names


# --- the contract file mirrors docs/architecture.md -----------------------------------------


def architecture_table() -> dict[str, tuple[str, frozenset[str]]]:
    """Metric -> (type, labels) from the metric-contract table of docs/architecture.md."""
    rows: dict[str, tuple[str, frozenset[str]]] = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\|\s*`(gradeproxy_\w+)`\s*\|\s*([^|]+?)\s*\|(.*)\|\s*$", line)
        if match:
            kind = match.group(2).split()[0]
            cell = re.sub(r"\([^)]*\)", "", match.group(3))
            rows[match.group(1)] = (kind, frozenset(re.findall(r"`(\w+)`", cell)))
    return rows


def test_architecture_table_is_parsed() -> None:
    assert len(architecture_table()) >= 10


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, id=n) for n in sorted(architecture_table())],
)
def test_contract_file_matches_architecture_doc(name: str) -> None:
    spec = contract()["metrics"].get(name)
    assert spec is not None, f"{name} is in docs/architecture.md but not deploy/metrics.json"
    assert spec["status"] == "stable"
    assert (spec["type"], frozenset(spec["labels"])) == architecture_table()[name]


def test_every_stable_contract_metric_is_documented() -> None:
    stable = {n for n, s in contract()["metrics"].items() if s["status"] == "stable"}
    assert stable == set(architecture_table())


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in sorted(contract()["metrics"])])
def test_contract_entry_is_well_formed(name: str) -> None:
    spec = contract()["metrics"][name]
    assert re.fullmatch(r"gradeproxy_[a-z0-9_]+", name)
    assert spec["status"] in {"stable", "planned"}
    assert spec["type"] in {"counter", "gauge", "histogram"}
    assert name.endswith("_total") == (spec["type"] == "counter")
    labels = set(spec["labels"]) | set(spec.get("planned_labels", []))
    assert set(spec.get("label_values", {})) <= labels
    assert not labels & {"job", "instance", "le"}


# --- provisioning -----------------------------------------------------------------------------


def _compose_mount_target(source: str) -> str:
    compose = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    for volume in compose["services"]["grafana"]["volumes"]:
        src, dst, *_ = volume.split(":")
        if src == source:
            return str(dst)
    raise AssertionError(f"grafana does not mount {source}")


def test_datasource_has_the_fixed_uid() -> None:
    (ds,) = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))["datasources"]
    assert (ds["uid"], ds["type"]) == ("gradeproxy-prometheus", "prometheus")
    # The dashboard's datasource variable defaults to it.
    (var,) = [v for v in VARIABLES if v["name"] == "datasource"]
    assert var["current"]["value"] == ds["uid"]


def test_datasource_time_interval_is_the_scrape_interval() -> None:
    """$__rate_interval is derived from it: it must be the real scrape interval."""
    (ds,) = yaml.safe_load(DATASOURCES.read_text(encoding="utf-8"))["datasources"]
    scrape = yaml.safe_load(PROMETHEUS_YML.read_text(encoding="utf-8"))["global"]
    assert ds["jsonData"]["timeInterval"] == scrape["scrape_interval"]


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param("type", "file", id="file-provider"),
        pytest.param("allowUiUpdates", False, id="git-is-the-source-of-truth"),
        pytest.param("disableDeletion", True, id="no-deletion"),
    ],
)
def test_dashboard_provider(key: str, expected: object) -> None:
    (provider,) = yaml.safe_load(PROVIDERS.read_text(encoding="utf-8"))["providers"]
    assert provider[key] == expected


def test_dashboard_provider_path_is_where_compose_mounts_the_dashboards() -> None:
    (provider,) = yaml.safe_load(PROVIDERS.read_text(encoding="utf-8"))["providers"]
    assert provider["options"]["path"] == _compose_mount_target("./grafana/dashboards")
    assert _compose_mount_target("./grafana/provisioning") == "/etc/grafana/provisioning"
