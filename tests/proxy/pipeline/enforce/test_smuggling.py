"""Red-team table: upstream answers shaped to carry a forbidden call past the judge.

Each row is an answer a hostile (or merely unusual) backend can send, non-streamed or streamed,
chat or Responses, that a client SDK reads as a call to ``delete_payment``. In ``strip`` mode the
name must not reach the client at all; in ``block`` mode only inside the withheld-call notice.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.pipeline.enforce.answer import enforce_body
from proxy.pipeline.enforce.decision import Enforced
from proxy.pipeline.enforce.stream import (
    ODD_CHOICE_REASON,
    UNREADABLE_EVENT_REASON,
    StreamEnforcer,
)
from tests.support.smuggling import (
    BAD,
    BODIES,
    OPEN_STREAMS,
    RELEASED,
    STREAMS,
    UNREADABLE,
    judge,
    judge_block,
    only_in_notices,
)


@pytest.mark.parametrize(
    ("api", "body"), [(a, b) for _, a, b in BODIES], ids=[r[0] for r in BODIES]
)
def test_a_non_streamed_forbidden_call_never_reaches_the_client(api: Any, body: bytes) -> None:
    stripped, outcomes = enforce_body(api, body, judge, "strip")
    assert BAD.encode() not in stripped
    assert any(o.decision.action == "strip" for o in outcomes)
    blocked, _ = enforce_body(api, body, judge_block, "block")
    assert json.loads(blocked)  # still an answer the client parses
    assert only_in_notices(blocked)


def _through(api: Any, stream: bytes, mode: Any) -> tuple[bytes, tuple[Enforced, ...]]:
    enforcer = StreamEnforcer(api, judge if mode == "strip" else judge_block, mode)
    return enforcer.feed(stream) + enforcer.close(), enforcer.outcomes


@pytest.mark.parametrize(("name", "api", "stream"), STREAMS, ids=[r[0] for r in STREAMS])
def test_a_streamed_forbidden_call_never_reaches_the_client(
    name: str, api: Any, stream: bytes
) -> None:
    stripped, outcomes = _through(api, stream, "strip")
    assert BAD.encode() not in stripped
    assert any(o.decision.action == "strip" for o in outcomes)
    blocked, outcomes = _through(api, stream, "block")
    if name in UNREADABLE:
        # no reader takes the event: it is dropped, recorded, and named nowhere
        assert BAD.encode() not in blocked
        reasons = {o.decision.reason for o in outcomes if o.name == ""}
        assert reasons & {UNREADABLE_EVENT_REASON, ODD_CHOICE_REASON}
        assert all(o.decision.action == "block" for o in outcomes)
    elif name in RELEASED:
        # the call went out before its forbidden fragment came: that fragment alone is withheld
        assert BAD.encode() not in blocked
        assert any(o.decision.action == "block" and o.name == BAD for o in outcomes)
    else:
        assert only_in_notices(blocked)


@pytest.mark.parametrize(
    ("api", "stream"),
    [
        pytest.param(api, stream, marks=pytest.mark.xfail(strict=True, reason=reason), id=name)
        for name, api, stream, reason in OPEN_STREAMS
    ],
)
def test_an_open_hole_is_still_open(api: Any, stream: bytes) -> None:
    """Known limits (docs/enforce.md): the day one closes, its row moves to ``STREAMS``."""
    enforcer = StreamEnforcer(api, judge, "strip")
    enforcer.feed(stream)
    enforcer.close()
    assert any(o.decision.action == "strip" for o in enforcer.outcomes)
