"""Deployment files, validated offline: Prometheus config and rules, Kubernetes manifests,
compose, the Dockerfile and the shell scripts.

The validators are real tools (promtool, kubernetes-validate, check-jsonschema, hadolint,
shellcheck, yamllint; scripts/install-ci-tools.sh installs them). Without one a test skips
locally and fails when CI is set. Each validator also gets a broken input, to show it rejects.
On top of them: the alerts' behaviour (promtool unit tests), the shutdown budget, the config
checksum, and the cross-references between files (selectors, ports, paths, job names).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from functools import cache
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import pytest
import yaml

from tests.support.deploy import (
    COMPOSE,
    DEPLOY,
    PROMETHEUS_YML,
    RECORDING,
    contract_problems,
    selectors,
    unwrapped_counters,
)
from tests.support.paths import REPO
from tests.support.tools import require_tool, run_tool

Json = dict[str, Any]

RULES_DIR = DEPLOY / "prometheus" / "rules"
ALERTS = RULES_DIR / "alerts.yml"
K8S = DEPLOY / "k8s"
PROXY_CONFIG = DEPLOY / "config" / "proxy.yaml"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
DOCKERIGNORE = DEPLOY / "docker" / "Dockerfile.dockerignore"
OPERATIONS = REPO / "docs" / "operations.md"
K8S_CORE = ["configmap.yaml", "deployment.yaml", "hpa.yaml", "pdb.yaml", "service.yaml"]
SCRIPTS = sorted((REPO / "scripts").glob("*.sh"))


def load(path: Path) -> Json:
    data: Json = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


@cache
def k8s(name: str) -> Json:
    return load(K8S / name)


def alert_rules() -> list[Json]:
    return [rule for group in load(ALERTS)["groups"] for rule in group["rules"]]


def recording_rule_list() -> list[Json]:
    return [rule for group in load(RECORDING)["groups"] for rule in group["rules"]]


def pod_spec() -> Json:
    spec: Json = k8s("deployment.yaml")["spec"]["template"]["spec"]
    return spec


def container() -> Json:
    (only,) = pod_spec()["containers"]
    return cast(Json, only)


def configmap_config() -> Json:
    data: Json = yaml.safe_load(k8s("configmap.yaml")["data"]["config.yaml"])
    return data


def duration_s(text: str) -> float:
    """A Prometheus/compose duration (`45s`, `1m30s`, `2m`) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    assert "".join(n + u for n, u in parts) == text, f"unparsed duration {text!r}"
    return sum(float(n) * units[u] for n, u in parts)


def import_script(path: Path) -> ModuleType:
    spec = spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- Prometheus -------------------------------------------------------------------------------


def test_promtool_check_config() -> None:
    promtool = require_tool("promtool")
    result = run_tool(promtool, "check", "config", PROMETHEUS_YML.name, cwd=PROMETHEUS_YML.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 rule files found" in result.stdout + result.stderr


def compose_prometheus_config() -> Json:
    compose = load(COMPOSE)
    data: Json = yaml.safe_load(compose["configs"]["prometheus-config"]["content"])
    return data


def test_compose_prometheus_config_is_prometheus_yml_with_the_service_target() -> None:
    """compose.yaml inlines prometheus.yml; only the scrape target may differ."""
    inline, local = compose_prometheus_config(), load(PROMETHEUS_YML)
    targets = inline["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["proxy:8080"]
    inline["scrape_configs"][0]["static_configs"][0]["targets"] = ["localhost:8080"]
    assert inline == local


def test_promtool_check_compose_prometheus_config(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    shutil.copytree(RULES_DIR, tmp_path / "rules")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(compose_prometheus_config()))
    result = run_tool(promtool, "check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.name) for p in sorted(RULES_DIR.glob("*.yml"))]
)
def test_promtool_check_rules(path: Path) -> None:
    promtool = require_tool("promtool")
    result = run_tool(promtool, "check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_rule(tmp_path: Path) -> None:
    """The control for the checks above: promtool does fail on a bad expression."""
    promtool = require_tool("promtool")
    bad = tmp_path / "bad.yml"
    bad.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "a:b", "expr": "sum("}]}]})
    )
    assert run_tool(promtool, "check", "rules", str(bad)).returncode != 0


RULE_EXPRS = [
    pytest.param(rule["expr"], id=rule.get("alert") or rule["record"])
    for rule in alert_rules() + recording_rule_list()
]


@pytest.mark.parametrize("expr", RULE_EXPRS)
def test_rule_names_only_contract_metrics(expr: str) -> None:
    assert selectors(expr)
    assert contract_problems(expr) == []


