"""Pairing: under many concurrent requests every pair completes with its own two legs; the
tracker settles pairs in either order, counts ungraded, expired and overflowing pairs, and
pairs multi-choice answers choice by choice."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from pathlib import Path

import pytest

from proxy.pipeline.record.metrics import ProxyMetrics
from proxy.pipeline.record.pairs import PairTracker
from proxy.state import PAIRS
from tests.support.metrics import scraped
from tests.support.plan_backend import PlanBackend, plan_request
from tests.support.proxy import ProxyFactory, settle

RESULTS = ("pass", "fail", "stale")
PLANS = list(itertools.product(RESULTS, RESULTS))  # every (primary, shadow) outcome


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_concurrent_requests_pair_completely_and_correctly(
    make_shadow_proxy: ProxyFactory,
    primary: PlanBackend,
    shadow: PlanBackend,
    shadow_url: str,
    results_path: Path,
    stream: bool,
) -> None:
    primary.stagger = shadow.stagger = True  # the two legs finish in different orders
    client = await make_shadow_proxy(
        upstream={"shadow": {"url": shadow_url, "max_concurrency": 200}},
        grading={"workers": 3},
    )
    plans = [PLANS[n % len(PLANS)] for n in range(90)]

    async def send(number: int, plan: tuple[str, str]) -> tuple[str, bytes]:
        response = await client.post(
            "/v1/chat/completions",
            data=plan_request(*plan, stream=stream),
            headers={"X-Grade-Task": "weather.single", "X-Request-Id": f"req-{number}"},
        )
        return response.headers["x-request-id"], await response.read()

    answers = await asyncio.gather(*(send(n, plan) for n, plan in enumerate(plans)))
    rows = await settle(client, results_path)
    assert sorted(body for _, body in answers) == sorted(primary.sent)
    by_pair: dict[str, dict[str, dict[str, object]]] = {}
    for row in rows:
        legs = by_pair.setdefault(str(row["pair_id"]), {})
        assert row["variant"] not in legs, "a leg recorded twice"
        legs[str(row["variant"])] = row
    assert len(by_pair) == len(plans)
    for legs in by_pair.values():
        assert set(legs) == {"primary", "shadow"}
        assert legs["primary"]["request_id"] == legs["shadow"]["request_id"]
        planned = plans[int(str(legs["primary"]["request_id"]).removeprefix("req-"))]
        assert (legs["primary"]["result"], legs["shadow"]["result"]) == planned
    tally = Counter(plans)
    for (p, s), count in tally.items():
        got = await scraped(client, "gradeproxy_shadow_pairs_total", primary=p, shadow=s)
        assert got == count, (p, s)
    assert await scraped(client, "gradeproxy_shadow_unpaired_total") == 0
    assert len(client.app[PAIRS]) == 0  # nothing left waiting


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def tracker(max_pending: int = 100, ttl_s: float = 60.0) -> tuple[PairTracker, Clock]:
    clock = Clock()
    return PairTracker(ProxyMetrics(), max_pending, ttl_s, clock), clock


def count(pairs: PairTracker, name: str, **labels: str) -> float:
    value = pairs.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


@pytest.mark.parametrize("first", ["primary", "shadow"])
def test_either_leg_may_arrive_first(first: str) -> None:
    pairs, _ = tracker()
    legs = {"primary": {0: "pass"}, "shadow": {0: "stale"}}
    second = "shadow" if first == "primary" else "primary"
    pairs.leg("p1", first, "t1", legs[first])  # type: ignore[arg-type]
    assert len(pairs) == 1
    pairs.leg("p1", second, "t1", legs[second])  # type: ignore[arg-type]
    assert len(pairs) == 0
    sample = {"task": "t1", "primary": "pass", "shadow": "stale"}
    assert count(pairs, "gradeproxy_shadow_pairs_total", **sample) == 1


@pytest.mark.parametrize(
    ("primary", "shadow"),
    [
        pytest.param(None, {0: "pass"}, id="primary_ungraded"),
        pytest.param({0: "pass"}, None, id="shadow_ungraded"),
        pytest.param(None, None, id="both_ungraded"),
    ],
)
def test_an_ungraded_leg_settles_the_pair_as_unpaired(
    primary: dict[int, str] | None, shadow: dict[int, str] | None
) -> None:
    pairs, _ = tracker()
    pairs.leg("p1", "primary", "t1", primary)
    pairs.leg("p1", "shadow", "t1", shadow)
    assert len(pairs) == 0
    assert count(pairs, "gradeproxy_shadow_unpaired_total", reason="ungraded") == 1
    assert count(pairs, "gradeproxy_shadow_pairs_total", task="t1", primary="pass",
                 shadow="pass") == 0  # fmt: skip


def test_choices_pair_by_index_and_one_sided_choices_are_dropped() -> None:
    pairs, _ = tracker()
    pairs.leg("p1", "primary", "t1", {0: "pass", 1: "fail", 2: "pass"})
    pairs.leg("p1", "shadow", "t1", {0: "fail", 1: "fail"})
    total = sum(
        count(pairs, "gradeproxy_shadow_pairs_total", task="t1", primary=p, shadow=s)
        for p, s in PLANS
    )
    assert total == 2
    assert count(pairs, "gradeproxy_shadow_pairs_total", task="t1", primary="pass",
                 shadow="fail") == 1  # fmt: skip


def test_a_pair_waiting_past_its_ttl_expires() -> None:
    pairs, clock = tracker(ttl_s=10)
    pairs.leg("old", "primary", "t1", {0: "pass"})
    clock.now = 9.9
    pairs.leg("young", "primary", "t1", {0: "pass"})
    assert len(pairs) == 2
    clock.now = 10.0
    pairs.leg("old", "shadow", "t1", {0: "pass"})  # too late: "old" expired on this call
    assert count(pairs, "gradeproxy_shadow_unpaired_total", reason="expired") == 1
    assert len(pairs) == 2  # "young", and the late leg now waiting on its own
    pairs.leg("young", "shadow", "t1", {0: "pass"})
    assert count(pairs, "gradeproxy_shadow_pairs_total", task="t1", primary="pass",
                 shadow="pass") == 1  # fmt: skip


def test_a_full_map_drops_the_oldest_pending_pair() -> None:
    pairs, _ = tracker(max_pending=2)
    for pair_id in ("a", "b", "c"):
        pairs.leg(pair_id, "primary", "t1", {0: "pass"})
    assert len(pairs) == 2
    assert count(pairs, "gradeproxy_shadow_unpaired_total", reason="overflow") == 1
    pairs.leg("a", "shadow", "t1", {0: "pass"})  # "a" was dropped: this waits alone
    pairs.leg("c", "shadow", "t1", {0: "pass"})
    assert count(pairs, "gradeproxy_shadow_pairs_total", task="t1", primary="pass",
                 shadow="pass") == 1  # fmt: skip


def test_a_leg_reported_twice_counts_once() -> None:
    pairs, _ = tracker()
    pairs.leg("p1", "primary", "t1", {0: "pass"})
    pairs.leg("p1", "primary", "t1", {0: "fail"})
    assert len(pairs) == 1
    pairs.leg("p1", "shadow", "t1", {0: "pass"})
    assert pairs.settled == 1
    assert count(pairs, "gradeproxy_shadow_pairs_total", task="t1", primary="pass",
                 shadow="pass") == 1  # fmt: skip
