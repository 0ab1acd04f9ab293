"""Instructions per request, whole servers: the headline ratios as a figure noise cannot move.

bench/perf.py's CPU-per-request ratios swing by 10-30% from run to run on a shared 2-core
machine (the same code read 0.670x and 0.768x). This runs each subject under valgrind's
callgrind and counts the instructions its process (every thread) runs per request: the
counters are zeroed after a warm-up, ``--requests`` keep-alive POSTs are sent at
``--conns`` connections, the result file is waited for until it holds a row for each graded
request (every job graded, counted and written, none spilling into the next run; read from
the file, since a scrape of /metrics would be counted too), and the counters are dumped. Subjects: the floor (bench/_servers.py's pass-through, bench/perf.py's baseline) and
``gradeproxy serve --loop asyncio`` on this tree, forwarded and graded; ``--base REV`` adds a
revision's tree beside it.

What it cannot see: cache misses, branch mispredictions and the kernel. A graded request's
grading and recording run cold in the core's caches, so its share of the CPU is larger than
its share of the instructions (the README's "Performance" says by how much); the instruction
ratio is the floor of what the CPU ratio can reach, and it ranks changes without noise.
Timers that fire by the clock (the watchdog's scan) are counted per request at valgrind's
pace, a slight overcount for every subject alike.

Run: ``python bench/server_instructions.py [--requests 2000] [--conns 16] [--base REV]``
(needs valgrind; about a minute a subject, two at a time on two cores).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _perf_load import (
    BODY,
    LOAD_CPUS,
    SUBJECT_CPU,
    TASK,
    StartError,
    cli_module,
    export,
    free_port,
    started,
)

ROOT = Path(__file__).resolve().parents[1]
START_S = 180  # a server importing everything under valgrind takes 15-60 s to listen


async def _client(port: int, requests: int, conns: int, graded: bool) -> int:
    """``requests`` keep-alive POSTs over ``conns`` connections; the number answered 200."""
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\n"
        + (b"X-Grade-Task: bench.weather\r\n" if graded else b"")
        + b"Content-Length: %d\r\n\r\n" % len(BODY)
    )
    message = head + BODY.encode()
    left = requests
    ok = 0

    async def one() -> None:
        nonlocal left, ok
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while left > 0:
            left -= 1
            writer.write(message)
            status_and_headers = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in status_and_headers.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            ok += status_and_headers.startswith(b"HTTP/1.1 200")
        writer.close()

    await asyncio.gather(*(one() for _ in range(conns)))
    return ok


def _totals(dump_dir: Path, before: set[Path]) -> int:
    """The instructions in the dump callgrind_control just wrote."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        new = [p for p in dump_dir.iterdir() if p not in before]
        if new:
            time.sleep(0.5)  # every thread's part written
            total = 0
            for path in dump_dir.iterdir():
                if path in before:
                    continue
                for line in path.read_text(errors="replace").splitlines():
                    if line.startswith(("summary:", "totals:")):
                        total += int(line.split()[1])
                        break
            return total
        time.sleep(0.2)
    raise RuntimeError("callgrind wrote no dump")


def _control(pid: int, flag: str) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], capture_output=True, check=True)


def _rows(path: Path) -> int:
    try:
        with path.open("rb") as rows:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: rows.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


def _wait_rows(path: Path, rows: int) -> None:
    """Wait until the result file holds ``rows`` rows: every job graded, counted and written.
    Read from the file, not /metrics: a scrape under callgrind would be counted too."""
    deadline = time.monotonic() + 600
    while _rows(path) < rows:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path}: {_rows(path)} of {rows} rows after 600 s")
        time.sleep(0.2)


def measure(
    pid: int, port: int, dump_dir: Path, rows_file: Path | None, args: argparse.Namespace
) -> float:
    """Instructions per request of one run (the subject warmed up, its rows all written)."""
    graded = rows_file is not None
    warm = args.requests // 4
    if asyncio.run(_client(port, warm, args.conns, graded)) != warm:
        raise RuntimeError("the warm-up was not answered 200")
    if rows_file is not None:
        _wait_rows(rows_file, warm)
    time.sleep(1)  # the last responses' tails
    _control(pid, "-z")
    answered = asyncio.run(_client(port, args.requests, args.conns, graded))
    if answered != args.requests:
        raise RuntimeError(f"{answered} of {args.requests} requests answered 200")
    if rows_file is not None:
        _wait_rows(rows_file, warm + args.requests)
    time.sleep(1)
    before = set(dump_dir.iterdir())
    _control(pid, "-d")
    requests: int = args.requests
    return _totals(dump_dir, before) / requests


