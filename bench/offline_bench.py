"""Offline run speed: rows per second for ``grade --out`` (JSONL and Parquet), ``export``,
``regrade`` and the gate, on a synthetic run of tool-call answers with carried metadata.

Prints figures only (no assertion). Baseline in the same run: writing the same rows as JSONL,
the floor any Parquet path pays on top of grading. Run: ``python bench/offline_bench.py
[--rows N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gradeproxy.cli import main
from grader.json import dumps

TASKS = [
    {"id": f"t{i}", "expected": {"name": "f", "arguments": {"x": i, "city": "Zürich"}}}
    for i in range(20)
]
NEW_TASKS = [
    {"id": f"t{i}", "expected": {"name": "f", "arguments": {"x": i, "city": "Zurich"}}}
    for i in range(20)
]


def answers(n: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for i in range(n):
        task = i % 20
        city = "Zürich" if i % 3 else "Zurich"
        out.append(
            {
                "task_id": f"t{task}",
                "answer": dumps({"name": "f", "arguments": {"x": task, "city": city}}).decode(),
                "sample_id": f"s{i}",
                "model": "m-2024-01-01",
                "sampling": {"temperature": 0.7, "seed": i},
            }
        )
    return out


def timed(label: str, rows: int, action: Callable[[], int]) -> None:
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the commands' own reports
        code = action()
    elapsed = time.perf_counter() - start
    print(
        f"{label:<34} {rows:>8} rows  {elapsed * 1000:>9.1f} ms  {rows / elapsed:>10.0f} rows/s  (exit {code})"
    )


def bench(n: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "tasks.jsonl").write_bytes(b"".join(dumps(t) + b"\n" for t in TASKS))
        (root / "new.jsonl").write_bytes(b"".join(dumps(t) + b"\n" for t in NEW_TASKS))
        (root / "answers.jsonl").write_bytes(b"".join(dumps(a) + b"\n" for a in answers(n)))
        grade = [
            "grade",
            "--tasks",
            str(root / "tasks.jsonl"),
            "--answers",
            str(root / "answers.jsonl"),
        ]
        quiet = ["--no-progress"]
        print(f"offline bench: {n} answers over {len(TASKS)} tasks")
        timed(
            "grade --out rows.jsonl (baseline)",
            n,
            lambda: main([*grade, *quiet, "--out", str(root / "a.jsonl")]),
        )
        timed(
            "grade --out rows.parquet",
            n,
            lambda: main([*grade, *quiet, "--out", str(root / "a.parquet")]),
        )
        timed(
            "export --parquet --wide",
            n,
            lambda: main(
                [
                    "export",
                    "--results",
                    str(root / "a.jsonl"),
                    "--parquet",
                    str(root / "e.parquet"),
                    "--wide",
                ]
            ),
        )
        timed(
            "regrade (new task set)",
            n,
            lambda: main(
                [
                    "regrade",
                    "--results",
                    str(root / "a.jsonl"),
                    "--tasks",
                    str(root / "new.jsonl"),
                    "--out",
                    str(root / "d.jsonl"),
                ]
            ),
        )
        (root / "gate.yaml").write_text(
            "suites:\n  - name: all\n    task_ids: ["
            + ", ".join(f"t{i}" for i in range(20))
            + "]\n"
        )
        with contextlib.redirect_stdout(io.StringIO()):
            main(
                [
                    *grade[:2],
                    str(root / "new.jsonl"),
                    *grade[3:],
                    *quiet,
                    "--out",
                    str(root / "b.jsonl"),
                ]
            )
        timed(
            "compare --gate (paired)",
            2 * n,
            lambda: main(
                [
                    "compare",
                    "--gate",
                    str(root / "gate.yaml"),
                    "--baseline",
                    str(root / "a.jsonl"),
                    "--candidate",
                    str(root / "b.jsonl"),
                ]
            ),
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20000)
    bench(parser.parse_args().rows)
