"""The load side of bench/perf.py: subject processes pinned to a core, wrk runs parsed whole.

wrk's summary is parsed for everything that makes a run invalid, not only its throughput:
socket errors (connect, read, write, timeout) and non-2xx responses are both "errors", so a
subject that answers fast by failing is never reported as fast.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CPUS = os.cpu_count() or 1
# Load (backend, wrk) on the low cores, subjects on the high ones: one core each on 2 cores.
LOAD_CPUS = "0" if CPUS < 4 else f"0-{CPUS // 2 - 1}"
SUBJECT_CPU = 1 if CPUS < 4 else CPUS // 2
LOAD_THREADS = max(1, CPUS // 4)
ROOT = Path(__file__).resolve().parents[1]
BODY = '{"model":"bench-model","messages":[{"role":"user","content":"Weather in Zurich?"}]}'
# The task every proxy bench grades, and the header that names it: the fake backend's answer
# (bench/_servers.py's CALL_BODY) passes it, as most live traffic should. Defined once, so that
# the figures of bench/perf.py, bench/ab.py, bench/server_instructions.py and bench/soak.py grade
# the same outcome (a failing answer also builds a failure-inspector entry, which costs more).
TASK = (
    '{"id":"bench.weather","expected":{"name":"get_weather","arguments":{"city":"Zurich",'
    '"unit":"celsius"}},"metadata":{"mutationKind":"field_renamed"}}\n'
)
GRADED = {"X-Grade-Task": "bench.weather"}


def export(revision: str, into: Path) -> None:
    """The tree of ``revision``, unpacked into ``into`` (no worktree, no checkout): the base
    side of an A/B run (bench/ab.py, bench/instructions_bench.py)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def cli_module(tree: Path) -> str:
    """The console script's module in ``tree``: ``gradeproxy.cli``, or ``grader.cli`` in a
    revision from before the command line moved to its own package (issue 36)."""
    return "gradeproxy.cli" if (tree / "gradeproxy" / "cli").is_dir() else "grader.cli"


def litellm_argv(litellm: str, folder: Path, upstream: str, port: int) -> list[str]:
    """LiteLLM's proxy in front of ``upstream`` as its docs start it (one worker), written
    into ``folder``. Current releases (1.108.7 here) refuse to start without a master key
    unless told this is local use; its model-cost map is read from its own package (no network
    here, and the fetch it would try first costs seconds of start-up)."""
    config = folder / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: bench-model\n    litellm_params:\n"
        f"      model: openai/bench-model\n      api_base: {upstream}\n      api_key: none\n"
        "general_settings:\n  dangerously_permit_weak_or_unset_master_key: true\n"
    )
    options = ["--config", str(config), "--port", str(port), "--num_workers", "1"]
    return ["env", "LITELLM_LOCAL_MODEL_COST_MAP=True", litellm, *options]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pinned(cpus: str, argv: list[str]) -> list[str]:
    """``argv`` under ``taskset -c cpus`` when the machine has two cores or more."""
    if CPUS >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", cpus, *argv]
    return argv


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a ``--workers`` parent's worker processes)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(_children(current))
    return found


def _children(pid: int) -> list[int]:
    """From /proc/PID/task/*/children where the kernel has it; some (gVisor's, on the lent
    machines) do not, and then each process's parent is read from /proc/*/stat instead."""
    tasks = list(Path(f"/proc/{pid}/task").glob("*"))
    children: list[int] = []
    listed = False
    for task in tasks:
        with contextlib.suppress(OSError):
            children.extend(int(child) for child in (task / "children").read_text().split())
            listed = True
    if listed or not tasks:
        return children
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The name field may hold spaces and parentheses: the parent follows the last ")".
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                children.append(int(stat.parent.name))
    return children


