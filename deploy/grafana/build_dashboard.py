"""Generate deploy/grafana/dashboards/gradeproxy.json, the gradeproxy overview dashboard.

Plain dicts, written with orjson in insertion order, so the output is byte-for-byte
deterministic: tests/deploy/test_dashboard.py regenerates it and compares bytes. Edit this
script, never the JSON.

    python deploy/grafana/build_dashboard.py           # rewrite the JSON
    python deploy/grafana/build_dashboard.py --check   # exit 1 when the JSON is stale
    python deploy/grafana/build_dashboard.py --stdout  # print it instead

Conventions (checked by the tests, after grafana/dashboard-linter's rules):
- one `datasource` template variable; every panel and target uses
  {"type": "prometheus", "uid": "${datasource}"} (never exported `__inputs`/`${DS_...}`);
- every selector carries the `job` and `instance` matchers, grade selectors `task`/`model` too;
- every rate()/increase() uses `$__rate_interval`; panels built on the 5m recording rules of
  deploy/prometheus/rules/recording.yml say so in their description;
- every panel has a title, a description and a unit;
- every rate and ratio sums over `instance`: an instance is one process, a replica or one
  worker of `gradeproxy serve --workers N` (each worker is its own scrape target, on
  admin.port + i), so the panels show the whole fleet; only per-process state (in flight,
  queue depth, the loaded task set) is drawn per instance.

It must never need anything beyond the standard library and orjson (a project dependency).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

Json = dict[str, Any]

UID = "gradeproxy-overview"
TITLE = "gradeproxy overview"
OUTPUT = Path(__file__).resolve().parent / "dashboards" / "gradeproxy.json"

DS: Json = {"type": "prometheus", "uid": "${datasource}"}

# Matchers every selector carries; grade-like metrics add task and model.
BASE = 'job=~"$job", instance=~"$instance"'
TASK = f'{BASE}, task=~"$task"'
GRADE = f'{TASK}, model=~"$model"'
# Primary variant only; also matches series from before the `variant` label exists.
PRIMARY = f'{GRADE}, variant!="shadow"'

RULES_NOTE = (
    " Computed from the 5m recording rules in deploy/prometheus/rules/recording.yml,"
    " so it is empty on a Prometheus that does not load them."
)
# Per-check grading shipped: the note says where the series come from, not that they are empty.
CHECKS_NOTE = (
    " One series per result column of the tasks' `checks` (tasks without checks: tool_call)."
)
SHADOW_NOTE = " Empty unless an upstream or route has a `shadow` in the proxy config."

FULL, HALF, THIRD, QUARTER = 24, 12, 8, 6
HEIGHT = 8


def target(expr: str, legend: str, ref: str = "A", *, instant: bool = False) -> Json:
    t: Json = {
        "datasource": DS,
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": not instant,
        "instant": instant,
        "refId": ref,
    }
    if instant:
        t["format"] = "table"
    return t


def quantiles(rule: str, matchers: str) -> list[Json]:
    """p50/p90/p99 from a recording rule holding summed bucket rates."""
    return [
        target(
            f"histogram_quantile({q}, sum by (le) ({rule}{{{matchers}}}))",
            f"p{round(q * 100)}",
            ref,
        )
        for q, ref in ((0.5, "A"), (0.9, "B"), (0.99, "C"))
    ]


def timeseries(
    title: str,
    description: str,
    unit: str,
    targets: list[Json],
    *,
    width: int = HALF,
    stacked: bool = False,
    max_value: float | None = None,
) -> Json:
    defaults: Json = {
        "unit": unit,
        "min": 0,
        "custom": {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if stacked else 0,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if stacked else "none", "group": "A"},
        },
    }
    if max_value is not None:
        defaults["max"] = max_value
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"w": width, "h": HEIGHT},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {
                "showLegend": True,
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["lastNotNull", "max"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def stat(title: str, description: str, unit: str, targets: list[Json], width: int) -> Json:
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"w": width, "h": HEIGHT},
        "fieldConfig": {"defaults": {"unit": unit, "decimals": 0}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
            "textMode": "value_and_name",
        },
        "targets": targets,
    }


def table(title: str, description: str, targets: list[Json], width: int) -> Json:
    return {
        "type": "table",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"w": width, "h": HEIGHT},
        "fieldConfig": {"defaults": {"unit": "none"}, "overrides": []},
        "options": {"showHeader": True, "cellHeight": "sm"},
        "transformations": [
            {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}
        ],
        "targets": targets,
    }


def row(title: str, description: str, panels: list[Json], *, collapsed: bool = False) -> Json:
    return {
        "type": "row",
        "title": title,
        "description": description,
        "collapsed": collapsed,
        "panels": panels,
    }


def traffic() -> Json:
    return row(
        "Traffic",
        "Requests through the proxy and how they ended.",
        [
            timeseries(
                "Requests per second by route and code",
                "Responses sent by the proxy per second, by route (chat_completions, responses"
                " or other)"
                " and HTTP status code, counted when each response ends.",
                "reqps",
                [
                    target(
                        "sum by (route, code) (rate(gradeproxy_requests_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{route}} {{code}}",
                    )
                ],
                width=THIRD,
                stacked=True,
            ),
            timeseries(
                "Error rate (5xx share of responses)",
                "Share of responses with a 5xx status, by route. Upstream failures surface"
                " here as 502/504; see the upstream errors panel for their kind.",
                "percentunit",
                [
                    target(
                        "sum by (route) (rate(gradeproxy_requests_total"
                        f'{{{BASE}, code=~"5.."}}[$__rate_interval]))'
                        " / sum by (route) (rate(gradeproxy_requests_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{route}}",
                    )
                ],
                width=THIRD,
                max_value=1,
            ),
            timeseries(
                "Upstream errors per second by kind",
                "Requests that failed between proxy and upstream, by kind: connect (no"
                " connection), timeout (connect or idle timeout), protocol (broken response).",
                "reqps",
                [
                    target(
                        "sum by (kind) (rate(gradeproxy_upstream_errors_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{kind}}",
                    )
                ],
                width=THIRD,
                stacked=True,
            ),
            timeseries(
                "In-flight requests",
                "Requests currently being proxied, per instance (streams included). An instance is"
                " one process: a replica, or one worker of `serve --workers N` (its admin port).",
                "short",
                [
                    target(
                        f"sum by (instance) (gradeproxy_in_flight_requests{{{BASE}}})",
                        "{{instance}}",
                    )
                ],
                width=FULL,
            ),
        ],
    )


def latency() -> Json:
    chat = f'{BASE}, route=~"chat_completions|responses"'
    return row(
        "Latency",
        "Latency quantiles of the graded routes (chat completions and the Responses API): end"
        " to end, upstream time to first byte, and the time the proxy itself adds.",
        [
            timeseries(
                "Request duration quantiles (graded routes)",
                "p50/p90/p99 of the time from request received to response fully sent,"
                " streams included." + RULES_NOTE,
                "s",
                quantiles("gradeproxy:request_duration_seconds_bucket:rate5m", chat),
            ),
            timeseries(
                "Upstream time to first byte quantiles (graded routes)",
                "p50/p90/p99 of the time from forwarding the request to the first response"
                " byte from the upstream: the model's queueing and prefill time." + RULES_NOTE,
                "s",
                quantiles("gradeproxy:upstream_ttfb_seconds_bucket:rate5m", chat),
            ),
            timeseries(
                "Proxy overhead quantiles (graded routes)",
                "p50/p90/p99 of the latency the proxy adds on top of the upstream (request"
                " handling and relay, not grading, which runs off the hot path)." + RULES_NOTE,
                "s",
                quantiles("gradeproxy:overhead_seconds_bucket:rate5m", chat),
            ),
            timeseries(
                "Grade latency quantiles",
                "p50/p90/p99 of the time from a response's end to its grade row being"
                " recorded: queue wait plus grading. Growth means the graders fall behind."
                + RULES_NOTE,
                "s",
                quantiles("gradeproxy:grade_latency_seconds_bucket:rate5m", BASE),
            ),
        ],
    )


def quality() -> Json:
    return row(
        "Grading quality",
        "How well the models' tool calls match the tasks (primary variant).",
        [
            timeseries(
                "Pass rate by task and model",
                "Share of graded answers that matched the task's expected call, per task and"
                " model (pass / (pass + fail + stale))." + RULES_NOTE,
                "percentunit",
                [
                    target(
                        "sum by (task, model) (gradeproxy:grades:rate5m"
                        f'{{{GRADE}, result="pass"}})'
                        " / sum by (task, model) (gradeproxy:grades:rate5m"
                        f"{{{GRADE}}})",
                        "{{task}} / {{model}}",
                    )
                ],
                max_value=1,
            ),
            timeseries(
                "Grades per second by result",
                "Graded answers per second by result: pass, fail, or stale (matched the"
                " task's pre-migration call).",
                "cps",
                [
                    target(
                        "sum by (result) (rate(gradeproxy_grades_total"
                        f"{{{PRIMARY}}}[$__rate_interval]))",
                        "{{result}}",
                    )
                ],
                stacked=True,
            ),
            timeseries(
                "Stale-schema rate by task",
                "Share of graded answers that used the task's stale (pre-migration) tool"
                " schema, per task. Alert GradeproxyStaleSchemaRateHigh fires above 10%."
                + RULES_NOTE,
                "percentunit",
                [
                    target(
                        f"sum by (task) (gradeproxy:stale_schema:rate5m{{{GRADE}}})"
                        f" / sum by (task) (gradeproxy:grades:rate5m{{{GRADE}}})",
                        "{{task}}",
                    )
                ],
                max_value=1,
            ),
            timeseries(
                "Stale-schema rate by mutation kind",
                "Share of graded answers that used a stale tool schema, by the kind of"
                " schema mutation of their task (joined through gradeproxy_task_info)."
                + RULES_NOTE,
                "percentunit",
                [
                    target(
                        "sum by (mutation_kind)"
                        f" (gradeproxy:stale_schema_by_mutation_kind:rate5m{{{GRADE}}})"
                        " / sum by (mutation_kind)"
                        f" (gradeproxy:grades_by_mutation_kind:rate5m{{{GRADE}}})",
                        "{{mutation_kind}}",
                    )
                ],
                max_value=1,
            ),
        ],
    )


def pipeline() -> Json:
    return row(
        "Grading pipeline",
        "Whether responses get graded at all: skips, infrastructure errors, queue, task set.",
        [
            timeseries(
                "Grading skipped per second by reason",
                "Responses not graded, by reason: no_task_header, unknown_task,"
                " upstream_error, client_disconnected, queue_full (alerted), sampled_out,"
                " empty_response, unsupported_route.",
                "cps",
                [
                    target(
                        "sum by (reason) (rate(gradeproxy_grading_skipped_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{reason}}",
                    )
                ],
                width=THIRD,
                stacked=True,
            ),
            timeseries(
                "Grading infrastructure errors per second by kind",
                "Failures of the grading machinery itself (not failed answers), by kind."
                " Any is alerted by GradeproxyGradingErrors.",
                "cps",
                [
                    target(
                        "sum by (kind) (rate(gradeproxy_grading_errors_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{kind}}",
                    )
                ],
                width=THIRD,
                stacked=True,
            ),
            timeseries(
                "Grade queue depth",
                "Responses waiting to be graded, per instance (each worker has its own queue). Near"
                " grading.queue_size the queue starts dropping (reason queue_full).",
                "short",
                [
                    target(
                        f"max by (instance) (gradeproxy_grade_queue_depth{{{BASE}}})",
                        "{{instance}}",
                    )
                ],
                width=THIRD,
            ),
            stat(
                "Tasks loaded",
                "Number of tasks in the loaded task set, per instance. Replicas (and workers)"
                " should agree.",
                "short",
                [
                    target(
                        f"max by (instance) (gradeproxy_tasks_loaded{{{BASE}}})",
                        "{{instance}}",
                    )
                ],
                width=HALF,
            ),
            table(
                "Build and task-set versions",
                "Version and task-set digest per instance. More than one digest means the"
                " replicas grade against different task sets (e.g. mid-rollout).",
                [
                    target(
                        "max by (instance, version, tasks_digest)"
                        f" (gradeproxy_build_info{{{BASE}}})",
                        "",
                        instant=True,
                    )
                ],
                width=HALF,
            ),
        ],
    )


def checks() -> Json:
    return row(
        "Checks",
        "Per-check grading results." + CHECKS_NOTE,
        [
            timeseries(
                "Check results per second by check",
                "Check outcomes per second by task, check and result." + CHECKS_NOTE,
                "cps",
                [
                    target(
                        "sum by (task, check, result) (rate(gradeproxy_check_results_total"
                        f"{{{TASK}}}[$__rate_interval]))",
                        "{{task}} {{check}} {{result}}",
                    )
                ],
                width=THIRD,
            ),
            timeseries(
                "Check pass rate by check",
                "Share of check evaluations with result pass, by task and check." + CHECKS_NOTE,
                "percentunit",
                [
                    target(
                        "sum by (task, check) (rate(gradeproxy_check_results_total"
                        f'{{{TASK}, result="pass"}}[$__rate_interval]))'
                        " / sum by (task, check) (rate(gradeproxy_check_results_total"
                        f"{{{TASK}}}[$__rate_interval]))",
                        "{{task}} {{check}}",
                    )
                ],
                width=THIRD,
                max_value=1,
            ),
            table(
                "Grader digests by check",
                "The digest of each check's grader, per task: a change marks a grader"
                " change, so pass rates before and after are not comparable." + CHECKS_NOTE,
                [
                    target(
                        f"max by (task, check, digest) (gradeproxy_grader_info{{{TASK}}})",
                        "",
                        instant=True,
                    )
                ],
                width=THIRD,
            ),
        ],
        collapsed=True,
    )


def enforcement() -> Json:
    return row(
        "Enforcement",
        "Tool calls enforce mode acted on before the client got them (docs/enforce.md).",
        [
            timeseries(
                "Enforced tool calls per second by task, check and action",
                "Calls blocked or stripped, and (action observe) what an observe policy would"
                " have enforced, by task (route:<policy> for a route policy) and check. Watch"
                " observe before switching a policy to block.",
                "cps",
                [
                    target(
                        "sum by (task, check, action) (rate(gradeproxy_enforced_total"
                        f"{{{TASK}}}[$__rate_interval]))",
                        "{{task}} {{check}} {{action}}",
                    )
                ],
                width=FULL,
            ),
        ],
        collapsed=True,
    )


def episodes() -> Json:
    note = (
        " Agent episodes graded as a whole against their task's grader record"
        " (docs/episodes.md); empty unless tasks carry an `episode` record."
    )
    return row(
        "Episodes",
        "One result per ended agent episode, one per configured column." + note,
        [
            timeseries(
                "Episodes per second by result",
                "Graded episodes per second by task and result (pass, fail, error)." + note,
                "cps",
                [
                    target(
                        "sum by (task, result) (rate(gradeproxy_episodes_total"
                        f"{{{TASK}}}[$__rate_interval]))",
                        "{{task}} {{result}}",
                    )
                ],
                width=THIRD,
            ),
            timeseries(
                "Episode column pass rate",
                "Share of episodes passing each column (end_state_ok, authority_ok, ...),"
                " error columns left out of the denominator." + note + RULES_NOTE,
                "percentunit",
                [
                    target(
                        "sum by (task, column) (gradeproxy:episode_columns:rate5m"
                        f'{{{TASK}, result="pass"}})'
                        " / sum by (task, column) (gradeproxy:episode_columns:rate5m"
                        f'{{{TASK}, result!="error"}})',
                        "{{task}} {{column}}",
                    )
                ],
                width=THIRD,
                max_value=1,
            ),
            timeseries(
                "Episodes not graded",
                "Episodes whose history the request did not carry whole (episode_incomplete)"
                " or that went over a limit, by limit (turns, calls, bytes)." + note,
                "cps",
                [
                    target(
                        "sum by (reason) (rate(gradeproxy_grading_skipped_total"
                        f'{{{BASE}, reason=~"episode_incomplete|episode_limit"}}'
                        "[$__rate_interval]))",
                        "{{reason}}",
                    ),
                    target(
                        "sum by (limit) (rate(gradeproxy_episode_limits_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "limit {{limit}}",
                        "B",
                    ),
                ],
                width=THIRD,
            ),
        ],
        collapsed=True,
    )


def shadow() -> Json:
    both = f'{GRADE}, variant=~"primary|shadow"'
    return row(
        "Primary vs shadow",
        "The same live requests answered by the primary upstream (what clients get) and"
        " copied to a shadow upstream, both graded (docs/shadow.md)." + SHADOW_NOTE,
        [
            timeseries(
                "Pass rate: primary vs shadow by task",
                "Pass rate per task and variant over all graded answers of each variant. The"
                " primary side also counts requests that were not shadowed (sampling,"
                " concurrency limit); the paired panel beside compares like for like.",
                "percentunit",
                [
                    target(
                        "sum by (task, variant) (rate(gradeproxy_grades_total"
                        f'{{{both}, result="pass"}}[$__rate_interval]))'
                        " / sum by (task, variant) (rate(gradeproxy_grades_total"
                        f"{{{both}}}[$__rate_interval]))",
                        "{{task}} {{variant}}",
                    )
                ],
                width=THIRD,
                max_value=1,
            ),
            timeseries(
                "Paired pass rate: primary vs shadow by task",
                "Pass rate per task over complete pairs only (both legs of the same request"
                " graded): the like-for-like comparison.",
                "percentunit",
                [
                    target(
                        "sum by (task) (rate(gradeproxy_shadow_pairs_total"
                        f'{{{TASK}, primary="pass"}}[$__rate_interval]))'
                        " / sum by (task) (rate(gradeproxy_shadow_pairs_total"
                        f"{{{TASK}}}[$__rate_interval]))",
                        "{{task}} primary",
                    ),
                    target(
                        "sum by (task) (rate(gradeproxy_shadow_pairs_total"
                        f'{{{TASK}, shadow="pass"}}[$__rate_interval]))'
                        " / sum by (task) (rate(gradeproxy_shadow_pairs_total"
                        f"{{{TASK}}}[$__rate_interval]))",
                        "{{task}} shadow",
                        "B",
                    ),
                ],
                width=THIRD,
                max_value=1,
            ),
            timeseries(
                "Shadow wins and losses per second by task",
                "Pairs where only the shadow passed (wins) and where only the primary passed"
                " (losses). Only these discordant pairs separate the two upstreams; test a"
                " difference with `gradeproxy compare` (exact McNemar).",
                "cps",
                [
                    target(
                        "sum by (task) (rate(gradeproxy_shadow_pairs_total"
                        f'{{{TASK}, primary!="pass", shadow="pass"}}[$__rate_interval]))',
                        "{{task}} wins",
                    ),
                    target(
                        "sum by (task) (rate(gradeproxy_shadow_pairs_total"
                        f'{{{TASK}, primary="pass", shadow!="pass"}}[$__rate_interval]))',
                        "{{task}} losses",
                        "B",
                    ),
                ],
                width=THIRD,
            ),
            timeseries(
                "Primary/shadow verdict pairs per second",
                "Pairs of (primary result, shadow result) per second for the same request and"
                " choice: the off-diagonal pairs are where the two upstreams disagree.",
                "cps",
                [
                    target(
                        "sum by (primary, shadow) (rate(gradeproxy_shadow_pairs_total"
                        f"{{{TASK}}}[$__rate_interval]))",
                        "{{primary}} → {{shadow}}",
                    )
                ],
                width=THIRD,
                stacked=True,
            ),
            timeseries(
                "Stale-schema rate: primary vs shadow by task",
                "Share of graded answers that used the task's pre-migration schema, per task"
                " and variant.",
                "percentunit",
                [
                    target(
                        "sum by (task, variant) (rate(gradeproxy_stale_schema_total"
                        f"{{{both}}}[$__rate_interval]))"
                        " / sum by (task, variant) (rate(gradeproxy_grades_total"
                        f"{{{both}}}[$__rate_interval]))",
                        "{{task}} {{variant}}",
                    )
                ],
                width=THIRD,
                max_value=1,
            ),
            timeseries(
                "Shadow requests per second by result",
                "Graded requests eligible for a shadow copy, by what became of the copy: ok,"
                " error, timeout, skipped_concurrency (limit reached, never queued),"
                " sampled_out. Unpaired pairs (a leg not graded, expired, overflow) as well.",
                "reqps",
                [
                    target(
                        "sum by (result) (rate(gradeproxy_shadow_requests_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{result}}",
                    ),
                    target(
                        "sum by (reason) (rate(gradeproxy_shadow_unpaired_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "unpaired {{reason}}",
                        "B",
                    ),
                ],
                width=THIRD,
                stacked=True,
            ),
            timeseries(
                "Upstream duration by variant (p50, p95)",
                "Shadowed requests only: time from the upstream request sent to its last"
                " byte, per leg, for legs that succeeded. Both legs cover the same requests.",
                "s",
                [
                    target(
                        f"histogram_quantile({q}, sum by (variant, le)"
                        " (rate(gradeproxy_variant_request_duration_seconds_bucket"
                        f"{{{BASE}}}[$__rate_interval])))",
                        f"{{{{variant}}}} p{round(q * 100)}",
                        ref,
                    )
                    for q, ref in ((0.5, "A"), (0.95, "B"))
                ],
                width=HALF,
            ),
            timeseries(
                "Upstream time to first byte by variant (p50, p95)",
                "Shadowed requests only: time from the upstream request sent to its response"
                " headers, per leg, for legs that succeeded.",
                "s",
                [
                    target(
                        f"histogram_quantile({q}, sum by (variant, le)"
                        " (rate(gradeproxy_variant_ttfb_seconds_bucket"
                        f"{{{BASE}}}[$__rate_interval])))",
                        f"{{{{variant}}}} p{round(q * 100)}",
                        ref,
                    )
                    for q, ref in ((0.5, "A"), (0.95, "B"))
                ],
                width=HALF,
            ),
        ],
        collapsed=True,
    )


def cost() -> Json:
    """Tokens and cost by variant beside the pass rate (docs/operations.md, "Tokens and cost")."""
    both = f'{GRADE}, variant=~"primary|shadow"'
    return row(
        "Tokens and cost",
        "Reported tokens and, with a price table (pricing.path), their cost, by variant, beside"
        " the pass rate: cached_input is part of input and reasoning part of output, never"
        " added to them.",
        [
            timeseries(
                "Pass rate by variant",
                "Share of graded answers that passed, per variant (shadow: empty without one).",
                "percentunit",
                [
                    target(
                        "sum by (variant) (rate(gradeproxy_grades_total"
                        f'{{{both}, result="pass"}}[$__rate_interval]))'
                        " / sum by (variant) (rate(gradeproxy_grades_total"
                        f"{{{both}}}[$__rate_interval]))",
                        "{{variant}}",
                    )
                ],
                width=QUARTER,
                max_value=1,
            ),
            timeseries(
                "Tokens per second by variant and type",
                "Input and output tokens the backends reported for graded responses (the"
                " cached and reasoning shares are inside them).",
                "short",
                [
                    target(
                        "sum by (variant, type) (rate(gradeproxy_tokens_total"
                        f"{{{both}}}[$__rate_interval]))",
                        "{{variant}} {{type}}",
                    )
                ],
                width=QUARTER,
            ),
            timeseries(
                "Cost per passing answer by variant",
                "Cost of graded responses over the answers that passed, per variant, in the"
                " price table's currency; empty without pricing.path.",
                "short",
                [
                    target(
                        "sum by (variant) (rate(gradeproxy_cost_total"
                        f"{{{both}}}[$__rate_interval]))"
                        " / sum by (variant) (rate(gradeproxy_grades_total"
                        f'{{{both}, result="pass"}}[$__rate_interval]))',
                        "{{variant}}",
                    )
                ],
                width=QUARTER,
            ),
            timeseries(
                "Responses without a price per second",
                "Graded responses with usage whose model the price table has no price for:"
                " their cost is null, never guessed. Add the model to the table.",
                "cps",
                [
                    target(
                        "sum by (model) (rate(gradeproxy_cost_unknown_model_total"
                        f"{{{both}}}[$__rate_interval]))",
                        "{{model}}",
                    )
                ],
                width=QUARTER,
            ),
        ],
        collapsed=True,
    )


def keys() -> Json:
    """Traffic, tokens and refusals by named inbound key (docs/operations.md, "Named keys")."""
    return row(
        "Inbound keys",
        "Requests and reported tokens by named inbound key (auth.keys: `none` is a request"
        " without one, `other` past metrics.max_keys), and the requests refused for a key's"
        " per-process rpm or tpm limit.",
        [
            timeseries(
                "Requests per second by key",
                "Responses sent per second, by the named inbound key the request came with.",
                "reqps",
                [
                    target(
                        "sum by (key) (rate(gradeproxy_requests_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{key}}",
                    )
                ],
                width=THIRD,
                stacked=True,
            ),
            timeseries(
                "Tokens per second by key",
                "Input and output tokens the backends reported for graded responses, by key"
                " (both legs of a shadowed request count for its key).",
                "short",
                [
                    target(
                        "sum by (key, type) (rate(gradeproxy_tokens_total"
                        f'{{{GRADE}, type=~"input|output"}}[$__rate_interval]))',
                        "{{key}} {{type}}",
                    )
                ],
                width=THIRD,
            ),
            timeseries(
                "Requests refused per second by key and limit",
                "429s for a key over its limit of requests (rpm) or tokens (tpm) per minute;"
                " the limits are per process, so the fleet admits up to N times each.",
                "reqps",
                [
                    target(
                        "sum by (key, limit) (rate(gradeproxy_rate_limited_total"
                        f"{{{BASE}}}[$__rate_interval]))",
                        "{{key}} {{limit}}",
                    )
                ],
                width=THIRD,
            ),
        ],
        collapsed=True,
    )


def layout(rows: list[Json]) -> list[Json]:
    """Assign ids and grid positions; nest the panels of collapsed rows, as Grafana does."""
    panels: list[Json] = []
    next_id = 1
    y = 0
    for r in rows:
        children: list[Json] = r.pop("panels")
        r["id"] = next_id
        next_id += 1
        r["gridPos"] = {"h": 1, "w": FULL, "x": 0, "y": y}
        y += 1
        x = 0
        row_top = y
        for p in children:
            p["id"] = next_id
            next_id += 1
            width = p["gridPos"]["w"]
            if x + width > FULL:
                x = 0
                y += HEIGHT
            p["gridPos"] = {"h": HEIGHT, "w": width, "x": x, "y": y}
            x += width
        y += HEIGHT if children else 0
        if r["collapsed"]:
            r["panels"] = children
            y = row_top  # a collapsed row takes one grid line
            panels.append(r)
        else:
            r["panels"] = []
            panels.append(r)
            panels.extend(children)
    return panels


def query_variable(name: str, label: str, query: str) -> Json:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": f"gradeproxy-{name}"},
        "refresh": 2,
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "regex": "",
        "hide": 0,
    }


def templating() -> Json:
    return {
        "list": [
            {
                "name": "datasource",
                "label": "Data source",
                "type": "datasource",
                "query": "prometheus",
                "current": {
                    "selected": False,
                    "text": "Prometheus",
                    "value": "gradeproxy-prometheus",
                },
                "options": [],
                "refresh": 1,
                "regex": "",
                "hide": 0,
                "includeAll": False,
                "multi": False,
            },
            query_variable("job", "Job", "label_values(gradeproxy_build_info, job)"),
            query_variable(
                "instance",
                "Instance",
                'label_values(gradeproxy_build_info{job=~"$job"}, instance)',
            ),
            query_variable(
                "task",
                "Task",
                f"label_values(gradeproxy_task_info{{{BASE}}}, task)",
            ),
            query_variable(
                "model",
                "Model",
                f"label_values(gradeproxy_grades_total{{{BASE}}}, model)",
            ),
        ]
    }


def dashboard() -> Json:
    return {
        "uid": UID,
        "title": TITLE,
        "description": "Traffic, latency and live tool-call grading of the gradeproxy"
        " OpenAI-compatible proxy. Generated by deploy/grafana/build_dashboard.py.",
        "tags": ["gradeproxy"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "templating": templating(),
        "links": [],
        "panels": layout(
            [
                traffic(),
                latency(),
                quality(),
                pipeline(),
                checks(),
                enforcement(),
                episodes(),
                shadow(),
                cost(),
                keys(),
            ]
        ),
    }


def render() -> bytes:
    return orjson.dumps(dashboard(), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if the JSON is stale")
    mode.add_argument("--stdout", action="store_true", help="print instead of writing")
    args = parser.parse_args(argv)
    data = render()
    if args.stdout:
        sys.stdout.buffer.write(data)
        return 0
    if args.check:
        if not OUTPUT.is_file() or OUTPUT.read_bytes() != data:
            print(f"{OUTPUT} is stale: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_bytes(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
