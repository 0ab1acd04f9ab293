"""Per-request cost of the request guard and the capture copy, in-process (no sockets).

The hardening added work to every request: the target check, the inbound-key comparison, the
trace-header validation, the watchdog's bookkeeping per received chunk and the capture copy.
End-to-end figures (bench/perf.py) on a shared two-core machine swing by more than these
costs, so this measures each piece alone, in microseconds per call.

Run: ``python bench/guard_bench.py``.
"""

from __future__ import annotations

import asyncio
import gzip
import timeit
from collections.abc import Callable

from aiohttp.test_utils import make_mocked_request

from proxy.config import Client
from proxy.pipeline.decoding import CaptureBuffer
from proxy.pipeline.guard import Guard, dot_segment
from proxy.pipeline.watchdog import Watchdog, _Watched
from proxy.telemetry.tracecontext import trace_context

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
BODY = b'{"id":"x","choices":[{"index":0,"message":{"content":"' + b"a" * 1000 + b'"}}]}'


def per_call_us(fn: Callable[[], object], number: int = 20000) -> float:
    best = min(timeit.repeat(fn, number=number, repeat=5))
    return best / number * 1e6


class _Inner:
    def data_received(self, data: bytes) -> None:
        pass


async def watched_chunk_us() -> float:
    watchdog = Watchdog(Client(), lambda _phase: None)
    wrapped = _Watched(_Inner(), watchdog)  # type: ignore[arg-type]
    return per_call_us(lambda: wrapped.data_received(b"x"))


def main() -> None:
    keyed = Guard(("k-one", "k-two"), True, 1 << 26, None)
    request = make_mocked_request(
        "POST", "/v1/chat/completions", headers={"Authorization": "Bearer k-two"}
    )
    plain_headers = {"content-type": "application/json"}
    traced = {"traceparent": PARENT, "tracestate": "rojo=00f067aa0ba902b7"}
    gz = gzip.compress(BODY)
    rows = [
        ("dot_segment, /v1/chat/completions", lambda: dot_segment("/v1/chat/completions")),
        ("dot_segment, /v1/files/a.b%20c", lambda: dot_segment("/v1/files/a.b%20c")),
        ("trace_context, no trace headers", lambda: trace_context(plain_headers)),
        ("trace_context, traceparent + tracestate", lambda: trace_context(traced)),
        ("inbound key check, 2 keys", lambda: keyed._authorise(request)),
        ("capture copy, 1 KB identity", lambda: CaptureBuffer(None, 1 << 24).add(BODY)),
        ("capture copy, 1 KB gzip", lambda: CaptureBuffer("gzip", 1 << 24).add(gz)),
    ]
    print("per-request cost of the hardening, best of 5, microseconds per call")
    for name, fn in rows:
        print(f"  {name:42} {per_call_us(fn):7.2f} us")
    chunk = asyncio.run(watched_chunk_us())
    print(f"  {'watchdog bookkeeping, per received chunk':42} {chunk:7.2f} us")


if __name__ == "__main__":
    main()
