"""``utc_iso`` writes exactly what ``datetime.isoformat`` writes, for any moment and in any
order of calls (its one-second cache must never hand one second's text to another)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.utctime import utc_iso

MOMENTS = st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False)  # up to 2100


def isoformat(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


@given(st.lists(MOMENTS, min_size=1, max_size=20))
def test_any_moments_in_any_order_read_as_isoformat(moments: list[float]) -> None:
    assert [utc_iso(moment) for moment in moments] == [isoformat(m) for m in moments]


@pytest.mark.parametrize(
    ("seconds", "zone", "expected"),
    [
        pytest.param(1764583513.0, "+00:00", "2025-12-01T10:05:13+00:00", id="whole_second"),
        pytest.param(1764583513.25, "Z", "2025-12-01T10:05:13.250000Z", id="zone_replaced"),
        pytest.param(
            1764583513.9999996, "+00:00", "2025-12-01T10:05:14+00:00", id="rounds_up_a_second"
        ),
        pytest.param(0.000001, "+00:00", "1970-01-01T00:00:00.000001+00:00", id="epoch"),
    ],
)
def test_edges(seconds: float, zone: str, expected: str) -> None:
    assert utc_iso(seconds, zone) == expected
    assert utc_iso(seconds) == isoformat(seconds)
