"""BFCL's AST checker vs our tool_call check, timed from the same input.

Input: every answer of the conformance corpus (tests/support/bfcl.py: BFCL_v4 python and
irrelevance items, ten mutation kinds, about 18,400 answers), as the tool-call JSON a client
receives. Two figures per checker, answers per second, best of ``--repeat`` runs:

* end to end — BFCL: its OpenAI FC decode step (``json.loads`` of the answer and of each
  call's ``arguments``) then ``ast_checker``; ours: ``Sample.from_answer`` then ``check.run``;
* match only — BFCL: ``ast_checker`` on the decoded calls; ours: ``check.run`` on a sample whose
  ``output_tools`` already hold parsed arguments (no JSON text is read).

Timing: CPU time of this process, a chunk of answers at a time, the two checkers taking turns on
every chunk, each chunk's best of ``--repeat`` runs summed (see ``_rates``): on a shared machine
this is steadier than the best whole run, which one burst of load can spoil.

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


CHUNK = 200  # answers timed at once: a few milliseconds, short against the load's swings


def _rates(
    fns: tuple[Callable[[dict[str, Any]], object], ...], rows: list[dict[str, Any]], repeat: int
) -> list[float]:
    """Answers/s of each function: this process's CPU time over the rows, a chunk of
    :data:`CHUNK` answers at a time, each chunk's best of ``repeat`` runs summed.

    The functions take turns on every chunk (the order flipping between runs), with the
    collector paused, so that load from other processes on a shared machine falls on both
    alike, and a burst that slows a few chunks of one run is left out by the other runs of
    those chunks instead of spoiling a whole run."""
    chunks = [rows[i : i + CHUNK] for i in range(0, len(rows), CHUNK)]
    best = [[float("inf")] * len(chunks) for _ in fns]
    for run in range(repeat):
        order = list(enumerate(fns)) if run % 2 == 0 else list(enumerate(fns))[::-1]
        gc.collect()
        gc.disable()
        for c, chunk in enumerate(chunks):
            for index, fn in order:
                start = time.process_time()
                for row in chunk:
                    fn(row)
                best[index][c] = min(best[index][c], time.process_time() - start)
        gc.enable()
    return [len(rows) / sum(b) for b in best]


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
    print(
        f"bfcl-eval checker vs tool_call check, per-chunk best of {args.repeat} runs, one process"
    )
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
