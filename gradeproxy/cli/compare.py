"""``gradeproxy compare``: primary vs shadow over the proxy's result rows, pair by pair.

Reads one or more result files (JSONL, as ``results.path`` writes them; rotated files too),
pairs the rows by ``pair_id`` and ``choice`` (grader/analysis/paired.py), and prints per task and
per mutation kind the two pass and stale rates, wins/losses/ties and the exact McNemar p-value,
and, when the rows carry ``cost`` (``pricing.path``), the cost per passing answer per variant;
``--json`` prints the same as one JSON object. A row that cannot be read (not JSON, cut off,
fields of the wrong type) is skipped and counted by reason (grader/intake.py, ``input`` in
``--json``). Exit 0 every row read (whatever the comparison says), 1 some rows were skipped
(the first few named on stderr with ``file:line``), 2 nothing usable (no such file, not JSONL),
with nothing printed on stdout; ``--strict`` refuses the run at the first bad row (exit 2).
``--gate GATE.yaml`` turns it into a promotion decision (gradeproxy/cli/gate.py,
grader/analysis/gate.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gradeproxy.cli._io import ExpandGlobs, InputError, Source, results_source, source_lines
from grader.analysis.paired import RESULTS, Comparison, Leg, Summary, summarise
from grader.capture import is_capture
from grader.intake import InputReason, Intake, UnusableInputError
from grader.json import dumps
from grader.labels import is_label
from grader.rounding import percent


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "compare",
        help="compare primary and shadow grades pair by pair",
        description="Compare the primary and shadow variants of the proxy's result rows: pass "
        "and stale rates, wins/losses/ties over complete pairs, exact McNemar p-value.",
    )
    parser.add_argument(
        "--results",
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="FILE",
        help="result JSONL (live rows; quoted globs expanded: 'grades.w*.jsonl') or a "
        "postgresql:// URL (filters: ?run=&since=&until=&task=&variant=)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--gate",
        type=Path,
        metavar="GATE.yaml",
        help="decide per frozen suite: exit 1 on a hard fail, 3 when a suite cannot be decided",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="refuse the whole run at the first bad row (exit 2, nothing printed); "
        "with --gate, a run with bad rows is otherwise undecidable (exit 3)",
    )
    parser.add_argument(
        "--baseline",
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="FILE",
        help="with --gate: offline run A",
    )
    parser.add_argument(
        "--candidate",
        nargs="+",
        type=results_source,
        action=ExpandGlobs,
        metavar="FILE",
        help="with --gate: offline run B",
    )
    parser.set_defaults(handler=run)


def _optional_str(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value is not None and not isinstance(value, str):
        raise _BadRowError(f"'{key}' must be a string or null")
    return value


class _BadRowError(ValueError):
    """A readable row that is not a usable result row: skipped and counted."""

    def __init__(self, message: str, code: InputReason = "bad_field") -> None:
        super().__init__(message)
        self.code: InputReason = code


def _leg(row: Any) -> Leg | None:
    """The row's paired leg, None for a row that pairs with nothing; raises for a bad row."""
    if not isinstance(row, dict):
        raise _BadRowError("expected a result row (a JSON object)", "not_an_object")
    task_id, result = row.get("task_id"), row.get("result")
    if not isinstance(task_id, str) or not isinstance(result, str):
        raise _BadRowError("a result row needs string 'task_id' and 'result'")
    variant = row.get("variant")
    if variant not in (None, "primary", "shadow"):
        raise _BadRowError("'variant' must be primary, shadow or null")
    pair_id = _optional_str(row, "pair_id")
    kind = _optional_str(row, "mutationKind")
    choice = row.get("choice", 0)
    if isinstance(choice, bool) or not isinstance(choice, int):
        raise _BadRowError("'choice' must be an integer")
    cost = row.get("cost")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)):
        raise _BadRowError("'cost' must be a number or null")
    if pair_id is None or variant is None or result not in RESULTS:
        return None
    # A response's cost is on each of its choices' rows: counted once, with choice 0.
    return Leg(pair_id, choice, variant, task_id, kind, result, cost if choice == 0 else None)


def read_legs(paths: list[Source], intake: Intake) -> tuple[list[Leg], int, int]:
    """The paired legs of every file, the number of rows, and the rows that pair with nothing.

    A row that cannot be used is skipped, counted in ``intake`` and in neither number."""
    legs: list[Leg] = []
    rows = unpaired = 0
    for path in paths:
        for lineno, row in source_lines(intake, path):
            if is_capture(row) or is_label(row):  # an untagged answer, a person's label
                continue
            try:
                leg = _leg(row)
            except _BadRowError as exc:
                intake.problem(str(path), lineno, exc.code, str(exc))
                continue
            rows += 1
            if leg is None:
                unpaired += 1
                continue
            legs.append(leg)
    return legs, rows, unpaired


def _percent(count: int, total: int) -> str:
    return f"{percent(count, total)}%" if total else "-"


