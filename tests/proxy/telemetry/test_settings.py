"""The ``tracing`` section like every other (errors name the field, variables override it), the
pinned attribute names against OpenTelemetry's own package, and the sampling rule."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from collections import OrderedDict
from typing import Any

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes, http_attributes, server_attributes

from grader.loader import parse_task
from grader.tasks import TaskSet
from proxy.config import ConfigError, load_config
from proxy.config.tracing import Tracing
from proxy.pipeline.child import job_from_wire, job_wire
from proxy.pipeline.grade import GradeJob
from proxy.pipeline.record.recording import RecordOptions, grade_and_reduce
from proxy.telemetry import begin, semconv
from proxy.telemetry.export import evaluation_count
from proxy.telemetry.tracecontext import trace_context

V1 = {"upstream": {"url": "http://127.0.0.1:8000/v1"}}


@pytest.mark.parametrize(
    ("tracing", "message"),
    [
        ({"sample_ratio": 1.5}, "tracing.sample_ratio: must be within 0..1"),
        ({"max_queue_size": 0}, "tracing.max_queue_size: must be >= 1"),
        ({"max_export_batch_size": 0}, "tracing.max_export_batch_size: must be >= 1"),
        ({"schedule_delay_s": 0}, "tracing.schedule_delay_s: must be > 0"),
        ({"export_timeout_s": -1}, "tracing.export_timeout_s: must be > 0"),
        ({"shutdown_timeout_s": -1}, "tracing.shutdown_timeout_s: must be >= 0"),
        ({"max_content_chars": -1}, "tracing.max_content_chars: must be >= 0"),
        ({"endpoint": "collector:4318"}, "tracing.endpoint: must be an http(s) URL"),
        ({"endpoint": "http://:4318"}, "tracing.endpoint: must be an http(s) URL with a host"),
        ({"endpoint": "http://h:99999"}, "tracing.endpoint: must be an http(s) URL with a host"),
        ({"phoenix_url": "http://[::1"}, "tracing.phoenix_url: must be an http(s) URL"),
        ({"phoenix_url": "http://h:port"}, "tracing.phoenix_url: must be an http(s) URL"),
        ({"phoenix_url": "ftp://h"}, "tracing.phoenix_url: must be an http(s) URL"),
        ({"service_name": " "}, "tracing.service_name: must not be empty"),
        ({"evaluation_events": "both"}, "tracing.evaluation_events: must be one of span|log"),
        ({"enabeld": True}, "did you mean tracing.enabled?"),
    ],
)
def test_a_bad_tracing_field_is_named(tracing: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, {**V1, "tracing": tracing}, environ={})


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, Tracing()),
        (
            {"GRADEPROXY_TRACING_ENABLED": "true", "GRADEPROXY_TRACING_SAMPLE_RATIO": "0.25"},
            Tracing(enabled=True, sample_ratio=0.25),  # the default is 0.05
        ),
        ({"GRADEPROXY_TRACING_EVALUATION_EVENTS": "LOG"}, Tracing(evaluation_events="log")),
    ],
    ids=["off-by-default", "variables", "closed-set-ignores-case"],
)
def test_tracing_is_off_by_default_and_set_like_any_section(
    environ: dict[str, str], expected: Tracing
) -> None:
    assert load_config(None, V1, environ=environ).tracing == expected


OURS = {
    "gen_ai.operation.name": gen_ai.GEN_AI_OPERATION_NAME,
    "gen_ai.provider.name": gen_ai.GEN_AI_PROVIDER_NAME,
    "gen_ai.request.model": gen_ai.GEN_AI_REQUEST_MODEL,
    "gen_ai.request.temperature": gen_ai.GEN_AI_REQUEST_TEMPERATURE,
    "gen_ai.request.top_p": gen_ai.GEN_AI_REQUEST_TOP_P,
    "gen_ai.request.max_tokens": gen_ai.GEN_AI_REQUEST_MAX_TOKENS,
    "gen_ai.request.frequency_penalty": gen_ai.GEN_AI_REQUEST_FREQUENCY_PENALTY,
    "gen_ai.request.presence_penalty": gen_ai.GEN_AI_REQUEST_PRESENCE_PENALTY,
    "gen_ai.request.seed": gen_ai.GEN_AI_REQUEST_SEED,
    "gen_ai.request.choice.count": gen_ai.GEN_AI_REQUEST_CHOICE_COUNT,
    "gen_ai.request.stop_sequences": gen_ai.GEN_AI_REQUEST_STOP_SEQUENCES,
    "gen_ai.response.model": gen_ai.GEN_AI_RESPONSE_MODEL,
    "gen_ai.response.id": gen_ai.GEN_AI_RESPONSE_ID,
    "gen_ai.response.finish_reasons": gen_ai.GEN_AI_RESPONSE_FINISH_REASONS,
    "gen_ai.usage.input_tokens": gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
    "gen_ai.usage.output_tokens": gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
    "gen_ai.input.messages": gen_ai.GEN_AI_INPUT_MESSAGES,
    "gen_ai.output.messages": gen_ai.GEN_AI_OUTPUT_MESSAGES,
    "gen_ai.evaluation.name": gen_ai.GEN_AI_EVALUATION_NAME,
    "gen_ai.evaluation.score.value": gen_ai.GEN_AI_EVALUATION_SCORE_VALUE,
    "gen_ai.evaluation.score.label": gen_ai.GEN_AI_EVALUATION_SCORE_LABEL,
    "gen_ai.evaluation.explanation": gen_ai.GEN_AI_EVALUATION_EXPLANATION,
    "error.type": error_attributes.ERROR_TYPE,
    "http.request.method": http_attributes.HTTP_REQUEST_METHOD,
    "http.response.status_code": http_attributes.HTTP_RESPONSE_STATUS_CODE,
    "http.route": http_attributes.HTTP_ROUTE,
    "server.address": server_attributes.SERVER_ADDRESS,
    "server.port": server_attributes.SERVER_PORT,
}


def _emitted() -> set[str]:
    request = {
        "model": "m",
        "temperature": 0.1,
        "top_p": 1,
        "max_tokens": 5,
        "seed": 3,
        "n": 2,
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "stop": "x",
        "messages": [{"role": "user", "content": "hi"}],
    }
    row = {
        "kind": "answer",
        "model": "m",
        "choice": 0,
        "finish_reason": "stop",
        "answer": "a",
        "checks": [{"name": "c", "passed": None, "reason_code": "judge_unavailable"}],
    }
    call = {"id": "r", "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
    names = set(semconv.request_attributes(request, "openai"))
    names |= set(semconv.response_attributes([row], call))
    names |= set(semconv.content_attributes(request, [row], 10))
    for evaluation in semconv.evaluations([row], "r"):
        names |= set(evaluation)
    return {n for n in names if not n.startswith("gradeproxy.")}


@pytest.mark.parametrize("name", sorted(_emitted()))
def test_every_emitted_name_is_the_conventions_own(name: str) -> None:
    assert OURS[name] == name


@pytest.mark.parametrize(
    ("trace_id", "ratio", "sampled"),
    [
        (0x0000000000000000_0000000000000001, 0.5, True),
        (0xFFFFFFFFFFFFFFFF_7FFFFFFFFFFFFFFF, 0.5, True),  # only the low 64 bits count
        (0x0000000000000000_8000000000000000, 0.5, False),
        (0x0000000000000000_0000000000000001, 0.0, False),
        (0x0000000000000000_FFFFFFFFFFFFFFFF, 1.0, True),
    ],
)
def test_a_started_trace_is_kept_by_the_low_bits_of_its_id(
    trace_id: int, ratio: float, sampled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = trace_id.to_bytes(16, "big") + b"\x01" * 8 + b"\x02" * 8
    monkeypatch.setattr("proxy.telemetry.record.os.urandom", lambda n: drawn[:n])
    traceparent, record = begin(None, ratio)
    assert traceparent.split("-")[1] == f"{trace_id:032x}"
    assert traceparent.endswith("-01" if sampled else "-00")
    assert (record is not None) is sampled  # an unsampled request gets no record
    if record is not None:
        assert (record.trace_id, record.traceparent) == (trace_id, traceparent)


PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


@pytest.mark.parametrize(
    ("traceparent", "draws", "ids"),
    [
        # One draw: the trace id's halves, then the server and the upstream span's ids.
        (None, [bytes(range(1, 33))], (0x1112131415161718, 0x191A1B1C1D1E1F20)),
        # A zero id is invalid: the whole draw is taken again (a trace id's high half may be 0).
        (None, [bytes(16) + b"\x05" * 16, b"\x03" * 32], (0x0303030303030303,) * 2),
        (None, [bytes(8) + b"\x05" * 24], (0x0505050505050505,) * 2),
        (None, [b"\x04" * 16 + bytes(8) + b"\x04" * 8, b"\x06" * 32], (0x0606060606060606,) * 2),
        # A continued trace draws its two span ids only.
        (PARENT, [b"\x07" * 8 + bytes(8), b"\x08" * 16], (0x0808080808080808,) * 2),
        (PARENT, [b"\x09" * 8 + b"\x0a" * 8], (0x0909090909090909, 0x0A0A0A0A0A0A0A0A)),
    ],
)
def test_the_ids_come_from_one_draw_and_never_zero(
    traceparent: str | None,
    draws: list[bytes],
    ids: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = iter(draws)
    asked: list[int] = []

    def urandom(n: int) -> bytes:
        asked.append(n)
        return next(taken)

    monkeypatch.setattr("proxy.telemetry.record.os.urandom", urandom)
    context = trace_context({"traceparent": traceparent} if traceparent else {})
    header, record = begin(context, 1.0)
    assert record is not None
    assert (record.server_span_id, record.upstream_span_id) == ids
    assert header.split("-")[2] == f"{ids[1]:016x}"  # the upstream sees its own span
    assert asked == [16 if traceparent else 32] * len(draws)
    if traceparent:
        assert record.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
        assert record.parent_span_id == 0xB7AD6B7169203331


@pytest.mark.parametrize(
    ("rows", "count"),
    [
        (None, 0),
        ([{"checks": [{}, {}]}, {"checks": [{}]}], 3),
        ([{"kind": "episode", "columns": [{}, {}, {}, {}]}], 4),
    ],
)
def test_the_results_a_dropped_request_would_have_made_are_counted(
    rows: list[dict[str, Any]] | None, count: int
) -> None:
    assert evaluation_count(rows) == count


WITHOUT_OTEL = """
import importlib.abc, sys

