"""The metric contract (docs/architecture.md): names, labels, buckets, and bounded cardinality.

Dashboards and alerts are built on these names, so they are defined once, here. Every label
value is bounded: ``task`` only takes ids of the loaded task set, ``model`` goes through
:class:`ModelLabels` (an allow-list, or the first N models seen, then ``other``), ``key`` (a
named inbound key's id) through the same guard (:class:`KeyLabels`), and reasons come from
closed sets.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, get_args

import prometheus_client
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from grader.json import printable
from grader.tasks import TaskSet
from grader.version import __version__
from proxy.errors import UpstreamErrorKind
from proxy.pipeline.admit import Route, SkipReason
from proxy.pipeline.record.request_series import RequestSeries

# `_created` series double the exposition and no panel uses them.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
del GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR  # we build our own registry

# Label sets the stages define as Literals, exported whole (proxy/pipeline/admit.py, errors.py).
ROUTES: tuple[str, ...] = get_args(Route)
SKIP_REASONS: tuple[str, ...] = get_args(SkipReason)
RESULTS = ("pass", "fail", "stale")
GRADING_ERROR_KINDS = (
    "capture",
    "grader",
    "check",
    "results_write",
    "worker",
    "grader_process",
    "grader_deadline",
)
CHECK_RESULTS = ("pass", "fail", "error")
ENFORCE_ACTIONS = ("block", "strip", "observe")
ENFORCE_FAILURE_KINDS = ("budget", "grader_error", "unreadable")
ENFORCE_FAILURE_OUTCOMES = ("open", "closed")
VARIANTS = ("primary", "shadow")
SHADOW_RESULTS = ("ok", "error", "timeout", "skipped_concurrency", "sampled_out")
UNPAIRED_REASONS = ("ungraded", "expired", "overflow")
# Sampled untagged responses that wrote no capture row (proxy/pipeline/record/captures.py).
CAPTURE_SKIP_REASONS = ("unreadable", "backlog_full", "write_failed", "error")
UPSTREAM_ERROR_KINDS: tuple[str, ...] = get_args(UpstreamErrorKind)
CLIENT_TIMEOUT_PHASES = ("header", "body", "idle")
EPISODE_RESULTS = ("pass", "fail", "error")
EPISODE_LIMITS = ("turns", "calls", "bytes")
TRACE_SIGNALS = (
    "spans",
    "logs",
    "annotations",
)  # proxy/telemetry/export.py's Signal and DropReason
TRACE_DROP_REASONS = ("queue_full", "export_failed", "shutdown")
# The rows database sink (proxy/pipeline/record/sinks/): why a write failed, why rows were lost.
SINK_FAILURE_REASONS = ("unavailable", "timeout", "schema", "rejected")
ROWS_DROPPED_REASONS = ("disk_full", "spill_error")
OTHER_MODEL = "other"
UNKNOWN_MODEL = "unknown"
NO_KEY = "none"  # the `key` label of a request let in without a named key (or no auth at all)
RATE_LIMITS = ("rpm", "tpm")

# LLM requests last from milliseconds to minutes; client_python's defaults stop at 10 s.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
)
TTFB_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OVERHEAD_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1,
)  # fmt: skip
# Kinds of job tallies whose resolved counter increments are kept (ProxyMetrics.increments).
_INCREMENTS_MAX = 4096
# A job's tallies (proxy.pipeline.record.recording.Recording): column (name, result, rows),
# grade (model, result, rows); with the task, the variant and the error rows, one hashable key.
CheckTallies = tuple[tuple[str, str, int], ...]
GradeTallies = tuple[tuple[str | None, str, int], ...]
Tallies = tuple[str, str, CheckTallies, GradeTallies, int]
# A graded response's reported tokens: (model, input, output, cached_input, reasoning).
Usage = tuple[str | None, int, int, int, int]
TOKEN_TYPES = ("input", "output", "cached_input", "reasoning")
GRADE_LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30)


class ModelLabels:
    """Bounded ``model`` label values: an allow-list, or the first ``cap`` models seen."""

    def __init__(self, allow: Iterable[str] = (), cap: int = 20) -> None:
        self._allow = frozenset(allow)
        self._cap = cap
        self._seen: set[str] = set()

    def __call__(self, model: str | None) -> str:
        if not model:
            return UNKNOWN_MODEL
        model = printable(model)  # an upstream's lone surrogate must not break /metrics
        if self._allow:
            return model if model in self._allow else OTHER_MODEL
        if model in self._seen:
            return model
        if len(self._seen) < self._cap:
            self._seen.add(model)
            return model
        return OTHER_MODEL


class KeyLabels(ModelLabels):
    """Bounded ``key`` label values: the first ``cap`` key ids seen, then ``other``; a request
    without a named key is ``none`` (proxy/config/keys.py reserves both words)."""

    def __call__(self, model: str | None) -> str:
        return NO_KEY if model is None else super().__call__(model)


class ProxyMetrics:
    """Every metric the proxy exports, on a registry of its own (one per app)."""

    def __init__(self, models: ModelLabels | None = None, keys: KeyLabels | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_label = models or ModelLabels()
        self.key_label = keys or KeyLabels(cap=50)
        reg = self.registry
        ProcessCollector(registry=reg)
        PlatformCollector(registry=reg)
        GCCollector(registry=reg)
        # The request-side series, written once per request: plain numbers, no locks.
        self.request_series = RequestSeries(
            reg,
            ROUTES,
            duration=(
                "gradeproxy_request_duration_seconds",
                "Time from request received to the last response byte sent.",
                DURATION_BUCKETS,
            ),
            ttfb=(
                "gradeproxy_upstream_ttfb_seconds",
                "Time from the upstream request sent to its response headers received.",
                TTFB_BUCKETS,
            ),
            overhead=(
                "gradeproxy_overhead_seconds",
                "Time spent in the proxy itself for a request, upstream waiting excluded.",
                OVERHEAD_BUCKETS,
            ),
        )
        self.in_flight = Gauge(
            "gradeproxy_in_flight_requests", "Requests being served now.", registry=reg
        )
        self.upstream_errors = Counter(
            "gradeproxy_upstream_errors_total",
            "Upstream failures the proxy answered itself (connect, timeout, protocol).",
            ["kind"],
            registry=reg,
        )
        self.upstream_connection_waits = Counter(
            "gradeproxy_upstream_connection_waits_total",
            "Upstream requests that waited for a connection: their origin had"
            " upstream.max_connections_per_origin open (the fast client).",
            registry=reg,
        )
        self.grades = Counter(
            "gradeproxy_grades_total",
            "Graded answers by task, model, result (pass, fail, stale) and variant"
            " (primary, shadow).",
            ["task", "model", "result", "variant"],
            registry=reg,
        )
        self.grade_errors = Counter(
            "gradeproxy_grade_errors_total",
            "Result rows whose result is error (a check could not run: infrastructure, never a"
            " model failure), by task and variant; out of gradeproxy_grades_total by design.",
            ["task", "variant"],
            registry=reg,
        )
        self.stale = Counter(
            "gradeproxy_stale_schema_total",
            "Graded answers that used the task's pre-migration (stale) schema, by variant.",
            ["task", "model", "variant"],
            registry=reg,
        )
        self.shadow_requests = Counter(
            "gradeproxy_shadow_requests_total",
            "Graded requests eligible for a shadow copy, by what became of the copy: ok, error,"
            " timeout, skipped_concurrency, sampled_out.",
            ["result"],
            registry=reg,
        )
        self.shadow_pairs = Counter(
            "gradeproxy_shadow_pairs_total",
            "Answer pairs (same request, same choice) with both legs graded, by task and the"
            " result of each leg.",
            ["task", "primary", "shadow"],
            registry=reg,
        )
        self.shadow_unpaired = Counter(
            "gradeproxy_shadow_unpaired_total",
            "Shadowed requests whose pair never completed: a leg was not graded (ungraded), its"
            " second leg never came (expired), or the pending map was full (overflow).",
            ["reason"],
            registry=reg,
        )
        self.tokens = Counter(
            "gradeproxy_tokens_total",
            "Tokens of graded responses as the backend reported them, by type (input, output,"
            " cached_input: part of input, reasoning: part of output), task, variant, model,"
            " key (the named inbound key's id; none without one).",
            ["type", "task", "variant", "model", "key"],
            registry=reg,
        )
        self.cost = Counter(
            "gradeproxy_cost_total",
            "What graded responses cost by the price table (pricing.path), in its currency, by"
            " task, variant, model.",
            ["task", "variant", "model"],
            registry=reg,
        )
        self.cost_unknown = Counter(
            "gradeproxy_cost_unknown_model_total",
            "Graded responses with usage whose model the price table has no price for (their"
            " cost is null, never guessed), by task, variant, model.",
            ["task", "variant", "model"],
            registry=reg,
        )
        self.rate_limited = Counter(
            "gradeproxy_rate_limited_total",
            "Requests refused with a 429 because their key was over a per-process limit"
            " (auth.keys[].rpm, auth.keys[].tpm), by key and limit (rpm, tpm).",
            ["key", "limit"],
            registry=reg,
        )
        self.check_results = Counter(
            "gradeproxy_check_results_total",
            "Result columns of graded answers by task, check (column) and result (pass, fail, "
            "error: an infrastructure error, never a model failure), by variant.",
            ["task", "check", "result", "variant"],
            registry=reg,
        )
        self.grader_info = Gauge(
            "gradeproxy_grader_info",
            "1 for every check of every loaded task, with the digest of its definition.",
            ["task", "check", "digest"],
            registry=reg,
        )
        self.variant_duration = Histogram(
            "gradeproxy_variant_request_duration_seconds",
            "Shadowed requests only: time from the upstream request sent to its last byte"
            " received, per leg (primary, shadow), for legs that succeeded.",
            ["variant"],
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.variant_ttfb = Histogram(
            "gradeproxy_variant_ttfb_seconds",
            "Shadowed requests only: time from the upstream request sent to its response"
            " headers, per leg (primary, shadow), for legs that succeeded.",
            ["variant"],
            buckets=TTFB_BUCKETS,
            registry=reg,
        )
        self.skipped = Counter(
            "gradeproxy_grading_skipped_total",
            "Requests not graded (on a graded route, or naming a task elsewhere), by reason.",
            ["reason"],
            registry=reg,
        )
        self.enforced = Counter(
            "gradeproxy_enforced_total",
            "Tool calls an enforce policy acted on (docs/enforce.md), by task (or route:<policy>),"
            " check and action (block, strip; observe: what would have been enforced).",
            ["task", "check", "action"],
            registry=reg,
        )
        self.enforce_failures = Counter(
            "gradeproxy_enforce_failures_total",
            "Answers enforcement could not judge (budget, grader_error, unreadable), by whether"
            " they went through (open) or were withheld (closed); never a model failure.",
            ["kind", "outcome"],
            registry=reg,
        )
        self.grading_errors = Counter(
            "gradeproxy_grading_errors_total",
            "Grading infrastructure failures, never counted as model failures.",
            ["kind"],
            registry=reg,
        )
        self.worker_restarts = Counter(
            "gradeproxy_grade_worker_restarts_total",
            "Grade workers that ended and were restarted by the supervisor.",
            registry=reg,
        )
        self.worker_rows_lost = Counter(
            "gradeproxy_worker_rows_lost_total",
            "Jobs of answered requests this --workers slot's killed generations never settled "
            "(no row, no skip, no error counted): proxy/pipeline/ledger.py.",
            registry=reg,
        )
        self.process_restarts = Counter(
            "gradeproxy_grade_process_restarts_total",
            "Grading processes (grading.isolation: process) that ended and were restarted.",
            registry=reg,
        )
        self.grading_healthy = Gauge(
            "gradeproxy_grading_healthy",
            "1 while every grade worker (and the grading process) runs and the queue is not"
            " stuck, else 0.",
            registry=reg,
        )
        self.client_timeouts = Counter(
            "gradeproxy_client_timeouts_total",
            "Client connections cut for being too slow (header, body) or idle, by phase.",
            ["phase"],
            registry=reg,
        )
        self.queue_depth = Gauge(
            "gradeproxy_grade_queue_depth", "Responses waiting to be graded.", registry=reg
        )
        self.grade_latency = Histogram(
            "gradeproxy_grade_latency_seconds",
            "Time from a response's last byte to its result being recorded.",
            buckets=GRADE_LATENCY_BUCKETS,
            registry=reg,
        )
        self.tasks_loaded = Gauge(
            "gradeproxy_tasks_loaded", "Tasks in the loaded task set.", registry=reg
        )
        self.task_info = Gauge(
            "gradeproxy_task_info",
            "1 for every loaded task, with its mutation kind (join on task).",
            ["task", "mutation_kind"],
            registry=reg,
        )
        self.build_info = Gauge(
            "gradeproxy_build_info",
            "1, labelled with the version and the loaded task set's digest.",
            ["version", "tasks_digest"],
            registry=reg,
        )
        self.task_reloads = Counter(
            "gradeproxy_task_reloads_total",
            "Task set reload attempts by result (ok, error).",
            ["result"],
            registry=reg,
        )
        self.episodes = Counter(
            "gradeproxy_episodes_total",
            "Graded agent episodes by task and result (pass, fail, error).",
            ["task", "result"],
            registry=reg,
        )
        self.episode_columns = Counter(
            "gradeproxy_episode_columns_total",
            "Episode columns (end_state_ok, authority_ok, ...) by task, column and result; "
            "evidence_overlap passes at the record's evidence_pass_at.",
            ["task", "column", "result"],
            registry=reg,
        )
        self.episode_limits = Counter(
            "gradeproxy_episode_limits_total",
            "Episodes not graded because they went over a limit (turns, calls, bytes).",
            ["limit"],
            registry=reg,
        )
        self.trace_dropped = Counter(
            "gradeproxy_trace_dropped_total",
            "Spans, evaluation log records and Phoenix annotations not exported (tracing): "
            "queue_full, export_failed, shutdown.",
            ["signal", "reason"],
            registry=reg,
        )
        self.trace_exported = Counter(
            "gradeproxy_trace_exported_total",
            "Spans, evaluation log records and Phoenix annotations accepted (tracing).",
            ["signal"],
            registry=reg,
        )
        self.sink_rows_written = Counter(
            "gradeproxy_sink_rows_written_total",
            "Rows the rows database (results.sink) took as they were graded.",
            registry=reg,
        )
        self.sink_rows_spilled = Counter(
            "gradeproxy_sink_rows_spilled_total",
            "Rows written to the spill file because the rows database could not take them.",
            registry=reg,
        )
        self.sink_rows_backfilled = Counter(
            "gradeproxy_sink_rows_backfilled_total",
            "Spilled rows written to the rows database once it answered again.",
            registry=reg,
        )
        self.sink_write_failures = Counter(
            "gradeproxy_sink_write_failures_total",
            "Failed writes to the rows database by reason (each batch once).",
            ["reason"],
            registry=reg,
        )
        self.sink_lag = Gauge(
            "gradeproxy_sink_lag_seconds",
            "Age of the oldest row not yet in the rows database (0 when none waits).",
            registry=reg,
        )
        self.sink_spill_bytes = Gauge(
            "gradeproxy_sink_spill_bytes",
            "Bytes in the spill file: rows waiting for the rows database.",
            registry=reg,
        )
        self.capture_rows = Counter(
            "gradeproxy_capture_rows_total",
            "Capture rows written: answers of sampled untagged requests"
            " (results.capture_untagged).",
            registry=reg,
        )
        self.capture_skipped = Counter(
            "gradeproxy_capture_skipped_total",
            "Sampled untagged responses that wrote no capture row: unreadable (no answer could be"
            " read), backlog_full, write_failed (the results file or sink refused), error (a bug).",
            ["reason"],
            registry=reg,
        )
        self.rows_dropped = Counter(
            "gradeproxy_rows_dropped_total",
            "Rows lost: the spill file could not take them (disk full, I/O error).",
            ["reason"],
            registry=reg,
        )
        # Known label combinations exist at 0 from the start, so rates and alerts see them.
        for reason in SINK_FAILURE_REASONS:
            self.sink_write_failures.labels(reason)
        for reason in ROWS_DROPPED_REASONS:
            self.rows_dropped.labels(reason)
        self._skipped_by: dict[str, Any] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._increments: dict[Tallies, dict[Any, int]] = {}
        for reason in SKIP_REASONS:
            self.skipped.labels(reason)
        for kind in GRADING_ERROR_KINDS:
            self.grading_errors.labels(kind)
        for kind in UPSTREAM_ERROR_KINDS:
            self.upstream_errors.labels(kind)
        for phase in CLIENT_TIMEOUT_PHASES:
            self.client_timeouts.labels(phase)
        for result in ("ok", "error"):
            self.task_reloads.labels(result)
        for result in SHADOW_RESULTS:
            self.shadow_requests.labels(result)
        for reason in UNPAIRED_REASONS:
            self.shadow_unpaired.labels(reason)
        for reason in CAPTURE_SKIP_REASONS:
            self.capture_skipped.labels(reason)
        for limit in EPISODE_LIMITS:
            self.episode_limits.labels(limit)
        for signal in TRACE_SIGNALS:
            self.trace_exported.labels(signal)
            for reason in TRACE_DROP_REASONS:
                self.trace_dropped.labels(signal, reason)
        for variant in VARIANTS:
            self.variant_duration.labels(variant)
            self.variant_ttfb.labels(variant)
        self.build_info.labels(__version__, "").set(1)

    def request_done(
        self,
        route: str,
        code: int,
        total_s: float,
        ttfb_s: float | None,
        overhead_s: float,
        key: str = NO_KEY,
    ) -> None:
        """Record one answered request (proxy/pipeline/record/request_series.py); ``key`` is a
        label value already bounded (:attr:`key_label`)."""
        self.request_series.done(route, code, total_s, ttfb_s, overhead_s, key)

    def rate_limit(self, key_id: str, limit: str) -> None:
        """Count one request refused for its key's limit (the guard's callback)."""
        self.child(self.rate_limited, self.key_label(key_id), limit).inc()

    def skip(self, reason: str) -> None:
        """Count one request not graded, by reason (a closed set: children cached)."""
        counter = self._skipped_by.get(reason)
        if counter is None:
            counter = self._skipped_by[reason] = self.skipped.labels(reason)
        counter.inc()

    def child(self, metric: Any, *labels: str) -> Any:
        """A labelled child, cached (for the grade workers' per-row counters)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*(printable(v) for v in labels))
        return found

    def increments(self, tallies: Tallies) -> Mapping[Any, int]:
        """A graded job's counter increments (labelled child -> count), from its tallies:
        (task, variant, column tallies, grade tallies, error rows).

        Jobs of one task mostly tally alike (one row, one column, the same result), so the
        increments are kept by the tallies themselves: the labels are resolved once, not per
        job (:data:`_INCREMENTS_MAX` kinds, forgotten with the children on a task reload).
        """
        found = self._increments.get(tallies)
        if found is None:
            if len(self._increments) >= _INCREMENTS_MAX:
                self._increments.clear()
            found = self._increments[tallies] = self._resolve(tallies)
        return found

    def _resolve(self, tallies: Tallies) -> dict[Any, int]:
        task, variant, checks, grades, errors = tallies
        child = self.child
        counts: dict[Any, int] = {}
        for name, result, count in checks:  # one entry per (name, result)
            counts[child(self.check_results, task, name, result, variant)] = count
        if errors:
            counts[self.grading_errors.labels("check")] = errors
            counts[child(self.grade_errors, task, variant)] = errors
        for model, result, count in grades:
            label = self.model_label(model)
            key = child(self.grades, task, label, result, variant)
            counts[key] = counts.get(key, 0) + count
            if result == "stale":
                key = child(self.stale, task, label, variant)
                counts[key] = counts.get(key, 0) + count
        return counts

    def token_counts(
        self,
        task: str,
        variant: str,
        usage: Usage,
        cost: float | None,
        unpriced: bool,
        key_id: str | None = None,
    ) -> dict[Any, Any]:
        """A graded response's token and cost increments (labelled child -> amount): the types
        the backend reported, the model and the key through the cardinality guard
        (:class:`ModelLabels`, :class:`KeyLabels`)."""
        model, *counts = usage
        label, key = self.model_label(model), self.key_label(key_id)
        out: dict[Any, Any] = {
            self.child(self.tokens, kind, task, variant, label, key): count
            for kind, count in zip(TOKEN_TYPES, counts, strict=True)
            if count
        }
        if cost is not None:
            out[self.child(self.cost, task, variant, label)] = cost
        elif unpriced:
            out[self.child(self.cost_unknown, task, variant, label)] = 1
        return out

    def episode_done(self, task: str, row: Any) -> None:
        """Count one episode row: its result, and each configured column's verdict."""
        self.child(self.episodes, task, row["result"]).inc()
        for column in row["columns"]:
            passed = column["passed"]
            result = "error" if passed is None else "pass" if passed else "fail"
            self.child(self.episode_columns, task, column["name"], result).inc()

    def set_task_set(self, tasks: TaskSet | None) -> None:
        """Point the task-scoped series at a newly loaded task set."""
        self._children.clear()  # task ids may have gone; cached children would outlive them
        self._increments.clear()
        self.task_info.clear()
        self.grader_info.clear()
        self.build_info.clear()
        if tasks is None:
            self.tasks_loaded.set(0)
            self.build_info.labels(__version__, "").set(1)
            return
        self.tasks_loaded.set(len(tasks))
        for task in tasks:
            self.task_info.labels(task.id, task.mutation_kind or "none").set(1)
            for check in task.checks:
                self.grader_info.labels(task.id, check.name, check.digest).set(1)
        self.build_info.labels(__version__, tasks.digest).set(1)
