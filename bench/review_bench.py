"""What the review queue costs a reviewer: its first page load over a large results file, then
each label post and page load after it, over HTTP against a real ``gradeproxy serve``.

The anchor is the first load in the same run: it reads the whole file, as every load and every
post did before the queue kept its items (proxy/surfaces/review.py ``RowItems``); after it, a
post reads only the lines appended since. Figures, never assertions. Run:
``python -m bench review [--rows 100000] [--posts 20]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rows(count: int) -> bytes:
    """Judged rows of a realistic size: a judge column, a tool-call column, a 300-char answer."""
    out = []
    for n in range(count):
        judge = {"name": "tone", "type": "label_model", "passed": n % 3 == 0,
                 "reason_code": "judge_pass", "reason": "the judge's reason " * 4}  # fmt: skip
        call = {"name": "call", "type": "tool_call", "passed": True, "reason": "x" * 100}
        row = {"kind": "answer", "row_schema_version": 3, "row_id": f"00000000-0000-4000-8000-{n:012d}",
               "task_id": f"t.{n % 50}", "result": "pass", "passed": True, "checks": [judge, call],
               "answer": "a" * 300, "model": "m-1"}  # fmt: skip
        out.append(json.dumps(row).encode() + b"\n")
    return b"".join(out)


def timed(request: urllib.request.Request | str) -> tuple[float, Any]:
    start = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as answer:
        body = json.loads(answer.read())
    return time.perf_counter() - start, body


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--posts", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="review-bench-") as work:
        results = Path(work) / "grades.jsonl"
        results.write_bytes(rows(args.rows))
        port = free_port()
        config = Path(work) / "proxy.yaml"
        config.write_text(
            f"upstream:\n  url: http://127.0.0.1:{free_port()}/v1\nlisten:\n  port: {port}\n"
            f"tasks:\n  path: {REPO / 'config' / 'tasks' / 'sample.jsonl'}\n"
            f"results:\n  path: {results}\nreview:\n  judged_sample: 0.1\n"
            "shutdown:\n  drain_delay_s: 0\n"
        )
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        command = [sys.executable, "-m", "gradeproxy.cli", "serve", "--config", str(config)]
        silent = subprocess.DEVNULL
        with subprocess.Popen(command, env=env, stdout=silent, stderr=silent) as proxy:
            try:
                return measure(f"http://127.0.0.1:{port}", results, args)
            finally:
                proxy.terminate()
                proxy.wait(timeout=30)


def measure(base: str, results: Path, args: argparse.Namespace) -> int:
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{base}/livez", timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    cold, first = timed(f"{base}/ui/review/items.json")
    items = [item["key"] for item in first["items"]]
    posts, loads = [], []
    for n in range(min(args.posts, len(items))):
        body = json.dumps({"item": items[n], "verdict": "pass" if n % 2 else "fail"}).encode()
        label = urllib.request.Request(
            f"{base}/ui/review/label", data=body, headers={"Content-Type": "application/json"}
        )
        posts.append(timed(label)[0])
        spent, page = timed(f"{base}/ui/review/items.json")
        loads.append(spent)
    size = results.stat().st_size / 1e6
    print(f"results file: {args.rows} rows, {size:.1f} MB; queue items: {len(items)}")
    print(f"first page load (reads the whole file; the anchor): {1000 * cold:8.1f} ms")
    post, load = statistics.median(posts), statistics.median(loads)
    print(f"label post, median of {len(posts)}:                  {1000 * post:8.1f} ms")
    print(f"page load after a post, median:                  {1000 * load:8.1f} ms")
    print(f"first load / post: {cold / post:.1f}x; reviewed at the end: {page['reviewed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
