"""OpenTelemetry export's cost: the SDK's work per span, then the proxy with export on vs off.

Part 1 (in this process): building one request's two spans from its record and rows, then
encoding them as the OTLP exporter does (protobuf), per span, with and without evaluation
events, and ``Telemetry.finish`` (what the event loop pays per request: one ``put_nowait``).

Part 2 (subprocesses, as bench/proxy_bench.py: wrk in its own process, the proxy on a CPU of its
own, backend, wrk and the OTLP sink on the other): gradeproxy with every response graded and
``tracing`` off, then on at 100% sampling exporting to a local OTLP/HTTP sink that answers 200,
in one run; throughput and p50/p99 latency with the on/off ratios.

Run: ``python bench/otel_bench.py [--seconds 5]`` (needs wrk and the ``otel`` extra).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402
from proxy_bench import BODY, CPUS, TASK, free_port, pinned, server, wrk  # noqa: E402

from proxy.telemetry import Tracing, begin  # noqa: E402
from proxy.telemetry.export import Telemetry  # noqa: E402
from proxy.telemetry.spans import build  # noqa: E402

ROW: dict[str, Any] = {
    "kind": "answer",
    "model": "bench-model",
    "choice": 0,
    "finish_reason": "tool_calls",
    "checks": [
        {
            "name": "tool_call",
            "passed": False,
            "score": None,
            "reason": "value differs",
            "reason_code": "value_mismatch",
            "details": {"path": "arguments.unit"},
        },
        {"name": "schema", "passed": True, "score": None, "reason": "", "reason_code": "ok"},
    ],
}


def _record() -> Any:
    record = begin(None, 1.0)
    record.method, record.path, record.route = "POST", "/v1/chat/completions", "chat_completions"
    record.request_id, record.upstream = "r" * 32, "http://127.0.0.1:9/v1"
    record.request_body, record.status = BODY.encode(), 200
    record.upstream_started = record.started + 0.0001
    record.upstream_finished = record.finished = record.started + 0.001
    record.task_id = "bench.weather"
    return record


def per_span(samples: int) -> None:
    """CPU time (``process_time``), not wall time: a neighbour's load stretches the wall clock."""
    settings = Tracing(enabled=True)
    telemetry = Telemetry(settings, lambda *_: None, span_exporter=_Discard())
    resource = telemetry.resource
    for label, rows in (("ungraded (no events)", None), ("graded, 2 evaluation events", [ROW])):
        records = [_record() for _ in range(samples)]
        start = time.process_time()
        built = [build(r, rows, {"id": "chatcmpl-1"}, settings, resource)[0] for r in records]
        build_s = time.process_time() - start
        spans = [span for pair in built for span in pair]
        start = time.process_time()
        for offset in range(0, len(spans), 512):
            encode_spans(spans[offset : offset + 512]).SerializeToString()
        encode_s = time.process_time() - start
        n = len(spans)
        print(
            f"  {label:<28} build {1e6 * build_s / n:6.1f} us/span   encode {1e6 * encode_s / n:6.1f} us/span"
            f"   total {1e6 * (build_s + encode_s) / n:6.1f} us/span ({2e6 * (build_s + encode_s) / n:6.1f} us/request)"
        )
    records = [_record() for _ in range(samples)]
    quiet = Telemetry(
        Tracing(enabled=True, max_queue_size=samples + 1), lambda *_: None, span_exporter=_Discard()
    )
    start = time.process_time()
    for record in records:
        quiet.finish(record, [ROW])
    hot = time.process_time() - start
    start = time.process_time()
    for _ in range(samples):
        begin(None, 1.0)
    ids = time.process_time() - start
    print(
        f"  on the event loop: begin {1e6 * ids / samples:.2f} us + finish {1e6 * hot / samples:.2f} us per request"
    )


