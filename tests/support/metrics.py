"""Reading the proxy's Prometheus exposition the way a scraper does: parsed text, never the
registry's internals (tests that need a registry sample use :meth:`Live.metric`)."""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families


def _matching(text: str, name: str, labels: dict[str, str]) -> Iterator[float]:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                yield float(sample.value)


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of every sample named ``name`` whose labels include ``labels`` (0.0 if none)."""
    return sum(_matching(text, name, labels), 0.0)


def exposition_value(text: str, name: str, **labels: str) -> float | None:
    """The first matching sample, or None when the series is not exposed at all."""
    return next(_matching(text, name, labels), None)


async def scraped(
    client: TestClient[web.Request, web.Application], name: str, **labels: str
) -> float:
    """:func:`metric_value` of one ``GET /metrics`` through the proxy's own route."""
    text = await (await client.get("/metrics")).text()
    return metric_value(text, name, **labels)
