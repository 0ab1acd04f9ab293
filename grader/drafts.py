"""Task drafts from real traffic, and their promotion to tasks once a person has reviewed them.

``gradeproxy tasks draft`` reads result rows and keeps two kinds: capture rows (an untagged
request's answer, grader/capture.py) and failing graded rows (``result`` ``fail`` or
``stale``). It groups them by tool set and prompt (``tools_hash``, ``prompt_hash``) and writes
one draft per group in the ordinary task format plus ``"status": "draft"``, which the loader
refuses until ``gradeproxy tasks promote`` takes it out:

* ``expected`` is the observed call most rows of the group made (the first seen on a tie); the
  other calls seen are listed in ``metadata.draft.candidates`` with their counts;
* a row whose verdict flags the stale schema (``result: "stale"``) shows the previous schema's
  call: the most frequent such call becomes the candidate ``metadata.stale``;
* ``tools`` is the request's tool list, ``metadata.draft`` the provenance: the rows' ids, how
  many, both hashes, the models, the graded task ids, the prompt when a row kept it.

A graded row carries no ``prompt_hash`` (it names its task instead), so a failing row's prompt
hash is that of ``{"task_id": ...}``: rows of one task draft together. Rows this module cannot
use are never an error: each is counted by reason (:data:`UnusedReason`); a row of the wrong
shape raises :class:`DraftRowError` for the caller to count as an input problem. Pure: no file,
no socket, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from grader.capture import CAPTURE_KIND, prompt_hash, tools_hash
from grader.errors import GraderError
from grader.rowids import row_id_of
from grader.toolcall.canon import canonical_json
from grader.toolcall.extract import call_from_value, extract

__all__ = [
    "DRAFT_STATUS",
    "DraftRowError",
    "Drafter",
    "FilterError",
    "RowFilter",
    "UnusedReason",
    "latest_labels",
    "promote",
]

DRAFT_STATUS: Final = "draft"
RowKind = Literal["capture", "failing"]
ROW_KINDS: Final[tuple[RowKind, ...]] = ("capture", "failing")
# Why a row made no draft (counted, never an error):
UnusedReason = Literal[
    "not_a_candidate",  # neither a capture row nor a failing graded row (a pass, a label, …)
    "filtered",  # outside --filter
    "no_call",  # the answer called no tool (or a hashed or dropped answer hides it)
    "several_calls",  # parallel calls: a task's expected is one call
    "unusable_call",  # a call without a string name and object arguments
    "only_stale",  # its group showed only stale-schema calls: no expected candidate
]
# Why a draft was not promoted (counted):
LeftOut = Literal["unlabelled", "labelled_fail", "not_a_draft"]
VERDICTS: Final = ("pass", "fail", "edit")


class DraftRowError(GraderError, ValueError):
    """A row of the wrong shape (a field of the wrong type); ``reason_code`` for the intake."""

    def __init__(self, reason_code: Literal["bad_field", "missing_field"], message: str) -> None:
        super().__init__(message)
        self.reason_code: Literal["bad_field", "missing_field"] = reason_code


class FilterError(GraderError, ValueError):
    """A ``--filter`` that cannot be read (a usage error)."""


def _utc(text: str) -> datetime:
    """An ISO 8601 time (a date alone is its midnight; no zone is UTC); ValueError if not."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class RowFilter:
    """``--filter kind=capture|failing``, ``model=``, ``route=``, ``since=`` (all must hold)."""

    kinds: frozenset[str] = frozenset(ROW_KINDS)
    model: str | None = None
    route: str | None = None
    since: datetime | None = None

    @classmethod
    def parse(cls, texts: Sequence[str]) -> RowFilter:
        """``KEY=VALUE`` items, each given at most once; raises :class:`FilterError`."""
        given: dict[str, str] = {}
        for text in texts:
            key, found, value = text.partition("=")
            key = key.strip()
            if not found or not value:
                raise FilterError(f"--filter {text!r}: expected KEY=VALUE")
            if key not in ("kind", "model", "route", "since"):
                raise FilterError(f"--filter {text!r}: KEY is one of kind, model, route, since")
            if key in given:
                raise FilterError(f"--filter {key}: given twice")
            given[key] = value
        kinds: frozenset[str] = frozenset(ROW_KINDS)
        if "kind" in given:
            kinds = frozenset(part.strip() for part in given["kind"].split("|"))
            if not kinds <= set(ROW_KINDS):
                raise FilterError(f"--filter kind={given['kind']}: kinds are capture, failing")
        since = None
        if "since" in given:
            try:
                since = _utc(given["since"])
            except ValueError:
                raise FilterError(
                    f"--filter since={given['since']}: not an ISO 8601 date or time"
                ) from None
        return cls(kinds, given.get("model"), given.get("route"), since)

    def admits(self, row: Mapping[str, Any], kind: RowKind) -> bool:
        if kind not in self.kinds:
            return False
        if self.model is not None and row.get("model") != self.model:
            return False
        if self.route is not None and row.get("route") != self.route:
            return False
        if self.since is not None:
            time = row.get("time")
            try:
                return isinstance(time, str) and _utc(time) >= self.since
            except ValueError:
                return False
        return True


