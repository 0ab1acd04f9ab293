"""Capture speed: the Responses API capture against the chat completions one, same calls.

Each stream carries one call; it is fed in 64 KB chunks, as the relay hands them over. The
baseline in the same run is the SSE decoder alone on the same bytes (the floor both pay), so
the figures say what the per-event JSON and accumulation cost. A Responses stream is larger
for the same arguments (every delta names its item), so MB/s and events/s are both printed.
Run: ``python bench/capture_bench.py [--quick]``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

from _timing import timings

from grader.json import dumps
from proxy.pipeline.capture.chat import StreamCapture
from proxy.pipeline.capture.responses import ResponsesStreamCapture
from proxy.pipeline.capture.sse import SSEDecoder

CHUNK = 64 * 1024


def chat_stream(arguments: list[str]) -> bytes:
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
    events = [{"choices": [{"index": 0, "delta": {"tool_calls": [first]}}]}]
    for piece in arguments:
        call = {"index": 0, "function": {"arguments": piece}}
        events.append({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    events.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    body = b"".join(b"data: " + dumps(e) + b"\n\n" for e in events)
    return body + b"data: [DONE]\n\n"


def responses_stream(arguments: list[str]) -> bytes:
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "f"}
    done = {**call, "status": "completed", "arguments": "".join(arguments)}
    started = {"id": "resp_1", "object": "response", "model": "m", "status": "in_progress"}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**started, "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": call},
    ]
    for piece in arguments:
        delta = {"item_id": "fc_1", "output_index": 0, "delta": piece}
        events.append({"type": "response.function_call_arguments.delta", **delta})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": done})
    final = {**started, "status": "completed", "output": [done]}
    events.append({"type": "response.completed", "response": final})
    return b"".join(
        b"event: " + str(e["type"]).encode() + b"\ndata: " + dumps(e) + b"\n\n" for e in events
    )


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def decode_only(parts: list[bytes]) -> None:
    decoder = SSEDecoder()
    for part in parts:
        decoder.feed(part)
    decoder.close()


def chat(parts: list[bytes]) -> None:
    capture = StreamCapture()
    for part in parts:
        capture.feed(part)
    assert capture.finish().error is None


def responses(parts: list[bytes]) -> None:
    capture = ResponsesStreamCapture()
    for part in parts:
        capture.feed(part)
    assert capture.finish().error is None


def best_of(run: Callable[[list[bytes]], None], parts: list[bytes], repeats: int) -> float:
    times = timings(partial(run, parts), repeats)
    return min(times) if repeats < 5 else statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 9
    sizes = {"300 B arguments": 300, "100 KB arguments": 100_000, "1 MB arguments": 1_000_000}
    print(f"{'stream':<40} {'bytes':>10} {'events':>8} {'ms':>9} {'MB/s':>8} {'kev/s':>8}")
    for label, size in sizes.items():
        text = ('{"note":"' + "x" * size)[:size] + '"}'
        pieces = [text[i : i + 4] for i in range(0, len(text), 4)]
        for api, data, run in (
            ("chat", chat_stream(pieces), chat),
            ("responses", responses_stream(pieces), responses),
        ):
            parts = chunks(data)
            events = data.count(b"\n\n")
            for name, fn in ((f"{api} SSE decode only", decode_only), (f"{api} capture", run)):
                seconds = best_of(fn, parts, repeats)
                print(
                    f"{label + ', ' + name:<40} {len(data):>10} {events:>8} "
                    f"{seconds * 1000:>9.2f} {len(data) / seconds / 1e6:>8.1f} "
                    f"{events / seconds / 1000:>8.1f}"
                )


if __name__ == "__main__":
    main()
