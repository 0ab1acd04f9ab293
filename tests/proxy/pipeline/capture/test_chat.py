"""Answers captured from recorded backend responses and from each robustness quirk."""

from __future__ import annotations

import itertools
import json
import pathlib
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.json import dumps, loads_exact
from proxy.pipeline.capture.chat import Answer, CaptureResult, StreamCapture, answers_from_body
from proxy.pipeline.capture.responses import ResponsesStreamCapture, responses_from_body
from tests.support.paths import WIRE

RESPONSES_PREFIX = "openai_responses_"


def _call(call_id: str | None, name: str, arguments: object) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _calls(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(calls)}


def _capture(chunks: list[bytes]) -> CaptureResult:
    capture = StreamCapture()
    for chunk in chunks:
        capture.feed(chunk)
    return capture.finish()


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(cut, len(data)) for cut in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@dataclass(frozen=True)
class Expect:
    answers: dict[int, Answer]
    finish_reasons: dict[int, str | None]
    model: str | None
    usage: dict[str, Any] | None = None
    done: bool = True
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_OA_MODEL = "gpt-4.1-mini-2025-04-14"
_OA_USAGE = {
    "prompt_tokens": 80,
    "completion_tokens": 19,
    "total_tokens": 99,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {
        "reasoning_tokens": 0,
        "audio_tokens": 0,
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    },
}
_V_MODEL = "Qwen/Qwen2.5-7B-Instruct"
_V_USAGE = {"prompt_tokens": 254, "total_tokens": 273, "completion_tokens": 19}
_V_BODY_USAGE = {**_V_USAGE, "prompt_tokens_details": None}
_L_MODEL = "qwen2.5-7b-instruct"
_L_USAGE = {"completion_tokens": 24, "prompt_tokens": 312, "total_tokens": 336}
_O_MODEL = "qwen2.5:7b"
_O_USAGE = {"prompt_tokens": 181, "completion_tokens": 23, "total_tokens": 204}

_ZURICH = '{"city":"Zürich","unit":"celsius"}'
_ZURICH_SPACED = '{"city": "Zürich", "unit": "celsius"}'
_TEXT_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'

