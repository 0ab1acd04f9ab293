"""An episode row's ``usage``: the sum of its turns' usage, kept per process until its last turn.

The proxy keeps no episode history (proxy/pipeline/episodes.py: the last request carries it),
but a chat history carries no token counts: each turn's usage is in its own response only. So
the grade queue's settler adds each graded turn's reported usage to its episode here, on the
event loop, keyed by the ``X-Grade-Episode`` id, and the episode's row takes the sum when its
last turn is settled (:meth:`EpisodeUsage.take`). A count no turn reported stays ``None``, as on
an answer row; a turn that reported none adds nothing.

Per process and bounded: turns served by another worker or replica are not in the sum, nor
turns whose grading finished after the last turn's; an episode without the header has no id
across requests, so its row's usage is its last turn's. At most :data:`MAX_EPISODES` episodes
are summed at once (the oldest is forgotten first). Does no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Final

__all__ = ["MAX_EPISODES", "EpisodeUsage", "Usage"]

MAX_EPISODES: Final = 10_000
Usage = dict[str, int | None]  # the row's usage shape (grader/usage.py)


def _add(total: Usage, more: Mapping[str, int | None]) -> Usage:
    out: Usage = dict(total)
    for key, value in more.items():
        if value is not None:
            out[key] = (out.get(key) or 0) + value
        else:
            out.setdefault(key, None)
    return out


class EpisodeUsage:
    """Running usage sums of the episodes whose turns are being graded (event loop only)."""

    def __init__(self, max_episodes: int = MAX_EPISODES) -> None:
        self.max_episodes = max_episodes
        self._sums: OrderedDict[str, Usage] = OrderedDict()

    def add(self, episode_id: str, usage: Mapping[str, int | None] | None) -> None:
        """One turn's usage (None: it reported none)."""
        if usage is None:
            return
        current = self._sums.pop(episode_id, None)
        self._sums[episode_id] = dict(usage) if current is None else _add(current, usage)
        while len(self._sums) > self.max_episodes:
            self._sums.popitem(last=False)

    def take(self, episode_id: str) -> Usage | None:
        """The episode's sum so far, forgotten (its row is being written); None: no turn of it
        reported usage here."""
        return self._sums.pop(episode_id, None)

    def __len__(self) -> int:
        return len(self._sums)
