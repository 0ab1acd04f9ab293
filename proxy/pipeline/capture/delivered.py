"""After the relay: did the client get the whole response, and so is it still graded.

Admission (``proxy/pipeline/admit.py``) decides before forwarding; this decides what only the
relay's outcome can tell: a shutdown cut, a client that left, an upstream error status. A
client may close as soon as it has the whole answer (the openai SDK stops reading at
``[DONE]``); such a response reached it and is graded, which takes reading the relayed copy,
hence this lives with capture. That read runs only when the client left early, off the
common path.
"""

from __future__ import annotations

import orjson

from proxy.pipeline.admit import Api, SkipReason
from proxy.pipeline.capture.chat import stream_answered
from proxy.pipeline.capture.responses import responses_stream_answered
from proxy.pipeline.forward import Relay


def answered(outcome: Relay, body: bytes, api: Api) -> bool:
    """Whether a response whose client left had already reached it whole (graded then)."""
    if not outcome.stream:
        return False
    if api == "responses":
        return responses_stream_answered(outcome.parts)
    return stream_answered(outcome.parts, choices_requested(body))


def choices_requested(body: bytes) -> int:
    """The request's ``n`` (1 when absent or unreadable): how many choices must finish."""
    try:
        n = orjson.loads(body).get("n")
    except (orjson.JSONDecodeError, AttributeError):
        return 1
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def relay_skip(outcome: Relay, body: bytes, api: Api) -> SkipReason | None:
    """Why a relayed response of an admitted request is not graded, or None: it is."""
    if outcome.cut is not None:
        return "shutdown"
    if outcome.client_disconnected and not answered(outcome, body, api):
        return "client_disconnected"
    if outcome.status >= 400 or outcome.upstream_failed is not None:
        return "upstream_error"
    if outcome.capture_over_limit:  # only part of the answer was kept: not gradable
        return "capture_limit"
    return None
