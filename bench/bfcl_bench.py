"""BFCL's AST checker vs our tool_call check, timed from the same input.

Input: every answer of the conformance corpus (tests/support/bfcl.py: BFCL_v4 python and
irrelevance items, ten mutation kinds, about 18,400 answers), as the tool-call JSON a client
receives. Two figures per checker, answers per second, best of ``--repeat`` runs:

* end to end — BFCL: its OpenAI FC decode step (``json.loads`` of the answer and of each
  call's ``arguments``) then ``ast_checker``; ours: ``Sample.from_answer`` then ``check.run``;
* match only — BFCL: ``ast_checker`` on the decoded calls; ours: ``check.run`` on a sample whose
  ``output_tools`` already hold parsed arguments (no JSON text is read).

Reported for parallel items (parallel, parallel_multiple) and the whole corpus. Needs bfcl-eval
(scripts/install-bfcl.sh). Run: ``python bench/bfcl_bench.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grader.checks import CheckContext, Sample
from grader.engine import checks_of
from tests.support.bfcl import MODEL, Case, Conformance

CONTEXT = CheckContext()


def _prepared(conf: Conformance, cases: list[Case]) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        (check,) = checks_of(conf.task(case.item))
        decoded = [] if case.calls is None else conf.decode(case.wire)
        tools = [
            {"type": "function", "function": {"name": n, "arguments": a}}
            for n, a in (case.calls or [])
        ]
        parsed = Sample("" if case.calls is not None else case.wire, None, tools, None)
        rows.append({"case": case, "wire": case.wire, "decoded": decoded, "check": check,
                     "parsed": parsed})  # fmt: skip
    return rows


def _bfcl(conf: Conformance, decode: bool) -> Callable[[dict[str, Any]], object]:
    checker, python, is_empty = conf.ast_checker, conf.language.PYTHON, conf.is_empty

    def one(row: dict[str, Any]) -> object:
        case: Case = row["case"]
        if decode:
            decoded = [] if case.calls is None else conf.decode(row["wire"])
        else:
            decoded = row["decoded"]
        if case.item.answer is None:
            return is_empty(decoded)
        question = case.item.question
        truth = case.item.answer["ground_truth"]
        return checker(question["function"], decoded, truth, python, case.item.category, MODEL)

    return one


def _ours(decode: bool) -> Callable[[dict[str, Any]], object]:
    def one(row: dict[str, Any]) -> object:
        sample = Sample.from_answer(row["wire"]) if decode else row["parsed"]
        return row["check"].run(sample, {}, CONTEXT)

    return one


def _rates(
    fns: tuple[Callable[[dict[str, Any]], object], ...], rows: list[dict[str, Any]], repeat: int
) -> list[float]:
    """Answers/s of each function, best of ``repeat`` runs of this process's CPU time, the runs
    interleaved and the collector paused, so that load from other processes on a shared
    machine and collections triggered by the other side fall on neither."""
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for index, fn in enumerate(fns):
            gc.collect()
            gc.disable()
            start = time.process_time()
            for row in rows:
                fn(row)
            best[index] = min(best[index], time.process_time() - start)
            gc.enable()
    return [len(rows) / b for b in best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    conf = Conformance()
    cases = list(conf.cases())
    corpora = {
        "parallel items": [c for c in cases if c.item.category.startswith("parallel")],
        "whole corpus": cases,
    }
    print(f"bfcl-eval checker vs tool_call check, best of {args.repeat} runs, one process")
    for label, subset in corpora.items():
        rows = _prepared(conf, subset)
        for mode, decode in (("end to end", True), ("match only", False)):
            theirs, ours = _rates((_bfcl(conf, decode), _ours(decode)), rows, args.repeat)
            print(
                f"{label:15} {mode:11} {len(rows):6} answers: BFCL {theirs:9,.0f}/s  "
                f"ours {ours:9,.0f}/s  ({ours / theirs:.2f}x)"
            )


if __name__ == "__main__":
    main()