EXPECTED: dict[str, Expect] = {
    # OpenAI
    "openai_single_tool.sse": Expect(
        {0: _calls(_call("call_qYmeTNXmU9FH9xPmYYuz0REm", "get_weather", _ZURICH))},
        {0: "tool_calls"},
        _OA_MODEL,
        _OA_USAGE,
    ),
    "openai_single_tool.json": Expect(
        {0: _calls(_call("call_qYmeTNXmU9FH9xPmYYuz0REm", "get_weather", _ZURICH))},
        {0: "tool_calls"},
        _OA_MODEL,
        _OA_USAGE,
    ),
    "openai_parallel_tools.sse": Expect(
        {
            0: _calls(
                _call("call_Vt4dJ0kOx2m6ZrVb8hXn2Qp1", "get_weather", '{"city": "Paris"}'),
                _call("call_2mLq9sWfY7cTjR0uK4eZ8aBn", "get_time", '{"timezone": "Asia/Tokyo"}'),
            )
        },
        {0: "tool_calls"},
        _OA_MODEL,
        _OA_USAGE,
    ),
    "openai_parallel_tools.json": Expect(
        {
            0: _calls(
                _call("call_Vt4dJ0kOx2m6ZrVb8hXn2Qp1", "get_weather", '{"city": "Paris"}'),
                _call("call_2mLq9sWfY7cTjR0uK4eZ8aBn", "get_time", '{"timezone": "Asia/Tokyo"}'),
            )
        },
        {0: "tool_calls"},
        _OA_MODEL,
        _OA_USAGE,
    ),
    "openai_text.sse": Expect({0: "It’s 12°C and sunny in Zürich."}, {0: "stop"}, _OA_MODEL),
    "openai_text.json": Expect(
        {0: "It’s 12°C and sunny in Zürich."}, {0: "stop"}, _OA_MODEL, _OA_USAGE
    ),
    "openai_legacy_function_call.sse": Expect(
        {0: _calls(_call(None, "get_weather", '{"city":"Zürich"}'))},
        {0: "function_call"},
        _OA_MODEL,
    ),
    "openai_legacy_function_call.json": Expect(
        {0: _calls(_call(None, "get_weather", '{"city":"Zürich"}'))},
        {0: "function_call"},
        _OA_MODEL,
        _OA_USAGE,
    ),
    # vLLM
    "vllm_single_tool.sse": Expect(
        {0: _calls(_call("chatcmpl-tool-a331788bab1045a8", "get_weather", _ZURICH_SPACED))},
        {0: "tool_calls"},
        _V_MODEL,
        _V_USAGE,
    ),
    "vllm_single_tool.json": Expect(
        {0: _calls(_call("chatcmpl-tool-a331788bab1045a8", "get_weather", _ZURICH_SPACED))},
        {0: "tool_calls"},
        _V_MODEL,
        _V_BODY_USAGE,
    ),
    "vllm_parallel_tools.sse": Expect(
        {
            0: _calls(
                _call("chatcmpl-tool-9cfff31470c8d39b", "get_weather", '{"city": "Paris"}'),
                _call("chatcmpl-tool-afe2dd0e7aedad5f", "get_time", '{"timezone": "Asia/Tokyo"}'),
            )
        },
        {0: "tool_calls"},
        _V_MODEL,
    ),
    "vllm_parallel_tools.json": Expect(
        {
            0: _calls(
                _call("chatcmpl-tool-9cfff31470c8d39b", "get_weather", '{"city": "Paris"}'),
                _call("chatcmpl-tool-afe2dd0e7aedad5f", "get_time", '{"timezone": "Asia/Tokyo"}'),
            )
        },
        {0: "tool_calls"},
        _V_MODEL,
        _V_BODY_USAGE,
    ),
    "vllm_text.sse": Expect({0: "Zürich is at 12°C."}, {0: "stop"}, _V_MODEL),
    "vllm_text.json": Expect({0: "Zürich is at 12°C."}, {0: "stop"}, _V_MODEL, _V_BODY_USAGE),
    "vllm_text_json_call.sse": Expect({0: _TEXT_CALL}, {0: "stop"}, _V_MODEL),
    "vllm_text_json_call.json": Expect({0: _TEXT_CALL}, {0: "stop"}, _V_MODEL, _V_BODY_USAGE),
    "vllm_n2_text.sse": Expect(
        {0: "Sunny in Zürich.", 1: "Clear skies."}, {0: "length", 1: "stop"}, _V_MODEL
    ),
    "vllm_stream_error.sse": Expect(
        {0: "Zür"},
        {0: None},
        _V_MODEL,
        done=False,
        error="upstream error: CUDA error: an illegal memory access was encountered",
    ),
    "vllm_truncated.sse": Expect(
        {0: _calls(_call("chatcmpl-tool-a331788bab1045a8", "get_weather", '{"city": "Zürich'))},
        {0: None},
        _V_MODEL,
        done=False,
        error="event 5: invalid JSON",
    ),
    # llama.cpp server: id and name restated in every chunk
    "llamacpp_single_tool.sse": Expect(
        {0: _calls(_call("YQ1xaaCqkZFbfFnOw9T5YtDRCNAt7EGT", "get_weather", _ZURICH))},
        {0: "tool_calls"},
        _L_MODEL,
        _L_USAGE,
    ),
    "llamacpp_single_tool.json": Expect(
        {0: _calls(_call("YQ1xaaCqkZFbfFnOw9T5YtDRCNAt7EGT", "get_weather", _ZURICH))},
        {0: "tool_calls"},
        _L_MODEL,
        _L_USAGE,
    ),
    "llamacpp_parallel_tools.sse": Expect(
        {
            0: _calls(
                _call("uT0f3QJm1r8Hk2sVw9XyLb5NcZ7Pq4De", "get_weather", '{"city":"Paris"}'),
                _call("Gh6Jk8Lm0Nb2Vc4Xz6As8Df0Qw2Er4Ty", "get_time", '{"timezone":"Asia/Tokyo"}'),
            )
        },
        {0: "tool_calls"},
        _L_MODEL,
    ),
    "llamacpp_parallel_tools.json": Expect(
        {
            0: _calls(
                _call("uT0f3QJm1r8Hk2sVw9XyLb5NcZ7Pq4De", "get_weather", '{"city":"Paris"}'),
                _call("Gh6Jk8Lm0Nb2Vc4Xz6As8Df0Qw2Er4Ty", "get_time", '{"timezone":"Asia/Tokyo"}'),
            )
        },
        {0: "tool_calls"},
        _L_MODEL,
        _L_USAGE,
    ),
    "llamacpp_text.sse": Expect({0: "Zürich: 12°C, sunny."}, {0: "stop"}, _L_MODEL),
    "llamacpp_text.json": Expect({0: "Zürich: 12°C, sunny."}, {0: "stop"}, _L_MODEL, _L_USAGE),
    # llama-cpp-python: ": ping" comments, id and name restated, a function_call twin
    "llamacpppython_ping.sse": Expect(
        {
            0: _calls(
                _call(
                    "call__0_get_weather_cmpl-8f6e4d2c-0b9a-4876-a543-210fedcba987",
                    "get_weather",
                    _ZURICH_SPACED,
                )
            )
        },
        {0: "tool_calls"},
        "functionary-small-v3.2",
    ),
    # text-generation-webui: CRLF framing, ": ping" comments, and no [DONE] at all
    "textgenwebui_crlf_ping.sse": Expect(
        {0: "Zürich is 12°C and sunny."},
        {0: "stop"},
        "Qwen2.5-7B-Instruct-Q4_K_M.gguf",
        {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
        done=False,
    ),
    # Ollama: complete calls per chunk, parallel calls all at index 0
    "ollama_single_tool.sse": Expect(
        {0: _calls(_call("call_w3mkl9bq", "get_weather", _ZURICH))},
        {0: "tool_calls"},
        _O_MODEL,
        _O_USAGE,
    ),
    "ollama_single_tool.json": Expect(
        {0: _calls(_call("call_w3mkl9bq", "get_weather", _ZURICH))},
        {0: "tool_calls"},
        _O_MODEL,
        _O_USAGE,
    ),
    "ollama_parallel_tools.sse": Expect(
        {
            0: _calls(
                _call("call_k2v8x1qz", "get_weather", '{"city":"Paris"}'),
                _call("call_p7d3n0ra", "get_time", '{"timezone":"Asia/Tokyo"}'),
            )
        },
        {0: "stop"},
        _O_MODEL,
    ),
    "ollama_parallel_tools.json": Expect(
        {
            0: _calls(
                _call("call_k2v8x1qz", "get_weather", '{"city":"Paris"}'),
                _call("call_p7d3n0ra", "get_time", '{"timezone":"Asia/Tokyo"}'),
            )
        },
        {0: "tool_calls"},
        _O_MODEL,
        _O_USAGE,
    ),
    "ollama_parallel_one_chunk.sse": Expect(
        {
            0: _calls(
                _call("call_a1b2c3d4", "get_weather", '{"city":"Paris"}'),
                _call("call_e5f6g7h8", "get_weather", '{"city":"Zürich"}'),
            )
        },
        {0: "tool_calls"},
        _O_MODEL,
    ),
    "ollama_text.sse": Expect({0: "Zürich is 12°C & sunny."}, {0: "stop"}, _O_MODEL),
    "ollama_text.json": Expect({0: "Zürich is 12°C & sunny."}, {0: "stop"}, _O_MODEL, _O_USAGE),
    "ollama_text_json_call.sse": Expect({0: _TEXT_CALL}, {0: "stop"}, _O_MODEL),
    "ollama_text_json_call.json": Expect({0: _TEXT_CALL}, {0: "stop"}, _O_MODEL, _O_USAGE),
}

_STREAMS = sorted(name for name in EXPECTED if name.endswith(".sse"))
_BODIES = sorted(name for name in EXPECTED if name.endswith(".json"))


def _check(result: CaptureResult, expect: Expect) -> None:
    assert result.answers == expect.answers
    assert result.finish_reasons == expect.finish_reasons
    assert result.model == expect.model
    assert result.usage == expect.usage
    assert result.done is expect.done
    if expect.error is None:
        assert result.error is None
    else:
        assert result.error is not None
        assert result.error.startswith(expect.error)


def _is_sidecar(name: str) -> bool:
    return name.endswith((".meta.json", ".request.json"))


def _meta_path(name: str) -> pathlib.Path:
    return WIRE / (name.rsplit(".", 1)[0] + ".meta.json")


# Responses recorded from a live backend by the real-backend tooling: each has a .meta.json
# sidecar (status, transfer chunk sizes). Their ids and texts are the backend's, so they are
# checked for invariants rather than against hand-written answers.
_RECORDED = sorted(
    path.name
    for path in WIRE.iterdir()
    if path.suffix in {".sse", ".json"}
    and not _is_sidecar(path.name)
    and _meta_path(path.name).exists()
)


def test_every_fixture_is_checked() -> None:
    on_disk = {
        path.name
        for path in WIRE.iterdir()
        if path.suffix in {".sse", ".json"}
        and not _is_sidecar(path.name)
        and not path.name.startswith(
            RESPONSES_PREFIX
        )  # tests/proxy/pipeline/capture/test_responses.py
    }
    assert on_disk == set(EXPECTED) | set(_RECORDED)


@pytest.mark.parametrize("name", _STREAMS)
def test_stream_fixture_fed_whole(name: str) -> None:
    _check(_capture([(WIRE / name).read_bytes()]), EXPECTED[name])


@pytest.mark.parametrize("name", _STREAMS)
def test_stream_fixture_fed_byte_by_byte(name: str) -> None:
    data = (WIRE / name).read_bytes()
    _check(_capture([data[i : i + 1] for i in range(len(data))]), EXPECTED[name])


@pytest.mark.parametrize("name", _STREAMS)
def test_stream_fixture_split_at_every_byte_boundary(name: str) -> None:
    data = (WIRE / name).read_bytes()
    whole = _capture([data])
    for cut in range(len(data) + 1):
        assert _capture([data[:cut], data[cut:]]) == whole, cut


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=6000), max_size=40))
@pytest.mark.parametrize("name", _STREAMS)
def test_stream_fixture_random_chunking(name: str, cuts: list[int]) -> None:
    data = (WIRE / name).read_bytes()
    assert _capture(_split(data, cuts)) == _capture([data])


