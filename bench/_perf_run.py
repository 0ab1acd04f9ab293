"""The subjects of bench/perf.py: the fake backend, the floor and gradeproxy processes of one run.

Every subject is started pinned (bench/_perf_load.py), its processes remembered by port so each
wrk run can be charged the CPU time the subject spent serving it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import socket
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from _perf_figures import FigureError, Row
from _perf_load import (
    CPUS,
    GRADED,
    LOAD_CPUS,
    LOAD_THREADS,
    SUBJECT_CPU,
    TASK,
    Load,
    StartError,
    cpu_s,
    free_port,
    lua_script,
    started,
    wait_queue_empty,
    wrk,
)

HERE = Path(__file__).resolve().parent
SERVE = [sys.executable, "-m", "gradeproxy.cli", "serve"]


def subject_cpus(workers: int) -> str:
    if CPUS < 4:
        return "1" if workers == 1 else f"0-{CPUS - 1}"  # two workers on 2 cores share the load's
    return f"{SUBJECT_CPU}-{min(SUBJECT_CPU + workers, CPUS) - 1}"


def free_run(count: int) -> int:
    """A port P with P .. P + count - 1 all free now."""
    while True:
        base = free_port()
        sockets = []
        try:
            for offset in range(count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()


def serve_flags() -> str:
    """``gradeproxy serve --help``: which of the flags this run needs exist."""
    done = subprocess.run([*SERVE, "--help"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench/perf.py: `gradeproxy serve --help` failed: {done.stderr[-400:]}")
    return done.stdout


def has_uvloop() -> bool:
    probe = [sys.executable, "-c", "import uvloop"]
    return subprocess.run(probe, capture_output=True, check=False).returncode == 0


class Run:
    """One benchmark run: its folder, backend, scripts, and what could not be measured."""

    def __init__(self, args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
        self.args, self.stack = args, stack
        self.work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gp-perf-")))
        (self.work / "tasks.jsonl").write_text(TASK)
        self.graded = lua_script(self.work, "graded", GRADED)
        self.plain = lua_script(self.work, "plain", {})
        self.backend_port = free_port()
        self.upstream = f"http://127.0.0.1:{self.backend_port}/v1"
        self.missing: list[str] = []
        self.floor_port = 0  # the one-worker floor, once started
        self.rows: list[Row] = []
        self.loads: dict[tuple[str, int], list[Load]] = defaultdict(list)
        self.pids: dict[int, list[int]] = defaultdict(list)  # port -> the subject's processes
        backend = [sys.executable, str(HERE / "_servers.py"), "backend", str(self.backend_port)]
        for number in range(LOAD_THREADS):  # more than one only on a many-core machine
            argv = backend + (["reuse_port"] if LOAD_THREADS > 1 else [])
            log = self.work / f"backend{number}.log"
            stack.enter_context(started(argv, self.backend_port, log, LOAD_CPUS))

    def floor(self, workers: int = 1) -> int:
        port = free_port()
        argv = [sys.executable, str(HERE / "_servers.py"), "passthrough", str(port), self.upstream]
        for number in range(workers):
            log = self.work / f"floor{workers}.{number}.log"
            reuse = ["reuse_port"] if workers > 1 else []
            child = started(argv + reuse, port, log, subject_cpus(workers))
            self.pids[port].append(self.stack.enter_context(child).pid)
        return port

    def gradeproxy(self, name: str, flags: list[str], workers: int = 1, extra: str = "") -> int:
        port = free_port()
        config = self.work / f"{name}.yaml"
        # N workers need admin.port: worker i serves its /metrics on admin.port + i.
        admin = f"admin:\n  port: {free_run(workers)}\n" if workers > 1 else ""
        config.write_text(
            f"upstream:\n  url: {self.upstream}\nlisten:\n  port: {port}\n{admin}"
            f"tasks:\n  path: {self.work / 'tasks.jsonl'}\n"
            f"results:\n  path: {self.work / name / 'grades.jsonl'}\n"
            "logging:\n  level: info\nshutdown:\n  drain_delay_s: 0\n" + extra
        )
        argv = [*SERVE, "--config", str(config), *flags]
        log = self.work / f"{name}.log"
        child = started(argv, port, log, subject_cpus(workers))
        self.pids[port].append(self.stack.enter_context(child).pid)
        return port

    def load(self, key: str, port: int, conns: int, script: Path, graded: bool) -> Load:
        """One wrk run, with the CPU time the subject spent on it: for a graded run, until
        its grade queue is empty again (grading included)."""
        threads = min(LOAD_THREADS, conns)
        pids = self.pids.get(port, [])
        before = cpu_s(pids)
        result = wrk(port, conns, self.args.seconds, script, LOAD_CPUS, threads)
        if graded and not wait_queue_empty(port):
            self.missing.append(f"{key}: the grade queue did not empty within 60 s of a run")
        if pids and result.requests:
            spent = cpu_s(pids) - before
            result = dataclasses.replace(result, cpu_us=1e6 * spent / result.requests)
        self.loads[(key, conns)].append(result)
        return result

    def figure(self, name: str, produce: Callable[[], list[Row]]) -> None:
        try:
            self.rows.extend(produce())
        except (FigureError, StartError, ValueError, OSError) as exc:
            self.missing.append(f"{name}: {exc}")
