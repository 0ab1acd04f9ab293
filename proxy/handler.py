"""The request handler: the pipeline's stages composed, in the order a request meets them.

::

    admit (proxy/pipeline/admit.py)        graded or not, and why not: the skip reason
    route (proxy/pipeline/route.py)        which upstream, and its shadow
    enforce (proxy/pipeline/enforce/)      the task's and the route's enforce policies, if any
    forward (proxy/pipeline/forward.py)    relay upstream and back, keeping a copy if graded
                                           (an enforced answer judged before it is sent)
      + shadow (proxy/shadow/runner.py)    a copy to the shadow, started but never awaited
    delivered (proxy/pipeline/capture/)    did the client get it whole: the relay's skips
    grade job → queue (proxy/pipeline/)    submitted; parsed and graded off the hot path
    record (proxy/pipeline/record/)        the access log line and request metrics, always

Every skip is decided here or by those stages, cheaply, so the skip counters are complete. A
shadow copy is admitted and started here but never awaited: the client's response depends on
the primary alone. The health routes are proxy/surfaces/health.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import NoReturn

from aiohttp import web
from multidict import CIMultiDict

from proxy.config import Config
from proxy.errors import (
    UPSTREAM_KIND_OF,
    DrainingError,
    EnforceFailedError,
    ProxyError,
    UpstreamError,
)
from proxy.pipeline.admit import Admission, SkipReason, admit, capture_untagged, sampled
from proxy.pipeline.capture.delivered import answered, relay_skip
from proxy.pipeline.enforce.judge import plan_for
from proxy.pipeline.enforce.relay import RelayEnforcer
from proxy.pipeline.episodes import header_role, turn_of
from proxy.pipeline.forward import Relay, relay, request_headers, upstream_url
from proxy.pipeline.grade import GradeJob
from proxy.pipeline.guard import KEY_ID, LIMITS, STRIP, TRACE
from proxy.pipeline.record.access import record_request
from proxy.pipeline.record.captures import CaptureJob
from proxy.pipeline.record.enforced import count_enforced, enforcement_record
from proxy.pipeline.route import ShadowTarget, Target
from proxy.pipeline.streamusage import ask_for_usage, streamed_request
from proxy.pipeline.tokens import reported_tokens
from proxy.pipeline.transport import TRANSPORTS
from proxy.shadow.runner import ShadowLeg, shadow_headers
from proxy.state import (
    CONFIG,
    LIFECYCLE,
    METRICS,
    PAIRS,
    QUEUE,
    REQUEST_ID,
    ROUTER,
    SHADOWS,
    TASKS,
    TELEMETRY,
)
from proxy.telemetry.record import SpanRecord, begin

CLIENT_CLOSED = 499  # nginx's "client closed request": no response was completed
MAX_META_HEADERS = 16
MAX_META_VALUE = 256


async def proxy_handler(request: web.Request) -> web.StreamResponse:
    """Forward any ``/v1/*`` request; grade those on a graded route that name a loaded task."""
    app = request.app
    started = time.perf_counter()
    request_id = request.headers.get("x-request-id") or os.urandom(16).hex()
    request[REQUEST_ID] = request_id
    if app[LIFECYCLE].refusing:
        raise DrainingError("the proxy is shutting down; retry on another replica")
    grading = app[CONFIG].grading
    admitted = admit(
        request.method, request.path, request.headers, grading, app[TASKS].current, request_id
    )
    if app[QUEUE].captures is not None:
        capture_untagged(admitted, app[CONFIG].results.capture_untagged)
    body = await request.read()
    # grading.request_usage: a streamed chat answer asked for its usage (pipeline/streamusage.py)
    asked = (
        ask_for_usage(body)
        if grading.request_usage and admitted.api == "chat_completions"
        else None
    )
    body = body if asked is None else asked
    target = app[ROUTER].pick(body)  # parses the body's model only when routes exist
    headers = _upstream_headers(request, app[CONFIG], target.api_key, request_id)
    exchange = _Exchange(request, request_id, admitted, target, body, started)
    enforce = exchange.enforce = _enforcer(request, admitted, body)
    # Asked uncompressed: the added chunk is taken out of plain SSE, and a policy that acts
    # judges text (a compressed answer it can decode is decoded; docs/enforce.md). An
    # observe-only policy changes nothing upstream.
    if asked is not None or (enforce is not None and enforce.holds):
        headers["Accept-Encoding"] = "identity"
    exchange.strip_usage = asked is not None
    span = exchange.span = _span(request, headers, admitted.route, body, target.url)
    if target.shadow is not None and admitted.task is not None:
        # Started before the primary is awaited, so both legs run together.
        exchange.pair_id = _start_shadow(request, target.shadow, admitted, headers, body, span)
    try:
        response = await exchange.forward(headers)
        if admitted.skip is None and admitted.task is not None:
            exchange.submit()
        elif admitted.skip is not None:
            app[METRICS].skip(admitted.skip)
            if admitted.untagged:
                exchange.capture()
        return response
    finally:
        if exchange.pair_id is not None and not exchange.submitted and admitted.task is not None:
            app[PAIRS].leg(exchange.pair_id, "primary", admitted.task.id, None)
        if span is not None and not exchange.submitted:  # a submitted one ends with its grade
            app[TELEMETRY].finish(span)


def _enforcer(request: web.Request, admitted: Admission, body: bytes) -> RelayEnforcer | None:
    """The relay's enforce hook for the policies covering this request (docs/enforce.md);
    None, at the cost of two attribute reads, when neither its task nor a route policy file
    asks for any."""
    policies = request.app[TASKS].policies
    task = admitted.task
    if admitted.api is None or (policies is None and (task is None or task.enforce is None)):
        return None
    role = header_role(request.headers, request.app[CONFIG].grading)
    plan = plan_for(admitted.api, task, policies, body, role)
    if plan is None:
        return None
    # Only a policy that acts reads the stream flag (forward.py: what is judged, and how)
    streamed = plan.mode != "observe" and streamed_request(body) is not None
    return RelayEnforcer(plan, admitted.api, streamed)


def _upstream_headers(
    request: web.Request, config: Config, api_key: str | None, request_id: str
) -> CIMultiDict[str]:
    grading = config.grading
    # With the proxy's own key injected, the client's credentials are not the upstream's.
    credentials = config.upstream.strip_client_credentials if api_key is not None else ()
    return request_headers(
        request.headers,
        private_prefixes=("x-grade-", "x-gradeproxy-", grading.meta_header_prefix),
        # The header that carried the inbound key (proxy/pipeline/guard.py) never goes upstream.
        private_names=(
            grading.task_header,
            grading.run_header,
            grading.sample_id_header,
            *request.get(STRIP, ()),
            *credentials,
        ),
        api_key=api_key,
        request_id=request_id,
    )


class _Exchange:
    """One primary leg, from the relay to the grade job; what its stages share."""

    __slots__ = (
        "admitted",
        "body",
        "enforce",
        "outcome",
        "pair_id",
        "request",
        "request_id",
        "span",
        "started",
        "strip_usage",
        "submitted",
        "target",
    )

    def __init__(
        self,
        request: web.Request,
        request_id: str,
        admitted: Admission,
        target: Target,
        body: bytes,
        started: float,
    ) -> None:
        self.request = request
        self.request_id = request_id
        self.admitted = admitted
        self.target = target
        self.body = body
        self.started = started
        self.outcome = Relay()
        self.pair_id: str | None = None
        self.enforce: RelayEnforcer | None = None  # the enforce policies covering it, if any
        self.submitted = False
        self.span: SpanRecord | None = None  # tracing on: the request's span record
        self.strip_usage = False  # grading.request_usage added include_usage to the request

    async def forward(self, headers: CIMultiDict[str]) -> web.StreamResponse:
        """Relay the request; set the skip the outcome implies; record the request, always."""
        request, admitted, outcome = self.request, self.admitted, self.outcome
        app = request.app
        config, metrics = app[CONFIG], app[METRICS]
        relays = app[LIFECYCLE].relays
        handler_task = asyncio.current_task()
        status = 0
        # A key with a tokens-per-minute budget spends what each response reports: kept a copy.
        budget = request.get(LIMITS)
        if handler_task is not None:
            relays[handler_task] = outcome
        try:
            response = await relay(
                request,
                app[TRANSPORTS][self.target.name],
                self.target.origin,
                headers,
                self.body,
                capture=admitted.capturing or budget is not None,
                request_id=self.request_id,
                out=outcome,
                timeouts=self.target.timeouts,
                capture_limit=config.limits.max_capture_bytes,
                enforce=self.enforce,
                strip_usage=self.strip_usage,
            )
            status = outcome.status
            if outcome.client_disconnected and not outcome.headers_sent:
                status = CLIENT_CLOSED  # it left before the response began: nothing delivered
            elif outcome.upstream_failed is not None:  # failed after the response began
                metrics.upstream_errors.labels(UPSTREAM_KIND_OF[outcome.upstream_failed]).inc()
            if admitted.api is not None and admitted.skip is None:
                admitted.skip = relay_skip(outcome, self.body, admitted.api)
            return response
        except asyncio.CancelledError:
            if outcome.cut is not None and not outcome.headers_sent:
                status = DrainingError.status
                self._cut_before_answer(handler_task)
            status = self._cancelled()
            raise
        except ProxyError as error:
            status = error.status
            if not isinstance(error, EnforceFailedError):  # counted as an enforce failure
                kind = error.kind if isinstance(error, UpstreamError) else "protocol"
                metrics.upstream_errors.labels(kind).inc()
            if (skip := admitted.failed("upstream_error")) is not None:
                metrics.skip(skip)
            raise
        finally:
            relays.pop(handler_task, None)  # type: ignore[arg-type]
            if self.enforce is not None and outcome.enforced:
                count_enforced(metrics, self.enforce.plan)
            if budget is not None:  # proxy/pipeline/limits.py: the next request sees it spent
                budget.spend(reported_tokens(outcome.parts, outcome.stream))
            total = time.perf_counter() - self.started
            record_request(
                request,
                metrics,
                self.request_id,
                admitted.route,
                status,
                total,
                outcome,
                admitted.skip,
                admitted.task_id,
                self.pair_id,
            )
            if self.span is not None:
                self.span.ended(status, outcome, admitted.skip, admitted.task_id, self.pair_id)

    def _cut_before_answer(self, handler_task: asyncio.Task[object] | None) -> NoReturn:
        """Shutdown's grace period ended before the upstream answered: a 503 of our own."""
        admitted = self.admitted
        if admitted.api is not None:
            admitted.skip = admitted.skip or "shutdown"
            self.request.app[METRICS].skip(admitted.skip)
        if handler_task is not None:
            handler_task.uncancel()
        raise DrainingError("the proxy shut down before the upstream answered") from None

    def _cancelled(self) -> int:
        """The status of a relay cancelled mid-response (shutdown's cut, or its client left),
        its skip counted; a stream that had already reached its client whole is still graded."""
        admitted, outcome = self.admitted, self.outcome
        metrics = self.request.app[METRICS]
        # A client that has the whole answer may leave before the upstream ends its body.
        if (
            outcome.cut is None
            and admitted.capturing
            and admitted.api is not None
            and answered(outcome, self.body, admitted.api)
        ):
            outcome.client_disconnected = True
            if admitted.task is not None:
                self.submit()
            else:  # untagged, sampled for a capture row: its skip is counted as before
                self.capture()
                if (skip := admitted.failed("client_disconnected")) is not None:
                    metrics.skip(skip)
            return outcome.status
        reason: SkipReason
        if outcome.cut is not None:  # cut mid-response, outside the relay's own handling
            status, reason = outcome.status, "shutdown"
        else:  # the client went away (proxy/state.py's abandon) and we were cancelled
            outcome.client_disconnected = True
            status, reason = CLIENT_CLOSED, "client_disconnected"
        if (skip := admitted.failed(reason)) is not None:
            metrics.skip(skip)
        return status

    def capture(self) -> None:
        """Hand a sampled untagged response to the capture writer when it reached the client
        whole (proxy/pipeline/record/captures.py); never raises into the request."""
        request, admitted, outcome = self.request, self.admitted, self.outcome
        captures = request.app[QUEUE].captures
        if captures is None or admitted.api is None:
            return
        if relay_skip(outcome, self.body, admitted.api) is not None:
            return  # cut, failed or over the capture limit: not a complete answer
        grading = request.app[CONFIG].grading
        captures.submit(
            CaptureJob(
                request_id=self.request_id,
                api=admitted.api,
                upstream=self.target.url,
                stream=outcome.stream,
                request_body=self.body,
                response=outcome.parts,
                run=request.headers.get(grading.run_header),
                meta=_meta(request, grading.meta_header_prefix),
                sample_id=request.headers.get(grading.sample_id_header),
                upstream_request_id=outcome.upstream_request_id,
            )
        )

    def submit(self) -> None:
        """Hand the captured response to the grade queue (from here on it reports the leg)."""
        request, admitted, outcome = self.request, self.admitted, self.outcome
        task, tasks = admitted.task, admitted.tasks
        assert task is not None  # admitted: a loaded task was named
        assert tasks is not None
        app = request.app
        grading = app[CONFIG].grading
        if self.pair_id is not None:
            variant = app[METRICS]
            variant.variant_duration.labels("primary").observe(
                outcome.finished_at - outcome.started_at
            )
            variant.variant_ttfb.labels("primary").observe(outcome.ttfb_s)
        total = time.perf_counter() - self.started
        job = GradeJob(
            request_id=self.request_id,
            task=task,
            tasks_digest=tasks.digest,
            upstream=self.target.url,
            stream=outcome.stream,
            request_body=self.body,
            response=outcome.parts,
            finished_at=outcome.finished_at or time.perf_counter(),
            run=request.headers.get(grading.run_header),
            meta=_meta(request, grading.meta_header_prefix),
            timings={
                "duration_s": _to_us(total),
                "ttfb_s": _to_us(outcome.ttfb_s),
                "overhead_s": _to_us(max(total - outcome.upstream_wait_s, 0.0)),
            },
            pair_id=self.pair_id,
            api=admitted.api or "chat_completions",
            episode=turn_of(request.headers, task, grading),
            role=header_role(request.headers, grading),
            sample_id=request.headers.get(grading.sample_id_header),
            upstream_request_id=outcome.upstream_request_id,
            span=self.span,
            enforcement=(
                enforcement_record(
                    self.enforce.plan,
                    self.enforce.changed,
                    halted=self.enforce.halted is not None,
                )
                if self.enforce is not None and outcome.enforced
                else None
            ),
            key_id=request.get(KEY_ID),
        )
        self.submitted = True  # from here on the queue reports the leg, even when full
        app[QUEUE].submit(job)


def _to_us(seconds: float) -> float:
    """``seconds`` to the microsecond: ``round(seconds, 6)`` by an integer round (a float
    ``round`` to digits goes through a decimal conversion; three of them per graded request)."""
    return round(seconds * 1_000_000) / 1_000_000


def _meta(request: web.Request, prefix: str) -> dict[str, str]:
    meta: dict[str, str] = {}
    lower = prefix.lower()
    for name, value in request.headers.items():
        if name.lower().startswith(lower) and len(meta) < MAX_META_HEADERS:
            meta[name[len(prefix) :].lower()] = value[:MAX_META_VALUE]
    return meta


def _start_shadow(
    request: web.Request,
    shadow: ShadowTarget,
    admitted: Admission,
    headers: CIMultiDict[str],
    body: bytes,
    span: SpanRecord | None,
) -> str | None:
    """Start the shadow copy of a graded request if it is sampled and a slot is free; its
    pair id, or None (the reason counted)."""
    runner = request.app[SHADOWS]
    task, tasks = admitted.task, admitted.tasks
    if (
        admitted.api is None
        or task is None
        or tasks is None
        or admitted.skip is not None
        or not sampled(admitted.key, shadow.sample_rate)
    ):
        runner.sampled_out()
        return None
    grading = request.app[CONFIG].grading
    leg = ShadowLeg(
        pair_id=os.urandom(16).hex(),
        target=shadow,
        url=upstream_url(shadow.url, request.raw_path),
        headers=shadow_headers(headers, shadow.api_key),
        body=body,
        request_id=request[REQUEST_ID],
        task=task,
        tasks_digest=tasks.digest,
        run=request.headers.get(grading.run_header),
        meta=_meta(request, grading.meta_header_prefix),
        api=admitted.api,
        sample_id=request.headers.get(grading.sample_id_header),
        key_id=request.get(KEY_ID),
    )
    if span is not None:  # its own trace, linked to this one; the shadow sees its span
        leg.span = span.shadow_leg(shadow.url, body, leg.pair_id, task.id)
    if TELEMETRY in request.app:  # a trace of its own (unsampled when the primary is not):
        # never the primary's span, nor the client's tracestate, which is the client's trace's
        leg.headers["traceparent"] = (
            leg.span.traceparent if leg.span is not None else begin(None, 0.0)[0]
        )
        leg.headers.popall("tracestate", None)
    return leg.pair_id if runner.start(leg) else None


def _span(
    request: web.Request, headers: CIMultiDict[str], route: str, body: bytes, upstream: str
) -> SpanRecord | None:
    """With tracing on, the ``traceparent`` sent upstream naming the proxy's upstream span (a
    ``tracestate`` only with a valid parent), and the span record of a sampled request."""
    telemetry = request.app.get(TELEMETRY)
    if telemetry is None:
        return None
    trace = request.get(TRACE)
    headers["traceparent"], span = telemetry.begin(trace)
    if trace is None or trace.tracestate is None:
        headers.popall("tracestate", None)  # kept only beside the valid parent it belongs to
    else:  # the list validated, as one header: never a second header nobody read
        headers["tracestate"] = trace.tracestate
    if span is None:  # not sampled: the upstream's header is all it costs
        return None
    span.method, span.path, span.route = request.method, request.path, route
    span.request_id, span.upstream, span.request_body = request[REQUEST_ID], upstream, body
    span.run = request.headers.get(request.app[CONFIG].grading.run_header)
    return span
