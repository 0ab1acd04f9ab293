"""A regular expression compiled on its first use, not when its module is imported.

Python compiles a pattern in Python code (``re._parser``, ``re._compiler``): tens of
microseconds to a millisecond each. Patterns only some inputs reach (a judge's model names, a
malformed JSON line's description, a path below a top-level argument) are held in a
:class:`LazyPattern`, so a command that never reaches them does not pay for them at start-up.
"""

from __future__ import annotations

import re
from typing import AnyStr, Generic


class LazyPattern(Generic[AnyStr]):
    """``re.compile(pattern, flags)``, done by the first call and kept: ``P().search(text)``."""

    __slots__ = ("_compiled", "_flags", "_pattern")

    def __init__(self, pattern: AnyStr, flags: int = 0) -> None:
        self._pattern: AnyStr = pattern
        self._flags = flags
        self._compiled: re.Pattern[AnyStr] | None = None

    @property
    def compiled(self) -> bool:
        """Whether the pattern has been compiled (used) yet."""
        return self._compiled is not None

    def __call__(self) -> re.Pattern[AnyStr]:
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(self._pattern, self._flags)
        return compiled
