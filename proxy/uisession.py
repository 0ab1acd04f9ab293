"""The live page's login session: a signed, expiring cookie, so a browser can open ``/ui`` when
inbound keys (``auth.keys_env``) are set.

A browser cannot send the key header, so the page offers a form (``POST /ui/login``); a valid
key there gets a cookie ``<expiry>.<HMAC-SHA256(key, "gradeproxy-ui|<expiry>")>``: never the key
itself. Any process that knows the keys can check it, so every worker of ``listen.workers``
and a restarted proxy accept it, and removing a key from ``auth.keys_env`` ends its sessions.
The cookie is ``HttpOnly`` and ``SameSite=Strict``, scoped to ``Path=/ui`` (``Secure`` when the
request came over TLS), and it opens only the page's own JSON (``/ui/scoreboard.json``,
``/ui/failures.json``, the review queue's ``/ui/review/items.json`` and its label post): the
API, ``/metrics`` and the workers' ``/ui/worker.json`` still take
only the key header (proxy/pipeline/guard.py).

Holds no state and does no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Final

COOKIE: Final = "gradeproxy_ui"
COOKIE_PATH: Final = "/ui"
MAX_AGE_S: Final = 12 * 3600
# The page's JSON, which a session opens; the page itself and its login form are open to all.
SESSION_PATHS: Final = frozenset(
    {
        "/ui/scoreboard.json",
        "/ui/failures.json",
        "/ui/logout",
        "/ui/review/items.json",  # the review queue (proxy/surfaces/review.py)
        "/ui/review/label",
    }
)
_LABEL: Final = b"gradeproxy-ui|"


class Sessions:
    """Issues and checks the page's session cookie against the configured inbound keys."""

    def __init__(self, keys: tuple[str, ...], clock: Callable[[], float] = time.time) -> None:
        self._keys = tuple(key.encode("utf-8") for key in keys)
        self._clock = clock

    @staticmethod
    def _sign(key: bytes, expiry: str) -> str:
        return hmac.new(key, _LABEL + expiry.encode("ascii"), hashlib.sha256).hexdigest()

    def issue(self, key: str) -> str:
        """A cookie value for ``key`` (which the caller has checked is a configured key)."""
        expiry = str(int(self._clock()) + MAX_AGE_S)
        return f"{expiry}.{self._sign(key.encode('utf-8'), expiry)}"

    def valid(self, value: str | None) -> bool:
        """Whether ``value`` is an unexpired cookie signed with one of the keys; every key is
        tried, so timing says nothing about which."""
        if not value or not self._keys:
            return False
        expiry, _, signature = value.partition(".")
        if not expiry.isascii() or not expiry.isdigit() or int(expiry) <= self._clock():
            return False
        if int(expiry) > self._clock() + MAX_AGE_S:
            return False  # signed for longer than this proxy issues: not one of ours
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(signature.encode(), self._sign(key, expiry).encode())
        return matched
