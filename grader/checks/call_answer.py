"""One call from the answer, parsed once, with its canonical forms cached per string mode.

Kept apart from :mod:`grader.checks.call_match` (the expected side, compiled once per check)
because an :class:`AnswerCall` is built for every call of every answer: it holds nothing but
the parsed call and caches made only when a comparison needs them, so matching it against
many expected calls canonicalises each value once.
"""

from __future__ import annotations

from typing import Any

from grader.checks.call_rules import StringMode, canon_in
from grader.toolcall.canon import Canon, TooDeepError

UNCOMPARABLE = object()  # a value canon cannot read (too deep, not JSON): it matches nothing


def leaf_in(value: Any, mode: StringMode) -> Any:
    """``canon_in``, with :data:`UNCOMPARABLE` for a value that cannot be compared."""
    try:
        return canon_in(value, mode)
    except (TooDeepError, TypeError):
        return UNCOMPARABLE


class AnswerCall:
    """One call from the answer, parsed once; canonical forms cached per string mode (the whole
    arguments, and every top-level argument at once), so matching it against many expected
    calls canonicalises each value once. A plain slotted class: one is built per answer call,
    and its caches are made only when a comparison needs them."""

    __slots__ = ("_canon", "_leaves", "arguments", "fits", "name", "shallow")

    def __init__(
        self,
        name: str | None,
        arguments: dict[str, Any] | None,
        shallow: bool | None = None,
    ) -> None:
        """``shallow``: nesting within extract's bound, None while not yet known."""
        self.name = name
        self.arguments = arguments
        self.shallow = shallow
        self._canon: dict[StringMode, Canon | None] | None = None
        self._leaves: dict[StringMode, dict[str, Any]] | None = None
        # Its yes/no against each expected call it was matched with (call_sets.max_matching's
        # memo for this column): a remembered call, met again in a later answer to the same
        # task, is not matched again. Made here, before the call can be shared; each entry is
        # one dict item, set whole (answers graded in threads may share the call).
        self.fits: dict[Any, bool] = {}

    def leaves(self, mode: StringMode) -> dict[str, Any]:
        """Each top-level argument's canonical value under ``mode`` (cached);
        :data:`UNCOMPARABLE` for one that cannot be compared."""
        cache = self._leaves
        if cache is not None:
            found = cache.get(mode)
            if found is not None:
                return found
        else:
            cache = self._leaves = {}
        assert self.arguments is not None
        found = {}
        for key, value in self.arguments.items():
            try:
                found[key] = canon_in(value, mode)
            except (TooDeepError, TypeError):
                found[key] = UNCOMPARABLE
        cache[mode] = found  # kept whole: answers graded in threads may share the call
        return found

    def cached_leaves(self, mode: StringMode | None) -> dict[str, Any] | None:
        """:meth:`leaves` if already computed (a one-off walk canonicalises only what it
        reaches: the first difference usually comes before the last argument)."""
        return None if mode is None or self._leaves is None else self._leaves.get(mode)

    def leaf(self, key: str, mode: StringMode) -> Any:
        """The canonical value of top-level argument ``key`` under ``mode`` (see :meth:`leaves`)."""
        return self.leaves(mode)[key]

    def canonical(self, mode: StringMode) -> Canon | None:
        """The arguments' canonical value under ``mode``; None when they cannot be compared."""
        cache = self._canon
        if cache is None:
            cache = self._canon = {}
        if mode not in cache:
            try:
                cache[mode] = canon_in(self.arguments, mode)
            except (TooDeepError, TypeError):
                cache[mode] = None
        return cache[mode]