@pytest.mark.parametrize("name", _BODIES)
def test_body_fixture(name: str) -> None:
    _check(answers_from_body((WIRE / name).read_bytes()), EXPECTED[name])


@pytest.mark.parametrize(
    "case",
    [
        "openai_single_tool",
        "openai_parallel_tools",
        "openai_text",
        "openai_legacy_function_call",
        "vllm_single_tool",
        "vllm_parallel_tools",
        "vllm_text",
        "vllm_text_json_call",
        "llamacpp_single_tool",
        "llamacpp_parallel_tools",
        "llamacpp_text",
        "ollama_single_tool",
        "ollama_text",
        "ollama_text_json_call",
    ],
)
def test_stream_and_body_of_one_case_give_the_same_answers(case: str) -> None:
    streamed = _capture([(WIRE / f"{case}.sse").read_bytes()])
    body = answers_from_body((WIRE / f"{case}.json").read_bytes())
    assert streamed.answers == body.answers


_MAX_TWO_PIECE_CUTS = 600


def _recorded(name: str) -> tuple[CaptureResult, dict[str, Any]]:
    meta: dict[str, Any] = json.loads(_meta_path(name).read_text())
    data = (WIRE / name).read_bytes()
    if name.endswith(".sse"):
        return _capture([data]), meta
    return answers_from_body(data), meta


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in _RECORDED if n.endswith(".sse")])
def test_recorded_stream_chunking_never_changes_the_capture(name: str) -> None:
    data = (WIRE / name).read_bytes()
    whole = _capture([data])
    sizes = json.loads(_meta_path(name).read_text()).get("transfer_chunk_sizes") or []
    if sum(sizes) == len(data):
        replay = _split(data, list(itertools.accumulate(sizes)))
        assert _capture(replay) == whole
    # Byte by byte cuts at every boundary at once; two-piece cuts then go next to each line
    # end and inside each multi-byte character, where a boundary can matter.
    assert _capture([data[i : i + 1] for i in range(len(data))]) == whole
    tricky = {i for i, byte in enumerate(data) if byte in b"\r\n" or byte >= 0x80}
    cuts = sorted({c + d for c in tricky for d in (0, 1, 2)})
    # Each two-piece cut re-reads the whole recording: on the 455 KB one that is quadratic, so
    # an evenly spread sample stands in (the byte-by-byte pass above covers every boundary).
    for cut in cuts[:: len(cuts) // _MAX_TWO_PIECE_CUTS + 1]:
        assert _capture([data[:cut], data[cut:]]) == whole, cut


@pytest.mark.parametrize("name", _RECORDED)
def test_recorded_failure_is_an_error_and_success_is_not(name: str) -> None:
    result, meta = _recorded(name)
    failed = meta["status"] != 200 or meta.get("body_bytes") == 0
    assert (result.error is not None) is failed, result.error


def _shape(answer: Answer) -> object:
    """An answer without call ids, which differ between two requests."""
    if isinstance(answer, str):
        return answer
    return [(c["function"]["name"], c["function"]["arguments"]) for c in answer["tool_calls"]]


def _recorded_ok(name: str) -> bool:
    meta = json.loads(_meta_path(name).read_text())
    return bool(meta["status"] == 200 and meta.get("body_bytes") != 0)


_RECORDED_PAIRS = [
    name.removesuffix("_stream.sse")
    for name in _RECORDED
    if name.endswith("_stream.sse")
    and name.removesuffix("_stream.sse") + ".json" in _RECORDED
    and _recorded_ok(name)
    and _recorded_ok(name.removesuffix("_stream.sse") + ".json")
]


@pytest.mark.parametrize("case", _RECORDED_PAIRS)
def test_recorded_stream_and_body_agree(case: str) -> None:
    streamed, _ = _recorded(f"{case}_stream.sse")
    body, _ = _recorded(f"{case}.json")
    assert {i: _shape(a) for i, a in streamed.answers.items()} == {
        i: _shape(a) for i, a in body.answers.items()
    }
    assert streamed.finish_reasons == body.finish_reasons


# ----------------------------------------------------------------- synthetic stream quirks


def _sse(*payloads: object, done: bool = True) -> bytes:
    frames = [b"data: " + json.dumps(p, ensure_ascii=False).encode() + b"\n\n" for p in payloads]
    if done:
        frames.append(b"data: [DONE]\n\n")
    return b"".join(frames)


def _chunk(delta: dict[str, Any], index: int = 0, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def _tc(
    index: object = 0,
    call_id: object = None,
    name: object = None,
    arguments: object = None,
    **extra: object,
) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index}
    if index is None:
        del fragment["index"]
    if call_id is not None:
        fragment["id"] = call_id
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    fragment["function"] = function
    fragment.update(extra)
    return fragment


def _tools(*fragments: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return _chunk({"tool_calls": list(fragments)}, finish=finish)


STREAM_QUIRKS = [
    pytest.param(
        [_tools(_tc(name="f", arguments='{"a":')), _tools(_tc(arguments="1}"))],
        {0: _calls(_call(None, "f", '{"a":1}'))},
        id="calls-without-ids",
    ),
    pytest.param(
        [
            _tools(_tc(call_id="call_a", name="f", arguments='{"x":1}')),
            _tools(_tc(call_id="call_b", name="g", arguments='{"y":2}')),
        ],
        {0: _calls(_call("call_a", "f", '{"x":1}'), _call("call_b", "g", '{"y":2}'))},
        id="parallel-calls-at-index-0-told-apart-by-id",
    ),
    pytest.param(
        [
            _tools(
                _tc(call_id="call_a", name="f", arguments="{}"),
                _tc(call_id="call_b", name="f", arguments='{"n":2}'),
            )
        ],
        {0: _calls(_call("call_a", "f", "{}"), _call("call_b", "f", '{"n":2}'))},
        id="parallel-calls-at-index-0-in-one-chunk",
    ),
    pytest.param(
        [
            _tools(_tc(call_id="0", name="f", arguments="")),
            _tools(_tc(call_id="0", arguments='{"a":1}')),
            _tools(_tc(call_id="1", name="g", arguments="")),
            _tools(_tc(call_id="1", arguments='{"b":2}')),
        ],
        {0: _calls(_call("0", "f", '{"a":1}'), _call("1", "g", '{"b":2}'))},
        id="streamed-parallel-calls-at-index-0-with-repeated-ids",
    ),
    pytest.param(
        [
            _tools(_tc(call_id="c1", name="get_weather", arguments="", type="function")),
            _tools(_tc(call_id="c1", name="get_weather", arguments='{"city":')),
            _tools(_tc(call_id="c1", name="get_weather", arguments='"Paris"}')),
        ],
        {0: _calls(_call("c1", "get_weather", '{"city":"Paris"}'))},
        id="id-and-name-repeated-in-every-chunk",
    ),
    pytest.param(
        [_tools(_tc(name="get_wea")), _tools(_tc(name="get_weather", arguments="{}"))],
        {0: _calls(_call(None, "get_weather", "{}"))},
        id="name-restated-as-it-grows",
    ),
    pytest.param(
        [_tools(_tc(name="get_")), _tools(_tc(name="weather")), _tools(_tc(arguments="{}"))],
        {0: _calls(_call(None, "get_weather", "{}"))},
        id="name-streamed-in-fragments",
    ),
    pytest.param(
        [_tools(_tc(arguments='{"a":1}')), _tools(_tc(call_id="c1", name="f"))],
        {0: _calls(_call("c1", "f", '{"a":1}'))},
        id="arguments-before-name",
    ),
    pytest.param(
        [_tools(_tc(call_id="c1", name="f", arguments={"city": "Zürich", "n": 1}))],
        {0: _calls(_call("c1", "f", '{"city":"Zürich","n":1}'))},
        id="arguments-as-json-object",
    ),
    pytest.param(
        [
            _tools(_tc(call_id="c1", name="f", arguments={"a": 1})),
            _tools(_tc(call_id="c1", name="f", arguments={"a": 1})),
        ],
        {0: _calls(_call("c1", "f", '{"a":1}'))},
        id="repeated-arguments-object-replaces",
    ),
    pytest.param(
        [_tools(_tc(index=1, call_id="c1", name="f", arguments="{}"))],
        {0: _calls(_call("c1", "f", "{}"))},
        id="first-call-at-index-1",
    ),
    pytest.param(
        [
            _tools(_tc(index=1, call_id="b", name="g", arguments="{}")),
            _tools(_tc(index=0, call_id="a", name="f", arguments="{}")),
        ],
        {0: _calls(_call("a", "f", "{}"), _call("b", "g", "{}"))},
        id="calls-ordered-by-index",
    ),
    pytest.param(
        [
            _tools(_tc(index=0, call_id="a", name="f", arguments="{")),
            _tools(_tc(index=1, call_id="b", name="g", arguments="[")),
            _tools(_tc(index=0, arguments="}")),
            _tools(_tc(index=1, arguments="]")),
        ],
        {0: _calls(_call("a", "f", "{}"), _call("b", "g", "[]"))},
        id="interleaved-indexes",
    ),
    pytest.param(
        [_tools(_tc(index=None, call_id="a", name="f"), _tc(index=None, call_id="b", name="g"))],
        {0: _calls(_call("a", "f", ""), _call("b", "g", ""))},
        id="missing-index-taken-from-position",
    ),
    pytest.param(
        [
            _tools(_tc(name="f", arguments="{}")),
            _tools(_tc(name="g", arguments='{"b":1}')),
        ],
        {0: _calls(_call(None, "f", "{}"), _call(None, "g", '{"b":1}'))},
        id="new-name-without-ids-after-arguments-is-a-new-call",
    ),
    pytest.param(
        [
            _tools(_tc(call_id="c1", name="f", arguments='{"a"')),
            _tools(_tc(call_id="c2", arguments=":1}")),
        ],
        {0: _calls(_call("c1", "f", '{"a":1}'))},
        id="new-id-without-name-continues-the-call",
    ),
    pytest.param(
        [
            _tools(_tc(call_id="c1", name="f", arguments="", type="function")),
            _tools(_tc(call_id="", name="", arguments='{"a":1}')),
        ],
        {0: _calls(_call("c1", "f", '{"a":1}'))},
        id="empty-string-id-and-name-in-continuations",
    ),
    pytest.param(
        [
            _tools(_tc(call_id="c1", name="f", arguments='{"a":1}')),
            _tools({"id": None, "type": None, "index": 0, "function": {"name": None}}),
        ],
        {0: _calls(_call("c1", "f", '{"a":1}'))},
        id="null-fields-in-continuations",
    ),
    pytest.param(
        [_tools(_tc(arguments="")), _chunk({"content": "hi"})],
        {0: "hi"},
        id="fragment-of-nothing-is-not-a-call",
    ),
    pytest.param(
        [_chunk({"content": "hi", "tool_calls": []})],
        {0: "hi"},
        id="empty-tool-calls-list-is-text",
    ),
    pytest.param(
        [_tools(_tc(call_id="c1", name="f", arguments="{}"), finish="stop")],
        {0: _calls(_call("c1", "f", "{}"))},
        id="finish-reason-stop-with-tool-calls",
    ),
    pytest.param(
        [_chunk({"content": "Let me check."}), _tools(_tc(call_id="c1", name="f", arguments="{}"))],
        {0: _calls(_call("c1", "f", "{}"))},
        id="text-then-tool-calls-answers-the-calls",
    ),
    pytest.param(
        [_chunk({"content": '{"name": "f", "arguments": {"a": 1}}'})],
        {0: '{"name": "f", "arguments": {"a": 1}}'},
        id="call-written-as-text-is-text",
    ),
    pytest.param(
        [
            _chunk({"role": "assistant", "content": None, "function_call": {"name": "f"}}),
            _chunk({"function_call": {"arguments": '{"a":'}}),
            _chunk({"function_call": {"arguments": "1}"}}),
        ],
        {0: _calls(_call(None, "f", '{"a":1}'))},
        id="legacy-function-call-delta",
    ),
    pytest.param(
        [
            _chunk(
                {
                    "function_call": {"name": "f", "arguments": '{"a":'},
                    "tool_calls": [_tc(call_id="c1", name="f", arguments='{"a":')],
                }
            ),
            _chunk(
                {
                    "function_call": {"name": "f", "arguments": "1}"},
                    "tool_calls": [_tc(call_id="c1", name="f", arguments="1}")],
                }
            ),
            _chunk({"function_call": None, "tool_calls": None}, finish="tool_calls"),
        ],
        {0: _calls(_call("c1", "f", '{"a":1}'))},
        id="function-call-twin-of-tool-calls-not-doubled",
    ),
    pytest.param(
        [
            _chunk({"role": "assistant", "content": ""}, index=0),
            _chunk({"role": "assistant", "content": ""}, index=1),
            _chunk({"content": "a"}, index=1),
            _chunk({"tool_calls": [_tc(call_id="c1", name="f", arguments="{}")]}, index=0),
        ],
        {0: _calls(_call("c1", "f", "{}")), 1: "a"},
        id="n-greater-than-1-each-choice-its-own-answer",
    ),
    pytest.param(
        [_chunk({"role": "assistant", "content": None}), _chunk({"content": None})],
        {0: ""},
        id="content-null-is-empty-text",
    ),
    pytest.param(
        [_chunk({"content": [{"type": "text", "text": "a"}, {"type": "image_url"}]})],
        {0: "a"},
        id="content-part-list-text-joined",
    ),
    pytest.param(
        [_chunk({"content": "a"}), {"choices": [{"index": 0, "delta": {"content": "b"}}]}],
        {0: "ab"},
        id="chunk-without-model-or-finish-reason",
    ),
    pytest.param(
        [{"choices": [{"delta": {"content": "a"}}, {"delta": {"content": "b"}}]}],
        {0: "a", 1: "b"},
        id="missing-choice-index-taken-from-position",
    ),
]


@pytest.mark.parametrize(("payloads", "answers"), STREAM_QUIRKS)
def test_stream_quirk(payloads: list[dict[str, Any]], answers: dict[int, Answer]) -> None:
    result = _capture([_sse(*payloads)])
    assert result.error is None
    assert result.done is True
    assert result.answers == answers


@pytest.mark.parametrize(("payloads", "answers"), STREAM_QUIRKS)
def test_stream_quirk_fed_byte_by_byte(
    payloads: list[dict[str, Any]], answers: dict[int, Answer]
) -> None:
    data = _sse(*payloads)
    assert _capture([data[i : i + 1] for i in range(len(data))]).answers == answers


@pytest.mark.parametrize(
    ("payloads", "attribute", "expected"),
    [
        pytest.param(
            [_chunk({"content": "a"}, finish=""), _chunk({}, finish="stop")],
            "finish_reasons",
            {0: "stop"},
            id="empty-finish-reason-is-none",
        ),
        pytest.param(
            [_chunk({}, finish="tool_calls"), _chunk({"content": ""}, finish=None)],
            "finish_reasons",
            {0: "tool_calls"},
            id="later-null-finish-reason-does-not-clear",
        ),
        pytest.param(
            [_chunk({"content": "a"}), {"id": "x", "choices": [], "usage": {"total_tokens": 3}}],
            "usage",
            {"total_tokens": 3},
            id="include-usage-chunk-with-empty-choices",
        ),
        pytest.param(
            [
                {**_chunk({"content": "a"}), "usage": {"total_tokens": 1}},
                {**_chunk({"content": "b"}), "usage": {"total_tokens": 2}},
                {**_chunk({}), "usage": None},
            ],
            "usage",
            {"total_tokens": 2},
            id="usage-on-every-chunk-last-wins",
        ),
        pytest.param(
            [{"choices": [], "model": ""}, {**_chunk({}), "model": "first"}, _chunk({})],
            "model",
            "first",
            id="model-is-the-first-non-empty",
        ),
        pytest.param([_chunk({"content": "a"})], "done", True, id="done-seen"),
    ],
)
def test_stream_metadata(payloads: list[dict[str, Any]], attribute: str, expected: object) -> None:
    assert getattr(_capture([_sse(*payloads)]), attribute) == expected


@pytest.mark.parametrize(
    ("data", "answers", "done", "error"),
    [
        pytest.param(
            _sse(_chunk({"content": "a"}, finish="stop"), done=False),
            {0: "a"},
            False,
            None,
            id="no-done-after-finish-reason-is-not-an-error",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), done=False),
            {0: "a"},
            False,
            "stream ended before choice 0 finished",
            id="no-done-and-no-finish-reason-is-cut-off",
        ),
        pytest.param(
            _sse(
                _chunk({"content": "a"}, index=0, finish="stop"),
                _chunk({"content": "b"}, index=1),
                done=False,
            ),
            {0: "a", 1: "b"},
            False,
            "stream ended before choice 1 finished",
            id="no-done-and-one-choice-unfinished-is-cut-off",
        ),
        pytest.param(
            b"",
            {},
            False,
            "stream ended without an answer chunk",
            id="empty-stream-is-an-error",
        ),
        pytest.param(
            b": ping\n\n" + _sse({"choices": [], "usage": {"total_tokens": 1}}, done=False),
            {},
            False,
            "stream ended without an answer chunk",
            id="stream-without-choices-is-an-error",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), done=False) + b"data: [DONE]",
            {0: "a"},
            True,
            None,
            id="unterminated-done-counts",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), done=False)
            + b"data: "
            + json.dumps(_chunk({"content": "b"}, finish="stop")).encode(),
            {0: "ab"},
            False,
            None,
            id="unterminated-final-event-salvaged",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"})) + _sse(_chunk({"content": "b"})),
            {0: "a"},
            True,
            None,
            id="events-after-done-ignored",
        ),
        pytest.param(
            b"data:\n\n" + _sse(_chunk({"content": "a"})),
            {0: "a"},
            True,
            None,
            id="empty-data-event-skipped",
        ),
        pytest.param(
            b"data: \xe3\x80\x80\x1c\n\n" + _sse(_chunk({"content": "a"})),
            {0: "a"},
            True,
            None,
            id="unicode-whitespace-data-event-skipped-as-blank",
        ),
        pytest.param(
            b'data: {"choices": [{"index": 0, "delta": {"content": "caf\xff"}}]}\n\n'
            + _sse(_chunk({"content": "\u00e9"}, finish="stop")),
            {0: "caf\ufffd\u00e9"},
            True,
            None,
            id="invalid-utf8-read-as-the-client-reads-it-replaced",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), done=False) + b"data: [DONE] trailing\n\n",
            {0: "a"},
            True,
            None,
            id="data-starting-with-done-ends-the-stream",
        ),
        pytest.param(
            b": keep-alive\n\nevent: chunk\n" + _sse(_chunk({"content": "a"})),
            {0: "a"},
            True,
            None,
            id="comments-and-event-names-do-not-matter",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), {"error": None, **_chunk({"content": "b"})}),
            {0: "ab"},
            True,
            None,
            id="null-error-field-is-not-an-error",
        ),
        pytest.param(
            b"data: {unparsable}\n\n",
            {},
            False,
            "event 1: invalid JSON",
            id="invalid-json-chunk",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), {"error": {"message": "boom", "code": 500}}),
            {0: "a"},
            False,
            "upstream error: boom",
            id="in-band-error-object",
        ),
        pytest.param(
            _sse({"error": "overloaded"}), {}, False, "upstream error: overloaded", id="error-str"
        ),
        pytest.param(
            _sse({"error": {"code": 500}}), {}, False, "upstream error", id="error-no-message"
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), {"error": {"message": "x"}}, _chunk({"content": "b"})),
            {0: "a"},
            False,
            "upstream error: x",
            id="events-after-error-ignored",
        ),
        pytest.param(_sse([1, 2]), {}, False, "event 1: not a JSON object", id="non-object"),
        pytest.param(_sse({"choices": {}}), {}, False, "choices is not a list", id="bad-choices"),
        pytest.param(
            _sse({"choices": ["x"]}), {}, False, "a choice is not a JSON object", id="bad-choice"
        ),
        pytest.param(
            _sse({"choices": [{"index": -1, "delta": {}}]}),
            {},
            False,
            "choice index",
            id="negative-choice-index",
        ),
        pytest.param(
            _sse({"choices": [{"index": True, "delta": {}}]}),
            {},
            False,
            "choice index",
            id="boolean-choice-index",
        ),
        pytest.param(
            _sse(_chunk({"content": "a"}), done=False) + b'data: {"choices": [{"ind',
            {0: "a"},
            False,
            "event 2: invalid JSON",
            id="stream-cut-inside-a-chunk",
        ),
    ],
)
def test_stream_outcome(
    data: bytes, answers: dict[int, Answer], done: bool, error: str | None
) -> None:
    result = _capture([data])
    assert result.answers == answers
    assert result.done is done
    if error is None:
        assert result.error is None
    else:
        assert result.error is not None
        assert result.error.startswith(error)


