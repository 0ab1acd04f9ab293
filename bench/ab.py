"""Before/after for a change to the hot path: this working tree against a git revision.

Both versions run at once, each ``gradeproxy serve`` pinned to the same core (the fake backend
and wrk on another), and are measured in alternation (A, B, A, B, ...), forwarded only and
graded, so drift on a shared machine falls on both. The figure that matters is CPU time per
request (the subject's schedstat nanoseconds over the requests wrk completed; grading included
for graded runs, read once the grade queue is empty): on one core, throughput is its inverse,
and it is far steadier than req/s when other processes share the machine.

With ``--floor`` the bare aiohttp relay (bench/_servers.py's pass-through) runs on the same
core too and is measured in the forwarded rounds (with ``--together``, loaded at the same
instants as both versions), so the distance left to the floor (µs of CPU per request above it)
comes from the same run.

Run: ``python bench/ab.py [--base main] [--rounds 5] [--seconds 3] [--conns 16] [--floor]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _perf_load import (
    GRADED,
    LOAD_CPUS,
    SUBJECT_CPU,
    TASK,
    cli_module,
    cpu_s,
    export,
    free_port,
    lua_script,
    started,
    wait_queue_empty,
    wrk,
)

ROOT = Path(__file__).resolve().parents[1]


def measure(
    port: int, pid: int, script: Path, mode: str, args: argparse.Namespace
) -> tuple[float, float]:
    """(CPU microseconds per request, req/s) of one wrk run (grading included when graded)."""
    before = cpu_s([pid])
    load = wrk(port, args.conns, args.seconds, script, LOAD_CPUS, 1)
    if mode == "graded":
        wait_queue_empty(port)
    spent = cpu_s([pid]) - before
    if load.errors:
        print(f"{port} {mode}: {load.errors} errors", file=sys.stderr)
    return 1e6 * spent / load.requests, load.rps


def together(
    order: list[tuple[str, tuple[int, int]]], script: Path, mode: str, args: argparse.Namespace
) -> dict[str, tuple[float, float]]:
    """Both versions loaded at once, sharing the core at the same instants: whatever else the
    machine runs then falls on both alike."""
    with concurrent.futures.ThreadPoolExecutor(len(order)) as pool:
        futures = {
            name: pool.submit(measure, port, pid, script, mode, args) for name, (port, pid) in order
        }
        return {name: future.result() for name, future in futures.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="the revision to compare against")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=3)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--flags", default="", help="extra `serve` flags for both versions")
    parser.add_argument(
        "--floor", action="store_true", help="measure the bare relay too (forwarded rounds)"
    )
    parser.add_argument(
        "--together", action="store_true", help="load both at once (best on a busy machine)"
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gp-ab-")))
        (work / "base").mkdir()
        export(args.base, work / "base")
        (work / "tasks.jsonl").write_text(TASK)
        scripts = {
            "forwarded": lua_script(work, "plain", {}),
            "graded": lua_script(work, "graded", GRADED),
        }
        backend_port = free_port()
        backend = [sys.executable, str(ROOT / "bench" / "_servers.py"), "backend"]
        stack.enter_context(
            started([*backend, str(backend_port)], backend_port, work / "b.log", LOAD_CPUS)
        )
        subjects: dict[str, tuple[int, int]] = {}
        for name, tree in (("base", work / "base"), ("this", ROOT)):
            port = free_port()
            config = work / f"{name}.yaml"
            config.write_text(
                f"upstream:\n  url: http://127.0.0.1:{backend_port}/v1\nlisten:\n  port: {port}\n"
                f"tasks:\n  path: {work / 'tasks.jsonl'}\n"
                f"results:\n  path: {work / name / 'grades.jsonl'}\n"
                "logging:\n  level: info\nshutdown:\n  drain_delay_s: 0\n"
            )
            # -P: no current directory first on sys.path, so PYTHONPATH's tree is the one run
            # (without it, `python -m` from the repository root ran this tree on both sides).
            argv = [sys.executable, "-P", "-m", cli_module(tree), "serve", "--config", str(config)]
            argv += args.flags.split()
            os.environ["PYTHONPATH"] = str(tree)  # the child imports this tree's packages
            child = started(argv, port, work / f"{name}.log", str(SUBJECT_CPU))
            subjects[name] = (port, stack.enter_context(child).pid)
        os.environ.pop("PYTHONPATH")
        floor: tuple[int, int] | None = None
        if args.floor:
            port = free_port()
            upstream = f"http://127.0.0.1:{backend_port}/v1"
            relay = started(
                [*backend[:2], "passthrough", str(port), upstream],
                port,
                work / "floor.log",
                str(SUBJECT_CPU),
            )
            floor = (port, stack.enter_context(relay).pid)
        got: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for number in range(args.rounds):
            order = list(subjects.items())[:: 1 if number % 2 == 0 else -1]  # no order bias
            for mode, script in scripts.items():
                bare = [("floor", floor)] if floor is not None and mode == "forwarded" else []
                if args.together:  # the floor too: all of them share the core's instants
                    runs = together(order + bare, script, mode, args)
                else:
                    runs = {
                        name: measure(port, pid, script, mode, args)
                        for name, (port, pid) in order + bare
                    }
                for name, result in runs.items():
                    got.setdefault((mode, name), []).append(result)
    print(f"this tree vs {args.base}: c={args.conns}, {args.rounds} rounds of {args.seconds:g} s")
    for mode in scripts:
        base, this = got[(mode, "base")], got[(mode, "this")]
        cpu_ratio = statistics.median(b[0] / t[0] for b, t in zip(base, this, strict=True))
        rps_ratio = statistics.median(t[1] / b[1] for b, t in zip(base, this, strict=True))
        print(
            f"  {mode:<9} CPU/request: base {statistics.median(b[0] for b in base):6.0f} us,"
            f" this {statistics.median(t[0] for t in this):6.0f} us -> base/this {cpu_ratio:.3f}x"
            f"   req/s this/base {rps_ratio:.3f}x"
        )
        if (mode, "floor") in got:
            floors = got[(mode, "floor")]
            floor_cpu = statistics.median(f[0] for f in floors)
            above = statistics.median(t[0] - f[0] for f, t in zip(floors, this, strict=True))
            print(
                f"  {'floor':<9} CPU/request: {floor_cpu:6.0f} us (bare relay);"
                f" this is {above:+.0f} us above it"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
