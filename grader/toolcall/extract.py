"""Find the graded tool call inside a raw answer.

The answer is free text: prose, Markdown fences, echoed schemas, wire-format envelopes. The
scanner finds balanced ``{...}`` and ``[...]`` spans in one left-to-right pass, tracking JSON
strings only inside spans (prose quotes are not strings). Only *top-level* ``{...}`` spans are
parsed: a span enclosed by any matched pair is not a call, so a bare array of calls is not one.

An opener that never closes is prose and must not hide a call after it. When the scan meets
evidence that it misread a string (a raw control character inside one, or the end of the text
inside one), the bottom unclosed opener is declared prose and the text after it is scanned
again. Re-scans are paid from a budget of a few passes over the text, after which the scan
finishes without them, so the work is linear in the answer's length whatever its shape
(50 000 unclosed braces, deep nesting, huge strings).

Candidates are read from the parsed spans in order of appearance; the last usable one wins and
an unusable later object never hides an earlier usable one (GRADING-DECISIONS.md).
"""

from __future__ import annotations

import contextlib
import re
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grader.json import (
    MAX_DEPTH,
    SEARCH_WINDOW,
    JSONError,
    JSONTooDeepError,
    loads_exact,
    value_depth,
)
from grader.toolcall.canon import Canon, CObject, TooDeepError, canon
from grader.values import value_type

_PROSE = re.compile(r"[{\[]")
# Inside a span: skip everything up to the next bracket in one match, whole JSON strings
# included (a span then costs one step per bracket run, not one per string) ...
_SKIP = re.compile(r'(?:[^{}\[\]"]+|"(?:[^"\\\x00-\x1f]|\\.)*")*', re.DOTALL)
# ... then take a run of one opener, a run of one closer, or a quote that starts no valid
# JSON string (unterminated, or a raw control character inside).
_TOKEN = re.compile(r'(\{+|\[+)|(\}+|\]+)|(")')
_OPENER_OF = {"}": "{", "]": "["}
# Characters the scanner may visit in all, as passes over the answer (plus a floor).
_SCAN_BUDGET_PASSES = 2
_SCAN_BUDGET_FLOOR = 65536  # short answers may re-scan freely: it costs microseconds
_TOO_DEEP = MAX_DEPTH + 1  # depths are capped here: anything deeper is simply "too deep"


@value_type
class Call:
    """A usable tool call: its name as written and its canonical arguments."""

    name: str
    arguments: Any  # plain JSON object, as parsed
    canonical: CObject  # {"arguments": ..., "name": ...} after normalisation


@value_type
class Extraction:
    """What the scanner found: the winning call, and whether depth made anything unusable."""

    call: Call | None
    too_deep: bool


_NOTHING = Extraction(None, too_deep=False)  # immutable: the one result of most prose


def _next_opener(text: str, pos: int) -> re.Match[str] | None:
    """The next ``{`` or ``[`` at or after ``pos``, searched a window at a time (see
    ``grader.json.SEARCH_WINDOW``: one long C-level search would hold the GIL)."""
    n = len(text)
    while pos < n:
        m = _PROSE.search(text, pos, pos + SEARCH_WINDOW)
        if m is not None:
            return m
        pos += SEARCH_WINDOW
    return None


@dataclass(slots=True)
class _ScanState:
    """The scan's matched pairs so far and the characters it may still visit (re-scans)."""

    pairs: list[tuple[int, int, str, int]]  # (open, close, opener, depth), outermost of a run
    budget: int