class _Discard(SpanExporter):
    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def sink_main(port: int) -> None:
    """An OTLP/HTTP receiver that reads each request and answers 200 (the benchmark's sink)."""

    async def accept(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/traces", accept)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc): unlike throughput, barely
    moved by the neighbours' load on a shared machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def proxy_process(argv: list[str], port: int) -> Iterator[int]:
    """The proxy pinned to CPU 1 (its export thread with it); yields its pid."""
    process = subprocess.Popen(
        pinned(1, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{argv} did not start") from None
                time.sleep(0.05)
        time.sleep(0.3)
        yield process.pid
    finally:
        process.terminate()
        process.wait(20)


def proxy_runs(seconds: int, rounds: int, ratios: list[float]) -> None:
    """Off and on (at each sampling ratio) in turn, ``rounds`` times: the ratios are per round,
    so a neighbour's load that comes and goes touches both sides of one ratio alike."""
    work = Path(tempfile.mkdtemp(prefix="gradeproxy-otel-bench-"))
    script = work / "post.lua"
    escaped = BODY.replace('"', '\\"')
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = "{escaped}"\n'
        'wrk.headers["Content-Type"] = "application/json"\nwrk.headers["X-Grade-Task"] = "bench.weather"\n'
    )
    (work / "tasks.jsonl").write_text(TASK)
    backend_port, sink_port, proxy_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{backend_port}/v1"
    servers = REPO / "bench" / "_servers.py"
    base = (
        f"upstream:\n  url: {upstream}\nlisten:\n  port: {proxy_port}\n"
        f"tasks:\n  path: {work / 'tasks.jsonl'}\nresults:\n  path: {work / 'results.jsonl'}\n"
        "logging:\n  level: info\nshutdown:\n  drain_delay_s: 0\n"
    )
    configs = {"off": base}
    for ratio in ratios:
        configs[f"on {ratio:.0%}"] = base + (
            f"tracing:\n  enabled: true\n  sample_ratio: {ratio}\n"
            f"  endpoint: http://127.0.0.1:{sink_port}\n"
        )
    results: dict[str, dict[int, list[dict[str, float]]]] = {
        name: {1: [], 16: []} for name in configs
    }
    with (
        server([sys.executable, str(servers), "backend", str(backend_port)], backend_port, 0),
        server([sys.executable, __file__, "--serve-sink", str(sink_port)], sink_port, 0),
    ):
        for _ in range(rounds):
            for name, text in configs.items():
                config = work / f"{name.replace(' ', '-').replace('%', '')}.yaml"
                config.write_text(text)
                argv = [sys.executable, "-m", "grader.cli", "serve", "--config", str(config)]
                with proxy_process(argv, proxy_port) as pid:
                    url = f"http://127.0.0.1:{proxy_port}/v1/chat/completions"
                    for conn in (1, 16):
                        before = cpu_seconds(pid)
                        run = wrk(url, conn, seconds, script, 0)
                        run["cpu_us"] = 1e6 * (cpu_seconds(pid) - before) / (run["rps"] * seconds)
                        results[name][conn].append(run)
    print(
        f"{'':<10} {'conn':>4} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/req':>11}"
        f"   (medians of {rounds} rounds)"
    )
    for name, by_conn in results.items():
        for conn, runs in by_conn.items():
            keys = ("rps", "p50_ms", "p99_ms", "cpu_us")
            med = {k: statistics.median(r[k] for r in runs) for k in keys}
            print(
                f"{name:<10} {conn:>4} {med['rps']:>9,.0f} {med['p50_ms']:>8.3f} {med['p99_ms']:>8.3f}"
                f" {med['cpu_us']:>11.0f}"
            )
    print()
    off = results["off"]
    for name in configs:
        if name == "off":
            continue
        for conn in (1, 16):
            pairs = list(zip(off[conn], results[name][conn], strict=True))
            ratio = statistics.median(b["rps"] / a["rps"] for a, b in pairs)
            p50 = statistics.median(b["p50_ms"] - a["p50_ms"] for a, b in pairs)
            p99 = statistics.median(b["p99_ms"] - a["p99_ms"] for a, b in pairs)
            spread = ", ".join(f"{b['rps'] / a['rps']:.2f}" for a, b in pairs)
            cpu = statistics.median(a["cpu_us"] / b["cpu_us"] for a, b in pairs)
            print(
                f"throughput {name} / off at {conn:>2} conn: {ratio:.3f} (rounds: {spread})   (goal >= 0.95)"
                f"   added p50 {p50:+.3f} ms, p99 {p99:+.3f} ms\n"
                f"  CPU per request, off / {name}: {cpu:.3f} (the throughput one core allows, as a ratio)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--serve-sink", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--spans-only", action="store_true", help="part 1 only (no wrk needed)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ratios", default="1.0,0.05", help="sampling ratios with export on")
    args = parser.parse_args()
    if args.serve_sink:
        sink_main(args.serve_sink)
        return
    print(
        f"OpenTelemetry export benchmark: {CPUS} CPUs\n\nSDK cost per span ({args.samples} requests):"
    )
    per_span(args.samples)
    if not args.spans_only:
        print(
            f"\nthe proxy, every response graded, wrk {args.seconds}s per point, the proxy pinned"
            " to CPU 1, backend, wrk and the OTLP sink on CPU 0:"
        )
        proxy_runs(args.seconds, args.rounds, [float(r) for r in args.ratios.split(",")])


if __name__ == "__main__":
    main()
