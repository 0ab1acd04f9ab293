"""Per-key request and token limits (``auth.keys[].rpm``, ``auth.keys[].tpm``), per process.

Each limited key has a sliding one-minute window: the times of the requests it let through, and
the tokens its responses reported (with when). The guard asks :meth:`KeyLimits.admit` before a
request's body is read: a key whose window already holds ``rpm`` requests, or whose responses
already reported ``tpm`` tokens, is refused (429, with ``Retry-After`` the seconds until the
window has room again). Tokens are known only once a response ends, so the budget is checked
before a request and spent after it: the request that crosses ``tpm`` is served, the next one is
refused. Admission is one synchronous step on the event loop (no await between the count and
the append), so concurrent requests can never let more than ``rpm`` through in any minute.

Per process: with ``listen.workers: N`` each worker keeps its own windows (N times the limit in
all); no state is shared or persisted, and a restart starts empty windows. Does no I/O.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, Literal

__all__ = ["WINDOW_S", "KeyLimits", "Limit", "Limiters", "Refusal"]

WINDOW_S: Final = 60.0
Limit = Literal["rpm", "tpm"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused, and when the window has room again (whole seconds, >= 1)."""

    limit: Limit
    retry_after_s: int


class KeyLimits:
    """One key's windows. Only the event loop calls it (no lock)."""

    __slots__ = ("_clock", "_requests", "_spent", "_tokens", "rpm", "tpm")

    def __init__(
        self, rpm: int | None, tpm: int | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rpm = rpm
        self.tpm = tpm
        self._clock = clock
        self._requests: deque[float] = deque()
        self._tokens: deque[tuple[float, int]] = deque()
        self._spent = 0  # the sum of the tokens in the window

    def _expire(self, now: float) -> None:
        start = now - WINDOW_S
        requests, tokens = self._requests, self._tokens
        while requests and requests[0] <= start:
            requests.popleft()
        while tokens and tokens[0][0] <= start:
            self._spent -= tokens.popleft()[1]

    def admit(self) -> Refusal | None:
        """Let one request through (counted) or say why not (not counted)."""
        now = self._clock()
        self._expire(now)
        if self.tpm is not None and self._spent >= self.tpm:
            return Refusal("tpm", self._tokens_free_in(now))
        if self.rpm is not None:
            if len(self._requests) >= self.rpm:
                return Refusal("rpm", _whole(self._requests[-self.rpm] + WINDOW_S - now))
            self._requests.append(now)
        return None

    def _tokens_free_in(self, now: float) -> int:
        """Seconds until enough spends leave the window for the sum to be under ``tpm``."""
        assert self.tpm is not None
        left = self._spent
        for at, tokens in self._tokens:
            left -= tokens
            if left < self.tpm:
                return _whole(at + WINDOW_S - now)
        return 1  # pragma: no cover - the window's sum is its entries'

    def spend(self, tokens: int) -> None:
        """A response of this key reported ``tokens`` (input plus output)."""
        if self.tpm is None or tokens <= 0:
            return
        now = self._clock()
        self._expire(now)
        self._tokens.append((now, tokens))
        self._spent += tokens

    @property
    def spent(self) -> int:
        """Tokens in the window now."""
        self._expire(self._clock())
        return self._spent


def _whole(seconds: float) -> int:
    return max(1, math.ceil(seconds))


class Limiters:
    """The windows of every limited key, by id; a reload keeps the windows of the ids that
    stay (with their new limits), so a SIGHUP never resets a key's minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_id: dict[str, KeyLimits] = {}

    def configure(self, keys: Iterable[tuple[str, int | None, int | None]]) -> None:
        """(id, rpm, tpm) of every named key; keys with neither limit have no window."""
        kept: dict[str, KeyLimits] = {}
        for key_id, rpm, tpm in keys:
            if rpm is None and tpm is None:
                continue
            limits = self._by_id.get(key_id) or KeyLimits(rpm, tpm, self._clock)
            limits.rpm, limits.tpm = rpm, tpm
            kept[key_id] = limits
        self._by_id = kept

    def get(self, key_id: str | None) -> KeyLimits | None:
        return None if key_id is None else self._by_id.get(key_id)