@pytest.mark.parametrize("expr", RULE_EXPRS)
def test_rule_counters_only_inside_rate_or_increase(expr: str) -> None:
    assert unwrapped_counters(expr) == []


@pytest.mark.parametrize("rule", [pytest.param(r, id=r["record"]) for r in recording_rule_list()])
def test_recording_rule_convention(rule: Json) -> None:
    """gradeproxy:<metric>:<op>, a top-level `sum by` that keeps job and instance."""
    assert re.fullmatch(r"gradeproxy:[a-z0-9_]+:[a-z0-9_]+", rule["record"])
    match = re.match(r"sum by \(([^)]*)\)", rule["expr"])
    assert match, "a recording rule is a sum by (...)"
    kept = {label.strip() for label in match.group(1).split(",")}
    assert {"job", "instance"} <= kept
    window = re.findall(r"\[(\w+)\]", rule["expr"])
    assert all(w == "5m" for w in window)
    assert rule["record"].endswith(":rate5m")


@pytest.mark.parametrize("rule", [pytest.param(r, id=r["alert"]) for r in alert_rules()])
def test_alert_is_self_contained(rule: Json) -> None:
    """alerts.yml reads raw contract metrics only, so it works loaded on its own."""
    assert not [s.name for s in selectors(rule["expr"]) if ":" in s.name]


