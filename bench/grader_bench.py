"""Grader speed: grades per second on typical answers, and milliseconds on adversarial ones.

Prints figures and, in the same run, a baseline: ``orjson.loads`` of the same bytes (the floor
any JSON-reading grader pays). The adversarial shapes are timed at 10 KB, 100 KB and 1 MB: a
linear scanner shows ~10x per step. The engine section times the fast path every surface takes
for a task without checks (``grade()`` and the row the proxy writes) beside ``score()``, and a
task with checks for scale. Run: ``python bench/grader_bench.py [--quick]``.
"""

from __future__ import annotations

import argparse
import functools
import statistics
from collections.abc import Callable
from pathlib import Path

import orjson
from _timing import per_call, timings

from grader import answer_row, grade, load_tasks, offline_context, parse_task, score
from grader.json import dumps

TASK = parse_task(
    {
        "id": "bench",
        "expected": {
            "name": "create_ticket",
            "arguments": {
                "title": "Printer jam on floor 3",
                "priority": "high",
                "labels": ["hw", "office"],
                "tags": "web,hero",
                "eta": "PT45M",
                "amount": 4550,
                "customer": {"id": 981, "tier": "gold"},
            },
        },
    }
)
CALL = dumps(TASK.raw["expected"]).decode()
ARGS = dumps(TASK.raw["expected"]["arguments"]).decode()

TYPICAL = {
    "bare 300-byte call": CALL + " " * max(0, 300 - len(CALL)),
    "2 KB prose + fenced call": ("I looked at the ticket history and the printer logs. " * 30)[
        :1800
    ]
    + "\n```json\n"
    + CALL
    + "\n```\n",
    "tool_calls wire format": dumps(
        {
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "create_ticket", "arguments": ARGS},
                }
            ]
        }
    ).decode(),
}


def adversarial(size: int) -> dict[str, str]:
    half = size // 2
    return {
        "deep nesting (objects)": '{"name":"x","arguments":'
        + '{"a":' * (size // 5)
        + "1"
        + "}" * (size // 5)
        + "}",
        "deep nesting (arrays)": "[" * half + "]" * half + CALL,
        "unclosed braces then call": "{" * half + CALL + " tail" * (half // 5),
        "huge string": '{"name":"create_ticket","arguments":{"title":"' + "y" * size + '"}}',
        "quote storm": '{"' * half,
        "prose quotes and braces": ('{ it\'s "a {draft" ' * (size // 18))[:size] + CALL,
    }


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls per second, best of three rounds."""
    return 1 / min(per_call(fn, seconds, rounds=3))


def millis(fn: Callable[[], object], repeats: int) -> float:
    return 1000 * statistics.median(timings(fn, repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter rounds")
    args = parser.parse_args()
    seconds = 0.6 if args.quick else 3.0
    print("typical answers (one core)")
    print(f"  {'case':<28} {'grades/s':>10} {'orjson.loads/s':>15} {'ratio':>7}  verdict")
    print("  (baseline: orjson.loads of the JSON the answer carries, the floor of any JSON grader)")
    for name, answer in TYPICAL.items():
        graded = rate(functools.partial(score, TASK, answer), seconds)
        # The baseline parses the JSON the answer carries (the embedded call for prose).
        encoded = (answer if answer.lstrip().startswith("{") else CALL).encode()
        baseline = rate(functools.partial(orjson.loads, encoded), seconds)
        verdict = score(TASK, answer).reason_code
        print(
            f"  {name:<28} {graded:>10,.0f} {baseline:>15,.0f} {graded / baseline:>7.2f}  {verdict}"
        )
    engine(seconds)
    print("\nadversarial answers: median ms at 10 KB / 100 KB / 1 MB (linear: ~10x per step)")
    print(
        f"  {'shape':<28} {'10 KB':>9} {'100 KB':>9} {'1 MB':>9} {'x/step':>7}  verdict at 100 KB"
    )
    sizes = (10_000, 100_000, 1_000_000)
    shapes = [adversarial(size) for size in sizes]
    for name in shapes[0]:
        row = [
            millis(functools.partial(score, TASK, shape[name]), 3 if size >= 1_000_000 else 9)
            for shape, size in zip(shapes, sizes, strict=True)
        ]
        step = (row[2] / row[0]) ** 0.5 if row[0] > 0 else float("nan")
        verdict = score(TASK, shapes[1][name]).reason_code
        print(f"  {name:<28} {row[0]:>9.2f} {row[1]:>9.2f} {row[2]:>9.2f} {step:>7.1f}  {verdict}")


def graded_row(answer: str) -> dict[str, object]:
    """What the proxy does per answer of a task without checks: grade, then build the row."""
    return answer_row(TASK, grade(TASK, answer), "sha256:x")


def engine(seconds: float) -> None:
    """The engine's fast path (no checks) against score(), and a task with checks."""
    print("\nengine (one core): grades/s")
    print(f"  {'case':<28} {'score()':>10} {'grade()':>10} {'grade+row':>10} {'ratio':>7}")
    for name, answer in TYPICAL.items():
        scored = rate(functools.partial(score, TASK, answer), seconds)
        graded = rate(functools.partial(grade, TASK, answer), seconds)
        rowed = rate(functools.partial(graded_row, answer), seconds)
        print(
            f"  {name:<28} {scored:>10,.0f} {graded:>10,.0f} {rowed:>10,.0f} {rowed / scored:>7.2f}"
        )
    tasks = load_tasks(
        Path(__file__).resolve().parents[1] / "config" / "tasks" / "checks-examples.jsonl"
    )
    policy = tasks.tasks["payments.new_required_field.policy"]
    call = policy.raw["expected"]
    answer = dumps(
        {
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": call["name"],
                        "arguments": dumps(call["arguments"]).decode(),
                    },
                }
            ]
        }
    ).decode()
    context = offline_context(policy)
    checked = rate(functools.partial(grade, policy, answer, context), seconds)
    print(f"  {'policy task (4 columns)':<28} {'-':>10} {checked:>10,.0f}")


if __name__ == "__main__":
    main()