class NoOtel(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, NoOtel())
from proxy.app import make_app
from proxy.config import ConfigError, load_config
from proxy.telemetry.tracecontext import trace_context

make_app(load_config(None, {"upstream": {"url": "http://127.0.0.1:9/v1"}}, environ={}))
try:
    load_config(None, {"upstream": {"url": "http://127.0.0.1:9/v1"},
                       "tracing": {"enabled": True}}, environ={})
except ConfigError as exc:
    print(exc)
"""


def test_without_the_otel_extra_the_proxy_runs_and_tracing_says_what_is_missing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == (
        "tracing.enabled: needs the otel extra: pip install 'gradeproxy[otel]'"
    )


ANSWER = (
    b'{"id":"chatcmpl-1","model":"m","choices":[{"index":0,"message":{"role":"assistant",'
    b'"content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather",'
    b'"arguments":"{\\"city\\":\\"Zurich\\"}"}}]},"finish_reason":"tool_calls"}]}'
)


@pytest.mark.parametrize(
    ("traceparent", "ratio", "sampled"),
    [
        (None, 0.0, False),
        (None, 1.0, True),
        (PARENT, 0.0, True),  # the client's sampled flag decides
        (PARENT.replace("-01", "-00"), 1.0, False),
    ],
)
def test_a_grade_job_crossing_to_the_child_carries_a_sampled_span_context_only(
    traceparent: str | None, ratio: float, sampled: bool
) -> None:
    """The grade job's wire form carries every field: a sampled record arrives as its span
    context (so the child keeps the rows its evaluation results are built from); an unsampled
    request has no record (no rows sent back for it); the rest of the job arrives whole."""
    context = trace_context({"traceparent": traceparent} if traceparent else {})
    _, record = begin(context, ratio)
    assert (record is not None) is sampled
    if record is not None:
        record.request_body, record.method = BODY, "POST"
    task = parse_task({"id": "t", "expected": {"name": "get_weather", "arguments": {}}})
    job = GradeJob(
        request_id="req-1",
        task=task,
        tasks_digest="d",
        upstream="http://127.0.0.1:9/v1",
        stream=False,
        request_body=BODY,
        response=[ANSWER],
        finished_at=1.0,
        span=record,
    )
    sets: OrderedDict[str, TaskSet] = OrderedDict()
    wire = pickle.loads(pickle.dumps(job_wire(job, ("task", task))))
    crossed = job_from_wire(wire, sets, ANSWER)
    assert (crossed.request_body, crossed.response, crossed.task.id) == (BODY, [ANSWER], "t")
    assert job.span is record  # the parent's job keeps the whole record, for the exporter
    _, done = grade_and_reduce(crossed, False, 0, RecordOptions())
    assert done is not None
    if not sampled:
        assert crossed.span is None
        assert done.kept is None
        return
    assert crossed.span is not None
    ids = ("trace_id", "server_span_id", "upstream_span_id", "parent_span_id", "start_ns")
    assert [getattr(crossed.span, n) for n in ids] == [getattr(record, n) for n in ids]
    assert (crossed.span.request_body, crossed.span.method) == (b"", "")
    assert done.kept is not None
    assert [row["task_id"] for row in done.kept] == ["t"]