def _scan_from(text: str, start: int, state: _ScanState) -> int | None:
    """Scan ``text[start:]``, recording matched pairs; return where to re-scan from, or None.

    Returning ``r`` means the scan found an unclosed opener whose region it read strings in,
    so that opener was prose and the strings may have been misread: pairs from that opener on
    were discarded and the caller re-scans at ``r``, just after it.
    """
    strict = state.budget >= len(text) - start  # only a pass it can pay for in full
    n = len(text)
    pairs = state.pairs
    opens: list[int] = []  # positions of unclosed openers, bottom first
    kinds: list[str] = []
    depths: list[int] = []  # nesting depth seen so far inside each unclosed opener (capped)
    first_string = n  # where the first string opened since the bottom opener was pushed
    pos = start
    while pos < n:
        if not opens:
            m = _next_opener(text, pos)
            if m is None:
                break
            first_string = n
            opens.append(m.start())
            kinds.append(m.group())
            depths.append(1)
            pos = m.end()
            continue
        skipped = _SKIP.match(text, pos)
        assert skipped is not None  # the pattern also matches the empty string
        if first_string == n and text.find('"', pos, skipped.end()) >= 0:
            first_string = pos  # at or before the first string: re-scans stay correct
        m = _TOKEN.match(text, skipped.end())
        if m is None:
            break  # the end of the text
        pos = m.end()
        run_open, run_close, _bad_quote = m.groups()
        if run_open is not None:
            count = len(run_open)
            opens.extend(range(m.start(), pos))
            kinds.extend(run_open[0] * count)
            depths.extend([1] * count)
        elif run_close is not None:
            _close_run(run_close, m.start(), opens, kinds, depths, pairs)
        elif strict:  # a quote that opens no JSON string: the strings here were misread
            first_string = min(first_string, m.start())
            break
        # else: out of budget, the stray quote is prose
    state.budget -= pos - start
    if opens and first_string < n and strict and _may_hold_call(text, opens[0] + 1):
        # Openers pushed before the first string was read are unclosed whatever the strings
        # say, so re-scanning just after the last of them gives the same result faster.
        keep = bisect_left(opens, first_string) - 1
        restart_after = opens[max(keep, 0)]
        del pairs[bisect_left(pairs, (restart_after,)) :]
        return restart_after + 1
    return None


def _close_run(
    run: str,
    at: int,
    opens: list[int],
    kinds: list[str],
    depths: list[int],
    pairs: list[tuple[int, int, str, int]],
) -> None:
    """Match a run of identical closers (starting at ``at``) against the unclosed openers."""
    want = _OPENER_OF[run[0]]
    done = 0
    while done < len(run) and opens:
        if kinds[-1] != want:
            if want not in kinds:
                return  # no opener of this kind is open: the rest of the run is prose
            # Close back to the matching opener; the ones between never closed (prose).
            while kinds[-1] != want:
                opens.pop()
                kinds.pop()
                depths.pop()
        # Nested openers of the right kind close together; only the outermost of them can
        # be top-level, so only it is recorded.
        limit = min(len(run) - done, len(kinds))
        count = 1
        while count < limit and kinds[-1 - count] == want:
            count += 1
        if count > _TOO_DEEP:
            depth = _TOO_DEEP
        else:
            depth = 0
            for inner in reversed(depths[-count:]):
                depth = max(inner, depth + 1)
        pairs.append((opens[-count], at + done + count - 1, want, min(depth, _TOO_DEEP)))
        del opens[-count:], kinds[-count:], depths[-count:]
        if depths:
            depths[-1] = min(max(depths[-1], depth + 1), _TOO_DEEP)
        done += count


def top_level_object_spans(text: str) -> tuple[list[tuple[int, int]], bool]:
    """Top-level ``{...}`` spans as ``(start, end_exclusive)`` and whether any was too deep."""
    state = _ScanState(pairs=[], budget=_SCAN_BUDGET_PASSES * len(text) + _SCAN_BUDGET_FLOOR)
    restart: int | None = 0
    while restart is not None:
        restart = _scan_from(text, restart, state)
    spans: list[tuple[int, int]] = []
    too_deep = False
    reach = -1
    for start, end, kind, depth in sorted(state.pairs):
        if start <= reach:
            continue  # enclosed by a matched pair
        reach = end
        if kind != "{":
            continue
        if depth > MAX_DEPTH:
            too_deep = True
            continue
        spans.append((start, end + 1))
    return spans, too_deep


