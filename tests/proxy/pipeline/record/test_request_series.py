"""The request-side series (proxy/pipeline/record/request_series.py) expose exactly what
prometheus_client's own Counter and Histograms expose for the same requests, in both
exposition formats: the metric contract does not depend on how they are counted."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, exposition
from prometheus_client.openmetrics import exposition as openmetrics

from proxy.pipeline.record.metrics import (
    DURATION_BUCKETS,
    NO_KEY,
    OVERHEAD_BUCKETS,
    ROUTES,
    TTFB_BUCKETS,
    ProxyMetrics,
)

# route, code, total, ttfb, overhead, and the key label (NO_KEY when left out)
Request = (
    tuple[str, int, float, float | None, float] | tuple[str, int, float, float | None, float, str]
)
Render = Callable[[CollectorRegistry], bytes]


def reference(requests: list[Request]) -> CollectorRegistry:
    """The same requests through prometheus_client's own types, as metrics.py had them."""
    registry = CollectorRegistry(auto_describe=True)
    counter = Counter(
        "gradeproxy_requests_total",
        "Requests answered, by route, HTTP status code and key (the named inbound key's id; none"
        " without one).",
        ["route", "code", "key"],
        registry=registry,
    )
    histograms = [
        Histogram(name, text, ["route"], buckets=buckets, registry=registry)
        for name, text, buckets in (
            (
                "gradeproxy_request_duration_seconds",
                "Time from request received to the last response byte sent.",
                DURATION_BUCKETS,
            ),
            (
                "gradeproxy_upstream_ttfb_seconds",
                "Time from the upstream request sent to its response headers received.",
                TTFB_BUCKETS,
            ),
            (
                "gradeproxy_overhead_seconds",
                "Time spent in the proxy itself for a request, upstream waiting excluded.",
                OVERHEAD_BUCKETS,
            ),
        )
    ]
    duration, ttfb, overhead = histograms
    for histogram in histograms:
        for route in ROUTES:
            histogram.labels(route)
    for route, code, total, first_byte, spent, *key in requests:
        counter.labels(route, str(code), key[0] if key else NO_KEY).inc()
        duration.labels(route).observe(total)
        if first_byte is not None:
            ttfb.labels(route).observe(first_byte)
            overhead.labels(route).observe(spent)
    return registry


def request_side(text: bytes) -> list[bytes]:
    """The lines of the four request-side families (the rest of ProxyMetrics is not compared)."""
    names = (
        b"gradeproxy_requests",
        b"gradeproxy_request_duration",
        b"gradeproxy_upstream_ttfb",
        b"gradeproxy_overhead",
    )
    return [line for line in text.splitlines() if any(name in line for name in names)]


@pytest.mark.parametrize(
    "requests",
    [
        pytest.param([], id="no_requests_routes_at_zero"),
        pytest.param([("chat_completions", 200, 0.0123, 0.0101, 0.0004)], id="one_request"),
        pytest.param(
            [("chat_completions", 200, 0.005, 0.001, 0.00005), ("other", 200, 0.01, 0.0025, 1)],
            id="values_on_bucket_bounds",
        ),
        pytest.param(
            [("responses", 200, 1000.0, 200.0, 5.0), ("responses", 504, 0.0, 0.0, 0.0)],
            id="beyond_the_last_bound_and_zero",
        ),
        pytest.param(
            [("chat_completions", 502, 0.2, None, 0.2), ("chat_completions", 499, 0.3, None, 0)],
            id="no_upstream_response_no_ttfb",
        ),
        pytest.param(
            [
                (route, code, 0.001 * n, 0.0005 * n, 0.0001 * n)
                for n, (route, code) in enumerate(
                    [(r, c) for r in ROUTES for c in (200, 400, 500)] * 3, start=1
                )
            ],
            id="every_route_several_codes",
        ),
        pytest.param(
            [
                ("chat_completions", 200, 0.01, 0.005, 0.001, "team-a"),
                ("chat_completions", 200, 0.02, 0.005, 0.001, "team-b"),
                ("chat_completions", 200, 0.03, 0.005, 0.001, "team-a"),
                ("chat_completions", 200, 0.04, 0.005, 0.001),
            ],
            id="by_key",
        ),
    ],
)
@pytest.mark.parametrize(
    "render",
    [
        pytest.param(exposition.generate_latest, id="text"),
        pytest.param(openmetrics.generate_latest, id="openmetrics"),
    ],
)
def test_request_series_expose_what_prometheus_client_types_expose(
    requests: list[Request], render: Render
) -> None:
    metrics = ProxyMetrics()
    for request in requests:
        metrics.request_done(*request)
    assert request_side(render(metrics.registry)) == request_side(render(reference(requests)))