def row_kind(row: Mapping[str, Any]) -> RowKind | None:
    """``capture``, ``failing`` (a graded answer row whose result is fail or stale), or None."""
    kind = row.get("kind")
    if kind == CAPTURE_KIND:
        return "capture"
    if kind in (None, "answer") and row.get("result") in ("fail", "stale"):
        return "failing"
    return None


def _is_stale(row: Mapping[str, Any]) -> bool:
    return row.get("result") == "stale" or row.get("staleSchemaUsed") is True


def _observed(row: Mapping[str, Any], kind: RowKind) -> list[Any]:
    """The calls a row shows, as written (checked by the caller)."""
    if kind == "capture":
        calls = row.get("calls")
        if not isinstance(calls, list):
            raise DraftRowError("missing_field" if calls is None else "bad_field",
                                "a capture row's 'calls' must be a list")  # fmt: skip
        return calls
    call = row.get("call")
    if isinstance(call, Mapping) and "name" in call:
        return [call]
    answer = row.get("answer")
    if isinstance(answer, str) and not answer.startswith("sha256:"):
        found = extract(answer).call
        if found is not None:
            return [{"name": found.name, "arguments": found.arguments}]
    return []


def _hashes(row: Mapping[str, Any], kind: RowKind) -> tuple[str, str]:
    if kind == "capture":
        given = row.get("prompt_hash")
        if not isinstance(given, str) or not given:
            raise DraftRowError("missing_field" if given is None else "bad_field",
                                "a capture row needs its 'prompt_hash' (a string)")  # fmt: skip
        tools = row.get("tools_hash")
        return (tools if isinstance(tools, str) and tools else tools_hash(row.get("tools"))), given
    task_id = row.get("task_id")
    if not isinstance(task_id, str) or not task_id:
        raise DraftRowError("missing_field", "a graded row needs its 'task_id'")
    given = row.get("prompt_hash")
    prompt = given if isinstance(given, str) and given else prompt_hash({"task_id": task_id})
    return tools_hash(row.get("tools")), prompt


@dataclass(slots=True)
class _Tally:
    """Distinct calls by canonical form, with counts, in first-seen order."""

    calls: dict[str, list[Any]] = field(default_factory=dict)  # canonical -> [call, count]

    def add(self, canonical: str, call: dict[str, Any]) -> None:
        seen = self.calls.get(canonical)
        if seen is None:
            self.calls[canonical] = [call, 1]
        else:
            seen[1] += 1

    def ranked(self) -> list[tuple[str, dict[str, Any], int]]:
        order = list(self.calls)
        ranked = sorted(order, key=lambda c: (-self.calls[c][1], order.index(c)))
        return [(c, self.calls[c][0], self.calls[c][1]) for c in ranked]


