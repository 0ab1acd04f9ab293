"""The Responses API fixtures, proved with the official ``openai`` SDK's own parser.

They are written from the API reference (tests/support/responses_wire.py), so these tests are what
makes them trustworthy: every body and event validates against the SDK's types, the SDK's
stream accumulator (``client.responses.stream``) accepts each stream, and the final object of
a streamed ``client.responses.create`` equals the non-streamed one, also when the terminal
event leaves ``output`` out and the SDK must rebuild it from the item events.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.support import responses_wire as rw
from tests.support.paths import WIRE

PAIRED = [name for name, case in rw.CASES.items() if case.status != "failed"]
EVENT = TypeAdapter(ResponseStreamEvent)
REQUEST: dict[str, Any] = {"model": rw.MODEL, "input": "Weather in Zürich?"}


def client_for(payload: bytes, stream: bool) -> openai.OpenAI:
    """An SDK client whose transport answers every request with ``payload``."""

    def handler(request: httpx.Request) -> httpx.Response:
        kind = "text/event-stream" if stream else "application/json"
        return httpx.Response(200, content=payload, headers={"content-type": kind})

    transport = httpx.MockTransport(handler)
    return openai.OpenAI(
        base_url="http://test/v1",
        api_key="sk-test",
        max_retries=0,
        http_client=httpx.Client(transport=transport),
    )


def without_terminal_output(case: str) -> bytes:
    """The case's stream with ``output`` dropped from its terminal event."""
    events = rw.events(rw.CASES[case])
    del events[-1]["response"]["output"]
    return rw.sse(events)


def test_committed_fixtures_are_what_the_builder_writes() -> None:
    on_disk = {p.name for p in WIRE.glob("openai_responses_*")}
    files = rw.files()
    assert on_disk == set(files)
    for name, data in files.items():
        assert (WIRE / name).read_bytes() == data, name


@pytest.mark.parametrize("name", sorted(rw.files()))
def test_every_fixture_validates_against_the_sdk_types(name: str) -> None:
    data = rw.files()[name]
    if name.endswith(".json"):
        assert Response.model_validate(json.loads(data)).object == "response"
        return
    blocks = [b for b in data.decode().split("\n\n") if b]
    for number, block in enumerate(blocks):
        event_line, data_line = block.split("\n")
        payload = json.loads(data_line.removeprefix("data: "))
        event = EVENT.validate_python(payload)
        assert (event.type, event.sequence_number) == (event_line.removeprefix("event: "), number)


@pytest.mark.parametrize("case", PAIRED)
def test_final_object_of_a_streamed_create_equals_the_non_streamed_one(case: str) -> None:
    body = client_for(rw.files()[f"openai_responses_{case}.json"], stream=False)
    streamed = client_for(rw.files()[f"openai_responses_{case}.sse"], stream=True)
    whole = body.responses.create(**REQUEST)
    events = list(streamed.responses.create(stream=True, **REQUEST))
    terminal = events[-1]
    assert terminal.type in ("response.completed", "response.incomplete")
    assert terminal.response.model_dump() == whole.model_dump()
    assert whole.status == rw.CASES[case].status


@pytest.mark.parametrize("case", [c for c in PAIRED if rw.CASES[c].status == "completed"])
@pytest.mark.parametrize("omit_output", [False, True], ids=["with_output", "output_omitted"])
def test_the_sdk_stream_accumulator_rebuilds_the_non_streamed_response(
    case: str, omit_output: bool
) -> None:
    stream = rw.files()[f"openai_responses_{case}.sse"]
    if omit_output:
        stream = without_terminal_output(case)
    body = rw.files()[f"openai_responses_{case}.json"]
    # ``parse`` is the non-streamed call that returns the same parsed type as the stream.
    expected = client_for(body, stream=False).responses.parse(**REQUEST)
    with client_for(stream, stream=True).responses.stream(**REQUEST) as events:
        final = events.get_final_response()
    assert final.model_dump() == expected.model_dump()


@pytest.mark.parametrize(
    ("name", "last_type"),
    [
        pytest.param("openai_responses_failed.sse", "response.failed", id="failed"),
        pytest.param("openai_responses_error_event.sse", "error", id="error_event"),
    ],
)
def test_the_sdk_reads_failure_streams_as_their_event(name: str, last_type: str) -> None:
    events = list(
        client_for(rw.files()[name], stream=True).responses.create(stream=True, **REQUEST)
    )
    assert events[-1].type == last_type
