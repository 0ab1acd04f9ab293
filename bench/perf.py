"""The README's performance table, every figure from one run of this command.

Subjects, each pinned to the same core while the fake backend and wrk share the rest: the
floor (bench/_servers.py's minimal aiohttp pass-through), gradeproxy with every response graded
(a task header on every request, a result row and a log line each), the same process with no
task header (forwarded only), and the same two on uvloop. Measurements are interleaved in rounds
(floor, graded, forwarded, ... at each concurrency, then again), and every ratio is the median
of the per-round ratios, so a shared machine's drift hits the floor and the subject alike. After
each graded run the grade queue is waited on until empty, so its backlog does not take the core
during the next run.

"0 errors" means no socket errors and no non-2xx in wrk's summary. "RSS flat" means under 5%
growth over 60 s of mixed traffic after warm-up (bench/soak.py). Loop lag is
bench/loop_lag_bench.py's worst adversarial case. ``--workers 1/2`` runs ``gradeproxy serve
--workers N`` against N floor processes on one port (SO_REUSEPORT), with more worker counts
where the machine has the cores. "Grading on its own core" (4+ cores) sends every graded job to
the grading process (``inline_max_bytes: 0``) and pins that process, and its fork server, to
the CPU above the subject's. LiteLLM is compared when its ``litellm`` command is found.

Exit status 1 when any figure cannot be produced (the table marks it MISSING), so the README is
never filled from an old run. ``--quick`` is for local use: shorter runs, one round, a 15 s
soak whose RSS verdict is not judged, and it says so in its header. ``--many-core`` measures
only what needs 4+ cores (1/2/4/8 workers against the floor at each count, grading on a core of
its own), in about three minutes: the command bench/device/run.sh runs on a lent machine.

Run: ``python bench/perf.py [--quick] [--many-core] [--litellm PATH]`` (needs wrk: ``apt-get
install wrk``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from _perf_figures import FigureError, Row, loop_lag, render, soak, ttfb_rows, verdict
from _perf_load import (
    CPUS,
    LOAD_CPUS,
    SUBJECT_CPU,
    Load,
    free_port,
    litellm_argv,
    metric_sum,
    started,
    tree,
)
from _perf_run import Run, has_uvloop, serve_flags

CONNS = (1, 16, 64)


def ratio(loads: dict[tuple[str, int], list[Load]], key: str, base: str, conns: int) -> float:
    pairs = zip(loads[(key, conns)], loads[(base, conns)], strict=True)
    return statistics.median(s.rps / b.rps for s, b in pairs)


def rps(loads: list[Load]) -> float:
    return statistics.median(load.rps for load in loads)


def cpu(loads: list[Load]) -> float:
    """Median CPU microseconds per request: what one core's throughput is the inverse of, and
    far steadier than req/s on a machine whose other cores are busy."""
    return statistics.median(load.cpu_us for load in loads)


def throughput(run: Run, subjects: dict[str, tuple[int, Path]], tags: list[str]) -> list[Row]:
    """Interleaved rounds over every subject at every concurrency, then the ratio rows."""
    rows: list[Row] = []
    floor_port = subjects["floor"][0]
    for _ in range(run.args.rounds):
        for conns in CONNS:
            for key, (port, script) in subjects.items():
                run.load(key, port, conns, script, script is run.graded)
        run.load("direct", run.backend_port, 1, run.plain, False)
        for key, (port, script) in subjects.items():  # each beside the floor, at the same time
            if key != "floor":
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    graded = script is run.graded  # CPU read once its grade queue is empty
                    ours = pool.submit(run.load, f"{key} beside", port, 16, script, graded)
                    floor = pool.submit(
                        run.load, f"floor beside {key}", floor_port, 16, run.plain, False
                    )
                    ours.result(), floor.result()
    for tag in tags:
        for mode, goal_at in (("graded", (16,)), ("forwarded", CONNS)):
            key = f"{mode}{tag}"
            for conns in CONNS:
                value = ratio(run.loads, key, "floor", conns)
                goal = ""
                if conns in goal_at:
                    goal = ">= 0.8x (target 0.95x)" if mode == "graded" else ">= 0.95x"
                met = value >= (0.8 if mode == "graded" else 0.95)
                rows.append(
                    Row(
                        f"throughput {mode}{tag} / floor, c={conns}",
                        f"{value:.3f}x ({rps(run.loads[(key, conns)]):,.0f} req/s)",
                        f"floor {rps(run.loads[('floor', conns)]):,.0f} req/s",
                        goal,
                        verdict(met) if goal else "",
                    )
                )
    for key in subjects:
        if key == "floor":
            continue
        mine = {c: cpu(run.loads[(key, c)]) for c in CONNS}
        base = {c: cpu(run.loads[("floor", c)]) for c in CONNS}
        rows.append(
            Row(
                f"CPU per request, {key}: floor's / ours (c=1, 16, 64)",
                ", ".join(f"{base[c] / mine[c]:.3f}x ({mine[c]:.0f} us)" for c in CONNS),
                "floor " + ", ".join(f"{base[c]:.0f} us" for c in CONNS),
            )
        )
    for key in subjects:
        if key == "floor":
            continue
        pairs = zip(
            run.loads[(f"{key} beside", 16)], run.loads[(f"floor beside {key}", 16)], strict=True
        )
        beside = statistics.median(f.cpu_us / o.cpu_us for o, f in pairs)
        rows.append(
            Row(
                f"CPU per request, {key} and the floor loaded at once, c=16: floor's / ours",
                f"{beside:.3f}x ({cpu(run.loads[(f'{key} beside', 16)]):.0f} us)",
                f"floor {cpu(run.loads[(f'floor beside {key}', 16)]):.0f} us (the steadiest figure on a busy machine)",
            )
        )
    for key in subjects:
        errors = {c: sum(load.errors for load in run.loads[(key, c)]) for c in CONNS}
        late = {c: sum(load.timeouts for load in run.loads[(key, c)]) for c in CONNS}
        shown = ", ".join(
            f"c={c}: {n}" + (f" ({late[c]} wrk timeouts)" if late[c] else "")
            for c, n in errors.items()
        )
        clean = verdict(not any(errors.values()))
        rows.append(Row(f"errors, {key} (socket + non-2xx)", shown, "", "0", clean))
    return rows


def added_latency(run: Run, tags: list[str]) -> list[Row]:
    rows: list[Row] = []
    for mode in ("graded", "forwarded"):
        for tag in tags:
            key = f"{mode}{tag}"
            for pct in ("p50", "p99"):

                def added(name: str, pct: str = pct) -> float:
                    pairs = zip(run.loads[(name, 1)], run.loads[("direct", 1)], strict=True)
                    return statistics.median(s.ms(pct) - d.ms(pct) for s, d in pairs)

                ours, base = added(key), added("floor")
                share = ours / base if base > 0 else float("nan")
                goal = "<= 1.1x the floor's" if pct == "p50" else ""
                rows.append(
                    Row(
                        f"added {pct} latency at c=1, {key}",
                        f"{1000 * ours:.0f} us ({share:.2f}x the floor's)",
                        f"floor {1000 * base:.0f} us",
                        goal,
                        verdict(share <= 1.1) if goal else "",
                    )
                )
    return rows


def workers(run: Run, loop_flags: list[str]) -> list[Row]:
    """gradeproxy --workers N against N floor processes on one port, at c=64."""
    counts = [n for n in (1, 2, 4, 8) if n <= max(2, CPUS - CPUS // 2)]
    by: dict[int, dict[str, float]] = {}
    for count in counts:
        floor = run.floor(count)
        port = run.gradeproxy(f"workers{count}", ["--workers", str(count), *loop_flags], count)
        by[count] = {
            "floor": run.load(f"floor x{count}", floor, 64, run.plain, False).rps,
            "graded": run.load(f"graded x{count}", port, 64, run.graded, False).rps,
        }
        time.sleep(2)  # a scrape would reach one random worker: let every queue drain
        by[count]["forwarded"] = run.load(f"fwd x{count}", port, 64, run.plain, False).rps
    rows = []
    for count, got in by.items():
        scale = {k: v / by[1][k] for k, v in got.items()}
        rows.append(
            Row(
                f"--workers {count}, c=64: graded / floor, forwarded / floor",
                f"{got['graded'] / got['floor']:.3f}x, {got['forwarded'] / got['floor']:.3f}x"
                f" (graded {scale['graded']:.2f}x 1 worker's)",
                f"{count} floor processes: {got['floor']:,.0f} req/s ({scale['floor']:.2f}x one)",
                ">= 7.2x at 8 workers (16 cores)" if count == 8 else "",
                verdict(scale["graded"] >= 7.2) if count == 8 else "",
            )
        )
    return rows


def own_core(run: Run, loop_flags: list[str]) -> list[Row]:
    """Every graded job sent to the grading process, which gets a core of its own (c=16)."""
    name = "graded, grading process on a core of its own, c=16"
    if CPUS < 4:  # the subject, its grading process and the load need three cores apart
        return [Row(name, "not measured here", "", f">= 0.95x (needs 4+ cores; this has {CPUS})")]
    all_off = "grading:\n  inline_max_bytes: 0\n  isolation: process\n"
    port = run.gradeproxy("own-core", loop_flags, extra=all_off)
    serve = run.pids[port][0]
    own = SUBJECT_CPU + 1  # the load runs below SUBJECT_CPU, nothing above it
    moved = 0
    for pid in tree(serve):  # the fork server, the grading process, the resource tracker
        if pid != serve:
            os.sched_setaffinity(pid, {own})
            moved += 1
    if moved == 0:
        raise FigureError("no grading process found under gradeproxy serve")
    floors, ours = [], []
    for _ in range(run.args.rounds):
        floors.append(run.load("floor", run.floor_port, 16, run.plain, False).rps)
        ours.append(run.load("own-core", port, 16, run.graded, True).rps)
    share = statistics.median(ours) / statistics.median(floors)
    detail = f"floor {statistics.median(floors):,.0f} req/s; grading process on CPU {own}"
    return [Row(name, f"{share:.3f}x the floor", detail, ">= 0.95x", verdict(share >= 0.95))]


def litellm(run: Run, path: str) -> list[Row]:
    """LiteLLM's proxy (it grades nothing) against gradeproxy graded and forwarded only, on
    the same core and backend; one load each, after the rounds: the gap is a multiple."""
    port = free_port()
    argv = litellm_argv(path, run.work, run.upstream, port)
    run.stack.enter_context(
        started(argv, port, run.work / "litellm.log", str(SUBJECT_CPU), timeout_s=180)
    )
    rows = []
    for conns in (1, 16):
        theirs = run.load("litellm", port, conns, run.plain, False).rps
        graded, forwarded = (rps(run.loads[(key, conns)]) for key in ("graded", "forwarded"))
        rows.append(
            Row(
                f"LiteLLM proxy, c={conns}: gradeproxy's req/s / LiteLLM's",
                f"graded {graded / theirs:.1f}x, forwarded {forwarded / theirs:.1f}x",
                f"LiteLLM {theirs:,.0f} req/s",
            )
        )
    return rows


def one_core(run: Run, flags: str, loop_flags: list[str]) -> None:
    """The one-core table: throughput, latency, streams and LiteLLM, graded and forwarded, on
    asyncio and uvloop."""
    args = run.args
    uvloop = has_uvloop() and "--loop" in flags
    ports = {"floor": run.floor_port, "graded": run.gradeproxy("asyncio", loop_flags)}
    subjects = {"floor": (ports["floor"], run.plain), "graded": (ports["graded"], run.graded)}
    subjects["forwarded"] = (ports["graded"], run.plain)
    tags = [""]
    if uvloop:
        ports["graded+uvloop"] = run.gradeproxy("uvloop", ["--loop", "uvloop"])
        subjects["graded+uvloop"] = (ports["graded+uvloop"], run.graded)
        subjects["forwarded+uvloop"] = (ports["graded+uvloop"], run.plain)
        tags.append("+uvloop")
    else:
        why = "uvloop is not installed" if "--loop" in flags else "serve has no --loop flag"
        run.missing.append(f"uvloop on/off: {why} (pip install 'gradeproxy[uvloop]')")
    run.figure("throughput", lambda: throughput(run, subjects, tags))
    run.figure("added latency", lambda: added_latency(run, tags))
    skipped = metric_sum(ports["graded"], "gradeproxy_grading_skipped_total", "queue_full")
    graded = metric_sum(ports["graded"], "gradeproxy_grades_total")
    run.rows.append(
        Row(
            "graded run: responses graded / dropped as queue_full",
            f"{graded:.0f} / {skipped:.0f}",
            "",
            "0 dropped",
            verdict(skipped == 0),
        )
    )
    run.figure("streamed TTFB", lambda: ttfb_rows(run.backend_port, ports, args.ttfb_samples))
    path = args.litellm or shutil.which("litellm")
    if path:
        run.figure("LiteLLM", lambda: litellm(run, path))
    else:
        run.rows.append(Row("LiteLLM", "not installed (compared when `litellm` is found)"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs for local use")
    parser.add_argument("--litellm", metavar="PATH", help="LiteLLM's `litellm` (default: PATH)")
    parser.add_argument(
        "--many-core",
        action="store_true",
        help="only the figures that need 4+ cores: --workers 1/2/4/8 against the floor at each"
        " count, and grading on a core of its own (bench/device/run.sh runs it on a lent machine)",
    )
    args = parser.parse_args()
    args.seconds, args.rounds = (2, 1) if args.quick else (5, 3)
    args.ttfb_samples = 50 if args.quick else 200
    if shutil.which("wrk") is None:
        print("bench/perf.py: wrk not found (apt-get install wrk): no figure can be produced")
        return 1
    flags = serve_flags()
    loop_flags = ["--loop", "asyncio"] if "--loop" in flags else []
    mode = "QUICK (local use, not for the README)" if args.quick else "full"
    mode += ", many-core figures only" if args.many_core else ""
    print(
        f"bench/perf.py, {mode}: {CPUS} CPUs; subjects pinned to CPU {SUBJECT_CPU}, backend and"
        f" wrk on {LOAD_CPUS}; wrk {args.seconds}s per point, {args.rounds} interleaved rounds;"
        f" load average at start {os.getloadavg()[0]:.1f}\n"
    )
    with contextlib.ExitStack() as stack:
        run = Run(args, stack)
        run.floor_port = run.floor()
        if not args.many_core:
            one_core(run, flags, loop_flags)
        # The figures that need cores (``--many-core`` alone measures only these; with fewer
        # cores, what fits). Before the subjects stop: own_core loads the floor beside its own.
        if "--workers" in flags:
            run.figure("--workers", lambda: workers(run, loop_flags))
        else:
            run.missing.append("--workers: gradeproxy serve has no --workers flag")
        run.figure("grading on its own core", lambda: own_core(run, loop_flags))
    if not args.many_core:  # each starts its own proxy: the subjects above are stopped
        run.figure("loop lag", lambda: loop_lag(100 if args.quick else 200))
        soak_s, warmup = (15.0, 3.0) if args.quick else (60.0, 10.0)
        run.figure("RSS over a soak", lambda: soak(soak_s, warmup, args.quick))
    if CPUS < 16:
        run.rows.append(
            Row(
                "--workers 1/2/4/8 vs the floor at each count",
                "not measured here",
                "",
                f">= 7.2x at 8 (this machine: {CPUS} cores)",
            )
        )
    print(render(run.rows, run.missing))
    load = os.getloadavg()[0]
    busy = f" (over {CPUS} CPUs: other work shared them; ratios only)" if load > CPUS else ""
    print(f"\nload average at the end {load:.1f}{busy}")
    if run.missing:
        print("\nFIGURES MISSING (exit 1):\n  " + "\n  ".join(run.missing))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
