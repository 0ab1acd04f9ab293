"""Human labels as rows: the ``kind: "label"`` row, its checks, and the latest label per item.

A reviewer's judgement (the review page, proxy/surfaces/review.py) is written as a row of its
own, through the same writer as every other row, and never by editing the row it labels:
``labels`` names the labelled row's ``row_id``, ``draft`` the labelled draft's task id (one of
them is set), ``verdict`` is ``pass``, ``fail`` or ``edit`` (a draft's expected call replaced by
``expected``). A later label of the same item wins (:func:`latest_labels`: by ``at``, then by
the order the rows were read), so a reviewer changes their mind by labelling again.

Also here, because every reader of labels needs the same answers: the calibration split of a
labelled row (:func:`split_of`, a hash of its ``row_id``: 20/40/40 train/dev/test as seed 002
sizes them), the judge's verdict on a row (:func:`judge_verdict`) and the check of an edited
expected call against a draft's tools (:func:`checked_expected`).

Pure: no I/O, no clock (the caller stamps ``at``), nothing of the proxy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, get_args

from grader.errors import GraderError
from grader.rowids import offline_row_id

__all__ = [
    "JUDGE_TYPES",
    "LABEL_KIND",
    "SPLIT_SHARES",
    "VERDICTS",
    "LabelError",
    "Verdict",
    "checked_expected",
    "is_label",
    "judge_verdict",
    "label_key",
    "label_problem",
    "label_row",
    "latest_labels",
    "sampled",
    "split_of",
]

LABEL_KIND: Final = "label"
Verdict = Literal["pass", "fail", "edit"]
VERDICTS: Final[tuple[Verdict, ...]] = get_args(Verdict)
# Seed 002 §2: train ~20-30%, dev ~30-40%, sealed test ~30-40%; the cumulative cut points.
SPLIT_SHARES: Final = (("train", 20), ("dev", 60), ("test", 100))
JUDGE_TYPES: Final = frozenset({"label_model", "score_model"})
MAX_NOTE_CHARS: Final = 4000
ROW_SCHEMA_VERSION: Final = 3  # the rows' schema (grader/rows.py); a label adds a kind only


class LabelError(GraderError, ValueError):
    """A label or an edited expected call that cannot be stored; the message says why."""


def _bucket(row_id: str, salt: str) -> int:
    """0..9999 from sha256 of ``salt|row_id``: the same on every machine and every run."""
    digest = hashlib.sha256(f"{salt}|{row_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 10000


def split_of(row_id: str) -> str:
    """The calibration split of a labelled row: ``train`` (20%), ``dev`` (40%) or ``test`` (40%).

    A hash of the row's id, so a label never changes split however often the labels are read,
    and a label added later does not reshuffle the sealed test split."""
    point = _bucket(row_id, "split") / 100
    return next(name for name, upto in SPLIT_SHARES if point < upto)


def sampled(row_id: str, rate: float) -> bool:
    """Whether a judge-graded row is in the review sample at ``rate`` (0..1), by its id."""
    return _bucket(row_id, "review") < round(rate * 10000)


def label_row(
    *,
    labels: str | None,
    draft: str | None,
    verdict: str,
    at: str,
    expected: list[dict[str, Any]] | None = None,
    note: str | None = None,
    reviewer: str | None = None,
    row_id: str | None = None,
) -> dict[str, Any]:
    """A label row (docs/review.md); raise :class:`LabelError` when it would be invalid."""
    row: dict[str, Any] = {
        "kind": LABEL_KIND,
        "row_id": row_id or offline_row_id(),
        "labels": labels,
        "draft": draft,
        "verdict": verdict,
    }
    if verdict == "edit":
        row["expected"] = expected
    row.update({"note": note, "reviewer": reviewer, "at": at})
    row["row_schema_version"] = ROW_SCHEMA_VERSION
    problem = label_problem(row)
    if problem is not None:
        raise LabelError(problem)
    return row


def is_label(row: Any) -> bool:
    return isinstance(row, dict) and row.get("kind") == LABEL_KIND


def label_problem(row: Mapping[str, Any]) -> str | None:
    """Why ``row`` is not a usable label row, or None."""
    labels, draft = row.get("labels"), row.get("draft")
    if (labels is None) == (draft is None):
        return "a label names exactly one of 'labels' (a row_id) and 'draft' (a task id)"
    for key, value in (("labels", labels), ("draft", draft)):
        if value is not None and (not isinstance(value, str) or not value):
            return f"{key!r} must be a non-empty string"
    verdict = row.get("verdict")
    if verdict not in VERDICTS:
        return f"'verdict' must be pass, fail or edit, got {verdict!r}"
    if verdict == "edit":
        if draft is None:
            return "only a draft's expected call can be edited ('edit' needs 'draft')"
        expected = row.get("expected")
        if not isinstance(expected, list) or not expected:
            return "'edit' needs 'expected': a non-empty list of calls"
    note = row.get("note")
    if note is not None and not isinstance(note, str):
        return "'note' must be a string or null"
    if isinstance(note, str) and len(note) > MAX_NOTE_CHARS:
        return f"'note' is longer than {MAX_NOTE_CHARS} characters"
    if not isinstance(row.get("at"), str):
        return "'at' must be the UTC time of the label (ISO 8601)"
    reviewer = row.get("reviewer")
    if reviewer is not None and not isinstance(reviewer, str):
        return "'reviewer' must be a string or null"
    return None


def label_key(row: Mapping[str, Any]) -> tuple[str, str]:
    """What a label is about: ``("row", row_id)`` or ``("draft", task_id)``."""
    labels = row.get("labels")
    return ("row", labels) if isinstance(labels, str) else ("draft", str(row.get("draft")))


def latest_labels(rows: Iterable[Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The latest usable label per labelled item among ``rows`` (any rows: others are passed
    over), by ``at`` and then by the order read; unusable label rows are passed over too."""
    latest: dict[tuple[str, str], tuple[str, int, dict[str, Any]]] = {}
    for order, row in enumerate(rows):
        if not is_label(row) or label_problem(row) is not None:
            continue
        key = label_key(row)
        seen = latest.get(key)
        if seen is None or (row["at"], order) >= (seen[0], seen[1]):
            latest[key] = (row["at"], order, row)
    return {key: row for key, (_, _, row) in latest.items()}


