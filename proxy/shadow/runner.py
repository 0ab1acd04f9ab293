"""Shadow evaluation: a copy of a sampled, graded request goes to a candidate upstream.

The client only ever sees the primary. The shadow copy is started as a task *before* the
handler awaits the primary's relay, so both legs run together; it is read to its end through
the shadows' own transports (proxy/pipeline/transport/: the client its block names, a pool apart
from the primary's) and graded through the same grade queue (``grade_job``) as the primary, with
the same ``pair_id`` and ``variant="shadow"``. Its failure, slowness or overload never reaches the
primary: it runs under its own total timeout, a full concurrency limit skips it (never waits),
and every outcome, exceptions included, ends in the task's done callback, which counts
``gradeproxy_shadow_requests_total{result}`` and hands the leg to the grade queue or, when there
is nothing to grade, straight to the pair tracker.

It must never alter the primary's bytes, delay the primary, or send the client's (or the
primary's) credentials to the shadow upstream. The shadow's copy of the body is the only place
the proxy re-serialises a body, and only when ``model`` is overridden or ``stream: never``
turns a streamed request into a plain one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Literal

from multidict import CIMultiDict
from yarl import URL

from grader.json import JSONError, dumps, loads_exact
from grader.tasks import Task
from proxy.errors import UpstreamError, UpstreamTimeoutError
from proxy.logs import get_logger
from proxy.pipeline.admit import Api
from proxy.pipeline.decoding import CaptureBuffer
from proxy.pipeline.grade import GradeJob
from proxy.pipeline.queue import GradeQueue
from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.pairs import PairTracker
from proxy.pipeline.route import ShadowTarget
from proxy.pipeline.transport import Transports
from proxy.pipeline.upstream import Timeouts
from proxy.telemetry.record import SpanRecord

log = get_logger("gradeproxy.shadow")

ShadowResult = Literal["ok", "error", "timeout"]
SSE = "text/event-stream"
# Credentials and identities meant for the primary's provider never go to the shadow's.
_CREDENTIALS = ("authorization", "api-key", "x-api-key", "cookie", "openai-organization",
                "openai-project")  # fmt: skip
# A shadow response is held in memory until graded; one larger than this is an error.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


def shadow_body(body: bytes, model: str | None, stream: Literal["same", "never"]) -> bytes:
    """The shadow's copy of the request body: the same bytes unless something must change.

    Raises ValueError when a change is needed but the body is not a JSON object.
    """
    if model is None and (stream == "same" or b'"stream"' not in body):
        return body
    try:
        payload = loads_exact(body.decode("utf-8"))
    except (UnicodeDecodeError, JSONError) as exc:
        raise ValueError(f"the request body is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ValueError("the request body is not a JSON object")
    changed = False
    if model is not None:
        payload["model"] = model
        changed = True
    if stream == "never" and payload.get("stream") is True:
        payload["stream"] = False
        payload.pop("stream_options", None)  # only valid with stream: true
        changed = True
    return dumps(payload) if changed else body


def shadow_headers(primary: CIMultiDict[str], api_key: str | None) -> CIMultiDict[str]:
    """The primary's upstream headers without credentials, plus the shadow's own key."""
    headers = CIMultiDict((k, v) for k, v in primary.items() if k.lower() not in _CREDENTIALS)
    # Only the codings proxy/pipeline/decoding.py reads: a shadow's answer is graded, never relayed.
    headers["Accept-Encoding"] = "gzip, deflate"
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


@dataclass(slots=True)
class ShadowLeg:
    """One shadow copy: what to send, and what to grade it against."""

    pair_id: str
    target: ShadowTarget
    url: URL
    headers: CIMultiDict[str]
    body: bytes
    request_id: str
    task: Task
    tasks_digest: str
    run: str | None = None
    meta: dict[str, str] = field(default_factory=dict)
    api: Api = "chat_completions"  # the primary's route: the shadow answers in its format
    sample_id: str | None = None  # the primary's sample-id header: both legs join the same way
    span: SpanRecord | None = None  # tracing on: the leg's own span, linked to the primary's
    key_id: str | None = None  # the primary's named inbound key: both legs are its traffic


@dataclass(slots=True)
class _Outcome:
    result: ShadowResult
    job: GradeJob | None = None


class ShadowRunner:
    """Starts shadow copies, keeps their tasks referenced, and drains them at shutdown."""

    def __init__(
        self,
        metrics: ProxyMetrics,
        queue: GradeQueue,
        pairs: PairTracker,
        transports: Transports | None,
    ) -> None:
        self.metrics = metrics
        self.queue = queue
        self.pairs = pairs
        self.transports = transports
        self._tasks: set[asyncio.Task[_Outcome]] = set()

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def sampled_out(self) -> None:
        """Count an eligible request that is not shadowed: not graded, or not sampled."""
        self.metrics.shadow_requests.labels("sampled_out").inc()

    def start(self, leg: ShadowLeg) -> bool:
        """Start a leg if a slot is free, without waiting; False (counted) when none is.
        The slot is held until the task ends, however it ends."""
        if self.transports is None or not leg.target.slots.try_acquire():
            self.metrics.shadow_requests.labels("skipped_concurrency").inc()
            return False
        task = asyncio.create_task(self._run(leg), name=f"shadow-{leg.pair_id}")
        self._tasks.add(task)  # the event loop keeps only a weak reference
        task.add_done_callback(lambda done: self._done(leg, done))
        return True

    def _done(self, leg: ShadowLeg, task: asyncio.Task[_Outcome]) -> None:
        self._tasks.discard(task)
        leg.target.slots.release()
        # Cancelled at shutdown (maybe before its first step, so _run never ran): count here.
        if task.cancelled() or task.exception() is not None:
            outcome = _Outcome("error")
        else:
            outcome = task.result()
        self.metrics.shadow_requests.labels(outcome.result).inc()
        if leg.span is not None and leg.span.finished is None:  # ended before its last byte
            leg.span.finished = time.perf_counter()
        if outcome.job is not None:
            self.queue.submit(outcome.job)  # the queue reports the leg to the pair tracker
        else:
            self.pairs.leg(leg.pair_id, "shadow", leg.task.id, None)
            if leg.span is not None and self.queue.telemetry is not None:
                self.queue.telemetry.finish(leg.span)

    async def _run(self, leg: ShadowLeg) -> _Outcome:
        target = leg.target
        try:
            body = shadow_body(leg.body, target.model, target.stream)
            async with asyncio.timeout(target.timeout_s):
                return await self._exchange(leg, body)
        except (TimeoutError, UpstreamTimeoutError):
            return _Outcome("timeout")
        except (UpstreamError, OSError, ValueError) as exc:
            log.info("shadow_failed", pair_id=leg.pair_id, shadow=target.name, error=str(exc))
            return _Outcome("error")
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must stay in the shadow leg
            log.exception("shadow_crashed", pair_id=leg.pair_id, shadow=target.name)
            return _Outcome("error")

    async def _exchange(self, leg: ShadowLeg, body: bytes) -> _Outcome:
        assert self.transports is not None  # start() refuses legs without transports
        target = leg.target
        transport = self.transports[target.name]
        # Each wait bounded by the leg's whole timeout, which asyncio.timeout enforces above.
        timeouts = Timeouts(target.timeout_s, target.timeout_s)
        sent = time.perf_counter()
        response = await transport.request(
            "POST", target.origin, leg.url.raw_path_qs, leg.headers, body, timeouts
        )
        try:
            ttfb = time.perf_counter() - sent
            # Decoded here, with a bound (a compressed bomb stops at the limit, never inflated).
            copy = CaptureBuffer(response.headers.get("Content-Encoding"), MAX_RESPONSE_BYTES)
            while chunk := await response.chunk():
                copy.add(chunk)
                if copy.truncated:
                    raise ValueError(
                        copy.error or f"shadow response larger than {MAX_RESPONSE_BYTES} bytes"
                    )
            parts = copy.parts
            finished = time.perf_counter()
            stream = response.content_type == SSE
            if leg.span is not None:
                leg.span.shadow_ended(sent, finished, response.status, stream)
            if response.status >= 400:
                log.info("shadow_status", pair_id=leg.pair_id, status=response.status)
                return _Outcome("error")
        finally:
            response.close()
        self.metrics.variant_duration.labels("shadow").observe(finished - sent)
        self.metrics.variant_ttfb.labels("shadow").observe(ttfb)
        job = GradeJob(
            request_id=leg.request_id,
            task=leg.task,
            tasks_digest=leg.tasks_digest,
            upstream=leg.target.url,
            stream=stream,
            request_body=body,
            response=parts,
            finished_at=finished,
            run=leg.run,
            meta=leg.meta,
            timings={"duration_s": round(finished - sent, 6), "ttfb_s": round(ttfb, 6)},
            variant="shadow",
            pair_id=leg.pair_id,
            api=leg.api,
            sample_id=leg.sample_id,
            span=leg.span,
            key_id=leg.key_id,
        )
        return _Outcome("ok", job)

    async def idle(self) -> None:
        """Wait until no shadow leg is in flight (tests, and the start of shutdown)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def close(self, timeout_s: float) -> None:
        """Let in-flight legs finish within ``timeout_s``, cancel the rest, close the transports."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for task in pending:
                task.cancel()
            for task in pending:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if pending:
                log.warning("shadow_legs_cancelled", count=len(pending))
        if self.transports is not None:
            await self.transports.aclose()