def _delta(c: Comparison) -> str:
    return f"{100 * (c.shadow_pass - c.primary_pass) / c.pairs:+.1f}pp" if c.pairs else "-"


def _p(c: Comparison) -> str:
    value = float(c.p_value)
    return f"{value:.4g}" if value >= 1e-4 else f"{value:.2e}"


HEADER = ("pairs", "pass P", "pass S", "Δ pass", "stale P", "stale S", "wins", "losses",
          "ties", "McNemar p")  # fmt: skip


def _cells(c: Comparison) -> tuple[str, ...]:
    return (
        str(c.pairs),
        _percent(c.primary_pass, c.pairs),
        _percent(c.shadow_pass, c.pairs),
        _delta(c),
        _percent(c.primary_stale, c.pairs),
        _percent(c.shadow_stale, c.pairs),
        str(c.wins),
        str(c.losses),
        str(c.ties),
        _p(c),
    )


def render_table(summary: Summary) -> str:
    """The comparison as an aligned text table (P = primary, S = shadow)."""
    sections = [
        ("task", summary.by_task),
        ("mutation kind", summary.by_mutation_kind),
        ("", [summary.overall]),
    ]
    first = max([len("mutation kind"), *(len(c.group) for _, group in sections for c in group)])
    widths = [max(len(h), 7) for h in HEADER]
    lines = [
        f"{summary.overall.pairs} complete pairs from {summary.rows} rows "
        f"(left out: {summary.incomplete} incomplete, {summary.conflicting} conflicting pairs; "
        f"{summary.unpaired_rows} rows without a pair). P = primary, S = shadow; "
        "wins: only the shadow passed; losses: only the primary passed.",
    ]
    for title, group in sections:
        lines.append("")
        lines.append(
            f"{title:<{first}}  "
            + "  ".join(f"{h:>{w}}" for h, w in zip(HEADER, widths, strict=True))
        )
        for c in group:
            cells = "  ".join(f"{v:>{w}}" for v, w in zip(_cells(c), widths, strict=True))
            lines.append(f"{c.group:<{first}}  {cells}")
    if summary.cost is not None:
        lines.append("")
        lines.append(cost_line(summary.cost))
    return "\n".join(lines)


def cost_line(cost: dict[str, Any]) -> str:
    """Cost per passing answer per variant, over the complete pairs (rows' ``cost``)."""

    def side(name: str, label: str) -> str:
        leg = cost[name]
        per = leg["cost_per_pass"]
        each = "-" if per is None else f"{per:.6g}"
        return f"{label} {each} ({leg['cost']:.6g} over {leg['pass']} passing answers)"

    unpriced = "; pairs without a price on a side are left out of its cost" * any(
        cost[n]["priced_responses"] == 0 for n in ("primary", "shadow")
    )
    return (
        "cost per passing answer (complete pairs, the price table's currency): "
        + side("primary", "P")
        + ", "
        + side("shadow", "S")
        + unpriced
    )


def run(args: argparse.Namespace) -> int:
    if args.gate is not None:
        from gradeproxy.cli.gate import run_gate

        return run_gate(args)
    if not args.results or args.baseline or args.candidate:
        print(
            "gradeproxy compare: error: give --results (--baseline/--candidate need --gate)",
            file=sys.stderr,
        )
        return 2
    intake = Intake("compare", strict=args.strict)
    try:
        legs, rows, unpaired = read_legs(args.results, intake)
    except (InputError, UnusableInputError) as exc:
        print(f"gradeproxy compare: error: {exc}", file=sys.stderr)
        return 2
    summary = summarise(legs, rows, unpaired)
    if args.json:
        data = {"files": [str(p) for p in args.results], **summary.to_dict()}
        data["input"] = intake.to_dict()
        sys.stdout.buffer.write(dumps(data) + b"\n")
        sys.stdout.flush()
    else:
        if intake.problems:
            print(intake.summary())
        print(no_pairs_hint(summary) if summary.overall.pairs == 0 else render_table(summary))
    intake.warn()
    return intake.exit_code()


def no_pairs_hint(summary: Summary) -> str:
    """What to do when nothing pairs: empty tables and "McNemar p 1" would read as a result."""
    found = (
        f"no complete primary/shadow pairs in {summary.rows} rows "
        f"({summary.unpaired_rows} rows without a pair, {summary.incomplete} incomplete and "
        f"{summary.conflicting} conflicting pairs): nothing to compare."
    )
    if summary.incomplete:
        hint = (
            "Pairs are waiting for a leg: the shadow's rows may be in another file (pass every "
            "results file, rotated ones too) or the shadow failed "
            "(gradeproxy_shadow_requests_total)."
        )
    else:
        hint = (
            "These rows come from a proxy without a shadow. Configure upstream.shadow (or a "
            "route's shadow, docs/shadow.md), send graded traffic, then compare its results file."
        )
    return f"{found}\n{hint}"