def github_anchors(markdown: str) -> set[str]:
    anchors = set(re.findall(r'<a (?:id|name)="([^"]+)"', markdown))
    for heading in re.findall(r"^#+\s+(.+?)\s*$", markdown, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("rule", [pytest.param(r, id=r["alert"]) for r in alert_rules()])
def test_alert_has_runbook_annotations(rule: Json) -> None:
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    url = annotations["runbook_url"]
    assert url == f"docs/operations.md#{rule['alert'].lower()}"
    anchor = url.split("#", 1)[1]
    assert anchor in github_anchors(OPERATIONS.read_text(encoding="utf-8"))
    assert rule["labels"]["severity"] in {"warning", "critical"}


@pytest.mark.parametrize("rule", [pytest.param(r, id=r["alert"]) for r in alert_rules()])
def test_alert_has_a_pending_state(rule: Json) -> None:
    """`for: 0s` would skip pending; every alert keeps one (see alerts.yml's header)."""
    assert duration_s(rule["for"]) > 0


EXPECTED_ALERTS = {
    "GradeproxyStaleSchemaRateHigh",
    "GradeproxyPassRateDropped",
    "GradeproxyGradingErrors",
    "GradeproxyGradeQueueDrops",
    "GradeproxyGradingUnhealthy",
    "GradeproxyUpstreamErrorRate",
    "GradeproxyTraceDrops",
    "GradeproxyDown",
}


def test_the_alert_set() -> None:
    assert {r["alert"] for r in alert_rules()} == EXPECTED_ALERTS


# --- alert and recording-rule behaviour (promtool test rules) ---------------------------------
# Each case: input series (1m apart) and what is firing at given times. promtool lists only
# *firing* alerts, so a case checks both "not yet" (still pending) and "now firing".
# Annotations are stripped from the copy under test; their labels are checked below.

J = 'job="gradeproxy", instance="proxy-0:8080"'
G = f'{J}, task="t1", model="m1"'


def grades(result: str, values: str, extra: str = "") -> Json:
    return {"series": f'gradeproxy_grades_total{{{G}, result="{result}"{extra}}}', "values": values}


def firing(*labels: Mapping[str, str]) -> list[Json]:
    return [{"exp_labels": dict(x)} for x in labels]


TASK_ALERT = {"job": "gradeproxy", "task": "t1", "severity": "warning"}


def traced(signal: str, values: str, dropped: str | None = None) -> Json:
    """An exporter counter: exported, or dropped for reason ``dropped``."""
    if dropped is None:
        return {
            "series": f'gradeproxy_trace_exported_total{{{J}, signal="{signal}"}}',
            "values": values,
        }
    return {"series": f'gradeproxy_trace_dropped_total{{{J}, signal="{signal}",'
                      f' reason="{dropped}"}}', "values": values}  # fmt: skip


def trace_alert(signal: str) -> dict[str, str]:
    return {"job": "gradeproxy", "signal": signal, "severity": "warning"}


ALERT_CASES: list[tuple[str, list[Json], str, list[tuple[str, list[Json]]]]] = [
    (
        "stale-50pct-fires-after-for",
        [
            grades("pass", "0+10x20"),
            grades("stale", "0+10x20"),
            {"series": f"gradeproxy_stale_schema_total{{{G}}}", "values": "0+10x20"},
        ],
        "GradeproxyStaleSchemaRateHigh",
        [("3m", []), ("10m", firing(TASK_ALERT))],
    ),
    (
        "stale-5pct-below-threshold",
        [
            grades("pass", "0+19x20"),
            grades("stale", "0+1x20"),
            {"series": f"gradeproxy_stale_schema_total{{{G}}}", "values": "0+1x20"},
        ],
        "GradeproxyStaleSchemaRateHigh",
        [("15m", [])],
    ),
    (
        "stale-single-answer-on-quiet-task",
        [
            grades("stale", "0 0 0 1x17"),
            {"series": f"gradeproxy_stale_schema_total{{{G}}}", "values": "0 0 0 1x17"},
        ],
        "GradeproxyStaleSchemaRateHigh",
        [("6m", []), ("9m", [])],
    ),
    (
        "stale-shadow-grades-do-not-count",
        [
            grades("pass", "0+10x20"),
            grades("stale", "0+100x20", ', variant="shadow"'),
            {"series": f"gradeproxy_stale_schema_total{{{G}}}", "values": "0+0x20"},
        ],
        "GradeproxyStaleSchemaRateHigh",
        [("15m", [])],
    ),
    (
        "stale-shadow-schema-answers-do-not-count",
        [
            grades("pass", "0+10x20"),
            grades("stale", "0+100x20", ', variant="shadow"'),
            {"series": f'gradeproxy_stale_schema_total{{{G}, variant="shadow"}}',
             "values": "0+100x20"},
            {"series": f'gradeproxy_stale_schema_total{{{G}, variant="primary"}}',
             "values": "0+0x20"},
        ],
        "GradeproxyStaleSchemaRateHigh",
        [("15m", [])],
    ),
    (
        "pass-rate-drop-90-to-50-fires",
        [
            grades("pass", "0+9x119 1080+5x80"),
            grades("fail", "0+1x119 120+5x80"),
        ],
        "GradeproxyPassRateDropped",
        [
            ("2h", []),
            ("3h", firing({"job": "gradeproxy", "task": "t1", "model": "m1",
                           "severity": "warning"})),
        ],
    ),
    (
        "pass-rate-steady",
        [grades("pass", "0+9x200"), grades("fail", "0+1x200")],
        "GradeproxyPassRateDropped",
        [("3h", [])],
    ),
    (
        "pass-rate-drop-on-low-volume",
        [grades("pass", "0x119 0+0x80"), grades("fail", "0x119 0+0.1x80")],
        "GradeproxyPassRateDropped",
        [("3h", [])],
    ),
    (
        "grading-error-fires-then-resolves",
        [{"series": f'gradeproxy_grading_errors_total{{{J}, kind="write"}}',
          "values": "0 0 1x30"}],
        "GradeproxyGradingErrors",
        [
            ("4m", []),
            ("8m", firing({"job": "gradeproxy", "kind": "write", "severity": "warning"})),
            ("20m", []),
        ],
    ),
    (
        "no-grading-errors",
        [{"series": f'gradeproxy_grading_errors_total{{{J}, kind="write"}}', "values": "0x30"}],
        "GradeproxyGradingErrors",
        [("10m", [])],
    ),
    (
        "grading-stuck-fires-after-5m",
        [{"series": f"gradeproxy_grading_healthy{{{J}}}", "values": "1 1 0x30"}],
        "GradeproxyGradingUnhealthy",
        [
            ("4m", []),
            (
                "10m",
                firing({"job": "gradeproxy", "instance": "proxy-0:8080", "severity": "critical"}),
            ),
        ],
    ),
    (
        "grading-healthy-stays-quiet",
        [{"series": f"gradeproxy_grading_healthy{{{J}}}", "values": "1x30"}],
        "GradeproxyGradingUnhealthy",
        [("10m", [])],
    ),
    (
        "queue-full-drops-fire",
        [{"series": f'gradeproxy_grading_skipped_total{{{J}, reason="queue_full"}}',
          "values": "0+5x30"}],
        "GradeproxyGradeQueueDrops",
        [("3m", []), ("10m", firing({"job": "gradeproxy", "severity": "warning"}))],
    ),
    (
        "other-skip-reasons-do-not-fire",
        [{"series": f'gradeproxy_grading_skipped_total{{{J}, reason="sampled_out"}}',
          "values": "0+50x30"}],
        "GradeproxyGradeQueueDrops",
        [("10m", [])],
    ),
    (
        "trace-export-failing-fires",
        [traced("spans", "0+100x30"), traced("spans", "0+10x30", "export_failed")],
        "GradeproxyTraceDrops",
        [("3m", []), ("10m", firing(trace_alert("spans")))],
    ),
    (
        "trace-collector-down-fires-for-logs",
        [traced("logs", "0x30"), traced("logs", "0 0 0+20x28", "queue_full")],
        "GradeproxyTraceDrops",
        [("4m", []), ("12m", firing(trace_alert("logs")))],
    ),
    (
        "trace-phoenix-annotations-failing-fires",
        [traced("annotations", "0+50x30"), traced("annotations", "0+50x30", "export_failed")],
        "GradeproxyTraceDrops",
        [("3m", []), ("10m", firing(trace_alert("annotations")))],
    ),
    (
        "trace-drops-below-1pct-quiet",
        [traced("spans", "0+1000x30"), traced("spans", "0+5x30", "queue_full")],
        "GradeproxyTraceDrops",
        [("15m", [])],
    ),
    (
        "trace-shutdown-drops-do-not-fire",
        [traced("spans", "0+100x30"), traced("spans", "0+500x30", "shutdown")],
        "GradeproxyTraceDrops",
        [("15m", [])],
    ),
    (
        "tracing-off-quiet",
        [traced("spans", "0x30"), traced("spans", "0x30", "queue_full")],
        "GradeproxyTraceDrops",
        [("15m", [])],
    ),
    (
        "upstream-errors-10pct-fire",
        [
            {"series": f'gradeproxy_requests_total{{{J}, route="chat_completions", code="200"}}',
             "values": "0+90x20"},
            {"series": f'gradeproxy_requests_total{{{J}, route="chat_completions", code="502"}}',
             "values": "0+10x20"},
            {"series": f'gradeproxy_upstream_errors_total{{{J}, kind="connect"}}',
             "values": "0+10x20"},
        ],
        "GradeproxyUpstreamErrorRate",
        [("3m", []), ("12m", firing({"job": "gradeproxy", "severity": "critical"}))],
    ),
    (
        "upstream-errors-1pct-quiet",
        [
            {"series": f'gradeproxy_requests_total{{{J}, route="chat_completions", code="200"}}',
             "values": "0+99x20"},
            {"series": f'gradeproxy_upstream_errors_total{{{J}, kind="timeout"}}',
             "values": "0+1x20"},
        ],
        "GradeproxyUpstreamErrorRate",
        [("12m", [])],
    ),
    (
        "target-down-fires-after-2m",
        [{"series": f"up{{{J}}}", "values": "1 1 1 0x10"}],
        "GradeproxyDown",
        [
            ("4m", []),
            ("6m", firing({"job": "gradeproxy", "instance": "proxy-0:8080",
                           "severity": "critical"})),
        ],
    ),
    (
        "no-target-at-all-fires",
        [{"series": 'up{job="other", instance="x:1"}', "values": "1x10"}],
        "GradeproxyDown",
        [("5m", firing({"job": "gradeproxy", "severity": "critical"}))],
    ),
    (
        "target-up-quiet",
        [{"series": f"up{{{J}}}", "values": "1x10"}],
        "GradeproxyDown",
        [("8m", [])],
    ),
]  # fmt: skip


def run_promtool_tests(tmp_path: Path, test: Json) -> subprocess.CompletedProcess[str]:
    promtool = require_tool("promtool")
    alerts = load(ALERTS)
    for group in alerts["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(alerts))
    shutil.copy(RECORDING, tmp_path / "recording.yml")
    spec = {
        "rule_files": ["alerts.yml", "recording.yml"],
        "evaluation_interval": "1m",
        "tests": [test],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec))
    return run_tool(promtool, "test", "rules", "test.yml", cwd=tmp_path)


@pytest.mark.parametrize(
    ("series", "alert", "checks"),
    [pytest.param(s, a, c, id=name) for name, s, a, c in ALERT_CASES],
)
def test_alert_behaviour(
    tmp_path: Path, series: list[Json], alert: str, checks: list[tuple[str, list[Json]]]
) -> None:
    test = {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": at, "alertname": alert, "exp_alerts": expected} for at, expected in checks
        ],
    }
    result = run_promtool_tests(tmp_path, test)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_behaviour_control(tmp_path: Path) -> None:
    """promtool does fail when an expected alert is not firing (so the table can fail)."""
    test = {
        "interval": "1m",
        "input_series": [{"series": f"up{{{J}}}", "values": "1x10"}],
        "alert_rule_test": [
            {"eval_time": "8m", "alertname": "GradeproxyDown",
             "exp_alerts": firing({"job": "gradeproxy", "severity": "critical"})}
        ],
    }  # fmt: skip
    assert run_promtool_tests(tmp_path, test).returncode != 0


