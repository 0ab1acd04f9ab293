"""The upstream client alone: the bare relay on aiohttp's ClientSession against the same relay
on gradeproxy's client (proxy/pipeline/upstream/).

Both relays (bench/_servers.py ``passthrough`` and ``passthrough-pool``) are pinned to the same
core and loaded by wrk at the same instants, the fake backend and wrk on the other core, so
whatever else the machine runs falls on both alike. The figure is CPU time per request (the
subject's schedstat nanoseconds over the requests wrk completed), the median over rounds, and
its ratio. Run: ``python bench/upstream_bench.py [--rounds 5] [--seconds 4] [--conns 1 16 64]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

from _perf_load import LOAD_CPUS, SUBJECT_CPU, cpu_s, free_port, lua_script, started, wrk

HERE = Path(__file__).resolve().parent


def measure(port: int, pid: int, script: Path, conns: int, seconds: float) -> tuple[float, int]:
    before = cpu_s([pid])
    load = wrk(port, conns, seconds, script, LOAD_CPUS, 1)
    return 1e6 * (cpu_s([pid]) - before) / max(load.requests, 1), load.errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4)
    parser.add_argument("--conns", type=int, nargs="+", default=[1, 16, 64])
    args = parser.parse_args()
    servers = str(HERE / "_servers.py")
    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as stack:
        path = Path(folder)
        backend = free_port()
        stack.enter_context(
            started(
                [sys.executable, servers, "backend", str(backend)], backend, path / "b", LOAD_CPUS
            )
        )
        upstream = f"http://127.0.0.1:{backend}/v1"
        subjects: dict[str, tuple[int, int]] = {}
        for name, kind in (
            ("aiohttp ClientSession", "passthrough"),
            ("gradeproxy upstream client", "passthrough-pool"),
        ):
            port = free_port()
            argv = [sys.executable, servers, kind, str(port), upstream]
            child = stack.enter_context(started(argv, port, path / kind, str(SUBJECT_CPU)))
            subjects[name] = (port, child.pid)
        script = lua_script(path, "plain", {})
        errors = 0
        print(
            f"the bare relay, CPU per request by upstream client ({args.rounds} rounds of {args.seconds:g} s, loaded together)"
        )
        for conns in args.conns:
            for port, _ in subjects.values():
                wrk(port, conns, 1, script, LOAD_CPUS, 1)  # warm-up
            spent: dict[str, list[float]] = {name: [] for name in subjects}
            for _ in range(args.rounds):
                with concurrent.futures.ThreadPoolExecutor(len(subjects)) as pool:
                    futures = {
                        name: pool.submit(measure, port, pid, script, conns, args.seconds)
                        for name, (port, pid) in subjects.items()
                    }
                    for name, future in futures.items():
                        cpu, failed = future.result()
                        spent[name].append(cpu)
                        errors += failed
            medians = {name: statistics.median(values) for name, values in spent.items()}
            base, ours = medians.values()
            row = "  ".join(f"{name} {value:6.0f} us" for name, value in medians.items())
            print(f"  c={conns:<3} {row}  aiohttp's / ours {base / ours:.2f}x")
        print(f"errors (socket + non-2xx): {errors}")
        return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
