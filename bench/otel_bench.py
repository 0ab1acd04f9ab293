"""OpenTelemetry export's cost: the SDK's work per span, then the proxy with export off and on.

Part 1 (in this process): building one request's two spans from its record and rows, then
encoding them as the OTLP exporter does (protobuf), per span, with and without evaluation
events, and what the event loop pays per request (``begin`` and ``Telemetry.finish``).

Part 2 (subprocesses, as bench/ab.py): three ``gradeproxy serve`` at once, every response graded,
each pinned to the same core (the fake backend, wrk and a local OTLP/HTTP sink that answers 200
on the other): tracing off, on at ``sample_ratio`` 1.0, and on at the default ratio (read from
proxy/config/tracing.py). They are loaded in turn, round after round, the order rotated
each round (A,B,C / B,C,A / C,A,B ...), so drift on a shared machine falls on all three. Each
run gives throughput and p50/p99 latency, and the steadier figure: CPU time per request of the
subject (schedstat nanoseconds of its threads and processes over the requests wrk completed),
read once the grade queue is empty and the export queue drained, so grading and the export
thread's building, encoding and sending are all counted. On one core, throughput is its inverse.
Each round then loads all three at once as well (``--no-together`` skips it), as bench/ab.py's
``--together``: sharing the core at the same instants, a neighbour's load falls on each alike,
so their CPU ratio is the steadiest figure on a shared machine, and the verdict's.

The goal (issue 20): at most 5% throughput cost with export on; a verdict line per sampling
ratio (met: the CPU ratio off/on at the most connections >= 0.95, and no span dropped). Any figure that cannot be produced (a subject that does not start, a wrk run with errors,
a queue that does not drain) exits non-zero.

Run: ``python bench/otel_bench.py [--seconds 5] [--rounds 5]`` (needs wrk and the ``otel`` extra).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _perf_load import (  # noqa: E402
    BODY,
    CPUS,
    GRADED,
    LOAD_CPUS,
    SUBJECT_CPU,
    TASK,
    Load,
    StartError,
    cpu_s,
    free_port,
    lua_script,
    metric_sum,
    started,
    wait_queue_empty,
    wrk,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import (  # noqa: E402
    encode_spans as sdk_encode_spans,
)
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: E402

from proxy.telemetry import Tracing, begin  # noqa: E402
from proxy.telemetry.export import Telemetry  # noqa: E402
from proxy.telemetry.otlp import encode_spans  # noqa: E402
from proxy.telemetry.record import SpanRecord  # noqa: E402
from proxy.telemetry.spans import build  # noqa: E402

DEFAULT = Tracing()  # the shipped defaults: sample_ratio, schedule_delay_s
GOAL = 0.95  # throughput with export on / off (issue 20: at most 5% cost)

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


def _record() -> SpanRecord:
    record = begin(None, 1.0)[1]
    assert record is not None  # a ratio of 1 samples every request
    record.method, record.path, record.route = "POST", "/v1/chat/completions", "chat_completions"
    record.request_id, record.upstream = "r" * 32, "http://127.0.0.1:9/v1"
    record.request_body, record.status = BODY.encode(), 200
    record.upstream_started = record.started + 0.0001
    record.upstream_finished = record.finished = record.started + 0.001
    record.task_id = "bench.weather"
    return record


def _per_span_us(seconds: float, spans: int) -> float:
    return 1e6 * seconds / spans


def per_span(samples: int) -> None:
    """CPU time (``process_time``), not wall time: a neighbour's load stretches the wall clock.

    Both encoders on the same spans: the SDK's (``encode_spans`` then ``SerializeToString``)
    and the proxy's (proxy/telemetry/otlp.py, the one the exporter uses), whose bytes are the
    same (tests/proxy/telemetry/test_otlp.py)."""
    settings = Tracing(enabled=True)
    telemetry = Telemetry(settings, lambda *_: None, span_exporter=_Discard())
    resource = telemetry.resource
    graded_us = 0.0
    for label, rows in (("ungraded (no events)", None), ("graded, 2 evaluation events", [ROW])):
        records = [_record() for _ in range(samples)]
        start = time.process_time()
        built = [build(r, rows, {"id": "chatcmpl-1"}, settings, resource)[0] for r in records]
        build_s = time.process_time() - start
        spans = [span for pair in built for span in pair]
        n = len(spans)
        encode_s: dict[str, float] = {}
        for name, encode in (
            ("SDK", lambda part: sdk_encode_spans(part).SerializeToString()),
            ("ours", encode_spans),
        ):
            start = time.process_time()
            for offset in range(0, n, 512):
                encode(spans[offset : offset + 512])
            encode_s[name] = time.process_time() - start
        build_us, sdk_us, ours_us = (
            _per_span_us(s, n) for s in (build_s, encode_s["SDK"], encode_s["ours"])
        )
        graded_us = 2 * (build_us + ours_us)  # the last: graded, with its events
        print(
            f"  {label:<28} build {build_us:6.1f} us/span   encode: SDK {sdk_us:6.1f}, ours"
            f" {ours_us:5.1f} us/span ({sdk_us / ours_us:.1f}x)   build + ours"
            f" {2 * (build_us + ours_us):6.1f} us/request (with the SDK's {2 * (build_us + sdk_us):6.1f})"
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
        f"  on the event loop, a sampled request: begin {1e6 * ids / samples:.2f} us"
        f" + finish {1e6 * hot / samples:.2f} us"
    )
    headers = CIMultiDict({"content-type": "application/json", "authorization": "Bearer k"})
    start = time.process_time()
    for _ in range(samples):  # what the handler does with an unsampled one: no record
        headers["traceparent"], _ = begin(None, 0.0)
        if "tracestate" in headers:
            del headers["tracestate"]
    unsampled = 1e6 * (time.process_time() - start) / samples
    ratio = DEFAULT.sample_ratio
    print(
        f"  an unsampled request (its ids and upstream traceparent): {unsampled:.2f} us;"
        f" at the default sample_ratio {ratio:g}: {ratio * graded_us + (1 - ratio) * unsampled:.1f} us"
        " per graded request on average (the sampled share's build and encode, the rest's path)"
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


class FigureError(RuntimeError):
    """A run that cannot give a valid figure (errors, a queue that does not drain)."""


@dataclass(frozen=True)
class Run:
    load: Load
    cpu_us: float  # the subject's CPU time per completed request
    dropped: float  # spans the exporter dropped during the run (queue full, export failed)


def _traced(port: int) -> float:
    return metric_sum(port, "gradeproxy_trace_exported_total") + metric_sum(
        port, "gradeproxy_trace_dropped_total"
    )


def drained(port: int, timeout_s: float = 60.0) -> float:
    """Wait until the exporter has settled every span (exported or dropped): two readings one
    batch delay apart that agree, once the grade queue is empty (every request then sits in the
    export queue or has left it). The same readings for the run with tracing off, so every
    subject answers the same scrapes. The dropped count so far."""
    if not wait_queue_empty(port, timeout_s):
        raise FigureError(f"port {port}: the grade queue did not empty in {timeout_s:.0f} s")
    deadline = time.monotonic() + timeout_s
    last = _traced(port)
    while time.monotonic() < deadline:
        time.sleep(DEFAULT.schedule_delay_s + 0.25)
        now = _traced(port)
        if now == last:
            return metric_sum(port, "gradeproxy_trace_dropped_total")
        last = now
    raise FigureError(f"port {port}: the export queue did not drain in {timeout_s:.0f} s")


def measure(port: int, pid: int, script: Path, conns: int, seconds: int) -> Run:
    dropped = metric_sum(port, "gradeproxy_trace_dropped_total")
    before = cpu_s([pid])
    load = wrk(port, conns, seconds, script, LOAD_CPUS, 1)
    dropped = drained(port) - dropped
    spent = cpu_s([pid]) - before
    if load.errors or not load.requests:
        raise FigureError(
            f"port {port}, {conns} conn: {load.requests} requests, {load.non_2xx} non-2xx,"
            f" {load.socket_errors} socket errors ({load.timeouts} timeouts)"
        )
    return Run(load, 1e6 * spent / load.requests, dropped)


def variants() -> dict[str, str]:
    """Each subject's ``tracing`` section (the sink's port filled in later)."""
    default = DEFAULT.sample_ratio
    on = "tracing:\n  enabled: true\n  endpoint: http://127.0.0.1:{sink}\n"
    return {
        "off": "",
        "on 100%": on + "  sample_ratio: 1.0\n",
        f"on {default:g} (default)": on + f"  sample_ratio: {default}\n",
    }


Runs = dict[str, dict[int, list[Run]]]  # variant -> connections -> one Run per round


def proxy_runs(args: argparse.Namespace) -> tuple[Runs, Runs]:
    """Every subject started once, then loaded in turn, the order rotated each round; with
    ``--together``, each round then loads all of them at once as well (bench/ab.py's mode):
    sharing the core at the same instants, whatever else the machine runs falls on each alike."""
    conns = [int(c) for c in args.conns.split(",")]
    got: Runs = {name: {c: [] for c in conns} for name in variants()}
    together: Runs = {name: {c: [] for c in conns} for name in variants()}
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gp-otel-")))
        (work / "tasks.jsonl").write_text(TASK)
        script = lua_script(work, "graded", GRADED)
        backend_port, sink_port = free_port(), free_port()
        backend = [sys.executable, str(REPO / "bench" / "_servers.py"), "backend"]
        sink = [sys.executable, __file__, "--serve-sink", str(sink_port)]
        for argv, port in (([*backend, str(backend_port)], backend_port), (sink, sink_port)):
            stack.enter_context(started(argv, port, work / f"{port}.log", LOAD_CPUS))
        subjects: dict[str, tuple[int, int]] = {}
        for number, (name, tracing) in enumerate(variants().items()):
            port = free_port()
            config = work / f"subject{number}.yaml"
            config.write_text(
                f"upstream:\n  url: http://127.0.0.1:{backend_port}/v1\nlisten:\n  port: {port}\n"
                f"tasks:\n  path: {work / 'tasks.jsonl'}\n"
                f"results:\n  path: {work / f'grades{number}.jsonl'}\n"
                "logging:\n  level: info\nshutdown:\n  drain_delay_s: 0\n"
                + tracing.format(sink=sink_port)
            )
            argv = [sys.executable, "-m", "gradeproxy.cli", "serve", "--config", str(config)]
            child = started(argv, port, work / f"subject{number}.log", str(SUBJECT_CPU))
            subjects[name] = (port, stack.enter_context(child).pid)
        order = list(subjects.items())
        for name, (port, pid) in order:  # warm: the grading process started, code paths hot
            for attempt in range(3):  # a subject just started may stall its first second
                try:
                    measure(port, pid, script, max(conns), 2)
                    break
                except FigureError as error:
                    if attempt == 2:
                        raise FigureError(f"{name} (warm-up): {error}") from None
        for number in range(args.rounds):
            shift = number % len(order)
            for name, (port, pid) in order[shift:] + order[:shift]:
                for conn in conns:
                    try:
                        got[name][conn].append(measure(port, pid, script, conn, args.seconds))
                    except FigureError as error:
                        raise FigureError(f"{name}, round {number + 1}: {error}") from None
            if args.together:
                for conn in conns:
                    with concurrent.futures.ThreadPoolExecutor(len(order)) as pool:
                        futures = {
                            name: pool.submit(measure, port, pid, script, conn, args.seconds)
                            for name, (port, pid) in order
                        }
                        for name, future in futures.items():
                            try:
                                together[name][conn].append(future.result())
                            except FigureError as error:
                                raise FigureError(f"{name}, together: {error}") from None
    return got, together


def _ratio(off: list[Run], on: list[Run]) -> tuple[float, str]:
    """The median of the rounds' CPU ratios off/on, and the rounds' own."""
    ratios = [a.cpu_us / b.cpu_us for a, b in zip(off, on, strict=True)]
    return statistics.median(ratios), ", ".join(f"{r:.3f}" for r in ratios)


def report(got: Runs, together: Runs, rounds: int) -> None:
    print(
        f"{'':<18} {'conn':>4} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/req':>11}"
        f" {'spans dropped':>14}   (each loaded alone; medians of {rounds} rounds)"
    )
    for name, by_conn in got.items():
        for conn, runs in by_conn.items():
            print(
                f"{name:<18} {conn:>4} {statistics.median(r.load.rps for r in runs):>9,.0f}"
                f" {statistics.median(r.load.p50_ms for r in runs):>8.3f}"
                f" {statistics.median(r.load.p99_ms for r in runs):>8.3f}"
                f" {statistics.median(r.cpu_us for r in runs):>11.0f}"
                f" {sum(r.dropped for r in runs):>14.0f}"
            )
    print(
        "\nagainst off, medians of the rounds' ratios (CPU per request off/on: the throughput"
        " one core allows; 'together': all three loaded at once, the steadiest):"
    )
    verdicts = []
    for name, by_conn in got.items():
        if name == "off":
            continue
        for conn, runs in by_conn.items():
            pairs = list(zip(got["off"][conn], runs, strict=True))
            cpu, spread = _ratio(got["off"][conn], runs)
            rps = statistics.median(b.load.rps / a.load.rps for a, b in pairs)
            p50 = statistics.median(b.load.p50_ms - a.load.p50_ms for a, b in pairs)
            p99 = statistics.median(b.load.p99_ms - a.load.p99_ms for a, b in pairs)
            print(
                f"  {name:<18} {conn:>2} conn: req/s {rps:.3f}   added p50 {p50:+.3f} ms,"
                f" p99 {p99:+.3f} ms   CPU alone {cpu:.3f} (rounds: {spread})"
            )
            dropped = sum(r.dropped for r in runs)
            figure = f"CPU per request off/on, alone, {cpu:.3f}"
            if together[name][conn]:
                both, spread = _ratio(together["off"][conn], together[name][conn])
                dropped += sum(r.dropped for r in together[name][conn])
                print(f"  {'':<18} {'':>2}       CPU together {both:.3f} (rounds: {spread})")
                cpu, figure = both, f"CPU per request off/on, together, {both:.3f}"
            if conn == max(by_conn):
                met = cpu >= GOAL and not dropped  # req/s: the same, far noisier when shared
                verdicts.append(
                    f"goal <= 5% throughput cost, {name}: {'met' if met else 'NOT MET'}"
                    f" ({figure} at {conn} conn, goal >= {GOAL}; req/s on/off {rps:.3f};"
                    f" {dropped:.0f} spans dropped)"
                )
    print("\n" + "\n".join(verdicts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5, help="per wrk run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--conns", default="1,16", help="wrk connections (the last: the verdict)")
    parser.add_argument("--samples", type=int, default=20000, help="requests for part 1")
    parser.add_argument("--serve-sink", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--spans-only", action="store_true", help="part 1 only (no wrk needed)")
    parser.add_argument(
        "--together",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each round also loads all three at once (the verdict's figure)",
    )
    args = parser.parse_args()
    if args.serve_sink:
        sink_main(args.serve_sink)
        return 0
    print(
        f"OpenTelemetry export benchmark: {CPUS} CPUs\n\nSDK cost per span ({args.samples} requests):"
    )
    per_span(args.samples)
    if args.spans_only:
        return 0
    print(
        f"\nthe proxy, every response graded, wrk {args.seconds} s per run, {args.rounds} rounds,"
        f" the subjects on CPU {SUBJECT_CPU}, backend, wrk and the OTLP sink on CPU {LOAD_CPUS}:"
    )
    try:
        got, together = proxy_runs(args)
    except (StartError, FigureError, ValueError, OSError) as error:
        print(f"no figure: {error}", file=sys.stderr)
        return 1
    report(got, together, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