@pytest.mark.parametrize("rule", [pytest.param(r, id=r["alert"]) for r in alert_rules()])
def test_annotation_templates_use_labels_the_alert_has(rule: Json) -> None:
    """`{{ $labels.x }}` renders empty when x is not on the alert: x must be in a test case."""
    used = set()
    for text in rule["annotations"].values():
        used |= set(re.findall(r"\$labels\.(\w+)", text))
    have: set[str] = set()
    for _, _, alert, checks in ALERT_CASES:
        if alert == rule["alert"]:
            for _, expected in checks:
                for item in expected:
                    have |= set(item["exp_labels"])
    assert have, "no firing case for this alert"
    assert used <= have


def test_recording_rules_join_mutation_kind_and_skip_shadow(tmp_path: Path) -> None:
    t1, t2 = f'{J}, task="t1", model="m1"', f'{J}, task="t2", model="m1"'
    test = {
        "interval": "1m",
        "input_series": [
            {"series": f'gradeproxy_grades_total{{{t1}, result="stale"}}', "values": "0+60x20"},
            {"series": f'gradeproxy_grades_total{{{t1}, result="stale", variant="shadow"}}',
             "values": "0+600x20"},
            {"series": f"gradeproxy_stale_schema_total{{{t1}}}", "values": "0+60x20"},
            {"series": f"gradeproxy_stale_schema_total{{{t2}}}", "values": "0+120x20"},
            {"series": f'gradeproxy_task_info{{{J}, task="t1", mutation_kind="field_renamed"}}',
             "values": "1x20"},
            {"series": f'gradeproxy_task_info{{{J}, task="t2", mutation_kind="enum_changed"}}',
             "values": "1x20"},
        ],
        "promql_expr_test": [
            {
                "expr": "gradeproxy:grades:rate5m",
                "eval_time": "10m",
                "exp_samples": [
                    {"labels": f'gradeproxy:grades:rate5m{{{t1}, result="stale"}}', "value": 1}
                ],
            },
            {
                "expr": "gradeproxy:stale_schema_by_mutation_kind:rate5m",
                "eval_time": "10m",
                "exp_samples": [
                    {"labels": "gradeproxy:stale_schema_by_mutation_kind:rate5m"
                               f'{{{t1}, mutation_kind="field_renamed"}}', "value": 1},
                    {"labels": "gradeproxy:stale_schema_by_mutation_kind:rate5m"
                               f'{{{t2}, mutation_kind="enum_changed"}}', "value": 2},
                ],
            },
            {
                "expr": "gradeproxy:grades_by_mutation_kind:rate5m",
                "eval_time": "10m",
                "exp_samples": [
                    {"labels": "gradeproxy:grades_by_mutation_kind:rate5m"
                               f'{{{t1}, mutation_kind="field_renamed", result="stale"}}',
                     "value": 1},
                ],
            },
        ],
    }  # fmt: skip
    result = run_promtool_tests(tmp_path, test)
    assert result.returncode == 0, result.stdout + result.stderr


