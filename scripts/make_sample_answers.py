"""Write config/answers/sample.jsonl (answers for the sample suite, for ``gradeproxy grade``) and
the package data copies the wheel ships (proxy/demo/data/): config/ is the one source.

The answers are what the demo backend would send (proxy.demo.answers: the deterministic mix of
expected, stale, wrong, prose and fenced answers), turned into the answer strings the proxy hands
the grader: ``{"tool_calls": [...]}`` for tool calls, else the text. Two answers per task.
Run ``python scripts/make_sample_answers.py`` after changing the sample suite; a test checks the
committed file is current.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grader.json import dumps
from proxy.demo.answers import load_demo_tasks, planned_message

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "config" / "tasks" / "sample.jsonl"
OUT = ROOT / "config" / "answers" / "sample.jsonl"
# What the wheel ships, so `gradeproxy demo` runs outside a source tree: (source, package copy).
PACKAGE_COPIES = (
    (TASKS, ROOT / "proxy" / "demo" / "data" / "tasks.jsonl"),
    (OUT, ROOT / "proxy" / "demo" / "data" / "answers.jsonl"),
)
PER_TASK = 2


def render() -> bytes:
    rows = []
    for task in load_demo_tasks(TASKS):
        for counter in range(PER_TASK):
            message = planned_message(task, counter)
            calls = message.get("tool_calls")
            answer = dumps({"tool_calls": calls}).decode() if calls else message["content"]
            rows.append(dumps({"task_id": task.id, "answer": answer}))
    return b"\n".join(rows) + b"\n"


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_bytes(render())
    print(f"wrote {OUT}", file=sys.stderr)
    for source, copy in PACKAGE_COPIES:
        copy.write_bytes(source.read_bytes())
        print(f"wrote {copy}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