@pytest.mark.parametrize(
    "action",
    [
        pytest.param("finish-twice", id="finish-is-idempotent"),
        pytest.param("feed-after-finish", id="feed-after-finish-is-ignored"),
    ],
)
def test_capture_lifecycle(action: str) -> None:
    capture = StreamCapture()
    capture.feed(_sse(_chunk({"content": "a"}), done=False))
    first = capture.finish()
    if action == "feed-after-finish":
        capture.feed(_sse(_chunk({"content": "b"})))
    assert capture.finish() == first


@pytest.mark.parametrize(
    "surface",
    [
        pytest.param("stream", id="stream-capture-reports-a-bug-instead-of-raising"),
        pytest.param("body", id="body-capture-reports-a-bug-instead-of-raising"),
    ],
)
def test_internal_bug_is_reported_not_raised(surface: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr("proxy.pipeline.capture.chat.Choice.add_delta", broken)
    monkeypatch.setattr("proxy.pipeline.capture.chat.message_answer", broken)
    if surface == "stream":
        result = _capture([_sse(_chunk({"content": "a"}))])
    else:
        result = answers_from_body(_body({"content": "a"}))
    assert result.error == "internal capture error: RuntimeError('bug')"


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"error": {"message": "x" * 10_000}}, id="message-in-object"),
        pytest.param({"error": "x" * 10_000}, id="message-as-string"),
    ],
)
def test_upstream_error_message_is_bounded(payload: dict[str, Any]) -> None:
    result = _capture([_sse(payload)])
    assert result.error == "upstream error: " + "x" * 500