# --- Kubernetes -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", K8S_CORE)
def test_kubernetes_validate_strict(name: str) -> None:
    tool = require_tool("kubernetes-validate")
    result = run_tool(tool, "--strict", name, cwd=K8S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout
    assert "Couldn't find schema" not in result.stdout + result.stderr


def test_kubernetes_validate_rejects_an_unknown_field(tmp_path: Path) -> None:
    tool = require_tool("kubernetes-validate")
    broken = copy.deepcopy(k8s("deployment.yaml"))
    broken["spec"]["template"]["spec"]["containers"][0]["lifecycle"]["preStopp"] = {}
    (tmp_path / "deployment.yaml").write_text(yaml.safe_dump(broken))
    assert run_tool(tool, "--strict", "deployment.yaml", cwd=tmp_path).returncode != 0


def test_kustomization_lists_every_manifest() -> None:
    kustomization = k8s("kustomization.yaml")
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(manifests)
    assert "namespace" not in kustomization
    for name in manifests:
        assert "namespace" not in k8s(name)["metadata"], name


POD_LABELS = k8s("deployment.yaml")["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize(
    ("name", "selector"),
    [
        pytest.param("deployment.yaml", lambda d: d["spec"]["selector"]["matchLabels"],
                     id="deployment"),
        pytest.param("service.yaml", lambda d: d["spec"]["selector"], id="service"),
        pytest.param("pdb.yaml", lambda d: d["spec"]["selector"]["matchLabels"], id="pdb"),
    ],
)  # fmt: skip
def test_selector_matches_the_pods(name: str, selector: Callable[[Json], Json]) -> None:
    wanted = selector(k8s(name))
    assert wanted
    assert wanted.items() <= POD_LABELS.items()


def test_servicemonitor_scrapes_the_service_metrics_port() -> None:
    """kubernetes-validate has no schema for the CRD: check what it must agree with."""
    monitor, service = k8s("servicemonitor.yaml"), k8s("service.yaml")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["kind"] == "ServiceMonitor"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert duration_s(endpoint["scrapeTimeout"]) < duration_s(endpoint["interval"])
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}


