"""``uniqueItems`` and a long ``enum`` through the public grader, beside jsonschema's own keyword.

Red team, round 3: one answer with a 6,000-item array under ``uniqueItems: true`` stalled live
grading for about 40 s. This times ``grader.grade`` on a task whose ``json_schema`` check holds
that schema (the path the proxy and the scoring API take) at 1,000 / 3,000 / 6,000 items, and in
the same run the anchor: jsonschema's validator on the same schema and value, which is what the
grader ran before. A bounded keyword shows ~3x per step (n log n); the anchor's ~9x is quadratic.
Run: ``python bench/schema_bench.py [--quick]`` (``--quick``: 1,000 and 3,000 items only).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from typing import Any

import jsonschema

from grader import grade, parse_task
from grader.json import dumps


def _case(kind: str, n: int) -> tuple[dict[str, Any], list[Any]]:
    """(the ``xs`` argument's schema, its value): distinct objects, or distinct mixed scalars."""
    if kind == "uniqueItems, objects":
        return {"type": "array", "uniqueItems": True}, [{"id": i} for i in range(n)]
    if kind == "uniqueItems, mixed":
        half = n // 2
        return {"type": "array", "uniqueItems": True}, [*range(half), *map(str, range(half)), True]
    members = [{"k": i} for i in range(n)]
    return {"type": "array", "items": {"enum": members}}, members[::-1]


def _best(run: Callable[[], object], budget_s: float) -> float:
    """The fastest of a few runs (at least one, more while within the budget), in seconds."""
    times: list[float] = []
    while not times or (sum(times) < budget_s and len(times) < 5):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def _all_errors(validator: Any, instance: Any) -> list[Any]:
    return list(validator.iter_errors(instance))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    sizes = (1000, 3000) if parser.parse_args().quick else (1000, 3000, 6000)
    print(f"{'case':<22} {'items':>6} {'grader.grade':>13} {'jsonschema':>11} {'ratio':>8}")
    for kind in ("uniqueItems, objects", "uniqueItems, mixed", "enum of n objects"):
        for n in sizes:
            schema, value = _case(kind, n)
            parameters = {"type": "object", "properties": {"xs": schema}}
            task = parse_task(
                {
                    "id": "bench",
                    "expected": {"name": "f", "arguments": {}},
                    "checks": [{"type": "json_schema", "name": "args", "schema": parameters}],
                }
            )
            answer = dumps(
                {
                    "tool_calls": [
                        {"function": {"name": "f", "arguments": dumps({"xs": value}).decode()}}
                    ]
                }
            ).decode()
            ours = _best(functools.partial(grade, task, answer), 0.5)
            library = jsonschema.Draft202012Validator(parameters)
            anchor = _best(functools.partial(_all_errors, library, {"xs": value}), 0.0)
            print(
                f"{kind:<22} {n:>6} {ours * 1e3:>10.1f} ms {anchor:>9.2f} s {anchor / ours:>7.0f}x"
            )


if __name__ == "__main__":
    main()