# ----------------------------------------------------------------- bodies


def _body(message: object, finish: object = "stop", **extra: object) -> bytes:
    payload: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }
    payload.update(extra)
    return json.dumps(payload, ensure_ascii=False).encode()


BODY_CASES = [
    pytest.param(
        _body({"content": None, "tool_calls": [{"id": "c", "function": {"name": "f"}}]}),
        {0: _calls(_call("c", "f", ""))},
        id="call-without-arguments-or-type",
    ),
    pytest.param(
        _body({"content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}),
        {0: _calls(_call(None, "f", "{}"))},
        id="call-without-id",
    ),
    pytest.param(
        _body({"content": None, "tool_calls": [_call("c", "f", {"a": [1, 2]})]}),
        {0: _calls(_call("c", "f", '{"a":[1,2]}'))},
        id="arguments-as-json-object",
    ),
    pytest.param(
        _body({"tool_calls": [_call("c", "f", '{"n": 123456789012345678901234567890}')]}),
        {0: _calls(_call("c", "f", '{"n": 123456789012345678901234567890}'))},
        id="string-arguments-kept-byte-exact",
    ),
    pytest.param(
        _body({"content": None, "function_call": {"name": "f", "arguments": '{"a":1}'}}),
        {0: _calls(_call(None, "f", '{"a":1}'))},
        id="legacy-function-call",
    ),
    pytest.param(
        _body({"content": "hi", "function_call": None, "tool_calls": []}),
        {0: "hi"},
        id="null-function-call-and-empty-tool-calls-is-text",
    ),
    pytest.param(
        _body({"content": None, "tool_calls": None}), {0: ""}, id="content-null-is-empty-text"
    ),
    pytest.param(
        _body({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
        {0: "ab"},
        id="content-part-list",
    ),
    pytest.param(_body(None), {0: ""}, id="missing-message-is-empty-text"),
    pytest.param(_body({"content": "x"}, choices=[]), {}, id="empty-choices-has-no-answers"),
    pytest.param(
        json.dumps(
            {
                "choices": [
                    {"index": 0, "message": {"content": "a"}},
                    {"index": 1, "message": {"tool_calls": [_call("c", "f", "{}")]}},
                ]
            }
        ).encode(),
        {0: "a", 1: _calls(_call("c", "f", "{}"))},
        id="n-greater-than-1",
    ),
]


@pytest.mark.parametrize(("body", "answers"), BODY_CASES)
def test_body_case(body: bytes, answers: dict[int, Answer]) -> None:
    result = answers_from_body(body)
    assert result.error is None
    assert result.answers == answers


@pytest.mark.parametrize(
    ("body", "error"),
    [
        pytest.param(b"", "invalid JSON", id="empty-body"),
        pytest.param(b"<html>502 Bad Gateway</html>", "invalid JSON", id="not-json"),
        pytest.param(b"\xff\xfe{", "invalid JSON", id="not-utf8"),
        pytest.param(b"[1]", "body is not a JSON object", id="json-array"),
        pytest.param(
            b'{"error": {"message": "Invalid API key", "type": "invalid_request_error",'
            b' "param": null, "code": "invalid_api_key"}}',
            "upstream error: Invalid API key",
            id="openai-error-body",
        ),
        pytest.param(
            b'{"object": "error", "message": "bad", "type": "BadRequestError", "code": 400}',
            "body has no choices list",
            id="error-body-without-error-key",
        ),
        pytest.param(b'{"choices": null}', "body has no choices list", id="choices-null"),
        pytest.param(
            _body({"tool_calls": ["f"]}), "a tool call is not a JSON object", id="bad-tool-call"
        ),
        pytest.param(b"[" * 100_000, "invalid JSON", id="deeply-nested"),
    ],
)
def test_body_error(body: bytes, error: str) -> None:
    result = answers_from_body(body)
    assert result.answers == {}
    assert result.error is not None
    assert result.error.startswith(error)


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        pytest.param("finish_reasons", {0: "length"}, id="finish-reason"),
        pytest.param("model", "m", id="model"),
        pytest.param("usage", {"total_tokens": 7}, id="usage"),
        pytest.param("done", True, id="done"),
    ],
)
def test_body_metadata(attribute: str, expected: object) -> None:
    result = answers_from_body(_body({"content": "a"}, "length", usage={"total_tokens": 7}))
    assert getattr(result, attribute) == expected


# ----------------------------------------------------------------- never raise

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "index",
                    "delta",
                    "message",
                    "tool_calls",
                    "function_call",
                    "function",
                    "id",
                    "name",
                    "arguments",
                    "content",
                    "finish_reason",
                    "usage",
                    "model",
                    "error",
                    "type",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(_JSON, max_size=6))
def test_arbitrary_json_events_never_raise(payloads: list[object]) -> None:
    result = _capture([_sse(*payloads)])
    assert isinstance(result, CaptureResult)


@settings(max_examples=300, deadline=None)
@given(payload=_JSON)
def test_arbitrary_json_body_never_raises(payload: object) -> None:
    result = answers_from_body(json.dumps(payload).encode())
    assert isinstance(result, CaptureResult)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=64), max_size=10))