def test_scrape_job_name_is_what_the_down_alert_watches() -> None:
    """The operator names the job after the Service; prometheus.yml uses the same name."""
    (down,) = [r for r in alert_rules() if r["alert"] == "GradeproxyDown"]
    jobs = set(re.findall(r'up\{job="([^"]+)"\}', down["expr"]))
    assert jobs == {k8s("service.yaml")["metadata"]["name"]}
    assert jobs == {c["job_name"] for c in load(PROMETHEUS_YML)["scrape_configs"]}


def test_service_targets_the_container_port() -> None:
    (port,) = k8s("service.yaml")["spec"]["ports"]
    container_ports = {p["name"]: p["containerPort"] for p in container()["ports"]}
    assert port["targetPort"] in container_ports
    assert container_ports[port["targetPort"]] == configmap_config()["listen"]["port"]


def test_hpa_scales_the_deployment_which_leaves_replicas_to_it() -> None:
    hpa, deployment = k8s("hpa.yaml"), k8s("deployment.yaml")
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert "replicas" not in deployment["spec"]
    assert hpa["spec"]["minReplicas"] >= 2, "the PDB needs a second pod to allow a drain"
    assert container()["resources"]["requests"]["cpu"], "CPU utilisation needs a request"


def _probe(kind: str) -> Json:
    return cast(Json, container()[kind])


@pytest.mark.parametrize(
    ("what", "get", "expected"),
    [
        pytest.param("readiness", lambda: _probe("readinessProbe")["httpGet"]["path"], "/readyz",
                     id="readiness-readyz"),
        pytest.param("liveness", lambda: _probe("livenessProbe")["httpGet"]["path"], "/livez",
                     id="liveness-livez"),
        pytest.param("startup", lambda: _probe("startupProbe")["httpGet"]["path"], "/livez",
                     id="startup-livez"),
        pytest.param("non-root", lambda: pod_spec()["securityContext"]["runAsNonRoot"], True,
                     id="run-as-non-root"),
        pytest.param("no-escalation",
                     lambda: container()["securityContext"]["allowPrivilegeEscalation"], False,
                     id="no-privilege-escalation"),
        pytest.param("read-only-root",
                     lambda: container()["securityContext"]["readOnlyRootFilesystem"], True,
                     id="read-only-root-fs"),
        pytest.param("caps", lambda: container()["securityContext"]["capabilities"]["drop"],
                     ["ALL"], id="drop-all-capabilities"),
        pytest.param("memory-limit", lambda: bool(container()["resources"]["limits"]["memory"]),
                     True, id="memory-limit"),
        pytest.param("config-arg", lambda: container()["args"][:3],
                     ["serve", "--config", "/etc/gradeproxy/config.yaml"], id="serve-config"),
        pytest.param("per-pod-results", lambda: container()["args"][3:],
                     ["--results", "/var/lib/gradeproxy/results/$(POD_NAME).jsonl"],
                     id="results-file-per-pod"),
        pytest.param("no-workers", lambda: "--workers" in container()["args"], False,
                     id="one-process-per-container"),
    ],
)  # fmt: skip
def test_deployment_setting(what: str, get: Callable[[], object], expected: object) -> None:
    assert get() == expected, what


