"""The relay's enforce hook: one request's plan applied to its answer, whole or streamed.

The relay (proxy/pipeline/forward.py) knows nothing of policies: it asks this hook
(:class:`proxy.pipeline.forward.EnforceHook`) for the body to send, or feeds a stream through
it. A non-streamed answer is judged in a worker thread within the budget
(:func:`proxy.pipeline.enforce.judge.enforce_answer`), unless every policy only observes: then
it is sent at once and judged after (observe never holds anything back); a stream goes through
the hold-back
(:class:`proxy.pipeline.enforce.stream.StreamEnforcer`), whose judge is the plan itself.

An answer the proxy cannot read (a coding it cannot decode, a decoded body over the capture
limit) is an infrastructure failure, counted ``unreadable``: it passes as it came, unless the
plan fails closed (then :class:`proxy.errors.EnforceFailedError` answers instead, before any
byte is sent). A rewritten answer is sent uncompressed (every client takes identity); a gzip or
deflate stream reaches :meth:`RelayEnforcer.open_stream` already decoded by the relay.

A hold-back that raises mid-stream loses what it held: fail-open, the rest of the stream passes
unjudged; fail-closed, nothing more is relayed and the relay ends the stream with the in-band
error :attr:`RelayEnforcer.halted`. A stream the relay stops early (the client left, shutdown)
is settled (:meth:`RelayEnforcer.settle`): the calls judged so far are its outcome.
"""

from __future__ import annotations

from typing import Final, Literal

from proxy.errors import EnforceFailedError
from proxy.logs import get_logger
from proxy.pipeline.decoding import CaptureBuffer, decodable
from proxy.pipeline.enforce.answer import enforce_body
from proxy.pipeline.enforce.judge import Plan, enforce_answer
from proxy.pipeline.enforce.stream import StreamEnforcer

__all__ = ["RelayEnforcer"]

log = get_logger("gradeproxy.enforce")

# The most decoded bytes of a compressed answer judged; past it, the answer is unreadable.
DECODED_MAX_BYTES: Final = 16 * 1024 * 1024


class RelayEnforcer:
    """:class:`proxy.pipeline.forward.EnforceHook` for one request and its plan."""

    __slots__ = ("api", "changed", "halted", "plan", "stream", "streamed")

    def __init__(self, plan: Plan, api: str, streamed: bool = False) -> None:
        self.plan = plan
        self.streamed = streamed  # the request asked for a stream
        self.api: Literal["chat", "responses"] = "responses" if api == "responses" else "chat"
        self.stream: StreamEnforcer | None = None
        self.changed = False  # the client got the answer rewritten (a call withheld)
        # Fail-closed after the hold-back raised: the error that ends the stream instead.
        self.halted: EnforceFailedError | None = None

    @property
    def holds(self) -> bool:
        """Only a policy that may act holds an answer; an observing one judges it once sent."""
        return self.plan.mode != "observe"

    def _decoded(self, data: bytes, coding: str) -> bytes | None:
        if coding == "identity":
            return data
        if not decodable(coding):
            self.plan.failed("unreadable", f"a {coding} answer cannot be decoded")
            return None
        decoded = CaptureBuffer(coding, DECODED_MAX_BYTES)
        decoded.add(data)
        if decoded.truncated:
            self.plan.failed("unreadable", decoded.error or "over the decoded limit")
            return None
        return b"".join(decoded.parts)

    def observe(self, data: bytes, coding: str) -> None:
        text = self._decoded(data, coding)
        if text is None:
            return
        try:
            _, self.plan.outcomes = enforce_body(self.api, text, self.plan, "observe")
        except Exception as exc:  # never the relay's problem (the answer is already sent)
            self.plan.failed("grader_error", repr(exc)[:300])

    async def answer(self, data: bytes, coding: str) -> tuple[bytes, str | None]:
        text = self._decoded(data, coding)
        if text is None:
            self._refuse(coding)
            return data, None
        answer = await enforce_answer(self.plan, self.api, text)
        if not answer.changed:
            return data, None
        self.changed = True
        fired = next(o.decision for o in answer.outcomes if o.decision.action in ("block", "strip"))
        return answer.body, f"{fired.action}; check={fired.check}"

    def _refuse(self, coding: str) -> None:
        """Fail-closed: an answer that could not be read is not relayed (nothing sent yet)."""
        if self.plan.closes:
            raise EnforceFailedError(
                f"the upstream's answer ({coding}) could not be read, and an enforce policy with "
                "fail_closed does not relay an answer it cannot judge"
            )

    def open_stream(self, coding: str) -> bool:
        if coding != "identity":  # the relay decodes gzip and deflate itself when a plan acts
            self.plan.failed("unreadable", f"a {coding} stream is relayed as it comes")
            self._refuse(coding)
            return False
        self.stream = StreamEnforcer(self.api, self.plan, self.plan.mode)
        return True

    def feed(self, data: bytes) -> bytes:
        stream = self.stream
        if stream is None:
            return b"" if self.halted is not None else data
        try:
            return stream.feed(data)
        except Exception as exc:  # a bug in the hold-back must not break the relay
            self._broken(exc)
            return b"" if self.halted is not None else data

    def close(self) -> bytes:
        stream = self.stream
        if stream is None:
            return b""
        try:
            tail = stream.close()
        except Exception as exc:
            self._broken(exc)
            return b""
        self._settled(stream)
        return tail

    def settle(self) -> None:
        """The relay stopped before the upstream's end (the client left, shutdown cut it): the
        calls judged so far are the answer's outcome; what is still held was never sent."""
        stream = self.stream
        if stream is not None:
            self._settled(stream)

    def _settled(self, stream: StreamEnforcer) -> None:
        self.plan.outcomes = tuple(stream.outcomes)
        self.changed = any(o.decision.action in ("block", "strip") for o in stream.outcomes)
        self.stream = None

    def _broken(self, exc: Exception) -> None:
        """The hold-back raised: what it held is lost. Fail-open, the rest of the stream passes
        as is; fail-closed, nothing more of it does (:attr:`halted` ends it)."""
        log.error("enforce_stream_failed", error=repr(exc)[:300])
        stream = self.stream
        if stream is not None:
            self._settled(stream)
        self.plan.failed("grader_error", repr(exc)[:300])
        if self.plan.closes:
            self.halted = EnforceFailedError(
                "the enforced checks failed mid-stream, and an enforce policy with fail_closed "
                "relays nothing it has not judged; the rest of the answer is withheld"
            )
