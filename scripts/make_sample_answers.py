"""Write config/answers/sample.jsonl: answers for the sample suite, for ``gradeproxy grade``.

The answers are what the demo backend would send (proxy.demo.answers: the deterministic mix of
expected, stale, wrong, prose and fenced answers), turned into the answer strings the proxy hands
the grader: ``{"tool_calls": [...]}`` for tool calls, else the text. Two answers per task.
Run ``python scripts/make_sample_answers.py`` after changing the sample suite; a test checks the
committed file is current.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grader._json import dumps
from proxy.demo.answers import SAMPLE_TASKS_PATH, load_demo_tasks, planned_message

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "config" / "answers" / "sample.jsonl"
PER_TASK = 2


def render() -> bytes:
    rows = []
    for task in load_demo_tasks(SAMPLE_TASKS_PATH):
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
