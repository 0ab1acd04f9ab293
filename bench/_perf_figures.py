"""The figures bench/perf.py takes from other benchmarks, and the table row they all become.

Loop lag and RSS come from bench/loop_lag_bench.py and bench/soak.py, run as they are (their
own process, their own output parsed), so each stays the one place its measurement is defined
and perf.py cannot drift from it. Streamed TTFB is measured here with a Python client.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from _perf_load import BODY, GRADED

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Row:
    """One line of the table: a figure, the baseline beside it, its goal and the verdict."""

    figure: str
    value: str
    baseline: str = ""
    goal: str = ""
    verdict: str = ""  # pass, miss, "" (no goal), or MISSING (could not be produced)


def verdict(met: bool) -> str:
    return "pass" if met else "miss"


class FigureError(RuntimeError):
    """A figure could not be produced (the reason is the message)."""


def _run(argv: list[str], timeout_s: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise FigureError(f"{Path(argv[1]).name} ran past {timeout_s:.0f} s") from None
    if done.returncode != 0:
        raise FigureError(f"{Path(argv[1]).name} exited {done.returncode}: {done.stderr[-300:]}")
    return done.stdout


def loop_lag(jobs: int) -> list[Row]:
    """Worst p99 and max event-loop lag across the hardening issue's adversarial answers."""
    # The default grading.isolation (process); loop_lag_bench.py --isolation thread compares.
    argv = [sys.executable, str(HERE / "loop_lag_bench.py"), "--jobs", str(jobs)]
    out = _run([*argv, "--isolation", "process"], 600)
    found = re.findall(
        r"^\s+(.+?)\s+ticks\s+\d+.*?p99\s+([\d.]+) ms\s+max\s+([\d.]+) ms", out, re.M
    )
    cases = [(name, float(p99), float(worst)) for name, p99, worst in found]
    inline = [c for c in cases if c[0].startswith("baseline")]
    hostile = [c for c in cases if not c[0].startswith("baseline")]
    if not hostile or not inline:
        raise FigureError(f"loop_lag_bench.py printed no cases:\n{out[-400:]}")
    p99_case = max(hostile, key=lambda c: c[1])
    max_case = max(hostile, key=lambda c: c[2])
    base = f"grading inline: p99 {inline[0][1]:.2f} ms, max {inline[0][2]:.2f} ms"
    return [
        Row(
            f"event-loop lag p99, worst of {len(hostile)} adversarial cases (grading process)",
            f"{p99_case[1]:.2f} ms ({p99_case[0]})",
            base,
            "<= 5 ms",
            verdict(p99_case[1] <= 5),
        ),
        Row(
            "event-loop lag max, worst case",
            f"{max_case[2]:.2f} ms ({max_case[0]})",
            "",
            "<= 50 ms",
            verdict(max_case[2] <= 50),
        ),
    ]


def soak(seconds: float, warmup: float, quick: bool) -> list[Row]:
    """RSS growth over ``seconds`` of mixed traffic after ``warmup``, and rows = graded."""
    argv = [sys.executable, str(HERE / "soak.py"), "--requests", str(10**9)]
    argv += ["--seconds", str(seconds), "--warmup", str(warmup)]
    out = _run(argv, seconds + warmup + 180)
    rss = re.search(r"start ([\d.]+) MiB, end ([\d.]+) MiB \(.*?([-+][\d.]+)% after", out)
    rows = re.search(r"rows written (\d+), requests graded (\d+) \((\w+)\)", out)
    sent = re.search(r"soak: (\d+) requests in ([\d.]+) s", out)
    if rss is None or rows is None or sent is None:
        raise FigureError(f"soak.py printed no RSS or row figures:\n{out[-400:]}")
    growth = float(rss.group(3))
    span = f"{seconds:g} s after {warmup:g} s warm-up" + (", QUICK" if quick else "")
    flat = growth < 5 and not quick
    return [
        Row(
            f"RSS over a soak ({span}, {sent.group(1)} mixed requests)",
            f"{rss.group(1)} -> {rss.group(2)} MiB ({growth:+.2f}%)",
            "",
            "< 5% growth over 60 s" if not quick else "< 5% over 60 s (quick run: not judged)",
            verdict(flat) if not quick else "",
        ),
        Row(
            "soak: result rows written = requests graded",
            f"{rows.group(1)} rows, {rows.group(2)} graded",
            "",
            "equal",
            verdict(rows.group(3) == "equal"),
        ),
    ]


@dataclass(frozen=True)
class Ttfb:
    ttfb_ms: float  # p50
    total_ms: float  # p50
    share: float  # p50 of ttfb / total per request


async def _streamed(port: int, samples: int, headers: dict[str, str]) -> Ttfb:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    body = BODY[:-1] + ',"stream":true}'
    firsts, totals = [], []
    async with aiohttp.ClientSession() as session:
        for _ in range(samples):
            start = time.perf_counter()
            async with session.post(url, data=body, headers=headers) as response:
                await response.content.readany()
                firsts.append(time.perf_counter() - start)
                await response.read()
                totals.append(time.perf_counter() - start)
    shares = [first / total for first, total in zip(firsts, totals, strict=True)]
    return Ttfb(
        1000 * statistics.median(firsts),
        1000 * statistics.median(totals),
        statistics.median(shares),
    )


def streamed(port: int, samples: int, headers: dict[str, str]) -> Ttfb:
    """TTFB and total time of ``samples`` sequential streamed requests (backend pauses 20 ms
    after its first chunk, so a proxy that held a chunk back shows a share near 1)."""
    return asyncio.run(_streamed(port, samples, headers))


def ttfb_rows(backend_port: int, ports: dict[str, int], samples: int) -> list[Row]:
    """TTFB added vs direct and TTFB / total for every gradeproxy subject, beside the floor's
    (``ports`` maps subject names to ports, the floor's under "floor")."""
    direct = streamed(backend_port, samples, {})
    floor = streamed(ports["floor"], samples, {})
    rows = []
    for key in ports:
        if key == "floor":
            continue
        ours = streamed(ports[key], samples, GRADED)
        added, base = ours.ttfb_ms - direct.ttfb_ms, floor.ttfb_ms - direct.ttfb_ms
        rows.append(
            Row(
                f"streamed TTFB added vs direct, {key}",
                f"{1000 * added:+.0f} us",
                f"floor {1000 * base:+.0f} us",
            )
        )
        rows.append(
            Row(
                f"streamed TTFB / total, {key} (backend pauses 20 ms after chunk 1)",
                f"{ours.share:.3f}",
                f"floor {floor.share:.3f}",
                "< 0.5 (no chunk held back)",
                verdict(ours.share < 0.5),
            )
        )
    return rows


def render(rows: list[Row], missing: list[str]) -> str:
    """The table as Markdown (what the README carries), MISSING rows included."""
    lines = [
        "| figure | gradeproxy | floor / baseline, same run | goal | verdict |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.figure} | {row.value} | {row.baseline} | {row.goal} | {row.verdict} |"
        )
    for reason in missing:
        lines.append(f"| {reason.split(':')[0]} | — | | | MISSING |")
    return "\n".join(lines)
