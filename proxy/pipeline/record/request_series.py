"""The request-side series: plain numbers updated once per request, exported at scrape time.

``gradeproxy_requests_total{route,code,key}``, ``gradeproxy_request_duration_seconds{route}``,
``gradeproxy_upstream_ttfb_seconds{route}`` and ``gradeproxy_overhead_seconds{route}`` are
written for every forwarded request, on the event loop. prometheus_client's Counter and
Histogram take a lock per increment (four for a histogram observation: the sum, a bucket, and
the checks around them) and scan the bucket bounds in Python, to be safe across threads that
never write these series. Here each series is a list of counts and a sum, a bucket found by
``bisect``; the collector turns them into the same families prometheus_client's own types
write (the same names, help, labels, ``le`` values, cumulative buckets, ``_count`` and
``_sum``; tests/proxy/pipeline/record/test_request_series.py compares the two expositions).

Only the event loop writes them, and scrapes run on the event loop too (prometheus_client's
aiohttp handler renders synchronously), so no lock is needed.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["HistogramSpec", "RequestSeries"]

HistogramSpec = tuple[str, str, Sequence[float]]  # name, help, bucket upper bounds

REQUESTS = (
    "gradeproxy_requests_total",
    "Requests answered, by route, HTTP status code and key (the named inbound key's id; none"
    " without one).",
)
REQUEST_LABELS = ["route", "code", "key"]


class _Histogram:
    """One histogram family with a ``route`` label: per route, counts per bucket and a sum."""

    __slots__ = ("bounds", "counts", "help", "name", "sums", "upper")

    def __init__(self, spec: HistogramSpec, routes: Iterable[str]) -> None:
        self.name, self.help, buckets = spec
        self.upper = (*(float(bound) for bound in buckets), math.inf)
        self.bounds = [floatToGoString(bound) for bound in self.upper]  # type: ignore[no-untyped-call]
        # Every route exists at 0 from the start, so rates and alerts see it.
        self.counts = {route: [0] * len(self.upper) for route in routes}
        self.sums = dict.fromkeys(self.counts, 0.0)

    def observe(self, route: str, value: float) -> None:
        # The first bound >= value: prometheus_client's ``value <= bound``.
        self.counts[route][bisect_left(self.upper, value)] += 1
        self.sums[route] += value

    def family(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.help, labels=["route"])
        for route, counts in list(self.counts.items()):
            cumulative = zip(self.bounds, accumulate(counts), strict=True)
            family.add_metric([route], list(cumulative), self.sums[route])
        return family


class RequestSeries(Collector):
    """The four request-side families, registered on ``registry`` as one collector."""

    def __init__(
        self,
        registry: CollectorRegistry,
        routes: Iterable[str],
        duration: HistogramSpec,
        ttfb: HistogramSpec,
        overhead: HistogramSpec,
    ) -> None:
        routes = tuple(routes)
        self.requests: dict[tuple[str, int, str], int] = {}
        self.duration = _Histogram(duration, routes)
        self.ttfb = _Histogram(ttfb, routes)
        self.overhead = _Histogram(overhead, routes)
        registry.register(self)

    def done(
        self,
        route: str,
        code: int,
        total_s: float,
        ttfb_s: float | None,
        overhead_s: float,
        key_label: str = "none",
    ) -> None:
        """One answered request (``ttfb_s`` None: no upstream response, no TTFB or overhead);
        ``key_label`` is bounded by the caller (ProxyMetrics.key_label)."""
        requests = self.requests
        key = (route, code, key_label)
        requests[key] = requests.get(key, 0) + 1
        self.duration.observe(route, total_s)
        if ttfb_s is not None:
            self.ttfb.observe(route, ttfb_s)
            self.overhead.observe(route, overhead_s)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(*REQUESTS, labels=REQUEST_LABELS)
        for (route, code, key), count in list(self.requests.items()):
            requests.add_metric([route, str(code), key], count)
        yield requests
        for histogram in (self.duration, self.ttfb, self.overhead):
            yield histogram.family()

    def describe(self) -> Iterator[Metric]:
        """The families without samples: what the registry checks names against."""
        yield CounterMetricFamily(*REQUESTS, labels=REQUEST_LABELS)
        for histogram in (self.duration, self.ttfb, self.overhead):
            yield HistogramMetricFamily(histogram.name, histogram.help, labels=["route"])
