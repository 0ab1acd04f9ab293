"""The exporter against a real OTLP/HTTP receiver on loopback: what arrives, what is dropped.

Every wait here is for a count (spans received, the exporter's thread joined), never a timed
assertion: a collector that hangs is shown to cost nothing by the shutdown returning with the
drop counted, bounded by ``shutdown_timeout_s`` and the test's own timeout.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import orjson
import pytest

from proxy.telemetry import Tracing
from proxy.telemetry.export import Telemetry
from tests.support.otlp import Receiver, attributes, receiver, refused_port
from tests.support.spans import ROW, Drops, record

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
EXPECTED_EVALUATIONS = [
    ("call", "fail", 0.0, "value differs (at arguments.unit)"),
    ("schema", "pass", 1.0, ""),
    ("legacy", "stale", 0.0, ""),
    ("judge", "error", None, "judge timed out"),
    ("similar", "pass", 0.875, ""),
]


def telemetry(target: Receiver | str, drops: Drops, **settings: Any) -> Telemetry:
    endpoint = target if isinstance(target, str) else target.endpoint
    config = Tracing(enabled=True, endpoint=endpoint, schedule_delay_s=0.05, **settings)
    exporter = Telemetry(config, drops.drop, drops.export)
    exporter.start()
    return exporter


@pytest.mark.parametrize(
    ("traceparent", "continues"),
    [
        (f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", True),
        (None, False),
        ("00-not-a-traceparent", False),
    ],
    ids=["client-trace", "no-header", "invalid-header"],
)
async def test_the_server_span_continues_a_valid_client_trace(
    traceparent: str | None, continues: bool
) -> None:
    drops = Drops()
    async with receiver() as otlp:
        exporter = telemetry(otlp, drops)
        span = record(traceparent)
        exporter.finish(span, [ROW])
        await otlp.until(spans=2)
        await asyncio.to_thread(exporter.shutdown)
    server, upstream = otlp.span("POST")[0], otlp.span("chat")[0]
    assert (server.trace_id.hex() == CLIENT_TRACE) is continues
    assert (server.parent_span_id.hex() == CLIENT_SPAN) is continues
    assert upstream.parent_span_id == server.span_id
    assert upstream.span_id.hex() == span.traceparent.split("-")[2]  # what the upstream saw
    assert server.start_time_unix_nano == span.start_ns  # explicit times, not export time
    assert upstream.start_time_unix_nano == span.ns(span.upstream_started)
    assert upstream.name == "chat gpt-4.1-mini"
    attrs = attributes(upstream.attributes)
    assert attrs["gen_ai.request.model"] == "gpt-4.1-mini"
    assert attrs["gen_ai.response.model"] == "gpt-4.1-mini-2025-04-14"
    assert attrs["gen_ai.request.temperature"] == 0.2
    assert attrs["gen_ai.response.finish_reasons"] == ["tool_calls"]
    server_attrs = attributes(server.attributes)
    assert (server_attrs["gradeproxy.task"], server_attrs["gradeproxy.run"]) == (
        "weather.single",
        "nightly",
    )
    assert drops.exported["spans"] == 2


async def test_each_check_column_is_one_evaluation_event_on_the_call_span() -> None:
    drops = Drops()
    async with receiver() as otlp:
        exporter = telemetry(otlp, drops)
        exporter.finish(record(), [ROW], {"id": "chatcmpl-42"})
        await otlp.until(spans=2)
        await asyncio.to_thread(exporter.shutdown)
    (upstream,) = otlp.span("chat")
    events = [attributes(e.attributes) for e in upstream.events]
    assert {e.name for e in upstream.events} == {"gen_ai.evaluation.result"}
    got = [
        (
            e["gen_ai.evaluation.name"],
            e["gen_ai.evaluation.score.label"],
            e.get("gen_ai.evaluation.score.value"),
            e.get("gen_ai.evaluation.explanation", ""),
        )
        for e in events
    ]
    assert got == EXPECTED_EVALUATIONS
    assert not [e for e in events if "gen_ai.response.id" in e]  # the span is the link
    assert events[3]["error.type"] == "judge_unavailable"
    assert not otlp.span("POST")[0].events  # the verdicts are the call's, not the server's


async def test_the_log_form_parents_each_result_to_the_call_span() -> None:
    drops = Drops()
    async with receiver() as otlp:
        exporter = telemetry(otlp, drops, evaluation_events="log")
        span = record()
        exporter.finish(span, [ROW], {"id": "chatcmpl-42"})
        await otlp.until(spans=2, logs=len(EXPECTED_EVALUATIONS))
        await asyncio.to_thread(exporter.shutdown)
    (upstream,) = otlp.span("chat")
    assert not upstream.events
    assert [log.event_name for log in otlp.logs] == ["gen_ai.evaluation.result"] * 5
    assert {(log.trace_id, log.span_id) for log in otlp.logs} == {
        (upstream.trace_id, upstream.span_id)
    }
    names = [attributes(log.attributes)["gen_ai.evaluation.name"] for log in otlp.logs]
    assert names == [name for name, *_ in EXPECTED_EVALUATIONS]
    ids = {attributes(log.attributes)["gen_ai.response.id"] for log in otlp.logs}
    assert ids == {"chatcmpl-42"}  # a log record also joins without its span
    assert drops.exported == Counter({"spans": 2, "logs": 5})


@pytest.mark.parametrize("mode", ["unavailable", "refused"])
async def test_a_failed_export_is_counted_as_dropped(mode: str) -> None:
    drops = Drops()
    async with receiver("unavailable") as otlp:
        target: Receiver | str = (
            otlp if mode == "unavailable" else f"http://127.0.0.1:{refused_port()}"
        )
        # The SDK retries within export_timeout_s, then gives the batch up; shutdown waits.
        exporter = telemetry(target, drops, export_timeout_s=0.5, shutdown_timeout_s=60)
        exporter.finish(record(), [ROW])
        await asyncio.to_thread(exporter.shutdown)
    assert drops.dropped == Counter({("spans", "export_failed"): 2})
    assert not drops.exported


async def test_shutdown_is_bounded_while_the_collector_never_answers() -> None:
    drops = Drops()
    async with receiver("hang") as otlp:
        exporter = telemetry(otlp, drops, export_timeout_s=120, shutdown_timeout_s=0.2)
        exporter.finish(record(), [ROW])
        await otlp.arrived.wait()  # the batch is inside an export that will not return
        exporter.finish(record(), [ROW])  # queued behind it
        await asyncio.to_thread(exporter.shutdown)  # returns: the test's timeout is the bound
        assert drops.dropped == Counter({("spans", "shutdown"): 4})
        exporter.finish(record(), [ROW])  # after shutdown: dropped, never queued
    assert drops.dropped == Counter({("spans", "shutdown"): 6})
    assert not drops.exported


async def test_a_full_queue_drops_and_counts_without_waiting() -> None:
    drops = Drops()
    async with receiver("hang") as otlp:
        exporter = telemetry(
            otlp, drops, max_queue_size=2, export_timeout_s=120, shutdown_timeout_s=0.1
        )
        exporter.finish(record(), [ROW])
        await otlp.arrived.wait()  # the exporter's thread is stuck in that export
        for _ in range(5):
            exporter.finish(record(), [ROW], None)  # 2 fit the queue, 3 do not
        assert drops.dropped == Counter({("spans", "queue_full"): 6})
        await asyncio.to_thread(exporter.shutdown)


LONG_PROMPT = "Zürich " * 2000


@pytest.mark.parametrize("capture", [False, True], ids=["content-off", "content-on"])
async def test_content_is_on_the_call_span_only_when_asked_and_cut(capture: bool) -> None:
    drops = Drops()
    span = record()
    span.request_body = orjson.dumps(
        {"model": "m", "messages": [{"role": "user", "content": LONG_PROMPT}]}
    )
    answered = {**ROW, "answer": "A" * 100}
    async with receiver() as otlp:
        exporter = telemetry(otlp, drops, capture_content=capture, max_content_chars=64)
        exporter.finish(span, [answered])
        await otlp.until(spans=2)
        await asyncio.to_thread(exporter.shutdown)
    attrs = attributes(otlp.span("chat")[0].attributes)
    server_attrs = attributes(otlp.span("POST")[0].attributes)
    assert not any(isinstance(v, str) and "Zürich" in v for v in server_attrs.values())
    if not capture:
        assert "gen_ai.input.messages" not in attrs
        assert "gen_ai.output.messages" not in attrs
        return
    (message,) = orjson.loads(attrs["gen_ai.input.messages"])
    assert message == {"role": "user", "parts": [{"type": "text", "content": LONG_PROMPT[:64]}]}
    (output,) = orjson.loads(attrs["gen_ai.output.messages"])
    assert output["parts"] == [{"type": "text", "content": "A" * 64}]
    assert output["finish_reason"] == "tool_calls"


EPISODE_ROW = {
    "kind": "episode",
    "episode_id": "ep-7",
    "columns": [
        {
            "name": "end_state_ok",
            "type": "episode",
            "passed": True,
            "score": None,
            "reason": "",
            "reason_code": "ok",
        },
        {
            "name": "authority_ok",
            "type": "episode",
            "passed": False,
            "score": None,
            "reason": "refund needs a supervisor",
            "reason_code": "authority",
        },
        {
            "name": "evidence_overlap",
            "type": "episode",
            "passed": True,
            "score": 0.8,
            "reason": "",
            "reason_code": "ok",
        },
    ],
}


async def test_an_episode_row_is_one_result_per_column_on_its_last_turn() -> None:
    drops = Drops()
    async with receiver() as otlp:
        exporter = telemetry(otlp, drops)
        exporter.finish(record(), [EPISODE_ROW])
        await otlp.until(spans=2)
        await asyncio.to_thread(exporter.shutdown)
    events = [attributes(e.attributes) for e in otlp.span("chat")[0].events]
    assert [
        (
            e["gen_ai.evaluation.name"],
            e["gen_ai.evaluation.score.label"],
            e["gen_ai.evaluation.score.value"],
            e["gradeproxy.episode"],
        )
        for e in events
    ] == [
        ("end_state_ok", "pass", 1.0, "ep-7"),
        ("authority_ok", "fail", 0.0, "ep-7"),
        ("evidence_overlap", "pass", 0.8, "ep-7"),
    ]
    assert events[1]["gen_ai.evaluation.explanation"] == "refund needs a supervisor"


@pytest.mark.parametrize(
    ("variables", "header"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "{base}"}, None),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "{base}/v1/traces"}, None),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "{base}", "OTEL_EXPORTER_OTLP_HEADERS": "x-team=evals"},
            ("x-team", "evals"),
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "{base}", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"},
            ("content-encoding", "gzip"),
        ),
    ],
    ids=["endpoint", "traces-endpoint", "headers", "compression"],
)
async def test_the_standard_otlp_variables_choose_the_destination(
    variables: dict[str, str], header: tuple[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    drops = Drops()
    async with receiver() as otlp:
        for name, value in variables.items():
            monkeypatch.setenv(name, value.format(base=otlp.endpoint))
        config = Tracing(enabled=True, schedule_delay_s=0.05)  # no endpoint in the config
        exporter = Telemetry(config, drops.drop, drops.export)
        exporter.start()
        exporter.finish(record(), [ROW])
        await otlp.until(spans=2)
        await asyncio.to_thread(exporter.shutdown)
    assert drops.exported["spans"] == 2
    assert otlp.headers[0]["content-type"] == "application/x-protobuf"
    if header is not None:
        assert otlp.headers[0][header[0]] == header[1]