def subject(
    name: str, argv: list[str], port: int, work: Path, args: argparse.Namespace
) -> dict[str, float]:
    """Start ``argv`` under callgrind (pinned), measure its modes, stop it."""
    dump_dir = work / f"cg-{name}"
    dump_dir.mkdir()
    vg = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={dump_dir}/out.%p"]
    # `env` execs the rest (its NAME=value words first), so the pid started is the one
    # callgrind_control names.
    lead = 0
    while lead < len(argv) and re.fullmatch(r"[A-Z_]+=.*", argv[lead]):
        lead += 1
    command = ["env", "PYTHONHASHSEED=0", *argv[:lead], *vg, *argv[lead:]]
    with started(command, port, work / f"{name}.log", str(SUBJECT_CPU), START_S) as child:
        got = {"forwarded": measure(child.pid, port, dump_dir, None, args)}
        if name != "floor":
            got["graded"] = measure(child.pid, port, dump_dir, work / name / "grades.jsonl", args)
        return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--conns", type=int, default=16)
    parser.add_argument("--base", help="also measure this git revision's tree")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed (apt-get install valgrind)", file=sys.stderr)
            return 1
    python = sys.executable
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gp-sinstr-")))
        (work / "tasks.jsonl").write_text(TASK)
        backend_port = free_port()
        backend = [python, str(ROOT / "bench" / "_servers.py"), "backend", str(backend_port)]
        stack.enter_context(started(backend, backend_port, work / "backend.log", LOAD_CPUS))
        upstream = f"http://127.0.0.1:{backend_port}/v1"
        trees = {"this": ROOT}
        if args.base:
            (work / "base").mkdir()
            export(args.base, work / "base")
            trees["base"] = work / "base"
        jobs: list[tuple[str, list[str], int]] = []
        port = free_port()
        floor = [python, str(ROOT / "bench" / "_servers.py"), "passthrough", str(port), upstream]
        jobs.append(("floor", floor, port))
        for name, tree in trees.items():
            port = free_port()
            config = work / f"{name}.yaml"
            config.write_text(
                f"upstream:\n  url: {upstream}\nlisten:\n  port: {port}\n"
                f"tasks:\n  path: {work / 'tasks.jsonl'}\n"
                f"results:\n  path: {work / name / 'grades.jsonl'}\n"
                "logging:\n  level: info\nshutdown:\n  drain_delay_s: 0\n"
            )
            # -P and PYTHONPATH: that tree's packages, whatever the current directory.
            argv = [f"PYTHONPATH={tree}", python, "-P", "-m", cli_module(tree), "serve"]
            jobs.append((name, [*argv, "--config", str(config), "--loop", "asyncio"], port))
        try:
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                results = dict(
                    zip(
                        [job[0] for job in jobs],
                        pool.map(lambda job: subject(job[0], job[1], job[2], work, args), jobs),
                        strict=True,
                    )
                )
        except (RuntimeError, StartError, subprocess.CalledProcessError) as error:
            print(f"a figure could not be produced: {error}", file=sys.stderr)
            return 1
    floor_i = results["floor"]["forwarded"]
    print(
        f"instructions per request (callgrind, every thread; {args.requests} requests at "
        f"c={args.conns}, after {args.requests // 4} to warm up)"
    )
    print("| subject | forwarded | graded | floor / forwarded | floor / graded |")
    print("|---|---|---|---|---|")
    print(f"| floor (bare aiohttp relay) | {floor_i:,.0f} | | 1.000x | |")
    for name in trees:
        fwd, graded = results[name]["forwarded"], results[name]["graded"]
        label = f"gradeproxy, {'this tree' if name == 'this' else args.base}"
        print(
            f"| {label} | {fwd:,.0f} | {graded:,.0f} | {floor_i / fwd:.3f}x | {floor_i / graded:.3f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