@dataclass(slots=True)
class _Group:
    tools_hash: str
    prompt_hash: str
    rows: list[str] = field(default_factory=list)
    expected: _Tally = field(default_factory=_Tally)
    stale: _Tally = field(default_factory=_Tally)
    tools: list[Any] | None = None
    messages: Any = None
    models: set[str] = field(default_factory=set)
    tasks: set[str] = field(default_factory=set)


class Drafter:
    """Collects rows (:meth:`add`) and builds the drafts (:meth:`drafts`)."""

    def __init__(self, row_filter: RowFilter | None = None) -> None:
        self.filter = row_filter or RowFilter()
        self.groups: dict[tuple[str, str], _Group] = {}
        self.unused: Counter[str] = Counter()
        self.used = 0

    def add(self, row: Mapping[str, Any]) -> UnusedReason | None:
        """Take one row; the reason it made no draft (counted here), or None. Raises
        :class:`DraftRowError` for a row of the wrong shape (not counted here)."""
        reason = self._add(row)
        if reason is not None:
            self.unused[reason] += 1
        else:
            self.used += 1
        return reason

    def _add(self, row: Mapping[str, Any]) -> UnusedReason | None:
        kind = row_kind(row)
        if kind is None:
            return "not_a_candidate"
        if not self.filter.admits(row, kind):
            return "filtered"
        calls = _observed(row, kind)
        if not calls:
            return "no_call"
        if len(calls) > 1:
            return "several_calls"
        usable = call_from_value(calls[0]) if isinstance(calls[0], Mapping) else None
        if usable is None:
            return "unusable_call"
        call = {"name": usable.name, "arguments": usable.arguments}
        tools_key, prompt_key = _hashes(row, kind)
        group = self.groups.get((tools_key, prompt_key))
        if group is None:
            group = self.groups[(tools_key, prompt_key)] = _Group(tools_key, prompt_key)
        group.rows.append(row_id_of(row))
        canonical = canonical_json(call)
        (group.stale if _is_stale(row) else group.expected).add(canonical, call)
        tools = row.get("tools")
        if group.tools is None and isinstance(tools, list) and tools:
            group.tools = tools
        if group.messages is None and row.get("messages") is not None:
            group.messages = row["messages"]
        if isinstance(row.get("model"), str):
            group.models.add(row["model"])
        if kind == "failing" and isinstance(row.get("task_id"), str):
            group.tasks.add(row["task_id"])
        return None

    def drafts(self) -> list[dict[str, Any]]:
        """One draft per group that has an expected candidate, in first-seen order."""
        out: list[dict[str, Any]] = []
        for group in self.groups.values():
            candidates = group.expected.ranked()
            if not candidates:
                self.unused["only_stale"] += len(group.rows)
                self.used -= len(group.rows)
                continue
            out.append(_draft(group, candidates))
        return out


def _draft(group: _Group, candidates: list[tuple[str, dict[str, Any], int]]) -> dict[str, Any]:
    canonical, expected, _ = candidates[0]
    stale = next((call for c, call, _ in group.stale.ranked() if c != canonical), None)
    provenance: dict[str, Any] = {
        "rows": group.rows,
        "count": len(group.rows),
        "prompt_hash": group.prompt_hash,
        "tools_hash": group.tools_hash,
        "candidates": [{"call": call, "count": count} for _, call, count in candidates],
        "stale_candidates": [{"call": c, "count": n} for _, c, n in group.stale.ranked()],
        "models": sorted(group.models),
        "tasks": sorted(group.tasks),
    }
    if group.messages is not None:
        provenance["messages"] = group.messages
    metadata: dict[str, Any] = {}
    if stale is not None:
        metadata["stale"] = stale
    metadata["draft"] = provenance
    draft: dict[str, Any] = {
        "id": f"draft.{group.tools_hash[:8]}.{group.prompt_hash[:8]}",
        "status": DRAFT_STATUS,
        "expected": expected,
    }
    if group.tools is not None:
        draft["tools"] = group.tools
    draft["metadata"] = metadata
    return draft


