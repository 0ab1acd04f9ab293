"""The demo backend and the sample task set.

The demo's scoreboard is only trustworthy if the backend's answers are both realistic on the wire
(the official SDK must accept them byte for byte) and predictable (``choose_answer`` and
``planned_message`` must say exactly what was sent), and if every sample task is gradeable.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageFunctionToolCall,
)
from pydantic import BaseModel
from pytest_aiohttp import AiohttpClient

from proxy.demo.backend import (
    SAMPLE_TASKS_PATH,
    AnswerKind,
    DemoTask,
    choose_answer,
    load_demo_tasks,
    make_demo_backend,
    planned_message,
    wrong_call,
)

Client = TestClient[web.Request, web.Application]

RAW_TASKS: list[dict[str, Any]] = [
    json.loads(line) for line in SAMPLE_TASKS_PATH.read_text("utf-8").splitlines() if line.strip()
]
TASKS = load_demo_tasks(SAMPLE_TASKS_PATH)
BY_ID = {task.id: task for task in TASKS}
ALL_KINDS: tuple[AnswerKind, ...] = ("expected", "stale", "wrong", "prose", "fenced")
# Its first 16 answers cover every kind, so one short request run exercises all of them.
SHOWCASE = BY_ID["calendar.field_renamed.01"]
SHOWCASE_SEQUENCE: list[AnswerKind] = [
    "stale", "fenced", "expected", "expected", "prose", "expected", "stale", "stale",
    "expected", "expected", "stale", "expected", "stale", "prose", "wrong", "wrong",
]  # fmt: skip


@pytest.fixture
async def backend(aiohttp_client: AiohttpClient) -> Client:
    return await aiohttp_client(make_demo_backend(SAMPLE_TASKS_PATH))


def _chat(prompt: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gradeproxy-demo", "messages": [{"role": "user", "content": prompt}], **extra}


# --------------------------------------------------------------------------- canonical form
# An independent, minimal copy of the grader's equivalences, so the task file is checked without
# depending on the grader under test.
_DURATION = re.compile(r"P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?")


def _canon(value: Any) -> Any:
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)  # Python compares int and float by exact value
    if isinstance(value, str):
        matched = _DURATION.fullmatch(value)
        if matched and any(matched.groups()) and not value.endswith("T"):
            w, d, h, m, s = (int(g or 0) for g in matched.groups())
            return ("duration", (((w * 7 + d) * 24 + h) * 60 + m) * 60 + s)
        if "," in value:
            return ("string", ",".join(part.strip() for part in value.split(",")))
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_canon(item) for item in value))
    if isinstance(value, dict):
        return ("object", tuple((key, _canon(value[key])) for key in sorted(value)))
    return ("null", None)


def _canon_call(call: Any) -> Any:
    return (call["name"], _canon(call["arguments"]))


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        pytest.param("web, hero", "web,hero", True, id="comma_parts_are_trimmed"),
        pytest.param(" Refund", "Refund", False, id="lone_string_keeps_whitespace"),
        pytest.param("PT0H45M", "PT45M", True, id="durations_compare_by_length"),
        pytest.param("P1W", "PT168H", True, id="week_is_168_hours"),
        pytest.param("P1M", "PT1M", False, id="month_is_not_minute"),
        pytest.param(4550, 4550.0, True, id="integer_equals_integral_double"),
        pytest.param("4550", 4550, False, id="numeric_string_is_not_number"),
        pytest.param(9007199254740993, 9007199254740992.0, False, id="big_integer_stays_exact"),
        pytest.param(True, 1, False, id="boolean_is_not_number"),
        pytest.param(["a", "b"], ["b", "a"], False, id="array_order_matters"),
        pytest.param({"a": 1, "b": 2}, {"b": 2, "a": 1}, True, id="key_order_ignored"),
    ],
)
def test_canonical_helper_mirrors_grading_decisions(left: Any, right: Any, equal: bool) -> None:
    assert (_canon(left) == _canon(right)) is equal


# --------------------------------------------------------------------------- sample task set
def test_sample_has_enough_tasks_per_mutation_kind() -> None:
    kinds = Counter(task["metadata"]["mutationKind"] for task in RAW_TASKS)
    assert len(RAW_TASKS) >= 66
    assert len(kinds) >= 8
    assert min(kinds.values()) >= 6, kinds
    assert {
        "field_renamed", "enum_value_changed", "type_changed", "unit_changed", "list_format",
        "duration_format", "field_moved_into_object", "new_required_field",
    } <= set(kinds)  # fmt: skip


def test_sample_ids_are_unique_and_label_safe() -> None:
    ids = [task["id"] for task in RAW_TASKS]
    assert len(ids) == len(set(ids))
    assert [i for i in ids if not re.fullmatch(r"[a-z0-9_.]+", i)] == []


def test_sample_prompts_are_unique_and_name_no_task_id() -> None:
    prompts = [task["prompt"] for task in RAW_TASKS]
    assert len(prompts) == len(set(prompts))
    assert [(t["id"], p) for t in RAW_TASKS for p in prompts if t["id"] in p] == []


def _expected_values(task: dict[str, Any]) -> list[Any]:
    found: list[Any] = []

    def walk(value: Any) -> None:
        found.append(value)
        if isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(task["expected"]["arguments"])
    return found[1:]


@pytest.mark.parametrize(
    "exercises",
    [
        pytest.param(lambda v: isinstance(v, str) and "," in v, id="comma_list_string"),
        pytest.param(
            lambda v: isinstance(v, str) and bool(re.fullmatch(r"P\w*\d[WDHMS]", v)),
            id="iso_duration",
        ),
        pytest.param(lambda v: v == 4550 and type(v) is int, id="minor_unit_integer"),
        pytest.param(lambda v: isinstance(v, int) and v > 2**53, id="integer_beyond_double"),
        pytest.param(lambda v: isinstance(v, float), id="fractional_number"),
        pytest.param(lambda v: isinstance(v, bool), id="boolean"),
        pytest.param(lambda v: isinstance(v, dict), id="nested_object"),
        pytest.param(lambda v: isinstance(v, list) and len(v) >= 2, id="ordered_array"),
    ],
)
def test_sample_expected_values_exercise_grader_equivalences(
    exercises: Callable[[Any], bool],
) -> None:
    assert any(exercises(value) for task in RAW_TASKS for value in _expected_values(task))


@pytest.mark.parametrize("task", RAW_TASKS, ids=[task["id"] for task in RAW_TASKS])
def test_sample_task_is_gradeable(task: dict[str, Any]) -> None:
    expected, stale = task["expected"], task["metadata"]["stale"]
    assert isinstance(task["prompt"], str)
    assert task["prompt"].strip()
    assert isinstance(task["metadata"]["description"], str)
    assert task["metadata"]["description"]
    assert task["id"].split(".")[1] == task["metadata"]["mutationKind"]
    tools = {tool["function"]["name"]: tool for tool in task["tools"]}
    assert all(tool["type"] == "function" for tool in task["tools"])
    assert expected["name"] in tools
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool["function"]["parameters"])
    schema = tools[expected["name"]]["function"]["parameters"]
    jsonschema.validate(expected["arguments"], schema)
    assert _canon_call(expected) != _canon_call(stale)
    if stale["name"] != expected["name"]:
        assert stale["name"] not in tools, "a renamed tool must be gone from the new schema"
    wrong = wrong_call(task)
    assert _canon_call(wrong) not in {_canon_call(expected), _canon_call(stale)}


# --------------------------------------------------------------------------- answer mix
@pytest.mark.parametrize(
    ("kind", "share"),
    [
        pytest.param("expected", 0.55, id="expected_about_55_percent"),
        pytest.param("stale", 0.25, id="stale_about_25_percent"),
        pytest.param("wrong", 0.10, id="wrong_about_10_percent"),
        pytest.param("prose", 0.05, id="plain_prose_about_5_percent"),
        pytest.param("fenced", 0.05, id="fenced_call_about_5_percent"),
    ],
)
def test_answer_mix_matches_target_shares(kind: AnswerKind, share: float) -> None:
    draws = Counter(choose_answer(task, counter) for task in TASKS for counter in range(300))
    assert abs(draws[kind] / draws.total() - share) < 0.015


def test_answer_mix_holds_per_task() -> None:
    shares = {
        task.id: sum(choose_answer(task, c) == "expected" for c in range(400)) / 400
        for task in TASKS
    }
    assert {k: v for k, v in shares.items() if not 0.45 <= v <= 0.65} == {}


def test_answer_sequence_is_pinned_across_processes() -> None:
    assert [choose_answer(SHOWCASE, c) for c in range(16)] == SHOWCASE_SEQUENCE


@pytest.mark.parametrize(
    "ref",
    [
        pytest.param(SHOWCASE, id="demo_task"),
        pytest.param(SHOWCASE.id, id="task_id"),
        pytest.param(next(t for t in RAW_TASKS if t["id"] == SHOWCASE.id), id="task_mapping"),
    ],
)
def test_choose_answer_accepts_any_task_reference(ref: Any) -> None:
    assert [choose_answer(ref, c) for c in range(16)] == SHOWCASE_SEQUENCE


def test_choose_answer_rejects_negative_counter() -> None:
    with pytest.raises(ValueError, match="counter"):
        choose_answer(SHOWCASE, -1)


def _first_counter(task: DemoTask, kind: AnswerKind) -> int:
    return next(c for c in range(1000) if choose_answer(task, c) == kind)


def _sent_call(message: dict[str, Any]) -> dict[str, Any]:
    (call,) = message["tool_calls"]
    return {
        "name": call["function"]["name"],
        "arguments": json.loads(call["function"]["arguments"]),
    }


@pytest.mark.parametrize("kind", ALL_KINDS, ids=[f"{k}_is_realised" for k in ALL_KINDS])
def test_planned_message_realises_its_kind(kind: AnswerKind) -> None:
    for task in TASKS:
        message = planned_message(task, _first_counter(task, kind))
        if kind in ("expected", "stale", "wrong"):
            assert message["content"] is None
            target = {"expected": task.expected, "stale": task.stale, "wrong": wrong_call(task)}
            assert _sent_call(message) == target[kind]
        else:
            assert "tool_calls" not in message
            assert isinstance(message["content"], str)
            fence = re.search(r"```json\n(.*?)\n```", message["content"], re.DOTALL)
            if kind == "fenced":
                assert fence is not None
                assert json.loads(fence.group(1)) == task.expected
            else:
                assert fence is None
                assert "{" not in message["content"]


# --------------------------------------------------------------------------- wire format
def _assert_exact(model: BaseModel, path: str = "$") -> None:
    """The SDK models allow extra keys; the backend must not send any the SDK does not know."""
    assert not model.model_extra, f"{path}: unexpected fields {sorted(model.model_extra or {})}"
    for name in type(model).model_fields:
        value = getattr(model, name)
        for i, child in enumerate(value if isinstance(value, list) else [value]):
            if isinstance(child, BaseModel):
                _assert_exact(child, f"{path}.{name}[{i}]")


def _sse_payloads(text: str) -> list[dict[str, Any]]:
    assert text.endswith("data: [DONE]\n\n")
    frames = text.split("\n\n")[:-1]
    assert all(frame.startswith("data: ") and "\n" not in frame for frame in frames)
    assert frames[-1] == "data: [DONE]"
    return [json.loads(frame.removeprefix("data: ")) for frame in frames[:-1]]


async def test_non_streamed_answers_follow_the_plan_and_validate(backend: Client) -> None:
    for counter in range(len(SHOWCASE_SEQUENCE)):
        response = await backend.post("/v1/chat/completions", json=_chat(SHOWCASE.prompt))
        assert response.status == 200
        assert response.content_type == "application/json"
        body = await response.json()
        completion = ChatCompletion.model_validate(body)
        _assert_exact(completion)
        assert body["object"] == "chat.completion"
        assert body["system_fingerprint"].startswith("fp_")
        (choice,) = body["choices"]
        assert choice["message"] == planned_message(SHOWCASE, counter)
        assert choice["finish_reason"] == (
            "tool_calls" if SHOWCASE_SEQUENCE[counter] in ("expected", "stale", "wrong") else "stop"
        )
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.parametrize("include_usage", [True, False], ids=["with_usage", "without_usage"])
@pytest.mark.parametrize("kind", ["expected", "prose", "fenced"], ids=lambda k: f"{k}_answer")
async def test_streamed_frames_are_exact_sse(
    backend: Client, kind: AnswerKind, include_usage: bool
) -> None:
    counter = _first_counter(SHOWCASE, kind)
    for _ in range(counter):
        await backend.post("/v1/chat/completions", json=_chat(SHOWCASE.prompt))
    request = _chat(SHOWCASE.prompt, stream=True, stream_options={"include_usage": include_usage})
    response = await backend.post("/v1/chat/completions", json=request)
    assert response.status == 200
    assert response.content_type == "text/event-stream"
    chunks = _sse_payloads(await response.text())
    for chunk in chunks:
        _assert_exact(ChatCompletionChunk.model_validate(chunk))
    assert len({chunk["id"] for chunk in chunks}) == 1
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    if include_usage:
        *chunks, usage_chunk = chunks
        assert usage_chunk["choices"] == []
        assert usage_chunk["usage"]["completion_tokens"] > 0
        assert all(chunk["usage"] is None for chunk in chunks)
    else:
        assert all("usage" not in chunk for chunk in chunks)
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    assert deltas[0]["role"] == "assistant"
    assert all("role" not in delta for delta in deltas[1:])
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    planned = planned_message(SHOWCASE, counter)
    if kind == "expected":
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        header = deltas[1]["tool_calls"][0]
        fragments = [d["tool_calls"][0]["function"]["arguments"] for d in deltas[2:-1]]
        assert len(fragments) >= 3
        assert header["id"] == planned["tool_calls"][0]["id"]
        assert header["function"]["name"] == SHOWCASE.expected["name"]
        assert "".join(fragments) == planned["tool_calls"][0]["function"]["arguments"]
    else:
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        pieces = [delta["content"] for delta in deltas[1:-1]]
        assert len(pieces) >= 3
        assert "".join(pieces) == planned["content"]


SdkAnswer = tuple[str | None, list[tuple[str, str, str]], bool]


async def _sdk_plain(sdk: openai.AsyncOpenAI, prompt: str) -> SdkAnswer:
    completion = await sdk.chat.completions.create(
        model="gradeproxy-demo", messages=[{"role": "user", "content": prompt}]
    )
    message = completion.choices[0].message
    calls = [
        (call.id, call.function.name, call.function.arguments)
        for call in message.tool_calls or []
        if isinstance(call, ChatCompletionMessageFunctionToolCall)
    ]
    return message.content, calls, completion.usage is not None


async def _sdk_streamed(sdk: openai.AsyncOpenAI, prompt: str) -> SdkAnswer:
    content: list[str] = []
    call = {"id": "", "name": "", "arguments": ""}
    saw_usage = False
    chunks = await sdk.chat.completions.create(
        model="gradeproxy-demo",
        messages=[{"role": "user", "content": prompt}],
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in chunks:
        saw_usage = saw_usage or chunk.usage is not None
        for choice in chunk.choices:
            content.append(choice.delta.content or "")
            for delta in choice.delta.tool_calls or []:
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    if call["id"]:
        return None, [(call["id"], call["name"], call["arguments"])], saw_usage
    return "".join(content), [], saw_usage


@pytest.mark.parametrize(
    "read", [_sdk_plain, _sdk_streamed], ids=["sdk_non_streamed", "sdk_streamed"]
)
async def test_official_sdk_reads_every_answer(
    backend: Client, read: Callable[[openai.AsyncOpenAI, str], Awaitable[SdkAnswer]]
) -> None:
    async with openai.AsyncOpenAI(
        base_url=str(backend.make_url("/v1")), api_key="x", max_retries=0
    ) as sdk:
        for counter, kind in enumerate(SHOWCASE_SEQUENCE):
            content, calls, saw_usage = await read(sdk, SHOWCASE.prompt)
            planned = planned_message(SHOWCASE, counter)
            assert saw_usage
            if kind in ("expected", "stale", "wrong"):
                (planned_call,) = planned["tool_calls"]
                fn = planned_call["function"]
                assert calls == [(planned_call["id"], fn["name"], fn["arguments"])]
                assert not content
            else:
                assert calls == []
                assert content == planned["content"]


@pytest.mark.parametrize(
    "stream", [False, True], ids=["n_choices_non_streamed", "n_choices_streamed"]
)
async def test_n_choices_consume_consecutive_counters(backend: Client, stream: bool) -> None:
    response = await backend.post(
        "/v1/chat/completions", json=_chat(SHOWCASE.prompt, n=3, stream=stream)
    )
    if stream:
        messages: dict[int, dict[str, Any]] = {}
        for chunk in _sse_payloads(await response.text()):
            ChatCompletionChunk.model_validate(chunk)
            (choice,) = chunk["choices"]
            message = messages.setdefault(choice["index"], {"content": "", "arguments": ""})
            message["content"] += choice["delta"].get("content") or ""
            for delta in choice["delta"].get("tool_calls") or []:
                message["arguments"] += delta["function"]["arguments"]
        for index in range(3):
            planned = planned_message(SHOWCASE, index)
            if planned["content"] is None:
                assert (
                    messages[index]["arguments"]
                    == planned["tool_calls"][0]["function"]["arguments"]
                )
            else:
                assert messages[index]["content"] == planned["content"]
        assert sorted(messages) == [0, 1, 2]
    else:
        body = await response.json()
        ChatCompletion.model_validate(body)
        assert [c["index"] for c in body["choices"]] == [0, 1, 2]
        assert [c["message"] for c in body["choices"]] == [
            planned_message(SHOWCASE, i) for i in range(3)
        ]
    follow_up = await backend.post("/v1/chat/completions", json=_chat(SHOWCASE.prompt))
    assert (await follow_up.json())["choices"][0]["message"] == planned_message(SHOWCASE, 3)


@pytest.mark.parametrize(
    "model",
    ["gradeproxy-demo", "gpt-4o-mini", "llama-3.1-8b-instruct@q4"],
    ids=["demo_model", "openai_model_name", "arbitrary_local_name"],
)
async def test_model_is_echoed(backend: Client, model: str) -> None:
    request = {**_chat(SHOWCASE.prompt), "model": model}
    plain = await (await backend.post("/v1/chat/completions", json=request)).json()
    streamed = await backend.post("/v1/chat/completions", json={**request, "stream": True})
    assert plain["model"] == model
    assert {chunk["model"] for chunk in _sse_payloads(await streamed.text())} == {model}


async def test_models_endpoint_speaks_the_sdk(backend: Client) -> None:
    async with openai.AsyncOpenAI(
        base_url=str(backend.make_url("/v1")), api_key="x", max_retries=0
    ) as sdk:
        listed = [model.id async for model in sdk.models.list()]
        assert listed == ["gradeproxy-demo", "gradeproxy-demo-mini"]
        assert (await sdk.models.retrieve("gradeproxy-demo")).id == "gradeproxy-demo"
        with pytest.raises(openai.NotFoundError):
            await sdk.models.retrieve("no-such-model")


# --------------------------------------------------------------------------- recognition
OTHER = BY_ID["payments.unit_changed.01"]


@pytest.mark.parametrize(
    ("messages", "task"),
    [
        pytest.param([{"role": "user", "content": SHOWCASE.prompt}], SHOWCASE, id="exact_prompt"),
        pytest.param(
            [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": [{"type": "text", "text": SHOWCASE.prompt}]},
            ],
            SHOWCASE,
            id="prompt_as_content_parts",
        ),
        pytest.param(
            [{"role": "user", "content": f"Run demo task {SHOWCASE.id} please."}],
            SHOWCASE,
            id="message_naming_task_id",
        ),
        pytest.param(
            [
                {"role": "user", "content": OTHER.prompt},
                {"role": "assistant", "content": "Which payment?"},
                {"role": "user", "content": SHOWCASE.prompt},
            ],
            SHOWCASE,
            id="last_user_message_wins",
        ),
        pytest.param(
            [{"role": "user", "content": SHOWCASE.prompt + " "}], None, id="near_prompt_is_unknown"
        ),
        pytest.param([{"role": "user", "content": "Tell me a joke."}], None, id="unknown_prompt"),
        pytest.param(
            [
                {"role": "user", "content": SHOWCASE.prompt},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "create_event", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
            ],
            None,
            id="tool_result_turn_gets_text",
        ),
    ],
)  # fmt: skip
async def test_task_is_recognised_from_the_conversation(
    backend: Client, messages: list[dict[str, Any]], task: DemoTask | None
) -> None:
    request = {"model": "gradeproxy-demo", "messages": messages}
    body = await (await backend.post("/v1/chat/completions", json=request)).json()
    message = body["choices"][0]["message"]
    if task is not None:
        assert message == planned_message(task, 0)
    else:
        assert "tool_calls" not in message
        assert isinstance(message["content"], str)
        assert message["content"]
        assert body["choices"][0]["finish_reason"] == "stop"
        # Unrecognised turns never advance a task's answer sequence.
        again = await backend.post("/v1/chat/completions", json=_chat(SHOWCASE.prompt))
        assert (await again.json())["choices"][0]["message"] == planned_message(SHOWCASE, 0)


# --------------------------------------------------------------------------- determinism
_CREATED = re.compile(rb'"created":\d+')


async def _replay(client: Client, requests: Sequence[dict[str, Any]]) -> list[bytes]:
    bodies = []
    for request in requests:
        response = await client.post("/v1/chat/completions", json=request)
        bodies.append(_CREATED.sub(b'"created":0', await response.read()))
    return bodies


async def test_two_instances_send_identical_bytes(aiohttp_client: AiohttpClient) -> None:
    requests = [
        _chat(task.prompt, **extra)
        for task in TASKS[::7]
        for extra in (
            {},
            {"stream": True},
            {"n": 2},
            {"stream": True, "n": 2, "stream_options": {"include_usage": True}},
        )
    ] + [_chat("Tell me a joke."), _chat("Tell me a joke.", stream=True)]
    first = await aiohttp_client(make_demo_backend(SAMPLE_TASKS_PATH))
    second = await aiohttp_client(make_demo_backend(SAMPLE_TASKS_PATH))
    assert await _replay(first, requests) == await _replay(second, requests)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param"),
    [
        pytest.param("POST", "/v1/chat/completions", b"{not json", 400, None, id="invalid_json"),
        pytest.param("POST", "/v1/chat/completions", b"[]", 400, None, id="body_not_object"),
        pytest.param(
            "POST", "/v1/chat/completions", b'{"messages":[{"role":"user","content":"hi"}]}',
            400, "model", id="missing_model",
        ),
        pytest.param(
            "POST", "/v1/chat/completions", b'{"model":"m"}', 400, "messages",
            id="missing_messages",
        ),
        pytest.param(
            "POST", "/v1/chat/completions", b'{"model":"m","messages":[]}', 400, "messages",
            id="empty_messages",
        ),
        pytest.param(
            "POST", "/v1/chat/completions", b'{"model":"m","messages":[{"content":"hi"}]}',
            400, "messages[0].role", id="message_without_role",
        ),
        pytest.param(
            "POST", "/v1/chat/completions",
            b'{"model":"m","n":0,"messages":[{"role":"user","content":"hi"}]}',
            400, "n", id="zero_choices",
        ),
        pytest.param(
            "POST", "/v1/chat/completions",
            b'{"model":"m","n":true,"messages":[{"role":"user","content":"hi"}]}',
            400, "n", id="boolean_choices",
        ),
        pytest.param(
            "POST", "/v1/chat/completions",
            b'{"model":"m","stream":"yes","messages":[{"role":"user","content":"hi"}]}',
            400, "stream", id="non_boolean_stream",
        ),
        pytest.param(
            "POST", "/v1/chat/completions",
            b'{"model":"error-503","messages":[{"role":"user","content":"hi"}]}',
            503, None, id="simulated_server_error",
        ),
        pytest.param(
            "POST", "/v1/chat/completions",
            b'{"model":"error-429","messages":[{"role":"user","content":"hi"}]}',
            429, None, id="simulated_rate_limit",
        ),
        pytest.param("POST", "/v1/embeddings", b"{}", 404, None, id="unknown_route"),
        pytest.param("GET", "/v1/chat/completions", b"", 405, None, id="wrong_method"),
    ],
)  # fmt: skip
async def test_errors_use_openai_error_shape(
    backend: Client, method: str, path: str, body: bytes, status: int, param: str | None
) -> None:
    response = await backend.request(
        method, path, data=body, headers={"Content-Type": "application/json"}
    )
    assert response.status == status
    assert response.content_type == "application/json"
    payload = await response.json()
    assert set(payload) == {"error"}
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    assert error["type"] == ("server_error" if status >= 500 else error["type"])
    assert isinstance(error["type"], str)
    assert error["param"] == param


@pytest.mark.parametrize(
    ("status", "exception"),
    [
        pytest.param(429, openai.RateLimitError, id="rate_limit_maps_to_sdk_error"),
        pytest.param(500, openai.InternalServerError, id="server_error_maps_to_sdk_error"),
        pytest.param(401, openai.AuthenticationError, id="bad_key_maps_to_sdk_error"),
    ],
)
async def test_simulated_errors_reach_the_sdk_typed(
    backend: Client, status: int, exception: type[openai.APIStatusError]
) -> None:
    async with openai.AsyncOpenAI(
        base_url=str(backend.make_url("/v1")), api_key="x", max_retries=0
    ) as sdk:
        with pytest.raises(exception) as caught:
            await sdk.chat.completions.create(
                model=f"error-{status}", messages=[{"role": "user", "content": "hi"}]
            )
    assert caught.value.status_code == status


# --------------------------------------------------------------------------- loading
_GOOD = {
    "id": "a.field_renamed.01",
    "prompt": "Do a.",
    "tools": [],
    "expected": {"name": "f", "arguments": {"x": 1}},
    "metadata": {"stale": {"name": "f", "arguments": {"y": 1}}, "mutationKind": "field_renamed"},
}


def _line(**changes: Any) -> str:
    return json.dumps({**_GOOD, **changes})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "no tasks", id="empty_file"),
        pytest.param("{oops\n", "not valid JSON", id="broken_line"),
        pytest.param(_line().replace("1}", "NaN}", 1), "not valid JSON", id="nan_is_not_json"),
        pytest.param(
            _line() + "\n" + _line(prompt="Other."), "duplicate task id", id="duplicate_id"
        ),
        pytest.param(_line() + "\n" + _line(id="b.x.01"), "repeats", id="duplicate_prompt"),
        pytest.param(_line(expected={"name": "f"}), "arguments", id="expected_without_arguments"),
        pytest.param(_line(metadata={}), "metadata.stale", id="missing_stale"),
        pytest.param(
            _line(expected={"name": "f", "arguments": {"x": 2**70}}),
            "cannot be served",
            id="integer_beyond_64_bits",
        ),
    ],
)
def test_loader_rejects_unservable_task_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(text, "utf-8")
    with pytest.raises(ValueError, match=re.escape(message)):
        load_demo_tasks(path)


def test_loader_accepts_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n" + _line() + "\n\n", "utf-8")
    assert [task.id for task in load_demo_tasks(path)] == ["a.field_renamed.01"]