def test_pod_name_env_comes_from_the_downward_api() -> None:
    env = {e["name"]: e for e in container()["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # The demo backend needs no key, and the proxy refuses to start when a configured
    # api_key_env is missing, so the shipped config names none; the optional Secret is wired
    # for users who uncomment api_key_env.
    assert "api_key_env" not in configmap_config()["upstream"]
    assert env["UPSTREAM_API_KEY"]["valueFrom"]["secretKeyRef"]["optional"] is True


def test_probes_give_readiness_a_faster_trigger_than_liveness() -> None:
    ready, live = _probe("readinessProbe"), _probe("livenessProbe")
    ready_s = ready["periodSeconds"] * ready["failureThreshold"]
    assert ready_s < live["periodSeconds"] * live["failureThreshold"]


def test_termination_grace_exceeds_prestop_plus_drain_plus_grace() -> None:
    """The grace countdown starts before preStop: it must cover preStop, drain and streams."""
    prestop = container()["lifecycle"]["preStop"]["sleep"]["seconds"]
    shutdown = configmap_config()["shutdown"]
    budget = prestop + shutdown["drain_delay_s"] + shutdown["grace_period_s"]
    assert pod_spec()["terminationGracePeriodSeconds"] > budget


def test_compose_stop_grace_exceeds_drain_plus_grace() -> None:
    shutdown = load(PROXY_CONFIG)["shutdown"]
    stop = duration_s(load(COMPOSE)["services"]["proxy"]["stop_grace_period"])
    assert stop > shutdown["drain_delay_s"] + shutdown["grace_period_s"]


def test_checksum_annotation_is_the_sha256_of_the_configmap_data() -> None:
    script = import_script(K8S / "update_checksum.py")
    checksum = cast(Callable[[Mapping[str, str]], str], script.config_checksum)
    annotations = k8s("deployment.yaml")["spec"]["template"]["metadata"]["annotations"]
    data = k8s("configmap.yaml")["data"]
    assert annotations["checksum/config"] == checksum(data)
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])
    # ...and the checksum does depend on the data.
    assert checksum({**data, "config.yaml": data["config.yaml"] + "\n"}) != checksum(data)


def test_configmap_carries_the_repository_config_and_tasks() -> None:
    script = import_script(K8S / "update_checksum.py")
    source = cast(Callable[[], dict[str, str]], script.source_data)()
    assert k8s("configmap.yaml")["data"] == source, "run deploy/k8s/update_checksum.py"
    assert source["config.yaml"] == PROXY_CONFIG.read_text(encoding="utf-8")