def test_arbitrary_bytes_never_raise(chunks: list[bytes]) -> None:
    assert isinstance(_capture(chunks), CaptureResult)
    assert isinstance(answers_from_body(b"".join(chunks)), CaptureResult)


def _responses_stream(*events: dict[str, Any]) -> CaptureResult:
    capture = ResponsesStreamCapture()
    capture.feed(b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events))
    return capture.finish()


# Whether a capture error is the upstream's own report is data the capture sets
# (``upstream_error``), never read back from the message; the grade stage counts the first as
# the skip ``upstream_error`` and the second as a capture error.
@pytest.mark.parametrize(
    ("result", "upstream"),
    [
        pytest.param(
            answers_from_body(b'{"error": {"message": "Invalid API key"}}'),
            True,
            id="chat-body-error-object",
        ),
        pytest.param(answers_from_body(b"<html>502</html>"), False, id="chat-body-not-json"),
        pytest.param(
            answers_from_body(
                b'{"id": 12345678901234567890, "choices": [{"index": 0, "message": '
                b'{"content": "x"}}], "x": NaN}'
            ),
            False,
            id="chat-body-nan-beside-a-20-digit-number-is-not-json",
        ),
        pytest.param(
            _capture([_sse(_chunk({"content": "a"}), {"error": {"message": "boom"}})]),
            True,
            id="chat-stream-in-band-error",
        ),
        pytest.param(
            _capture([_sse(_chunk({"content": "a"}), done=False)]),
            False,
            id="chat-stream-cut-off",
        ),
        pytest.param(
            _capture([b'data: {"choices": [{"ind\n\n']), False, id="chat-stream-bad-chunk"
        ),
        pytest.param(
            responses_from_body(b'{"status": "failed", "output": []}'),
            True,
            id="responses-body-failed",
        ),
        pytest.param(
            responses_from_body(b'{"status": "completed"}'),
            False,
            id="responses-body-without-output",
        ),
        pytest.param(
            _responses_stream({"type": "error", "message": "overloaded"}),
            True,
            id="responses-stream-error-event",
        ),
        pytest.param(
            _responses_stream({"type": "response.failed", "response": {"status": "failed"}}),
            True,
            id="responses-stream-failed",
        ),
        pytest.param(
            _responses_stream({"type": "response.created", "response": {"status": "queued"}}),
            False,
            id="responses-stream-cut-before-completed",
        ),
    ],
)
def test_an_upstream_error_report_is_told_from_an_unreadable_response(
    result: CaptureResult, upstream: bool
) -> None:
    assert result.error is not None
    assert result.upstream_error is upstream


