"""Forwarded throughput per upstream transport (``upstream.client``: fast, aiohttp) over the
floor, at c=16, in one run.

Three subjects pinned to the same core, the fake backend and wrk on the other: the floor
(bench/_servers.py's minimal aiohttp pass-through), ``gradeproxy serve`` with the fast client,
and the same with ``client: aiohttp``; with ``--base-tree DIR`` (another revision's tree, e.g.
``git archive 2ace63b | tar -x -C DIR``) also that revision's server, so "the fast client did
not regress" is measured in the same run. No task header, so every request is forwarded only: the
difference between the two is the upstream client. Rounds interleave the subjects (floor, fast,
aiohttp, then again) and each ratio is the median of the per-round ratios, so a shared
machine's drift hits all three alike; CPU per request (the subject's schedstat time over the
requests wrk completed) is reported beside it, the steadier figure on a busy machine.

Run: ``python bench/transport_bench.py [--rounds 5] [--seconds 4] [--conns 16] [--base-tree DIR]``
(needs wrk).
Exit status 1 on any socket error or non-2xx answer.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path

from _perf_load import ROOT, Load, free_port, started
from _perf_run import SERVE, Run, subject_cpus

CLIENTS = ("fast", "aiohttp")


def gradeproxy(run: Run, name: str, client: str | None, tree: Path | None = None) -> int:
    """``gradeproxy serve`` forwarding to the run's backend through ``client`` (None: the
    tree's default, for a revision that has no ``upstream.client``), from ``tree``'s code."""
    port = free_port()
    config = run.work / f"{name}.yaml"
    choice = f"  client: {client}\n" if client else ""
    config.write_text(
        f"upstream:\n  url: {run.upstream}\n{choice}listen:\n  port: {port}\n"
        f"tasks:\n  path: {run.work / 'tasks.jsonl'}\nresults:\n  path: null\n"
        "logging:\n  level: warning\nshutdown:\n  drain_delay_s: 0\n"
    )
    argv = [*SERVE, "--config", str(config)]
    saved = os.environ.get("PYTHONPATH")
    if tree is not None:
        # -P: the current directory is not put first, so the tree named first is the one run.
        argv = [sys.executable, "-P", *argv[1:]]
        others = [p for p in (saved or "").split(":") if p and Path(p).resolve() != ROOT]
        os.environ["PYTHONPATH"] = ":".join([str(tree.resolve()), *others])
    try:
        child = started(argv, port, run.work / f"{name}.log", subject_cpus(1))
    finally:
        if tree is not None:
            if saved is None:
                os.environ.pop("PYTHONPATH")
            else:
                os.environ["PYTHONPATH"] = saved
    run.pids[port].append(run.stack.enter_context(child).pid)
    return port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--conns", type=int, nargs="+", default=[16])
    parser.add_argument("--base-tree", type=Path, help="another revision's tree: its server too")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        run = Run(args, stack)
        ports = {"floor": run.floor()}
        if args.base_tree is not None:
            ports["base"] = gradeproxy(run, "base", None, args.base_tree)
        ports |= {client: gradeproxy(run, client, client) for client in CLIENTS}
        for conns in args.conns:
            for key, port in ports.items():  # warm-up: connections, caches, the JIT of nothing
                run.load(f"warm {key}", port, conns, run.plain, False)
        for _ in range(args.rounds):
            for conns in args.conns:
                for key, port in ports.items():
                    run.load(key, port, conns, run.plain, False)
        print(
            f"forwarded throughput by upstream client, / the floor ({args.rounds} rounds of"
            f" {args.seconds:g} s, interleaved)"
        )
        errors = 0
        for conns in args.conns:
            floor: list[Load] = run.loads[("floor", conns)]
            for key in ports:
                loads: list[Load] = run.loads[(key, conns)]
                errors += sum(load.errors for load in loads)
                rps = statistics.median(load.rps for load in loads)
                cpu = statistics.median(load.cpu_us for load in loads)
                ratio = statistics.median(s.rps / b.rps for s, b in zip(loads, floor, strict=True))
                shown = "" if key == "floor" else f"  {ratio:.3f}x the floor"
                print(f"  c={conns:<3} {key:<8} {rps:9,.0f} req/s  {cpu:5.0f} us CPU/req{shown}")
            fast, aio = (run.loads[(client, conns)] for client in CLIENTS)
            slower = statistics.median(a.rps / f.rps for a, f in zip(aio, fast, strict=True))
            print(f"  c={conns:<3} aiohttp / fast, throughput: {slower:.3f}x")
            if "base" in ports:
                base = run.loads[("base", conns)]
                kept = statistics.median(f.rps / b.rps for f, b in zip(fast, base, strict=True))
                cpu = statistics.median(
                    f.cpu_us / b.cpu_us for f, b in zip(fast, base, strict=True)
                )
                print(
                    f"  c={conns:<3} fast / base: throughput {kept:.3f}x, CPU per request {cpu:.3f}x"
                )
        print(f"errors (socket + non-2xx): {errors}")
        return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
