"""Regular expressions from tasks and requests, matched in time linear in the input.

A client's own tool schema (``json_schema`` with ``"schema": "from_request"``), a task sent to
the scoring API and a ``policy`` constraint can all carry a pattern. Python's ``re``
backtracks: ``^(a+)+$`` against 27 characters held the event loop (and, in a worker thread,
the GIL) for seconds. Every such pattern is compiled by RE2 instead, whose matching time is
linear in the input and whose compiled size is bounded by ``MAX_MEMORY``. A pattern RE2 cannot
run in bounded time (a backreference, a lookaround) or that is too large is refused with
:class:`PatternError`: a definition error for a task, an ``error`` column for a request's
schema, never a stall.

Never use ``re`` on a pattern that came from outside the project.
"""

from __future__ import annotations

import functools
from typing import Final

import re2

from grader.errors import GraderError

MAX_MEMORY: Final = 8 * 1024 * 1024  # bytes RE2 may use for one compiled pattern
MAX_PATTERN: Final = 4096  # characters; longer patterns are refused before compiling
_CACHE: Final = 1024  # request schemas repeat the same patterns


class PatternError(GraderError, ValueError):
    """A pattern that cannot be matched in bounded time (or is not a pattern at all)."""


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # an invalid pattern is our error to report, not stderr noise
    return options


_OPTIONS: Final = _options()


@functools.lru_cache(maxsize=_CACHE)
def compile_pattern(pattern: str) -> re2._Regexp[str]:
    """The compiled pattern; raise :class:`PatternError` when RE2 cannot bound it."""
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"pattern is longer than {MAX_PATTERN} characters")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        message = exc.args[0] if exc.args else exc
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        raise PatternError(
            f"pattern {pattern[:80]!r} is refused (only linear-time RE2 patterns run): {message}"
        ) from None


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (JSON Schema's ``pattern`` semantics)."""
    return compile_pattern(pattern).search(text) is not None


def glob_match(pattern: str, name: str) -> bool:
    """Whether ``name`` matches the glob ``pattern`` as a whole: ``*`` any run of characters
    (the empty run too), ``?`` exactly one; every other character is itself (``[`` included).

    For tool names in forbidden-call lists (``delete_*``). Matched by the greedy two-pointer
    walk, in time O(len(pattern) * len(name)) at worst, never by translating to ``re``: a
    pattern from a task or a policy file must not be able to stall the event loop. A name
    without ``*`` or ``?`` matches only itself, so plain names keep their exact meaning
    (OpenAI's tool names never hold either character).
    """
    p = n = 0
    star = -1  # the pattern index just after the last ``*`` seen
    mark = 0  # the name index that ``*`` was last tried to stretch to
    while n < len(name):
        if p < len(pattern) and pattern[p] == "*":
            star, mark = p + 1, n
            p += 1
        elif p < len(pattern) and (pattern[p] == "?" or pattern[p] == name[n]):
            p += 1
            n += 1
        elif star >= 0:
            mark += 1  # let the last ``*`` take one more character, and retry after it
            p, n = star, mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` holds a wildcard (else it names exactly one tool)."""
    return "*" in pattern or "?" in pattern