def cpu_s(pids: list[int]) -> float:
    """CPU seconds used so far by ``pids``, their threads and their descendants (schedstat's
    nanoseconds: a finer clock than /proc/PID/stat's ticks)."""
    total = 0
    for pid in pids:
        for member in tree(pid):
            for task in Path(f"/proc/{member}/task").glob("*"):
                with contextlib.suppress(OSError, ValueError, IndexError):
                    total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


class StartError(RuntimeError):
    """A subject did not start listening: the figures that need it cannot be produced."""


@contextlib.contextmanager
def started(
    argv: list[str], port: int, log: Path, cpus: str, timeout_s: float = 30
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``argv`` pinned to ``cpus`` until it accepts on ``port``; stop it on exit."""
    with log.open("wb") as out:
        child = subprocess.Popen(pinned(cpus, argv), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if child.poll() is not None:
                tail = log.read_text(errors="replace")[-400:]
                raise StartError(f"{' '.join(argv[:4])} exited {child.returncode}: {tail}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            if time.monotonic() > deadline:
                raise StartError(
                    f"{' '.join(argv[:4])} did not listen on {port} in {timeout_s:g} s"
                )
            time.sleep(0.05)
        time.sleep(0.3)
        yield child
    finally:
        child.terminate()
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


@dataclass(frozen=True)
class Load:
    """One wrk run's summary."""

    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    socket_errors: int
    timeouts: int = 0  # of the socket errors: requests without an answer in wrk's 2 s
    cpu_us: float = float("nan")  # the subject's CPU time per request (all its processes)

    @property
    def errors(self) -> int:
        return self.non_2xx + self.socket_errors

    def ms(self, pct: str) -> float:
        return self.p50_ms if pct == "p50" else self.p99_ms


_SCALE = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_wrk(out: str) -> Load:
    """Parse ``wrk --latency`` output (raises ValueError when a figure is absent)."""

    def need(pattern: str) -> re.Match[str]:
        found = re.search(pattern, out, re.MULTILINE)
        if found is None:
            raise ValueError(f"wrk output lacks {pattern!r}:\n{out}")
        return found

    latency = {}
    for pct in ("50", "99"):
        found = need(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$")
        latency[pct] = float(found.group(1)) * _SCALE[found.group(2)]
    sockets = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return Load(
        rps=float(need(r"Requests/sec:\s+([\d.]+)").group(1)),
        p50_ms=latency["50"],
        p99_ms=latency["99"],
        requests=int(need(r"(\d+) requests in").group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(n) for n in sockets.groups()) if sockets else 0,
        timeouts=int(sockets.group(4)) if sockets else 0,
    )


def lua_script(folder: Path, name: str, headers: dict[str, str]) -> Path:
    """A wrk script that POSTs the benchmark body with ``headers``."""
    escaped = BODY.replace('"', '\\"')
    lines = ['wrk.method = "POST"', f'wrk.body = "{escaped}"']
    for key, value in {"Content-Type": "application/json", **headers}.items():
        lines.append(f'wrk.headers["{key}"] = "{value}"')
    path = folder / f"{name}.lua"
    path.write_text("\n".join(lines) + "\n")
    return path


def wrk(port: int, connections: int, seconds: float, script: Path, cpus: str, threads: int) -> Load:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    argv = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{round(seconds)}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    done = subprocess.run(pinned(cpus, argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"wrk exited {done.returncode}: {done.stderr[-400:]}")
    return parse_wrk(done.stdout)


def metric_sum(port: int, name: str, label: str = "") -> float:
    """The sum of ``name``'s samples (those whose labels contain ``label``) on /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and label in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_queue_empty(port: int, timeout_s: float = 60.0) -> bool:
    """Wait until the subject's grade queue is empty, so a backlog graded after one run does
    not take its core during the next; False when it is still busy after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            if metric_sum(port, "gradeproxy_grade_queue_depth") == 0:
                time.sleep(0.2)  # the last rows' write
                return True
        time.sleep(0.2)
    return False
