"""The failure inspector's memory: the most recent failing, stale and enforced answers of this
process (an enforced answer: one an enforce policy blocked, stripped or observed, whatever its
grade; docs/enforce.md).

A bounded ring (``ui.failure_ring_size``; the oldest entry falls out), filled by the grade queue
as it records rows and read by ``/ui/failures.json``. Each entry holds what a person needs to
see why an answer failed without opening a JSONL file: the task's expected call, the call the
grader read, the first path where they differ, and the raw answer split into runs of visible and
invisible characters (seed 003: "repr(output) will show \\n, \\t, and leading spaces").

An entry is kept as a draft and finished when the page reads it (:func:`rendered`): the ring
holds the last ``size`` of what may be thousands of failing answers a minute, and most fall out
unread. Splitting the answer into runs and finding the first differing path were most of what
recording a failing answer cost beyond a passing one (bench/instructions_bench.py's
``record_batch_failing``; docs/performance.md); now only the entries a person looks at pay for
them, once each.

Raw answers are customer content: the ring stays empty unless ``results.answer`` is ``keep``,
it lives only in memory (never logged, gone at restart), and ui.py serves it only on the admin
port or to loopback clients. It never blocks grading: a draft copies at most ``SHOWN_CHARS``.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from collections import deque
from itertools import groupby
from typing import Any

from grader.tasks import Task

# Invisible characters written the way Python's repr() writes them.
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\x0b": "\\v", "\x0c": "\\f"}


def _invisible(char: str) -> bool:
    return not char.isprintable()


@functools.lru_cache(maxsize=1024)  # an invisible answer is mostly a few characters repeated
def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if char == " ":
        return "·"  # a leading or trailing space, which the eye cannot see
    code = ord(char)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else (f"\\U{code:08x}")
    )


SHOWN_CHARS = 4096  # of each answer, in the inspector

# Runs of anything but visible ASCII (spaces included): only these need a closer look, so a
# 64 KB JSON answer costs one regex scan, not a Python step per character.
_SUSPECT = re.compile(r"[^\x21-\x7e]+")


def visible_runs(text: str) -> list[tuple[str, bool]]:
    """``text`` as runs of (shown text, was invisible): newlines, tabs, zero-width and other
    format characters, non-breaking and other odd spaces, and leading/trailing spaces. Hidden
    is what ``str.isprintable`` calls non-printable (Unicode's Other and Separator categories,
    the ASCII space excepted), plus spaces at either edge."""
    lead = len(text) - len(text.lstrip(" "))
    tail_start = len(text.rstrip(" ")) if lead < len(text) else 0
    runs: list[tuple[str, bool]] = []

    def push(shown: str, hidden: bool) -> None:
        if not shown:
            return
        if runs and runs[-1][1] == hidden:
            runs[-1] = (runs[-1][0] + shown, hidden)
        else:
            runs.append((shown, hidden))

    position = 0
    for match in _SUSPECT.finditer(text):
        start, end = match.span()
        if start > position:
            push(text[position:start], False)
        position = end
        # The edge spaces in this run, marked whole (an answer padded with 4,000 spaces is
        # one run, not 4,000 steps); between them, what is left is judged as it stands.
        inner_start = min(end, max(start, lead))
        inner_end = max(inner_start, min(end, tail_start))
        if inner_start > start:
            push("·" * (inner_start - start), True)
        chunk = text[inner_start:inner_end]  # empty when the run is edge spaces only
        if chunk.isprintable():
            push(chunk, False)  # inner spaces, accented letters, CJK: shown as they are
        else:
            for number, line in enumerate(chunk.split("\n")):
                if number:  # a newline, shown, then the line break itself, kept
                    push("\\n", True)
                    runs.append(("\n", False))
                for hidden, chars in groupby(line, key=_invisible) if line else ():
                    push("".join(map(_escape, chars) if hidden else chars), hidden)
        if end > inner_end:
            push("·" * (end - inner_end), True)
    if position < len(text):
        push(text[position:], False)
    return runs


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def first_difference(expected: Any, got: Any, path: str = "") -> str | None:
    """The first path (``arguments.address.city``, ``labels[1]``) where two JSON values differ,
    in the grader's path notation; None when they are equal. Keys are visited sorted."""
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in sorted(set(expected) | set(got)):
            if key not in expected or key not in got:
                return _key_path(path, key)
            found = first_difference(expected[key], got[key], _key_path(path, key))
            if found is not None:
                return found
        return None
    if isinstance(expected, list) and isinstance(got, list):
        for index, (left, right) in enumerate(zip(expected, got, strict=False)):
            found = first_difference(left, right, f"{path}[{index}]")
            if found is not None:
                return found
        return None if len(expected) == len(got) else f"{path}[{min(len(expected), len(got))}]"
    same = type(expected) is type(got) and expected == got
    return None if same else path or "$"


def enforced(row: dict[str, Any]) -> bool:
    """Whether an enforce policy acted on (or observed) the row's answer."""
    enforcement = row.get("enforcement")
    return isinstance(enforcement, dict) and enforcement.get("action") != "pass"


def _call(call: Any) -> dict[str, Any] | None:
    if call is None:
        return None
    return {"name": call.name, "arguments": call.arguments}


_ANSWER = "_answer"  # a draft entry's shown answer, which rendered() splits into runs