def candidates_of(obj: dict[str, Any]) -> list[Any]:
    """Candidate calls of one top-level object, in order (grading.md failure mode 3). A list,
    not a generator: callers read it backwards, and nearly every object (a task's expected
    call, a parallel entry) is one bare call, its own one candidate."""
    tool_calls = obj.get("tool_calls")
    if isinstance(tool_calls, list):
        found = []
        for element in tool_calls:
            if isinstance(element, dict):
                function = element.get("function")
                found.append(function if isinstance(function, dict) else element)
        return found
    function = obj.get("function")
    if isinstance(function, dict):
        return [function]
    return [obj] if "name" in obj else []


class _UnusableError(Exception):
    def __init__(self, too_deep: bool = False) -> None:
        self.too_deep = too_deep


def usable_call(candidate: Any) -> Call:
    """Validate one candidate; raise ``_UnusableError`` when it cannot be graded as a call."""
    if not isinstance(candidate, dict):
        raise _UnusableError
    name = candidate.get("name")
    if not isinstance(name, str):
        raise _UnusableError
    arguments = candidate.get("arguments")
    if arguments is None or arguments == "":
        arguments = {}
    elif isinstance(arguments, str):
        try:
            arguments = loads_exact(arguments)
        except JSONTooDeepError:
            raise _UnusableError(True) from None
        except JSONError:
            raise _UnusableError from None
    if not isinstance(arguments, dict):
        raise _UnusableError
    try:
        canonical_args: Canon = canon(arguments, depth=2)  # the call object and its arguments
    except TooDeepError:
        raise _UnusableError(True) from None
    return Call(name, arguments, CObject((("arguments", canonical_args), ("name", name))))


def call_from_value(value: Any) -> Call | None:
    """The usable call a parsed JSON value carries (last usable candidate), if any."""
    if not isinstance(value, dict):
        return None
    for candidate in reversed(candidates_of(value)):
        try:
            return usable_call(candidate)
        except _UnusableError:
            continue
    return None


def _may_hold_call(text: str, start: int = 0) -> bool:
    """Whether ``text[start:]`` can hold a usable candidate at all.

    Every usable candidate has a ``name`` key, spelt ``"name"`` unless written with ``\\u``
    escapes, so without either no scan (or re-scan) can change the result.
    """
    return text.find('"name"', start) >= 0 or text.find("\\u", start) >= 0


class _Unparsed:
    """The type of :data:`UNPARSED`."""


# ``parsed`` not given: the answer is read from its text.
UNPARSED: Any = _Unparsed()


def extract(answer: str, parsed: Any = UNPARSED) -> Extraction:
    """Find the graded call in a raw answer string.

    ``parsed`` is for a caller that wrote ``answer`` from a JSON value with
    :func:`grader.json.dumps` (the proxy, from a response's tool calls): that value, which is
    what reading the text would give (``loads_exact(dumps(v)) == v``), so the text is not read
    again. Everything else about the answer is decided from its text, as without it.
    """
    if not _may_hold_call(answer):
        return _NOTHING
    stripped = answer.strip()
    if stripped.startswith("{") and stripped.endswith("}"):
        # Fast path: a whole-JSON answer is exactly one top-level span.
        value = parsed
        if value is UNPARSED:
            with contextlib.suppress(JSONError):
                value = loads_exact(stripped)
        if value is not UNPARSED:  # else not JSON after all: scanned for spans below
            if stripped.count("{") + stripped.count("[") <= MAX_DEPTH or (
                value_depth(value) <= MAX_DEPTH
            ):
                return _pick(iter([value]), too_deep=False)
            return Extraction(None, too_deep=True)
    spans, too_deep = top_level_object_spans(answer)
    return _pick(_parsed(answer, spans), too_deep)


def _parsed(answer: str, spans: list[tuple[int, int]]) -> Iterator[Any]:
    for start, end in spans:
        try:
            yield loads_exact(answer[start:end])
        except JSONError:
            continue


def _pick(values: Iterator[Any], too_deep: bool) -> Extraction:
    candidates = [c for value in values if isinstance(value, dict) for c in candidates_of(value)]
    for candidate in reversed(candidates):
        try:
            return Extraction(usable_call(candidate), too_deep)
        except _UnusableError as unusable:
            too_deep = too_deep or unusable.too_deep
    return Extraction(None, too_deep) if too_deep else _NOTHING