def judge_verdict(row: Mapping[str, Any]) -> bool | None:
    """The judge's verdict on a result row: its first judge column (``label_model`` /
    ``score_model``) that reached one; None when it has none (no judge, or only errors)."""
    checks = row.get("checks")
    if not isinstance(checks, list):
        return None
    for column in checks:
        if isinstance(column, dict) and column.get("type") in JUDGE_TYPES:
            passed = column.get("passed")
            if isinstance(passed, bool):
                return passed
    return None


def _tool_names(tools: Sequence[Any]) -> dict[str, Any]:
    """Tool name -> its ``parameters`` schema (``{"type": "object"}`` when it declares none)."""
    found: dict[str, Any] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        declared = function if isinstance(function, dict) else tool
        name = declared.get("name")
        if isinstance(name, str):
            parameters = declared.get("parameters")
            found[name] = parameters if parameters is not None else {"type": "object"}
    return found


def checked_expected(value: Any, tools: Sequence[Any]) -> list[dict[str, Any]]:
    """An edited expected call (one call object, or a list of them) as the list a label
    stores, once every call names one of ``tools`` and its arguments are valid against that
    tool's ``parameters`` schema; else :class:`LabelError` with the reason."""
    calls = value if isinstance(value, list) else [value]
    if not calls:
        raise LabelError("expected: give at least one call")
    declared = _tool_names(tools)
    out: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        where = f"expected[{index}]" if isinstance(value, list) else "expected"
        if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
            raise LabelError(f'{where}: a call is an object {{"name": ..., "arguments": {{...}}}}')
        name, arguments = call["name"], call["arguments"]
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise LabelError(f"{where}: 'name' must be a string and 'arguments' an object")
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            raise LabelError(f"{where}: no tool named {name!r} in the draft's tools ({known})")
        problem = _schema_problem(declared[name], arguments)
        if problem is not None:
            raise LabelError(f"{where}: not valid for the parameters of {name!r}: {problem}")
        out.append({"name": name, "arguments": arguments})
    return out


def _schema_problem(schema: Any, arguments: Mapping[str, Any]) -> str | None:
    from grader.checks.json_schema import arguments_problem  # jsonschema: on first edit only

    try:
        return arguments_problem(schema, arguments)
    except Exception as exc:  # a draft whose tool schema is itself unusable
        return f"the tool's schema cannot be used: {exc}"