def failure_entry(task: Task, row: dict[str, Any], capture_answer: bool) -> dict[str, Any] | None:
    """The inspector's entry for a failing or stale row, as a draft (None when no answer is
    captured): what it copies from the row and the task, and the answer's shown part as text
    (``_answer``). :func:`rendered` finishes it when the page reads it.

    Pure, so the grading process builds it beside the row and the proxy only keeps it.
    """
    if not capture_answer:
        return None
    if row.get("kind") == "episode":
        return episode_entry(task, row)
    if "answer" not in row:
        return None
    answer = str(row["answer"])
    return {
        "request_id": row.get("request_id"),
        "time": row.get("time"),
        "task_id": task.id,
        "mutation_kind": task.mutation_kind,
        "model": row.get("model"),
        "variant": row.get("variant"),
        "choice": row.get("choice"),
        "result": row["result"],
        "reason_code": row.get("reason_code"),
        "reason": row.get("reason"),
        "path": row.get("path"),  # the grader's; rendered() finds it where the grader left none
        "expected": _call(task.expected_call),
        "stale": _call(task.stale),
        "got": row.get("call"),
        # what enforce mode did with the answer (docs/rows.md), None when no policy covered it
        "enforcement": row.get("enforcement"),
        # The inspector shows the first SHOWN_CHARS (the row holds the whole answer): a wall
        # of invisible characters is the slow case (bench/ui_bench.py). Split when read.
        "answer_runs": None,
        "truncated": bool(row.get("truncated")) or len(answer) > SHOWN_CHARS,
        _ANSWER: answer[:SHOWN_CHARS],
    }


def episode_entry(task: Task, row: dict[str, Any]) -> dict[str, Any]:
    """The inspector's entry for a failing episode: it has no single answer to show, so the
    entry names the columns that failed (and why), the turns and calls, and the outcome the
    episode's replay reached. Finished as it is (:func:`rendered` leaves it alone)."""
    return {
        "kind": "episode",
        "request_id": row.get("request_id") or row.get("episode_id"),
        "episode_id": row.get("episode_id"),
        "time": row.get("time"),
        "task_id": task.id,
        "mutation_kind": task.mutation_kind,
        "model": row.get("model"),
        "variant": row.get("variant"),
        "choice": row.get("choice"),
        "result": row["result"],
        "reason_code": next(
            (c.get("reason_code") for c in row.get("columns", []) if c.get("passed") is False),
            None,
        ),
        "turns": row.get("turns"),
        "calls": row.get("calls"),
        "columns": [
            {k: c.get(k) for k in ("name", "passed", "reason", "reason_code")}
            for c in row.get("columns", [])
        ],
        "outcome": row.get("outcome"),
        "replay_problems": row.get("replay_problems") or [],
        "answer_runs": [],
        "truncated": False,
    }


def rendered(entry: dict[str, Any]) -> dict[str, Any]:
    """A draft entry finished as ``/ui/failures.json`` shows it: the answer as runs of visible
    and invisible characters, and the first path where the call differs from the expected one
    when the grader named none. The work is kept in the draft, so an entry is finished once
    however often the page is read; two readers finishing one entry at once write the same
    values, one key at a time, so neither sees a half-finished entry."""
    if entry.get("kind") == "episode":
        return entry
    if entry["answer_runs"] is None:
        expected, got = entry["expected"], entry["got"]
        if entry["path"] is None and expected is not None and isinstance(got, dict):
            entry["path"] = first_difference(expected, got)
        entry["answer_runs"] = visible_runs(entry[_ANSWER])
    return {name: value for name, value in entry.items() if name != _ANSWER}


class FailureRing:
    """The last ``size`` failing or stale answers; ``size`` 0 keeps nothing."""

    def __init__(self, size: int, capture_answer: bool) -> None:
        self.size = size
        self.capture_answer = capture_answer
        self._entries: deque[dict[str, Any]] = deque(maxlen=max(size, 1))
        self.seen = 0  # failing or stale answers offered, kept or not
        self.process = {"pid": os.getpid(), "host": socket.gethostname()}

    def add(self, task: Task, row: dict[str, Any]) -> None:
        """Keep ``row`` when it failed, was stale or was enforced (and answers are captured)."""
        if row.get("result") not in ("fail", "stale") and not enforced(row):
            return
        entry = failure_entry(task, row, self.capture_answer)
        self.extend([] if entry is None else [entry], 1)

    def extend(self, entries: list[dict[str, Any]], seen: int) -> None:
        """Keep entries built where the rows were graded (:func:`failure_entry`); ``seen``
        counts the failing or stale rows they came from, kept or not."""
        self.seen += seen
        if self.size and self.capture_answer:
            self._entries.extend(entries)

    def snapshot(self) -> dict[str, Any]:
        """What ``/ui/failures.json`` returns: newest first, with the process it comes from.

        Entries not read before are finished here (:func:`rendered`): up to ``size`` answers
        of ``SHOWN_CHARS`` each, which is why the page calls this in a thread."""
        entries = self._entries.copy()  # one C call: the writer thread may append meanwhile
        return {
            "process": self.process,
            "capacity": self.size,
            "capture_answer": self.capture_answer,
            "seen": self.seen,
            "failures": [rendered(e) for e in reversed(entries)] if self.size else [],
        }