def test_update_checksum_check_mode_passes() -> None:
    result = subprocess.run(
        [sys.executable, str(K8S / "update_checksum.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_configmap_key_is_mounted() -> None:
    """config.yaml lands at /etc/gradeproxy/config.yaml, each task file under tasks/."""
    (volume,) = [v for v in pod_spec()["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == k8s("configmap.yaml")["metadata"]["name"]
    items = {i["key"]: i["path"] for i in volume["configMap"]["items"]}
    keys = set(k8s("configmap.yaml")["data"])
    assert set(items) == keys, "add the new key to deployment.yaml's config volume items"
    assert items.pop("config.yaml") == "config.yaml"
    assert all(path.startswith("tasks/") and path.endswith(".jsonl") for path in items.values())
    (mount,) = [m for m in container()["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == "/etc/gradeproxy"
    assert mount["readOnly"] is True
    assert configmap_config()["tasks"]["path"] == "/etc/gradeproxy/tasks"


# --- compose ----------------------------------------------------------------------------------


def test_compose_matches_the_compose_spec() -> None:
    tool = require_tool("check-jsonschema")
    result = run_tool(tool, "--builtin-schema", "vendor.compose-spec", str(COMPOSE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_check_rejects_a_typo(tmp_path: Path) -> None:
    tool = require_tool("check-jsonschema")
    broken = load(COMPOSE)
    broken["services"]["proxy"]["stop_grace_perod"] = broken["services"]["proxy"].pop(
        "stop_grace_period"
    )
    (tmp_path / "compose.yaml").write_text(yaml.safe_dump(broken))
    path = str(tmp_path / "compose.yaml")
    assert run_tool(tool, "--builtin-schema", "vendor.compose-spec", path).returncode != 0


COMPOSE_SERVICES = sorted(load(COMPOSE)["services"])


@pytest.mark.parametrize("service", COMPOSE_SERVICES)
def test_compose_service_has_a_healthcheck(service: str) -> None:
    assert load(COMPOSE)["services"][service]["healthcheck"]["test"]


@pytest.mark.parametrize("service", COMPOSE_SERVICES)
def test_compose_bind_mounts_are_read_only_and_exist(service: str) -> None:
    for volume in load(COMPOSE)["services"][service].get("volumes", []):
        source, _target, *options = volume.split(":")
        if source.startswith("."):
            assert options == ["ro"], volume
            assert (COMPOSE.parent / source).exists(), volume


def test_compose_proxy_uses_the_deploy_config() -> None:
    proxy = load(COMPOSE)["services"]["proxy"]
    assert "./config/proxy.yaml:/etc/gradeproxy/config.yaml:ro" in proxy["volumes"]
    assert proxy["command"] == ["serve", "--config", "/etc/gradeproxy/config.yaml"]
    upstream = load(PROXY_CONFIG)["upstream"]["url"]
    assert upstream == "http://demo-backend:8000/v1"  # the base URL ends in /v1
    assert "demo-backend" in load(COMPOSE)["services"]


# --- Dockerfile and scripts -------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def _last(keyword: str) -> str:
    return [arg for kw, arg in dockerfile_instructions() if kw == keyword][-1]


@pytest.mark.parametrize(
    ("keyword", "check"),
    [
        pytest.param("FROM", lambda arg: arg == "python:3.11-slim", id="final-stage-slim"),
        pytest.param("USER", lambda arg: arg.split(":")[0] not in {"0", "root"}, id="non-root"),
        pytest.param("ENTRYPOINT", lambda arg: arg == '["gradeproxy"]', id="exec-entrypoint"),
        pytest.param("CMD", lambda arg: arg.startswith('["demo"'), id="cmd-demo-by-default"),
        pytest.param("HEALTHCHECK", lambda arg: "urllib" in arg and "/livez" in arg,
                     id="healthcheck-livez-urllib"),
    ],
)  # fmt: skip
def test_dockerfile_instruction(keyword: str, check: Callable[[str], bool]) -> None:
    assert check(_last(keyword)), _last(keyword)


def test_the_image_installs_the_built_wheel_with_the_demo_and_uvloop_extras() -> None:
    """The image installs what a user installs: the wheel (whose package data holds the sample
    suite), with the [demo] extra the default CMD needs, [uvloop], which the configured
    ``server.event_loop: auto`` then serves on, and [postgres] for ``results.sink``."""
    runs = [arg for keyword, arg in dockerfile_instructions() if keyword == "RUN"]
    (build,) = [run for run in runs if "pip wheel" in run]
    assert "--wheel-dir /dist" in build
    assert '"${wheel}[demo,uvloop,postgres]"' in build
    # The image's config leaves the loop to `auto` (the default), so the extra is what runs.
    assert (load(PROXY_CONFIG).get("server") or {}).get("event_loop", "auto") == "auto"


def test_deployments_never_rely_on_the_default_cmd() -> None:
    """The default CMD is the demo: compose's proxy and the Deployment say `serve` themselves."""
    (container,) = [c for c in pod_spec()["containers"] if c["name"] == "gradeproxy"]
    assert container["args"][0] == "serve"
    assert load(COMPOSE)["services"]["proxy"]["command"][0] == "serve"


def test_dockerfile_user_is_the_pod_user() -> None:
    uid = int(_last("USER").split(":")[0])
    assert pod_spec()["securityContext"]["runAsUser"] == uid


def test_dockerignore_lets_every_copy_source_through() -> None:
    rules = [line for line in DOCKERIGNORE.read_text().splitlines() if line and line[0] != "#"]
    assert rules[0] == "*", "an allow-list starts by excluding everything"
    allowed = [line[1:].rstrip("/") for line in rules if line.startswith("!")]
    for keyword, arg in dockerfile_instructions():
        if keyword == "COPY" and "--from" not in arg:
            for source in arg.split()[:-1]:
                assert source.rstrip("/") in allowed, source


def test_hadolint() -> None:
    tool = require_tool("hadolint")
    result = run_tool(tool, str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_rejects_a_root_image(tmp_path: Path) -> None:
    tool = require_tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\nCMD gradeproxy serve\n")
    assert run_tool(tool, str(bad)).returncode != 0


@pytest.mark.parametrize("script", [pytest.param(p, id=p.name) for p in SCRIPTS])
def test_shellcheck(script: Path) -> None:
    tool = require_tool("shellcheck")
    result = run_tool(tool, "--external-sources", str(script))
    assert result.returncode == 0, result.stdout + result.stderr


def test_shellcheck_rejects_an_unquoted_variable(tmp_path: Path) -> None:
    tool = require_tool("shellcheck")
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/usr/bin/env bash\nrm -rf $1/*\n")
    assert run_tool(tool, str(bad)).returncode != 0


YAMLLINT_CONFIG = (
    "{extends: default, rules: {document-start: disable,"
    " line-length: {max: 100, ignore: [deploy/k8s/configmap.yaml]}}}"
)


def test_yamllint_deploy() -> None:
    """Style of every YAML file under deploy/ (the generated ConfigMap holds long JSONL lines)."""
    tool = require_tool("yamllint")
    result = run_tool(tool, "--strict", "-d", YAMLLINT_CONFIG, "deploy")
    assert result.returncode == 0, result.stdout + result.stderr
