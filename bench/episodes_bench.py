"""Episode grading speed: the worked billing task's replay, by episode length.

An episode of N calls is the worked task's good run with N-4 extra read-only ``get_payment``
calls before the fix, given as chat ``messages`` (what the proxy reads off a request). Printed:
episodes per second and microseconds per call for reading the log alone and for the whole row
(log, replay, every column), so the replay's own share is visible. Bounds
(``grading.episode_max_calls``) are sized from these figures. Run:
``python bench/episodes_bench.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from _timing import per_call

from grader.episodes.grade import episode_row
from grader.episodes.log import from_chat
from grader.episodes.record import EpisodeRecord
from grader.loader import load_tasks

ROOT = Path(__file__).resolve().parents[1]
FINAL = "Order ord_7 was charged twice: pay_1002 duplicates pay_1001; inv_501 cancelled."
FIX: list[tuple[str, dict[str, Any], Any]] = [
    ("list_payments", {"customer": "cus_42"}, {"payments": ["pay_1001", "pay_1002"]}),
    (
        "create_adjustment",
        {
            "payment_id": "pay_1002",
            "original_payment_id": "pay_1001",
            "amount": 4550,
            "reason": "duplicate_charge",
        },
        {"adjustment_id": "adj_1"},
    ),
    ("cancel_invoice", {"invoice_id": "inv_501"}, {"ok": True}),
]


def messages(calls: int) -> list[dict[str, Any]]:
    reads = [("get_payment", {"payment_id": "pay_1002"}, {"id": "pay_1002"})] * (calls - 3)
    out: list[dict[str, Any]] = [{"role": "user", "content": "fix it"}]
    for index, (name, arguments, result) in enumerate([*reads, *FIX]):
        function = {"name": name, "arguments": json.dumps(arguments)}
        call = {"id": f"c{index}", "type": "function", "function": function}
        out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        out.append({"role": "tool", "tool_call_id": f"c{index}", "content": json.dumps(result)})
    out.append({"role": "assistant", "content": FINAL})
    return out


def grade(task_id: str, record: EpisodeRecord, history: list[dict[str, Any]]) -> object:
    return episode_row(task_id, record, from_chat(history), tasks_digest="d")


def best(run: Callable[[], object], seconds: float) -> float:
    """Best-of-5 seconds per run (each timing loops for ``seconds``/5)."""
    return min(per_call(run, seconds, rounds=5))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="shorter timings")
    args = parser.parse_args()
    seconds = 0.5 if args.quick else 2.5
    task = load_tasks(ROOT / "config" / "tasks" / "episodes.jsonl").get(
        "billing.duplicate_charge.episode"
    )
    assert task is not None
    record = task.episode
    assert record is not None
    print(f"{'calls':>6} {'log ep/s':>10} {'row ep/s':>10} {'row us/call':>12}  result")
    for calls in (4, 50, 500):
        history = messages(calls)
        log_s = best(partial(from_chat, history), seconds)
        row_s = best(partial(grade, task.id, record, history), seconds)
        row = episode_row(task.id, record, from_chat(history), tasks_digest="d")
        print(
            f"{calls:>6} {1 / log_s:>10.0f} {1 / row_s:>10.0f} {row_s / calls * 1e6:>12.1f}"
            f"  {row['result']}"
        )


if __name__ == "__main__":
    main()