# Red team, round 3: an arguments *object* holding an integer wider than 64 bits or a lone
# surrogate was a capture error (a grading error, no row); it is kept as the exact JSON text
# the stdlib writes, and graded like any other call.
ODD_ARGUMENTS = [
    pytest.param(
        {"n": 123456789012345678901234567890},
        '{"n":123456789012345678901234567890}',
        id="integer-beyond-64-bits",
    ),
    pytest.param({"city": "Z\ud800rich"}, '{"city":"Z\\ud800rich"}', id="lone-surrogate"),
    pytest.param(
        {"n": -(2**70), "s": "\udfff"}, '{"n":-1180591620717411303424,"s":"\\udfff"}', id="both"
    ),
]


@pytest.mark.parametrize(("arguments", "text"), ODD_ARGUMENTS)
def test_an_arguments_object_with_odd_values_is_kept_exactly(
    arguments: dict[str, Any], text: str
) -> None:
    body = dumps(
        {
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "tool_calls": [{"function": {"name": "f", "arguments": arguments}}]
                    },
                }
            ]
        }
    )
    chunk = _tools(_tc(call_id="c", name="f", arguments=arguments))
    stream = b"data: " + dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    for result in (answers_from_body(body), _capture([stream])):
        assert result.error is None
        answer = result.answers[0]
        assert not isinstance(answer, str)
        assert answer["tool_calls"][0]["function"]["arguments"] == text
        assert loads_exact(text) == arguments
