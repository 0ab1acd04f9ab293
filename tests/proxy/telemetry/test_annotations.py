"""Phoenix span annotations (``tracing.phoenix_url``): what is posted, and what a failure costs.

Phoenix itself is in tests/e2e/test_phoenix.py (its API reads the annotations back); here a
loopback server stands in for it, so each failure mode can be made to happen: Phoenix refusing
the connection or answering 503, and spans that never reached the collector (their annotations
are not sent: Phoenix annotates only spans it holds). Every failure is counted, never waited on.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.telemetry import Tracing
from proxy.telemetry.annotations import PhoenixAnnotations, span_annotations
from proxy.telemetry.export import Telemetry
from tests.support.otlp import receiver, refused_port
from tests.support.spans import ROW, Drops, record

Server = Callable[[web.Application], Awaitable[TestServer]]


def phoenix_app(status: int, posted: list[dict[str, Any]]) -> web.Application:
    async def annotate(request: web.Request) -> web.Response:
        posted.extend(orjson.loads(await request.read())["data"])
        return web.json_response({"data": []}, status=status)

    app = web.Application()
    app.router.add_post("/v1/span_annotations", annotate)
    return app


def test_each_column_of_each_choice_is_one_annotation_on_the_call_span() -> None:
    span = record()
    rows = [ROW, {**ROW, "choice": 1}]
    notes = span_annotations(span, rows)
    assert {n["span_id"] for n in notes} == {f"{span.upstream_span_id:016x}"}
    assert len(notes) == 2 * len(ROW["checks"])
    keys = {(n["name"], n["identifier"]) for n in notes}
    assert len(keys) == len(notes)  # two choices on one span never overwrite each other
    first = notes[0]
    assert first["annotator_kind"] == "CODE"
    assert first["result"] == {
        "label": "fail",
        "score": 0.0,
        "explanation": "value differs (at arguments.unit)",
    }
    assert first["metadata"] == {"source": "gradeproxy", "task_id": "weather.single", "choice": 0}
    judge = next(n for n in notes if n["name"] == "judge")
    assert "score" not in judge["result"]  # an error has no score, only its label and why


async def _no_http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read(1024)
    writer.write(b"garbage\r\n\r\n")
    await writer.drain()
    writer.close()


@pytest.mark.parametrize(
    ("phoenix", "spans_reach_the_collector", "exported", "dropped"),
    [
        pytest.param("ok", True, 5, 0, id="accepted"),
        pytest.param("503", True, 0, 5, id="phoenix_answers_503"),
        pytest.param("refused", True, 0, 5, id="phoenix_refuses_the_connection"),
        pytest.param("garbage", True, 0, 5, id="phoenix_answers_no_http"),
        pytest.param("ok", False, 0, 5, id="spans_not_exported_so_not_annotated"),
    ],
)
async def test_annotations_are_counted_whatever_phoenix_does(
    aiohttp_server: Server,
    phoenix: str,
    spans_reach_the_collector: bool,
    exported: int,
    dropped: int,
) -> None:
    posted: list[dict[str, Any]] = []
    server = await aiohttp_server(phoenix_app(503 if phoenix == "503" else 200, posted))
    url = f"http://127.0.0.1:{refused_port()}" if phoenix == "refused" else str(server.make_url(""))
    if phoenix == "garbage":  # not HTTP at all: http.client raises BadStatusLine
        garbage = await asyncio.start_server(_no_http, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{garbage.sockets[0].getsockname()[1]}"
    drops = Drops()
    async with receiver("ok" if spans_reach_the_collector else "unavailable") as otlp:
        config = Tracing(
            enabled=True,
            endpoint=otlp.endpoint,
            schedule_delay_s=0.05,
            export_timeout_s=0.5,
            shutdown_timeout_s=60,
            phoenix_url=url,
        )
        exporter = Telemetry(config, drops.drop, drops.export)
        exporter.start()
        exporter.finish(record(), [ROW])
        await asyncio.to_thread(exporter.shutdown)
    assert drops.exported["annotations"] == exported
    assert drops.dropped == Counter(
        {
            **({("annotations", "export_failed"): dropped} if dropped else {}),
            **({} if spans_reach_the_collector else {("spans", "export_failed"): 2}),
        }
    )
    if phoenix == "garbage":
        garbage.close()
        await garbage.wait_closed()
    sent = phoenix not in ("refused", "garbage") and spans_reach_the_collector
    assert len(posted) == (len(ROW["checks"]) if sent else 0)


async def test_a_lone_surrogate_in_an_explanation_is_sent_as_a_replacement_character(
    aiohttp_server: Server,
) -> None:
    """An answer parsed by the stdlib (a 19-digit number beside it) can put a lone surrogate
    into a reason: the annotation is still posted, and the export thread lives on."""
    posted: list[dict[str, Any]] = []
    server = await aiohttp_server(phoenix_app(200, posted))
    row = {**ROW, "checks": [{**ROW["checks"][0], "reason": "got 'Z\ud800rich'"}]}
    drops = Drops()
    async with receiver("ok") as otlp:
        config = Tracing(
            enabled=True,
            endpoint=otlp.endpoint,
            schedule_delay_s=0.05,
            shutdown_timeout_s=60,
            phoenix_url=str(server.make_url("")),
        )
        exporter = Telemetry(config, drops.drop, drops.export)
        exporter.start()
        exporter.finish(record(), [row])
        await otlp.until(spans=2)
        exporter.finish(record(), [ROW])  # after it: the thread still exports
        await otlp.until(spans=4)
        await asyncio.to_thread(exporter.shutdown)
    assert drops.exported["annotations"] == 1 + len(ROW["checks"])
    assert posted[0]["result"]["explanation"].startswith("got 'Z\ufffdrich'")


@pytest.mark.parametrize(
    "url",
    ["http://[::1", "http://[zz]:6006", "https://[::1/v1"],
    ids=["unclosed_ipv6", "not_an_address", "unclosed_ipv6_with_path"],
)
def test_a_phoenix_url_urllib_cannot_parse_is_a_failed_send_not_an_exception(url: str) -> None:
    """Such a URL passes the settings' http(s) check; raised out of ``send``, it would end the
    export thread at the first annotated request, and every span after it with it."""
    assert PhoenixAnnotations(url, 1.0).send([{"span_id": "00f067aa0ba902b7"}]) is False