@dataclass(frozen=True, slots=True)
class Label:
    """The latest ``kind: "label"`` row for one draft."""

    verdict: str
    expected: list[Any] | None
    row: Mapping[str, Any]


def label_of(row: Mapping[str, Any]) -> tuple[str, datetime, Label] | None:
    """A label row's draft id, time and label; None for a row that labels no draft (a row
    label, or another kind). Raises :class:`DraftRowError` for a label of the wrong shape."""
    if row.get("kind") != "label" or row.get("draft") is None:
        return None
    draft = row.get("draft")
    if not isinstance(draft, str) or not draft:
        raise DraftRowError("bad_field", "a label's 'draft' must be a task id (or null)")
    verdict = row.get("verdict")
    if verdict not in VERDICTS:
        raise DraftRowError("bad_field", f"a label's 'verdict' is one of {', '.join(VERDICTS)}")
    expected = row.get("expected")
    if verdict == "edit" and not isinstance(expected, list):
        raise DraftRowError("bad_field", "an 'edit' label's 'expected' must be a list of calls")
    at = row.get("at")
    try:
        when = _utc(at) if isinstance(at, str) else None
    except ValueError:
        when = None
    if when is None:
        raise DraftRowError("bad_field", "a label's 'at' must be an ISO 8601 time")
    return draft, when, Label(str(verdict), expected if verdict == "edit" else None, row)


def latest_labels(labels: Iterable[tuple[str, datetime, Label]]) -> dict[str, Label]:
    """The latest label per draft: by ``at``, then by order given (the later wins a tie)."""
    latest: dict[str, tuple[datetime, int, Label]] = {}
    for index, (draft, when, label) in enumerate(labels):
        held = latest.get(draft)
        if held is None or (when, index) >= (held[0], held[1]):
            latest[draft] = (when, index, label)
    return {draft: label for draft, (_, _, label) in latest.items()}


def promote(draft: Mapping[str, Any], label: Label | None, labelled: bool) -> dict[str, Any]:
    """The task ``draft`` becomes: status removed, ``metadata.draft`` kept (with the label's
    verdict, reviewer and row id when there is one); an ``edit`` label's one call becomes
    ``expected``. Raises :class:`DraftRowError` for an edit that is not exactly one call, and
    ``LookupError`` (its :data:`LeftOut` reason as the message) when the draft is left out."""
    if draft.get("status") != DRAFT_STATUS:
        raise LookupError("not_a_draft")
    if labelled and label is None:
        raise LookupError("unlabelled")
    if label is not None and label.verdict == "fail":
        raise LookupError("labelled_fail")
    task = {key: value for key, value in draft.items() if key != "status"}
    metadata = dict(task.get("metadata") or {})
    if label is not None:
        if label.verdict == "edit":
            assert label.expected is not None
            if len(label.expected) != 1:
                raise DraftRowError(
                    "bad_field",
                    f"the 'edit' label of {draft.get('id')!r} gives {len(label.expected)} calls;"
                    " a task expects exactly one",
                )
            task["expected"] = label.expected[0]
            edited, stale = call_from_value(task["expected"]), metadata.get("stale")
            old = call_from_value(stale) if isinstance(stale, Mapping) else None
            if edited is not None and old is not None and edited.canonical == old.canonical:
                del metadata["stale"]  # the reviewer's call: it cannot be the stale one too
        provenance = dict(metadata.get("draft") or {})
        provenance["label"] = {
            "verdict": label.verdict,
            "row_id": label.row.get("row_id"),
            "reviewer": label.row.get("reviewer"),
            "note": label.row.get("note"),
        }
        metadata["draft"] = provenance
    task["metadata"] = metadata
    return task
